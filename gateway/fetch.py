"""Long-poll fetch: read whole batches, or park until min_bytes arrive or the wait ends; the
limits every fetch (a partition's or a group member's) takes from its query."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from aiohttp import web

from engine import batch as fmt
from engine.log import PartitionLog, ReadResult
from engine.notify import ChangeNotifier
from gateway.params import int_param
from gateway.problems import Problem
from gateway.settings import Settings


@dataclass(frozen=True)
class FetchLimits:
    max_records: int
    max_bytes: int
    min_bytes: int
    timeout_ms: int


def fetch_limits(request: web.Request, settings: Settings) -> FetchLimits:
    """max_records, max_bytes, min_bytes and timeout_ms, with Kafka's defaults, bounded."""
    return FetchLimits(
        max_records=int_param(
            request, "max_records", settings.default_fetch_records, 1, settings.max_fetch_records
        ),
        max_bytes=int_param(
            request, "max_bytes", settings.default_fetch_bytes, 1, settings.max_fetch_bytes
        ),
        min_bytes=int_param(request, "min_bytes", 1, 0, settings.max_fetch_bytes),
        timeout_ms=int_param(
            request, "timeout_ms", settings.default_fetch_wait_ms, 0, settings.max_wait_ms
        ),
    )


def refuse_when_full(notifier: ChangeNotifier, settings: Settings) -> None:
    """503 with Retry-After once max_parked_fetches long-polls are parked on this node."""
    if notifier.parked >= settings.max_parked_fetches:
        raise Problem(
            503,
            "TOO_MANY_WAITING_FETCHES",
            "too many long-polls are parked on this node; retry shortly",
            headers={"Retry-After": "1"},
        )


async def long_poll(
    log: PartitionLog,
    notifier: ChangeNotifier,
    offset: int,
    max_bytes: int,
    min_bytes: int,
    timeout_ms: int,
    max_records: int | None = None,
) -> ReadResult:
    """Read from `offset`; with less than `min_bytes` committed, wait up to `timeout_ms`.

    A parked request is one future (no CPU); a client that goes away cancels it.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_ms / 1000
    while True:
        result = log.read(offset, max_bytes, max_records=max_records)
        remaining = deadline - loop.time()
        if len(result.data) >= min_bytes or remaining <= 0 or notifier.closing:
            return result
        if max_records is not None and _covers(result.data, offset + max_records):
            return result
        await notifier.wait(log, remaining)


def _covers(data: memoryview, end_offset: int) -> bool:
    """Whether the batches reach `end_offset`: all the records the caller asked for are there."""
    headers = fmt.scan(data, check_crc=False).headers
    return bool(headers) and headers[-1][1].next_offset >= end_offset
