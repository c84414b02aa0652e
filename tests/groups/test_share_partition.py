"""The share-partition window (groups.share.partition_state) as plain state, with no HTTP and no
clock: every transition and every refusal, the stored form, and properties over random runs of
acquires, acknowledgements (stale, forged and by other members too), lapsing locks, members
leaving and restores from snapshots, each property checked by a test of its own."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

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
    Transition,
    check_snapshot,
)
from tests.hypothesis_runs import deterministic

CONFIG = ShareConfig(lock_ms=1_000, delivery_limit=3, max_record_locks=8)
LOCK_MS, LIMIT = CONFIG.lock_ms, CONFIG.delivery_limit
A, B = "member-a", "member-b"
AVAILABLE, ACQUIRED = RecordState.AVAILABLE, RecordState.ACQUIRED
ACKNOWLEDGED, ARCHIVED = RecordState.ACKNOWLEDGED, RecordState.ARCHIVED
ACCEPT, RELEASE, REJECT, RENEW = AckType.ACCEPT, AckType.RELEASE, AckType.REJECT, AckType.RENEW


def window(start: int = 0, config: ShareConfig = CONFIG) -> SharePartition:
    return SharePartition(start, config)


def records(w: SharePartition) -> dict[int, tuple[RecordState, int, str | None, int]]:
    """Each record of the window as (state, delivery count, last holder, deadline)."""
    return {o: (r.state, r.delivery_count, r.member, r.deadline_ms) for o, r in w.records.items()}


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
            w.acknowledge(offset, delivery, member, kind, now, 100)
        assert caught.value.code == code, kind
        assert w.snapshot() == before, kind


def not_acquired(w: SharePartition, offsets: list[int], now: int, match: str) -> None:
    """The acquire is refused (a ValueError matching `match`), and the window is as it was."""
    before = w.snapshot()
    with pytest.raises(ValueError, match=match):
        w.acquire(offsets, B, now)
    assert w.snapshot() == before


# -- acquire ------------------------------------------------------------------------------------


def test_new_records_are_acquired_at_the_end_with_a_delivery_and_a_lock() -> None:
    w = window(10)
    done = w.acquire([10, 11, 14], A, 500)  # 12 and 13: records the log no longer has
    assert done == [
        Transition(10, ACQUIRED, 1, "acquired"),
        Transition(11, ACQUIRED, 1, "acquired"),
        Transition(14, ACQUIRED, 1, "acquired"),
    ]
    assert (w.start, w.end) == (10, 15)
    assert records(w) == {o: (ACQUIRED, 1, A, 500 + LOCK_MS) for o in (10, 11, 14)}
    assert w.acquire([20], B, 600) == [Transition(20, ACQUIRED, 1, "acquired")]
    assert w.end == 21 and 17 not in w.records
    assert (w.held_by(A), w.held_by(B), w.held_by("nobody")) == ([10, 11, 14], [20], [])


def test_an_available_record_is_acquired_again_with_its_next_delivery() -> None:
    w = window()
    w.acquire([0], A, 0)
    w.acknowledge(0, 1, A, RELEASE, 100)
    assert w.acquire([0], B, 200) == [Transition(0, ACQUIRED, 2, "acquired")]
    assert records(w) == {0: (ACQUIRED, 2, B, 200 + LOCK_MS)}
    assert (w.held_by(A), w.held_by(B), w.end) == ([], [0], 1)


def test_an_acquire_of_a_record_that_is_not_available_is_refused() -> None:
    w = window()
    w.acquire([0, 1, 2, 3, 5], A, 0)
    w.acknowledge(1, 1, A, ACCEPT, 0)  # done inside the window: 0 holds the start
    w.acknowledge(2, 1, A, REJECT, 0)
    w.acknowledge(3, 1, A, RELEASE, 0, delay_ms=500)
    not_acquired(w, [0], 0, "not available")  # held
    not_acquired(w, [3], 499, "not available")  # released with a delay: not due yet
    assert w.acquire([3], B, 500) == [Transition(3, ACQUIRED, 2, "acquired")]
    later = 2 * LOCK_MS  # every lock has lapsed
    not_acquired(w, [0], later, "not available")  # lapsed, but not given back by expire()
    not_acquired(w, [1], later, "not available")  # acknowledged
    not_acquired(w, [2], later, "not available")  # archived


def test_an_acquire_of_an_offset_inside_the_window_that_it_does_not_hold_is_refused() -> None:
    w = window(4)
    w.acquire([4, 7], A, 0)
    not_acquired(w, [5], 0, "not in the window")  # skipped: not in the log
    not_acquired(w, [3], 0, "not in the window")  # below the start
    w.acknowledge(4, 1, A, ACCEPT, 0)
    assert w.start == 7
    not_acquired(w, [4], 0, "not in the window")  # accepted, below the start now


def test_an_acquire_of_new_records_past_the_room_is_refused() -> None:
    w = window(config=replace(CONFIG, max_record_locks=3))
    w.acquire([0, 1, 2], A, 0)
    assert w.room == 0
    not_acquired(w, [3], 0, "full")
    w.acknowledge(1, 1, A, ACCEPT, 0)
    assert w.room == 0  # a done record behind an open one still takes its place
    w.acknowledge(0, 1, A, ACCEPT, 0)
    assert (w.start, w.room) == (2, 2)
    w.acquire([3, 4], B, 0)
    assert w.room == 0
    not_acquired(w, [5], 0, "full")


def test_an_acquire_refused_part_way_changes_nothing() -> None:
    """All or nothing: an acquire of several records, one of which may not be acquired, takes
    none of them (the window, its end and its room as they were)."""
    w = window(config=replace(CONFIG, max_record_locks=4))
    w.acquire([0, 1], A, 0)
    not_acquired(w, [2, 3, 0], 0, "not available")  # new ones first, then one held
    not_acquired(w, [2, 3, 1, 4], 0, "not available")
    not_acquired(w, [2, 2], 0, "not in the window")  # a new one named twice
    w.acknowledge(0, 1, A, RELEASE, 0)
    not_acquired(w, [0, 0], 0, "twice")  # an available one named twice: one delivery
    not_acquired(w, [0, 2, 3, 4], 0, "full")  # due again, then more new ones than the room
    assert (w.end, w.room) == (2, 2)
    assert w.acquire([0, 2, 3], B, 0) == [
        Transition(0, ACQUIRED, 2, "acquired"),
        Transition(2, ACQUIRED, 1, "acquired"),
        Transition(3, ACQUIRED, 1, "acquired"),
    ]


# -- acknowledge --------------------------------------------------------------------------------


def test_accept_acknowledges_the_record() -> None:
    w = window()
    w.acquire([0, 1], A, 0)
    assert w.acknowledge(0, 1, A, ACCEPT, 10) == Transition(0, ACKNOWLEDGED, 1, "accepted")
    assert (w.start, list(w.records)) == (1, [1])


def test_reject_archives_the_record() -> None:
    w = window()
    w.acquire([0, 1], A, 0)
    assert w.acknowledge(1, 1, A, REJECT, 10) == Transition(1, ARCHIVED, 1, "rejected")
    assert w.counts() == {"available": 0, "acquired": 1, "acknowledged": 0, "archived": 1}


def test_release_gives_the_record_back_at_once() -> None:
    w = window()
    w.acquire([0], A, 0)
    assert w.acknowledge(0, 1, A, RELEASE, 10) == Transition(0, AVAILABLE, 1, "released")
    assert records(w) == {0: (AVAILABLE, 1, A, 0)}
    assert w.available(10) == [0] and w.held_by(A) == []


def test_a_release_with_a_delay_offers_the_record_again_only_when_it_is_due() -> None:
    w = window()
    w.acquire([0, 1], A, 0)
    w.acknowledge(0, 1, A, RELEASE, 100, delay_ms=400)
    assert records(w)[0] == (AVAILABLE, 1, A, 500)
    assert w.available(499) == []
    assert w.next_deadline() == 500
    not_acquired(w, [0], 499, "not available")
    assert w.available(500) == [0]
    assert w.acquire([0], B, 500) == [Transition(0, ACQUIRED, 2, "acquired")]


def test_renew_moves_the_lock_deadline() -> None:
    w = window()
    w.acquire([0], A, 0)
    assert w.acknowledge(0, 1, A, RENEW, 900) == Transition(0, ACQUIRED, 1, "renewed")
    assert records(w) == {0: (ACQUIRED, 1, A, 900 + LOCK_MS)}
    assert w.expire(LOCK_MS) == []  # the first deadline passes: still held
    assert w.acknowledge(0, 1, A, ACCEPT, 900 + LOCK_MS - 1).state is ACKNOWLEDGED


def test_a_lock_renewed_under_a_shorter_lock_duration_lapses_at_its_new_deadline() -> None:
    w = window(config=replace(CONFIG, lock_ms=30_000))
    w.acquire([0], A, 0)
    w.config = CONFIG  # the group's lock duration set shorter, as the coordinator does
    w.acknowledge(0, 1, A, RENEW, 100)
    assert records(w)[0] == (ACQUIRED, 1, A, 100 + LOCK_MS)
    assert w.expire(100 + LOCK_MS) == [Transition(0, AVAILABLE, 1, "lock_expired")]
    assert w.available(100 + LOCK_MS) == [0]


# -- refusals: each says why and changes nothing --------------------------------------------------


def test_an_offset_never_in_the_window_is_refused_as_not_acquired() -> None:
    w = window()
    refused(w, "RECORD_NOT_ACQUIRED", 0, 1, A)  # an empty window
    w.acquire([0, 2], A, 0)
    refused(w, "RECORD_NOT_ACQUIRED", 1, 1, A)  # a gap
    refused(w, "RECORD_NOT_ACQUIRED", 3, 1, A)  # the end
    refused(w, "RECORD_NOT_ACQUIRED", 50, 1, A)  # far past it


def test_an_acknowledged_or_archived_record_is_refused_as_acknowledged_already() -> None:
    w = window()
    w.acquire([0, 1, 2, 3], A, 0)
    w.acknowledge(1, 1, A, ACCEPT, 0)
    w.acknowledge(2, 1, A, REJECT, 0)
    refused(w, "ALREADY_ACKNOWLEDGED", 1, 1, A)  # acknowledged, inside the window
    refused(w, "ALREADY_ACKNOWLEDGED", 2, 1, A)  # archived, inside the window
    refused(w, "ALREADY_ACKNOWLEDGED", 1, 1, B)  # whoever asks
    w.acknowledge(0, 1, A, ACCEPT, 0)
    assert w.start == 3
    for offset in (0, 1, 2):  # below the start
        refused(w, "ALREADY_ACKNOWLEDGED", offset, 1, A)


def test_a_token_of_an_older_delivery_is_refused_as_delivered_again() -> None:
    w = window()
    w.acquire([0, 1], A, 0)
    w.acknowledge(0, 1, A, RELEASE, 0)
    w.acquire([0], A, 0)  # the same member, a new delivery
    refused(w, "DELIVERED_AGAIN", 0, 1, A)
    w.acknowledge(1, 1, A, RELEASE, 0)
    w.acquire([1], B, 0)  # another member since
    refused(w, "DELIVERED_AGAIN", 1, 1, A)
    refused(w, "DELIVERED_AGAIN", 1, 3, B)  # a delivery that never was


def test_a_member_that_does_not_hold_the_record_is_refused() -> None:
    w = window()
    w.acquire([0], A, 0)
    refused(w, "NOT_HOLDER", 0, 1, B)


def test_a_lock_that_lapsed_or_was_released_is_refused_as_expired() -> None:
    w = window()
    w.acquire([0, 1, 2], A, 0)
    refused(w, "LOCK_EXPIRED", 0, 1, A, now=LOCK_MS)  # at its deadline, before expire() looks
    w.expire(LOCK_MS)
    refused(w, "LOCK_EXPIRED", 0, 1, A, now=LOCK_MS)  # given back by expire()
    w = window()
    w.acquire([0, 1], A, 0)
    w.acknowledge(0, 1, A, RELEASE, 10)
    refused(w, "LOCK_EXPIRED", 0, 1, A, now=20)  # its holder let go
    w.release_member(A)
    refused(w, "LOCK_EXPIRED", 1, 1, A, now=20)  # its holder left


# -- time, members, the log -----------------------------------------------------------------------


def test_lapsed_locks_give_their_records_back() -> None:
    w = window()
    w.acquire([0, 1], A, 0)
    w.acquire([2], B, 500)
    assert w.expire(LOCK_MS - 1) == []
    assert w.expire(LOCK_MS) == [
        Transition(0, AVAILABLE, 1, "lock_expired"),
        Transition(1, AVAILABLE, 1, "lock_expired"),
    ]
    assert records(w) == {
        0: (AVAILABLE, 1, A, 0),
        1: (AVAILABLE, 1, A, 0),
        2: (ACQUIRED, 1, B, 500 + LOCK_MS),
    }
    assert w.available(LOCK_MS) == [0, 1]
    assert w.expire(LOCK_MS) == []


def give_back(w: SharePartition, how: str, delivery: int, now: int) -> list[Transition]:
    """Offset 0's lock ends without an accept or reject, as `how` says."""
    if how == "release":
        return [w.acknowledge(0, delivery, A, RELEASE, now)]
    if how == "lapse":
        return w.expire(now + LOCK_MS)
    return w.release_member(A)


