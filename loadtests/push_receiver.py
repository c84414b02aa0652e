"""The endpoint of `loadtests.subscriptions_bench`: a process of its own that answers every POST
with 204 at once and counts what arrived, read from the request's headers only (no body is
parsed): records from `webhook-id` (`topic/partition/offset` for one record,
`topic/partition/first-last` for a batch), and for a single-record CloudEvent the delay from
its `ce-time` (the record's timestamp) to the arrival.

    python -m loadtests.push_receiver     # prints "listening on PORT" once it accepts

`GET /stats` answers the counts (`first_at` and `last_at` are CLOCK_MONOTONIC seconds, which
every process of the machine shares); `POST /reset` zeroes them.
"""

from __future__ import annotations

import asyncio
import datetime
import time

import orjson
import uvloop
from aiohttp import web

MAX_LATENCIES = 500_000  # delays kept for the percentiles; later arrivals are counted only


class Counts:
    """What arrived since the last reset."""

    def __init__(self) -> None:
        self.requests = 0
        self.records = 0
        self.first_at: float | None = None
        self.last_at: float | None = None
        self.latencies_ms: list[float] = []

    def arrived(self, message_id: str, ce_time: str | None) -> None:
        now = time.monotonic()
        if self.first_at is None:
            self.first_at = now
        self.last_at = now
        self.requests += 1
        self.records += records_in(message_id)
        if ce_time is not None and len(self.latencies_ms) < MAX_LATENCIES:
            sent = datetime.datetime.fromisoformat(ce_time).timestamp()
            self.latencies_ms.append((time.time() - sent) * 1000)


def records_in(message_id: str) -> int:
    """How many records a `webhook-id` names: `first-last` a batch's, an offset one."""
    first, sep, last = message_id.rpartition("/")[2].partition("-")
    if not sep:
        return 1
    return int(last) - int(first) + 1


def app() -> web.Application:
    counts = Counts()

    async def hook(request: web.Request) -> web.Response:
        await request.read()
        counts.arrived(request.headers.get("webhook-id", "-/0"), request.headers.get("ce-time"))
        return web.Response(status=204)

    async def stats(request: web.Request) -> web.Response:
        doc = {
            "requests": counts.requests,
            "records": counts.records,
            "first_at": counts.first_at,
            "last_at": counts.last_at,
            "latencies_ms": counts.latencies_ms if "latencies" in request.query else [],
        }
        return web.Response(body=orjson.dumps(doc), content_type="application/json")

    async def reset(request: web.Request) -> web.Response:
        nonlocal counts
        counts = Counts()
        return web.Response(status=204)

    application = web.Application(client_max_size=64 * 1024 * 1024)
    application.router.add_post("/hook", hook)
    application.router.add_get("/stats", stats)
    application.router.add_post("/reset", reset)
    return application


async def serve() -> None:
    runner = web.AppRunner(app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
    await site.start()
    (port,) = {address[1] for address in runner.addresses}
    print(f"listening on {port}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    uvloop.run(serve())
