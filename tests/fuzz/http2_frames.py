"""Fuzz target: arbitrary bytes after the client preface, fed to the gateway's HTTP/2
connection (gateway.http.http2.H2Protocol) over an in-memory transport, in up to four reads with
the handlers running in between. No exception may escape data_received, no stream handler
may fail, and every stream must be released once the client hangs up: bad input may only
reset streams or close the connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

from aiohttp import web
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.settings import SettingCodes
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    PriorityFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

from gateway.http.http2 import PREFACE, H2Limits, H2Protocol
from tests.memory_transport import MemoryTransport

# Small limits, so that the Rapid Reset and stream limits are within the fuzzer's reach.
LIMITS = H2Limits(max_concurrent_streams=8, max_resets=4, max_header_list_size=4096)
BIG = b"x" * 70_000  # more than the default window: the answer waits for WINDOW_UPDATE


async def _answer(request: web.BaseRequest) -> web.StreamResponse:
    body = await request.read()
    if request.path == "/stream":
        response = web.StreamResponse(headers={"X-Echo": request.headers.get("X-Echo", "")})
        await response.prepare(request)
        await response.write(body)
        await response.write(BIG)
        await response.write_eof()
        return response
    return web.Response(body=body or BIG)


class _Protocol(H2Protocol):
    """H2Protocol that records what it would log as unhandled, instead of logging it."""

    errors: list[Any]

    def log_exception(self, *args: Any, **kw: Any) -> None:
        self.errors.append((args, kw.get("exc_info")))


def _spin(loop: asyncio.AbstractEventLoop, rounds: int = 8) -> None:
    for _ in range(rounds):
        loop.run_until_complete(asyncio.sleep(0))


async def _settle(tasks: list[asyncio.Future[Any]]) -> None:
    await asyncio.gather(*tasks, return_exceptions=True)


def one_input(data: bytes) -> None:
    loop = asyncio.new_event_loop()  # one per input: nothing carries over to the next
    try:
        _connection(loop, data)
    finally:
        loop.close()


def _connection(loop: asyncio.AbstractEventLoop, data: bytes) -> None:
    failures: list[Any] = []
    loop.set_exception_handler(lambda _, context: failures.append(context))
    server = web.Server(_answer, loop=loop, handler_cancellation=True)
    protocol = _Protocol(server, loop=loop, limits=LIMITS, access_log=None)
    protocol.errors = failures
    transport = MemoryTransport(loop, protocol)
    protocol.connection_made(transport)
    reads = 1 + (data[0] % 4 if data else 0)
    body = data[1:]
    step = -(-len(body) // reads) if body else 1
    protocol.data_received(PREFACE)
    for pos in range(0, len(body), step):
        if transport.closing:
            break
        protocol.data_received(body[pos : pos + step])
        _spin(loop)
    tasks = [s.task for s in protocol._streams.values() if s.task is not None]
    transport.close()
    _spin(loop)
    loop.run_until_complete(_settle(tasks))
    _spin(loop)
    assert not failures, failures
    assert not protocol._streams and not protocol._lingering, "streams outlived the connection"


def _client() -> H2Connection:
    conn = H2Connection(H2Configuration(client_side=True, header_encoding="utf-8"))
    conn.initiate_connection()
    return conn


def _request(
    conn: H2Connection, stream_id: int, method: str, path: str, end: bool, *extra: tuple[str, str]
) -> None:
    headers = [(":method", method), (":path", path), (":scheme", "http"), (":authority", "h")]
    conn.send_headers(stream_id, [*headers, *extra], end_stream=end)


def seeds() -> Iterator[bytes]:
    """Frames a client sends after the preface (the first byte picks how many reads)."""
    conn = _client()
    _request(conn, 1, "GET", "/", True)
    yield b"\x00" + conn.data_to_send()[len(PREFACE) :]

    conn = _client()
    _request(conn, 1, "POST", "/stream", False, ("x-echo", "1"), ("content-length", "5"))
    conn.send_data(1, b"hello", end_stream=True)
    conn.increment_flow_control_window(100_000)
    conn.increment_flow_control_window(100_000, stream_id=1)
    _request(conn, 3, "GET", "/?q=1", True)
    conn.ping(b"12345678")
    yield b"\x02" + conn.data_to_send()[len(PREFACE) :]

    conn = _client()
    conn.update_settings({SettingCodes.INITIAL_WINDOW_SIZE: 1, SettingCodes.MAX_FRAME_SIZE: 20000})
    for stream_id in range(1, 12, 2):
        _request(conn, stream_id, "PUT", "/", True)
    opened = conn.data_to_send()[len(PREFACE) :]
    for stream_id in range(1, 12, 2):
        conn.reset_stream(stream_id)  # a reset flood (Rapid Reset), in the second read
    conn.close_connection()
    rest = conn.data_to_send()
    while -(-(len(opened) + len(rest)) // 2) < len(opened):
        rest += PingFrame(0, opaque_data=b"padding!").serialize()
    yield b"\x01" + opened + rest

    conn = _client()
    block = conn.encoder.encode([(":method", "GET"), (":path", "/"), (":scheme", "http")])
    frames = [
        SettingsFrame(0, settings={SettingCodes.ENABLE_PUSH: 0}),
        HeadersFrame(1, data=block[:3]),
        ContinuationFrame(1, data=block[3:], flags=["END_HEADERS"]),
        DataFrame(1, data=b"abc", flags=["END_STREAM", "PADDED"], pad_length=4),
        PriorityFrame(5, depends_on=1, stream_weight=7),
        WindowUpdateFrame(0, window_increment=1),
        PingFrame(0, opaque_data=b"\0" * 8),
        RstStreamFrame(1, error_code=8),
        GoAwayFrame(0, last_stream_id=1),
    ]
    yield b"\x03" + b"".join(frame.serialize() for frame in frames)
