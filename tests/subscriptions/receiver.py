"""A real HTTP receiver on loopback for push-subscription tests: it records every attempt
(arrival time, headers, body) and answers as its behaviour says; and the checker that holds
a run's attempts against what was produced and the subscription's policy."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web
from standardwebhooks.webhooks import Webhook


@dataclass(frozen=True)
class Attempt:
    at: float  # time.monotonic() on arrival
    headers: dict[str, str]
    body: bytes
    status: int  # what the receiver answered (0: it did not answer: a timeout)

    @property
    def ce_id(self) -> str:
        return self.headers.get("ce-id", "")

    @property
    def offset(self) -> int:
        return int(self.ce_id.rsplit("/", 1)[1])


# (attempt number of this webhook-id from 1, the webhook-id) -> (status, headers), or None to
# hang until the dispatcher's timeout
Behaviour = Callable[[int, str], tuple[int, dict[str, str]] | None]


def ok(n: int, message_id: str) -> tuple[int, dict[str, str]]:
    return 204, {}


@dataclass
class Receiver:
    """Answers each request by `behaviour(n)`, n the attempt number of its webhook-id."""

    behaviour: Behaviour = ok
    attempts: list[Attempt] = field(default_factory=list)
    tries: dict[str, int] = field(default_factory=dict)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    peers: set[tuple[str, int]] = field(default_factory=set)  # the connections requests came on
    url: str = ""
    # A 2xx's body and Content-Type, made from the request's (a reply subscription's replies)
    reply: Callable[[bytes], tuple[bytes, str]] | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if request.transport is not None:
            self.peers.add(request.transport.get_extra_info("peername"))
        key = request.headers.get("webhook-id", "")
        self.tries[key] = n = self.tries.get(key, 0) + 1
        answer = self.behaviour(n, key)
        headers = {k.lower(): v for k, v in request.headers.items()}
        status = 0 if answer is None else answer[0]
        async with self.changed:
            self.attempts.append(Attempt(time.monotonic(), headers, body, status))
            self.changed.notify_all()
        if answer is None:
            await asyncio.sleep(3600)
        assert answer is not None
        status, answered = answer
        if self.reply is not None and 200 <= status < 300:
            content, media = self.reply(body)
            return web.Response(status=status, headers=answered, body=content, content_type=media)
        return web.Response(status=status, headers=answered)

    async def until(self, what: Callable[[list[Attempt]], bool], timeout: float = 30.0) -> None:
        """Wait for the attempts to satisfy `what` (bounded)."""
        async with asyncio.timeout(timeout), self.changed:
            await self.changed.wait_for(lambda: what(self.attempts))

    def acked(self) -> list[Attempt]:
        return [a for a in self.attempts if 200 <= a.status < 300]


async def serve(receiver: Receiver, path: str = "/hook") -> web.AppRunner:
    """Run the receiver on a free loopback port; its URL is set on it."""
    app = web.Application()
    app.router.add_post(path, receiver.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    (port,) = {address[1] for address in runner.addresses}
    receiver.url = f"http://127.0.0.1:{port}{path}"
    return runner


def verify(secret: str, attempt: Attempt) -> Any:
    """The signature checked by the standardwebhooks package (raises if it does not hold)."""
    return Webhook(secret).verify(attempt.body, attempt.headers)


def checked_in_order(
    attempts: list[Attempt], offsets: list[int], secret: str
) -> dict[int, list[Attempt]]:
    """The checker, for one partition delivered one record per request: every offset was
    acknowledged, none out of order (an offset is attempted only after every earlier one was
    acknowledged), no offset attempted after its acknowledgement... except what a restart
    redelivers (callers bound that), ids stable, signatures valid. Returns each offset's
    attempts."""
    by_offset: dict[int, list[Attempt]] = {}
    acked: set[int] = set()
    for attempt in attempts:
        verify(secret, attempt)
        offset = attempt.offset
        assert attempt.headers["webhook-id"] == attempt.ce_id
        earlier = [o for o in offsets if o < offset]
        assert all(o in acked for o in earlier), f"offset {offset} sent before {earlier}"
        by_offset.setdefault(offset, []).append(attempt)
        if 200 <= attempt.status < 300:
            acked.add(offset)
    assert acked == set(offsets), sorted(set(offsets) - acked)
    return by_offset


def offsets_of(attempt: Attempt) -> tuple[int, list[int]]:
    """The partition and the offsets of a `format: json` delivery."""
    doc = orjson.loads(attempt.body)
    return int(doc["partition"]), [int(r["offset"]) for r in doc["records"]]


def checked_batches(
    attempts: list[Attempt], produced: dict[int, int], dead: dict[int, set[int]], secret: str
) -> dict[int, int]:
    """The checker for `format: json` batches over several partitions (`produced`: partition
    -> records, offsets from 0), through restarts and failovers: signatures valid; a batch is
    sent only once every earlier offset of its partition was settled (acknowledged, or
    refused with a 4xx and so dead-lettered) — a redelivery from the committed position
    included; every offset acknowledged or in `dead` (what the dead-letter topic holds), and
    every refused offset there. Returns each partition's count of offsets acknowledged more
    than once (callers bound it by the in-flight window)."""
    settled: dict[int, set[int]] = {p: set() for p in produced}
    acked: dict[int, dict[int, int]] = {p: {} for p in produced}
    refused: dict[int, set[int]] = {p: set() for p in produced}
    for attempt in attempts:
        verify(secret, attempt)
        partition, offsets = offsets_of(attempt)
        assert offsets == list(range(offsets[0], offsets[-1] + 1)), offsets
        missing = set(range(offsets[0])) - settled[partition]
        assert not missing, f"partition {partition}: {offsets} sent before {sorted(missing)}"
        if 200 <= attempt.status < 300:
            for offset in offsets:
                acked[partition][offset] = acked[partition].get(offset, 0) + 1
            settled[partition].update(offsets)
        elif 400 <= attempt.status < 500:
            refused[partition].update(offsets)
            settled[partition].update(offsets)
    for partition, count in produced.items():
        got = set(acked[partition]) | dead.get(partition, set())
        assert got == set(range(count)), (partition, sorted(set(range(count)) - got))
        assert refused[partition] <= dead.get(partition, set()), partition
    return {p: sum(n > 1 for n in acked[p].values()) for p in produced}
