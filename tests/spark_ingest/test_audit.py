"""`python -m spark_ingest audit`: ingested rows against the manifests' record counts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from spark_ingest import job
from tests.spark_ingest.support import cli, options
from tests.spark_ingest.tiered import T0, mixed_records


def audit(moto: str, bucket: str, *which: str) -> tuple[int, str]:
    done = cli("audit", *which, "--s3-endpoint", moto, "--bucket", bucket, "--prefix", "tier")
    return done.returncode, done.stdout + done.stderr


def test_audit_passes_a_run_and_fails_a_miscount(
    spark: SparkSession, moto: str, bucket: str, partitions: Any, tmp_path: Path
) -> None:
    p0 = partitions("orders", 0)
    for seed in (0, 10):
        p0.append(mixed_records(10, T0 + seed * 1_000, 1_000, seed=seed))
        p0.append_commit_marker(T0 + seed * 1_000 + 999)
        p0.upload()  # [0, 10] and [11, 21], a marker ending each
    p1 = partitions("orders", 1)
    p1.append(mixed_records(12, T0, 1_000, seed=0))
    p1.upload(log_start_offset=5)  # the run starts inside the segment: counted by decoding
    job.run(options(moto, bucket, tmp_path, ("orders",)), spark)
    checkpoint = str(tmp_path / "ckpt" / "offsets.json")

    code, output = audit(moto, bucket, "--checkpoint", checkpoint)
    assert code == 0, output
    assert "ok        orders/0 [0, 22): 20 rows" in output
    assert "ok        orders/1 [5, 12): 7 rows" in output

    summary_path = tmp_path / "ckpt" / "offsets.summary.json"
    summary = json.loads(summary_path.read_text())
    summary["partitions"][0]["rows"] -= 1
    summary_path.write_text(json.dumps(summary))
    code, output = audit(moto, bucket, "--summary", str(summary_path))
    assert code == 1
    assert "MISMATCH  orders/0 [0, 22): ingested 19, manifest says 20" in output

    code, output = audit(moto, "no-such-bucket", "--summary", str(summary_path))
    assert code == 2 and "bucket 'no-such-bucket' does not exist" in output
