"""The internal `__consumer_offsets` topic: how group offsets and group metadata are stored in
it, which of its partitions holds a group, and the replay that rebuilds them on start.

Keys and values are JSON (the batches are flagged as JSON values, so a fetch of the topic reads
naturally); a key is the same bytes for the same thing, so compaction keeps only the latest.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from engine import batch as fmt
from engine.errors import InvalidRecord
from engine.internal_topics import CONSUMER_OFFSETS
from engine.log import ReadResult

OFFSETS_TOPIC = CONSUMER_OFFSETS
DEFAULT_PARTITIONS = 50  # offsets.topic.num.partitions
TOPIC_CONFIGS: dict[str, object] = {
    "cleanup.policy": "compact",
    "segment.bytes": 100 * 1024 * 1024,  # offsets.topic.segment.bytes
}
READ_CHUNK_BYTES = 4 * 1024 * 1024

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    metadata: str
    commit_timestamp: int


@dataclass
class StoredGroup:
    """What the topic holds for one group: committed offsets and the last metadata written."""

    offsets: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)
    metadata: dict[str, Any] | None = None


@functools.lru_cache(maxsize=4096)
def partition_for(group: str, partitions: int) -> int:
    """Kafka's choice, `Utils.abs(groupId.hashCode) % partitions`, with Java's String.hashCode;
    remembered, since a group's every call asks it again (7 µs for a 60-character name)."""
    units = group.encode("utf-16-be")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    signed = h - (1 << 32) if h & 0x80000000 else h
    return (0 if signed == -(2**31) else abs(signed)) % partitions


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return orjson.dumps(["offset", group, topic, partition])


def offset_value(committed: CommittedOffset) -> bytes:
    return orjson.dumps(
        {
            "offset": committed.offset,
            "metadata": committed.metadata,
            "commit_timestamp": committed.commit_timestamp,
        }
    )


def group_key(group: str) -> bytes:
    return orjson.dumps(["group", group])


def encode(records: Iterable[tuple[bytes, bytes | None]], max_batch_bytes: int) -> bytearray:
    """Batches for (key, value) records; a None value is a tombstone."""
    return fmt.encode_batches(
        [(key, value, [], None) for key, value in records],
        max_batch_bytes=max_batch_bytes,
        values_json=True,
    )


class CommittedLog(Protocol):
    """What a replay reads: a partition's committed range and whole batches from an offset."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...

    @property
    def log_start_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    def read(self, offset: int, max_bytes: int) -> ReadResult: ...


def committed_records(
    partition_logs: Iterable[CommittedLog],
) -> Iterator[tuple[bytes | None, bytes | None, CommittedLog]]:
    """Every committed record's key and value, in offset order, and the log it is in: what a
    coordinator's topic is replayed from (this one and `__share_group_state`)."""
    for partition_log in partition_logs:
        offset = partition_log.log_start_offset
        while offset < partition_log.high_watermark:
            data = partition_log.read(offset, READ_CHUNK_BYTES).data
            if not data:
                break
            for record in fmt.iter_records(data):
                if record.offset >= offset:
                    yield record.key, record.value, partition_log
                    offset = record.offset + 1
            offset = max(offset, fmt.scan(data, check_crc=False).headers[-1][1].next_offset)


def replay(partition_logs: Iterable[CommittedLog]) -> dict[str, StoredGroup]:
    """Every group's latest offsets and metadata, read from the committed records."""
    groups: dict[str, StoredGroup] = {}
    for key, value, where in committed_records(partition_logs):
        _apply(groups, key, value, where)
    return {name: stored for name, stored in groups.items() if stored.offsets or stored.metadata}


def _apply(
    groups: dict[str, StoredGroup],
    key: bytes | None,
    value: bytes | None,
    where: CommittedLog,
) -> None:
    try:
        parts = orjson.loads(key or b"")
        doc = None if value is None else orjson.loads(value)
        match parts:
            case ["offset", str(group), str(topic), int(partition)]:
                stored = groups.setdefault(group, StoredGroup())
                if doc is None:
                    stored.offsets.pop((topic, partition), None)
                else:
                    stored.offsets[(topic, partition)] = CommittedOffset(
                        int(doc["offset"]), str(doc["metadata"]), int(doc["commit_timestamp"])
                    )
            case ["group", str(group)]:
                groups.setdefault(group, StoredGroup()).metadata = (
                    doc if isinstance(doc, dict) else None
                )
            case _:
                raise InvalidRecord(f"unknown key {key!r}")
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, InvalidRecord) as exc:
        log.warning("%s-%d: skipped an unreadable record: %s", where.topic, where.partition, exc)
