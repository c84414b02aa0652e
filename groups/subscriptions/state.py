"""One partition's delivery as plain state transitions, without I/O (sans-IO, as
replication/replica_state.py): the records read and not yet sent, the batch in flight or
waiting to be retried, its attempts and backoff deadline, and what may be committed. The
driver (dispatcher.py) does the reading, the POSTs, the dead-letter produce and the commits,
and tells this machine what happened; time and randomness come in as arguments.

Ordering `partition`: at most one batch in flight, records in offset order, and a batch is
sent only after every earlier record was acknowledged or dead-lettered."""

from __future__ import annotations

import email.utils
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from engine.batch import Headers
from groups.subscriptions.spec import Batching, RetryPolicy

Verdict = Literal["ack", "retry", "throttle", "gone", "fail"]
# What one partition may hold read but unsent, on top of one read: a batch's bytes twice, or
# this much (a batch of one record of a few KiB still reads ahead).
MIN_BUFFER_BYTES = 1024 * 1024
MAX_BUFFER_RECORDS = 20_000


@dataclass(frozen=True, slots=True)
class DeliveryRecord:
    """A committed record to deliver; `json` is its /v1 fetch document (the plain JSON
    format), when the subscription asks for it."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    json: bytes | None = None

    @property
    def size(self) -> int:
        head = sum(len(n) + len(v or b"") for n, v in self.headers)
        return len(self.key or b"") + len(self.value or b"") + head


@dataclass(frozen=True, slots=True)
class Answer:
    """How an attempt ended: the endpoint's status (None: no answer: a timeout, a refused or
    broken connection), its Retry-After in seconds if any, and a short error text."""

    status: int | None
    error: str = ""
    retry_after_s: float | None = None

    def describe(self) -> str:
        if self.status is None:
            return self.error or "no answer"
        return f"HTTP {self.status}" + (f": {self.error}" if self.error else "")


@dataclass(frozen=True, slots=True)
class Send:
    """POST these records now: attempt `attempt` of their batch."""

    records: tuple[DeliveryRecord, ...]
    attempt: int


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Produce these records to the dead-letter topic (acks=all), then call dead_lettered()."""

    records: tuple[DeliveryRecord, ...]
    attempts: int
    last: Answer


@dataclass(frozen=True, slots=True)
class Stop:
    """The batch exhausted its budget and there is no dead-letter topic: delivery stops on it
    until the subscription is resumed (or given a dead-letter topic)."""

    offset: int
    reason: str


@dataclass(frozen=True, slots=True)
class Pause:
    """The endpoint answered 410 Gone: the subscription pauses (Standard Webhooks)."""

    reason: str


Step = DeadLetter | Stop | Pause


def classify(status: int | None) -> Verdict:
    """2xx acknowledges; 410 pauses; 429 and 503 are the receiver's backpressure (retried
    after its Retry-After); 408, other 5xx and no answer are retried; any other status
    (4xx, a redirect) is not retried."""
    if status is None:
        return "retry"
    if 200 <= status < 300:
        return "ack"
    if status == 410:
        return "gone"
    if status in (429, 503):
        return "throttle"
    if status == 408 or status >= 500:
        return "retry"
    return "fail"


def backoff_s(policy: RetryPolicy, attempt: int, rand: float) -> float:
    """The pause after failed attempt `attempt` (1-based): min_backoff doubling per attempt up
    to max_backoff, jittered uniformly over its upper half but never below min_backoff
    (`rand` in [0, 1))."""
    ceiling: float = min(policy.max_backoff_ms, policy.min_backoff_ms * 2 ** min(attempt - 1, 40))
    floor: float = max(policy.min_backoff_ms, ceiling / 2)
    return (floor + (ceiling - floor) * rand) / 1000


