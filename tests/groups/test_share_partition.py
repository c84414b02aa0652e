"""The share-partition window (groups.share.partition_state) as plain state, with no HTTP and no
clock: every transition and every refusal, acknowledgements of ranges, the runs it keeps and the
stored form, and properties over random runs of acquires, acknowledgements (stale, forged, by
other members and of ranges too), lapsing locks, members leaving and restores from snapshots,
each property checked by a test of its own."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.errors import InvalidRecord
from groups.share.partition_state import (
    AckRefused,
    AckType,
    RecordState,
    ShareConfig,
    SharePartition,
    Span,
    Transition,
    check_snapshot,
)
from tests.hypothesis_runs import deterministic

CONFIG = ShareConfig(lock_ms=1_000, delivery_limit=3, max_record_locks=8)
LOCK_MS, LIMIT = CONFIG.lock_ms, CONFIG.delivery_limit
ROOMY = replace(CONFIG, max_record_locks=100)
A, B = "member-a", "member-b"
AVAILABLE, ACQUIRED = RecordState.AVAILABLE, RecordState.ACQUIRED
ACKNOWLEDGED, ARCHIVED = RecordState.ACKNOWLEDGED, RecordState.ARCHIVED
ACCEPT, RELEASE, REJECT, RENEW = AckType.ACCEPT, AckType.RELEASE, AckType.REJECT, AckType.RENEW


class T(NamedTuple):
    """One record's part of a transition."""

    offset: int
    state: RecordState
    delivery_count: int
    cause: str


def window(start: int = 0, config: ShareConfig = CONFIG) -> SharePartition:
    return SharePartition(start, config)


def spans(offsets: list[int]) -> list[Span]:
    """Offsets as spans of consecutive ones, in the order given."""
    out: list[list[int]] = []
    for offset in offsets:
        if out and out[-1][1] + 1 == offset:
            out[-1][1] = offset
        else:
            out.append([offset, offset])
    return [(first, last) for first, last in out]


def flat(transitions: list[Transition]) -> list[T]:
    """Each record's part of the transitions, in order."""
    return [
        T(offset, t.state, t.delivery_count, t.cause)
        for t in transitions
        for offset in range(t.first, t.last + 1)
    ]


def acquire(w: SharePartition, offsets: list[int], member: str, now: int) -> list[T]:
    return flat(w.acquire(spans(offsets), member, now))


def ack(
    w: SharePartition,
    offset: int,
    delivery: int,
    member: str,
    kind: AckType,
    now: int,
    delay_ms: int = 0,
) -> T:
    """An acknowledgement by token: of one delivery of one record."""
    [done] = flat(w.acknowledge(offset, offset, member, kind, now, delay_ms, delivery))
    return done


def due(w: SharePartition, now: int) -> list[int]:
    return [o for first, last in w.available(now) for o in range(first, last + 1)]


def records(w: SharePartition) -> dict[int, tuple[RecordState, int, str | None, int]]:
    """Each record of the window as (state, delivery count, last holder, deadline)."""
    return {
        offset: (r.state, r.delivery_count, r.member, r.deadline_ms)
        for r in w.runs
        for offset in range(r.first, r.last + 1)
    }


def held(w: SharePartition, member: str) -> list[int]:
    out = [o for o, (state, _, m, _) in records(w).items() if state is ACQUIRED and m == member]
    assert len(out) == w.held_by(member)
    return out


def refused(
    w: SharePartition,
    code: str,
    offset: int,
    delivery: int,
    member: str,
    now: int = 0,
) -> None:
    """Every kind of acknowledgement of that delivery is refused with `code`, and the window is
    as it was."""
    before = w.snapshot()
    for kind in AckType:
        with pytest.raises(AckRefused) as caught:
            w.acknowledge(offset, offset, member, kind, now, 100, delivery)
        assert caught.value.code == code, kind
        assert w.snapshot() == before, kind


def range_refused(
    w: SharePartition, code: str, first: int, last: int, member: str, now: int = 0
) -> str:
    """Every kind of acknowledgement of the range is refused with `code`, and the window is as
    it was; the refusal's detail."""
    before = w.snapshot()
    for kind in AckType:
        with pytest.raises(AckRefused) as caught:
            w.acknowledge(first, last, member, kind, now, 100)
        assert caught.value.code == code, kind
        assert w.snapshot() == before, kind
    return str(caught.value)


def not_acquired(w: SharePartition, offsets: list[int], now: int, match: str) -> None:
    """The acquire is refused (a ValueError matching `match`), and the window is as it was."""
    not_acquired_spans(w, spans(offsets), now, match)


def not_acquired_spans(w: SharePartition, named: list[Span], now: int, match: str) -> None:
    before = w.snapshot()
    with pytest.raises(ValueError, match=match):
        w.acquire(named, B, now)
    assert w.snapshot() == before


# -- acquire ------------------------------------------------------------------------------------


def test_new_records_are_acquired_at_the_end_with_a_delivery_and_a_lock() -> None:
    w = window(10)
    done = acquire(w, [10, 11, 14], A, 500)  # 12 and 13: records the log no longer has
    assert done == [
        T(10, ACQUIRED, 1, "acquired"),
        T(11, ACQUIRED, 1, "acquired"),
        T(14, ACQUIRED, 1, "acquired"),
    ]
    assert (w.start, w.end) == (10, 15)
    assert records(w) == {o: (ACQUIRED, 1, A, 500 + LOCK_MS) for o in (10, 11, 14)}
    assert acquire(w, [20], B, 600) == [T(20, ACQUIRED, 1, "acquired")]
    assert w.end == 21 and 17 not in records(w)
    assert (held(w, A), held(w, B), held(w, "nobody")) == ([10, 11, 14], [20], [])


def test_an_available_record_is_acquired_again_with_its_next_delivery() -> None:
    w = window()
    acquire(w, [0], A, 0)
    ack(w, 0, 1, A, RELEASE, 100)
    assert acquire(w, [0], B, 200) == [T(0, ACQUIRED, 2, "acquired")]
    assert records(w) == {0: (ACQUIRED, 2, B, 200 + LOCK_MS)}
    assert (held(w, A), held(w, B), w.end) == ([], [0], 1)