@pytest.mark.parametrize("how", ["release", "lapse", "leave"])
def test_at_the_delivery_limit_a_record_given_back_is_archived_and_never_delivered_again(
    how: str,
) -> None:
    w = window()
    w.acquire([0], A, 0)
    w.acquire([1], B, 0)  # behind it, so that the start has somewhere to move to
    now = 0
    for delivery in range(1, LIMIT + 1):
        if delivery > 1:
            now += 2 * LOCK_MS
            assert w.acquire([0], A, now) == [Transition(0, ACQUIRED, delivery, "acquired")]
        last = give_back(w, how, delivery, now)[0]
        assert (last.offset, last.delivery_count) == (0, delivery)
        assert last.state is (ARCHIVED if delivery == LIMIT else AVAILABLE)
    assert 0 not in w.records and w.start == 1
    not_acquired(w, [0], now + 10 * LOCK_MS, "not in the window")


def test_a_lowered_delivery_limit_archives_what_was_given_back_that_many_times() -> None:
    """A record given back after 2 deliveries under a limit of 3 may not be delivered a third
    time once the limit is 2: archived at once. One held is archived when it is given back;
    one with fewer deliveries stays."""
    w = window()
    w.acquire([0, 1, 2], A, 0)
    w.acknowledge(0, 1, A, RELEASE, 0)
    w.acquire([0], A, 0)
    w.acknowledge(0, 2, A, RELEASE, 0, delay_ms=500)  # given back twice, due later
    w.acknowledge(2, 1, A, RELEASE, 0)  # given back once
    assert w.configure(replace(CONFIG, delivery_limit=2)) == [
        Transition(0, ARCHIVED, 2, "archived")
    ]
    assert w.start == 1 and w.available(1_000) == [2]
    not_acquired(w, [0], 1_000, "not in the window")
    w.acquire([2], B, 1_000)
    assert w.acknowledge(2, 2, B, RELEASE, 1_000).state is ARCHIVED
    assert w.acknowledge(1, 1, A, RELEASE, 0).state is AVAILABLE  # its first delivery
    assert w.configure(CONFIG) == []


