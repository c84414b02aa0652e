"""A produce pipelined behind another on its keep-alive connection counts its wait from when
its bytes were read: while the admission's share is lowered (a standing queue), one that
waited past --admission-max-wait-ms is refused 503 at once; otherwise it is served as before."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web

from gateway.api.fast_routes import FastRoutes
from gateway.http.fast_path import FAST_PATH
from gateway.http.http2 import Http2Site
from gateway.settings import Settings
from tests.api.support import own_connections

TARGET_MS = 5
STALL_S = 0.03  # the first produce's take blocks the loop this long: the second waits behind
BODY = orjson.dumps({"records": [{"value": 1}]})
REQUEST = (
    b"POST /v1/topics/t/partitions/0/records?acks=1 HTTP/1.1\r\nHost: sluice\r\n"
    b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
)


@pytest.fixture
async def site(tmp_path: Path) -> AsyncIterator[Http2Site]:
    """A gateway in this process on the server's own HTTP/1.1 connections (the fast path's),
    with the admission's delay target and wait limit set; topic `t`."""
    settings = Settings(
        data_dir=tmp_path, admission_target_delay_ms=TARGET_MS, admission_max_wait_ms=TARGET_MS
    )
    async with own_connections(settings) as served:
        yield served


async def _two_pipelined(port: int, routes: FastRoutes, monkeypatch: Any) -> list[bytes]:
    """Two produces in one write; the first one's take stalls the loop once both are read.
    The two answers' status lines."""
    take = routes.take
    waits: list[float] = []  # what the connection told each take the request had waited

    def stalling(*args: Any) -> Any:
        waits.append(args[5] if len(args) > 5 else 0.0)
        taken = take(*args)
        if len(waits) == 1:
            time.sleep(STALL_S)
        return taken

    reader, writer = await asyncio.open_connection("127.0.0.1", port)

    async def answers(count: int) -> list[bytes]:
        statuses = []
        async with asyncio.timeout(30):
            for _ in range(count):
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                await reader.readexactly(length)
                statuses.append(head.split(b"\r\n")[0])
        return statuses

    try:
        writer.write(REQUEST)  # one first: the connection learns its head, and holds the next
        assert await answers(1) == [b"HTTP/1.1 200 OK"]
        monkeypatch.setattr(routes, "take", stalling)
        writer.write(REQUEST * 2)
        statuses = await answers(2)
    finally:
        writer.close()
    assert waits[0] < STALL_S <= waits[1], waits
    return statuses


@pytest.mark.parametrize("queue_stands", [False, True])
async def test_a_pipelined_produce_that_waited_past_the_limit_is_refused_while_a_queue_stands(
    site: Http2Site, monkeypatch: pytest.MonkeyPatch, queue_stands: bool
) -> None:
    runner = site.runner
    assert isinstance(runner, web.AppRunner)
    routes = runner.app[FAST_PATH]
    assert isinstance(routes, FastRoutes)
    admission = routes.admission
    # The share stays as set: the loop's delay probe would raise a lowered one back (or lower
    # it on a busy machine) if a millisecond passed between the test's requests.
    monkeypatch.setattr(admission, "observe_delay", lambda *probed: None)
    if queue_stands:
        admission.share = 0.99
        monkeypatch.setattr(admission, "_credit", 10.0)  # the share's own refusals owe none yet
    statuses = await _two_pipelined(site.port, routes, monkeypatch)
    assert statuses[0] == b"HTTP/1.1 200 OK"
    if queue_stands:
        assert statuses[1] == b"HTTP/1.1 503 Service Unavailable"
        assert admission.shed_waited == admission.shed == 1
    else:
        assert statuses[1] == b"HTTP/1.1 200 OK"
        assert admission.shed == 0
    assert admission.inflight == 0
