"""A loopback receiver that traces every attempt as events on one sequence (arrival, answer),
with the records each carried and how many requests were in flight when it arrived; and the
checker that holds those traces to an ordering: a record is sent only after every earlier
record of its partition (ordering `partition`) or of its key (ordering `key`) was
acknowledged or dead-lettered; none skipped; the concurrency bound respected."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import orjson
from aiohttp import web
from standardwebhooks.webhooks import Webhook


@dataclass
class Traced:
    arrived: int  # the sequence number of its arrival
    at: float  # time.monotonic() on arrival
    partition: int
    offsets: tuple[int, ...]
    keys: tuple[str | None, ...]
    concurrent: int  # requests in flight at the receiver when it arrived, itself included
    headers: dict[str, str]
    body: bytes
    status: int = 0
    failed: tuple[int, ...] = ()  # offsets its 2xx answer reported failed
    answered: int = 0  # the sequence number of its answer

    @property
    def acked(self) -> tuple[int, ...]:
        if not 200 <= self.status < 300:
            return ()
        return tuple(o for o in self.offsets if o not in self.failed)


# The answer to an attempt: status, headers, JSON body (None: no body).
Answer = tuple[int, dict[str, str], object]
Decide = Callable[[Traced], Answer]


def accept(_: Traced) -> Answer:
    return 204, {}, None


@dataclass
class TracingReceiver:
    """Answers each attempt by `decide`, after `delay_s` of work."""

    decide: Decide = accept
    delay_s: float = 0.0
    traces: list[Traced] = field(default_factory=list)
    in_flight: int = 0
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    url: str = ""
    _seq: itertools.count[int] = field(default_factory=itertools.count)

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        partition, offsets, keys = _records(headers, body)
        self.in_flight += 1
        trace = Traced(
            next(self._seq), time.monotonic(), partition, offsets, keys, self.in_flight,
            headers, body,
        )  # fmt: skip
        try:
            status, answer_headers, doc = self.decide(trace)
            if self.delay_s:
                await asyncio.sleep(self.delay_s)  # the receiver's work, not synchronisation
        finally:
            self.in_flight -= 1
        trace.status = status
        if isinstance(doc, dict):
            items = doc.get("batchItemFailures") or []
            trace.failed = tuple(int(i["itemIdentifier"].rsplit("/", 1)[1]) for i in items)
        trace.answered = next(self._seq)
        async with self.changed:
            self.traces.append(trace)
            self.changed.notify_all()
        if doc is None:
            return web.Response(status=status, headers=answer_headers)
        return web.json_response(doc, status=status, headers=answer_headers)

    async def until(self, what: Callable[[list[Traced]], bool], timeout: float = 30.0) -> None:
        async with asyncio.timeout(timeout), self.changed:
            await self.changed.wait_for(lambda: what(self.traces))

    def acked(self) -> set[tuple[int, int]]:
        return {(t.partition, o) for t in self.traces for o in t.acked}


def _records(
    headers: dict[str, str], body: bytes
) -> tuple[int, tuple[int, ...], tuple[str | None, ...]]:
    """The partition, offsets and keys of a binary-mode record or a CloudEvents batch."""
    if headers.get("content-type") == "application/cloudevents-batch+json":
        events = orjson.loads(body)
        ids = [e["id"].split("/") for e in events]
        keys = tuple(e.get("partitionkey") for e in events)
        return int(ids[0][1]), tuple(int(i[2]) for i in ids), keys
    _, partition, offset = headers["ce-id"].split("/")
    return int(partition), (int(offset),), (headers.get("ce-partitionkey"),)


@asynccontextmanager
async def serving(receiver: TracingReceiver) -> AsyncIterator[TracingReceiver]:
    app = web.Application()
    app.router.add_post("/hook", receiver.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    (port,) = {address[1] for address in runner.addresses}
    receiver.url = f"http://127.0.0.1:{port}/hook"
    try:
        yield receiver
    finally:
        await runner.cleanup()


def check(
    traces: list[Traced],
    produced: dict[tuple[int, int], str | None],
    ordering: str,
    max_in_flight: int,
    secret: str | None = None,
    dead_lettered: frozenset[tuple[int, int]] = frozenset(),
) -> None:
    """The checker. `produced`: every record, (partition, offset) -> key. Each was
    acknowledged or is in `dead_lettered`; a record's attempts all arrive after the final
    attempt of every earlier record it is ordered after was answered (its acknowledgement;
    for a dead-lettered record, its last attempt); at most `max_in_flight` requests of one
    partition at once (ordering `key` and `none`; `partition`: one)."""
    traces = sorted(traces, key=lambda t: t.arrived)
    final: dict[tuple[int, int], int] = {}  # record -> when it was done (answer sequence)
    for trace in traces:
        if secret is not None:
            Webhook(secret).verify(trace.body, trace.headers)
        for offset in trace.offsets:
            record = (trace.partition, offset)
            if record in dead_lettered:  # done after its last attempt
                final[record] = max(final.get(record, -1), trace.answered)
            elif offset in trace.acked:  # done at its first acknowledgement
                final[record] = min(final.get(record, trace.answered), trace.answered)
    missing = set(produced) - {(t.partition, o) for t in traces for o in t.acked}
    assert missing <= dead_lettered, f"never acknowledged: {sorted(missing - dead_lettered)}"
    extra = set(final) - set(produced)
    assert not extra, f"delivered but never produced: {sorted(extra)}"
    limit = 1 if ordering == "partition" else max_in_flight
    for trace in traces:
        same = [
            t
            for t in traces
            if t.partition == trace.partition and t.arrived < trace.arrived < t.answered
        ]
        assert len(same) + 1 <= limit, f"{len(same) + 1} requests in flight, limit {limit}"
        if ordering == "none":
            continue
        mine = set(trace.offsets)
        for (partition, offset), key in produced.items():
            if partition != trace.partition or offset in mine or offset > max(mine):
                continue
            if ordering == "key" and not any(
                key == k and offset < o for k, o in zip(trace.keys, trace.offsets, strict=True)
            ):
                continue
            done = final.get((partition, offset))
            assert done is not None and done < trace.arrived, (
                f"{trace.partition}/{trace.offsets} sent before {partition}/{offset} was done"
            )