def test_a_member_leaving_gives_back_what_it_holds_and_nothing_else() -> None:
    w = window()
    w.acquire([0, 1], A, 0)
    w.acquire([2], B, 0)
    w.acknowledge(1, 1, A, RELEASE, 0)
    w.acquire([1], A, 0)
    assert w.release_member(A) == [
        Transition(0, AVAILABLE, 1, "released"),
        Transition(1, AVAILABLE, 2, "released"),
    ]
    assert w.held_by(A) == [] and w.held_by(B) == [2]
    assert w.available(0) == [0, 1]
    assert w.release_member(A) == [] and w.release_member("nobody") == []


def test_a_reset_starts_over_only_while_no_record_is_acquired() -> None:
    w = window(5)
    w.acquire([5, 6], A, 0)
    before = w.snapshot()
    with pytest.raises(ValueError, match="acquired"):
        w.reset(0)
    assert w.snapshot() == before
    w.acknowledge(5, 1, A, ACCEPT, 0)
    w.acknowledge(6, 1, A, RELEASE, 0)
    w.reset(2)  # back to before the start: the records are delivered again, counted anew
    assert (w.start, w.end, w.records) == (2, 2, {})
    assert w.acquire([5], B, 0) == [Transition(5, ACQUIRED, 1, "acquired")]