def test_an_acquire_of_a_record_that_is_not_available_is_refused() -> None:
    w = window()
    acquire(w, [0, 1, 2, 3, 5], A, 0)
    ack(w, 1, 1, A, ACCEPT, 0)  # done inside the window: 0 holds the start
    ack(w, 2, 1, A, REJECT, 0)
    ack(w, 3, 1, A, RELEASE, 0, delay_ms=500)
    not_acquired(w, [0], 0, "not available")  # held
    not_acquired(w, [3], 499, "not available")  # released with a delay: not due yet
    assert acquire(w, [3], B, 500) == [T(3, ACQUIRED, 2, "acquired")]
    later = 2 * LOCK_MS  # every lock has lapsed
    not_acquired(w, [0], later, "not available")  # lapsed, but not given back by expire()
    not_acquired(w, [1], later, "not available")  # acknowledged
    not_acquired(w, [2], later, "not available")  # archived


def test_an_acquire_of_an_offset_inside_the_window_that_it_does_not_hold_is_refused() -> None:
    w = window(4)
    acquire(w, [4, 7], A, 0)
    not_acquired(w, [5], 0, "not in the window")  # skipped: not in the log
    not_acquired(w, [3], 0, "not in the window")  # below the start
    ack(w, 4, 1, A, ACCEPT, 0)
    assert w.start == 7
    not_acquired(w, [4], 0, "not in the window")  # accepted, below the start now


def test_an_acquire_of_new_records_past_the_room_is_refused() -> None:
    w = window(config=replace(CONFIG, max_record_locks=3))
    acquire(w, [0, 1, 2], A, 0)
    assert w.room == 0
    not_acquired(w, [3], 0, "full")
    ack(w, 1, 1, A, ACCEPT, 0)
    assert w.room == 0  # a done record behind an open one still takes its place
    ack(w, 0, 1, A, ACCEPT, 0)
    assert (w.start, w.room) == (2, 2)
    acquire(w, [3, 4], B, 0)
    assert w.room == 0
    not_acquired(w, [5], 0, "full")


def test_an_acquire_refused_part_way_changes_nothing() -> None:
    """All or nothing: an acquire of several records, one of which may not be acquired, takes
    none of them (the window, its end and its room as they were)."""
    w = window(config=replace(CONFIG, max_record_locks=4))
    acquire(w, [0, 1], A, 0)
    not_acquired_spans(w, [(1, 3)], 0, "not available")  # one held, then new ones
    not_acquired(w, [0, 2, 3], 0, "not available")
    ack(w, 0, 1, A, RELEASE, 0)
    not_acquired_spans(w, [(0, 1)], 0, "offset 1 is not available")  # due, then one held
    not_acquired(w, [0, 2, 3, 4], 0, "full")  # due again, then more new ones than the room
    assert (w.end, w.room) == (2, 2)
    assert acquire(w, [0, 2, 3], B, 0) == [
        T(0, ACQUIRED, 2, "acquired"),
        T(2, ACQUIRED, 1, "acquired"),
        T(3, ACQUIRED, 1, "acquired"),
    ]


@pytest.mark.parametrize(
    "named",
    [
        [(2, 3), (0, 0)],  # not ascending
        [(2, 3), (3, 4)],  # overlapping
        [(2, 2), (2, 2)],  # a record named twice: one delivery
        [(3, 2)],  # ends before it begins
    ],
)
def test_an_acquire_of_spans_out_of_order_is_refused(named: list[Span]) -> None:
    w = window()
    acquire(w, [0, 1], A, 0)
    ack(w, 0, 1, A, RELEASE, 0)
    not_acquired_spans(w, named, 0, "out of order or overlapping")


def test_an_acquire_of_a_span_may_go_on_from_records_due_again_to_new_ones() -> None:
    w = window()
    acquire(w, [0, 1, 2], A, 0)
    ack(w, 1, 1, A, RELEASE, 0)
    ack(w, 2, 1, A, RELEASE, 0)
    assert flat(w.acquire([(1, 4)], B, 10)) == [
        T(1, ACQUIRED, 2, "acquired"),
        T(2, ACQUIRED, 2, "acquired"),
        T(3, ACQUIRED, 1, "acquired"),
        T(4, ACQUIRED, 1, "acquired"),
    ]
    assert [r.delivery_count for r in w.runs] == [1, 2, 1] and w.end == 5


# -- acknowledge --------------------------------------------------------------------------------


def test_accept_acknowledges_the_record() -> None:
    w = window()
    acquire(w, [0, 1], A, 0)
    assert ack(w, 0, 1, A, ACCEPT, 10) == T(0, ACKNOWLEDGED, 1, "accepted")
    assert (w.start, list(records(w))) == (1, [1])


def test_reject_archives_the_record() -> None:
    w = window()
    acquire(w, [0, 1], A, 0)
    assert ack(w, 1, 1, A, REJECT, 10) == T(1, ARCHIVED, 1, "rejected")
    assert w.counts() == {"available": 0, "acquired": 1, "acknowledged": 0, "archived": 1}


def test_release_gives_the_record_back_at_once() -> None:
    w = window()
    acquire(w, [0], A, 0)
    assert ack(w, 0, 1, A, RELEASE, 10) == T(0, AVAILABLE, 1, "released")
    assert records(w) == {0: (AVAILABLE, 1, A, 0)}
    assert due(w, 10) == [0] and held(w, A) == []


def test_a_release_with_a_delay_offers_the_record_again_only_when_it_is_due() -> None:
    w = window()
    acquire(w, [0, 1], A, 0)
    ack(w, 0, 1, A, RELEASE, 100, delay_ms=400)
    assert records(w)[0] == (AVAILABLE, 1, A, 500)
    assert due(w, 499) == []
    assert w.next_deadline() == 500
    not_acquired(w, [0], 499, "not available")
    assert due(w, 500) == [0]
    assert acquire(w, [0], B, 500) == [T(0, ACQUIRED, 2, "acquired")]


def test_renew_moves_the_lock_deadline() -> None:
    w = window()
    acquire(w, [0], A, 0)
    assert ack(w, 0, 1, A, RENEW, 900) == T(0, ACQUIRED, 1, "renewed")
    assert records(w) == {0: (ACQUIRED, 1, A, 900 + LOCK_MS)}
    assert flat(w.expire(LOCK_MS)) == []  # the first deadline passes: still held
    assert ack(w, 0, 1, A, ACCEPT, 900 + LOCK_MS - 1).state is ACKNOWLEDGED


def test_a_lock_renewed_under_a_shorter_lock_duration_lapses_at_its_new_deadline() -> None:
    w = window(config=replace(CONFIG, lock_ms=30_000))
    acquire(w, [0], A, 0)
    w.config = CONFIG  # the group's lock duration set shorter, as the coordinator does
    ack(w, 0, 1, A, RENEW, 100)
    assert records(w)[0] == (ACQUIRED, 1, A, 100 + LOCK_MS)
    assert flat(w.expire(100 + LOCK_MS)) == [T(0, AVAILABLE, 1, "lock_expired")]
    assert due(w, 100 + LOCK_MS) == [0]


