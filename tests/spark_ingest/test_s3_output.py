"""`--out` and `--checkpoint` as s3:// URLs on the same endpoint: same layout, same bytes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from spark_ingest import job
from tests.spark_ingest.support import options
from tests.spark_ingest.tiered import HOUR_MS, T0, mixed_records


def objects(s3: Any, bucket: str, prefix: str) -> dict[str, bytes]:
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    return {o["Key"]: s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read() for o in listed}


def test_outputs_on_s3(
    spark: SparkSession, moto: str, bucket: str, partitions: Any, s3: Any, tmp_path: Path
) -> None:
    p = partitions("orders", 0)
    p.append(mixed_records(30, T0, 4 * 60_000, seed=0))  # two hours
    p.upload()
    opts = options(
        moto,
        bucket,
        tmp_path,
        ("orders",),
        out=f"s3://{bucket}/lake/",
        checkpoint=f"s3://{bucket}/state/offsets.json",
    )
    result = job.run(opts, spark)

    lake = objects(s3, bucket, "lake/")
    assert sorted(lake) == sorted(
        [f"lake/{f}" for f in result["files"]]
        + [f"lake/{h}/_SUCCESS" for h in result["hours_finalized"]]
    )
    assert len(result["files"]) == 2 and result["rows"] == 30
    state = objects(s3, bucket, "state/")
    assert json.loads(state["state/offsets.json"])["offsets"] == {"orders": {"0": 30}}
    assert json.loads(state["state/offsets.summary.json"])["files"] == result["files"]

    # A run that wrote its files but never committed, redone: the same objects, byte for byte.
    s3.delete_object(Bucket=bucket, Key="state/offsets.json")
    job.run(opts, spark)
    assert objects(s3, bucket, "lake/") == lake
    p.append(mixed_records(1, T0 + HOUR_MS + 1, 1, seed=30))
    p.upload()
    job.run(opts, spark)
    marker = json.loads(
        s3.get_object(Bucket=bucket, Key=f"lake/{result['hours_finalized'][-1]}/_SUCCESS")[
            "Body"
        ].read()
    )
    assert marker["files"] == 2
