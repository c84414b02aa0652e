"""One partition's delivery as plain state transitions, without I/O (sans-IO, as
replication/replica_state.py): the records read and not yet sent, the batch in flight or
waiting to be retried, its attempts and backoff deadline, and what may be committed. The
driver (dispatcher.py) does the reading, the POSTs, the dead-letter produce and the commits,
and tells this machine what happened; time and randomness come in as arguments.

Orderings: `partition`, one batch outstanding (in flight or waiting to be retried), records in
offset order; `key`, up to `max_in_flight` batches outstanding, a record taken only when no
earlier record of its key is outstanding or left behind unsent; `none`, up to `max_in_flight`
batches in any order. In every case the position to commit is the lowest offset not yet
acknowledged or dead-lettered. The records outstanding are at most `window` (max_in_flight x
max_records); the driver coalesces commits, and records done but not yet committed are asked
to be committed at once past UNCOMMITTED_WINDOWS windows, and with those outstanding never
exceed UNCOMMITTED_WINDOWS + 1 windows: what a crash delivers again, at most.

With `bisect_on_error`, a batch whose content the endpoint blames (400, 413, 415 or 422, a 5xx
other than 503) is replaced by its two halves, in its place among the outstanding batches (the
window's records unchanged); a half is sent only after every earlier outstanding batch
(`partition`) or every earlier one holding any of its keys (`key`) is done, and requests in
flight stay within max_in_flight. The answer that splits a batch is not spent from its halves'
budget (`Batch.spent`)."""

from __future__ import annotations

import email.utils
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from engine.batch import Headers
from groups.subscriptions.spec import Batching, Ordering, RetryPolicy

Verdict = Literal["ack", "retry", "throttle", "gone", "fail"]
# What one partition may hold read but unsent, on top of one read: a batch's bytes twice, or
# this much (a batch of one record of a few KiB still reads ahead).
MIN_BUFFER_BYTES = 1024 * 1024
MAX_BUFFER_RECORDS = 20_000
# Ordering `key`: how many buffered records one new batch looks through for keys that are free.
KEY_SCAN = 4096
# Records done but not yet committed: a commit at once past this many windows of them (one
# record a request, a window of 16: a commit every 64 acknowledgements at most).
UNCOMMITTED_WINDOWS = 4
# 4xx answers that blame a request's content (bad, too large, unsupported, unprocessable):
# with bisect_on_error, a batch answered one of them is split.
CONTENT_REFUSALS = frozenset({400, 413, 415, 422})


class SchemaValue(NamedTuple):
    """A record's value as the schema registry read it (`decode_values: schema`): its JSON
    text and schema id, or why it stays as stored (`error`)."""

    json: bytes | None
    schema_id: int | None
    error: str | None = None


