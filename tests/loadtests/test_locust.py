"""The locustfile against a real gateway process: every profile sends requests, none fail."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadtests.common import start_gateway

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def gateway_url(tmp_path: Path) -> Iterator[str]:
    process, url = start_gateway(tmp_path / "data")
    try:
        yield url
    finally:
        process.terminate()
        process.wait(timeout=60)


def test_locust_headless_mixed_profile_writes_csv_without_failures(
    gateway_url: str, tmp_path: Path
) -> None:
    prefix = tmp_path / "locust"
    done = subprocess.run(
        [
            sys.executable, "-m", "locust", "-f", "loadtests/locustfile.py", "--headless",
            "-u", "8", "-r", "8", "-t", "4s", "--host", gateway_url, "--csv", str(prefix),
            "--only-summary",
        ],
        cwd=REPO,
        env={**os.environ, "SLUICE_PROFILE": "mixed", "SLUICE_POLL_MS": "200"},
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    with open(f"{prefix}_stats.csv", newline="") as stats:
        rows = {row["Name"]: row for row in csv.DictReader(stats)}
    for name in ("produce json", "produce ndjson", "fetch partition", "group consume"):
        assert int(rows[name]["Request Count"]) > 0, name
    assert int(rows["Aggregated"]["Request Count"]) > 0
    assert int(rows["Aggregated"]["Failure Count"]) == 0
