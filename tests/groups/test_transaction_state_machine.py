"""The transaction coordinator's state machine alone: every transition and refusal, fencing,
timeouts, what a replay leaves to complete, and producer ids unique across restarts."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from groups.transactions import state_topic
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
    PendingOffsets,
    TransactionMetadata,
)
from groups.transactions.model import TransactionState as S
from groups.transactions.state_machine import TransactionStateMachine, Transition

TID = "tx"
ME = "alice"
PARTITIONS = {"tx": 3, "other": 3, "third": 7}  # each id's state partition


def machine() -> TransactionStateMachine:
    return TransactionStateMachine(lambda tid: PARTITIONS.get(tid, 0))


def do(m: TransactionStateMachine, t: Transition) -> TransactionMetadata:
    """Store (here: nothing to do) and apply a transition; the id's new state."""
    m.apply(t)
    assert t.metadata is not None
    return t.metadata


def refused(error: type[Exception], *calls: Callable[[], object]) -> None:
    """Each call raises `error`."""
    for call in calls:
        with pytest.raises(error):
            call()


def began(m: TransactionStateMachine, tid: str = TID, now: int = 0) -> TransactionMetadata:
    return do(m, m.begin(tid, 60_000, ME, now))


def test_a_first_begin_allocates_a_producer_id_of_its_state_partition_at_epoch_0() -> None:
    m = machine()
    t = m.begin(TID, 60_000, ME, 5)
    assert t.producer_ids == (3, 0)
    meta = do(m, t)
    assert (meta.producer_id, meta.producer_epoch, meta.state) == (3 << 32, 0, S.ONGOING)
    assert (meta.started_ms, meta.updated_ms, meta.principal, meta.timeout_ms) == (
        5,
        5,
        ME,
        60_000,
    )
    other = do(m, m.begin("other", 60_000, ME, 5))  # same state partition: the next counter
    assert other.producer_id == 3 << 32 | 1
    assert do(m, m.begin("third", 60_000, ME, 5)).producer_id == 7 << 32


def test_a_transition_takes_effect_only_once_applied() -> None:
    m = machine()
    meta = began(m)
    t = m.add_partitions(TID, 0, [("t", 0)], ME, 1)
    assert m.get(TID) is meta
    m.apply(t)
    assert m.get(TID).partitions == {("t", 0)}


@pytest.mark.parametrize("timeout_ms", [0, -1, 900_001])
def test_a_timeout_outside_1_to_the_maximum_is_refused(timeout_ms: int) -> None:
    with pytest.raises(InvalidTransactionTimeout):
        machine().begin(TID, timeout_ms, ME, 0)
    assert machine().begin(TID, 900_000, ME, 0).metadata is not None


def test_partitions_and_offsets_are_added_to_the_open_transaction() -> None:
    m = machine()
    began(m)
    do(m, m.add_partitions(TID, 0, [("t", 0), ("t", 1)], ME, 1))
    meta = do(m, m.add_partitions(TID, 0, [("t", 1), ("u", 0)], ME, 2))
    assert meta.partitions == {("t", 0), ("t", 1), ("u", 0)}
    assert meta.updated_ms == 2
    do(m, m.add_offsets(TID, 0, "g", "m1", 4, [("in", 0, 10, ""), ("in", 1, 5, "x")], ME, 3))
    meta = do(m, m.add_offsets(TID, 0, "g", "m2", 5, [("in", 0, 12, "y")], ME, 4))
    assert meta.pending_offsets == {
        "g": PendingOffsets("m2", 5, (("in", 0, 12, "y"), ("in", 1, 5, "x")))
    }


def test_partitions_all_in_the_transaction_already_change_nothing() -> None:
    m = machine()
    began(m)
    meta = do(m, m.add_partitions(TID, 0, [("t", 0), ("t", 1)], ME, 1))
    again = m.add_partitions(TID, 0, [("t", 1), ("t", 0)], ME, 2)
    assert (again.metadata, again.changed) == (meta, False)  # the state as it is, not stored
    assert meta.updated_ms == 1
    more = m.add_partitions(TID, 0, [("t", 1), ("u", 0)], ME, 3)
    assert more.changed and more.metadata is not None
    assert more.metadata.partitions == {("t", 0), ("t", 1), ("u", 0)}
    refused(ProducerFenced, lambda: m.add_partitions(TID, 1, [("t", 0)], ME, 4))
    do(m, m.end(TID, 0, True, ME, 5))
    refused(InvalidTxnState, lambda: m.add_partitions(TID, 0, [("t", 0)], ME, 6))


