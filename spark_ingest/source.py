"""The `sluice` PySpark data source: tiered segments on S3 as a DataFrame, via Arrow batches.

    spark.dataSource.register(SluiceDataSource)
    spark.read.format("sluice").option("bucket", "b").option("topics", "orders").load()

Options: `endpoint` (S3 endpoint URL; default AWS), `bucket` (required), `prefix`, and either
`topics` (a comma list: all their partitions) or `assign` (JSON `{"topic": [0, 1]}`: those
partitions only), `start_offsets` / `end_offsets` (JSON `{"topic": {"0": 123}}`; start
inclusive, end exclusive; default earliest / the newest segment's end), `apply_log_start`
("false" reads records below the manifests' log_start_offset that a listed segment still
holds, which re-running a plan made before a retention pass needs), `aborted` (JSON
`{"topic": {"0": [[producer id, first offset, ABORT marker offset], ...]}}`: the transactions
whose records to leave out, as the ingest job decides them; see transactions.py).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from spark_ingest import decode, manifest, s3
from spark_ingest.errors import IngestError
from spark_ingest.plan import Offsets, SegmentTask, parse_offsets, segment_tasks
from spark_ingest.transactions import aborted_from_json, overlapping

NAME = "sluice"
SCHEMA: StructType = from_arrow_schema(decode.SCHEMA, prefer_timestamp_ntz=False)


class ReadOptions:
    """The source's options, validated (IngestError names the bad one)."""

    def __init__(self, options: dict[str, str]) -> None:
        self.endpoint: str | None = options.get("endpoint") or None
        self.bucket = options.get("bucket", "")
        if not self.bucket:
            raise IngestError("option 'bucket' is required")
        self.prefix = manifest.clean_prefix(options.get("prefix", ""))
        names = [t.strip() for t in options.get("topics", "").split(",") if t.strip()]
        self.assign = parse_assign(options["assign"]) if options.get("assign") else None
        if (self.assign is None) == (not names):
            raise IngestError("give one of the options 'topics' (a comma list) and 'assign'")
        self.topics = sorted(self.assign) if self.assign is not None else names
        for topic in self.topics:
            manifest.check_topic(topic)
        self.start: Offsets = parse_offsets(options.get("start_offsets") or "{}", "start_offsets")
        self.end: Offsets = parse_offsets(options.get("end_offsets") or "{}", "end_offsets")
        apply = options.get("apply_log_start", "true").lower()
        if apply not in ("true", "false"):
            raise IngestError(f"option 'apply_log_start' must be true or false, not {apply!r}")
        self.apply_log_start = apply == "true"
        self.aborted = aborted_from_json(options.get("aborted") or "{}", "aborted")


def parse_assign(text: str) -> dict[str, list[int]]:
    """Parse the `assign` option: `{"topic": [partition, ...]}`."""
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise IngestError(f"bad assign: not JSON ({exc})") from exc
    if not isinstance(obj, dict) or not all(
        isinstance(parts, list) and all(type(p) is int and p >= 0 for p in parts)
        for parts in obj.values()
    ):
        raise IngestError('bad assign: expected an object like {"orders": [0, 1]}')
    return {str(topic): sorted(set(parts)) for topic, parts in obj.items()}


def load_manifests(o: ReadOptions) -> list[manifest.Manifest]:
    """The manifests of the partitions the options name; an assigned one must exist."""
    manifests = manifest.load_topics(o.endpoint, o.bucket, o.prefix, o.topics)
    if o.assign is None:
        return manifests
    found = {(m.topic, m.partition) for m in manifests}
    for topic, parts in o.assign.items():
        for p in parts:
            if (topic, p) not in found:
                raise IngestError(f"partition {topic}/{p} has no manifest in s3://{o.bucket}")
    return [m for m in manifests if m.partition in o.assign[m.topic]]


def download(endpoint: str | None, bucket: str, task: SegmentTask) -> tuple[bytes, str]:
    """One segment's bytes, checked against its manifest entry, and where they are."""
    where = f"s3://{bucket}/{task.key}"
    data = s3.get(endpoint, bucket, task.key)
    if data is None:
        raise IngestError(f"segment {where} is named by its manifest but missing")
    decode.verify(data, task.size, task.sha256, where)
    return data, where


def read_segment(endpoint: str | None, bucket: str, task: SegmentTask) -> Iterator[pa.RecordBatch]:
    """Download one segment, check it against its manifest entry, decode [lo, hi)."""
    data, where = download(endpoint, bucket, task)
    return decode.decode_segment(
        data, task.topic, task.partition, task.lo, task.hi, where, task.aborted
    )


class SluiceReader(DataSourceReader):
    """Plans one input partition per manifest segment, in (topic, partition, offset) order."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        o = self.options
        manifests = load_manifests(o)
        tasks = segment_tasks(
            manifests, o.prefix, o.start, o.end, apply_log_start=o.apply_log_start
        )
        return [
            InputPartition(
                dataclasses.replace(
                    task,
                    aborted=overlapping(
                        o.aborted.get((task.topic, task.partition), ()),
                        task.base_offset,
                        task.last_offset,
                    ),
                )
            )
            for task in tasks
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        task: SegmentTask | None = partition.value
        if task is None:  # Spark's stand-in when partitions() planned none
            return iter(())
        return read_segment(self.options.endpoint, self.options.bucket, task)


class SluiceDataSource(DataSource):
    """`spark.read.format("sluice")`: the records of tiered segments, one row per record."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        ReadOptions(dict(self.options))  # bad options fail at load(), not at the first action
        return SCHEMA

    def reader(self, schema: StructType) -> SluiceReader:
        options: dict[str, Any] = dict(self.options)
        return SluiceReader(ReadOptions(options))
