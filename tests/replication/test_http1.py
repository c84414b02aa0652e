"""The forwarding client (replication.http1) against a real aiohttp server: bodies by length,
by chunks and to the end, connections kept and reused, dropped when the server closes them,
a refused connection told apart from a call that may have been served, and a node that takes a
request and never answers bounded (ForwardClient: NodeTimedOut past the request's own wait)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from replication.errors import NodeTimedOut
from replication.forward_client import ForwardClient
from replication.http1 import ConnectFailed, Http1Pool

BIG = bytes(range(256)) * 1024  # 256 KiB, past one socket write
RELEASE = web.AppKey("release", asyncio.Event)


async def echo(request: web.Request) -> web.Response:
    body = await request.read()
    return web.Response(
        body=body,
        headers={"X-Method": request.method, "X-Key": request.headers.get("Idempotency-Key", "")},
    )


async def chunked(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse()
    response.enable_chunked_encoding()
    await response.prepare(request)
    for part in (b"one,", b"two,", b"three"):
        await response.write(part)
    await response.write_eof()
    return response


async def held(request: web.Request) -> web.Response:
    """Answers once the test lets it (`release`), as a paused node would after SIGCONT."""
    await request.app[RELEASE].wait()
    return web.Response(text="late")


async def after(request: web.Request) -> web.Response:
    """Answers after the delay the query asks for: a long-poll that waits its timeout_ms."""
    await asyncio.sleep(int(request.query["timeout_ms"]) / 1000)
    return web.Response(text="waited")


async def closing(request: web.Request) -> web.Response:
    return web.Response(text="bye", headers={"Connection": "close"})


async def empty(request: web.Request) -> web.Response:
    return web.Response(status=204)


@pytest.fixture
async def server() -> AsyncIterator[str]:
    app = web.Application()
    app[RELEASE] = asyncio.Event()
    app.router.add_route("*", "/echo", echo)
    app.router.add_get("/held", held)
    app.router.add_get("/after", after)
    app.router.add_get("/chunked", chunked)
    app.router.add_get("/closing", closing)
    app.router.add_get("/empty", empty)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    app[RELEASE].set()
    await runner.cleanup()


def _key(url: str) -> tuple[str, int]:
    return "127.0.0.1", int(url.rsplit(":", 1)[1])


async def test_bodies_headers_and_reuse(server: str) -> None:
    pool = Http1Pool()
    try:
        reply = await pool.request(
            server, "POST", "/echo?a=1&b=%2F", {"Idempotency-Key": "ké"}, BIG
        )
        assert reply.status == 200 and reply.body == BIG
        assert dict(reply.headers)["X-Key"] == "ké"
        (first,) = pool._idle[_key(server)]
        await pool.request(server, "GET", "/echo", {}, b"")
        assert pool._idle[_key(server)] == [first]  # kept alive and used again
        many = await asyncio.gather(
            *(pool.request(server, "GET", "/echo", {}, b"") for _ in range(20))
        )
        assert {r.status for r in many} == {200} and {r.body for r in many} == {b""}
        kept = len(pool._idle[_key(server)])
        assert (await pool.request(server, "GET", "/chunked", {}, b"")).body == b"one,two,three"
        assert (await pool.request(server, "GET", "/empty", {}, b"")).status == 204
        assert len(pool._idle[_key(server)]) == kept
        bye = await pool.request(server, "GET", "/closing", {}, b"")
        assert bye.body == b"bye" and len(pool._idle[_key(server)]) == kept - 1
    finally:
        await pool.close()


async def test_a_connection_the_server_closed_is_not_reused(server: str) -> None:
    pool = Http1Pool()
    try:
        await pool.request(server, "GET", "/echo", {}, b"")
        (kept,) = pool._idle[_key(server)]
        assert kept.transport is not None
        kept.transport.abort()  # as if the server had closed it while idle
        await asyncio.sleep(0)
        assert (await pool.request(server, "GET", "/echo", {}, b"x")).body == b"x"
    finally:
        await pool.close()


async def test_a_refused_connection_is_told_apart() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: connections are refused
        pool = Http1Pool(connect_timeout_s=2)
        with pytest.raises(ConnectFailed):
            await pool.request(f"http://127.0.0.1:{port}", "GET", "/", {}, b"")
        await pool.close()


async def test_an_answer_that_does_not_come_times_out_and_its_connection_is_dropped(
    server: str,
) -> None:
    pool = Http1Pool()
    try:
        with pytest.raises(TimeoutError):
            await pool.request(server, "GET", "/held", {}, b"", timeout_s=0.2)
        assert not pool._idle.get(_key(server))  # its answer may still come: never reused
        assert (await pool.request(server, "GET", "/echo", {}, b"x", timeout_s=5)).body == b"x"
    finally:
        await pool.close()


async def test_a_forwarded_call_is_bounded_past_its_own_wait(server: str) -> None:
    client = ForwardClient(0, answer_timeout_s=0.2)
    try:
        with pytest.raises(NodeTimedOut) as timed_out:
            await client.forward(server, "GET", "/held", {}, b"")
        assert timed_out.value.delivered  # it may have been served: not sent elsewhere
        assert "did not answer within 0.2 s" in str(timed_out.value)
        # A long-poll's own timeout_ms comes on top of the bound.
        answer = await client.forward(server, "GET", "/after?timeout_ms=500", {}, b"", 500)
        assert answer.status == 200 and answer.body == b"waited"
        with pytest.raises(NodeTimedOut):
            await client.forward(server, "GET", "/after?timeout_ms=500", {}, b"")
    finally:
        await client.close()
