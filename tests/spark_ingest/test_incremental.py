"""Runs after the first: continue from the checkpoint, re-finalize late hours, report gaps."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from spark_ingest import job
from tests.spark_ingest.support import options, read_output, success, tree
from tests.spark_ingest.tiered import HOUR_MS, T0, json_records, mixed_records

HOUR0 = "topic=orders/dt=2026-11-18/hr="


def hour_dir(ts_ms: int) -> str:
    return f"{HOUR0}{(ts_ms - T0) // HOUR_MS + 11:02d}"  # T0 is 2026-11-18T11:00Z


def test_second_run_writes_only_new_files_and_refinalizes_a_late_hour(
    spark: SparkSession, moto: str, bucket: str, partitions: Any, tmp_path: Path
) -> None:
    p = partitions("orders", 0)
    p.append(json_records(60, T0, 60_000, seed=0), values_json=True)  # hour 11
    p.append(mixed_records(30, T0 + HOUR_MS, 60_000, seed=60))  # hour 12
    p.upload()
    opts = options(moto, bucket, tmp_path, ("orders",))
    first = job.run(opts, spark)
    before = tree(tmp_path / "out")
    assert success(tmp_path / "out", hour_dir(T0)) == {
        "rows": 60,
        "files": 1,
        "parts": {"part-00000-00000000000000000000-00000000000000000059.parquet": 60},
    }

    late = T0 + 5 * 60_000  # back in hour 11, at a later offset
    p.append([(b"late", b'{"late": true}', [], late)])
    p.append(mixed_records(20, T0 + 2 * HOUR_MS, 60_000, seed=200))  # hour 13
    p.upload()
    second = job.run(opts, spark)

    after = tree(tmp_path / "out")
    new_files = sorted(set(after) - set(before))
    assert {k: after[k] for k in before if not k.endswith("_SUCCESS")} == {
        k: v for k, v in before.items() if not k.endswith("_SUCCESS")
    }  # old files untouched
    assert [f for f in new_files if f.endswith(".parquet")] == sorted(second["files"])
    assert second["files"] == [
        f"{hour_dir(late)}/part-00000-{90:020d}-{90:020d}.parquet",
        f"{hour_dir(T0 + 2 * HOUR_MS)}/part-00000-{91:020d}-{110:020d}.parquet",
    ]
    assert second["partitions"] == [
        {
            "topic": "orders",
            "partition": 0,
            "start": 90,
            "end": 111,
            "rows": 21,
            "aborted": 0,
            "files": 2,
            "hours": {"2026-11-18T11": 1, "2026-11-18T13": 20},
        }
    ]
    marker = success(tmp_path / "out", hour_dir(late))
    assert (marker["rows"], marker["files"]) == (61, 2)
    assert hour_dir(late) in second["hours_finalized"]
    assert hour_dir(T0 + HOUR_MS) not in second["hours_finalized"]
    assert len(read_output(tmp_path / "out")) == 111
    checkpoint = json.loads((tmp_path / "ckpt" / "offsets.json").read_text())
    assert (checkpoint["run"], checkpoint["offsets"]) == (2, {"orders": {"0": 111}})
    assert first["run"] == 1

    third = job.run(opts, spark)  # nothing new: nothing written, nothing moves
    assert (third["rows"], third["files"], third["partitions"]) == (0, [], [])
    assert tree(tmp_path / "out") == after


def test_retention_gaps_are_reported(
    spark: SparkSession, moto: str, bucket: str, partitions: Any, tmp_path: Path
) -> None:
    p = partitions("orders", 0)
    p.append(mixed_records(10, T0, 1_000, seed=0))
    p.upload()
    opts = options(moto, bucket, tmp_path, ("orders",))
    job.run(opts, spark)  # checkpoint at 10
    for seed in (10, 20, 30):
        p.append(mixed_records(10, T0 + seed * 1_000, 1_000, seed=seed))
        p.upload()  # segments [10, 19], [20, 29], [30, 39]
    p.drop_segments_below(25)  # retention: [10, 19] gone, the log starts inside [20, 29]

    result = job.run(opts, spark)

    assert result["gaps"] == [
        {
            "topic": "orders",
            "partition": 0,
            "start": 10,
            "end": 25,
            "reason": "deleted (retention) before ingest",
        }
    ]
    assert sorted(r["offset"] for r in read_output(tmp_path / "out")) == [
        *range(10),
        *range(25, 40),
    ]
