"""A share-partition's window as plain state (groups.share.partition_state): every transition
and every refusal, the stored form, and properties over random runs: an accepted record is
never acquired again, a delivery count never goes down nor past the limit, no record has two
holders while their locks hold, the start only moves forward over done records, and every
record ends accepted or archived."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groups.share.partition_state import (
    AckRefused,
    AckType,
    RecordState,
    ShareConfig,
    SharePartition,
)

CONFIG = ShareConfig(lock_ms=1_000, delivery_limit=3, max_record_locks=100)
A, B = "member-a", "member-b"


def window(start: int = 0, config: ShareConfig = CONFIG) -> SharePartition:
    return SharePartition(start, config)


def refused(w: SharePartition, code: str, *args: Any) -> None:
    """The acknowledgement is refused with `code` and changes nothing."""
    before = w.snapshot()
    with pytest.raises(AckRefused) as caught:
        w.acknowledge(*args)
    assert caught.value.code == code
    assert w.snapshot() == before


# -- acquire ------------------------------------------------------------------------------------


def test_acquiring_new_records_counts_a_delivery_and_locks_them() -> None:
    w = window(5)
    done = w.acquire([5, 6, 9], A, 100)  # 7 and 8: not in the log (compacted, control)
    assert [(t.offset, t.delivery_count, t.cause) for t in done] == [
        (5, 1, "acquired"),
        (6, 1, "acquired"),
        (9, 1, "acquired"),
    ]
    assert (w.start, w.end) == (5, 10)
    assert {o: (r.state, r.member, r.deadline_ms) for o, r in w.records.items()} == {
        o: (RecordState.ACQUIRED, A, 1_100) for o in (5, 6, 9)
    }
    assert w.held_by(A) == [5, 6, 9] and w.held_by(B) == []


def test_only_available_and_due_records_and_new_ones_with_room_are_acquired() -> None:
    w = window(config=ShareConfig(1_000, 3, 2))
    w.acquire([0, 1], A, 0)
    assert w.room == 0
    with pytest.raises(ValueError, match="full"):
        w.acquire([2], A, 0)
    with pytest.raises(ValueError, match="not available"):
        w.acquire([0], B, 0)  # held
    w.acknowledge(0, 1, A, AckType.RELEASE, 0, delay_ms=500)
    with pytest.raises(ValueError, match="not available"):
        w.acquire([0], B, 499)  # released with a delay: not due yet
    assert w.available(499) == [] and w.available(500) == [0]
    assert [t.delivery_count for t in w.acquire([0], B, 500)] == [2]


def test_an_offset_inside_the_window_that_it_does_not_hold_cannot_be_acquired() -> None:
    w = window()
    w.acquire([0, 3], A, 0)
    with pytest.raises(ValueError, match="not in the window"):
        w.acquire([1], A, 0)


# -- acknowledge -------------------------------------------------------------------------------


def test_accept_moves_the_start_past_the_done_records_at_the_front() -> None:
    w = window()
    w.acquire([0, 1, 2], A, 0)
    assert w.acknowledge(1, 1, A, AckType.ACCEPT, 10).state is RecordState.ACKNOWLEDGED
    assert w.start == 0  # 0 is still held
    w.acknowledge(0, 1, A, AckType.ACCEPT, 10)
    assert w.start == 2 and list(w.records) == [2]


def test_reject_archives() -> None:
    w = window()
    w.acquire([0], A, 0)
    done = w.acknowledge(0, 1, A, AckType.REJECT, 10)
    assert (done.state, done.cause) == (RecordState.ARCHIVED, "rejected")
    assert w.start == 1 and w.records == {}


def test_release_gives_back_at_once_and_at_the_limit_archives() -> None:
    w = window()
    for delivery in (1, 2):
        w.acquire([0], A, 0)
        done = w.acknowledge(0, delivery, A, AckType.RELEASE, 10)
        assert (done.state, done.cause) == (RecordState.AVAILABLE, "released")
    w.acquire([0], A, 0)
    done = w.acknowledge(0, 3, A, AckType.RELEASE, 10)
    assert (done.state, done.delivery_count) == (RecordState.ARCHIVED, 3)
    assert w.start == 1


def test_renew_moves_the_deadline() -> None:
    w = window()
    w.acquire([0], A, 0)
    done = w.acknowledge(0, 1, A, AckType.RENEW, 900)
    assert (done.cause, w.records[0].deadline_ms) == ("renewed", 1_900)
    assert w.expire(1_000) == []
    w.acknowledge(0, 1, A, AckType.ACCEPT, 1_500)


def test_every_refusal_says_why_and_changes_nothing() -> None:
    w = window()
    w.acquire([0, 1, 2, 3], A, 0)
    w.acknowledge(0, 1, A, AckType.ACCEPT, 10)  # below the start from now on
    w.acknowledge(2, 1, A, AckType.ACCEPT, 10)  # done, inside the window
    refused(w, "ALREADY_ACKNOWLEDGED", 0, 1, A, AckType.ACCEPT, 20)
    refused(w, "ALREADY_ACKNOWLEDGED", 2, 1, A, AckType.RELEASE, 20)
    refused(w, "RECORD_NOT_ACQUIRED", 9, 1, A, AckType.ACCEPT, 20)
    refused(w, "DELIVERED_AGAIN", 1, 2, A, AckType.ACCEPT, 20)
    refused(w, "NOT_HOLDER", 1, 1, B, AckType.ACCEPT, 20)
    refused(w, "LOCK_EXPIRED", 1, 1, A, AckType.ACCEPT, 1_000)  # the deadline itself
    w.acknowledge(3, 1, A, AckType.RELEASE, 20)
    refused(w, "LOCK_EXPIRED", 3, 1, A, AckType.ACCEPT, 30)  # released: its holder let go
    w.acquire([3], B, 40)
    refused(w, "DELIVERED_AGAIN", 3, 1, A, AckType.ACCEPT, 50)  # another delivery since


def test_a_gap_between_records_is_never_acquired() -> None:
    w = window()
    w.acquire([0, 2], A, 0)
    refused(w, "RECORD_NOT_ACQUIRED", 1, 1, A, AckType.ACCEPT, 10)


# -- time, members and the log -----------------------------------------------------------------


def test_lapsed_locks_give_records_back_and_archive_at_the_limit() -> None:
    w = window(config=ShareConfig(1_000, 2, 100))
    w.acquire([0, 1], A, 0)
    w.acknowledge(1, 1, A, AckType.RELEASE, 0)
    w.acquire([1], A, 0)  # its second delivery: the limit
    assert w.available(0) == []  # a look makes the next deadline exact
    assert w.next_deadline() == 1_000
    done = w.expire(1_000)
    assert [(t.offset, t.state, t.cause) for t in done] == [
        (0, RecordState.AVAILABLE, "lock_expired"),
        (1, RecordState.ARCHIVED, "lock_expired"),
    ]
    assert w.available(1_000) == [0] and w.counts()["archived"] == 1


def test_a_member_leaving_gives_back_what_it_holds() -> None:
    w = window()
    w.acquire([0, 1], A, 0)
    w.acquire([2], B, 0)
    assert [t.offset for t in w.release_member(A)] == [0, 1]
    assert w.held_by(A) == [] and w.held_by(B) == [2]
    assert w.available(0) == [0, 1]


def test_retention_and_compaction_move_the_window() -> None:
    w = window()
    w.acquire([0, 1, 2, 3], A, 0)
    w.acknowledge(1, 1, A, AckType.RELEASE, 0)
    assert w.advance_to(2) == 2  # 0 held and 1 available, both gone with the log's start
    assert (w.start, list(w.records)) == (2, [2, 3])
    w.skip_to(10)  # nothing to deliver below 10 past the end
    assert w.end == 10
    w.acknowledge(2, 1, A, AckType.RELEASE, 0)
    w.forget([2])  # compacted away while available
    assert (w.start, list(w.records)) == (3, [3])


def test_reset_starts_over_only_without_held_records() -> None:
    w = window()
    w.acquire([0], A, 0)
    with pytest.raises(ValueError, match="acquired"):
        w.reset(7)
    w.release_member(A)
    w.reset(7)
    assert (w.start, w.end, w.records) == (7, 7, {})


def test_lag_counts_the_open_records_and_what_is_past_the_end() -> None:
    w = window()
    w.acquire([0, 1, 2], A, 0)
    w.acknowledge(1, 1, A, AckType.ACCEPT, 0)
    assert w.lag(10) == 2 + 7


# -- the stored form -----------------------------------------------------------------------------


def test_snapshots_keep_runs_of_alike_records_and_round_trip() -> None:
    w = window()
    w.acquire([0, 1, 2, 4], A, 0)
    w.acquire([5], B, 5)
    w.acknowledge(1, 1, A, AckType.ACCEPT, 1)
    doc = w.snapshot()
    assert doc == {
        "start": 0,
        "end": 6,
        "runs": [
            [0, 0, 1, 1, A, 1_000],
            [1, 1, 2, 1, A, 1_000],
            [2, 2, 1, 1, A, 1_000],
            [4, 4, 1, 1, A, 1_000],
            [5, 5, 1, 1, B, 1_005],
        ],
    }
    again = SharePartition.from_snapshot(doc, CONFIG)
    assert again.snapshot() == doc and again.records == w.records


@pytest.mark.parametrize(
    "doc",
    [
        {"start": 0, "end": 2, "runs": [[0, 5, 1, 1, A, 0]]},  # past the end
        {"start": 3, "end": 2, "runs": []},
        {"start": 0, "end": 2, "runs": [[0, 0, 3, 1, A, 0]]},  # no such state
        {"start": 0, "runs": []},
        {"start": 0, "end": 2, "runs": [[0, 0, 1]]},
    ],
)
def test_a_malformed_snapshot_is_refused(doc: dict[str, Any]) -> None:
    with pytest.raises((KeyError, TypeError, ValueError)):
        SharePartition.from_snapshot(doc, CONFIG)


# -- properties over random runs -------------------------------------------------------------------

MEMBERS = ("m0", "m1", "m2")
Op = tuple[str, int, int, int]
OPS = st.lists(
    st.tuples(
        st.sampled_from(["acquire", "ack", "expire", "leave", "snapshot"]),
        st.integers(0, 2),  # member
        st.integers(0, 11),  # offset or kind
        st.integers(0, 1_500),  # time step
    ),
    max_size=60,
)
KINDS = (AckType.ACCEPT, AckType.RELEASE, AckType.REJECT, AckType.RENEW)


class Run:
    """A window driven by random operations, with what a checker needs to know of it."""

    def __init__(self) -> None:
        self.w = SharePartition(0, CONFIG)
        self.now = 0
        self.accepted: set[int] = set()
        self.counts: dict[int, int] = {}
        self.tokens: list[tuple[int, int, str]] = []  # every delivery handed out
        self.starts = [0]

    def step(self, op: Op) -> None:
        name, m, n, dt = op
        self.now += dt
        member = MEMBERS[m]
        w = self.w
        if name == "acquire":
            self.acquire(member, n % 4 + 1)
        elif name == "ack" and self.tokens:
            offset, delivery, holder = self.tokens[n % len(self.tokens)]
            kind = KINDS[n % len(KINDS)]
            before = w.snapshot()
            try:
                done = w.acknowledge(offset, delivery, member, kind, self.now, dt % 3 * 100)
            except AckRefused:
                assert w.snapshot() == before
            else:
                assert holder == member, "a non-holder's acknowledgement took effect"
                if done.state is RecordState.ACKNOWLEDGED:
                    self.accepted.add(offset)
        elif name == "expire":
            w.expire(self.now)
        elif name == "leave":
            w.release_member(member)
        elif name == "snapshot":
            self.w = SharePartition.from_snapshot(w.snapshot(), CONFIG)
        self.starts.append(self.w.start)

    def acquire(self, member: str, most: int) -> None:
        w = self.w
        w.expire(self.now)
        due = w.available(self.now)[:most]
        new = list(range(w.end, w.end + min(most - len(due), w.room)))
        for t in w.acquire(due + new, member, self.now):
            assert t.offset not in self.accepted, "an accepted record was acquired again"
            previous = self.counts.get(t.offset, 0)
            assert previous < t.delivery_count <= CONFIG.delivery_limit
            self.counts[t.offset] = t.delivery_count
            self.tokens.append((t.offset, t.delivery_count, member))

    def holders_in_force(self, at: int) -> dict[int, str]:
        """Who holds what under a lock still in force at `at`."""
        return {
            o: r.member
            for o, r in self.w.records.items()
            if r.state is RecordState.ACQUIRED and r.deadline_ms > at and r.member
        }


@settings(max_examples=300, derandomize=True, deadline=None)
@given(OPS)
def test_an_accepted_record_is_never_acquired_again(ops: list[Op]) -> None:
    run = Run()
    for op in ops:
        run.step(op)  # Run.acquire asserts it


@settings(max_examples=300, derandomize=True, deadline=None)
@given(OPS)
def test_a_delivery_count_never_goes_down_nor_past_the_limit(ops: list[Op]) -> None:
    run = Run()
    for op in ops:
        run.step(op)
        for offset, record in run.w.records.items():
            assert run.counts.get(offset, 0) == record.delivery_count <= CONFIG.delivery_limit


@settings(max_examples=300, derandomize=True, deadline=None)
@given(OPS)
def test_no_record_has_two_holders_while_their_locks_hold(ops: list[Op]) -> None:
    run = Run()
    for op in ops:
        before = run.holders_in_force(run.now + op[3])  # the step's time: locks lapsed by then
        run.step(op)
        after = run.holders_in_force(run.now)
        for offset, member in after.items():
            if offset in before and op[0] != "leave":
                assert before[offset] == member, "a held record changed hands under its lock"


@settings(max_examples=300, derandomize=True, deadline=None)
@given(OPS)
def test_the_start_only_moves_forward_over_done_records(ops: list[Op]) -> None:
    run = Run()
    for op in ops:
        run.step(op)
        w = run.w
        assert all(o >= w.start for o in w.records)
        if w.records:
            assert not w.records[next(iter(w.records))].done
    assert run.starts == sorted(run.starts)


@settings(max_examples=200, derandomize=True, deadline=None)
@given(OPS, st.lists(st.sampled_from(KINDS), min_size=1, max_size=8))
def test_every_record_ends_accepted_or_archived_once_consumers_keep_going(
    ops: list[Op], kinds: list[AckType]
) -> None:
    run = Run()
    for op in ops:
        run.step(op)
    # Faults stop: a consumer acquires and acknowledges as `kinds` says, time moving on. With
    # a delivery limit, the window drains.
    w = run.w
    end = w.end
    for turn in range(10_000):
        run.now += 2_000
        w = run.w
        w.expire(run.now)
        if w.start >= end:
            break
        due = w.available(run.now)
        for t in w.acquire(due, "last", run.now):
            w.acknowledge(t.offset, t.delivery_count, "last", kinds[turn % len(kinds)], run.now)
    assert run.w.start >= end and all(o >= end for o in run.w.records)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(OPS)
def test_the_shortcuts_never_hide_a_due_record_or_a_lapsed_lock(ops: list[Op]) -> None:
    """`available` and `expire` skip their scan while the window's lower bounds say nothing is
    due: they must answer as a scan of every record would."""
    run = Run()
    for op in ops:
        run.step(op)
        w, now = run.w, run.now
        w.expire(now)
        assert not [
            o
            for o, r in w.records.items()
            if r.state is RecordState.ACQUIRED and r.deadline_ms <= now
        ]
        due = [
            o
            for o, r in w.records.items()
            if r.state is RecordState.AVAILABLE and r.deadline_ms <= now
        ]
        assert w.available(now) == due
        soonest = w.next_deadline()
        pending = [
            r.deadline_ms
            for r in w.records.values()
            if r.state is RecordState.ACQUIRED
            or (r.state is RecordState.AVAILABLE and r.deadline_ms > now)
        ]
        if pending:
            assert soonest is not None and soonest <= min(pending)