def test_commit_decides_then_completes_and_clears_the_transaction() -> None:
    m = machine()
    began(m)
    do(m, m.add_partitions(TID, 0, [("t", 0)], ME, 1))
    do(m, m.add_offsets(TID, 0, "g", "m", 1, [("in", 0, 3, "")], ME, 1))
    decided = do(m, m.end(TID, 0, True, ME, 2))
    assert decided.state is S.PREPARE_COMMIT
    assert decided.partitions == {("t", 0)}  # still there: the markers to write
    assert "g" in decided.pending_offsets
    done = do(m, m.complete(TID, 3))
    assert (done.state, set(done.partitions), dict(done.pending_offsets)) == (
        S.COMPLETE_COMMIT,
        set(),
        {},
    )
    assert done.producer_epoch == 0


def test_abort_decides_then_completes() -> None:
    m = machine()
    began(m)
    assert do(m, m.end(TID, 0, False, ME, 1)).state is S.PREPARE_ABORT
    done = do(m, m.complete(TID, 2))
    assert (done.state, done.abort_cause) == (S.COMPLETE_ABORT, None)


@pytest.mark.parametrize("complete", [False, True])
@pytest.mark.parametrize("commit", [False, True])
def test_the_same_end_again_is_the_state_as_it_is(commit: bool, complete: bool) -> None:
    """A retried commit (or abort) succeeds, whether the first is completing or complete."""
    m = machine()
    began(m)
    do(m, m.end(TID, 0, commit, ME, 1))
    if complete:
        do(m, m.complete(TID, 2))
    before = m.get(TID)
    assert m.end(TID, 0, commit, ME, 3) == Transition(TID, before)


@pytest.mark.parametrize("complete", [False, True])
@pytest.mark.parametrize("commit", [False, True])
def test_the_other_end_after_a_decision_is_refused(commit: bool, complete: bool) -> None:
    m = machine()
    began(m)
    do(m, m.end(TID, 0, commit, ME, 1))
    if complete:
        do(m, m.complete(TID, 2))
    with pytest.raises(InvalidTxnState):
        m.end(TID, 0, not commit, ME, 3)


@pytest.mark.parametrize("complete", [False, True])
def test_adding_to_a_decided_transaction_is_refused(complete: bool) -> None:
    m = machine()
    began(m)
    do(m, m.end(TID, 0, True, ME, 1))
    if complete:
        do(m, m.complete(TID, 2))
    with pytest.raises(InvalidTxnState):
        m.add_partitions(TID, 0, [("t", 0)], ME, 3)
    with pytest.raises(InvalidTxnState):
        m.add_offsets(TID, 0, "g", "m", 1, [], ME, 3)


def test_unknown_ids_are_refused() -> None:
    m = machine()
    refused(
        UnknownTransactionalId,
        lambda: m.add_partitions(TID, 0, [], ME, 0),
        lambda: m.add_offsets(TID, 0, "g", "m", 1, [], ME, 0),
        lambda: m.end(TID, 0, True, ME, 0),
        lambda: m.operator_abort(TID, 0),
        lambda: m.get(TID),
        lambda: m.remove(TID, 0, 0),
        lambda: m.time_out(TID, 0),
    )


def test_another_principals_calls_are_refused() -> None:
    m = machine()
    began(m)
    refused(
        NotTransactionOwner,
        lambda: m.begin(TID, 1000, "mallory", 0),
        lambda: m.add_partitions(TID, 0, [], "mallory", 0),
        lambda: m.add_offsets(TID, 0, "g", "m", 1, [], "mallory", 0),
        lambda: m.end(TID, 0, False, "mallory", 0),
        lambda: m.end(TID, 0, True, None, 0),
    )


def test_another_principal_may_begin_once_the_transaction_is_complete() -> None:
    m = machine()
    began(m)
    do(m, m.end(TID, 0, True, ME, 1))
    do(m, m.complete(TID, 2))
    meta = do(m, m.begin(TID, 1000, "bob", 3))
    assert (meta.principal, meta.producer_epoch) == ("bob", 1)


def test_every_begin_bumps_the_epoch_and_fences_the_previous_one() -> None:
    m = machine()
    first = began(m)
    do(m, m.end(TID, 0, True, ME, 1))
    do(m, m.complete(TID, 2))
    second = do(m, m.begin(TID, 60_000, ME, 3))
    assert (second.producer_id, second.producer_epoch) == (first.producer_id, 1)
    assert second.started_ms == 3
    refused(
        ProducerFenced,
        lambda: m.add_partitions(TID, 0, [("t", 0)], ME, 4),
        lambda: m.add_offsets(TID, 0, "g", "m", 1, [], ME, 4),
        lambda: m.end(TID, 0, True, ME, 4),  # the previous epoch's retried commit
        lambda: m.end(TID, 2, True, ME, 4),  # an epoch never given
    )


