"""A subscription's flow control on one node, shared by the dispatchers of its partitions
there: how many requests may be in flight (an AIMD limit, in the style of Pub/Sub's push flow
control and TCP's congestion window) and, optionally, how many may start per second (a token
bucket). Plain numbers, time as an argument (sans-IO, as state.py); the dispatchers ask it
before each attempt and tell it how each one ended.

The limit starts at one request and grows by one per fast 2xx (slow start: it doubles each
round trip) until the first cut; after that by one per round trip (additive). A 429, a 503, a
timeout or a connection error halves it, at most once per round trip (a request sent before
the cut does not cut it again), never below one. So an endpoint that recovers sees one
request, then two, four..., not every retry at once."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

from groups.subscriptions.spec import Subscription

Outcome = Literal["fast", "slow", "backoff"]
FAST_S = 1.0  # a 2xx within this (or half the request timeout, if less) grows the limit
BURST_S = 0.1  # the token bucket holds this many seconds' worth of requests (one at least)


def outcome(status: int | None, seconds: float, timeout_s: float) -> Outcome:
    """How an attempt counts for the limit: a fast 2xx, the endpoint's backpressure (429,
    503, no answer), or neither."""
    if status is None or status in (429, 503):
        return "backoff"
    if 200 <= status < 300 and seconds <= min(FAST_S, timeout_s / 2):
        return "fast"
    return "slow"


class AdaptiveLimit:
    """Additive increase, multiplicative decrease of the requests in flight, in [1, maximum]."""

    def __init__(self, maximum: int, adaptive: bool = True) -> None:
        self.maximum = maximum
        self.adaptive = adaptive
        self.limit: float = 1.0 if adaptive else float(maximum)
        self.in_flight = 0
        self.slow_start = True
        self._sent = 0  # tickets handed out
        self._cut_at = 0  # the last ticket handed out when the limit was last cut

    def available(self) -> bool:
        return self.in_flight < int(self.limit)

    def acquire(self) -> int:
        """A request starts; its ticket goes back with release()."""
        self.in_flight += 1
        self._sent += 1
        return self._sent

    def release(self, ticket: int, how: Outcome) -> None:
        self.in_flight -= 1
        if not self.adaptive:
            return
        if how == "fast":
            step = 1.0 if self.slow_start else 1.0 / self.limit
            self.limit = min(float(self.maximum), self.limit + step)
        elif how == "backoff" and ticket > self._cut_at:
            self.limit = max(1.0, self.limit / 2)
            self.slow_start = False
            self._cut_at = self._sent


class TokenBucket:
    """At most `rate` requests per second on average, `burst` at once."""

    def __init__(self, rate: float, now: float) -> None:
        self.rate = rate
        self.burst = max(1.0, rate * BURST_S)
        self.tokens = self.burst
        self.at = now

    def _fill(self, now: float) -> None:
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now

    def wait_s(self, now: float) -> float:
        """0 if a request may start now, else the seconds until it may."""
        self._fill(now)
        return 0.0 if self.tokens >= 1.0 else (1.0 - self.tokens) / self.rate

    def take(self, now: float) -> None:
        self._fill(now)
        self.tokens -= 1.0


class FlowControl:
    """The limit and the bucket of one subscription on this node, and the dispatchers to wake
    when a request ends (a slot frees)."""

    def __init__(self, sub: Subscription, now: float) -> None:
        self.settings = (sub.concurrency, sub.rate_limit_per_s)
        self.limit = AdaptiveLimit(sub.concurrency.max_requests, sub.concurrency.adaptive)
        self.bucket = (
            None if sub.rate_limit_per_s is None else TokenBucket(sub.rate_limit_per_s, now)
        )
        self.listeners: set[Callable[[], None]] = set()

    def fits(self, sub: Subscription) -> bool:
        """Whether this flow control is the one `sub`'s settings ask for."""
        return self.settings == (sub.concurrency, sub.rate_limit_per_s)

    def wait_s(self, now: float) -> float:
        """0 if a request may start now; the seconds until a token if only that is missing;
        infinity while every slot is taken (a release wakes the listeners)."""
        if not self.limit.available():
            return math.inf
        return 0.0 if self.bucket is None else self.bucket.wait_s(now)

    def acquire(self, now: float) -> int:
        if self.bucket is not None:
            self.bucket.take(now)
        return self.limit.acquire()

    def release(self, ticket: int, how: Outcome) -> None:
        self.limit.release(ticket, how)
        for wake in list(self.listeners):
            wake()
