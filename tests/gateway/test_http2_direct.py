"""Direct answers on HTTP/2: a stream a subclass of H2Protocol serves itself (the fast routes do,
in gateway.http.connections) is answered without a task, released exactly once whatever happens
first, and waited for by a graceful shutdown until its answer is out."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from aiohttp.http import RawRequestMessage
from h2.errors import ErrorCodes
from hyperframe.frame import DataFrame, GoAwayFrame, RstStreamFrame

from gateway.http.fast_path import Answer as DirectAnswer
from gateway.http.h2_stream import Headers
from gateway.http.http2 import H2Protocol, Http2Site, start_server
from tests.gateway.test_http2 import TIMEOUT, RawH2, body_of, ends


@dataclass
class Answer:
    body: bytes
    status: int = 200
    closes: bool = False

    def http1(self) -> bytes:
        return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(self.body), self.body)

    def h2_headers(self) -> Headers:
        return [(b":status", b"200"), (b"content-length", b"%d" % len(self.body))]


@dataclass
class Directly:
    """What the test protocol was asked to serve, and how it answers: `answered` callbacks
    and the futures it handed back, by body."""

    started: asyncio.Queue[tuple[bytes, Callable[[DirectAnswer | None], None]]] = field(
        default_factory=asyncio.Queue
    )
    futures: dict[bytes, asyncio.Future[Any]] = field(default_factory=dict)
    protocols: list[H2Protocol] = field(default_factory=list)


DIRECTLY = Directly()


class DirectProtocol(H2Protocol):
    """Serves POST /direct itself: the test answers through the callback it records."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        DIRECTLY.protocols.append(self)
        super().connection_made(transport)

    def may_answer_directly(self, message: RawRequestMessage) -> bool:
        return message.path == "/direct"

    def start_directly(
        self,
        message: RawRequestMessage,
        body: bytes,
        answered: Callable[[DirectAnswer | None], None],
    ) -> asyncio.Future[Any] | DirectAnswer | None:
        if body == b"decline":
            return None
        if body == b"refuse":
            return Answer(b"made already")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        future.add_done_callback(lambda f: answered(None) if f.cancelled() else None)
        DIRECTLY.futures[body] = future
        DIRECTLY.started.put_nowait((body, answered))
        return future


async def echo(request: web.Request) -> web.Response:
    return web.json_response({"read": (await request.read()).decode()})


@pytest.fixture
async def site() -> AsyncIterator[Http2Site]:
    global DIRECTLY
    DIRECTLY = Directly()
    app = web.Application()
    app.router.add_post("/direct", echo)
    served = await start_server(app, "127.0.0.1", 0, http2=DirectProtocol, shutdown_timeout=10)
    yield served
    await served.runner.cleanup()


def post(client: RawH2, stream_id: int, body: bytes) -> list[Any]:
    return [
        client.headers(stream_id, "/direct", "POST", end_stream=False),
        DataFrame(stream_id, body, flags=("END_STREAM",)),
    ]


async def test_a_direct_answer_takes_no_task_and_releases_its_stream(site: Http2Site) -> None:
    client = await RawH2.connect(site.port)
    client.write(*post(client, 1, b"one"))
    body, answered = await asyncio.wait_for(DIRECTLY.started.get(), TIMEOUT)
    (protocol,) = DIRECTLY.protocols
    stream = protocol._streams[1]
    assert stream.task is DIRECTLY.futures[b"one"]  # the subclass's future: no task
    answered(Answer(b"answer to " + body))
    DIRECTLY.futures[body].set_result(None)
    frames = await client.until(ends(1))
    assert client.status(frames, 1) == 200 and body_of(frames, 1) == b"answer to one"
    assert not protocol._streams
    await client.close()


async def test_an_answer_made_already_goes_out_at_once_with_no_future(site: Http2Site) -> None:
    """A refusal is answered as its request is read: no future, no callback, its stream
    released before the read's turn ends."""
    client = await RawH2.connect(site.port)
    client.write(*post(client, 1, b"refuse"))
    frames = await client.until(ends(1))
    assert client.status(frames, 1) == 200 and body_of(frames, 1) == b"made already"
    (protocol,) = DIRECTLY.protocols
    assert not protocol._streams and not DIRECTLY.futures and DIRECTLY.started.empty()
    await client.close()


async def test_a_declined_stream_goes_to_the_application_with_its_body(site: Http2Site) -> None:
    client = await RawH2.connect(site.port)
    client.write(*post(client, 1, b"decline"))
    frames = await client.until(ends(1))
    assert client.status(frames, 1) == 200
    assert json.loads(body_of(frames, 1)) == {"read": "decline"}
    await client.close()