def test_a_begin_while_the_transaction_is_open_aborts_it_under_the_next_epoch() -> None:
    m = machine()
    began(m)
    do(m, m.add_partitions(TID, 0, [("t", 0)], ME, 1))
    fence = m.begin(TID, 60_000, ME, 2)
    assert fence.producer_ids is None
    fenced = do(m, fence)
    assert (fenced.state, fenced.producer_epoch, fenced.abort_cause) == (
        S.PREPARE_ABORT,
        1,
        AbortCause.FENCED,
    )
    assert fenced.partitions == {("t", 0)}  # their ABORT markers, under epoch 1
    with pytest.raises(ConcurrentTransactions):  # until that abort is complete
        m.begin(TID, 60_000, ME, 3)
    with pytest.raises(ProducerFenced):  # the zombie's commit
        m.end(TID, 0, True, ME, 3)
    do(m, m.complete(TID, 4))
    new = do(m, m.begin(TID, 60_000, ME, 5))
    assert (new.state, new.producer_epoch, set(new.partitions)) == (S.ONGOING, 2, set())
    with pytest.raises(ProducerFenced):
        m.add_partitions(TID, 0, [("t", 1)], ME, 6)


@pytest.mark.parametrize("commit", [False, True])
def test_a_begin_while_the_previous_transaction_completes_is_retriable(commit: bool) -> None:
    m = machine()
    began(m)
    do(m, m.end(TID, 0, commit, ME, 1))
    with pytest.raises(ConcurrentTransactions):
        m.begin(TID, 60_000, ME, 2)


def test_an_exhausted_epoch_takes_a_new_producer_id() -> None:
    m = machine()
    first = began(m)
    last = dataclasses.replace(
        first, producer_epoch=MAX_EPOCH - 2, state=S.COMPLETE_COMMIT, partitions=frozenset()
    )
    m.apply(Transition(TID, last))
    top = do(m, m.begin(TID, 1000, ME, 1))
    assert (top.producer_id, top.producer_epoch) == (first.producer_id, MAX_EPOCH - 1)
    # the last epoch stays free to fence this one with
    assert do(m, m.begin(TID, 1000, ME, 2)).producer_epoch == MAX_EPOCH
    do(m, m.complete(TID, 3))
    t = m.begin(TID, 1000, ME, 4)
    assert t.producer_ids == (3, 1)
    assert t.metadata is not None
    assert (t.metadata.producer_id, t.metadata.producer_epoch) == (3 << 32 | 1, 0)


def test_an_open_transaction_past_its_timeout_is_aborted_and_its_producer_told() -> None:
    m = machine()
    began(m, now=1000)
    do(m, m.add_partitions(TID, 0, [("t", 0)], ME, 30_000))  # activity does not extend it
    assert m.expired(60_999) == []
    with pytest.raises(InvalidTxnState):
        m.time_out(TID, 60_999)
    assert m.expired(61_000) == [TID]
    t = m.time_out(TID, 61_000)
    assert t is not None
    aborted = do(m, t)
    assert (aborted.state, aborted.producer_epoch, aborted.abort_cause) == (
        S.PREPARE_ABORT,
        0,
        AbortCause.TIMEOUT,
    )
    assert m.expired(100_000) == []
    for complete in (False, True):
        if complete:
            do(m, m.complete(TID, 61_001))
        refused(
            TransactionTimedOut,
            lambda: m.end(TID, 0, True, ME, 61_002),
            lambda: m.add_partitions(TID, 0, [("t", 1)], ME, 61_002),
            lambda: m.add_offsets(TID, 0, "g", "m", 1, [], ME, 61_002),
        )
        # its producer's own abort agrees with what happened
        assert m.end(TID, 0, False, ME, 61_002).metadata == m.get(TID)


def test_a_decided_transaction_does_not_time_out() -> None:
    m = machine()
    began(m)
    do(m, m.end(TID, 0, True, ME, 1))
    assert m.expired(10**9) == []
    with pytest.raises(InvalidTxnState):
        m.time_out(TID, 10**9)


def test_an_operator_aborts_an_open_transaction_whatever_its_epoch() -> None:
    m = machine()
    began(m)
    aborted = do(m, m.operator_abort(TID, 1))
    assert (aborted.state, aborted.abort_cause) == (S.PREPARE_ABORT, AbortCause.OPERATOR)
    assert m.operator_abort(TID, 2).metadata == aborted  # again: as it is
    with pytest.raises(InvalidTxnState, match="by an operator"):
        m.end(TID, 0, True, ME, 2)
    do(m, m.complete(TID, 3))
    assert m.operator_abort(TID, 4).metadata == m.get(TID)


