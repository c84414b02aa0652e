"""`python -m loadtests.scale_bench --quick` writes its report, and the report holds what the
scale goal asks: every produced record fetched back, and the gateway's open files within the
bound (a descriptor per partition plus the file cache) plus a few sockets and pipes, even with
more closed segments than descriptors. Speed is never judged (benchmarks are not tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SLACK = 40  # stdio, the event loop's epoll, eventfd and pipes, the lock, the client's sockets


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("scale")
    done = subprocess.run(
        [sys.executable, "-m", "loadtests.scale_bench", "--quick", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    report: dict[str, Any] = json.loads((out / "scale-report.json").read_text())
    return report


def test_every_partition_count_fetches_all_it_produced(report: dict[str, Any]) -> None:
    sizes = report["sizes"]
    assert [row["partitions"] for row in report["partitions"]] == sizes["partitions"]
    for row in report["partitions"]:
        requests = max(sizes["produce_requests"], row["partitions"])
        assert row["records"] == row["fetched_records"] == requests * sizes["records_per_request"]
        assert row["produce_records_s"] > 0 and row["fetch_records_s"] > 0
        assert row["fetch_requests"] >= row["partitions"]


def test_open_files_stay_within_the_bound(report: dict[str, Any]) -> None:
    costs = [
        row[when]
        for row in report["partitions"]
        for when in ("after_start", "after_create", "after_produce", "after_fetch")
    ]
    costs += [report["closed_segments"][when] for when in ("after_start", "after_fetch")]
    for cost in costs:
        assert cost["open_files"] <= cost["bound"] + SLACK, cost
        assert cost["rss_mib"] > 0


def test_more_closed_segments_than_descriptors_are_all_read_back(report: dict[str, Any]) -> None:
    sizes, segments = report["sizes"], report["closed_segments"]
    assert segments["closed_segments"] == sizes["closed_segments"] > sizes["fd_limit"]
    assert segments["file_cache"] == sizes["fd_limit"] // 8
    assert segments["after_fetch"]["bound"] < segments["closed_segments"]
    assert segments["fetched_records"] == segments["records"] == segments["closed_segments"] + 1
    assert segments["start_s"] > 0 and segments["fetch_from_0_s"] > 0
