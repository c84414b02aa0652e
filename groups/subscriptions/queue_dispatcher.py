"""A push subscription in queue mode: its records acquired from its share group (groups.share)
and POSTed one a request, up to `concurrency.max_requests` in flight across the whole topic,
far past its partition count. It runs on the node that coordinates the share group, so an
acquire and an acknowledgement are calls in process.

A 2xx accepts the record; an answer that is not retried (a 4xx other than 408, 410 and 429)
rejects it; a 5xx, 408, 429, a timeout or no answer releases it with backoff (the endpoint's
Retry-After first), counting a delivery. A record that exhausts `retry.max_attempts` (or the
share group's delivery limit) is produced to the dead-letter topic first, then archived, so
nothing is archived unseen.

With ordering `key`, records of one key are never in flight together and finish in offset
order: a record whose attempt fails stays held (its lock renewed) and is retried in place
after its backoff, and the records of its key wait behind it. Different keys run at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.errors import EngineError
from groups.share.coordinator import ShareCoordinator
from groups.share.model import ShareRecord
from groups.share.partition_state import AckType
from groups.subscriptions import formats
from groups.subscriptions.client import Response
from groups.subscriptions.dispatcher import (
    MAX_ANSWER_BYTES,
    RETRY_FIRST_S,
    RETRY_MAX_S,
    Counts,
    LatencyHistogram,
    Services,
    dead_letter_record,
    produce_dead_letters,
)
from groups.subscriptions.errors import SubscriptionError
from groups.subscriptions.flow import FlowControl, outcome
from groups.subscriptions.spec import Subscription
from groups.subscriptions.state import Answer, DeliveryRecord, backoff_s, classify, retry_after_s
from replication.errors import ReplicationError

log = logging.getLogger(__name__)

ACQUIRE_WAIT_MS = 5_000  # one long-poll of the share group, then another
MIN_LOCK_MS = 15_000
MAX_LOCK_MS = 3_600_000
SHARE_DELIVERY_LIMIT = 10  # the share group's highest delivery limit


def lock_ms(sub: Subscription) -> int:
    """The acquisition lock: twice the request timeout, so an attempt never outlives it."""
    return max(MIN_LOCK_MS, min(MAX_LOCK_MS, 2 * sub.retry.timeout_ms))


def share_configs(sub: Subscription) -> dict[str, Any]:
    """The share group's configs a queue-mode subscription runs it with."""
    start = sub.start
    reset = start if isinstance(start, str) else f"by_duration:PT{max(0, _age_s(start))}S"
    return {
        "share.auto.offset.reset": reset,
        "share.record.lock.duration.ms": lock_ms(sub),
        "share.delivery.count.limit": max(2, min(SHARE_DELIVERY_LIMIT, sub.retry.max_attempts)),
        "share.isolation.level": sub.isolation,
    }


def _age_s(timestamp_ms: int) -> int:
    return int(time.time() - timestamp_ms / 1000)


@dataclass(eq=False)
class Held:
    """A record this dispatcher holds: its delivery, attempts made in place (ordering key),
    when it may be tried again, and its lock's deadline."""

    record: ShareRecord
    deadline_ms: int
    attempts: int = 0
    not_before: float = 0.0
    sending: bool = False
    last: Answer | None = field(default=None)

    @property
    def key(self) -> bytes | None:
        return self.record.key