def test_retention_below_the_window_moves_its_start_and_drops_what_it_held_there() -> None:
    w = window()
    w.acquire([0, 1, 2, 3, 4], A, 0)
    w.acknowledge(3, 1, A, ACCEPT, 0)
    w.acknowledge(1, 1, A, RELEASE, 0)
    before = w.snapshot()
    assert w.advance_to(0) == 0 and w.snapshot() == before  # not past the start: nothing
    assert w.advance_to(3) == 3  # 0 and 2 held, 1 available: open records lost
    assert (w.start, w.end, list(w.records)) == (4, 5, [4])  # 3 was done
    refused(w, "ALREADY_ACKNOWLEDGED", 0, 1, A)
    assert w.advance_to(9) == 1
    assert (w.start, w.end, w.records) == (9, 9, {})


def test_a_skip_moves_the_end_past_offsets_with_nothing_to_deliver() -> None:
    w = window()
    w.skip_to(5)
    assert (w.start, w.end) == (5, 5)
    w.skip_to(3)  # never back
    assert (w.start, w.end) == (5, 5)
    w.acquire([5], A, 0)
    w.skip_to(9)
    assert (w.start, w.end) == (5, 9)
    not_acquired(w, [7], 0, "not in the window")
    assert w.acquire([9], A, 0) == [Transition(9, ACQUIRED, 1, "acquired")]