# -- refusals: each says why and changes nothing --------------------------------------------------


def test_an_offset_never_in_the_window_is_refused_as_not_acquired() -> None:
    w = window()
    refused(w, "RECORD_NOT_ACQUIRED", 0, 1, A)  # an empty window
    acquire(w, [0, 2], A, 0)
    refused(w, "RECORD_NOT_ACQUIRED", 1, 1, A)  # a gap
    refused(w, "RECORD_NOT_ACQUIRED", 3, 1, A)  # the end
    refused(w, "RECORD_NOT_ACQUIRED", 50, 1, A)  # far past it


def test_an_acknowledged_or_archived_record_is_refused_as_acknowledged_already() -> None:
    w = window()
    acquire(w, [0, 1, 2, 3], A, 0)
    ack(w, 1, 1, A, ACCEPT, 0)
    ack(w, 2, 1, A, REJECT, 0)
    refused(w, "ALREADY_ACKNOWLEDGED", 1, 1, A)  # acknowledged, inside the window
    refused(w, "ALREADY_ACKNOWLEDGED", 2, 1, A)  # archived, inside the window
    refused(w, "ALREADY_ACKNOWLEDGED", 1, 1, B)  # whoever asks
    ack(w, 0, 1, A, ACCEPT, 0)
    assert w.start == 3
    for offset in (0, 1, 2):  # below the start
        refused(w, "ALREADY_ACKNOWLEDGED", offset, 1, A)


def test_a_token_of_an_older_delivery_is_refused_as_delivered_again() -> None:
    w = window()
    acquire(w, [0, 1], A, 0)
    ack(w, 0, 1, A, RELEASE, 0)
    acquire(w, [0], A, 0)  # the same member, a new delivery
    refused(w, "DELIVERED_AGAIN", 0, 1, A)
    ack(w, 1, 1, A, RELEASE, 0)
    acquire(w, [1], B, 0)  # another member since
    refused(w, "DELIVERED_AGAIN", 1, 1, A)
    refused(w, "DELIVERED_AGAIN", 1, 3, B)  # a delivery that never was


def test_a_member_that_does_not_hold_the_record_is_refused() -> None:
    w = window()
    acquire(w, [0], A, 0)
    refused(w, "NOT_HOLDER", 0, 1, B)


def test_a_lock_that_lapsed_or_was_released_is_refused_as_expired() -> None:
    w = window()
    acquire(w, [0, 1, 2], A, 0)
    refused(w, "LOCK_EXPIRED", 0, 1, A, now=LOCK_MS)  # at its deadline, before expire() looks
    w.expire(LOCK_MS)
    refused(w, "LOCK_EXPIRED", 0, 1, A, now=LOCK_MS)  # given back by expire()
    w = window()
    acquire(w, [0, 1], A, 0)
    ack(w, 0, 1, A, RELEASE, 10)
    refused(w, "LOCK_EXPIRED", 0, 1, A, now=20)  # its holder let go
    w.release_member(A)
    refused(w, "LOCK_EXPIRED", 1, 1, A, now=20)  # its holder left


# -- time, members, the log -----------------------------------------------------------------------


def test_lapsed_locks_give_their_records_back() -> None:
    w = window()
    acquire(w, [0, 1], A, 0)
    acquire(w, [2], B, 500)
    assert flat(w.expire(LOCK_MS - 1)) == []
    assert flat(w.expire(LOCK_MS)) == [
        T(0, AVAILABLE, 1, "lock_expired"),
        T(1, AVAILABLE, 1, "lock_expired"),
    ]
    assert records(w) == {
        0: (AVAILABLE, 1, A, 0),
        1: (AVAILABLE, 1, A, 0),
        2: (ACQUIRED, 1, B, 500 + LOCK_MS),
    }
    assert due(w, LOCK_MS) == [0, 1]
    assert flat(w.expire(LOCK_MS)) == []


def give_back(w: SharePartition, how: str, delivery: int, now: int) -> list[T]:
    """Offset 0's lock ends without an accept or reject, as `how` says."""
    if how == "release":
        return [ack(w, 0, delivery, A, RELEASE, now)]
    if how == "lapse":
        return flat(w.expire(now + LOCK_MS))
    return flat(w.release_member(A))


@pytest.mark.parametrize("how", ["release", "lapse", "leave"])
def test_at_the_delivery_limit_a_record_given_back_is_archived_and_never_delivered_again(
    how: str,
) -> None:
    w = window()
    acquire(w, [0], A, 0)
    acquire(w, [1], B, 0)  # behind it, so that the start has somewhere to move to
    now = 0
    for delivery in range(1, LIMIT + 1):
        if delivery > 1:
            now += 2 * LOCK_MS
            assert acquire(w, [0], A, now) == [T(0, ACQUIRED, delivery, "acquired")]
        last = give_back(w, how, delivery, now)[0]
        assert (last.offset, last.delivery_count) == (0, delivery)
        assert last.state is (ARCHIVED if delivery == LIMIT else AVAILABLE)
    assert 0 not in records(w) and w.start == 1
    not_acquired(w, [0], now + 10 * LOCK_MS, "not in the window")


def test_a_lowered_delivery_limit_archives_what_was_given_back_that_many_times() -> None:
    """A record given back after 2 deliveries under a limit of 3 may not be delivered a third
    time once the limit is 2: archived at once. One held is archived when it is given back;
    one with fewer deliveries stays."""
    w = window()
    acquire(w, [0, 1, 2], A, 0)
    ack(w, 0, 1, A, RELEASE, 0)
    acquire(w, [0], A, 0)
    ack(w, 0, 2, A, RELEASE, 0, delay_ms=500)  # given back twice, due later
    ack(w, 2, 1, A, RELEASE, 0)  # given back once
    assert flat(w.configure(replace(CONFIG, delivery_limit=2))) == [T(0, ARCHIVED, 2, "archived")]
    assert w.start == 1 and due(w, 1_000) == [2]
    not_acquired(w, [0], 1_000, "not in the window")
    acquire(w, [2], B, 1_000)
    assert ack(w, 2, 2, B, RELEASE, 1_000).state is ARCHIVED
    assert ack(w, 1, 1, A, RELEASE, 0).state is AVAILABLE  # its first delivery
    assert flat(w.configure(CONFIG)) == []


