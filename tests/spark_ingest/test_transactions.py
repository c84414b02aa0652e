"""Kafka transactions in the shipped segments: only committed and plain records reach Parquet.

The segments hold, among plain records and across segment boundaries, a transaction that
commits, one that aborts, and ones whose marker is not shipped yet. The first run writes what
precedes the oldest undecided transaction and its checkpoint stops there (a later plain
segment it wrote is taken back); once the markers are shipped, the next run writes the rest,
each record once. Both write paths: the default one and the data source's (`--json-schema`).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from spark_ingest import job, transactions
from spark_ingest.transactions import Aborted, Decisions, TxnEvent
from tests.spark_ingest.support import cli, cli_args, options, read_output, tree
from tests.spark_ingest.tiered import T0, Partition, Produced, json_records

COMMITS, ABORTS, STAYS_OPEN = 1000, 2000, 3000  # producer ids
SCHEMA = "id BIGINT, kind STRING, amount INT"  # json_records' fields


def records(count: int, seed: int) -> list[tuple[bytes | None, bytes | None, list[Any], int]]:
    return json_records(count, T0 + seed * 1_000, 1_000, seed)


def write_undecided(p: Partition) -> int:
    """Five segments: plain; a transaction that will commit and one that will abort opened
    among plain records; the first committed, the second aborted, a third opened; more of it,
    and a new transaction of the aborted producer; plain records only. The first offset of
    the transaction left open, the first one undecided."""
    p.append(records(5, 0), values_json=True)
    p.upload()
    p.append(records(3, 10), values_json=True)
    p.append_transactional(records(2, 20), COMMITS)
    p.append(records(2, 30), values_json=True)
    p.append_transactional(records(2, 40), ABORTS)
    p.upload()
    p.append_transactional(records(1, 50), COMMITS)
    p.end_transaction(COMMITS, 0, commit=True)
    p.append(records(2, 60), values_json=True)
    undecided = p.append_transactional(records(2, 70), STAYS_OPEN)
    p.end_transaction(ABORTS, 0, commit=False)
    p.append(records(2, 80), values_json=True)
    p.upload()
    p.append_transactional(records(1, 90), STAYS_OPEN)
    p.append(records(2, 100), values_json=True)
    p.append_transactional(records(2, 110), ABORTS, epoch=1)
    p.append(records(1, 120), values_json=True)
    p.upload()
    p.append(records(4, 130), values_json=True)
    p.upload()
    return undecided


def decide_the_rest(p: Partition) -> None:
    """The markers of the open transactions arrive (one commits, one aborts), shipped with
    plain records after them."""
    p.end_transaction(STAYS_OPEN, 0, commit=True)
    p.end_transaction(ABORTS, 1, commit=False)
    p.append(records(2, 140), values_json=True)
    p.upload()


def rows(root: Path) -> list[tuple[int, bytes | None, str | None]]:
    return sorted((r["offset"], r["key"], r["value"]) for r in read_output(root))


def expected(produced: list[Produced], below: int | None = None) -> list[Any]:
    return sorted(
        (p.offset, p.key, p.value.decode() if p.value is not None else None)
        for p in produced
        if below is None or p.offset < below
    )


def audit(moto: str, bucket: str, tmp_path: Path) -> str:
    """`python -m spark_ingest audit` of the last run: its one line."""
    summary = str(tmp_path / "ckpt" / "offsets.summary.json")
    done = cli("audit", "--summary", summary, "--s3-endpoint", moto, "--bucket", bucket,
               "--prefix", "tier")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines()[0]


def offsets(tmp_path: Path) -> dict[str, Any]:
    checkpoint: dict[str, Any] = json.loads((tmp_path / "ckpt" / "offsets.json").read_text())
    return checkpoint


@pytest.mark.parametrize("path", ["default", "data-source"])
def test_only_committed_records_and_the_checkpoint_stops_at_an_undecided_transaction(
    spark: SparkSession, moto: str, bucket: str, partitions: Any, tmp_path: Path, path: str
) -> None:
    p = partitions("orders", 0)
    undecided = write_undecided(p)
    extra: dict[str, Any] = {}
    if path == "data-source":
        (tmp_path / "schema.txt").write_text(SCHEMA)
        extra["json_schema"] = str(tmp_path / "schema.txt")
    opts = options(moto, bucket, tmp_path, ("orders",), **extra)

    first = job.run(opts, spark)

    out = tmp_path / "out"
    assert rows(out) == expected(p.produced, below=undecided)
    assert offsets(tmp_path)["offsets"] == {"orders": {"0": undecided}}
    assert offsets(tmp_path)["pending"] is None
    [partition] = first["partitions"]
    assert (partition["start"], partition["end"]) == (0, undecided)
    assert partition["rows"] == len(expected(p.produced, below=undecided))
    assert partition["aborted"] == 2  # the first transaction of ABORTS
    assert audit(moto, bucket, tmp_path) == f"ok        orders/0 [0, {undecided}): 15 rows"

    decide_the_rest(p)
    second = job.run(opts, spark)

    assert rows(out) == expected(p.produced)  # each committed and plain record once
    assert offsets(tmp_path)["offsets"] == {"orders": {"0": p.log.log_end_offset}}
    [partition] = second["partitions"]
    assert (partition["start"], partition["end"]) == (undecided, p.log.log_end_offset)
    assert first["rows"] + second["rows"] == len(p.produced)
    assert partition["aborted"] == 2  # the second transaction of ABORTS
    end = p.log.log_end_offset
    assert audit(moto, bucket, tmp_path) == f"ok        orders/0 [{undecided}, {end}): 14 rows"

    third = job.run(opts, spark)  # nothing new
    assert (third["rows"], third["partitions"]) == (0, [])


def test_a_crash_before_the_files_past_an_undecided_transaction_are_taken_back(
    spark: SparkSession, moto: str, bucket: str, partitions: Any, tmp_path: Path
) -> None:
    """The default path writes a plain segment past the undecided transaction before it
    knows; killed right after that file is in place, the rerun still takes it back."""
    p = partitions("orders", 0)
    undecided = write_undecided(p)
    clean = options(moto, bucket, tmp_path / "clean", ("orders",))
    job.run(clean, spark)
    last = p.entries[-1]  # plain records only, all in hour 11
    past = (
        f"topic=orders/dt=2026-11-18/hr=11/"
        f"part-00000-{last['base_offset']:020d}-{last['last_offset']:020d}.parquet"
    )
    crashed_opts = options(moto, bucket, tmp_path / "crashed", ("orders",))

    crashed = cli(*cli_args(crashed_opts), env={"SLUICE_INGEST_KILL_AT": f"after:{past}"})

    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    assert (tmp_path / "crashed" / "out" / past).exists()
    job.run(crashed_opts, spark)
    assert tree(tmp_path / "crashed" / "out") == tree(tmp_path / "clean" / "out")
    assert past not in tree(tmp_path / "clean" / "out")
    assert offsets(tmp_path / "crashed")["offsets"] == {"orders": {"0": undecided}}


def event(pid: int, offset: int, commit: bool | None = None, last: int | None = None) -> TxnEvent:
    return TxnEvent(pid, offset, offset if last is None else last, commit)


def test_decisions_follow_each_producers_markers_in_offset_order() -> None:
    events = [
        event(1, 0, last=1),
        event(2, 2),
        event(1, 3),
        event(3, 4),
        event(1, 5, commit=False),  # aborts 1's [0, 5]
        event(2, 6, commit=True),
        event(1, 7),  # a new transaction of 1, undecided
        event(4, 8, commit=False),  # nothing of 4 seen: decides nothing
    ]
    decided = transactions.decide(events)
    # 1's offsets 0, 1 and 3 are left out; 1's batch at 7 is past the first undecided (4)
    assert decided == Decisions((Aborted(1, 0, 5),), 4, 3)
    assert transactions.is_aborted(decided.aborted, 1, 3)
    assert not transactions.is_aborted(decided.aborted, 2, 3)
    assert not transactions.is_aborted(decided.aborted, 1, 7)
    assert transactions.decide(events, start=1).aborted_records == 2
    assert transactions.decide([]) == transactions.NONE_DECIDED
