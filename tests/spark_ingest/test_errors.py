"""Bad input is one clear line on stderr and exit code 2, never a traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from gateway.workers.local_cluster import free_port
from spark_ingest import job
from spark_ingest.errors import IngestError
from tests.spark_ingest.support import cli, options
from tests.spark_ingest.tiered import T0, mixed_records


def run_cli(tmp_path: Path, endpoint: str, bucket: str, *extra: str) -> tuple[int, str]:
    args = ["--s3-endpoint", endpoint, "--bucket", bucket, "--prefix", "tier"]
    args += ["--out", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "ck.json")]
    done = cli(*args, *extra)
    return done.returncode, done.stderr


def assert_one_line(code: int, stderr: str, expected: str) -> None:
    lines = [line for line in stderr.splitlines() if "spark_ingest: error:" in line]
    assert code == 2, stderr
    assert "Traceback" not in stderr
    assert len(lines) == 1 and expected in lines[0], stderr


def test_missing_bucket(tmp_path: Path, moto: str) -> None:
    code, err = run_cli(tmp_path, moto, "no-such-bucket", "--topics", "orders")
    assert_one_line(code, err, "bucket 'no-such-bucket' does not exist")


def test_unknown_topic(tmp_path: Path, moto: str, bucket: str) -> None:
    code, err = run_cli(tmp_path, moto, bucket, "--topics", "nope")
    assert_one_line(code, err, f"unknown topic 'nope': no manifest under s3://{bucket}/tier/nope/")


def test_malformed_manifest(tmp_path: Path, moto: str, bucket: str, s3: Any) -> None:
    s3.put_object(Bucket=bucket, Key="tier/orders/0/manifest.json", Body=b'{"format": 1, "topic"')
    code, err = run_cli(tmp_path, moto, bucket, "--topics", "orders")
    assert_one_line(code, err, f"malformed manifest s3://{bucket}/tier/orders/0/manifest.json")


def test_bad_offsets_json(tmp_path: Path, moto: str, bucket: str) -> None:
    code, err = run_cli(tmp_path, moto, bucket, "--topics", "orders", "--start-offsets", "{0:")
    assert_one_line(code, err, "bad --start-offsets: not JSON")
    code, err = run_cli(
        tmp_path, moto, bucket, "--topics", "orders", "--start-offsets", '{"orders": {"0": -1}}'
    )
    assert_one_line(code, err, "bad --start-offsets: offset -1 of orders/0")


def test_unreachable_endpoint(tmp_path: Path) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    code, err = run_cli(tmp_path, endpoint, "bucket", "--topics", "orders")
    assert_one_line(code, err, f'Could not connect to the endpoint URL: "{endpoint}/')


def test_malformed_checkpoint_and_time_zone(tmp_path: Path, moto: str, bucket: str) -> None:
    (tmp_path / "ck.json").write_text('{"format": 1, "offsets": []}')
    code, err = run_cli(tmp_path, moto, bucket, "--topics", "orders")
    assert_one_line(code, err, f"malformed checkpoint {tmp_path / 'ck.json'}")
    code, err = run_cli(tmp_path, moto, bucket, "--topics", "orders", "--time-zone", "Mars/Base")
    assert_one_line(code, err, "unknown --time-zone 'Mars/Base'")


def test_corrupt_segment_names_the_object(
    spark: SparkSession, moto: str, bucket: str, partitions: Any, s3: Any, tmp_path: Path
) -> None:
    p = partitions("orders", 0)
    p.append(mixed_records(5, T0, 1_000, seed=0))
    p.upload()
    key = "tier/orders/0/00000000000000000000-00000000000000000004.log"
    data = bytearray(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    data[-1] ^= 0xFF
    s3.put_object(Bucket=bucket, Key=key, Body=bytes(data))
    with pytest.raises(IngestError, match=f"segment s3://{bucket}/{key} has sha256 [0-9a-f]+; its"):
        job.run(options(moto, bucket, tmp_path, ("orders",)), spark)


def test_source_options_are_checked(spark: SparkSession, moto: str, bucket: str) -> None:
    def reader() -> Any:
        return spark.read.format("sluice").option("endpoint", moto).option("bucket", bucket)

    with pytest.raises(Exception, match="bad start_offsets: not JSON"):
        reader().option("topics", "orders").option("start_offsets", "{").load()
    with pytest.raises(Exception, match="give one of the options 'topics'"):
        reader().load()


def test_pending_run_needs_the_same_settings(
    spark: SparkSession, moto: str, bucket: str, partitions: Any, tmp_path: Path
) -> None:
    p = partitions("orders", 0)
    p.append(mixed_records(5, T0, 1_000, seed=0))
    p.upload()
    crashed = options(moto, bucket, tmp_path, ("orders",))
    job.run(crashed, spark)
    checkpoint = tmp_path / "ckpt" / "offsets.json"
    text = checkpoint.read_text()
    p.append(mixed_records(5, T0, 1_000, seed=5))
    p.upload()
    with pytest.MonkeyPatch.context() as mp:  # a run that dies right after planning
        mp.setattr(job, "ingest_direct", lambda *_: (_ for _ in ()).throw(KeyboardInterrupt))
        with pytest.raises(KeyboardInterrupt):
            job.run(crashed, spark)
    assert '"pending": {' in checkpoint.read_text() and checkpoint.read_text() != text
    other = options(moto, bucket, tmp_path, ("orders",), time_zone="Europe/Paris")
    with pytest.raises(IngestError, match="unfinished run"):
        job.run(other, spark)
    assert job.run(crashed, spark)["resumed"] is True