def test_a_member_leaving_gives_back_what_it_holds_and_nothing_else() -> None:
    w = window()
    acquire(w, [0, 1], A, 0)
    acquire(w, [2], B, 0)
    ack(w, 1, 1, A, RELEASE, 0)
    acquire(w, [1], A, 0)
    assert flat(w.release_member(A)) == [
        T(0, AVAILABLE, 1, "released"),
        T(1, AVAILABLE, 2, "released"),
    ]
    assert held(w, A) == [] and held(w, B) == [2]
    assert due(w, 0) == [0, 1]
    assert flat(w.release_member(A)) == [] and flat(w.release_member("nobody")) == []


def test_a_reset_starts_over_only_while_no_record_is_acquired() -> None:
    w = window(5)
    acquire(w, [5, 6], A, 0)
    before = w.snapshot()
    with pytest.raises(ValueError, match="acquired"):
        w.reset(0)
    assert w.snapshot() == before
    ack(w, 5, 1, A, ACCEPT, 0)
    ack(w, 6, 1, A, RELEASE, 0)
    w.reset(2)  # back to before the start: the records are delivered again, counted anew
    assert (w.start, w.end, records(w)) == (2, 2, {})
    assert acquire(w, [5], B, 0) == [T(5, ACQUIRED, 1, "acquired")]


def test_retention_below_the_window_moves_its_start_and_drops_what_it_held_there() -> None:
    w = window()
    acquire(w, [0, 1, 2, 3, 4], A, 0)
    ack(w, 3, 1, A, ACCEPT, 0)
    ack(w, 1, 1, A, RELEASE, 0)
    before = w.snapshot()
    assert w.advance_to(0) == 0 and w.snapshot() == before  # not past the start: nothing
    assert w.advance_to(3) == 3  # 0 and 2 held, 1 available: open records lost
    assert (w.start, w.end, list(records(w))) == (4, 5, [4])  # 3 was done
    refused(w, "ALREADY_ACKNOWLEDGED", 0, 1, A)
    assert w.advance_to(9) == 1
    assert (w.start, w.end, records(w)) == (9, 9, {})


def test_a_skip_moves_the_end_past_offsets_with_nothing_to_deliver() -> None:
    w = window()
    w.skip_to(5)
    assert (w.start, w.end) == (5, 5)
    w.skip_to(3)  # never back
    assert (w.start, w.end) == (5, 5)
    acquire(w, [5], A, 0)
    w.skip_to(9)
    assert (w.start, w.end) == (5, 9)
    not_acquired(w, [7], 0, "not in the window")
    assert acquire(w, [9], A, 0) == [T(9, ACQUIRED, 1, "acquired")]


def test_records_compacted_away_while_available_leave_the_window() -> None:
    w = window()
    acquire(w, [0, 1, 2, 3], A, 0)
    ack(w, 0, 1, A, RELEASE, 0)
    ack(w, 2, 1, A, RELEASE, 0)
    ack(w, 3, 1, A, ACCEPT, 0)
    w.forget([0, 1, 2, 3, 7])  # only the available ones go: 1 is held, 3 done, 7 never was
    assert (w.start, list(records(w))) == (1, [1, 3])


def test_the_start_moves_past_acknowledged_and_archived_records_at_the_front_only() -> None:
    w = window()
    acquire(w, [0, 1, 2, 3, 4], A, 0)
    ack(w, 2, 1, A, ACCEPT, 0)
    ack(w, 3, 1, A, REJECT, 0)
    ack(w, 1, 1, A, ACCEPT, 0)
    assert (w.start, list(records(w))) == (0, [0, 1, 2, 3, 4])
    ack(w, 0, 1, A, RELEASE, 0)  # given back: still open
    assert w.start == 0
    acquire(w, [0], A, 0)
    ack(w, 0, 2, A, REJECT, 0)
    assert (w.start, list(records(w))) == (4, [4])
    ack(w, 4, 1, A, ACCEPT, 0)
    assert (w.start, w.end, records(w)) == (5, 5, {})


def test_lag_counts_the_open_records_and_those_past_the_end() -> None:
    w = window(10)
    assert w.lag(10) == 0 and w.lag(25) == 15
    acquire(w, [10, 11, 12, 15], A, 0)
    ack(w, 11, 1, A, ACCEPT, 0)
    ack(w, 12, 1, A, RELEASE, 0)
    assert w.lag(20) == 3 + 4  # 10, 12 and 15 open; 16 to 19 not read yet
    assert w.lag(16) == 3 and w.lag(5) == 3


def test_counts_say_how_many_records_are_in_each_state() -> None:
    w = window()
    assert w.counts() == {"available": 0, "acquired": 0, "acknowledged": 0, "archived": 0}
    acquire(w, [0, 1, 2, 3, 4], A, 0)
    ack(w, 1, 1, A, RELEASE, 0)
    ack(w, 2, 1, A, ACCEPT, 0)
    ack(w, 3, 1, A, REJECT, 0)
    assert w.counts() == {"available": 1, "acquired": 2, "acknowledged": 1, "archived": 1}


def test_next_deadline_is_never_later_than_the_next_lapse_or_due_release() -> None:
    w = window()
    assert w.next_deadline() is None
    acquire(w, [0, 1], A, 0)
    assert w.next_deadline() == LOCK_MS
    ack(w, 1, 1, A, RELEASE, 100, delay_ms=300)
    assert w.next_deadline() == 400
    ack(w, 0, 1, A, ACCEPT, 200)
    acquire(w, [1], A, 400)
    ack(w, 1, 2, A, ACCEPT, 500)
    assert w.next_deadline() is not None  # a bound: made exact by the scans below
    assert flat(w.expire(LOCK_MS)) == [] and due(w, LOCK_MS) == []
    assert w.next_deadline() is None


def test_a_record_due_again_is_offered_when_the_clock_steps_back() -> None:
    w = window()
    acquire(w, [0], A, 1_000)
    ack(w, 0, 1, A, RELEASE, 1_100)
    assert due(w, 1_200) == [0]
    assert due(w, 1_150) == [0]  # the wall clock stepped back: still due


def test_the_room_is_the_record_locks_left() -> None:
    w = window()
    assert w.room == CONFIG.max_record_locks
    acquire(w, [0, 1, 5], A, 0)
    assert w.room == CONFIG.max_record_locks - 3  # gaps take none
    ack(w, 0, 1, A, ACCEPT, 0)
    assert w.room == CONFIG.max_record_locks - 2


# -- the stored form ------------------------------------------------------------------------------


