"""The engine benchmark runs and reports every figure (a smoke run: speed is never asserted)."""

from __future__ import annotations

import subprocess
import sys

import orjson

from tests.e2e.conftest import REPO

FIGURES = (
    "encode_append_records_per_s",
    "append_encoded_mb_per_s",
    "raw_write_mb_per_s",
    "read_records_per_s",
    "large_log_encode_append_records_per_s",
    "recovery_s_per_gb",
    "segment_roll_ms",
)


def test_quick_bench_prints_every_figure() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "loadtests.engine_bench", "--quick", "--json"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    report = orjson.loads(done.stdout)
    assert report["quick"] is True
    for name in FIGURES:
        assert report[name] > 0, name
