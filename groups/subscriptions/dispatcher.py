"""The async driver around one partition's delivery state (state.py): it reads committed
records (at the subscription's isolation level) where the partition is led (this node: the
dispatcher runs on the leader), filters them, POSTs each batch (client.py), produces what
exhausts its budget to the dead-letter topic, and commits the position. Attempts run as
tasks, as many as the ordering and the subscription's flow control (flow.py) allow; the
position committed is the lowest offset not yet acknowledged or dead-lettered.

Commits are coalesced: at most one every COMMIT_INTERVAL_S (a timer wakes the loop for it),
at once when the records done but uncommitted reach UNCOMMITTED_WINDOWS windows or when a
paused or stopped partition has nothing in flight, and at a stop (pause, delete, shutdown, a
change of leader or settings). So a crash redelivers what was in flight plus at
most one interval's acknowledgements, and never more than the state's open_limit."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import functools
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from engine import batch as fmt
from engine.errors import EngineError, OffsetOutOfRange, UnknownPartition, UnknownTopic
from engine.producer_state import Isolation
from groups.coordinator import RecordDecoder
from groups.partition_reader import PartitionRead, PartitionReader, out_of_range_start
from groups.subscriptions import formats, partial
from groups.subscriptions.client import DeliveryClient, Request, Response
from groups.subscriptions.errors import SubscriptionError
from groups.subscriptions.flow import FlowControl, outcome
from groups.subscriptions.positions import GroupPositions
from groups.subscriptions.replies import Transactions
from groups.subscriptions.spec import Subscription
from groups.subscriptions.state import (
    Answer,
    Batch,
    DeadLetter,
    DeliveryRecord,
    PartitionDispatch,
    Pause,
    SchemaValue,
    Send,
    Stop,
    retry_after_s,
)
from replication.errors import ReplicationError

log = logging.getLogger(__name__)

READ_WAIT_MS = 5_000  # one long-poll of the partition, then another
MAX_ANSWER_BYTES = 4096  # of an endpoint's answer body: read (to reuse the connection), unused
RETRY_FIRST_S, RETRY_MAX_S = 0.1, 5.0  # a read, commit or dead-letter that failed waits, doubling
COMMIT_INTERVAL_S = 0.05  # a busy partition's position is committed at most this often
FLUSH_TIMEOUT_S = 2.0  # a stopping dispatcher's last commit, at most this long
# (topic, records as (key, value, headers)) -> appended with acks=all, or raises
DeadLetterSink = Callable[
    [str, list[tuple[bytes | None, bytes | None, fmt.Headers]]], Awaitable[None]
]
# Delivery latency (record timestamp -> 2xx) buckets, in seconds.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600)


@dataclass(slots=True)
class Counts:
    """A partition's delivery counts on this node, across its dispatchers' restarts."""

    delivered: int = 0
    retried: int = 0
    dead_lettered: int = 0


@dataclass(slots=True)
class LatencyHistogram:
    """Record timestamp -> acknowledgement, in seconds: cumulative bucket counts for the
    metrics (the gateway exports them)."""

    buckets: tuple[float, ...] = LATENCY_BUCKETS
    counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS) + 1))
    total: float = 0.0

    def observe(self, seconds: float) -> None:
        seconds = max(seconds, 0.0)
        self.counts[bisect.bisect_left(self.buckets, seconds)] += 1  # past the last: +Inf's
        self.total += seconds


# A read's batches, their records to deliver, and the offset after the last record read.
Read = tuple[PartitionRead, list[DeliveryRecord], int]


class SchemaValues(Protocol):
    """Record values read by the schema registry, for `decode_values: schema` (the gateway's:
    groups know no schemas)."""

    async def values(self, values: Sequence[bytes | None]) -> list[SchemaValue | None]:
        """Each value decoded, or why not; None for a null or JSON value (delivered as is)."""

    async def documents(self, records: list[Any]) -> list[Any]:
        """Fetch documents (the JSON format's records) with their values decoded as a fetch
        with `decode_values=schema` has them."""


@dataclass
class Services:
    """What a dispatcher uses, shared by all of a node's dispatchers."""

    reader: PartitionReader
    positions: GroupPositions
    dead_letter: DeadLetterSink
    decode_json: RecordDecoder
    schema_values: SchemaValues
    client: DeliveryClient
    set_paused: Callable[[str, str], Awaitable[None]]  # (name, reason): pause the subscription
    transactions: Transactions  # a reply subscription's (reply_dispatcher.py)
    latency: dict[str, LatencyHistogram] = field(default_factory=dict)


class PartitionDispatcher:
    """Delivers one partition of one subscription, from its committed position, until stopped."""

    def __init__(
        self,
        services: Services,
        sub: Subscription,
        partition: int,
        counts: Counts,
        flow: FlowControl,
    ) -> None:
        self.services = services
        self.sub = sub
        self.partition = partition
        self.counts = counts
        self.flow = flow
        self.state: PartitionDispatch | None = None
        self.committed: int | None = None
        self.high_watermark: int | None = None
        self.last_error: str | None = None
        self.stopping = False
        self.attempts: set[asyncio.Task[None]] = set()
        self.requests: set[Request] = set()  # sent by _send_now, unanswered
        self.failure: BaseException | None = None  # an attempt's unexpected error
        self._commit_task: asyncio.Task[None] | None = None
        self._fixed = formats.fixed(sub, partition)
        self._committed_at = -math.inf  # loop time of the last commit's start
        self._woken = False  # something happened since the loop last looked
        self._waiter: asyncio.Future[None] | None = None  # the loop waits on it
        self._loop = asyncio.get_running_loop()
        self.task = asyncio.create_task(self._run(), name=f"subscription-{sub.name}-{partition}")

    # -- control -------------------------------------------------------------------------------

    def set_paused(self, sub: Subscription) -> None:
        """The subscription was paused or resumed (its delivery settings unchanged): resuming
        also retries a batch delivery stopped on, with a fresh budget."""
        self.sub = sub
        if self.state is not None:
            if sub.paused:
                self.state.pause()
            else:
                self.state.resume()
        self._wake()

    async def stop(self) -> None:
        """Stop at once: an attempt in flight is abandoned (it is delivered again by whoever
        dispatches next, from the committed position); what was acknowledged since the last
        commit is committed first."""
        self.stopping = True
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        await self._flush()

    def status(self) -> dict[str, Any]:
        """This partition's row in a subscription's description."""
        state = self.state
        lag = None
        if self.high_watermark is not None and self.committed is not None:
            lag = max(self.high_watermark - self.committed, 0)
        row: dict[str, Any] = {
            "partition": self.partition,
            "state": self._state_name(),
            "committed_offset": self.committed,
            "high_watermark": self.high_watermark,
            "lag": lag,
            "in_flight": 0 if state is None else state.in_flight,
            "requests_in_flight": 0 if state is None else state.requests_in_flight,
            "concurrency_limit": int(self.flow.limit.limit),
            "attempts": 0 if state is None else state.attempts,
            "delivered": self.counts.delivered,
            "retried": self.counts.retried,
            "dead_lettered": self.counts.dead_lettered,
            "last_error": self.last_error,
        }
        if state is not None and state.stopped is not None:
            row["stopped_at_offset"] = state.stopped.offset
        return row

    def _state_name(self) -> str:
        state = self.state
        if state is None:
            return "starting"
        if state.stopped is not None:
            return "stopped"
        if state.paused:
            return "paused"
        if (
            state.attempts > 0
            and state.last is not None
            and state.last.status not in range(200, 300)
        ):
            return "failing"
        return "running"

    # -- the loop ------------------------------------------------------------------------------

    async def _run(self) -> None:
        delay = RETRY_FIRST_S
        while not self.stopping:
            try:
                await self._dispatch()
                return
            except (UnknownTopic, UnknownPartition, SubscriptionError):
                return  # the topic or the subscription went: the service stops this dispatcher
            except (ReplicationError, EngineError, OSError) as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.info(
                    "subscription %r partition %d: %s; retrying in %.1f s",
                    self.sub.name,
                    self.partition,
                    self.last_error,
                    delay,
                )
            except Exception:
                self.last_error = "internal error (see the node's log)"
                log.exception("subscription %r partition %d failed", self.sub.name, self.partition)
            await asyncio.sleep(delay)
            delay = min(RETRY_MAX_S, delay * 2)

    async def _start(self) -> int:
        """Where delivery starts: the committed position, else the subscription's start."""
        sub, reader = self.sub, self.services.reader
        committed = await self.services.positions.committed(sub, self.partition)
        if committed is None:
            isolation = Isolation(sub.isolation)
            committed = await reader.offset(sub.topic, self.partition, sub.start, isolation)
            await self.services.positions.commit(sub, self.partition, committed)
        self.committed = committed
        return committed

    async def _dispatch(self) -> None:
        sub = self.sub
        if self.state is None:
            position = await self._start()
            self.state = PartitionDispatch(
                position,
                sub.batching,
                sub.retry,
                sub.dead_letter_topic is not None,
                sub.ordering,
                sub.concurrency.max_in_flight,
            )
            if sub.paused:
                self.state.pause()
        state = self.state
        reading: asyncio.Task[Read] | None = None
        self.flow.listeners.add(self._wake)
        try:
            while not self.stopping:
                if self.failure is not None:
                    failure, self.failure = self.failure, None
                    raise failure
                if reading is None and state.wants_read():
                    reading = asyncio.create_task(self._read(state.position))
                    reading.add_done_callback(self._wake)
                flow_wait = self._start_attempts(state)
                commit_wait = self._commit_if_due(state)
                if commit_wait is not None:
                    flow_wait = commit_wait if flow_wait is None else min(flow_wait, commit_wait)
                await self._wait(state, flow_wait)
                if reading is not None and reading.done():
                    done, reading = reading, None
                    self._took(state, done)
        finally:
            self.flow.listeners.discard(self._wake)
            if reading is not None:
                reading.cancel()
            abandoned, self.requests = self.requests, set()
            for request in abandoned:
                request.cancel()  # its end comes back at once, as abandoned
            tasks = list(self.attempts)
            if self._commit_task is not None:
                tasks.append(self._commit_task)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            state.abandon()

    def _start_attempts(self, state: PartitionDispatch) -> float | None:
        """Start every attempt the state and the flow control allow now; the seconds until
        the rate limit allows the next, if that is what holds it back."""
        now = self._loop.time()
        while True:
            wait = self.flow.wait_s(now)
            if wait > 0:
                return None if math.isinf(wait) else wait
            send = state.next_send(now)
            if send is None:
                return None
            ticket = self.flow.acquire(now)
            if not self._send_now(state, send, ticket, now):
                self._track(self._attempt(state, send, ticket))

    def _track(self, attempt: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(attempt)
        self.attempts.add(task)
        task.add_done_callback(self._attempt_ended)

    def _attempt_ended(self, task: asyncio.Task[None]) -> None:
        self.attempts.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.failure = task.exception()
        self._wake()

    def _send_now(self, state: PartitionDispatch, send: Send, ticket: int, now: float) -> bool:
        """Send `send` on a connection open with room, its answer settled in a callback
        (no task, no future: most requests, one record a request above all); False when the
        client has none ready (the caller runs `_attempt`, which waits for one)."""
        try:
            body, head, limit = self._request(send)
        except ValueError:
            return False  # `_attempt` answers it
        sub = self.sub
        sent = self.services.client.try_send(
            sub.endpoint, head, body, sub.retry.timeout_ms / 1000, limit,
            sub.concurrency.pipeline, functools.partial(self._answered, state, send, ticket, now),
        )  # fmt: skip
        if sent is None:
            return False
        self.requests.add(sent)
        return True

    def _answered(
        self,
        state: PartitionDispatch,
        send: Send,
        ticket: int,
        started: float,
        sent: Request,
        response: Response | None,
        error: BaseException | None,
    ) -> None:
        """A request of `_send_now` ended: as `_attempt` after its POST, a task only for what
        must wait (a dead-letter produce, a pause)."""
        if sent not in self.requests:  # abandoned: the loop stopped or starts again
            self.flow.release(ticket, "slow")
            return
        self.requests.discard(sent)
        try:
            answer = self._answer(send, response, error)
            step = self._settle(state, send, ticket, started, answer)
            if step is not None:
                self._track(self._follow(state, step))
        except Exception as exc:  # as a task's failure in `_attempt`
            self.failure = exc
        self._wake()

    async def _wait(self, state: PartitionDispatch, flow_wait: float | None) -> None:
        """Until a read ends, an attempt or commit ends, a control change, or the next
        deadline (the state's, the rate limit's next token, or a commit's)."""
        if self._woken:
            self._woken = False
            return
        wake_at = state.wake_at()
        timeout = None if wake_at is None else max(0.0, wake_at - self._loop.time())
        if flow_wait is not None:
            timeout = flow_wait if timeout is None else min(timeout, flow_wait)
        waiter = self._waiter = self._loop.create_future()
        timer = None if timeout is None else self._loop.call_later(timeout, self._wake)
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()
        self._woken = False

    def _wake(self, _: object = None) -> None:
        """Wake the loop (a read, an attempt or a commit ended, a slot freed, a control
        change, a deadline): one future, not a task and asyncio.wait per turn."""
        self._woken = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _took(self, state: PartitionDispatch, done: asyncio.Task[Read]) -> None:
        """A read ended: its records into the state (or the position moved past a gap)."""
        try:
            got, records, next_offset = done.result()
        except OffsetOutOfRange as exc:
            to = out_of_range_start(exc)
            log.warning(
                "subscription %r partition %d: offsets %d..%d are no longer in the log; going "
                "on at %d",
                self.sub.name,
                self.partition,
                state.position,
                to - 1,
                to,
            )
            state.moved(to)
            return
        self.high_watermark = got.high_watermark
        if got.data:
            state.read(records, next_offset, self._loop.time())

    async def _read(self, position: int) -> Read:
        """Committed batches from `position`, their records decoded (with `decode_values:
        schema`, their values read by the schema registry too)."""
        sub = self.sub
        got = await self.services.reader.read(
            sub.topic, self.partition, position, sub.batching.max_bytes, READ_WAIT_MS,
            isolation=Isolation(sub.isolation),
        )  # fmt: skip
        if not got.data:
            return got, [], position
        if sub.decode_values == "schema":
            records, next_offset = await self._schema_decoded(got.data, position)
        else:
            records, next_offset = self._decode(got.data, position)
        return got, records, next_offset

    async def _schema_decoded(
        self, data: memoryview, start: int
    ) -> tuple[list[DeliveryRecord], int]:
        """`_decode`, with the values as the schema registry reads them (for the JSON format,
        in its fetch documents)."""
        values = self.services.schema_values
        if self.sub.format == "json":
            # Every record takes bytes: at most len(data) records, so all of those read.
            found = await values.documents(self._documents(data, start, len(data)))
            return self._decode(data, start, found)
        records, next_offset = self._decode(data, start)
        decoded = await values.values([r.value for r in records])
        return [r._replace(schema=v) for r, v in zip(records, decoded, strict=True)], next_offset

    def _documents(self, data: memoryview, start: int, most: int) -> list[Any]:
        """The fetch decoder's records at or past `start`, in order (the C path's carry no
        offset)."""
        found, _ = self.services.decode_json(data, start, most, (self.sub.topic, self.partition))
        return found

    def _decode(
        self, data: memoryview, start: int, found: list[Any] | None = None
    ) -> tuple[list[DeliveryRecord], int]:
        """The records at or past `start` that the filter keeps, and the offset after the
        last record read (`found`: the JSON format's documents, if made already)."""
        keep = self.sub.filter
        read = [r for r in fmt.iter_records(data) if r.offset >= start]
        docs: list[bytes | None] = [None] * len(read)
        if self.sub.format == "json":
            if found is None:
                found = self._documents(data, start, len(read))
            docs = [msgspec.json.encode(doc) for doc in found]
        next_offset = read[-1].offset + 1 if read else start
        active = keep.active
        out = [
            DeliveryRecord(*record, doc)  # Record's fields, in DeliveryRecord's order
            for record, doc in zip(read, docs, strict=True)
            if not active or keep(record.key, record.headers)
        ]
        headers = fmt.scan(data, check_crc=False).headers
        if headers:
            next_offset = max(next_offset, headers[-1][1].next_offset)
        return out, next_offset

    async def _attempt(self, state: PartitionDispatch, send: Send, ticket: int) -> None:
        """One attempt, then what its answer calls for; the flow control learns how it went."""
        started = self._loop.time()
        try:
            answer = await self._post(send)
        except BaseException:
            self.flow.release(ticket, "slow")
            raise
        step = self._settle(state, send, ticket, started, answer)
        if step is not None:
            await self._follow(state, step)

    def _settle(
        self, state: PartitionDispatch, send: Send, ticket: int, started: float, answer: Answer
    ) -> DeadLetter | Pause | None:
        """An attempt's answer into the state, the flow control and the counts; what must
        still be awaited (a dead-letter produce, a pause), if anything."""
        sub = self.sub
        now = self._loop.time()
        step = state.answered(send, answer, now, random.random())
        self.flow.release(
            ticket, outcome(answer.status, now - started, sub.retry.timeout_ms / 1000)
        )
        ok = answer.status is not None and 200 <= answer.status < 300
        if ok:
            acked = (
                [r for r in send.records if r.offset not in answer.failed]
                if answer.failed
                else send.records
            )
            self.counts.delivered += len(acked)
            histogram = self.services.latency.get(sub.name)
            if histogram is None:
                histogram = self.services.latency[sub.name] = LatencyHistogram()
            now_ms = time.time() * 1000
            for record in acked:
                histogram.observe((now_ms - record.timestamp) / 1000)
            if not answer.failed:
                self.last_error = None
                return None
        self.last_error = answer.describe()
        if step is None:
            self.counts.retried += len(send.batch.records)
        elif isinstance(step, Stop):
            log.warning("subscription %r partition %d: %s", sub.name, self.partition, step.reason)
            self.last_error = step.reason
        else:
            if isinstance(step, Pause):
                log.warning("subscription %r: %s; pausing it", sub.name, step.reason)
            return step
        return None

    async def _follow(self, state: PartitionDispatch, step: DeadLetter | Pause) -> None:
        """What an answer called for that must be awaited."""
        if isinstance(step, DeadLetter):
            await self._dead_letter(state, step)
        else:
            await self.services.set_paused(self.sub.name, step.reason)

    def _request(self, send: Send) -> tuple[bytes, bytes, int]:
        """The request's body and header lines, and how much of an answer to read."""
        if self._fixed.sub is not self.sub:
            self._fixed = formats.fixed(self.sub, self.partition)
        body, head = formats.request(self._fixed, send.records, int(time.time()))
        return body, head, partial.MAX_PARTIAL_BYTES if len(send.records) > 1 else MAX_ANSWER_BYTES

    async def _post(self, send: Send) -> Answer:
        """One request; the endpoint's answer, or why there was none."""
        return self._answer(send, *await self._exchange(send))

    async def _exchange(
        self, send: Send, body_limit: int | None = None
    ) -> tuple[Response | None, BaseException | None]:
        """One request: the endpoint's response (at most `body_limit` bytes of its body, if
        given), or the error that stood for it (a timeout, a connection, an answer that could
        not be read)."""
        sub = self.sub
        try:
            body, head, limit = self._request(send)
            response = await self.services.client.post(
                sub.endpoint, head, body, sub.retry.timeout_ms / 1000, body_limit or limit,
                sub.concurrency.pipeline,
            )  # fmt: skip
        except (OSError, ValueError) as exc:
            return None, exc
        return response, None

    def _answer(self, send: Send, response: Response | None, error: BaseException | None) -> Answer:
        """The endpoint's answer to `send`, or why there was none (`error`: a timeout, a
        connection or an answer that could not be read)."""
        sub = self.sub
        if response is None:
            if isinstance(error, TimeoutError):
                return Answer(None, f"no answer within {sub.retry.timeout_ms} ms")
            if isinstance(error, OSError | ValueError):
                return Answer(None, f"{type(error).__name__}: {error}"[:500])
            raise error if error is not None else AssertionError("neither answer nor error")
        status, headers = response.status, response.headers
        after = None
        if "retry-after" in headers:
            after = retry_after_s(headers["retry-after"], time.time())
        if 200 <= status < 300 and len(send.records) > 1 and sub.reply is None:
            media = headers.get("content-type", "").partition(";")[0].strip().lower()
            if media.endswith("json"):
                failed, why = partial.failures(sub.topic, self.partition, send, response.body)
                return Answer(status, why, after, failed)
        return Answer(status, response.reason, after)

    def _commit_if_due(self, state: PartitionDispatch) -> float | None:
        """Start a commit if the committable position moved and one is due (state.settle_now,
        or COMMIT_INTERVAL_S passed since the last); else the seconds until one is due, if it
        waits on time."""
        if self._commit_task is not None:
            return None  # its end wakes the loop
        if self.committed is not None and state.committable <= self.committed:
            return None
        now = self._loop.time()
        if not state.settle_now():
            wait = self._committed_at + self.commit_interval_s - now
            if wait > 0:
                return wait
        self._committed_at = now
        self._commit_task = asyncio.create_task(self._commit(state))
        self._commit_task.add_done_callback(self._commit_ended)
        return None

    @property
    def commit_interval_s(self) -> float:
        """The least time between two coalesced commits."""
        return COMMIT_INTERVAL_S

    def _commit_ended(self, task: asyncio.Task[None]) -> None:
        self._commit_task = None
        if not task.cancelled() and task.exception() is not None:
            self.failure = task.exception()
        self._wake()

    async def _commit(self, state: PartitionDispatch) -> None:
        """Commit the state's committable position; a failing commit is retried until it
        succeeds, since the window waits for it (at least once: a crash meanwhile delivers
        the window again)."""
        sub = self.sub
        delay, failed = RETRY_FIRST_S, False
        while not self.stopping:
            position = state.committable
            try:
                await self.services.positions.commit(sub, self.partition, position)
            except SubscriptionError:
                self.last_error = "the subscription was deleted: its position is not kept"
                return
            except (ReplicationError, EngineError, OSError) as exc:
                failed = True
                self.last_error = f"commit failed: {type(exc).__name__}: {exc}"
                log.info(
                    "subscription %r partition %d: %s", sub.name, self.partition,
                    self.last_error,
                )  # fmt: skip
                await asyncio.sleep(delay)
                delay = min(RETRY_MAX_S, delay * 2)
                continue
            self.committed = position
            if failed:
                self.last_error = None
            state.committed(position)
            return

    async def _flush(self) -> None:
        """A stopped dispatcher's last commit: what was acknowledged since the previous one,
        tried once (bounded); if it fails, the next dispatcher delivers those records again."""
        state = self.state
        if state is None or self.committed is None or state.committable <= self.committed:
            return
        position = state.committable
        try:
            async with asyncio.timeout(FLUSH_TIMEOUT_S):
                await self.services.positions.commit(self.sub, self.partition, position)
        except (SubscriptionError, ReplicationError, EngineError, OSError, TimeoutError) as exc:
            log.info(
                "subscription %r partition %d: the last commit failed: %r",
                self.sub.name, self.partition, exc,
            )  # fmt: skip
            return
        self.committed = position
        state.committed(position)

    def _failed(self, why: str) -> None:
        self.last_error = why

    async def _dead_letter(self, state: PartitionDispatch, step: DeadLetter) -> None:
        """Produce an exhausted batch to the dead-letter topic until it is in, then move past
        it (the loop commits)."""
        sub = self.sub
        records = [
            dead_letter_record(sub, self.partition, r, step.attempts, step.last)
            for r in step.records
        ]
        await produce_dead_letters(self.services, sub, records, self._failed)
        await self._past_dead_letters(state, step.batch)
        self.counts.dead_lettered += len(step.records)
        state.dead_lettered(step.batch)

    async def _past_dead_letters(self, state: PartitionDispatch, batch: Batch) -> None:
        """What moving past a dead-lettered batch waits for: nothing here (the loop's
        commits follow it); a reply subscription commits the position in a transaction."""


async def produce_dead_letters(
    services: Services,
    sub: Subscription,
    records: list[tuple[bytes | None, bytes | None, fmt.Headers]],
    failed: Callable[[str], None],
) -> None:
    """Produce records to the subscription's dead-letter topic until they are in, backing off
    between tries (`failed` is told why each failed)."""
    assert sub.dead_letter_topic is not None
    delay = RETRY_FIRST_S
    while True:
        try:
            await services.dead_letter(sub.dead_letter_topic, records)
            return
        except (ReplicationError, EngineError, OSError) as exc:
            why = f"dead-letter produce failed: {type(exc).__name__}: {exc}"
            failed(why)
            log.info("subscription %r: %s", sub.name, why)
        await asyncio.sleep(delay)
        delay = min(RETRY_MAX_S, delay * 2)


def dead_letter_record(
    sub: Subscription,
    partition: int,
    record: DeliveryRecord,
    attempts: int,
    last: Answer,
    reason: str | None = None,
) -> tuple[bytes | None, bytes | None, fmt.Headers]:
    """A dead-lettered record: the original key, value and headers, and headers that say
    where it came from and why it failed (`reason`: why a queue-mode record was archived)."""
    why: list[tuple[str, str]] = [
        ("sluice-subscription", sub.name),
        ("sluice-topic", sub.topic),
        ("sluice-partition", str(partition)),
        ("sluice-offset", str(record.offset)),
        ("sluice-timestamp", str(record.timestamp)),
        ("sluice-attempts", str(attempts)),
        ("sluice-status", "" if last.status is None else str(last.status)),
        ("sluice-error", last.describe()),
    ]
    if reason is not None:
        why.append(("sluice-reason", reason))
    headers: fmt.Headers = [*record.headers, *((n, v.encode()) for n, v in why)]
    return record.key, record.value, headers