def test_records_compacted_away_while_available_leave_the_window() -> None:
    w = window()
    w.acquire([0, 1, 2, 3], A, 0)
    w.acknowledge(0, 1, A, RELEASE, 0)
    w.acknowledge(2, 1, A, RELEASE, 0)
    w.acknowledge(3, 1, A, ACCEPT, 0)
    w.forget([0, 1, 2, 3, 7])  # only the available ones go: 1 is held, 3 done, 7 never was
    assert (w.start, list(w.records)) == (1, [1, 3])


def test_the_start_moves_past_acknowledged_and_archived_records_at_the_front_only() -> None:
    w = window()
    w.acquire([0, 1, 2, 3, 4], A, 0)
    w.acknowledge(2, 1, A, ACCEPT, 0)
    w.acknowledge(3, 1, A, REJECT, 0)
    w.acknowledge(1, 1, A, ACCEPT, 0)
    assert (w.start, list(w.records)) == (0, [0, 1, 2, 3, 4])
    w.acknowledge(0, 1, A, RELEASE, 0)  # given back: still open
    assert w.start == 0
    w.acquire([0], A, 0)
    w.acknowledge(0, 2, A, REJECT, 0)
    assert (w.start, list(w.records)) == (4, [4])
    w.acknowledge(4, 1, A, ACCEPT, 0)
    assert (w.start, w.end, w.records) == (5, 5, {})


def test_lag_counts_the_open_records_and_those_past_the_end() -> None:
    w = window(10)
    assert w.lag(10) == 0 and w.lag(25) == 15
    w.acquire([10, 11, 12, 15], A, 0)
    w.acknowledge(11, 1, A, ACCEPT, 0)
    w.acknowledge(12, 1, A, RELEASE, 0)
    assert w.lag(20) == 3 + 4  # 10, 12 and 15 open; 16 to 19 not read yet
    assert w.lag(16) == 3 and w.lag(5) == 3


