"""`loadtests.queue_bench --quick`: every throughput cell acquires and accepts its records on
each server (Sluice, Redis Streams, NATS JetStream) and reports its figures, the fairness
cases report the consumers' waits, and the poison record is delivered exactly its delivery
limit and archived while the records behind it are accepted. Speed is never judged here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loadtests.queue_bench import (
    QUICK,
    SYSTEMS,
    _range_accepts,
    fairness_figures,
    out_of_order,
)

REPO = Path(__file__).resolve().parents[2]


def test_quick_run_reports_every_cell(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "loadtests.queue_bench", "--quick", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    doc = json.loads((tmp_path / "queues.json").read_text())
    assert list(doc["throughput"]) == [str(b) for b in QUICK.cell_records]
    for batch, row in doc["throughput"].items():
        assert list(row) == list(SYSTEMS)
        for system, cell in row.items():
            assert cell["records"] >= QUICK.cell_records[int(batch)], (system, cell)
            assert cell["records_per_s"] > 0 and cell["seconds"] > 0, (system, cell)
    assert len(doc["figures"]) == 4 * len(QUICK.cell_records)
    for figure in doc["figures"]:
        if figure["goal"] is None or figure["value"] is None:
            assert figure["met"] is None, figure
        else:
            assert figure["met"] == (figure["value"] >= figure["goal"]), figure
    trickle, backlog = doc["fairness"]
    assert trickle["records"] == QUICK.fair_rate * QUICK.fair_seconds
    assert backlog["records"] == QUICK.fair_backlog
    for case in (trickle, backlog):
        # more records than consumers: some consumer waited again after its first record
        assert case["steady_waits"] > 0 and case["wait_s"]["max"] >= case["wait_s"]["mean"]
        # each wait up to the gateway's acquisition too, within the wait the consumer saw
        at_gateway = case["at_gateway"]
        assert at_gateway["steady_waits"] == case["steady_waits"]
        assert at_gateway["wait_s"]["mean"] <= case["wait_s"]["mean"]
        assert case["out_of_order"]["acquires"] == case["records"] - case["consumers_served"]
    for case in doc["poison"]:
        assert case["delivery_counts"] == list(range(1, QUICK.delivery_limit + 1)), case
        assert case["archived_metric"] == 1 and case["accepted"] == QUICK.poison_behind, case
    assert [case["how"] for case in doc["poison"]] == ["release", "hang"]
    text = (tmp_path / "queues.md").read_text()
    for heading in ("## Acquire and accept", "## Fairness", "## A poison record"):
        assert heading in text


def test_an_acquire_served_after_one_sent_later_is_out_of_order_by_the_difference() -> None:
    in_order = out_of_order([(0.0, 10), (1.0, 11), (2.0, 12)])
    assert in_order["max_ms"] == 0 and in_order["after_a_later_one_by_over_10ms"] == 0
    # sent first, served 39 ms after one sent later was
    overtaken = out_of_order([(0.0, 50), (1.0, 11), (2.0, 20)])
    assert overtaken["max_ms"] == 39 and overtaken["after_a_later_one_by_over_10ms"] == 0.3333


def test_a_wait_past_twice_the_mean_misses_the_fairness_goal() -> None:
    row = {"records": 8, "seconds": 1.0, "server_cpu_s": 0.5}
    fair = fairness_figures([[0.1, 1.0, 1.0], [0.2, 1.0, 1.0], [0.3, 1.0, 1.0]], row)
    assert fair["met"] is True and fair["max_over_mean"] == 1.0
    unfair = fairness_figures([[0.1, 1.0, 1.0], [0.2, 1.0, 1.0], [0.3, 1.0, 5.0]], row)
    assert unfair["met"] is False
    assert unfair["consumers_within_2x_mean"] == 2 and unfair["consumers_measured"] == 3
    assert unfair["wait_s"]["mean"] == pytest.approx(10 / 6, abs=1e-3)


def test_sluice_consumers_accept_consecutive_offsets_of_a_partition_as_one_range() -> None:
    body, count = _range_accepts([b"q:0:5:1", b"q:0:6:1", b"q:1:7:1", b"q:0:8:2", b"q:0:9:1"])
    assert count == 3
    assert json.loads(body)["acknowledgements"] == [
        {"topic": "q", "partition": 0, "first_offset": 5, "last_offset": 6, "type": "accept"},
        {"topic": "q", "partition": 1, "first_offset": 7, "last_offset": 7, "type": "accept"},
        {"topic": "q", "partition": 0, "first_offset": 8, "last_offset": 9, "type": "accept"},
    ]
