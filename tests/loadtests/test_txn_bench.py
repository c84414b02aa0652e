"""`loadtests.txn_bench --quick`: every produce cell (plain, and transactions of one and of ten
batches) lands its records and a marker per partition per transaction, both pipelines process
every record and commit every offset, both push pipelines (a reply subscription, and a receiver
that produces with an Idempotency-Key) deliver every record and land one reply each, the
three-node cluster times its commits; the figures are medians of the rounds' ratios, judged
against the goal as shown. Speed is never judged here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from loadtests.txn_bench import GOAL, QUICK, cell_name, figures, push_name

REPO = Path(__file__).resolve().parents[2]


def test_quick_run_reports_every_cell(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "loadtests.txn_bench", "--quick", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    doc = json.loads((tmp_path / "transactions.json").read_text())
    assert list(doc["produce"]) == [cell_name(n) for n in (0, *QUICK.per_transaction)]
    for name, cell in doc["produce"].items():
        assert cell["records"] >= QUICK.cell_records and cell["records_per_s"] > 0, (name, cell)
    for per_transaction in QUICK.per_transaction:
        cell = doc["produce"][cell_name(per_transaction)]
        assert cell["transactions"] * QUICK.batch * per_transaction == cell["records"], cell
        # begin (and a producer id at an id's first), partitions added once, decided, complete
        assert 4 <= cell["state_records_per_transaction"] <= 5, cell
    for name, cell in doc["pipeline"].items():
        assert cell["records"] == QUICK.pipeline_records, (name, cell)
    # the transactional pipeline's sink holds a marker per partition per transaction too
    assert doc["pipeline"]["plain"]["sink_offsets"] == QUICK.pipeline_records
    assert doc["pipeline"]["transactional"]["sink_offsets"] > QUICK.pipeline_records
    push = doc["push"]
    assert set(push) == {push_name(b, e) for b in (QUICK.batch, 1) for e in (True, False)}
    for batch, records in ((QUICK.batch, QUICK.push_records), (1, QUICK.push_single_records)):
        once, keyed = push[push_name(batch, True)], push[push_name(batch, False)]
        for cell in (once, keyed):
            assert cell["records"] == records and cell["records_per_s"] > 0, cell
            assert cell["deliveries"] >= records // batch, cell
        # the Idempotency-Key's replies exactly; the reply topic's, with a marker a transaction
        assert keyed["sink_offsets"] == records, keyed
        assert records + records // batch <= once["sink_offsets"], once
        assert once["sink_offsets"] <= records + once["deliveries"], once
    assert list(doc["latency"]) == ["this tree"]
    latency = doc["latency"]["this tree"]
    for step in ("begin", "produce", "commit", "total", "produce_alone", "produce_again"):
        q = latency[f"{step}_ms"]
        assert 0 < q["p50"] <= q["p99"] <= q["max"], (step, q)
    assert latency["total_ms"]["max"] >= latency["commit_ms"]["max"]
    assert doc["meta"]["command"] == "python -m loadtests.txn_bench --quick"
    assert doc["meta"]["machine"]["cpu_model"] and doc["meta"]["commit"]
    text = (tmp_path / "transactions.md").read_text()
    for heading in ("## Produce", "## Pipeline", "## Push pipeline", "## Commit latency"):
        assert heading in text


def _row(records_per_s: int, us: float) -> dict[str, Any]:
    return {"records_per_s": records_per_s, "server_cpu_us_per_record": us}


def test_figures_are_medians_of_each_rounds_ratio_judged_as_shown() -> None:
    plan = QUICK
    plain = [_row(1000, 1.0), _row(2000, 1.0), _row(1000, 2.0)]
    produce = {"plain": plain}
    for n in plan.per_transaction:
        # a slow round of the plain cell is set against the same round of the transactional
        produce[cell_name(n)] = [_row(800, 2.0), _row(1000, 3.0), _row(799, 4.0)]
    pipeline = {"transactional": [_row(50, 1.0)] * 3, "plain": [_row(100, 1.0)] * 3}
    push = {push_name(b, e): [_row(40 if e else 80, 1.0)] * 3 for b in (plan.batch, 1)
            for e in (True, False)}  # fmt: skip
    doc = {"produce_rounds": produce, "pipeline_rounds": pipeline, "push_rounds": push}
    rows = figures(doc, plan)
    first = rows[0]
    assert first["figure"] == f"produce, {cell_name(plan.per_transaction[0])} / plain, records/s"
    assert first["rounds"] == [0.8, 0.5, 0.799]
    assert first["value"] == 0.799 and first["target"] == GOAL and first["met"] is False
    assert rows[1]["rounds"] == [2.0, 3.0, 2.0] and rows[1]["value"] == 2.0
    assert rows[1]["met"] is None
    by_name = {row["figure"]: row for row in rows}
    assert by_name["pipeline, transactional / plain, records/s"]["value"] == 0.5
    for size in (f"batches of {plan.batch}", "one record"):
        assert (
            by_name[f"push pipeline, {size}: exactly-once / idempotency key, records/s"]["rounds"]
            == [0.5] * 3
        )