def test_a_snapshot_keeps_runs_of_consecutive_alike_records() -> None:
    w = window()
    acquire(w, [0, 1, 2], A, 0)
    acquire(w, [3], A, 0)  # alike: joins the run
    acquire(w, [5, 6], A, 0)  # after a gap: a run of its own
    acquire(w, [7], B, 0)  # another holder
    acquire(w, [8], B, 10)  # another deadline
    ack(w, 1, 1, A, ACCEPT, 0)  # another state
    ack(w, 6, 1, A, RELEASE, 0)
    acquire(w, [6], A, 0)  # another delivery count
    assert w.snapshot() == {
        "start": 0,
        "end": 9,
        "runs": [
            [0, 0, 1, 1, A, 1_000],
            [1, 1, 2, 1, None, 0],  # done: its holder and deadline no longer matter
            [2, 3, 1, 1, A, 1_000],
            [5, 5, 1, 1, A, 1_000],
            [6, 6, 1, 2, A, 1_000],
            [7, 7, 1, 1, B, 1_000],
            [8, 8, 1, 1, B, 1_010],
        ],
    }
    assert window(7).snapshot() == {"start": 7, "end": 7, "runs": []}


def runs_of(w: SharePartition) -> list[list[Any]]:
    return w.snapshot()["runs"]  # type: ignore[no-any-return]


def test_a_range_acknowledged_in_the_middle_of_a_run_splits_it_and_neighbours_alike_join() -> None:
    w = window(config=ROOMY)
    w.acquire([(0, 9)], A, 0)
    assert runs_of(w) == [[0, 9, 1, 1, A, 1_000]]
    w.acknowledge(3, 5, A, ACCEPT, 10)
    assert runs_of(w) == [[0, 2, 1, 1, A, 1_000], [3, 5, 2, 1, None, 0], [6, 9, 1, 1, A, 1_000]]
    w.acknowledge(6, 6, A, REJECT, 10)  # done, but another state: no join
    w.acknowledge(7, 8, A, ACCEPT, 10, delivery_count=1)
    assert runs_of(w) == [
        [0, 2, 1, 1, A, 1_000],
        [3, 5, 2, 1, None, 0],
        [6, 6, 4, 1, None, 0],
        [7, 8, 2, 1, None, 0],
        [9, 9, 1, 1, A, 1_000],
    ]
    assert (w.size, w.start) == (10, 0)
    w.acknowledge(0, 2, A, ACCEPT, 10)  # the front done: the start moves past it
    assert (w.start, w.size, runs_of(w)) == (9, 1, [[9, 9, 1, 1, A, 1_000]])


def test_records_released_apart_and_taken_again_alike_join_into_one_run() -> None:
    w = window(config=ROOMY)
    w.acquire([(0, 5)], A, 0)
    w.acknowledge(1, 1, A, RELEASE, 0)
    w.acknowledge(3, 4, A, RELEASE, 0)
    assert runs_of(w) == [
        [0, 0, 1, 1, A, 1_000],
        [1, 1, 0, 1, A, 0],
        [2, 2, 1, 1, A, 1_000],
        [3, 4, 0, 1, A, 0],
        [5, 5, 1, 1, A, 1_000],
    ]
    w.acknowledge(2, 2, A, RELEASE, 0)  # the released ones now alike from 1 to 4
    assert runs_of(w) == [[0, 0, 1, 1, A, 1_000], [1, 4, 0, 1, A, 0], [5, 5, 1, 1, A, 1_000]]
    assert w.available(0) == [(1, 4)]
    w.acquire([(1, 4)], B, 500)
    w.acknowledge(0, 0, A, RENEW, 500)  # renewed: its deadline now B's
    assert runs_of(w) == [[0, 0, 1, 1, A, 1_500], [1, 4, 1, 2, B, 1_500], [5, 5, 1, 1, A, 1_000]]
    w.release_member(B)
    w.expire(1_000)  # 5 lapses: given back with its first delivery
    assert runs_of(w) == [[0, 0, 1, 1, A, 1_500], [1, 4, 0, 2, B, 0], [5, 5, 0, 1, A, 0]]


def test_new_records_alike_join_the_last_run_and_gaps_end_it() -> None:
    w = window(config=ROOMY)
    w.acquire([(0, 2)], A, 0)
    w.acquire([(3, 4), (6, 6)], A, 0)
    assert runs_of(w) == [[0, 4, 1, 1, A, 1_000], [6, 6, 1, 1, A, 1_000]]
    assert (w.size, w.end, w.room) == (6, 7, ROOMY.max_record_locks - 6)


def test_a_window_with_gaps_and_every_state_round_trips_and_goes_on_alike() -> None:
    w = window(3)
    acquire(w, [3, 4, 6, 7, 9, 10, 12], A, 0)
    acquire(w, [15], B, 300)
    ack(w, 4, 1, A, ACCEPT, 0)
    ack(w, 6, 1, A, REJECT, 0)
    ack(w, 7, 1, A, RELEASE, 0)
    ack(w, 9, 1, A, RELEASE, 0, delay_ms=700)
    doc = w.snapshot()
    again = SharePartition.from_snapshot(doc, CONFIG)
    assert again.snapshot() == doc
    assert records(again) == records(w)
    assert (again.start, again.end, again.counts()) == (w.start, w.end, w.counts())
    assert (again.size, again.room) == (w.size, w.room)
    for later in (w, again):
        assert due(later, 500) == [7]
        assert flat(later.expire(LOCK_MS)) == [
            T(3, AVAILABLE, 1, "lock_expired"),
            T(10, AVAILABLE, 1, "lock_expired"),
            T(12, AVAILABLE, 1, "lock_expired"),
        ]
        assert due(later, LOCK_MS) == [3, 7, 9, 10, 12]
    assert again.snapshot() == w.snapshot()


def test_a_snapshot_of_done_runs_with_their_last_holders_is_restored_joined() -> None:
    """Done records' holders and deadlines are stored as nobody and 0; a window stored with
    them (as an earlier version did) is restored as if stored so."""
    doc = {
        "start": 0,
        "end": 4,
        "runs": [[0, 0, 1, 1, A, 900], [1, 1, 2, 1, A, 900], [2, 3, 2, 1, B, 950]],
    }
    w = SharePartition.from_snapshot(doc, CONFIG)
    assert runs_of(w) == [[0, 0, 1, 1, A, 900], [1, 3, 2, 1, None, 0]]
    assert (w.size, w.room) == (4, CONFIG.max_record_locks - 4)


# -- acknowledgements of ranges -------------------------------------------------------------------


