"""`loadtests.subscriptions_bench --quick`: every cell delivers every record to the receiver
(the bridge with its POSTs concurrent) and reports its figures, each goal is a ratio of two
cells of the same run, and the latency and memory cells give figures. Speed is never judged
here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loadtests.subscriptions_bench import BRIDGE_IN_FLIGHT, CELLS, PIPELINE, QUICK, figures

REPO = Path(__file__).resolve().parents[2]


def test_quick_run_reports_every_cell_and_ratio(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "loadtests.subscriptions_bench", "--quick", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    doc = json.loads((tmp_path / "subscriptions.json").read_text())
    cells = doc["cells"]
    assert list(cells) == list(CELLS)
    for what, row in cells.items():
        wanted = QUICK.batch_records if "batch" in what else QUICK.single_records
        assert row["records"] == wanted, (what, row)  # each record once: no duplicates
        assert row["records_per_s"] > 0 and row["seconds"] > 0, row
    assert cells["subscription one record"]["requests"] == QUICK.single_records
    assert cells["subscription one record pipelined"]["requests"] == QUICK.single_records
    bridge = cells["bridge one record"]
    assert 0 < bridge["bridge_cpu_s"] < bridge["bridge_process_cpu_s"]  # its start left out
    assert bridge["in_flight"] == BRIDGE_IN_FLIGHT
    consumer = cells["consumer batch 500"]["records_per_s"]
    first = doc["figures"][0]
    rate = cells["subscription batch 500 cloudevents"]["records_per_s"]
    assert first["value"] == pytest.approx(rate / consumer, abs=0.01)
    for figure in doc["figures"]:
        measured = figure["value"] is not None
        assert figure["met"] == (figure["value"] >= figure["goal"] if measured else None), figure
    latency = doc["latency"]
    assert latency["records"] > 0 and 0 < latency["p50_ms"] <= latency["p99_ms"]
    subscriptions, streams = doc["memory"]
    assert subscriptions["subscriptions"] == streams["streams"] == QUICK.idle
    assert "| subscription one record |" in (tmp_path / "subscriptions.md").read_text()


def test_a_cell_whose_gateway_cpu_read_zero_gives_a_figure_not_measured() -> None:
    cell: dict[str, int | None] = {"records_per_s": 1000, "records_per_server_cpu_s": 4000}
    medians = {what: dict(cell) for what in CELLS}
    medians["bridge one record"] |= {"records_per_s": 100, "records_per_cpu_s": 200}
    medians["subscription one record pipelined"]["records_per_server_cpu_s"] = None
    shown = {f["figure"]: f for f in figures(medians)}
    per_cpu = shown[f"one record a request, pipeline {PIPELINE} / bridge (records per CPU-second)"]
    assert per_cpu["value"] is None and per_cpu["met"] is None
    assert shown[
        "one record a request / bridge (records per CPU-second: gateway, gateway + bridge)"
    ]["value"] == pytest.approx(20.0)
