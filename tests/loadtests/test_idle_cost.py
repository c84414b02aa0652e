"""`loadtests.idle_cost --quick`: every server (this tree's gateway, an earlier checkout's with
`--before`, the floor server) gets its closed loop and every open-loop cell, every request is
answered, and each cell carries its cost, latency, contention and the machine's stalls. The
stall probes report each CPU. Speed is never judged here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from loadtests.machine_stalls import THRESHOLDS_MS, Probes

REPO = Path(__file__).resolve().parents[2]


def test_quick_run_reports_every_server_and_cell(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "loadtests.idle_cost", "--quick", "--before", str(REPO),
         "--out", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-5000:]
    report = json.loads((tmp_path / "idle-cost.json").read_text())
    assert report["maximum_per_s"] > 0
    assert [row["server"] for row in report["rows"]] == ["this tree", "before", "floor server"]
    for row in report["rows"]:
        assert row["closed_loop"]["server_cpu_us_per_request"] > 0
        cells = [key for key in row if key.endswith("%")]
        assert cells == ["20%", "50%", "80%"]
        for key in cells:
            cell = row[key]
            assert cell["sent"] > 0 and cell["unanswered"] == 0, cell
            assert cell["answered_2xx"] + cell["refused_503"] == cell["sent"], cell
            assert cell["server_cpu_us_per_request"] > 0 and cell["cost_over_busy"] > 0
            assert cell["runqueue_wait_us_per_request"] >= 0
            assert 0 <= cell["other_work_on_server_cpu"] <= 1
            assert set(cell["machine_stalls"]) == {f"cpu{c}" for c in os.sched_getaffinity(0)}
            gateway = row["server"] != "floor server"
            assert (cell["loop_delay_max_ms"] is not None) == gateway
    assert report["meta"]["priority"] == "default priority"
    assert "| 20% |" in (tmp_path / "idle-cost.md").read_text()


def test_the_probes_report_each_cpu_over_a_window() -> None:
    with Probes([0]) as probes:
        start = time.monotonic()
        assert probes.pids()
        end = time.monotonic()
    (cpu,) = probes.window(start, end).values()
    assert cpu["max_ms"] >= 0
    assert set(cpu) == {"realtime", "max_ms", *(f"over_{t}ms" for t in THRESHOLDS_MS)}