def retry_after_s(value: str | None, now_epoch_s: float) -> float | None:
    """A Retry-After header's delay: seconds, or an HTTP date (RFC 9110); None if absent or
    unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - now_epoch_s)


class PartitionDispatch:
    """The delivery state of one partition of one subscription."""

    def __init__(
        self,
        position: int,
        batching: Batching,
        policy: RetryPolicy,
        dead_letter: bool,
    ) -> None:
        self.position = position  # the next offset to read
        self.batching = batching
        self.policy = policy
        self.dead_letter = dead_letter
        self.buffered: deque[DeliveryRecord] = deque()
        self.buffered_bytes = 0
        self.first_buffered_at = 0.0  # when the oldest buffered record was read
        self.batch: tuple[DeliveryRecord, ...] | None = None  # the batch being delivered
        self.attempts = 0
        self.not_before = 0.0  # the batch's next attempt, not before this time
        self.sending = False
        self.dead_lettering = False  # the batch waits for its dead-letter produce
        self.paused = False
        self.stopped: Stop | None = None
        self.last: Answer | None = None
        self.delivered = 0
        self.retried = 0
        self.dead_lettered_count = 0

    # -- reading -------------------------------------------------------------------------------

    @property
    def buffer_limit(self) -> int:
        return max(2 * self.batching.max_bytes, MIN_BUFFER_BYTES)

    def wants_read(self) -> bool:
        """Whether to read more: not stopped, and room in the buffer."""
        return (
            self.stopped is None
            and self.buffered_bytes < self.buffer_limit
            and len(self.buffered) < MAX_BUFFER_RECORDS
        )

    def read(self, records: Iterable[DeliveryRecord], next_offset: int, now: float) -> None:
        """Records read at `position` (filtered already: those left out just advance it) and
        the offset after the last record read."""
        for record in records:
            if record.offset < self.position:
                continue
            if not self.buffered:
                self.first_buffered_at = now
            self.buffered.append(record)
            self.buffered_bytes += record.size
        self.position = max(self.position, next_offset)

    def moved(self, position: int) -> None:
        """The position fell out of the log (retention): what was buffered is gone too."""
        self.buffered.clear()
        self.buffered_bytes = 0
        if self.batch is None:
            self.position = position

    # -- sending -------------------------------------------------------------------------------

    @property
    def committable(self) -> int:
        """The offset below which every record was acknowledged, dead-lettered or filtered
        out: the position to commit."""
        if self.batch is not None:
            return self.batch[0].offset
        if self.buffered:
            return self.buffered[0].offset
        return self.position

    @property
    def in_flight(self) -> int:
        return len(self.batch) if self.sending and self.batch is not None else 0

    def next_send(self, now: float) -> Send | None:
        """The attempt to make now, if any."""
        if self.paused or self.stopped is not None or self.sending or self.dead_lettering:
            return None
        if self.batch is None:
            if not self.buffered or not self._full(now):
                return None
            self.batch = self._take()
            self.attempts = 0
        if now < self.not_before:
            return None
        self.sending = True
        self.attempts += 1
        return Send(self.batch, self.attempts)

    def wake_at(self) -> float | None:
        """When next_send may have something new to say without any other event."""
        if self.paused or self.stopped is not None or self.sending or self.dead_lettering:
            return None
        if self.batch is not None:
            return self.not_before
        if self.buffered:
            return self.first_buffered_at + self.batching.max_wait_ms / 1000
        return None

    def _full(self, now: float) -> bool:
        b = self.batching
        return (
            len(self.buffered) >= b.max_records
            or self.buffered_bytes >= b.max_bytes
            or now >= self.first_buffered_at + b.max_wait_ms / 1000
        )

    def _take(self) -> tuple[DeliveryRecord, ...]:
        """The next batch: up to max_records and max_bytes (always one record at least)."""
        out: list[DeliveryRecord] = []
        size = 0
        b = self.batching
        while self.buffered and len(out) < b.max_records:
            record = self.buffered[0]
            if out and size + record.size > b.max_bytes:
                break
            out.append(self.buffered.popleft())
            size += record.size
        self.buffered_bytes -= size
        return tuple(out)

    def answered(self, answer: Answer, now: float, rand: float) -> Step | None:
        """The attempt ended with `answer`. None when nothing else needs doing (acknowledged:
        commit `committable`; or a retry scheduled at `not_before`)."""
        assert self.batch is not None and self.sending
        self.sending = False
        self.last = answer
        verdict = classify(answer.status)
        if verdict == "ack":
            self.delivered += len(self.batch)
            self.batch = None
            self.attempts = 0
            self.not_before = 0.0
            return None
        if verdict == "gone":
            self.paused = True
            self.attempts = 0
            return Pause(f"the endpoint answered 410 Gone at offset {self.batch[0].offset}")
        if verdict == "fail" or self.attempts >= self.policy.max_attempts:
            return self._exhausted(answer)
        self.retried += len(self.batch)
        delay = backoff_s(self.policy, self.attempts, rand)
        if verdict == "throttle" and answer.retry_after_s is not None:
            delay = max(delay, min(answer.retry_after_s, self.policy.retry_after_max_ms / 1000))
        self.not_before = now + delay
        return None

    def _exhausted(self, answer: Answer) -> DeadLetter | Stop:
        assert self.batch is not None
        if self.dead_letter:
            self.dead_lettering = True
            return DeadLetter(self.batch, self.attempts, answer)
        first = self.batch[0].offset
        why = "was refused" if classify(answer.status) == "fail" else "exhausted its attempts"
        self.stopped = Stop(
            first,
            f"the record at offset {first} {why} ({answer.describe()}, {self.attempts} "
            "attempts) and there is no dead-letter topic: delivery stops on it until resumed",
        )
        return self.stopped

    def dead_lettered(self) -> None:
        """The batch is in the dead-letter topic: move past it."""
        assert self.batch is not None and self.dead_lettering
        self.dead_lettered_count += len(self.batch)
        self.batch = None
        self.attempts = 0
        self.not_before = 0.0
        self.dead_lettering = False

    # -- control -------------------------------------------------------------------------------

    def pause(self) -> None:
        """No new attempts (one in flight ends as it will)."""
        self.paused = True

    def resume(self) -> None:
        """Attempts again, a stopped batch with a fresh budget, at once."""
        self.paused = False
        if self.stopped is not None:
            self.stopped = None
            self.attempts = 0
        self.not_before = 0.0
