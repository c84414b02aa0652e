"""The delivery state machine under orderings `key` and `none` and with partial batch
responses: unit cases, and seeded simulations whose every attempt goes through the same
checker as the end-to-end tests (tracing.check), with the committed position checked after
every step: never past a record not yet acknowledged or dead-lettered."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest

from groups.subscriptions.spec import Batching, Ordering, RetryPolicy
from groups.subscriptions.state import (
    KEY_SCAN,
    UNCOMMITTED_WINDOWS,
    Answer,
    DeadLetter,
    DeliveryRecord,
    PartitionDispatch,
    Send,
    Stop,
)
from tests.subscriptions.tracing import Traced, check

POLICY = RetryPolicy(
    timeout_ms=100, max_attempts=3, min_backoff_ms=10, max_backoff_ms=40, retry_after_max_ms=50
)


def keyed(*keys: str, start: int = 0) -> list[DeliveryRecord]:
    return [DeliveryRecord(start + i, 0, k.encode(), b"v", []) for i, k in enumerate(keys)]


def machine(ordering: Ordering, max_in_flight: int = 4, **batching: int) -> PartitionDispatch:
    return PartitionDispatch(0, Batching(**batching), POLICY, True, ordering, max_in_flight)


def offsets(send: Send | None) -> list[int]:
    assert send is not None
    return [r.offset for r in send.records]


def test_key_ordering_sends_other_keys_in_parallel_and_holds_a_busy_key() -> None:
    state = machine("key")
    state.read(keyed("a", "a", "b", "c", "b"), 5, now=0.0)
    first, second, third = (state.next_send(0.0) for _ in range(3))
    assert [offsets(first), offsets(second), offsets(third)] == [[0], [2], [3]]
    assert state.next_send(0.0) is None  # 1 waits for 0 (a), 4 for 2 (b)
    assert state.wake_at() is None  # nothing to do until an answer
    assert state.committable == 0 and state.requests_in_flight == 3
    assert second is not None and third is not None and first is not None
    state.answered(second, Answer(204), 0.0, 0.0)
    assert offsets(state.next_send(0.0)) == [4] and state.committable == 0
    state.answered(first, Answer(204), 0.0, 0.0)
    assert state.committable == 1
    assert offsets(state.next_send(0.0)) == [1]  # a is free; 0 and 2 wait beside the window


def test_key_ordering_batches_skip_held_keys_and_keep_the_rest_in_order() -> None:
    state = machine("key", max_records=3)
    state.read(keyed("a", "b"), 2, now=0.0)
    first = state.next_send(0.0)
    assert offsets(first) == [0, 1]
    state.read(keyed("a", "c", "b", "d", "c", start=2), 7, now=0.0)
    # a and b are outstanding: 2 and 4 wait; c and d are free (both c's go, in order)
    assert offsets(state.next_send(0.0)) == [3, 5, 6]
    assert [r.offset for r in state.buffered] == [2, 4]
    assert state.committable == 0


def test_key_ordering_looks_only_so_far_for_a_free_key() -> None:
    state = machine("key", max_records=1)
    state.read(keyed(*["a"] * (KEY_SCAN + 1), "b"), KEY_SCAN + 2, now=0.0)
    assert offsets(state.next_send(0.0)) == [0]
    assert state.next_send(0.0) is None  # b is past the scan window
    assert len(state.buffered) == KEY_SCAN + 1


def test_none_ordering_is_bounded_by_max_in_flight_and_commits_the_lowest_open() -> None:
    state = machine("none", max_in_flight=2)
    state.read(keyed("a", "a", "a"), 3, now=0.0)
    first, second = state.next_send(0.0), state.next_send(0.0)
    assert offsets(first) == [0] and offsets(second) == [1]
    assert state.next_send(0.0) is None
    assert first is not None and second is not None
    assert state.answered(second, Answer(500), 0.0, 0.0) is None  # retried later
    assert state.next_send(0.0) is None  # the window counts batches waiting for a retry
    state.answered(first, Answer(204), 0.0, 0.0)
    assert state.committable == 1  # 1 still waits for its retry
    assert offsets(state.next_send(0.0)) == [2] and state.committable == 1
    assert state.next_send(0.0) is None  # 1 and 2 outstanding: the window is full


def test_a_record_waiting_for_retries_holds_the_window() -> None:
    """Ordering none: past a failing record, what is outstanding and done stays within
    open_limit (the window and UNCOMMITTED_WINDOWS more), so that a crash delivers no more
    than that again."""
    state = machine("none", max_in_flight=3)
    state.read(keyed(*"abcdefghijklmnopqrst"), 20, now=0.0)
    assert state.open_limit == 3 + 3 * UNCOMMITTED_WINDOWS == 15
    stuck = state.next_send(0.0)
    assert stuck is not None
    state.answered(stuck, Answer(500), 0.0, 0.0)
    acked = []
    while (send := state.next_send(0.0)) is not None:
        state.answered(send, Answer(204), 0.0, 0.0)
        acked += offsets(send)
        state.committed(state.committable)
    assert acked == list(range(1, 15)) and state.settle_now()
    assert state.committable == 0 and state.next_send(1.0) is not None  # the retry
    assert state.next_send(1.0) is None and state.wake_at() is None  # 0 open, 1 to 14 done
    assert [r.offset for r in state.buffered] == [15, 16, 17, 18, 19]


def test_commits_wait_for_the_interval_while_busy_and_not_when_idle() -> None:
    """settle_now: not while records are in flight, wait to be sent or were all sent (the
    driver commits within its interval), at once when the records done reach
    uncommitted_limit or when the partition is paused with nothing in flight."""
    state = machine("none", max_in_flight=1)
    state.read(keyed(*"abcdef"), 6, now=0.0)
    for n in range(1, 5):
        send = state.next_send(0.0)
        assert send is not None and not state.settle_now()  # in flight
        state.answered(send, Answer(204), 0.0, 0.0)
        assert state.settle_now() == (n == state.uncommitted_limit == 4)
    send = state.next_send(0.0)  # the window's own room, past the uncommitted limit
    assert send is not None
    state.answered(send, Answer(204), 0.0, 0.0)
    assert state.next_send(0.0) is None  # open_limit reached: until a commit
    state.committed(state.committable)
    send = state.next_send(0.0)
    assert send is not None and offsets(send) == [5]
    state.answered(send, Answer(204), 0.0, 0.0)
    assert state.committable == 6 and not state.settle_now()  # caught up: the interval
    state.pause()
    assert state.settle_now()


def test_partition_ordering_ignores_max_in_flight() -> None:
    state = machine("partition", max_in_flight=8)
    state.read(keyed("a", "b"), 2, now=0.0)
    assert offsets(state.next_send(0.0)) == [0] and state.next_send(0.0) is None


def test_a_partial_batch_response_retries_only_the_failed_records() -> None:
    state = machine("partition", max_records=5)
    state.read(keyed("a", "b", "c", "d"), 4, now=0.0)
    send = state.next_send(0.0)
    assert offsets(send) == [0, 1, 2, 3] and send is not None
    assert state.answered(send, Answer(200, failed=frozenset({1, 3})), 0.0, 0.0) is None
    assert state.delivered == 2 and state.retried == 2 and state.committable == 1
    retry = state.next_send(1.0)
    assert offsets(retry) == [1, 3] and retry is not None and retry.attempt == 2
    step = state.answered(retry, Answer(200, failed=frozenset({3})), 1.0, 0.0)
    assert step is None and state.committable == 3
    last = state.next_send(2.0)
    assert last is not None
    step = state.answered(last, Answer(200, failed=frozenset({3})), 2.0, 0.0)
    assert isinstance(step, DeadLetter) and offsets(last) == [3] and step.attempts == 3
    state.dead_lettered(step.batch)
    assert state.committable == 4 and state.delivered == 3 and state.dead_lettered_count == 1


def test_a_stop_holds_the_partition_and_resume_gives_a_fresh_budget() -> None:
    state = PartitionDispatch(0, Batching(), POLICY, False, "none", 4)
    state.read(keyed("a", "b"), 2, now=0.0)
    first, second = state.next_send(0.0), state.next_send(0.0)
    assert first is not None and second is not None
    assert isinstance(state.answered(first, Answer(400), 0.0, 0.0), Stop)
    state.answered(second, Answer(204), 0.0, 0.0)  # in flight: ends as it will
    assert state.next_send(9.0) is None and state.committable == 0
    state.resume()
    again = state.next_send(9.0)
    assert offsets(again) == [0] and again is not None and again.attempt == 1


def test_abandoned_attempts_are_sent_again() -> None:
    state = machine("none")
    state.read(keyed("a", "b"), 2, now=0.0)
    state.next_send(0.0)
    state.next_send(0.0)
    state.abandon()
    assert state.requests_in_flight == 0
    assert offsets(state.next_send(0.0)) == [0] and offsets(state.next_send(0.0)) == [1]


STATUSES = (204, 204, 204, 200, 500, 503, 429, None, 400)


@pytest.mark.parametrize("bisect", [False, True])
@pytest.mark.parametrize("ordering", ["partition", "key", "none"])
@pytest.mark.parametrize("seed", range(12))
def test_simulated_runs_hold_to_the_ordering(ordering: Ordering, seed: int, bisect: bool) -> None:
    """Random answers to every attempt; with bisect_on_error, batches of 4 or 8 split on
    400 and 500 (tests/subscriptions/test_state_bisect.py has the cases one by one)."""
    rng = random.Random(seed)
    n, max_in_flight = 60, rng.choice([1, 3, 8])
    keys = [rng.choice("abcde") for _ in range(n)]
    max_records = rng.choice([4, 8]) if bisect else rng.choice([1, 1, 4])
    policy = replace(POLICY, bisect_on_error=bisect)
    state = PartitionDispatch(
        0, Batching(max_records=max_records), policy, True, ordering, max_in_flight
    )
    state.read(keyed(*keys), n, now=0.0)
    produced: dict[tuple[int, int], str | None] = {(0, o): k for o, k in enumerate(keys)}
    seq = itertools.count()
    settled = 0
    now = 0.0
    flying: list[tuple[Send, Traced]] = []
    traces: list[Traced] = []
    done: set[int] = set()
    dead: set[tuple[int, int]] = set()
    while state.batches or state.buffered:
        while (send := state.next_send(now)) is not None:
            trace = Traced(
                next(seq), now, 0, tuple(offsets(send)),
                tuple(r.key.decode() if r.key else None for r in send.records),
                len(flying) + 1, {}, b"",
            )  # fmt: skip
            flying.append((send, trace))
        if not flying:
            if state.committable > settled:
                settled = state.committable
                state.committed(settled)
                continue
            wake = state.wake_at()
            assert wake is not None and wake > now, "stuck"
            now = wake
            continue
        send, trace = flying.pop(rng.randrange(len(flying)))
        status = rng.choice(STATUSES)
        failed: frozenset[int] = frozenset()
        if status == 200 and len(send.records) > 1:
            failed = frozenset(r.offset for r in send.records if rng.random() < 0.3)
        trace.status, trace.failed, trace.answered = status or 0, tuple(failed), next(seq)
        traces.append(trace)
        step = state.answered(send, Answer(status, failed=failed), now, rng.random())
        if status is not None and 200 <= status < 300:
            done |= set(trace.acked)
        if isinstance(step, DeadLetter):
            state.dead_lettered(step.batch)
            done |= {r.offset for r in step.records}
            dead |= {(0, r.offset) for r in step.records}
        assert all(o in done for o in range(state.committable)), "committed past an open record"
        if rng.random() < 0.7:  # the driver's commit, sometimes late
            settled = state.committable
            state.committed(settled)
        outstanding = sum(len(b.records) for b in state.batches)
        assert outstanding <= state.window, "window overrun"
        assert state.outstanding_records == outstanding
        assert state.sending_count == sum(b.sending for b in state.batches)
        uncommitted = sum(o >= settled for o in done)
        assert outstanding + uncommitted <= state.open_limit, "more than open_limit open"
        now += rng.choice([0.0, 0.01])
    check(traces, produced, ordering, max_in_flight, dead_lettered=frozenset(dead))
    assert state.committable == n and done == set(range(n))
