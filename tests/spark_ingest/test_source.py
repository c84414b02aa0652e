"""The `sluice` data source read directly, and the uploaded objects read by another decoder."""

from __future__ import annotations

import json
from typing import Any

import boto3
from kafka.record.memory_records import MemoryRecords
from pyspark.sql import SparkSession

from tests.spark_ingest.tiered import T0, Produced, json_records, mixed_records


def load(partitions: Any) -> list[Produced]:
    p0 = partitions("orders", 0)
    for seed in (0, 30, 60):
        p0.append(mixed_records(30, T0 + seed * 1_000, 1_000, seed=seed), compression="zstd")
        p0.upload()  # segments [0, 29], [30, 59], [60, 89]
    p1 = partitions("orders", 1)
    p1.append(json_records(20, T0, 1_000, seed=0), values_json=True)
    p1.append_commit_marker(T0 + 20_000)
    p1.upload()  # segment [0, 20], offset 20 the marker
    return [*p0.produced, *p1.produced]


def test_one_input_partition_per_segment_and_offset_bounds(
    spark: SparkSession, moto: str, bucket: str, partitions: Any
) -> None:
    produced = load(partitions)

    def read(**options: str) -> Any:
        reader = spark.read.format("sluice").option("endpoint", moto).option("bucket", bucket)
        return reader.option("prefix", "/tier/").options(**options).load()

    everything = read(topics="orders")
    assert everything.rdd.getNumPartitions() == 4
    assert sorted(tuple(r) for r in everything.select("partition", "offset").collect()) == sorted(
        (p.partition, p.offset) for p in produced
    )
    assert everything.schema.simpleString() == (
        "struct<topic:string,partition:int,offset:bigint,timestamp:timestamp,key:binary,"
        "value:string,value_bytes:binary,headers:array<struct<key:string,value:binary>>>"
    )

    bounded = read(
        topics="orders",
        start_offsets=json.dumps({"orders": {"0": 25}}),
        end_offsets=json.dumps({"orders": {"0": 61, "1": 5}}),
    )
    assert bounded.rdd.getNumPartitions() == 4  # [0, 29], [30, 59], [60, 89] and p1's
    offsets = sorted(tuple(r) for r in bounded.select("partition", "offset").collect())
    assert offsets == [(0, o) for o in range(25, 61)] + [(1, o) for o in range(5)]

    assigned = read(assign=json.dumps({"orders": [1]}))
    assert assigned.count() == 20  # the commit marker is no record

    nothing = read(topics="orders", start_offsets=json.dumps({"orders": {"0": 90, "1": 21}}))
    assert nothing.count() == 0


def test_log_append_time_is_the_record_timestamp(
    spark: SparkSession, moto: str, bucket: str, partitions: Any
) -> None:
    p = partitions("orders", 0, message_timestamp_type="LogAppendTime")
    p.append(mixed_records(5, T0, 1_000, seed=0))
    p.upload()
    reader = spark.read.format("sluice").option("endpoint", moto).option("bucket", bucket)
    df = reader.option("prefix", "tier").option("topics", "orders").load()
    stamped = {p.produced[0].timestamp * 1000}  # the broker's append time, for every record
    assert p.produced[0].timestamp != T0
    assert {r[0] for r in df.selectExpr("unix_micros(timestamp)").collect()} == stamped


def test_log_start_offset_hides_deleted_records(
    spark: SparkSession, moto: str, bucket: str, partitions: Any
) -> None:
    p = partitions("orders", 0)
    p.append(mixed_records(10, T0, 1_000, seed=0))
    p.upload(log_start_offset=4)  # DELETE records below 4: the segment still holds them
    reader = spark.read.format("sluice").option("endpoint", moto).option("bucket", bucket)
    df = reader.option("prefix", "tier").option("topics", "orders").load()
    assert sorted(r.offset for r in df.select("offset").collect()) == list(range(4, 10))


def test_uploaded_segments_decode_with_kafka_python(
    moto: str, bucket: str, partitions: Any
) -> None:
    produced = load(partitions)
    s3 = boto3.client("s3", endpoint_url=moto)
    decoded = []
    for topic_partition in ("orders/0", "orders/1"):
        prefix = f"tier/{topic_partition}/"
        manifest = json.loads(
            s3.get_object(Bucket=bucket, Key=f"{prefix}manifest.json")["Body"].read()
        )
        for segment in manifest["segments"]:
            name = f"{segment['base_offset']:020d}-{segment['last_offset']:020d}.log"
            records = MemoryRecords(s3.get_object(Bucket=bucket, Key=prefix + name)["Body"].read())
            count = 0
            while (batch := records.next_batch()) is not None:
                assert batch.validate_crc()
                if batch.is_control_batch:
                    continue
                for r in batch:
                    count += 1
                    decoded.append(
                        Produced(
                            "orders", int(topic_partition[-1]), r.offset, r.timestamp, r.key,
                            r.value, tuple(r.headers),
                        )
                    )  # fmt: skip
            assert count == segment["records"]
    assert decoded == produced