def test_a_range_acknowledges_every_record_in_it_whatever_its_delivery() -> None:
    w = window()
    acquire(w, [0, 1, 2, 4, 5], A, 0)  # 3: no record (a transaction's marker, say)
    ack(w, 1, 1, A, RELEASE, 0)
    acquire(w, [1], A, 0)  # its second delivery, the rest in their first
    assert flat(w.acknowledge(0, 5, A, ACCEPT, 10)) == [
        T(0, ACKNOWLEDGED, 1, "accepted"),
        T(1, ACKNOWLEDGED, 2, "accepted"),
        T(2, ACKNOWLEDGED, 1, "accepted"),
        T(4, ACKNOWLEDGED, 1, "accepted"),
        T(5, ACKNOWLEDGED, 1, "accepted"),
    ]
    assert (w.start, w.end, w.runs) == (6, 6, [])


@pytest.mark.parametrize(
    ("kind", "state", "cause"),
    [
        (RELEASE, AVAILABLE, "released"),
        (REJECT, ARCHIVED, "rejected"),
        (RENEW, ACQUIRED, "renewed"),
    ],
)
def test_a_range_releases_rejects_or_renews_as_a_token_does_each(
    kind: AckType, state: RecordState, cause: str
) -> None:
    by_range, by_token = window(), window()
    for w in (by_range, by_token):
        acquire(w, [0, 1, 2, 3], A, 0)
    assert flat(by_range.acknowledge(1, 2, A, kind, 100, 300)) == [
        T(1, state, 1, cause),
        T(2, state, 1, cause),
    ]
    for offset in (1, 2):
        ack(by_token, offset, 1, A, kind, 100, 300)
    assert by_range.snapshot() == by_token.snapshot()


def test_a_range_with_a_record_not_the_members_in_force_is_refused_whole() -> None:
    w = window()
    acquire(w, [0, 1, 2, 3, 4, 5, 6], A, 0)
    acquire(w, [7], B, 0)
    ack(w, 3, 1, A, ACCEPT, 0)
    ack(w, 5, 1, A, RELEASE, 0)
    assert "offset 7" in range_refused(w, "NOT_HOLDER", 6, 7, A)
    assert "offset 3" in range_refused(w, "ALREADY_ACKNOWLEDGED", 2, 4, A)
    assert "offset 5" in range_refused(w, "LOCK_EXPIRED", 4, 6, A)
    assert "offset 8" in range_refused(w, "RECORD_NOT_ACQUIRED", 7, 9, B)  # past the end
    range_refused(w, "LOCK_EXPIRED", 0, 2, A, now=LOCK_MS)  # lapsed, before expire() looks
    range_refused(w, "RECORD_NOT_ACQUIRED", 20, 30, A)
    ack(w, 0, 1, A, ACCEPT, 0)
    assert "offset 0" in range_refused(w, "ALREADY_ACKNOWLEDGED", 0, 2, A)  # below the start
    assert w.acknowledge(1, 2, A, ACCEPT, 0)  # the rest of it still the member's


def test_a_range_of_no_record_is_refused_as_never_acquired() -> None:
    w = window()
    acquire(w, [0, 3], A, 0)
    assert "offset 1" in range_refused(w, "RECORD_NOT_ACQUIRED", 1, 2, A)  # gaps only


@pytest.mark.parametrize(
    "doc",
    [
        {"end": 2, "runs": []},
        {"start": 0, "runs": []},
        {"start": 0, "end": 2},
        {"start": 3, "end": 2, "runs": []},  # start past the end
        {"start": 2, "end": 4, "runs": [[1, 2, 1, 1, A, 0]]},  # below the start
        {"start": 0, "end": 2, "runs": [[0, 5, 1, 1, A, 0]]},  # past the end
        {"start": 0, "end": 2, "runs": [[0, 0, 3, 1, A, 0]]},  # no such state
        {"start": 0, "end": 2, "runs": [[0, 0, 1]]},  # too short a run
        {"start": 0, "end": 2, "runs": [[0, 0, 1, 1, A, 0, 9]]},  # too long a run
        {"start": "zero", "end": 2, "runs": []},
        {"start": 0, "end": 2, "runs": [[0, 0, 1, None, A, 0]]},
        {"start": 0, "end": 2, "runs": 5},
        {"start": 0, "end": 4, "runs": [[2, 3, 0, 1, None, 0], [0, 1, 0, 1, None, 0]]},  # order
        {"start": 0, "end": 4, "runs": [[0, 2, 0, 1, None, 0], [2, 3, 1, 1, A, 9]]},  # overlap
        {"start": 0, "end": 4, "runs": [[0, 1, 0, 1, None, 0], [1, 1, 0, 2, None, 0]]},
        {"start": 0, "end": 4, "runs": [[2, 1, 0, 1, None, 0]]},  # ends before it begins
    ],
)
def test_a_malformed_snapshot_is_refused(doc: dict[str, Any]) -> None:
    with pytest.raises(InvalidRecord):
        check_snapshot(doc)
    with pytest.raises(InvalidRecord):
        SharePartition.from_snapshot(doc, CONFIG)


# -- properties over random runs ------------------------------------------------------------------

MEMBERS = ("m0", "m1", "m2")
PROPERTY = deterministic(300)


@dataclass(frozen=True)
class Op:
    """One random step; `a` and `b` are read as its name says."""

    name: str
    member: int
    a: int
    b: int
    kind: AckType


@dataclass(frozen=True)
class Effect:
    """A record's part of a transition that took effect, `via` what (acquire, ack, expire,
    leave), for whom, when, and the delivery the step named (an acknowledgement's token's; a
    range names none: the record's own)."""

    via: str
    member: str
    now: int
    t: T
    delivery: int


@dataclass(frozen=True)
class Step:
    """What one step did: its transitions, or the refusal code of an acknowledgement, or
    "acquire" for a refused acquire."""

    effects: tuple[Effect, ...] = ()
    refused: str | None = None


