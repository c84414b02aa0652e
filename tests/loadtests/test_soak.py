"""`loadtests.soak`, short: every record acknowledged is consumed exactly once by the group,
pushed and streamed, nothing fails, retention and tiering run, and the report has every field.
Speed is never judged here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loadtests.soak import CALIBRATE_STEPS, Consumers, check, default_warmup_s, drift

REPO = Path(__file__).resolve().parents[2]
ROW_FIELDS = {"t_s", "requests", "records_acked", "errors", "p50_ms", "p99_ms", "rss_mib",
              "open_files", "sockets", "tasks", "group_consumed", "group_repeats"}  # fmt: skip
SUMMARY_FIELDS = {"errors", "errors_by_kind", "exactly_once", "push", "sse", "group", "retention",
                  "tiering", "rate", "rss_growth_pct", "rss_growth_from_first_row_pct",
                  "open_files_drift", "tasks_drift", "p99_drift_pct", "passed"}  # fmt: skip


def soak(out: Path, *options: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "loadtests.soak", "--interval", "4", "--warmup", "4",
         "--out", str(out), *options],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-5000:]
    doc: dict[str, Any] = json.loads((out / "soak.json").read_text())
    assert (out / "soak.png").stat().st_size > 0
    assert "| t_s |" in (out / "soak.md").read_text()
    return doc


def check_behaviour(doc: dict[str, Any], nodes: int) -> None:
    summary = doc["summary"]
    assert set(summary) >= SUMMARY_FIELDS, summary
    assert summary["passed"] and summary["errors"] == 0, summary["errors_by_kind"]
    once = summary["exactly_once"]
    assert once["acknowledged"] > 0 and once["lost"] == 0 and once["duplicates"] == 0, once
    assert once["consumed"] == once["acknowledged"] + once["unacknowledged_consumed"]
    assert summary["push"]["missing"] == 0 and summary["push"]["delivered"] > 0
    assert summary["sse"]["gaps"] == summary["sse"]["repeats"] == 0
    assert summary["sse"]["records"] == summary["push"]["records_in_topic"]
    # Two steady members, and the churning one joined, left and came back at least once.
    assert summary["group"]["joins"] >= 4
    rows = doc["rows"]
    assert len(rows) >= 2
    for row in rows:
        assert set(row) >= ROW_FIELDS, row
        assert len(row["rss_mib"]) == len(row["open_files"]) == len(row["tasks"]) == nodes
        assert row["group_repeats"] == 0, row
    assert len(summary["rss_growth_pct"]) == nodes


def test_one_node_calibrated(tmp_path: Path) -> None:
    doc = soak(tmp_path, "--seconds", "16", "--calibrate-seconds", "1", "--share", "0.3")
    check_behaviour(doc, 1)
    rate = doc["summary"]["rate"]
    # The maximum is the highest open-loop step held, the steps rising until one is not.
    steps = doc["calibration"]["steps"]
    assert [step["share"] for step in steps] == list(CALIBRATE_STEPS[: len(steps)])
    assert all(step["held"] for step in steps[:-1])
    held = [step["rate"] for step in steps if step["held"]]
    first = CALIBRATE_STEPS[0] * rate["closed_loop_requests_s"]
    assert rate["calibrated_requests_s"] == pytest.approx(held[-1] if held else first, abs=0.2)
    assert 0 < rate["calibrated_requests_s"] <= rate["closed_loop_requests_s"]
    assert rate["target_requests_s"] == pytest.approx(0.3 * rate["calibrated_requests_s"], abs=0.2)
    assert "- calibration: " in (tmp_path / "soak.md").read_text()
    assert doc["summary"]["tiering"]["segments_uploaded"] > 0
    assert doc["summary"]["retention"]["expiring_records_deleted"] > 0


def test_cluster_of_three(tmp_path: Path) -> None:
    doc = soak(tmp_path, "--cluster", "--seconds", "8", "--rate", "50")
    check_behaviour(doc, 3)
    assert doc["summary"]["rate"]["calibrated_requests_s"] is None


@pytest.mark.parametrize(
    ("p99s", "expected"), [([10.0, 10.0, 20.0, 20.0, 20.0, 20.0], 100.0), ([5.0, 5.0], 0.0)]
)
def test_drift_counts_from_the_end_of_the_warm_up(p99s: list[float], expected: float) -> None:
    """Samples from the one taken as the warm-up ends; latency from the first interval that
    began after it (the first interval's p99, 1000 ms, is the warm-up's)."""
    rows = [
        {"t_s": 60.0 * (i + 1), "p99_ms": p99, "rss_mib": {"0": 100.0 + i}, "open_files": {"0": 50},
         "tasks": {"0": 40 + i}}
        for i, p99 in enumerate([1000.0, *p99s])
    ]  # fmt: skip
    got = drift(rows, 60.0, 60.0)
    assert got["from_s"] == 60.0
    assert got["rss_growth_pct"] == {"0": float(len(p99s))}
    assert got["rss_growth_from_first_row_pct"] == {"0": float(len(p99s))}
    assert got["open_files_drift"] == {"0": 0}
    assert got["tasks_drift"] == {"0": len(p99s)}
    assert got["p99_drift_pct"] == expected


def test_check_counts_lost_and_duplicated_records() -> None:
    acked = bytes([1, 1, 1, 0, 1])
    counts = bytes([1, 0, 3, 1])  # seq 1 and 4 never read, seq 2 thrice, seq 3 not acked
    assert check(acked, counts) == {
        "acknowledged": 4,
        "consumed": 3,
        "lost": 2,
        "duplicates": 2,
        "unacknowledged_consumed": 1,
    }


def test_node_options_reach_the_nodes_and_their_logs_the_report(tmp_path: Path) -> None:
    """What follows `--` is given to every node; the nodes' logs are copied next to the report
    (here the one a refused option leaves)."""
    done = subprocess.run(
        [sys.executable, "-m", "loadtests.soak", "--seconds", "1", "--out", str(tmp_path),
         "--", "--no-such-option"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode != 0
    assert "--no-such-option" in (tmp_path / "gateway.log").read_text()


def test_each_row_counts_the_records_the_group_delivered_again() -> None:
    """A record consumed a second time is counted as it comes (rows locate repeats in time);
    keys without a sequence are errors, not records."""
    shared = [0, 0, 0, 0]
    consumers = Consumers(None, None, shared)  # type: ignore[arg-type]
    for key in ["s0", "s5", "s0", "s0", "x1"]:
        consumers.consumed(key)
    assert shared == [2, 0, 0, 2]
    assert consumers.group.errors == 1


def test_rss_growth_is_reported_from_the_first_row_as_well() -> None:
    rows = [
        {"t_s": 60.0 * (i + 1), "p99_ms": 5.0, "rss_mib": {"0": rss}, "open_files": {"0": 50},
         "tasks": {"0": 40}}
        for i, rss in enumerate([100.0, 110.0, 111.0, 112.0])
    ]  # fmt: skip
    got = drift(rows, 120.0, 60.0)
    assert got["rss_growth_pct"] == {"0": round(100 * 2 / 110, 1)}
    assert got["rss_growth_from_first_row_pct"] == {"0": 12.0}


@pytest.mark.parametrize(("run_s", "expected"), [(16.0, 16 / 3), (600.0, 200.0), (1800.0, 600.0),
                                                 (7200.0, 600.0)])  # fmt: skip
def test_the_default_warm_up_is_a_third_of_the_run_up_to_ten_minutes(
    run_s: float, expected: float
) -> None:
    assert default_warmup_s(run_s) == pytest.approx(expected)
