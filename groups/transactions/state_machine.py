"""The transaction coordinator's decisions, without I/O: given the ids' states and a call (the
time passed in), the next state to store, or the refusal.

A call returns a `Transition` and changes nothing: the coordinator stores it in
`__transaction_state`, waits until it is on every in-sync replica, and only then `apply`s it,
so that what a client is told is what a next coordinator replays. The one exception is a
producer id's allocation, reserved at once so that two begins never get the same.

Producer ids are allocated by each coordinator partition alone: the id of the state
partition in the high bits, a per-partition counter in the low 32
(`state_partition << 32 | counter`). The counter's last value is stored with the transaction
that took it (in the same partition, in allocation order), so a replay resumes after it and an
id is never given twice, not even after the transactional id that had it was deleted.

Every begin bumps the epoch (KIP-890), so a late write or end of a previous transaction is
refused (`ProducerFenced`); a begin while the id's transaction is open aborts that one under
the next epoch first (Kafka's fencing in InitProducerId).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from engine.offsets_topic import TopicPartition
from groups.transactions.errors import (
    ConcurrentTransactions,
    InvalidTransactionTimeout,
    InvalidTxnState,
    NotTransactionOwner,
    ProducerFenced,
    TransactionTimedOut,
    UnknownTransactionalId,
)
from groups.transactions.model import (
    MAX_EPOCH,
    AbortCause,
    OffsetEntry,
    PendingOffsets,
    TransactionMetadata,
    TransactionState,
)

DEFAULT_MAX_TIMEOUT_MS = 900_000  # transaction.max.timeout.ms
COUNTER_BITS = 32
COUNTER_MASK = (1 << COUNTER_BITS) - 1

State = TransactionState


def producer_id_of(state_partition: int, counter: int) -> int:
    return state_partition << COUNTER_BITS | counter


@dataclass(frozen=True, slots=True)
class Transition:
    """What a change must store before it takes effect: the id's new state (None: the id is
    deleted) and, when a producer id was allocated, its state partition's counter value."""

    transactional_id: str
    metadata: TransactionMetadata | None
    producer_ids: tuple[int, int] | None = None  # (state partition, last counter allocated)
    changed: bool = True  # False: `metadata` is the stored state as it is, nothing to store


