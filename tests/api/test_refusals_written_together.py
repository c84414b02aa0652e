"""Produces pipelined on one keep-alive connection and refused in one pass (the admission's
503) are written in one write at the turn's end, with the turn's other answers, in order: in a
flood a write each, waking the client each time, cost more than the refusals' own work. A
client that does not read still holds back its next requests, at most `_MADE_TOGETHER` answers
past the transport's limit."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.http import connections
from gateway.http.connections import Http1Connection
from gateway.http.fast_path import FAST_PATH
from gateway.http.http2 import Http2Site
from gateway.settings import Settings
from tests.api.support import kept_connections, own_connections

BODY = orjson.dumps({"records": [{"value": 1}]})
REQUEST = (
    b"POST /v1/topics/t/partitions/0/records HTTP/1.1\r\nHost: sluice\r\n"
    b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
)
STATUS_503 = b"HTTP/1.1 503 Service Unavailable\r\n"


class _Transport:
    """Stands in for the socket once the connection is set up: records each write, and
    tells the connection its buffer is full after `pause_after` writes."""

    def __init__(self, connection: Http1Connection, pause_after: int | None = None) -> None:
        self.connection, self.pause_after = connection, pause_after
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)
        if self.pause_after is not None and len(self.writes) == self.pause_after:
            self.connection.pause_writing()

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def close(self) -> None:
        pass


@pytest.fixture
async def site(tmp_path: Path) -> AsyncIterator[tuple[Http2Site, list[Http1Connection]]]:
    """A gateway in this process on its own HTTP/1.1 connections, refusing every produce (at
    most none in progress); topic `t`; the connections it accepts."""
    kept, accepted = kept_connections()
    settings = Settings(data_dir=tmp_path, admission_max_inflight=0)
    async with own_connections(settings, kept) as served:
        yield served, accepted


async def _refusing_connection(
    served: Http2Site, accepted: list[Http1Connection]
) -> tuple[Http1Connection, asyncio.StreamWriter]:
    """A connection whose first produce was refused over the socket (its head now known)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(REQUEST)
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(STATUS_503)
    return accepted[-1], writer


@contextlib.contextmanager
def _recorded(
    connection: Http1Connection, writer: asyncio.StreamWriter, pause_after: int | None = None
) -> Iterator[_Transport]:
    """The connection writes to a `_Transport` meanwhile; then its socket again, closed."""
    transport = _Transport(connection, pause_after)
    real, connection.transport = connection.transport, transport  # type: ignore[assignment]
    try:
        yield transport
    finally:
        connection.transport = real
        writer.close()


async def _written(transport: _Transport, count: int) -> None:
    """Until the transport has had `count` writes (the turn's end, a group commit's pass)."""
    async with asyncio.timeout(10):
        while len(transport.writes) < count:
            await asyncio.sleep(0)


async def test_refusals_of_one_pass_go_out_in_one_write_at_the_turns_end(
    site: tuple[Http2Site, list[Http1Connection]],
) -> None:
    """Refused as they are read, written with the turn's other answers, in order."""
    served, accepted = site
    connection, writer = await _refusing_connection(served, accepted)
    routes = served.runner.app[FAST_PATH]  # type: ignore[attr-defined]
    answers = connections.turn_answers(asyncio.get_running_loop())
    with _recorded(connection, writer) as transport:
        connection.data_received(REQUEST * 3)
        assert transport.writes == []  # posted, not written, while the turn goes on
        assert connection.busy()  # the next requests wait for the write
        answers.write_now()
        assert len(transport.writes) == 1
        assert transport.writes[0].count(STATUS_503) == 3
        assert transport.writes[0].startswith(STATUS_503)
        assert not connection.busy()
        connection.data_received(REQUEST)
        answers.write_now()
        assert len(transport.writes) == 2 and transport.writes[1].count(STATUS_503) == 1
        assert routes.admission.shed == 5


async def test_refusals_and_an_admitted_produce_of_one_read_are_answered_in_order(
    site: tuple[Http2Site, list[Http1Connection]],
) -> None:
    """Refusals made before an admitted produce in the same read are written before its
    answer, which waits for the group commit; the request behind it follows its write."""
    served, accepted = site
    connection, writer = await _refusing_connection(served, accepted)
    admission = served.runner.app[FAST_PATH].admission  # type: ignore[attr-defined]
    # The delay probe off: woken by the produces, it would raise the share back towards 1
    # between the admitted produce's write and the next request's turn on a slow machine.
    admission.target_s = 0
    admission.stop()
    admission.max_inflight, admission.share = 10, 0.5  # every other produce: refused, admitted
    with _recorded(connection, writer) as transport:
        connection.data_received(REQUEST * 3)
        await _written(transport, 3)
        statuses = [write[:12] for write in transport.writes]
        assert statuses == [STATUS_503[:12], b"HTTP/1.1 200", STATUS_503[:12]]
        assert b'"base_offset":0' in transport.writes[1]  # the one produce appended
        assert admission.admitted == 1


