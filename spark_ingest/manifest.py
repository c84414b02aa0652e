"""The tiered-storage contract (docs/tiering.md): object keys and partition manifests.

A manifest is the commit point of a partition's uploads; everything it names exists. The
engine's reader of the format parses it (a malformed one is an IngestError naming the
object); this module keeps what ingestion needs of it and lists a topic's partitions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from engine.config import validate_topic_name
from engine.errors import InvalidTopicName
from engine.tiered.manifest import ManifestError, decode_manifest, partition_prefix, topic_prefix
from spark_ingest import s3
from spark_ingest.errors import IngestError


@dataclass(frozen=True)
class SegmentEntry:
    """One uploaded segment: offsets `base_offset..last_offset`, `records` data records."""

    base_offset: int
    last_offset: int
    records: int
    size: int
    sha256: str
    first_timestamp: int
    max_timestamp: int


@dataclass(frozen=True)
class Manifest:
    """A partition's committed segments, in offset order, and its logical log start."""

    topic: str
    partition: int
    log_start_offset: int
    segments: tuple[SegmentEntry, ...]

    @property
    def end_offset(self) -> int:
        """The offset after the newest segment (the log start when there is none)."""
        if not self.segments:
            return self.log_start_offset
        return self.segments[-1].last_offset + 1

    @property
    def first_available(self) -> int:
        """The lowest offset a reader can still get: above both the log start and the gone."""
        if not self.segments:
            return self.log_start_offset
        return max(self.log_start_offset, self.segments[0].base_offset)


def clean_prefix(prefix: str) -> str:
    """The key prefix as the uploader writes it: no leading or trailing '/'."""
    return prefix.strip("/")


def manifest_key(prefix: str, topic: str, partition: int) -> str:
    return f"{partition_prefix(prefix, topic, partition)}manifest.json"


def segment_key(prefix: str, topic: str, partition: int, base_offset: int, last_offset: int) -> str:
    return f"{partition_prefix(prefix, topic, partition)}{base_offset:020d}-{last_offset:020d}.log"


def check_topic(topic: str) -> str:
    """A Kafka topic name (letters, digits, '.', '_', '-'), else IngestError."""
    try:
        return validate_topic_name(topic)
    except InvalidTopicName as exc:
        raise IngestError(f"bad topic name {topic!r}: {exc}") from None


def parse_manifest(data: bytes, where: str, topic: str, partition: int) -> Manifest:
    """Parse and validate the manifest stored at `where` for `topic`/`partition`, with the
    engine's own reader of the format."""
    try:
        parsed = decode_manifest(data)
    except ManifestError as exc:
        raise IngestError(f"malformed manifest {where}: {exc}") from None
    if (parsed.topic, parsed.partition) != (topic, partition):
        raise IngestError(
            f"malformed manifest {where}: names {parsed.topic!r}/{parsed.partition!r}, "
            f"not {topic}/{partition}"
        )
    entries = tuple(
        SegmentEntry(
            s.base_offset,
            s.last_offset,
            s.records,
            s.size,
            s.sha256,
            s.first_timestamp,
            s.max_timestamp,
        )
        for s in parsed.segments
    )
    return Manifest(topic, partition, parsed.log_start_offset, entries)


def load_topic(endpoint: str | None, bucket: str, prefix: str, topic: str) -> list[Manifest]:
    """Every committed partition manifest of `topic`, by partition number.

    A partition directory without a manifest (its first upload crashed before the commit)
    holds nothing committed and is left out; a topic without any manifest is unknown.
    """
    base = topic_prefix(prefix, topic)
    numbers = sorted(
        int(name)
        for name in (p[len(base) :].rstrip("/") for p in s3.list_prefixes(endpoint, bucket, base))
        if name.isdigit()
    )
    manifests: list[Manifest] = []
    for number in numbers:
        key = manifest_key(prefix, topic, number)
        data = s3.get(endpoint, bucket, key)
        if data is not None:
            manifests.append(parse_manifest(data, f"s3://{bucket}/{key}", topic, number))
    if not manifests:
        raise IngestError(f"unknown topic {topic!r}: no manifest under s3://{bucket}/{base}")
    return manifests


def load_topics(
    endpoint: str | None, bucket: str, prefix: str, topics: Iterable[str]
) -> list[Manifest]:
    """The manifests of every partition of `topics`, ordered by topic then partition."""
    return [m for topic in sorted(set(topics)) for m in load_topic(endpoint, bucket, prefix, topic)]
