"""The C paths built with AddressSanitizer and UndefinedBehaviorSanitizer, and a fuzz target
run against that build: `python -m tests.fuzz.sanitizers [TARGET] [libFuzzer flags and corpus
directories]`, TARGET one of SANITIZED (fetch_json, the default, for
gateway/formats/_fetchjson.c; json_produce_native for gateway/formats/_producejson.c;
batch_check_native for gateway/formats/_batchcheck.c; http2_frames for gateway/http/_h2session.c,
linked with the system libnghttp2 as LINK says).

CPython itself is not instrumented, so the ASan runtime is preloaded, the interpreter's
allocator is plain malloc (every buffer is then ASan's to check) and leak checking is off.
Nor are the libraries an extension links with (libnghttp2): ASan checks what the extension
does with their memory, not their own accesses.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SANITIZED = {  # target: C path
    "batch_check_native": "_batchcheck",
    "fetch_json": "_fetchjson",
    "http2_frames": "_h2session",
    "json_produce_native": "_producejson",
    "share_json": "_fetchjson",
}
PACKAGE = {  # C path: the package its extension module lives in
    "_batchcheck": "gateway.formats",
    "_fetchjson": "gateway.formats",
    "_producejson": "gateway.formats",
    "_h2session": "gateway.http",
    "_scan": "engine",
}
LINK = {  # C path: what it links with (setup.py's libraries), after its source on the command line
    "_h2session": ["-lnghttp2"],
}
FLAGS = [
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",
    "-fno-omit-frame-pointer",
    # The portable CRC-32C of engine/_crc32c.h (what machines without SSE4.2 run), which this build
    # then checks against the Python path too.
    "-DPORTABLE_CRC32C",
]


# Plugins the C paths' test files use none of: not loaded in the sanitized run, where every
# import costs twice as much (plain malloc under ASan), schemathesis's alone about 2 s.
UNUSED_PLUGINS = ("schemathesis", "locust", "xdist", "xdist.looponfail", "anyio", "aiohttp")


class Unavailable(Exception):
    """No C compiler with the sanitizer runtimes here."""


def runtime(compiler: str) -> str:
    """The ASan runtime the compiler links against, to preload."""
    found = subprocess.run(
        [compiler, "-print-file-name=libasan.so"], capture_output=True, text=True, check=True
    ).stdout.strip()
    if not os.path.isabs(found):
        raise Unavailable(f"{compiler} has no libasan.so")
    return found


def build(out_dir: Path, extension: str = "_fetchjson") -> tuple[Path, dict[str, str]]:
    """The sanitized extension (its package's EXTENSION.c), and the environment a Python process
    loading it needs."""
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None:
        raise Unavailable("no C compiler (cc)")
    native = out_dir / f"{extension}{sysconfig.get_config_var('EXT_SUFFIX')}"
    source = REPO.joinpath(*PACKAGE[extension].split("."), f"{extension}.c")
    include = sysconfig.get_paths()["include"]
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-g", "-O1", *FLAGS, f"-I{include}", str(source),
         *LINK.get(extension, []), "-o", str(native)],
        check=True,
    )  # fmt: skip
    env = {
        **os.environ,
        "LD_PRELOAD": runtime(compiler),
        "PYTHONMALLOC": "malloc",
        "ASAN_OPTIONS": "detect_leaks=0:allocator_may_return_null=1",
        "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
    }
    return native, env


def run_tests(test_file: str, extension: str, out_dir: Path) -> subprocess.CompletedProcess[str]:
    """`test_file`'s tests but `test_under_sanitizers`, in a process whose EXTENSION module
    is the sanitized build (raises Unavailable when none can be built)."""
    native, env = build(out_dir, extension)
    run = (
        "import sys; from tests.fuzz.sanitizers import load_native; load_native(sys.argv[1]); "
        f"assert sys.modules['{PACKAGE[extension]}.{extension}'].__file__ == sys.argv[1]; "
        "import pytest; sys.exit(pytest.main(sys.argv[2:]))"
    )
    # -s: pytest must not hold the process's stderr, or a sanitizer's report dies with it.
    tests = [test_file, "-k", "not test_under_sanitizers", "-q", "-s", "-p", "no:cacheprovider"]
    for plugin in UNUSED_PLUGINS:
        tests += ["-p", f"no:{plugin}"]
    return subprocess.run(
        [sys.executable, "-c", run, str(native), *tests],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )


def check_tests(test_file: str, extension: str, out_dir: Path) -> None:
    """A C path's `test_under_sanitizers`: `run_tests` must pass (skipped where no sanitized
    build can be made), else the failure shows the end of what it printed."""
    import pytest

    try:
        done = run_tests(test_file, extension, out_dir)
    except Unavailable as exc:
        pytest.skip(str(exc))
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-6000:]


def load_native(path: str) -> None:
    """Make `import PACKAGE.NAME` load the extension built at `path` (named NAME.<suffix>).
    Before anything imports the installed one: a module that did (gateway.http.h2_session binds
    gateway.http._h2session's Session on import) would keep it."""
    extension = Path(path).name.split(".")[0]
    name = f"{PACKAGE[extension]}.{extension}"
    assert name not in sys.modules, f"{name} was imported before its sanitized build"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module


def main(flags: list[str]) -> int:
    target = flags.pop(0) if flags[:1] and flags[0] in SANITIZED else "fetch_json"
    with tempfile.TemporaryDirectory() as tmp:
        native, env = build(Path(tmp), SANITIZED[target])
        command = [sys.executable, "-m", "tests.fuzz.runner", target, "--native", str(native)]
        # Blind (no coverage): keep the seeds, which libFuzzer would otherwise drop.
        command.append("-keep_seed=1")
        return subprocess.run([*command, *flags], cwd=REPO, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
