"""The limits of one fetch, a partition's or a group member's: Kafka's `max.poll.records`,
`fetch.max.bytes`, `fetch.min.bytes` and `fetch.max.wait.ms`, checked by the caller."""

from __future__ import annotations

from dataclasses import dataclass

from engine.producer_state import Isolation


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