class DeliveryRecord(NamedTuple):
    """A committed record to deliver; `json` is its /v1 fetch document (the plain JSON
    format), when the subscription asks for it; `schema`, its value decoded, when it asks for
    that (None: the value is JSON text or null, delivered as it is). A named tuple, as Send and
    Answer: made per record or per request, it costs a third of a frozen dataclass."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    json: bytes | None = None
    schema: SchemaValue | None = None

    @property
    def size(self) -> int:
        size = len(self.key or b"") + len(self.value or b"")
        if self.headers:
            size += sum(len(n) + len(v or b"") for n, v in self.headers)
        return size


class Answer(NamedTuple):
    """How an attempt ended: the endpoint's status (None: no answer: a timeout, a refused or
    broken connection), its Retry-After in seconds if any, and a short error text."""

    status: int | None
    error: str = ""
    retry_after_s: float | None = None
    failed: frozenset[int] = frozenset()  # a 2xx's partial batch response: offsets to retry

    def describe(self) -> str:
        if self.status is None:
            return self.error or "no answer"
        return f"HTTP {self.status}" + (f": {self.error}" if self.error else "")


@dataclass(eq=False, slots=True)
class Batch:
    """Records sent together, from their first attempt until acknowledged or dead-lettered
    (a partial batch response leaves only the records it named failed; a split, two halves)."""

    records: tuple[DeliveryRecord, ...]
    keys: frozenset[bytes | None] = frozenset()  # ordering `key`: the keys it holds back
    attempts: int = 0  # requests that carried these records, a split batch's included
    spent: int = 0  # of those, the ones counted against max_attempts (not the splitting one)
    half: bool = False  # from a split: may wait for an earlier outstanding batch (_waits)
    not_before: float = 0.0  # its next attempt, not before this time
    sending: bool = False
    dead_lettering: bool = False  # waits for its dead-letter produce
    exhausted: bool = False  # stopped delivery (no dead-letter topic) until a resume
    last: Answer | None = field(default=None)


class Send(NamedTuple):
    """POST these records now: attempt `attempt` of `batch`."""

    batch: Batch
    records: tuple[DeliveryRecord, ...]
    attempt: int


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Produce these records to the dead-letter topic (acks=all), then call
    dead_lettered(batch)."""

    batch: Batch
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
        ordering: Ordering = "partition",
        max_in_flight: int = 1,
    ) -> None:
        self.position = position  # the next offset to read
        self.batching = batching
        self.policy = policy
        self.dead_letter = dead_letter
        self.ordering = ordering
        self.max_outstanding = 1 if ordering == "partition" else max_in_flight
        # Records outstanding: at most this many; with those done but not yet committed, at
        # most `open_limit`, so that a crash delivers at most that many again.
        self.window = self.max_outstanding * batching.max_records
        self.uncommitted_limit = UNCOMMITTED_WINDOWS * self.window
        self.open_limit = self.window + self.uncommitted_limit
        self.unsettled: list[tuple[int, int]] = []  # done: (last offset, records), uncommitted
        self.unsettled_records = 0
        self.buffered: deque[DeliveryRecord] = deque()
        self.buffered_bytes = 0
        self.first_buffered_at = 0.0  # when the oldest buffered record was read
        self.batches: list[Batch] = []  # outstanding, oldest first
        self.outstanding_records = 0  # in self.batches
        self.sending_count = 0  # of self.batches, those in flight
        self.busy_keys: dict[bytes | None, int] = {}  # ordering `key`: keys outstanding
        self.stalled = False  # ordering `key`: every buffered record's key is busy
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
            self.stalled = False
        self.position = max(self.position, next_offset)

    def moved(self, position: int) -> None:
        """The position fell out of the log (retention): what was buffered is gone too."""
        self.buffered.clear()
        self.buffered_bytes = 0
        if not self.batches:
            self.position = position

    # -- sending -------------------------------------------------------------------------------

    @property
    def committable(self) -> int:
        """The lowest offset not yet acknowledged, dead-lettered or filtered out: the position
        to commit (the buffer stays in offset order, and so does each batch)."""
        return self.committable_after(None)

    def committable_after(self, done: Batch | None) -> int:
        """`committable` once the outstanding batch `done` is acknowledged or dead-lettered:
        what a reply subscription commits with its replies before this machine is told."""
        low = self.buffered[0].offset if self.buffered else self.position
        for batch in self.batches:
            if batch is not done:
                low = min(low, batch.records[0].offset)
        return low

    @property
    def in_flight(self) -> int:
        """Records in requests now in flight."""
        return sum(len(b.records) for b in self.batches if b.sending)

    @property
    def requests_in_flight(self) -> int:
        return self.sending_count

    @property
    def attempts(self) -> int:
        """The most attempts an outstanding batch has made."""
        return max((b.attempts for b in self.batches), default=0)

    def next_send(self, now: float) -> Send | None:
        """The attempt to make now, if any: a batch due for its retry, else a new batch."""
        if self.paused or self.stopped is not None:
            return None
        if len(self.batches) > self.sending_count:  # a batch not in flight: a retry may be due
            for batch in self._ready():
                if now >= batch.not_before:
                    return self._send(batch)
        if not self._may_take() or not self._full(now):
            return None
        records = self._take_keyed() if self.ordering == "key" else self._take()
        if not records:
            self.stalled = True
            return None
        batch = Batch(records)
        if self.ordering == "key":
            batch.keys = frozenset(r.key for r in records)
            self._hold(batch.keys)
        self.batches.append(batch)
        self.outstanding_records += len(records)
        return self._send(batch)

    def _send(self, batch: Batch) -> Send:
        batch.sending = True
        self.sending_count += 1
        batch.attempts += 1
        batch.spent += 1
        return Send(batch, batch.records, batch.attempts)

    def _ready(self) -> Iterator[Batch]:
        """The outstanding batches to send again once due: not in flight nor being
        dead-lettered nor behind an earlier one (_waits), while fewer requests than
        max_outstanding are in flight (the halves of split batches may outnumber it)."""
        if self.sending_count >= self.max_outstanding:
            return
        for at, batch in enumerate(self.batches):
            if not batch.sending and not batch.dead_lettering and not self._waits(at, batch):
                yield batch

    def _waits(self, at: int, batch: Batch) -> bool:
        """Whether `batch`, the outstanding batch at `at`, waits for an earlier one: only a half
        does (a batch taken new held only free keys), for any earlier batch under `partition`
        (offset order), for one holding any of its keys under `key`."""
        if not batch.half or self.ordering == "none":
            return False
        if self.ordering == "partition":
            return at > 0
        return any(not batch.keys.isdisjoint(b.keys) for b in self.batches[:at])

    def _hold(self, keys: frozenset[bytes | None]) -> None:
        for key in keys:
            self.busy_keys[key] = self.busy_keys.get(key, 0) + 1

    def _release(self, keys: frozenset[bytes | None]) -> None:
        for key in keys:
            left = self.busy_keys[key] - 1
            if left:
                self.busy_keys[key] = left
            else:
                del self.busy_keys[key]

    def _room(self) -> int:
        """How many more records the window lets out now: outstanding ones at most the window,
        and with those done but not committed at most open_limit (a record held back,
        ordering `key`, is inside it, so a commit always makes room for it)."""
        room = min(self.window, self.open_limit - self.unsettled_records)
        return room - self.outstanding_records

    def _may_take(self) -> bool:
        return (
            bool(self.buffered)
            and not self.stalled
            and len(self.batches) < self.max_outstanding
            and self._room() > 0
        )

    def settle_now(self) -> bool:
        """Whether to commit at once rather than within the driver's interval: the records
        done reach uncommitted_limit, or nothing is in flight and nothing more will be until
        a resume (paused, or stopped on a record). A partition that only caught up waits for
        the interval too: at the log's tail it catches up after nearly every request."""
        if self.unsettled_records >= self.uncommitted_limit:
            return True
        return not self.sending_count and (self.paused or self.stopped is not None)

    def wake_at(self) -> float | None:
        """When next_send may have something new to say without any other event."""
        if self.paused or self.stopped is not None:
            return None
        due = [b.not_before for b in self._ready()]
        if self._may_take():
            due.append(self.first_buffered_at + self.batching.max_wait_ms / 1000)
        return min(due, default=None)

    def _full(self, now: float) -> bool:
        b = self.batching
        return (
            len(self.buffered) >= b.max_records
            or self.buffered_bytes >= b.max_bytes
            or now >= self.first_buffered_at + b.max_wait_ms / 1000
        )

    def _take(self) -> tuple[DeliveryRecord, ...]:
        """The next batch: up to max_records and max_bytes (always one record at least), and
        what the window has room for."""
        out: list[DeliveryRecord] = []
        size = 0
        b = self.batching
        most = min(b.max_records, self._room())
        while self.buffered and len(out) < most:
            record = self.buffered[0]
            if out and size + record.size > b.max_bytes:
                break
            out.append(self.buffered.popleft())
            size += record.size
        self.buffered_bytes -= size
        return tuple(out)

    def _take_keyed(self) -> tuple[DeliveryRecord, ...]:
        """Ordering `key`: the next batch from the buffered records whose key is neither
        outstanding nor held by an earlier record left in the buffer (looked for among the
        first KEY_SCAN); what is left keeps its order."""
        out: list[DeliveryRecord] = []
        kept: list[DeliveryRecord] = []
        held = set(self.busy_keys)
        size = 0
        b = self.batching
        most = min(b.max_records, self._room())
        scanned = 0
        while self.buffered and len(out) < most and scanned < KEY_SCAN:
            record = self.buffered.popleft()
            scanned += 1
            if record.key in held or (out and size + record.size > b.max_bytes):
                held.add(record.key)
                kept.append(record)
                continue
            out.append(record)
            size += record.size
        self.buffered.extendleft(reversed(kept))
        self.buffered_bytes -= size
        return tuple(out)

    def answered(self, send: Send, answer: Answer, now: float, rand: float) -> Step | None:
        """`send`'s attempt ended with `answer`. None when nothing else needs doing
        (acknowledged: commit `committable`; or a retry scheduled at the batch's not_before).
        A 2xx naming failed records (a partial batch response) acknowledges the others and
        retries those."""
        batch = send.batch
        assert batch.sending
        batch.sending = False
        self.sending_count -= 1
        self.last = batch.last = answer
        verdict = classify(answer.status)
        if verdict == "ack" and answer.failed:
            failed = tuple(r for r in batch.records if r.offset in answer.failed)
            acked = [r.offset for r in batch.records if r.offset not in answer.failed]
            if acked:
                self._unsettled(acked[-1], len(acked))
            self.delivered += len(acked)
            self.outstanding_records -= len(batch.records) - len(failed)
            batch.records = failed
            verdict = "retry"
        if verdict == "ack":
            self.delivered += len(batch.records)
            self._done(batch)
            return None
        if verdict == "gone":
            self.paused = True
            batch.attempts = batch.spent = 0
            return Pause(f"the endpoint answered 410 Gone at offset {batch.records[0].offset}")
        if self._bisects(batch, answer, verdict):
            self._bisect(batch, verdict, now, rand)
            return None
        if verdict == "fail" or batch.spent >= self.policy.max_attempts:
            return self._exhausted(batch, answer)
        self.retried += len(batch.records)
        delay = backoff_s(self.policy, batch.spent, rand)
        if verdict == "throttle" and answer.retry_after_s is not None:
            delay = max(delay, min(answer.retry_after_s, self.policy.retry_after_max_ms / 1000))
        batch.not_before = now + delay
        return None

    def _bisects(self, batch: Batch, answer: Answer, verdict: Verdict) -> bool:
        """Whether to split `batch` rather than retry or dead-letter it whole: bisect_on_error,
        more than one record, and an answer blaming its content (CONTENT_REFUSALS, or a 5xx
        other than 503); never a throttle (429, 503), a timeout or broken connection (no
        status), another 4xx (401, 403, 404...: the endpoint or its credentials are wrong, as
        they are for every record) or 410: those are not the records' fault, and splitting
        would multiply the requests to an endpoint in trouble."""
        status = answer.status
        return (
            self.policy.bisect_on_error
            and len(batch.records) > 1
            and status is not None
            and (
                (verdict == "fail" and status in CONTENT_REFUSALS)
                or (verdict == "retry" and status >= 500)
            )
        )

    def _bisect(self, batch: Batch, verdict: Verdict, now: float, rand: float) -> None:
        """Put `batch`'s two halves (the lower offsets first) in its place, each retried on its
        own with the attempts it made but the splitting one not spent: at once after a 4xx (the
        content was refused: waiting does not help), after the backoff after a 5xx."""
        delay = 0.0 if verdict == "fail" else backoff_s(self.policy, batch.spent, rand)
        cut = len(batch.records) // 2
        halves = [
            Batch(
                part,
                attempts=batch.attempts,
                spent=batch.spent - 1,
                not_before=now + delay,
                half=True,
                last=batch.last,
            )
            for part in (batch.records[:cut], batch.records[cut:])
        ]
        if self.ordering == "key":
            for half in halves:
                half.keys = frozenset(r.key for r in half.records)
                self._hold(half.keys)
            self._release(batch.keys)  # a partial response may have left keys in no half
            self.stalled = False
        at = self.batches.index(batch)
        self.batches[at : at + 1] = halves
        self.retried += len(batch.records)

    def _unsettled(self, last: int, records: int) -> None:
        self.unsettled.append((last, records))
        self.unsettled_records += records

    def committed(self, position: int) -> None:
        """The driver committed `position`: what was done below it leaves the window."""
        self.unsettled = [(last, n) for last, n in self.unsettled if last >= position]
        self.unsettled_records = sum(n for _, n in self.unsettled)
        self.stalled = False

    def _done(self, batch: Batch) -> None:
        self.batches.remove(batch)
        self.outstanding_records -= len(batch.records)
        if batch.records:
            self._unsettled(batch.records[-1].offset, len(batch.records))
        self._release(batch.keys)
        self.stalled = False

    def _exhausted(self, batch: Batch, answer: Answer) -> DeadLetter | Stop:
        if self.dead_letter:
            batch.dead_lettering = True
            return DeadLetter(batch, batch.records, batch.attempts, answer)
        first = batch.records[0].offset
        why = "was refused" if classify(answer.status) == "fail" else "exhausted its attempts"
        self.stopped = Stop(
            first,
            f"the record at offset {first} {why} ({answer.describe()}, {batch.attempts} "
            "attempts) and there is no dead-letter topic: delivery stops on it until resumed",
        )
        batch.exhausted = True
        return self.stopped

    def dead_lettered(self, batch: Batch) -> None:
        """The batch is in the dead-letter topic: move past it."""
        assert batch.dead_lettering
        self.dead_lettered_count += len(batch.records)
        self._done(batch)

    def abandon(self) -> None:
        """The requests in flight were given up (the driver restarts): their batches are
        sent again, without waiting."""
        for batch in self.batches:
            if batch.sending:
                batch.sending = False
                self.sending_count -= 1
                batch.not_before = 0.0

    # -- control -------------------------------------------------------------------------------

    def pause(self) -> None:
        """No new attempts (those in flight end as they will)."""
        self.paused = True

    def resume(self) -> None:
        """Attempts again, at once; a batch delivery stopped on gets a fresh budget."""
        self.paused = False
        self.stopped = None
        for batch in self.batches:
            batch.not_before = 0.0
            if batch.exhausted:
                batch.exhausted = False
                batch.attempts = batch.spent = 0