async def test_a_new_head_behind_refusals_is_answered_after_them(
    site: tuple[Http2Site, list[Http1Connection]],
) -> None:
    """A request whose head is new (parsed by aiohttp) pipelined behind refusals of known heads
    waits for their write: its answer, refused in another dialect, comes after theirs."""
    served, accepted = site
    connection, writer = await _refusing_connection(served, accepted)
    v2 = orjson.dumps({"records": [{"value": 1}]})
    rest_proxy = (
        b"POST /topics/t HTTP/1.1\r\nHost: sluice\r\n"
        b"Content-Type: application/vnd.kafka.json.v2+json\r\nContent-Length: %d\r\n\r\n%s"
        % (len(v2), v2)
    )
    with _recorded(connection, writer) as transport:
        connection.data_received(REQUEST * 2 + rest_proxy)
        await _written(transport, 2)
        first, second = transport.writes
        assert first.count(STATUS_503) == 2 and b"SERVER_OVERLOADED" in first
        assert second.startswith(STATUS_503) and b'"error_code":50003' in second


async def test_a_client_that_does_not_read_holds_back_the_rest(
    site: tuple[Http2Site, list[Http1Connection]],
) -> None:
    """A pass stops after `_MADE_TOGETHER` answers; past the transport's limit what follows
    waits, unread, until the client has taken them."""
    served, accepted = site
    connection, writer = await _refusing_connection(served, accepted)
    together = connections._MADE_TOGETHER
    answers = connections.turn_answers(asyncio.get_running_loop())
    with _recorded(connection, writer, pause_after=1) as transport:
        connection.data_received(REQUEST * (together + 5))
        answers.write_now()
        assert len(transport.writes) == 1
        assert transport.writes[0].count(STATUS_503) == together
        draining = connection._fast_task
        assert isinstance(draining, asyncio.Task)  # waiting for the client to read
        connection.resume_writing()
        async with asyncio.timeout(10):
            await draining
        answers.write_now()
        assert len(transport.writes) == 2
        assert transport.writes[1].count(STATUS_503) == 5


async def test_a_connection_aiohttp_parses_has_its_refusals_written_in_order(
    site: tuple[Http2Site, list[Http1Connection]],
) -> None:
    """A connection aiohttp's parser serves (its first request one the fast routes leave to
    the Application) has its queued produces refused together, written in order in one write
    with the turn's other answers."""
    served, accepted = site
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: sluice\r\n\r\n")
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    connection = accepted[-1]
    async with asyncio.timeout(10):
        while connection.loop_waiter is None:  # aiohttp's loop waits for the next request
            await asyncio.sleep(0)
    assert connection._unparsed is None  # the parser keeps the connection
    with _recorded(connection, writer) as transport:
        connection.data_received(REQUEST * 3)
        assert transport.writes == []
        connections.turn_answers(asyncio.get_running_loop()).write_now()
        assert [w.count(STATUS_503) for w in transport.writes] == [3]
        assert transport.writes[0].startswith(STATUS_503)
        assert connection._fast_task is None and not connection.request_queue


async def test_a_request_the_fast_routes_leave_behind_queued_refusals_follows_them(
    site: tuple[Http2Site, list[Http1Connection]],
) -> None:
    """On a connection aiohttp's parser serves, a request the fast routes leave to the
    Application, queued behind refused produces, is answered by aiohttp's loop after their
    write."""
    served, accepted = site
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    healthz = b"GET /healthz HTTP/1.1\r\nHost: sluice\r\n\r\n"
    writer.write(healthz)
    assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 ")
    connection = accepted[-1]
    async with asyncio.timeout(10):
        while connection.loop_waiter is None:
            await asyncio.sleep(0)
    with _recorded(connection, writer) as transport:
        connection.data_received(REQUEST * 2 + healthz)
        waiter = connection.loop_waiter
        assert waiter is not None and not waiter.done()  # it waits for the refusals' write
        connections.turn_answers(asyncio.get_running_loop()).write_now()
        assert [w.count(STATUS_503) for w in transport.writes] == [2]
        await _written(transport, 2)
        assert transport.writes[1].startswith(b"HTTP/1.1 200 ")


async def test_a_connection_whose_new_head_was_refused_is_held_back_again(
    site: tuple[Http2Site, list[Http1Connection]],
) -> None:
    """A produce whose head no connection sent before goes through aiohttp's parser; refused,
    its head is remembered and the connection's next requests are held back from the parser,
    as after an admitted one."""
    served, accepted = site
    new_head = REQUEST.replace(b"Host: sluice\r\n", b"Host: sluice\r\nX-Refused-First: 1\r\n")
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(new_head)
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(STATUS_503)
    connection = accepted[-1]
    assert connection._unparsed == b""
    assert new_head[: new_head.index(b"\r\n\r\n") + 4] in connections._KNOWN_HEADS
    writer.close()