@pytest.mark.parametrize("complete", [False, True])
def test_an_operator_cannot_abort_a_commit(complete: bool) -> None:
    m = machine()
    began(m)
    do(m, m.end(TID, 0, True, ME, 1))
    if complete:
        do(m, m.complete(TID, 2))
    with pytest.raises(InvalidTxnState):
        m.operator_abort(TID, 3)


@pytest.mark.parametrize("state", [S.ONGOING, S.COMPLETE_COMMIT, S.COMPLETE_ABORT])
def test_only_a_decided_transaction_completes(state: S) -> None:
    m = machine()
    m.apply(Transition(TID, dataclasses.replace(began(m), state=state)))
    with pytest.raises(InvalidTxnState):
        m.complete(TID, 1)


def test_ids_idle_past_the_expiration_are_removed() -> None:
    m = machine()
    began(m, "tx", now=0)
    began(m, "other", now=0)
    do(m, m.end("tx", 0, True, ME, 10))
    assert m.removable(10**9, 100) == []  # decided, not complete
    do(m, m.complete("tx", 20))
    assert m.removable(119, 100) == []
    assert m.removable(120, 100) == ["tx"]  # "other" is open: never removed
    refused(
        InvalidTxnState,
        lambda: m.remove("tx", 119, 100),
        lambda: m.remove("other", 10**9, 100),
    )
    t = m.remove("tx", 120, 100)
    assert t == Transition("tx", None)
    m.apply(t)
    assert "tx" not in m.transactions


def test_a_replay_completes_decided_transactions_and_leaves_open_ones() -> None:
    m = machine()
    for tid in ("a", "b", "c", "d"):
        began(m, tid)
    do(m, m.end("a", 0, True, ME, 1))
    do(m, m.end("b", 0, False, ME, 1))
    do(m, m.end("d", 0, True, ME, 1))
    do(m, m.complete("d", 2))
    stored = dict(m.transactions)
    fresh = machine()
    assert fresh.restore(0, stored, 3) == ["a", "b"]
    assert fresh.get("a").state is S.PREPARE_COMMIT
    assert fresh.get("b").state is S.PREPARE_ABORT
    assert fresh.get("c").state is S.ONGOING
    assert do(fresh, fresh.complete("a", 3)).state is S.COMPLETE_COMMIT
    assert do(fresh, fresh.complete("b", 3)).state is S.COMPLETE_ABORT
    assert fresh.expired(59_999) == []
    assert fresh.expired(60_000) == ["c"]  # timed from its first begin, not the replay


def test_a_restore_replaces_what_the_partition_held_and_unload_forgets_it() -> None:
    m = machine()
    began(m, "tx")  # partition 3
    began(m, "third")  # partition 7
    assert m.restore(3, {}, None) == []
    assert set(m.transactions) == {"third"}
    assert m.unload(7) == ["third"]
    assert m.transactions == {}


def test_producer_ids_stay_unique_across_restarts_and_deleted_ids() -> None:
    """A new coordinator resumes each partition's counter after the last stored, even when
    the ids that took the last ones were deleted since (their tombstones compacted)."""
    m = machine()
    log: list[Transition] = []

    def stored(t: Transition) -> None:
        log.append(t)
        m.apply(t)

    for tid in ("tx", "other"):
        stored(m.begin(tid, 1000, ME, 0))
    given = {meta.producer_id for meta in m.transactions.values()}
    stored(m.end("other", 0, True, ME, 1))
    stored(m.complete("other", 2))
    stored(m.remove("other", 2, 0))
    # The replay of partition 3's records (the tombstone of "other" applied)
    replayed = state_topic.Replayed()
    last = None
    for t in log:
        if t.producer_ids is not None:
            last = t.producer_ids[1]
        if t.metadata is None:
            replayed.pop(t.transactional_id, None)
        else:
            replayed[t.transactional_id] = t.metadata
    restarted = machine()
    restarted.restore(3, replayed, last)
    again = do(restarted, restarted.begin("other", 1000, ME, 3))
    assert again.producer_id not in given
    assert again.producer_id == 3 << 32 | 2
    # Without the counter record, the ids still held are never given again either.
    bare = machine()
    bare.restore(3, {"tx": m.get("tx")}, None)
    assert do(bare, bare.begin("other", 1000, ME, 3)).producer_id == 3 << 32 | 1
