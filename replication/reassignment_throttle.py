"""The reassignment throttle (Kafka's KIP-73 replication quota, leader side): the bytes a
leader sends to replicas that a reassignment is adding, at most a set rate per node. The
ISR's own catch-up is never throttled. A read may overdraw by one batch (the first batch is
always whole); the debt delays the next read."""

from __future__ import annotations

BURST_S = 0.1  # the budget holds at most this many seconds' worth of bytes


class ByteRate:
    """A token bucket of bytes refilled at `rate` per second, allowed to go into debt."""

    def __init__(self, rate: int, now: float) -> None:
        self.rate = rate
        self.tokens = rate * BURST_S
        self.at = now

    def set_rate(self, rate: int, now: float) -> None:
        self._fill(now)
        self.rate = rate
        self.tokens = min(self.tokens, rate * BURST_S)

    def _fill(self, now: float) -> None:
        self.tokens = min(self.rate * BURST_S, self.tokens + (now - self.at) * self.rate)
        self.at = now

    def available(self, now: float) -> int:
        """The bytes that may be sent now (0 while in debt)."""
        self._fill(now)
        return max(0, int(self.tokens))

    def spend(self, size: int) -> None:
        self.tokens -= size

    def wait_s(self, now: float) -> float:
        """Seconds until a byte may be sent."""
        self._fill(now)
        return 0.0 if self.tokens >= 1 else (1 - self.tokens) / self.rate


class ReassignmentThrottle:
    """This node's throttle: the rate follows the cluster's setting as the view changes."""

    def __init__(self) -> None:
        self.bucket: ByteRate | None = None

    def configure(self, rate: int | None, now: float) -> ByteRate | None:
        """The bucket for `rate` bytes/s (None: no throttle), kept across calls."""
        if rate is None:
            self.bucket = None
        elif self.bucket is None:
            self.bucket = ByteRate(rate, now)
        elif self.bucket.rate != rate:
            self.bucket.set_rate(rate, now)
        return self.bucket