class Driver:
    """A window under random operations, on a clock of its own, keeping every delivery it
    handed out so that stale tokens are acknowledged too. It checks nothing itself."""

    def __init__(self) -> None:
        self.w = SharePartition(0, CONFIG)
        self.now = 0
        self.tokens: list[tuple[int, int, str]] = []  # (offset, delivery, holder)

    def step(self, op: Op) -> Step:
        w, member = self.w, MEMBERS[op.member]
        if op.name == "new":  # new records past the end, with gaps
            first, stride = w.end + op.a % 3, 1 + op.b % 2
            return self.acquire(
                [first + i * stride for i in range(min(1 + op.a % 4, w.room))], member
            )
        if op.name == "due":
            return self.acquire(due(w, self.now)[: 1 + op.a % 4], member)
        if op.name == "any":  # one offset whatever its state, often one of the window's
            known = list(records(w))
            done = [o for o, (state, *_) in records(w).items() if state in (ACKNOWLEDGED, ARCHIVED)]
            if op.b % 3 == 1 and known:
                offset = known[op.a % len(known)]
            elif op.b % 3 == 2 and done:
                offset = done[op.a % len(done)]
            else:
                offset = op.a % (w.end + 3)
            return self.acquire([offset], member)
        if op.name == "ack" and self.tokens:  # a delivery handed out (recent ones more often)
            recent = len(self.tokens) if op.b % 4 == 0 else min(len(self.tokens), 6)
            offset, delivery, holder = self.tokens[-1 - op.a % recent]
            by = member if op.member == 0 else holder  # by whoever, or by its holder
            return self.ack(offset, offset, delivery, by, op.kind, op.b % 3 * 250)
        if op.name == "range" and self.tokens:  # records from a delivery on, by its holder
            offset, _, holder = self.tokens[-1 - op.a % min(len(self.tokens), 6)]
            first = max(0, offset - op.b % 2)
            by = member if op.member == 0 else holder
            return self.ack(first, first + op.b % 4, None, by, op.kind, op.b % 3 * 250)
        if op.name == "forged":
            return self.ack(op.a % (w.end + 3), None, op.b % (LIMIT + 2), member, op.kind, 0)
        if op.name == "expire":
            return self.took("expire", "", w.expire(self.now))
        if op.name == "leave":
            return self.took("leave", member, w.release_member(member))
        if op.name == "tick":
            self.now += op.b
        elif op.name == "back":  # the wall clock stepped back
            self.now = max(0, self.now - op.b)
        elif op.name == "skip":
            w.skip_to(w.end + op.a % 3)
        elif op.name == "restore":
            self.w = SharePartition.from_snapshot(w.snapshot(), w.config)
        elif op.name == "relock":  # the group's lock duration changed
            w.config = replace(w.config, lock_ms=(200, 1_000, 3_000)[op.a % 3])
        return Step()

    def acquire(self, offsets: list[int], member: str) -> Step:
        try:
            done = flat(self.w.acquire(spans(offsets), member, self.now))
        except ValueError:
            return Step(refused="acquire")
        self.tokens += [(t.offset, t.delivery_count, member) for t in done]
        return Step(tuple(Effect("acquire", member, self.now, t, t.delivery_count) for t in done))

    def ack(
        self,
        first: int,
        last: int | None,
        delivery: int | None,
        member: str,
        kind: AckType,
        delay_ms: int,
    ) -> Step:
        """A token's acknowledgement (`last` None: of `first` alone, with its delivery), or a
        range's."""
        try:
            done = self.w.acknowledge(
                first, first if last is None else last, member, kind, self.now, delay_ms, delivery
            )
        except AckRefused as exc:
            return Step(refused=exc.code)
        return Step(
            tuple(
                Effect(
                    "ack", member, self.now, t, t.delivery_count if delivery is None else delivery
                )
                for t in flat(done)
            )
        )

    def took(self, via: str, member: str, done: list[Transition]) -> Step:
        return Step(tuple(Effect(via, member, self.now, t, t.delivery_count) for t in flat(done)))


STEADY = (
    *("new", "due", "due", "any", "any", "ack", "ack", "ack", "range", "forged"),
    *("tick", "tick", "expire", "leave", "skip", "restore"),
)


def runs(*names: str) -> st.SearchStrategy[list[Op]]:
    """Runs of 20 to 120 steps; a step's fields are read off one number, which draws faster."""

    def op(name: str, n: int) -> Op:
        n, kind = divmod(n, len(AckType))
        n, member = divmod(n, len(MEMBERS))
        n, a = divmod(n, 41)
        return Op(name, member, a, n % 1_501, list(AckType)[kind])

    return st.lists(
        st.builds(op, st.sampled_from(names), st.integers(0, 2**30)), min_size=20, max_size=120
    )


@PROPERTY
@given(runs(*STEADY))
def test_a_record_whose_accept_took_effect_is_never_acquired_again(ops: list[Op]) -> None:
    d = Driver()
    accepted: set[int] = set()
    for op in ops:
        for e in d.step(op).effects:
            if e.via == "acquire":
                assert e.t.offset not in accepted, "an accepted record was acquired again"
            elif e.t.cause == "accepted":
                accepted.add(e.t.offset)


@PROPERTY
@given(runs(*STEADY))
def test_a_delivery_count_never_goes_down_and_never_passes_the_limit(ops: list[Op]) -> None:
    d = Driver()
    counts: dict[int, int] = {}
    for op in ops:
        for e in d.step(op).effects:
            seen = counts.get(e.t.offset, 0)
            assert e.t.delivery_count == seen + (e.via == "acquire") <= LIMIT
            counts[e.t.offset] = e.t.delivery_count
        for offset, (_, delivery, *_) in records(d.w).items():
            assert delivery == counts[offset] <= LIMIT


@dataclass
class Lock:
    """A lock as the deliveries and acknowledgements that took effect say it is."""

    member: str
    delivery: int
    deadline: int
    ended: bool = False

    def in_force(self, now: int) -> bool:
        return not self.ended and now < self.deadline


@PROPERTY
@given(runs(*STEADY))
def test_no_record_is_held_by_two_members_while_a_lock_is_in_force(ops: list[Op]) -> None:
    d = Driver()
    locks: dict[int, Lock] = {}
    for op in ops:
        for e in d.step(op).effects:
            lock, now = locks.get(e.t.offset), e.now
            if e.via == "acquire":
                assert lock is None or not lock.in_force(now), "acquired under another's lock"
                locks[e.t.offset] = Lock(e.member, e.t.delivery_count, now + LOCK_MS)
                continue
            assert lock is not None
            if e.via == "ack":
                assert lock.in_force(now), "an acknowledgement took effect without a lock"
                assert (lock.member, lock.delivery) == (e.member, e.delivery), (
                    "an acknowledgement by another member or of another delivery took effect"
                )
            elif e.via == "expire":
                assert not lock.in_force(now), "a lock in force was taken away"
            else:
                assert lock.member == e.member, "a leaving member gave back another's record"
            if e.t.cause == "renewed":
                lock.deadline = now + LOCK_MS
            else:
                lock.ended = True


