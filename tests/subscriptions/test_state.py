"""The delivery state machine without I/O: ordering, batching, retries and their backoff,
Retry-After, dead letters, stops, 410 pauses, and what may be committed."""

from __future__ import annotations

import pytest

from groups.subscriptions.spec import Batching, RetryPolicy
from groups.subscriptions.state import (
    Answer,
    DeadLetter,
    DeliveryRecord,
    PartitionDispatch,
    Pause,
    Send,
    Stop,
    backoff_s,
    classify,
    retry_after_s,
)

POLICY = RetryPolicy(
    timeout_ms=100,
    max_attempts=3,
    min_backoff_ms=1000,
    max_backoff_ms=3000,
    retry_after_max_ms=5000,
)


def records(*offsets: int, size: int = 10) -> list[DeliveryRecord]:
    return [DeliveryRecord(o, 1000 + o, b"k", b"x" * size, []) for o in offsets]


def machine(dead_letter: bool = True) -> PartitionDispatch:
    state = PartitionDispatch(0, Batching(), POLICY, dead_letter)
    state.read(records(0, 1, 2), 3, now=0.0)
    return state


@pytest.mark.parametrize(
    ("status", "verdict"),
    [
        (200, "ack"), (204, "ack"), (299, "ack"), (410, "gone"), (429, "throttle"),
        (503, "throttle"), (408, "retry"), (500, "retry"), (502, "retry"), (None, "retry"),
        (400, "fail"), (401, "fail"), (404, "fail"), (301, "fail"),
    ],
)  # fmt: skip
def test_classify(status: int | None, verdict: str) -> None:
    assert classify(status) == verdict


def test_backoff_doubles_within_bounds_and_jitters() -> None:
    assert backoff_s(POLICY, 1, 0.0) == 1.0
    assert backoff_s(POLICY, 1, 0.999) == pytest.approx(1.0)  # never below min_backoff
    assert backoff_s(POLICY, 2, 0.0) == 1.0 and backoff_s(POLICY, 2, 0.999) == pytest.approx(
        2.0, 0.01
    )
    assert backoff_s(POLICY, 3, 0.0) == 1.5  # 4 s capped at 3: over [1.5, 3]
    assert backoff_s(POLICY, 30, 0.999) <= 3.0
    assert backoff_s(POLICY, 10_000, 0.5) <= 3.0  # no overflow


def test_retry_after_seconds_and_dates() -> None:
    assert retry_after_s("7", 0.0) == 7.0
    assert retry_after_s(None, 0.0) is None
    assert retry_after_s("soon", 0.0) is None
    assert retry_after_s("Thu, 01 Jan 1970 00:00:10 GMT", 4.0) == pytest.approx(6.0)


def sent(state: PartitionDispatch, now: float) -> Send:
    send = state.next_send(now)
    assert send is not None
    return send


def test_one_in_flight_in_offset_order_and_commit_after_ack() -> None:
    state = machine()
    first = state.next_send(0.0)
    assert first is not None and [r.offset for r in first.records] == [0] and first.attempt == 1
    assert state.next_send(0.0) is None  # ordering: one request in flight
    assert state.committable == 0 and state.in_flight == 1
    assert state.answered(first, Answer(204), 0.1, 0.5) is None
    assert state.committable == 1 and state.delivered == 1
    assert not state.settle_now()  # more to send: the driver commits within its interval
    for offset in (1, 2):  # before any commit: the window holds the one outstanding
        send = sent(state, 0.1)
        assert send.records[0].offset == offset and state.next_send(0.1) is None
        state.answered(send, Answer(204), 0.2, 0.5)
    assert state.committable == 3 and not state.settle_now()  # caught up: the interval
    state.pause()
    assert state.settle_now()  # paused with nothing in flight: a commit at once


