"""HTTP/2 requests whose whole body comes in the read of their header block (a one-record
produce): the session raises one REQUEST_WITH_BODY event for them, and the connection serves,
refuses and gives back window for them exactly as for a body that comes in a read of its own
(a REQUEST event, then DATA). Driven in memory with each session, then on a real gateway."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.http import RawRequestMessage
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.events import (
    DataReceived,
    Event,
    PingAckReceived,
    RemoteSettingsChanged,
    ResponseReceived,
    StreamEnded,
    StreamReset,
)

from gateway.app import build_app
from gateway.http import h2_session, http2
from gateway.http.connections import Http1Connection, Http2Connection
from gateway.http.fast_path import Ready
from gateway.http.h2_session import (
    DATA,
    REQUEST,
    REQUEST_WITH_BODY,
    NgH2Session,
    SessionLike,
)
from gateway.http.h2_stream import Headers
from gateway.http.http2 import H2Limits, H2Protocol, Http2Site, start_server
from gateway.settings import Settings
from tests.gateway.test_http2_direct import Answer
from tests.memory_transport import MemoryTransport

TIMEOUT = 30.0
# Windows of the default size: twenty 10 KB bodies need the connection's back three times.
SMALL_WINDOWS = H2Limits(initial_window_size=65535, connection_window_size=65535)


@pytest.fixture(params=["native", "ngh2"])
def make(request: pytest.FixtureRequest) -> Callable[..., SessionLike]:
    """Each HTTP/2 session: ours over libnghttp2, and ngh2's (the fallback)."""
    if request.param == "ngh2":
        return NgH2Session
    if not h2_session.native:
        pytest.skip("gateway.http._h2session is not built")
    return h2_session.Session