def test_counts_say_how_many_records_are_in_each_state() -> None:
    w = window()
    assert w.counts() == {"available": 0, "acquired": 0, "acknowledged": 0, "archived": 0}
    w.acquire([0, 1, 2, 3, 4], A, 0)
    w.acknowledge(1, 1, A, RELEASE, 0)
    w.acknowledge(2, 1, A, ACCEPT, 0)
    w.acknowledge(3, 1, A, REJECT, 0)
    assert w.counts() == {"available": 1, "acquired": 2, "acknowledged": 1, "archived": 1}


def test_next_deadline_is_never_later_than_the_next_lapse_or_due_release() -> None:
    w = window()
    assert w.next_deadline() is None
    w.acquire([0, 1], A, 0)
    assert w.next_deadline() == LOCK_MS
    w.acknowledge(1, 1, A, RELEASE, 100, delay_ms=300)
    assert w.next_deadline() == 400
    w.acknowledge(0, 1, A, ACCEPT, 200)
    w.acquire([1], A, 400)
    w.acknowledge(1, 2, A, ACCEPT, 500)
    assert w.next_deadline() is not None  # a bound: made exact by the scans below
    assert w.expire(LOCK_MS) == [] and w.available(LOCK_MS) == []
    assert w.next_deadline() is None


def test_a_record_due_again_is_offered_when_the_clock_steps_back() -> None:
    w = window()
    w.acquire([0], A, 1_000)
    w.acknowledge(0, 1, A, RELEASE, 1_100)
    assert w.available(1_200) == [0]
    assert w.available(1_150) == [0]  # the wall clock stepped back: still due


def test_the_room_is_the_record_locks_left() -> None:
    w = window()
    assert w.room == CONFIG.max_record_locks
    w.acquire([0, 1, 5], A, 0)
    assert w.room == CONFIG.max_record_locks - 3  # gaps take none
    w.acknowledge(0, 1, A, ACCEPT, 0)
    assert w.room == CONFIG.max_record_locks - 2


# -- the stored form ------------------------------------------------------------------------------


def test_a_snapshot_keeps_runs_of_consecutive_alike_records() -> None:
    w = window()
    w.acquire([0, 1, 2], A, 0)
    w.acquire([3], A, 0)  # alike: joins the run
    w.acquire([5, 6], A, 0)  # after a gap: a run of its own
    w.acquire([7], B, 0)  # another holder
    w.acquire([8], B, 10)  # another deadline
    w.acknowledge(1, 1, A, ACCEPT, 0)  # another state
    w.acknowledge(6, 1, A, RELEASE, 0)
    w.acquire([6], A, 0)  # another delivery count
    assert w.snapshot() == {
        "start": 0,
        "end": 9,
        "runs": [
            [0, 0, 1, 1, A, 1_000],
            [1, 1, 2, 1, A, 1_000],
            [2, 3, 1, 1, A, 1_000],
            [5, 5, 1, 1, A, 1_000],
            [6, 6, 1, 2, A, 1_000],
            [7, 7, 1, 1, B, 1_000],
            [8, 8, 1, 1, B, 1_010],
        ],
    }
    assert window(7).snapshot() == {"start": 7, "end": 7, "runs": []}


