"""The internal `__transaction_state` topic: how transactional ids are stored in it, and the
replay that rebuilds them on the node that comes to lead one of its partitions.

As `__consumer_offsets`, keys and values are JSON and a key is the same bytes for the same
thing, so compaction keeps the latest of each: one record per transactional id (its
`TransactionMetadata`; a null value deletes it) and one per partition for the last producer
id counter it allocated.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import orjson

from engine.errors import InvalidRecord
from engine.internal_topics import TRANSACTION_STATE
from engine.offsets_topic import CommittedLog, committed_records
from groups.transactions.model import TransactionMetadata
from groups.transactions.state_machine import Transition

STATE_TOPIC = TRANSACTION_STATE
DEFAULT_PARTITIONS = 50  # transaction.state.log.num.partitions
TOPIC_CONFIGS: dict[str, object] = {
    "cleanup.policy": "compact",
    "segment.bytes": 100 * 1024 * 1024,  # transaction.state.log.segment.bytes
    # transaction.state.log.min.isr: a state write is answered once on two replicas (no more
    # than the topic has: a single node's one)
    "min.insync.replicas": 2,
}
COUNTER_KEY = orjson.dumps(["producer_ids"])

log = logging.getLogger(__name__)


class Replayed(dict[str, TransactionMetadata]):
    """A replay's transactional ids, and each replayed partition's last producer id counter
    (None: it has allocated none)."""

    def __init__(self) -> None:
        super().__init__()
        self.last_counters: dict[int, int | None] = {}


def transaction_key(transactional_id: str) -> bytes:
    return orjson.dumps(["transaction", transactional_id])


def records(transition: Transition) -> list[tuple[bytes, bytes | None]]:
    """The records that store a transition (the counter first: it is never behind an id)."""
    out: list[tuple[bytes, bytes | None]] = []
    if transition.producer_ids is not None:
        out.append((COUNTER_KEY, orjson.dumps({"last": transition.producer_ids[1]})))
    meta = transition.metadata
    value = None if meta is None else orjson.dumps(meta.as_dict())
    out.append((transaction_key(transition.transactional_id), value))
    return out


def replay(partition_logs: Iterable[CommittedLog]) -> Replayed:
    """Every transactional id's latest state, and the counters, from the committed records."""
    replayed = Replayed()
    for partition_log in partition_logs:
        replayed.last_counters[partition_log.partition] = None
        for key, value, where in committed_records([partition_log]):
            _apply(replayed, key, value, where)
    return replayed


def _apply(replayed: Replayed, key: bytes | None, value: bytes | None, where: CommittedLog) -> None:
    try:
        parts = orjson.loads(key or b"")
        doc: Any = None if value is None else orjson.loads(value)
        if doc is not None and not isinstance(doc, dict):
            raise InvalidRecord(f"a value that is not an object under {key!r}")
        match parts:
            case ["transaction", str(transactional_id)]:
                if doc is None:
                    replayed.pop(transactional_id, None)
                else:
                    replayed[transactional_id] = TransactionMetadata.from_dict(doc)
            case ["producer_ids"] if doc is not None:
                last = int(doc["last"])
                known = replayed.last_counters.get(where.partition)
                replayed.last_counters[where.partition] = (
                    last if known is None else max(known, last)
                )
            case _:
                raise InvalidRecord(f"unknown key {key!r}")
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, InvalidRecord) as exc:
        log.warning("%s-%d: skipped an unreadable record: %s", where.topic, where.partition, exc)