def test_retry_waits_for_the_backoff_then_dead_letters_when_exhausted() -> None:
    state = machine()
    first = sent(state, 0.0)
    assert state.answered(first, Answer(500), 1.0, 0.0) is None
    assert state.next_send(1.5) is None and state.wake_at() == 2.0
    retry = state.next_send(2.0)
    assert retry is not None and retry.attempt == 2 and retry.records[0].offset == 0
    state.answered(retry, Answer(None, "timeout"), 2.0, 0.0)
    step = state.answered(sent(state, 10.0), Answer(502), 10.0, 0.0)
    assert isinstance(step, DeadLetter) and step.attempts == 3 and step.last.status == 502
    assert state.next_send(100.0) is None and state.committable == 0  # until it is in the DLT
    state.dead_lettered(step.batch)
    assert state.committable == 1 and state.dead_lettered_count == 1 and state.retried == 2


def test_a_refusal_is_not_retried() -> None:
    state = machine()
    step = state.answered(sent(state, 0.0), Answer(400), 0.0, 0.0)
    assert isinstance(step, DeadLetter) and step.attempts == 1


def test_without_a_dead_letter_topic_delivery_stops_until_resumed() -> None:
    state = machine(dead_letter=False)
    step = state.answered(sent(state, 0.0), Answer(422), 0.0, 0.0)
    assert isinstance(step, Stop) and step.offset == 0 and "no dead-letter topic" in step.reason
    assert state.next_send(99.0) is None and state.committable == 0 and state.wake_at() is None
    state.resume()
    again = state.next_send(99.0)
    assert again is not None and again.attempt == 1 and again.records[0].offset == 0


def test_retry_after_is_honoured_up_to_its_maximum() -> None:
    state = machine()
    state.answered(sent(state, 0.0), Answer(429, retry_after_s=4.0), 0.0, 0.0)
    assert state.wake_at() == 4.0
    state.answered(sent(state, 4.0), Answer(503, retry_after_s=60.0), 4.0, 0.0)
    assert state.wake_at() == 9.0  # retry_after_max_ms 5 s


def test_gone_pauses_and_keeps_the_record() -> None:
    state = machine()
    step = state.answered(sent(state, 0.0), Answer(410), 0.0, 0.0)
    assert isinstance(step, Pause) and state.paused
    assert state.next_send(1.0) is None
    state.resume()
    again = state.next_send(1.0)
    assert again is not None and again.records[0].offset == 0 and again.attempt == 1


def test_batches_fill_up_to_their_limits_or_wait_their_window() -> None:
    state = PartitionDispatch(
        0, Batching(max_records=2, max_bytes=1024, max_wait_ms=500), POLICY, True
    )
    state.read(records(0), 1, now=0.0)
    assert state.next_send(0.1) is None and state.wake_at() == 0.5
    single = state.next_send(0.5)
    assert single is not None and len(single.records) == 1
    state.answered(single, Answer(200), 0.5, 0.0)
    state.committed(1)
    state.read(records(1, 2, 3), 4, now=1.0)
    pair = state.next_send(1.0)
    assert pair is not None and [r.offset for r in pair.records] == [1, 2]
    state.answered(pair, Answer(200), 1.0, 0.0)
    assert state.committable == 3
    big = PartitionDispatch(0, Batching(max_records=100, max_bytes=1024), POLICY, True)
    big.read(records(0, 1, 2, size=600), 3, now=0.0)
    first = big.next_send(0.0)
    assert first is not None and len(first.records) == 1  # max_bytes, one record at least


def test_filtered_records_advance_the_committable_position() -> None:
    state = PartitionDispatch(0, Batching(), POLICY, True)
    state.read([], 50, now=0.0)  # 50 records read, none kept
    assert state.committable == 50 and state.next_send(0.0) is None
    state.read(records(60), 61, now=0.0)
    assert state.committable == 60


def test_pause_stops_new_attempts_only() -> None:
    state = machine()
    first = sent(state, 0.0)
    state.pause()
    assert state.answered(first, Answer(204), 0.0, 0.0) is None  # the one in flight ends as it will
    state.committed(1)
    assert state.next_send(0.0) is None and state.committable == 1
    state.resume()
    assert state.next_send(0.0) is not None


def test_reads_are_bounded() -> None:
    state = PartitionDispatch(0, Batching(max_bytes=1024), POLICY, True)
    assert state.wants_read()
    state.read(records(*range(200), size=10_000), 200, now=0.0)
    assert not state.wants_read()
    state.moved(500)  # retention took what was buffered
    assert state.wants_read() and state.position == 500 and state.committable == 500
