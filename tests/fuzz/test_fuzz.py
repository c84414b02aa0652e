"""Each fuzz target under atheris for --fuzz-seconds, from its seeds and the inputs found
before; a crash fails with the input and the fuzzer's traceback. The targets of C paths (the
fetch, produce and batch check paths, the HTTP/2 session) also run built with ASan and UBSan."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fuzz import sanitizers
from tests.fuzz.regressions import REGRESSIONS
from tests.fuzz.runner import TARGETS

REPO = Path(__file__).resolve().parents[2]
REPORT_CHARS = 8000


def corpus(target: str, directory: Path) -> Path:
    """The target's seeds and the fixed inputs found before, one file each."""
    directory.mkdir()
    inputs = [*importlib.import_module(f"tests.fuzz.{target}").seeds()]
    inputs += [data for name, _, data, issue in REGRESSIONS if name == target and issue is None]
    for index, data in enumerate(inputs):
        (directory / f"seed-{index:03}").write_bytes(data)
    return directory


def fuzz(
    target: str,
    work: Path,
    seconds: int,
    seed: str,
    native: Path | None = None,
    env: dict[str, str] | None = None,
) -> None:
    """Run the target; fail with the crashing inputs and the fuzzer's report if it finds any."""
    artifacts = work / "artifacts"
    artifacts.mkdir()
    command = [sys.executable, "-m", "tests.fuzz.runner", target]
    if native is not None:
        command += ["--native", str(native)]
    command += [
        f"-max_total_time={seconds}",
        f"-seed={seed}",
        f"-artifact_prefix={artifacts}/",
        "-timeout=30",
        "-keep_seed=1",  # kept even without coverage feedback (the sanitized run has none)
        "-rss_limit_mb=4096",
        str(corpus(target, work / "corpus")),
    ]
    done = subprocess.run(
        command,
        cwd=REPO,
        env=env or dict(os.environ),
        capture_output=True,
        text=True,
        timeout=seconds + 300,
        check=False,
    )
    found = sorted(artifacts.iterdir())
    if done.returncode == 0 and not found:
        return
    stderr = done.stderr
    marks = [stderr.find(m) for m in ("=== Uncaught Python exception", "==ERROR", "ERROR:")]
    start = min([m for m in marks if m >= 0], default=0)
    lines = [f"{target}: exit status {done.returncode}, {len(found)} crashing input(s)"]
    lines += [f"{path.name}: {path.read_bytes()!r}" for path in found]
    lines += [stderr[start : start + REPORT_CHARS]]
    pytest.fail("\n".join(lines), pytrace=False)


def expect_open_issues(request: pytest.FixtureRequest, target: str) -> None:
    """While a crash found in the target is open (regressions.py), the run may find it again."""
    issues = sorted({issue for name, _, _, issue in REGRESSIONS if name == target and issue})
    if issues:
        request.applymarker(pytest.mark.xfail(reason="; ".join(issues), strict=False))


@pytest.mark.parametrize("target", TARGETS)
def test_fuzz(
    target: str, tmp_path: Path, fuzz_seconds: int, fuzz_seed: str, request: pytest.FixtureRequest
) -> None:
    expect_open_issues(request, target)
    fuzz(target, tmp_path, fuzz_seconds, fuzz_seed)


@pytest.mark.parametrize("target", sorted(sanitizers.SANITIZED))
def test_c_path_under_sanitizers(
    target: str,
    tmp_path: Path,
    fuzz_seconds: int,
    fuzz_seed: str,
    request: pytest.FixtureRequest,
) -> None:
    """ASan's runtime takes the coverage hooks, so this run is blind (random mutations of the
    seeds), but every input goes through the C path with every access checked."""
    expect_open_issues(request, target)
    try:
        native, env = sanitizers.build(tmp_path, sanitizers.SANITIZED[target])
    except sanitizers.Unavailable as exc:
        pytest.skip(str(exc))
    fuzz(target, tmp_path, fuzz_seconds, fuzz_seed, native, env)