@PROPERTY
@given(
    runs(*STEADY),
    st.lists(st.sampled_from(list(AckType)), min_size=1, max_size=6),
    st.integers(0, 20),
)
def test_every_record_ends_accepted_or_archived_while_consumers_keep_going(
    ops: list[Op], kinds: list[AckType], unread: int
) -> None:
    """After any run, consumers that acquire what is offered and acknowledge it any way they
    like (release and renew too), time moving on, drain the window up to the log's end."""
    d = Driver()
    for op in ops:
        d.step(op)
    w, now = d.w, d.now
    high = w.end + unread  # the log's end: records past the window too
    for turn in range(200):
        if w.start >= high:
            break
        now += LOCK_MS  # whatever was held lapses
        w.expire(now)
        member = MEMBERS[turn % len(MEMBERS)]
        offered = due(w, now) + list(range(w.end, min(high, w.end + w.room)))
        for i, t in enumerate(acquire(w, offered, member, now)):
            kind = kinds[(turn + i) % len(kinds)]
            ack(w, t.offset, t.delivery_count, member, kind, now, LOCK_MS // 4)
    assert (w.start, w.end, w.runs) == (high, high, [])


@PROPERTY
@given(runs(*STEADY))
def test_the_start_only_moves_forward_and_everything_below_it_is_done(ops: list[Op]) -> None:
    d = Driver()
    delivered: set[int] = set()
    done: set[int] = set()
    start = d.w.start
    for op in ops:
        for e in d.step(op).effects:
            delivered.add(e.t.offset)
            if e.t.state in (ACKNOWLEDGED, ARCHIVED):
                done.add(e.t.offset)
        w = d.w
        assert w.start >= start, "the start moved back"
        start = w.start
        assert {o for o in delivered if o < w.start} <= done, "an open record below the start"
        assert all(r.first >= w.start for r in w.runs)
        if w.runs:  # and it moved past the done records at the front
            assert not w.runs[0].done


@PROPERTY
@given(runs(*STEADY, "back", "relock"), st.integers(0, 120))
def test_a_window_restored_from_its_snapshot_at_any_point_goes_on_as_the_original(
    ops: list[Op], at: int
) -> None:
    """The clock may step back and the lock duration change: a new leader's clock is not the
    old one's, and a restored window only knows its records."""
    at %= len(ops) + 1
    d = Driver()
    for op in ops[:at]:
        d.step(op)
    restored = Driver()
    restored.now, restored.tokens = d.now, list(d.tokens)
    restored.w = SharePartition.from_snapshot(d.w.snapshot(), d.w.config)
    assert records(restored.w) == records(d.w)
    for op in ops[at:]:
        assert restored.step(op) == d.step(op), op
        assert restored.w.snapshot() == d.w.snapshot(), op
        assert records(restored.w) == records(d.w), op


@PROPERTY
@given(runs(*STEADY, "back", "relock"))
def test_expire_and_available_answer_as_a_scan_of_every_record_would(ops: list[Op]) -> None:
    """They skip their scan while the window's lower bounds say nothing is due; the clock
    stepping back or a lock renewed under a shorter duration must not make them miss one."""
    d = Driver()
    for op in ops:
        d.step(op)
        w, now = d.w, d.now
        pending = [
            r.deadline_ms
            for r in w.runs
            if r.state is ACQUIRED or (r.state is AVAILABLE and r.deadline_ms > now)
        ]
        soonest = w.next_deadline()
        assert not pending or (soonest is not None and soonest <= min(pending))
        now_records = records(w).items()
        lapsed = [o for o, (state, _, _, d) in now_records if state is ACQUIRED and d <= now]
        assert [t.offset for t in flat(w.expire(now))] == lapsed
        ready = [o for o, (state, _, _, d) in records(w).items() if state is AVAILABLE and d <= now]
        assert due(w, now) == ready


@PROPERTY
@given(runs(*STEADY))
def test_a_refused_acquire_or_acknowledgement_changes_nothing(ops: list[Op]) -> None:
    d = Driver()
    for op in ops:
        before = d.w.snapshot()
        if d.step(op).refused is not None:
            assert d.w.snapshot() == before, op


@PROPERTY
@given(runs(*STEADY, "back", "relock"))
def test_the_runs_are_ascending_within_the_window_and_no_two_neighbours_alike(
    ops: list[Op],
) -> None:
    """What the window keeps is what a snapshot stores: each run as long as it can be (alike
    neighbours joined), none below the start or at the end, the first one open, and `size`
    their records."""
    d = Driver()
    for op in ops:
        d.step(op)
        w = d.w
        below = w.start
        for a, b in zip(w.runs, w.runs[1:], strict=False):
            alike = (a.state, a.delivery_count, a.member, a.deadline_ms) == (
                b.state,
                b.delivery_count,
                b.member,
                b.deadline_ms,
            )
            assert not (alike and a.last + 1 == b.first), (op, a, b)
        for r in w.runs:
            assert below <= r.first <= r.last < w.end, op
            below = r.last + 1
            assert not r.done or (r.member, r.deadline_ms) == (None, 0), op
        assert not w.runs or not w.runs[0].done, op
        assert w.size == sum(r.count for r in w.runs), op


@PROPERTY
@given(runs(*STEADY), st.integers(0, 2**30))
def test_a_range_acknowledged_does_what_each_of_its_records_acknowledged_alone_would(
    ops: list[Op], n: int
) -> None:
    """Every record of a range the member holds: the range takes effect as the tokens of each
    would, one after another; one not held: refused whole, as the first token not held is."""
    d = Driver()
    for op in ops:
        d.step(op)
    w, now = d.w, d.now
    kind = list(AckType)[n % len(AckType)]
    held_now = [
        (o, m) for o, (state, _, m, _) in records(w).items() if state is ACQUIRED and m is not None
    ]
    member: str
    if held_now and n // 4 % 4:  # mostly from a record held, by its holder
        first, member = held_now[n // 16 % len(held_now)]
    else:
        first, member = n // 16 % (w.end + 2), MEMBERS[n // 4 % len(MEMBERS)]
    last = first + n // 65536 % 5
    by_range = SharePartition.from_snapshot(w.snapshot(), w.config)
    by_tokens = SharePartition.from_snapshot(w.snapshot(), w.config)
    try:
        ranged: Any = flat(by_range.acknowledge(first, last, member, kind, now, 300))
    except AckRefused as exc:
        ranged = exc.code
    known = records(by_tokens)
    start, end = by_tokens.start, by_tokens.end  # before the tokens move the window's start
    tokens: Any = []
    for offset in range(first, last + 1):
        if start <= offset < end and offset not in known:
            continue  # no record there: a range passes over it
        delivery = known[offset][1] if offset in known else 1
        try:
            tokens += [ack(by_tokens, offset, delivery, member, kind, now, 300)]
        except AckRefused as exc:
            tokens = exc.code
            break
    if not tokens:
        tokens = "RECORD_NOT_ACQUIRED"
    assert ranged == tokens
    if isinstance(ranged, str):
        assert by_range.snapshot() == w.snapshot()
        return
    else:
        assert records(by_range) == records(by_tokens)
        assert (by_range.start, by_range.end) == (by_tokens.start, by_tokens.end)