class TransactionStateMachine:
    """The transactional ids of the state partitions loaded here."""

    def __init__(
        self,
        partition_of: Callable[[str], int],
        max_timeout_ms: int = DEFAULT_MAX_TIMEOUT_MS,
    ) -> None:
        self.partition_of = partition_of  # which state partition holds an id
        self.max_timeout_ms = max_timeout_ms
        self.transactions: dict[str, TransactionMetadata] = {}
        self._next_counter: dict[int, int] = {}  # state partition -> its next counter

    # -- the producer's calls --------------------------------------------------------------------

    def begin(
        self, transactional_id: str, timeout_ms: int, principal: str | None, now: int
    ) -> Transition:
        """Start a transaction under a new epoch; while the id's transaction is open, the
        transition fences it instead (aborted under the next epoch; begin again once that
        abort is complete, which `ConcurrentTransactions` says until then)."""
        if not 1 <= timeout_ms <= self.max_timeout_ms:
            raise InvalidTransactionTimeout(
                f"timeout_ms {timeout_ms} is outside 1..{self.max_timeout_ms} "
                "(transaction.max.timeout.ms)"
            )
        meta = self.transactions.get(transactional_id)
        if meta is not None and meta.state.deciding:
            raise ConcurrentTransactions(
                f"the previous transaction of {transactional_id!r} is completing "
                f"({meta.state}); retry shortly"
            )
        if meta is not None and meta.state is State.ONGOING:
            _own(meta, principal)
            fenced = dataclasses.replace(
                meta,
                producer_epoch=meta.producer_epoch + 1,
                state=State.PREPARE_ABORT,
                updated_ms=now,
                abort_cause=AbortCause.FENCED,
            )
            return Transition(transactional_id, fenced)
        allocated = None
        if meta is None or meta.producer_epoch + 1 >= MAX_EPOCH:
            # the last epoch is kept for fencing a transaction of the one before
            allocated = self._allocate(transactional_id)
            producer_id, epoch = producer_id_of(*allocated), 0
        else:
            producer_id, epoch = meta.producer_id, meta.producer_epoch + 1
        began = TransactionMetadata(
            transactional_id,
            producer_id,
            epoch,
            timeout_ms,
            State.ONGOING,
            started_ms=now,
            updated_ms=now,
            principal=principal,
        )
        return Transition(transactional_id, began, allocated)

    def add_partitions(
        self,
        transactional_id: str,
        epoch: int,
        partitions: Iterable[TopicPartition],
        principal: str | None,
        now: int,
    ) -> Transition:
        """Partitions the transaction writes: each gets its marker when it ends. Partitions
        all in it already (every produce of a transaction but its first to them) change
        nothing, as Kafka's AddPartitionsToTxn."""
        meta = self._open(transactional_id, epoch, principal)
        named = frozenset(partitions)
        if named <= meta.partitions:
            return Transition(transactional_id, meta, changed=False)
        return Transition(
            transactional_id,
            dataclasses.replace(meta, partitions=meta.partitions | named, updated_ms=now),
        )

    def add_offsets(
        self,
        transactional_id: str,
        epoch: int,
        group: str,
        member_id: str,
        generation_id: int,
        offsets: Iterable[OffsetEntry],
        principal: str | None,
        now: int,
    ) -> Transition:
        """A consumer group's offsets, committed as that member and generation if the
        transaction commits (a later offset of the same partition replaces an earlier)."""
        meta = self._open(transactional_id, epoch, principal)
        old = meta.pending_offsets.get(group)
        merged = {} if old is None else {(e[0], e[1]): e for e in old.offsets}
        for entry in offsets:
            merged[(entry[0], entry[1])] = entry
        pending = dict(meta.pending_offsets)
        pending[group] = PendingOffsets(member_id, generation_id, tuple(sorted(merged.values())))
        return Transition(
            transactional_id, dataclasses.replace(meta, pending_offsets=pending, updated_ms=now)
        )

    def end(
        self, transactional_id: str, epoch: int, commit: bool, principal: str | None, now: int
    ) -> Transition:
        """Decide the transaction: PrepareCommit or PrepareAbort, whose markers are then
        written. The same decision again (a retry) is the state as it is; the other one is
        refused."""
        meta = self._current(transactional_id, epoch, principal)
        if meta.state is State.ONGOING:
            decided = State.PREPARE_COMMIT if commit else State.PREPARE_ABORT
            return Transition(
                transactional_id, dataclasses.replace(meta, state=decided, updated_ms=now)
            )
        if meta.state.commits == commit:
            return Transition(transactional_id, meta)
        if meta.abort_cause is AbortCause.TIMEOUT:
            raise _timed_out(meta)
        done = "committed" if meta.state.commits else "aborted"
        raise InvalidTxnState(
            f"the transaction of {transactional_id!r} at epoch {epoch} was {done}"
            f"{_by(meta)}; it cannot be {'committed' if commit else 'aborted'}"
        )

    # -- the coordinator's and operators' own -----------------------------------------------------

    def operator_abort(self, transactional_id: str, now: int) -> Transition:
        """An operator aborts the id's open transaction, whatever its epoch (an abort already
        decided is the state as it is)."""
        meta = self.get(transactional_id)
        if meta.state is State.ONGOING:
            aborted = dataclasses.replace(
                meta, state=State.PREPARE_ABORT, updated_ms=now, abort_cause=AbortCause.OPERATOR
            )
            return Transition(transactional_id, aborted)
        if meta.state.commits:
            raise InvalidTxnState(
                f"the transaction of {transactional_id!r} at epoch {meta.producer_epoch} is "
                f"{'committing' if meta.state.deciding else 'committed'}; it cannot be aborted"
            )
        return Transition(transactional_id, meta)

    def complete(self, transactional_id: str, now: int) -> Transition:
        """Every marker (and a commit's offsets) is written: CompleteCommit or CompleteAbort."""
        meta = self.get(transactional_id)
        if not meta.state.deciding:
            raise InvalidTxnState(f"the transaction of {transactional_id!r} is {meta.state}")
        done = State.COMPLETE_COMMIT if meta.state.commits else State.COMPLETE_ABORT
        completed = dataclasses.replace(
            meta, state=done, partitions=frozenset(), pending_offsets={}, updated_ms=now
        )
        return Transition(transactional_id, completed)

    def expired(self, now: int) -> list[str]:
        """The ids whose open transaction ran past its timeout (to abort)."""
        return sorted(tid for tid, meta in self.transactions.items() if _past_timeout(meta, now))

    def time_out(self, transactional_id: str, now: int) -> Transition:
        """Abort the id's transaction, open past its timeout (the coordinator's timer)."""
        meta = self.get(transactional_id)
        if not _past_timeout(meta, now):
            raise InvalidTxnState(
                f"the transaction of {transactional_id!r} is not open past its timeout"
            )
        aborted = dataclasses.replace(
            meta, state=State.PREPARE_ABORT, updated_ms=now, abort_cause=AbortCause.TIMEOUT
        )
        return Transition(transactional_id, aborted)

    def removable(self, now: int, expiration_ms: int) -> list[str]:
        """The ids idle with no transaction open for `expiration_ms`
        (transactional.id.expiration.ms): to delete."""
        return sorted(
            tid for tid, meta in self.transactions.items() if _idle(meta, now, expiration_ms)
        )

    def remove(self, transactional_id: str, now: int, expiration_ms: int) -> Transition:
        """Delete an id idle for `expiration_ms`; its producer id is never given again."""
        if not _idle(self.get(transactional_id), now, expiration_ms):
            raise InvalidTxnState(
                f"{transactional_id!r} has been used in the last {expiration_ms} ms"
            )
        return Transition(transactional_id, None)

    # -- applying and loading --------------------------------------------------------------------

    def apply(self, transition: Transition) -> None:
        """The transition is stored: it takes effect."""
        if transition.metadata is None:
            self.transactions.pop(transition.transactional_id, None)
        else:
            self.transactions[transition.transactional_id] = transition.metadata

    def restore(
        self,
        state_partition: int,
        transactions: Mapping[str, TransactionMetadata],
        last_counter: int | None,
    ) -> list[str]:
        """Take over a state partition as its replay left it; returns its ids whose
        transaction is decided but not complete (the new coordinator completes them: a
        PrepareCommit commits, a PrepareAbort aborts; an Ongoing one waits for its producer or
        its timeout)."""
        self.unload(state_partition)
        counters = [-1 if last_counter is None else last_counter]
        for tid, meta in transactions.items():
            self.transactions[tid] = meta
            if meta.producer_id >> COUNTER_BITS == state_partition:
                counters.append(meta.producer_id & COUNTER_MASK)
        self._next_counter[state_partition] = max(counters) + 1
        return sorted(tid for tid, meta in transactions.items() if meta.state.deciding)

    def unload(self, state_partition: int) -> list[str]:
        """A state partition left this node: forget its ids (returned)."""
        gone = [tid for tid in self.transactions if self.partition_of(tid) == state_partition]
        for tid in gone:
            del self.transactions[tid]
        self._next_counter.pop(state_partition, None)
        return gone

    def get(self, transactional_id: str) -> TransactionMetadata:
        meta = self.transactions.get(transactional_id)
        if meta is None:
            raise UnknownTransactionalId(
                f"no transaction has been begun with transactional id {transactional_id!r}"
            )
        return meta

    # -- inside ----------------------------------------------------------------------------------

    def _allocate(self, transactional_id: str) -> tuple[int, int]:
        """Reserve the id's state partition's next counter: (state partition, counter)."""
        state_partition = self.partition_of(transactional_id)
        counter = self._next_counter.get(state_partition, 0)
        self._next_counter[state_partition] = counter + 1
        return state_partition, counter

    def _current(
        self, transactional_id: str, epoch: int, principal: str | None
    ) -> TransactionMetadata:
        """The id's state, for its owner's producer of the current epoch."""
        meta = self.get(transactional_id)
        _own(meta, principal)
        if epoch != meta.producer_epoch:
            raise ProducerFenced(
                f"producer epoch {epoch} of {transactional_id!r} is not the current one: a "
                "newer producer of this transactional id has begun a transaction"
            )
        return meta

    def _open(
        self, transactional_id: str, epoch: int, principal: str | None
    ) -> TransactionMetadata:
        """The id's open transaction of this epoch, or why there is none."""
        meta = self._current(transactional_id, epoch, principal)
        if meta.state is State.ONGOING:
            return meta
        if meta.abort_cause is AbortCause.TIMEOUT:
            raise _timed_out(meta)
        raise InvalidTxnState(
            f"the transaction of {transactional_id!r} at epoch {epoch} is {meta.state}"
            f"{_by(meta)}; begin a new one"
        )


def _past_timeout(meta: TransactionMetadata, now: int) -> bool:
    return meta.state is State.ONGOING and now >= meta.started_ms + meta.timeout_ms


def _idle(meta: TransactionMetadata, now: int, expiration_ms: int) -> bool:
    return meta.state.complete and now >= meta.updated_ms + expiration_ms


def _own(meta: TransactionMetadata, principal: str | None) -> None:
    if meta.principal != principal:
        raise NotTransactionOwner(
            f"the transaction of {meta.transactional_id!r} was begun by another principal"
        )


def _timed_out(meta: TransactionMetadata) -> TransactionTimedOut:
    return TransactionTimedOut(
        f"the transaction of {meta.transactional_id!r} at epoch {meta.producer_epoch} ran past "
        f"its timeout ({meta.timeout_ms} ms) and was aborted; begin a new one"
    )


def _by(meta: TransactionMetadata) -> str:
    return {
        None: "",
        AbortCause.FENCED: " (fenced by a newer producer)",
        AbortCause.OPERATOR: " (by an operator)",
        AbortCause.TIMEOUT: " (timed out)",
    }[meta.abort_cause]
