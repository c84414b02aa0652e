"""The limits of one fetch, a partition's or a group member's: Kafka's `max.poll.records`,
`fetch.max.bytes`, `fetch.min.bytes` and `fetch.max.wait.ms`, checked by the caller; and where
`latest` is for a reader at an isolation level."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from engine.producer_state import Isolation


class Marks(Protocol):
    """A partition replica's marks (a `Partition`, a `PartitionLog`)."""

    @property
    def high_watermark(self) -> int: ...

    @property
    def last_stable_offset(self) -> int: ...


def latest_offset(partition: Marks, isolation: Isolation) -> int:
    """Where `latest` is for a reader at `isolation`, as Kafka's ListOffsets answers it: the
    last stable offset at read_committed (a reader starting there reads the records of a
    transaction open now once it commits; from the high watermark it would pass them over),
    the high watermark otherwise."""
    if isolation is Isolation.READ_COMMITTED:
        return partition.last_stable_offset
    return partition.high_watermark


@dataclass(frozen=True)
class FetchLimits:
    """At most `max_records` records and about `max_bytes` bytes; a long-poll answers once
    `min_bytes` are there or after `timeout_ms`."""

    max_records: int
    max_bytes: int
    min_bytes: int
    timeout_ms: int
    # Kafka's isolation.level: read_committed reads below the last stable offset, never an
    # aborted transaction's records.
    isolation: Isolation = Isolation.READ_UNCOMMITTED
