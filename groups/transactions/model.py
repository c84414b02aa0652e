"""A transactional id's state, as the coordinator keeps it and `__transaction_state` stores it.

Kafka's TransactionMetadata without the states Sluice never enters: a begin starts the
transaction at once (no Empty between InitProducerId and the first write), a fenced
transaction is aborted straight under the bumped epoch (no PrepareEpochFence), and an expired
id is deleted by a tombstone (no Dead).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.offsets_topic import TopicPartition

MAX_EPOCH = 32767  # producer epochs are int16, as in a batch's header
OffsetEntry = tuple[str, int, int, str]  # topic, partition, offset, metadata


class TransactionState(enum.StrEnum):
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"

    @property
    def deciding(self) -> bool:
        """Decided, its markers (and a commit's offsets) not all written yet."""
        return self in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)

    @property
    def complete(self) -> bool:
        return self in (TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT)

    @property
    def commits(self) -> bool:
        return self in (TransactionState.PREPARE_COMMIT, TransactionState.COMPLETE_COMMIT)


class AbortCause(enum.StrEnum):
    """Why a transaction was aborted by someone other than its producer."""

    TIMEOUT = "timeout"  # it ran past its timeout_ms
    FENCED = "fenced"  # a begin of the same id while it was open
    OPERATOR = "operator"  # an operator's abort


@dataclass(frozen=True, slots=True)
class PendingOffsets:
    """A consumer group's offsets sent to the transaction: committed only when it commits,
    as the member of that generation (KIP-447)."""

    member_id: str
    generation_id: int
    offsets: tuple[OffsetEntry, ...]


@dataclass(frozen=True, slots=True)
class TransactionMetadata:
    """One transactional id: its producer id and epoch and its current (or last) transaction.
    Never changed in place: a transition makes the next one."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TransactionState
    partitions: frozenset[TopicPartition] = frozenset()
    pending_offsets: Mapping[str, PendingOffsets] = field(default_factory=dict)
    started_ms: int = 0
    updated_ms: int = 0
    principal: str | None = None  # who began it
    abort_cause: AbortCause | None = None  # an abort not asked by its producer

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready description (what `describe` shows and the state topic stores)."""
        return {
            "transactional_id": self.transactional_id,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "timeout_ms": self.timeout_ms,
            "state": self.state.value,
            "partitions": [list(tp) for tp in sorted(self.partitions)],
            "pending_offsets": {
                group: {
                    "member_id": pending.member_id,
                    "generation_id": pending.generation_id,
                    "offsets": [list(entry) for entry in pending.offsets],
                }
                for group, pending in sorted(self.pending_offsets.items())
            },
            "started_ms": self.started_ms,
            "updated_ms": self.updated_ms,
            "principal": self.principal,
            "abort_cause": None if self.abort_cause is None else self.abort_cause.value,
        }

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> TransactionMetadata:
        """The inverse of `as_dict` (KeyError, TypeError or ValueError if malformed)."""
        cause = doc.get("abort_cause")
        principal = doc.get("principal")
        return cls(
            transactional_id=str(doc["transactional_id"]),
            producer_id=int(doc["producer_id"]),
            producer_epoch=int(doc["producer_epoch"]),
            timeout_ms=int(doc["timeout_ms"]),
            state=TransactionState(doc["state"]),
            partitions=frozenset((str(t), int(p)) for t, p in doc["partitions"]),
            pending_offsets={
                str(group): PendingOffsets(
                    str(pending["member_id"]),
                    int(pending["generation_id"]),
                    tuple((str(t), int(p), int(o), str(m)) for t, p, o, m in pending["offsets"]),
                )
                for group, pending in doc["pending_offsets"].items()
            },
            started_ms=int(doc["started_ms"]),
            updated_ms=int(doc["updated_ms"]),
            principal=None if principal is None else str(principal),
            abort_cause=None if cause is None else AbortCause(cause),
        )