def test_a_window_with_gaps_and_every_state_round_trips_and_goes_on_alike() -> None:
    w = window(3)
    w.acquire([3, 4, 6, 7, 9, 10, 12], A, 0)
    w.acquire([15], B, 300)
    w.acknowledge(4, 1, A, ACCEPT, 0)
    w.acknowledge(6, 1, A, REJECT, 0)
    w.acknowledge(7, 1, A, RELEASE, 0)
    w.acknowledge(9, 1, A, RELEASE, 0, delay_ms=700)
    doc = w.snapshot()
    again = SharePartition.from_snapshot(doc, CONFIG)
    assert again.snapshot() == doc
    assert records(again) == records(w)
    assert (again.start, again.end, again.counts()) == (w.start, w.end, w.counts())
    for later in (w, again):
        assert later.available(500) == [7]
        assert later.expire(LOCK_MS) == [
            Transition(3, AVAILABLE, 1, "lock_expired"),
            Transition(10, AVAILABLE, 1, "lock_expired"),
            Transition(12, AVAILABLE, 1, "lock_expired"),
        ]
        assert later.available(LOCK_MS) == [3, 7, 9, 10, 12]
    assert again.snapshot() == w.snapshot()


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
    """A transition that took effect, `via` what (acquire, ack, expire, leave), for whom, when,
    and the delivery of the record that the step named (an acknowledgement's token's)."""

    via: str
    member: str
    now: int
    t: Transition
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
            return self.acquire(w.available(self.now)[: 1 + op.a % 4], member)
        if op.name == "any":  # one offset whatever its state, often one of the window's
            done = [o for o, r in w.records.items() if r.done]
            if op.b % 3 == 1 and w.records:
                offset = list(w.records)[op.a % len(w.records)]
            elif op.b % 3 == 2 and done:
                offset = done[op.a % len(done)]
            else:
                offset = op.a % (w.end + 3)
            return self.acquire([offset], member)
        if op.name == "ack" and self.tokens:  # a delivery handed out (recent ones more often)
            recent = len(self.tokens) if op.b % 4 == 0 else min(len(self.tokens), 6)
            offset, delivery, holder = self.tokens[-1 - op.a % recent]
            by = member if op.member == 0 else holder  # by whoever, or by its holder
            return self.ack(offset, delivery, by, op.kind, op.b % 3 * 250)
        if op.name == "forged":
            return self.ack(op.a % (w.end + 3), op.b % (LIMIT + 2), member, op.kind, 0)
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
            done = self.w.acquire(offsets, member, self.now)
        except ValueError:
            return Step(refused="acquire")
        self.tokens += [(t.offset, t.delivery_count, member) for t in done]
        return self.took("acquire", member, done)

    def ack(self, offset: int, delivery: int, member: str, kind: AckType, delay_ms: int) -> Step:
        try:
            done = self.w.acknowledge(offset, delivery, member, kind, self.now, delay_ms)
        except AckRefused as exc:
            return Step(refused=exc.code)
        return Step((Effect("ack", member, self.now, done, delivery),))

    def took(self, via: str, member: str, done: list[Transition]) -> Step:
        return Step(tuple(Effect(via, member, self.now, t, t.delivery_count) for t in done))


STEADY = (
    *("new", "due", "due", "any", "any", "ack", "ack", "ack", "forged"),
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
        for offset, record in d.w.records.items():
            assert record.delivery_count == counts[offset] <= LIMIT


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
        offered = w.available(now) + list(range(w.end, min(high, w.end + w.room)))
        for i, t in enumerate(w.acquire(offered, member, now)):
            kind = kinds[(turn + i) % len(kinds)]
            w.acknowledge(t.offset, t.delivery_count, member, kind, now, LOCK_MS // 4)
    assert (w.start, w.end, w.records) == (high, high, {})


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
        assert all(o >= w.start for o in w.records)
        if w.records:  # and it moved past the done records at the front
            assert not w.records[min(w.records)].done


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
            for r in w.records.values()
            if r.state is ACQUIRED or (r.state is AVAILABLE and r.deadline_ms > now)
        ]
        soonest = w.next_deadline()
        assert not pending or (soonest is not None and soonest <= min(pending))
        lapsed = [o for o, r in w.records.items() if r.state is ACQUIRED and r.deadline_ms <= now]
        assert [t.offset for t in w.expire(now)] == lapsed
        due = [o for o, r in w.records.items() if r.state is AVAILABLE and r.deadline_ms <= now]
        assert w.available(now) == due


@PROPERTY
@given(runs(*STEADY))
def test_a_refused_acquire_or_acknowledgement_changes_nothing(ops: list[Op]) -> None:
    d = Driver()
    for op in ops:
        before = d.w.snapshot()
        if d.step(op).refused is not None:
            assert d.w.snapshot() == before, op
