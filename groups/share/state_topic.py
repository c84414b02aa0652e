"""The internal `__share_group_state` topic: how share groups are stored in it, and the replay
that rebuilds them on the node that comes to lead one of its partitions.

As `__consumer_offsets`, keys and values are JSON and a key is the same bytes for the same
thing, so compaction keeps the latest of each: a group's record (its configs and members) and
one record per share-partition (its window, `SharePartition.snapshot`). A null value deletes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from engine.errors import InvalidRecord
from engine.internal_topics import SHARE_GROUP_STATE
from engine.offsets_topic import CommittedLog, TopicPartition, committed_records
from groups.share.partition_state import check_snapshot

STATE_TOPIC = SHARE_GROUP_STATE
DEFAULT_PARTITIONS = 50  # share.coordinator.state.topic.num.partitions
TOPIC_CONFIGS: dict[str, object] = {
    "cleanup.policy": "compact",
    "segment.bytes": 100 * 1024 * 1024,  # share.coordinator.state.topic.segment.bytes
    # share.coordinator.state.topic.min.isr: a state write is answered once on two replicas
    # (no more than the topic has: a single node's one)
    "min.insync.replicas": 2,
}

log = logging.getLogger(__name__)


@dataclass
class StoredShareGroup:
    """What the topic holds for one share group."""

    metadata: dict[str, Any] | None = None  # {"configs": {...}, "members": [...]}
    partitions: dict[TopicPartition, dict[str, Any]] = field(default_factory=dict)


def group_key(group: str) -> bytes:
    return orjson.dumps(["share_group", group])


def partition_key(group: str, topic: str, partition: int) -> bytes:
    return orjson.dumps(["share_partition", group, topic, partition])


def replay(partition_logs: Iterable[CommittedLog]) -> dict[str, StoredShareGroup]:
    """Every share group's latest record and windows, read from the committed records."""
    groups: dict[str, StoredShareGroup] = {}
    for key, value, where in committed_records(partition_logs):
        _apply(groups, key, value, where)
    return {n: g for n, g in groups.items() if g.metadata is not None or g.partitions}


def _apply(
    groups: dict[str, StoredShareGroup],
    key: bytes | None,
    value: bytes | None,
    where: CommittedLog,
) -> None:
    try:
        parts = orjson.loads(key or b"")
        doc = None if value is None else orjson.loads(value)
        if doc is not None and not isinstance(doc, dict):
            raise InvalidRecord(f"a value that is not an object under {key!r}")
        match parts:
            case ["share_group", str(group)]:
                groups.setdefault(group, StoredShareGroup()).metadata = doc
            case ["share_partition", str(group), str(topic), int(partition)]:
                if doc is not None:
                    check_snapshot(doc)  # a window that cannot be restored is not taken
                stored = groups.setdefault(group, StoredShareGroup())
                if doc is None:
                    stored.partitions.pop((topic, partition), None)
                else:
                    stored.partitions[(topic, partition)] = doc
            case _:
                raise InvalidRecord(f"unknown key {key!r}")
    except (orjson.JSONDecodeError, InvalidRecord) as exc:
        log.warning("%s-%d: skipped an unreadable record: %s", where.topic, where.partition, exc)
