"""Run one fuzz target under atheris (libFuzzer): `python -m tests.fuzz.runner TARGET
[--native FILE] [libFuzzer flags and corpus directories]`.

`--native FILE` loads the C extension built at FILE (a sanitizer build: gateway.formats._batchcheck,
_fetchjson, _h2session or _producejson, by its file name) instead of the installed one, before
anything imports it. The code under test is imported inside atheris's instrumentation, so
Python coverage guides the mutations.
"""

from __future__ import annotations

import importlib
import sys

import atheris

from tests.fuzz.sanitizers import load_native

TARGETS = (
    "batch_check_native",
    "batch_validator",
    "json_produce",
    "json_produce_native",
    "ndjson_produce",
    "fetch_json",
    "share_json",
    "http2_frames",
)
INSTRUMENTED = ["engine", "gateway", "tests.fuzz"]


def main(argv: list[str]) -> None:
    name, rest = argv[1], argv[2:]
    if name not in TARGETS:
        raise SystemExit(f"unknown target {name!r}; one of {', '.join(TARGETS)}")
    if rest[:1] == ["--native"]:
        load_native(rest[1])
        rest = rest[2:]
    with atheris.instrument_imports(include=INSTRUMENTED):
        target = importlib.import_module(f"tests.fuzz.{name}")
    atheris.Setup([argv[0], *rest], target.one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
