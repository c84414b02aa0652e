"""Flow control without I/O: the AIMD limit (slow start, one cut per round trip, never below
one, never above the maximum), the token bucket, and partial batch responses read."""

from __future__ import annotations

import math

import pytest

from groups.subscriptions import partial
from groups.subscriptions.flow import AdaptiveLimit, FlowControl, TokenBucket, outcome
from groups.subscriptions.spec import parse
from groups.subscriptions.state import Batch, DeliveryRecord, Send


def test_outcomes() -> None:
    assert outcome(204, 0.01, 10.0) == "fast"
    assert outcome(204, 2.0, 10.0) == "slow"  # over a second
    assert outcome(204, 0.3, 0.5) == "slow"  # over half the timeout
    assert outcome(429, 0.01, 10.0) == outcome(503, 0.01, 10.0) == "backoff"
    assert outcome(None, 10.0, 10.0) == "backoff"  # a timeout, a refused connection
    assert outcome(500, 0.01, 10.0) == outcome(400, 0.01, 10.0) == "slow"


def test_slow_start_doubles_per_round_trip_up_to_the_maximum() -> None:
    limit = AdaptiveLimit(maximum=6)
    assert limit.limit == 1 and limit.available()
    ticket = limit.acquire()
    assert not limit.available()
    limit.release(ticket, "fast")
    assert limit.limit == 2
    for ticket in [limit.acquire(), limit.acquire()]:
        limit.release(ticket, "fast")
    assert limit.limit == 4
    for _ in range(10):
        limit.release(limit.acquire(), "fast")
    assert limit.limit == 6


def test_backpressure_halves_once_per_round_trip_then_grows_additively() -> None:
    limit = AdaptiveLimit(maximum=64)
    for _ in range(15):
        limit.release(limit.acquire(), "fast")
    assert limit.limit == 16
    flying = [limit.acquire() for _ in range(16)]
    for ticket in flying:  # all sent before the first cut: one cut only
        limit.release(ticket, "backoff")
    assert limit.limit == 8 and limit.in_flight == 0
    for expected in (4, 2, 1, 1):
        limit.release(limit.acquire(), "backoff")
        assert limit.limit == expected
    for _ in range(3):
        limit.release(limit.acquire(), "fast")
    assert 2 < limit.limit < 3  # +1, then +1/2: additive, about one per round trip
    limit.release(limit.acquire(), "slow")
    assert 2 < limit.limit < 3  # a slow answer leaves it


def test_a_fixed_limit_does_not_adapt() -> None:
    limit = AdaptiveLimit(maximum=5, adaptive=False)
    assert limit.limit == 5
    limit.release(limit.acquire(), "backoff")
    assert limit.limit == 5


def test_token_bucket_paces_after_its_burst() -> None:
    bucket = TokenBucket(rate=20.0, now=0.0)  # burst: 0.1 s worth, 2
    assert bucket.wait_s(0.0) == 0
    bucket.take(0.0)
    bucket.take(0.0)
    assert bucket.wait_s(0.0) == pytest.approx(0.05)
    assert bucket.wait_s(0.05) == 0
    slow = TokenBucket(rate=0.5, now=0.0)  # burst one at least
    slow.take(0.0)
    assert slow.wait_s(1.0) == pytest.approx(1.0)


def test_flow_control_waits_for_a_slot_or_a_token_and_wakes_its_dispatchers() -> None:
    doc = {"name": "s", "topic": "t", "endpoint": "https://e.example/x", "rate_limit_per_s": 10,
           "concurrency": {"max_requests": 1, "adaptive": False}}  # fmt: skip
    sub = parse(doc, uid="u")
    flow = FlowControl(sub, now=0.0)
    woken: list[int] = []
    flow.listeners.add(lambda: woken.append(1))
    assert flow.wait_s(0.0) == 0
    ticket = flow.acquire(0.0)
    assert math.isinf(flow.wait_s(0.0))
    flow.release(ticket, "fast")
    assert woken == [1] and flow.wait_s(0.0) == pytest.approx(0.1)
    assert flow.fits(sub) and not flow.fits(parse({**doc, "rate_limit_per_s": 5}, uid="u"))


def _send(*offsets: int) -> Send:
    records = tuple(DeliveryRecord(o, 0, None, b"v", []) for o in offsets)
    return Send(Batch(records), records, 1)


@pytest.mark.parametrize(
    ("body", "failed", "error"),
    [
        (b"", set(), ""),
        (b'{"ok": true}', set(), ""),
        (b'{"batchItemFailures": []}', set(), ""),
        (b'{"batchItemFailures": null}', set(), ""),
        (b'{"batchItemFailures": [{"itemIdentifier": "t/0/6"}]}', {6}, "1 of 3"),
        (b'{"batchItemFailures": [{"itemIdentifier": "t/0/9"}]}', {5, 6, 7}, "not in the batch"),
        (b'{"batchItemFailures": [{"itemIdentifier": 6}]}', {5, 6, 7}, "not in the batch"),
        (b'{"batchItemFailures": [{"id": "t/0/6"}]}', {5, 6, 7}, "not in the batch"),
        (b'{"batchItemFailures": {"itemIdentifier": "t/0/6"}}', {5, 6, 7}, "not an array"),
        (b'{"batchItemFailures": [', {5, 6, 7}, "not JSON"),
        (b'{"batchItemFailures": []}' + b" " * partial.MAX_PARTIAL_BYTES, {5, 6, 7}, "over"),
    ],
)
def test_partial_batch_responses(body: bytes, failed: set[int], error: str) -> None:
    got, text = partial.failures("t", 0, _send(5, 6, 7), body)
    assert got == failed and error in text
