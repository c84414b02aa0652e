"""Records -> engine segments -> S3 -> ingest -> Parquet: every record exactly once, in its hour."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from spark_ingest import job
from tests.spark_ingest.support import options, read_output, success
from tests.spark_ingest.tiered import HOUR_MS, T0, Produced, json_records, mixed_records


def load_dataset(partitions: Any) -> list[Produced]:
    """Three partitions, every codec, JSON and non-JSON values, a control batch, 4+ hours."""
    orders0 = partitions("orders", 0)
    orders0.append(mixed_records(120, T0, 60_000, seed=0))  # 2 hours, uncompressed
    orders0.upload()
    orders0.append(mixed_records(90, T0 + 2 * HOUR_MS, 40_000, seed=120), compression="gzip")
    orders0.append_commit_marker(T0 + 3 * HOUR_MS)
    orders0.append(json_records(60, T0 + 3 * HOUR_MS, 30_000, seed=210), values_json=True,
                   compression="zstd")  # fmt: skip
    orders0.upload()
    orders1 = partitions("orders", 1)
    orders1.append(mixed_records(50, T0 + HOUR_MS // 2, 100_000, seed=500), compression="lz4")
    orders1.append(json_records(40, T0, 1_000, seed=550), compression="snappy")
    orders1.upload()
    clicks = partitions("clicks", 0)
    clicks.append(json_records(80, T0 + 5 * HOUR_MS, 10_000, seed=900), values_json=True)
    clicks.upload()
    return [*orders0.produced, *orders1.produced, *clicks.produced]


def is_json(value: bytes) -> bool:
    try:
        json.loads(value.decode())
    except ValueError:
        return False
    return True


def hour_of(ts_ms: int, zone: dt.tzinfo) -> tuple[str, str]:
    local = dt.datetime.fromtimestamp(ts_ms / 1000, zone)
    return local.strftime("%Y-%m-%d"), local.strftime("%H")


def test_every_record_once_in_its_hour(
    spark: SparkSession, moto: str, bucket: str, partitions: Any, tmp_path: Path
) -> None:
    produced = load_dataset(partitions)
    result = job.run(options(moto, bucket, tmp_path, ("orders", "clicks")), spark)

    out = tmp_path / "out"
    rows = read_output(out)
    by_id = {(r["topic"], int(r["partition"]), r["offset"]): r for r in rows}
    assert len(by_id) == len(rows) == len(produced) == result["rows"]
    for p in produced:
        row = by_id[(p.topic, p.partition, p.offset)]
        assert row["timestamp"] == dt.datetime.fromtimestamp(p.timestamp / 1000, dt.UTC)
        assert row["key"] == p.key
        if p.value is not None and is_json(p.value):
            assert (row["value"], row["value_bytes"]) == (p.value.decode(), None)
        else:
            assert (row["value"], row["value_bytes"]) == (None, p.value)
        assert [(h["key"], h["value"]) for h in row["headers"]] == list(p.headers)
        assert (row["dt"], row["hr"]) == hour_of(p.timestamp, dt.UTC)

    # Each file is named by the first and last offset of its rows; each hour has its marker.
    files: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        files.setdefault((r["topic"], r["dt"], r["hr"], r["file"]), []).append(r)
    for (topic, day, hour, name), in_file in files.items():
        offsets = [r["offset"] for r in in_file]
        assert offsets == sorted(offsets)
        partition = in_file[0]["partition"]
        assert name == f"part-{partition:05d}-{offsets[0]:020d}-{offsets[-1]:020d}.parquet"
        columns = pq.read_schema(out / f"topic={topic}/dt={day}/hr={hour}" / name).names
        assert columns == [
            "partition", "offset", "timestamp", "key", "value", "value_bytes", "headers"
        ]  # fmt: skip
    hour_dirs = {(t, d, h) for t, d, h, _ in files}
    for topic, day, hour in hour_dirs:
        marker = success(out, f"topic={topic}/dt={day}/hr={hour}")
        in_hour = {k: v for k, v in files.items() if k[:3] == (topic, day, hour)}
        assert marker["files"] == len(in_hour)
        assert marker["rows"] == sum(len(v) for v in in_hour.values())
    assert len({(t, d, h) for t, d, h in hour_dirs if t == "orders"}) >= 4

    # The summary counts rows per partition and hour, and reports no gap.
    assert result["gaps"] == []
    per_partition = {(p["topic"], p["partition"]): p for p in result["partitions"]}
    assert per_partition[("orders", 0)]["rows"] == 270
    assert per_partition[("orders", 0)]["end"] == 271  # 270 records + 1 control record
    assert sum(per_partition[("clicks", 0)]["hours"].values()) == 80
    summary_file = tmp_path / "ckpt" / "offsets.summary.json"
    assert json.loads(summary_file.read_text())["files"] == result["files"]
    checkpoint = json.loads((tmp_path / "ckpt" / "offsets.json").read_text())
    assert checkpoint["offsets"] == {"clicks": {"0": 80}, "orders": {"0": 271, "1": 90}}
    assert checkpoint["pending"] is None

    # Spark reads the tree back as a Hive-partitioned table.
    back = spark.read.parquet(str(out))
    assert back.count() == len(produced)
    assert {"topic", "dt", "hr", "offset", "value", "value_bytes"} <= set(back.columns)


def test_hours_follow_the_time_zone(
    spark: SparkSession, moto: str, bucket: str, partitions: Any, tmp_path: Path
) -> None:
    p = partitions("orders", 0)
    p.append(mixed_records(40, T0, 5 * 60_000, seed=0))  # 3h20m
    p.upload()
    zone = "Asia/Kolkata"  # +05:30: local hours straddle UTC hours
    job.run(options(moto, bucket, tmp_path, ("orders",), time_zone=zone), spark)
    rows = read_output(tmp_path / "out")
    assert len(rows) == 40
    tz = dt.timezone(dt.timedelta(hours=5, minutes=30))
    for r, produced in zip(sorted(rows, key=lambda r: r["offset"]), p.produced, strict=True):
        assert (r["dt"], r["hr"]) == hour_of(produced.timestamp, tz)