class QueueDispatcher:
    """Delivers a queue-mode subscription from its share group until stopped."""

    def __init__(
        self,
        services: Services,
        share: ShareCoordinator,
        encode_json: Callable[[ShareRecord], bytes],
        sub: Subscription,
        counts: Counts,
        flow: FlowControl,
    ) -> None:
        self.services = services
        self.share = share
        self.encode_json = encode_json
        self.sub = sub
        self.counts = counts
        self.flow = flow
        self.member = f"subscription-{sub.uid}"
        self.held: list[Held] = []  # in acquisition order
        self.keys: dict[bytes | None, Held] = {}  # ordering key: the record each key waits on
        self.attempts: set[asyncio.Task[None]] = set()
        self.failure: BaseException | None = None
        self.last_error: str | None = None
        self.stopping = False
        self._fixed: dict[int, formats.Fixed] = {}
        self._waiter: asyncio.Future[None] | None = None
        self._woken = False
        self._loop = asyncio.get_running_loop()
        self.task = asyncio.create_task(self._run(), name=f"subscription-{sub.name}-queue")

    # -- control ---------------------------------------------------------------------------------

    def set_paused(self, sub: Subscription) -> None:
        self.sub = sub
        self._wake()

    async def stop(self) -> None:
        """Stop at once; what this dispatcher holds goes back to the share group (it leaves),
        so whoever dispatches next takes it without waiting for the locks."""
        self.stopping = True
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        with contextlib.suppress(EngineError, ReplicationError, OSError, TimeoutError):
            async with asyncio.timeout(RETRY_MAX_S):
                await self.share.leave(self.sub.group, self.member)

    def status(self) -> dict[str, Any]:
        """The queue's row in a subscription's description."""
        return {
            "share_group": self.sub.group,
            "state": "paused" if self.sub.paused else "running",
            "held": len(self.held),
            "in_flight": sum(1 for h in self.held if h.sending),
            "concurrency_limit": int(self.flow.limit.limit),
            "delivered": self.counts.delivered,
            "retried": self.counts.retried,
            "dead_lettered": self.counts.dead_lettered,
            "last_error": self.last_error,
        }

    # -- the loop --------------------------------------------------------------------------------

    async def _run(self) -> None:
        delay = RETRY_FIRST_S
        while not self.stopping:
            try:
                await self._dispatch()
                return
            except SubscriptionError:
                return
            except (ReplicationError, EngineError, OSError) as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.info(
                    "subscription %r (queue): %s; retrying in %.1f s",
                    self.sub.name,
                    self.last_error,
                    delay,
                )
            except Exception:
                self.last_error = "internal error (see the node's log)"
                log.exception("subscription %r (queue) failed", self.sub.name)
            await asyncio.sleep(delay)
            delay = min(RETRY_MAX_S, delay * 2)

    async def _dispatch(self) -> None:
        sub, share = self.sub, self.share
        await share.set_configs(sub.group, share_configs(sub))
        session = max(45_000, 3 * lock_ms(sub))
        await share.join(sub.group, (sub.topic,), session, member_id=self.member)
        acquiring: asyncio.Task[list[ShareRecord]] | None = None
        renewing = asyncio.create_task(self._renew_locks())
        self.flow.listeners.add(self._wake)
        try:
            while not self.stopping:
                if self.failure is not None:
                    failure, self.failure = self.failure, None
                    raise failure
                if self.sub.paused and any(not h.sending for h in self.held):
                    await self._give_back_unsent()
                wait = self._start_sends()
                room = self.sub.concurrency.max_requests - len(self.held)
                if acquiring is None and room > 0 and not self.sub.paused and not share.closing:
                    acquiring = asyncio.create_task(
                        share.acquire(
                            sub.group,
                            self.member,
                            room,
                            sub.batching.max_bytes,
                            ACQUIRE_WAIT_MS,
                            counted=False,  # the server's own wait, not a client's
                        )
                    )
                    acquiring.add_done_callback(self._wake)
                await self._wait(wait)
                if acquiring is not None and acquiring.done():
                    done, acquiring = acquiring, None
                    now = self._loop.time()
                    for record in done.result():
                        self.held.append(Held(record, record.lock_deadline_ms, not_before=now))
        finally:
            self.flow.listeners.discard(self._wake)
            tasks: list[asyncio.Task[Any]] = [renewing, *self.attempts]
            if acquiring is not None:
                tasks.append(acquiring)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.held.clear()
            self.keys.clear()

    def _start_sends(self) -> float | None:
        """Start every attempt that the flow control, the pause and the ordering allow now;
        the seconds until a held record's backoff ends or the rate allows the next."""
        if self.sub.paused:
            return None
        now = self._loop.time()
        keyed = self.sub.ordering == "key"
        soonest: float | None = None
        for held in self.held:
            if held.sending:
                continue
            if keyed:
                owner = self.keys.get(held.key)
                if owner is not None and owner is not held:
                    continue
                if owner is None and self._earlier_of_key(held):
                    continue
            if held.not_before > now:
                soonest = _min(soonest, held.not_before - now)
                continue
            wait = self.flow.wait_s(now)
            if wait > 0:
                return None if math.isinf(wait) else _min(soonest, wait)
            if keyed:
                self.keys[held.key] = held
            held.sending = True
            ticket = self.flow.acquire(now)
            task = asyncio.create_task(self._attempt(held, ticket))
            self.attempts.add(task)
            task.add_done_callback(self._attempt_ended)
        return soonest

    def _earlier_of_key(self, held: Held) -> bool:
        """Whether a record of the same key and partition with a lower offset is held: it
        goes first."""
        record = held.record
        return any(
            h.record.key == record.key
            and h.record.partition == record.partition
            and h.record.offset < record.offset
            for h in self.held
        )

    def _attempt_ended(self, task: asyncio.Task[None]) -> None:
        self.attempts.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.failure = task.exception()
        self._wake()

    # -- one record ------------------------------------------------------------------------------

    async def _attempt(self, held: Held, ticket: int) -> None:
        """POST the record, then accept, release, retry in place, reject or dead-letter it as
        the answer says."""
        sub = self.sub
        started = self._loop.time()
        answer = await self._post(held)
        self.flow.release(ticket, outcome(answer.status, self._loop.time() - started,
                                          sub.retry.timeout_ms / 1000))  # fmt: skip
        held.attempts += 1
        held.last = answer
        verdict = classify(answer.status)
        record = held.record
        if verdict == "ack":
            self.counts.delivered += 1
            self.last_error = None
            histogram = self.services.latency.get(sub.name)
            if histogram is None:
                histogram = self.services.latency[sub.name] = LatencyHistogram()
            histogram.observe(time.time() - record.timestamp / 1000)
            await self._settle(held, AckType.ACCEPT)
            return
        self.last_error = answer.describe()
        if verdict == "gone":
            await self._settle(held, AckType.RELEASE)
            await self.services.set_paused(sub.name, f"the endpoint answered 410: {answer.error}")
            return
        spent = record.delivery_count
        if sub.ordering == "key":  # retried in place: the deliveries before, and these attempts
            spent += held.attempts - 1
        limit = min(sub.retry.max_attempts, SHARE_DELIVERY_LIMIT)
        if verdict == "fail" or spent >= limit:
            reason = "rejected" if verdict == "fail" else "delivery limit reached"
            await self._dead_letter(held, spent, reason)
            await self._settle(held, AckType.REJECT)
            return
        self.counts.retried += 1
        delay = self._backoff_s(answer, spent)
        if sub.ordering == "key":
            held.sending = False
            held.not_before = self._loop.time() + delay
            return
        await self._settle(held, AckType.RELEASE, int(delay * 1000))

    def _backoff_s(self, answer: Answer, attempt: int) -> float:
        policy = self.sub.retry
        if answer.retry_after_s is not None:
            return min(answer.retry_after_s, policy.retry_after_max_ms / 1000)
        return backoff_s(policy, attempt, random.random())

    async def _settle(self, held: Held, kind: AckType, delay_ms: int = 0) -> None:
        """Acknowledge the record and let it go (a refusal means its lock lapsed meanwhile:
        it is the share group's again, delivered anew)."""
        results = await self.share.acknowledge(
            self.sub.group, self.member, [(held.record.token, kind, delay_ms)]
        )
        if results[0].refused is not None:
            self.last_error = f"{held.record.token}: {results[0].refused}"
        self._forget(held)

    def _forget(self, held: Held) -> None:
        with contextlib.suppress(ValueError):
            self.held.remove(held)
        if self.keys.get(held.key) is held:
            del self.keys[held.key]

    def _failed(self, why: str) -> None:
        self.last_error = why

    async def _dead_letter(self, held: Held, attempts: int, reason: str) -> None:
        """Produce the record to the dead-letter topic (until it is in) before it is archived."""
        sub = self.sub
        if sub.dead_letter_topic is None:
            log.warning(
                "subscription %r: %s archived after %d attempts (%s), no dead-letter topic",
                sub.name,
                held.record.token,
                attempts,
                reason,
            )
            return
        assert held.last is not None
        dead = dead_letter_record(
            sub, held.record.partition, _delivery(held.record), attempts, held.last, reason
        )
        await produce_dead_letters(self.services, sub, [dead], self._failed)
        self.counts.dead_lettered += 1

    async def _post(self, held: Held) -> Answer:
        sub, record = self.sub, held.record
        fixed = self._fixed.get(record.partition)
        if fixed is None or fixed.sub is not sub:
            fixed = self._fixed[record.partition] = formats.fixed(sub, record.partition)
        delivery = _delivery(record, self.encode_json(record) if sub.format == "json" else None)
        body, head = formats.request(fixed, (delivery,), int(time.time()))
        head = b"sluice-delivery-count: %d\r\n" % record.delivery_count + head
        try:
            response = await self.services.client.post(
                sub.endpoint, head, body, sub.retry.timeout_ms / 1000, MAX_ANSWER_BYTES,
                sub.concurrency.pipeline,
            )  # fmt: skip
        except TimeoutError:
            return Answer(None, f"no answer within {sub.retry.timeout_ms} ms")
        except (OSError, ValueError) as exc:
            return Answer(None, f"{type(exc).__name__}: {exc}"[:500])
        return _answer(response)

    async def _give_back_unsent(self) -> None:
        """Paused: the records held but not being sent go back to the share group."""
        unsent = [h for h in self.held if not h.sending]
        acks = [(h.record.token, AckType.RELEASE, 0) for h in unsent]
        await self.share.acknowledge(self.sub.group, self.member, acks)
        for held in unsent:
            self._forget(held)

    # -- locks -----------------------------------------------------------------------------------

    async def _renew_locks(self) -> None:
        """Renew the locks of records held past a third of their duration: waiting for a slot,
        for their key, or for a retry in place."""
        period = lock_ms(self.sub) / 3000
        while True:
            await asyncio.sleep(period)
            now_ms = int(time.time() * 1000)
            due = [h for h in self.held if h.deadline_ms - now_ms < 2 * period * 1000]
            if not due:
                continue
            acks = [(h.record.token, AckType.RENEW, 0) for h in due]
            results = await self.share.acknowledge(self.sub.group, self.member, acks)
            for held, result in zip(due, results, strict=True):
                if result.refused is None and result.lock_deadline_ms is not None:
                    held.deadline_ms = result.lock_deadline_ms
                elif not held.sending:
                    self._forget(held)  # lapsed: the share group delivers it anew

    # -- waiting ---------------------------------------------------------------------------------

    def _wake(self, *_: object) -> None:
        self._woken = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait(self, timeout_s: float | None) -> None:
        if self._woken:
            self._woken = False
            return
        self._waiter = self._loop.create_future()
        try:
            if timeout_s is None:
                await self._waiter
            else:
                await asyncio.wait((self._waiter,), timeout=timeout_s)
        finally:
            self._waiter = None
            self._woken = False


def _min(a: float | None, b: float) -> float:
    return b if a is None else min(a, b)


def _delivery(record: ShareRecord, json: bytes | None = None) -> DeliveryRecord:
    return DeliveryRecord(
        record.offset, record.timestamp, record.key, record.value, record.headers, json
    )


def _answer(response: Response) -> Answer:
    after = None
    if "retry-after" in response.headers:
        after = retry_after_s(response.headers["retry-after"], time.time())
    return Answer(response.status, response.reason, after)