class Spy:
    """A session that records the kinds of the events it raised on receiving, and the window
    given back (amount, stream), in order. One that `splits` hands each REQUEST_WITH_BODY on
    as the REQUEST and DATA events it stands for."""

    def __init__(self, session: SessionLike, splits: bool) -> None:
        self._session = session
        self._splits = splits
        self.kinds: list[int] = []
        self.acked: list[tuple[int, int]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    def receive(self, data: bytes, /) -> list[Any]:
        events = self._session.receive(data)
        self.kinds += [event[0] for event in events]
        if not self._splits:
            return events
        handed: list[Any] = []
        for kind, stream_id, a, b in events:
            if kind == REQUEST_WITH_BODY:
                handed += [(REQUEST, stream_id, a, False), (DATA, stream_id, b, True)]
            else:
                handed.append((kind, stream_id, a, b))
        return handed

    def acknowledge_received_data(self, amount: int, stream_id: int, /) -> None:
        self.acked.append((amount, stream_id))
        self._session.acknowledge_received_data(amount, stream_id)


class Spies(list[Spy]):
    """The spied sessions of the connections made, in their order; new ones split as
    `splitting` says."""

    splitting = False


@pytest.fixture
def spies(make: Callable[..., SessionLike], monkeypatch: pytest.MonkeyPatch) -> Spies:
    """The spied sessions of the connections made from here on."""
    made = Spies()

    def spied(**limits: int) -> Spy:
        made.append(Spy(make(**limits), made.splitting))
        return made[-1]

    monkeypatch.setattr(http2, "Session", spied)
    return made


def produce_fields(path: bytes, size: int, content_type: bytes = b"application/json") -> Headers:
    return [(b":method", b"POST"), (b":scheme", b"http"), (b":authority", b"x"),
            (b":path", path), (b"content-type", content_type),
            (b"content-length", b"%d" % size)]  # fmt: skip


# -- in memory ----------------------------------------------------------------------------------


class _Direct(H2Protocol):
    """Answers POST /direct itself, in the next turn, with its body's size; a body that
    begins with `decline` goes to the Application."""

    def may_answer_directly(self, message: RawRequestMessage) -> bool:
        return message.path == "/direct"

    def start_directly(
        self, message: RawRequestMessage, body: bytes, answered: Ready
    ) -> asyncio.Future[Any] | None:
        if body.startswith(b"decline"):
            return None
        future = self.event_loop.create_future()
        future.set_result(None)
        self.event_loop.call_soon(answered, Answer(b"direct %d" % len(body)))
        return future


async def _read_all(request: web.BaseRequest) -> web.Response:
    return web.Response(body=b"application %d" % len(await request.read()))


async def serve_one(
    spies: Spies, path: bytes, body: bytes, *, split: bool, goaway: bool, old: bool = False
) -> tuple[tuple[Any, ...], Spy]:
    """One request with `body` on a fresh connection, its body in the read of its header
    block or (`split`) in a read of its own; after our GOAWAY if `goaway`; through a session
    that hands over no REQUEST_WITH_BODY if `old`. How it was answered (status and body, or
    the reset's code) once it ended, and the connection's session."""
    spies.splitting = old
    server = web.Server(_read_all, handler_cancellation=True)
    protocol = _Direct(server, loop=asyncio.get_running_loop(), access_log=None, limits=H2Limits())
    transport = MemoryTransport(asyncio.get_running_loop(), protocol)
    protocol.connection_made(transport)
    client = H2Connection(H2Configuration(client_side=True, header_encoding=None))
    client.initiate_connection()
    protocol.data_received(client.data_to_send())
    client.receive_data(transport.take())
    if goaway:
        protocol._send_goaway()
        transport.take()  # the client sends before it sees it
    client.send_headers(1, produce_fields(path, len(body)))
    if split:
        protocol.data_received(client.data_to_send())
    client.send_data(1, body, end_stream=True)
    protocol.data_received(client.data_to_send())
    events: list[Event] = []
    for _ in range(100):
        await asyncio.sleep(0)
        events += client.receive_data(transport.take())
        ended = [e for e in events if isinstance(e, StreamEnded | StreamReset)]
        if ended and not protocol._streams:
            break
    assert not protocol._streams, "the stream was not released"
    reset = [e.error_code for e in events if isinstance(e, StreamReset)]
    if reset:
        outcome: tuple[Any, ...] = ("reset", *reset)
    else:
        (response,) = [e for e in events if isinstance(e, ResponseReceived)]
        answer = b"".join(e.data for e in events if isinstance(e, DataReceived))
        outcome = (dict(response.headers)[b":status"], answer)
    transport.close()
    await asyncio.sleep(0)
    return outcome, spies[-1]


BODY = b'{"records":[{"value":"%s"}]}' % (b"v" * 5000)
DIRECT, APPLICATION = (b"200", b"direct %d" % len(BODY)), (b"200", b"application %d" % len(BODY))
EMPTY, DECLINED = (b"200", b"application 0"), (b"200", b"application 5033")
REFUSED = ("reset", ErrorCodes.REFUSED_STREAM)
# (path, body, goaway): what answers it whole in a read, and in two (a direct answer's body
# not whole when its stream begins goes to the Application).
CASES: dict[str, tuple[tuple[bytes, bytes, bool], tuple[Any, ...], tuple[Any, ...]]] = {
    "direct": ((b"/direct", BODY, False), DIRECT, APPLICATION),
    "empty-direct": ((b"/direct", b"", False), (b"200", b"direct 0"), EMPTY),
    "declined": ((b"/direct", b"decline" + BODY, False), DECLINED, DECLINED),
    "application": ((b"/app", BODY, False), APPLICATION, APPLICATION),
    "empty-application": ((b"/app", b"", False), EMPTY, EMPTY),
    "refused": ((b"/direct", BODY, True), REFUSED, REFUSED),
}
BODY_EVENTS = (REQUEST, REQUEST_WITH_BODY, DATA)


@pytest.mark.parametrize("case", list(CASES))
async def test_a_body_with_its_request_is_served_and_acknowledged_as_before(
    spies: Spies, case: str
) -> None:
    """Answered directly, declined to the Application, read by the Application, refused
    after our GOAWAY: a body in the read of its request (one event) is answered, and its
    window given back, exactly as when it was a REQUEST and a DATA event; all of it. A body
    in a read of its own is still a REQUEST and a DATA event, its window given back whole
    (but for a stream reset by then, whose DATA libnghttp2 discards, and accounts, itself)."""
    (path, body, goaway), whole_answer, apart_answer = CASES[case]
    whole, whole_spy = await serve_one(spies, path, body, split=False, goaway=goaway)
    before, before_spy = await serve_one(spies, path, body, split=False, goaway=goaway, old=True)
    assert whole == before == whole_answer
    assert [k for k in whole_spy.kinds if k in BODY_EVENTS] == [REQUEST_WITH_BODY]
    assert whole_spy.acked == before_spy.acked
    assert sum(amount for amount, _ in whole_spy.acked) == len(body)
    apart, apart_spy = await serve_one(spies, path, body, split=True, goaway=goaway)
    assert apart == apart_answer
    kinds = [k for k in apart_spy.kinds if k in BODY_EVENTS]
    assert kinds == ([REQUEST] if goaway else [REQUEST, DATA])
    assert sum(amount for amount, _ in apart_spy.acked) == (0 if goaway else len(body))


# -- on a real gateway ------------------------------------------------------------------------


@pytest.fixture
async def gateway(tmp_path: Path, spies: Spies) -> AsyncIterator[Http2Site]:
    """A gateway in this process, with its own connections (the fast routes') and receive
    windows of HTTP/2's default size; topic `t`."""
    app = build_app(Settings(data_dir=tmp_path, admission_target_delay_ms=0))
    site = await start_server(
        app,
        "127.0.0.1",
        0,
        limits=SMALL_WINDOWS,
        http1=partial(Http1Connection, header_timeout=5.0, app=app),
        http2=partial(Http2Connection, app=app),
        shutdown_timeout=10,
    )
    try:
        client = await H2Client.connect(site.port)
        body = b'{"name":"t"}'
        status, _ = await client.request(produce_fields(b"/v1/topics", len(body)), body)
        assert status == b"201"
        await client.close()
        yield site
    finally:
        await site.runner.cleanup()


class H2Client:
    """An h2c client (python-hyper's h2) over a socket."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.conn = H2Connection(H2Configuration(client_side=True, header_encoding=None))
        self.events: list[Event] = []

    @classmethod
    async def connect(cls, port: int) -> H2Client:
        client = cls(*await asyncio.open_connection("127.0.0.1", port))
        client.conn.initiate_connection()
        client.flush()
        await client.until(lambda e: isinstance(e, RemoteSettingsChanged))
        return client

    def flush(self) -> None:
        self.writer.write(self.conn.data_to_send())

    async def until(self, done: Callable[[Event], bool]) -> list[Event]:
        """The events up to the first that is `done` (the rest kept for the next call); the
        answers' bytes acknowledged as they come."""
        while True:
            for at, event in enumerate(self.events):
                if done(event):
                    taken, self.events = self.events[: at + 1], self.events[at + 1 :]
                    return taken
            data = await asyncio.wait_for(self.reader.read(65536), TIMEOUT)
            assert data, "the server closed the connection"
            for event in self.conn.receive_data(data):
                if isinstance(event, DataReceived):
                    self.conn.acknowledge_received_data(
                        event.flow_controlled_length, event.stream_id
                    )
                self.events.append(event)
            self.flush()

    async def request(
        self, fields: Headers, body: bytes, *, split: bool = False
    ) -> tuple[bytes | None, bytes]:
        """Its status (None: reset) and answer; the body in the write of its header block,
        or (`split`) once the server has read that."""
        stream_id = self.conn.get_next_available_stream_id()
        self.conn.send_headers(stream_id, fields)
        if split:
            self.conn.ping(b"barrier!")
            self.flush()
            await self.until(lambda e: isinstance(e, PingAckReceived))
        self.conn.send_data(stream_id, body, end_stream=True)  # within the client's windows
        self.flush()
        events = await self.until(
            lambda e: isinstance(e, StreamEnded | StreamReset) and e.stream_id == stream_id
        )
        mine = [e for e in events if getattr(e, "stream_id", None) == stream_id]
        if isinstance(mine[-1], StreamReset):
            assert mine[-1].error_code == ErrorCodes.PROTOCOL_ERROR
            return None, b""
        (response,) = [e for e in mine if isinstance(e, ResponseReceived)]
        answer = b"".join(e.data for e in mine if isinstance(e, DataReceived))
        return dict(response.headers)[b":status"], answer

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


@pytest.mark.parametrize("split", [False, True], ids=["one-read", "split"])
@pytest.mark.parametrize(
    "content_type",
    [b"application/json", b"application/json; charset=utf-8"],
    ids=["fast-routes", "application"],
)
async def test_one_record_produces_are_answered_and_their_window_given_back(
    gateway: Http2Site, spies: Spies, split: bool, content_type: bytes
) -> None:
    """Twenty 10 KB one-record produces on one h2c connection, each served (by the fast
    routes, or the Application for a charset) with its offset whether its body came with
    its header block or after it; 200 KB through a 64 KB connection window, which the
    gateway gave back as it went."""
    client = await H2Client.connect(gateway.port)
    path = b"/v1/topics/t/partitions/0/records?acks=1"
    for offset in range(20):
        body = b'{"records":[{"value":"%s"}]}' % (b"%02d" % offset * 5000)
        fields = produce_fields(path, len(body), content_type)
        status, answer = await client.request(fields, body, split=split)
        assert status == b"200", answer
        assert orjson.loads(answer)["results"][0]["base_offset"] == offset
    status, answer = await client.request(
        [(b":method", b"GET"), (b":scheme", b"http"), (b":authority", b"x"),
         (b":path", b"/v1/topics/t/partitions/0/records?offset=19&timeout_ms=0")], b"",
    )  # fmt: skip
    assert status == b"200"
    assert orjson.loads(answer)["records"][0]["value"] == "19" * 5000
    await client.close()
    kinds = spies[-1].kinds  # the GET's empty DATA frame ends it in the read of its HEADERS
    assert (kinds.count(REQUEST_WITH_BODY), kinds.count(DATA)) == ((1, 20) if split else (21, 0))


@pytest.mark.parametrize("body", [b"0123456789", b"0123"], ids=["longer", "shorter"])
async def test_a_produce_not_of_its_content_length_is_reset(
    gateway: Http2Site, spies: Spies, body: bytes
) -> None:
    """Whole in one read or not, a body other than its content-length resets the stream
    (PROTOCOL_ERROR) unanswered and appends nothing; the connection goes on."""
    client = await H2Client.connect(gateway.port)
    fields = produce_fields(b"/v1/topics/t/partitions/0/records?acks=1", 5)
    assert await client.request(fields, body) == (None, b"")
    good = b'{"records":[{"value":1}]}'
    status, answer = await client.request(
        produce_fields(b"/v1/topics/t/partitions/0/records?acks=1", len(good)), good
    )
    assert status == b"200" and orjson.loads(answer)["results"][0]["base_offset"] == 0
    await client.close()
    assert REQUEST_WITH_BODY in spies[-1].kinds  # the good one's