async def test_the_answers_of_one_turn_go_out_together_and_one_failing_flush_stalls_none(
    site: Http2Site,
) -> None:
    """Connections answered in one loop turn are flushed by one callback at its end; a
    connection whose flush fails is reported to the loop, and the others' answers still go."""
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: reported.append(context))
    first, second = await RawH2.connect(site.port), await RawH2.connect(site.port)
    first.write(*post(first, 1, b"first"))
    second.write(*post(second, 1, b"second"))
    started = dict([await asyncio.wait_for(DIRECTLY.started.get(), TIMEOUT) for _ in range(2)])
    failing = next(
        p for p in DIRECTLY.protocols if p._streams[1].task is DIRECTLY.futures[b"first"]
    )

    def fail() -> None:
        raise RuntimeError("flush failed")

    failing._flush = fail  # type: ignore[method-assign]
    scheduled: list[tuple[Any, ...]] = []
    call_soon = loop.call_soon

    def counted(*args: Any, **kwargs: Any) -> asyncio.Handle:
        scheduled.append(args)
        return call_soon(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loop, "call_soon", counted)
        started[b"first"](Answer(b"to first"))
        started[b"second"](Answer(b"to second"))
    assert len(scheduled) == 1  # one flush for the turn, not one a connection
    frames = await second.until(ends(1))
    assert body_of(frames, 1) == b"to second"
    assert [str(c["exception"]) for c in reported] == ["flush failed"]
    loop.set_exception_handler(None)
    await first.close()
    await second.close()


async def test_a_stream_reset_before_it_began_is_released(site: Http2Site) -> None:
    client = await RawH2.connect(site.port)
    client.write(
        client.headers(1, "/direct", "POST", end_stream=False),
        RstStreamFrame(1, error_code=ErrorCodes.CANCEL),
        *post(client, 3, b"after"),
    )
    body, answered = await asyncio.wait_for(DIRECTLY.started.get(), TIMEOUT)
    assert body == b"after"  # stream 1 never began
    (protocol,) = DIRECTLY.protocols
    assert list(protocol._streams) == [3]
    answered(Answer(b"ok"))
    assert client.status(await client.until(ends(3)), 3) == 200
    await client.close()


async def test_a_reset_cancels_a_pending_direct_answer(site: Http2Site) -> None:
    client = await RawH2.connect(site.port)
    client.write(*post(client, 1, b"slow"))
    _, answered = await asyncio.wait_for(DIRECTLY.started.get(), TIMEOUT)
    (protocol,) = DIRECTLY.protocols
    client.write(RstStreamFrame(1, error_code=ErrorCodes.CANCEL))
    future = DIRECTLY.futures[b"slow"]
    await asyncio.wait_for(asyncio.wait([future]), TIMEOUT)
    assert future.cancelled()
    await asyncio.sleep(0)  # the future's callbacks: answered(None) released the stream
    assert not protocol._streams
    answered(Answer(b"late"))  # an answer after the reset goes nowhere
    await client.close()


async def test_a_graceful_shutdown_waits_for_a_direct_answer_made_after_its_future(
    site: Http2Site,
) -> None:
    """The future may be done before the answer is made (a produce whose write landed waits
    for an fsync): the shutdown waits for the stream, not the future."""
    client = await RawH2.connect(site.port)
    client.write(*post(client, 1, b"flushed"))
    _, answered = await asyncio.wait_for(DIRECTLY.started.get(), TIMEOUT)
    DIRECTLY.futures[b"flushed"].set_result(None)
    cleanup = asyncio.create_task(site.runner.cleanup())
    frames = await client.until(lambda f: isinstance(f, GoAwayFrame))
    assert not cleanup.done()
    answered(Answer(b"after the fsync"))
    frames = await client.until(ends(1))
    assert body_of(frames, 1) == b"after the fsync"
    await asyncio.wait_for(cleanup, TIMEOUT)
    await client.close()


async def test_a_shutdown_ends_when_the_client_of_a_pending_answer_hangs_up() -> None:
    """The stream is released when its connection goes (its future cancelled): the shutdown
    ends then, not at its timeout (60 s here, past the test's own limit)."""
    global DIRECTLY
    DIRECTLY = Directly()
    app = web.Application()
    site = await start_server(app, "127.0.0.1", 0, http2=DirectProtocol, shutdown_timeout=60)
    client = await RawH2.connect(site.port)
    client.write(*post(client, 1, b"pending"))
    await asyncio.wait_for(DIRECTLY.started.get(), TIMEOUT)
    cleanup = asyncio.create_task(site.runner.cleanup())
    await client.until(lambda f: isinstance(f, GoAwayFrame))
    await client.close()
    await asyncio.wait_for(cleanup, TIMEOUT)
    assert DIRECTLY.futures[b"pending"].cancelled()
