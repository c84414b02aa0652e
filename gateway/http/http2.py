"""HTTP/2 for aiohttp: one listening port serving HTTP/1.1, h2c (prior knowledge) and h2 over TLS.

HTTP/1.1 connections go to aiohttp's own ``RequestHandler`` untouched. HTTP/2 connections are
driven by libnghttp2 through a sans-IO session (``gateway.http.h2_session``: framing, HPACK, flow
control and the protocol's validation run in C); every stream becomes a real ``web.Request``
dispatched through the application's normal handler (router, middlewares, error handling,
access log), unless a subclass answers it directly.
"""

from __future__ import annotations

import asyncio
import functools
import re
import ssl
import struct
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Final, NoReturn, cast

from aiohttp import HttpVersion, web
from aiohttp.http import RawRequestMessage
from aiohttp.streams import EMPTY_PAYLOAD, StreamReader
from aiohttp.tcp_helpers import tcp_keepalive
from aiohttp.web_protocol import PayloadAccessError, RequestHandler
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from .aiohttp_private import HandlerInternals, handler_kwargs, release_task, set_listening
from .fast_path import Answer, Ready
from .h2_session import (
    CLOSED,
    DATA,
    GOAWAY,
    REQUEST,
    REQUEST_WITH_BODY,
    RESET,
    SETTINGS,
    TERMINATED,
    TRAILERS,
    WINDOW,
    CalmError,
    ErrorCode,
    Event,
    Session,
    SessionError,
    SessionLike,
)
from .h2_stream import H2Stream, H2StreamWriter, Headers
from .memo import Memo
from .per_loop import PerLoop

__all__ = ("H2Limits", "H2Protocol", "Http2Site", "HttpVersion20", "start_server")

HttpVersion20: Final = HttpVersion(2, 0)
PREFACE: Final = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_ALPN_PROTOCOLS: Final = ["h2", "http/1.1"]
_DEFAULT_WINDOW: Final = 65535
# Controls (as aiohttp's HTTP/1.1 parser) plus space, which cannot occur in an HTTP/1.1 target.
_FORBIDDEN_TARGET = re.compile(r"[\x00-\x20\x7f]")
# A response body's bytes waiting for the client's window before its handler's write() waits.
_QUEUED_HIGH_WATER: Final = 256 * 1024
# GOAWAY frame: 24-bit length 8, type 7, no flags, stream 0; last stream id and error code.
_GOAWAY = struct.Struct(">HBBBIII")


@dataclass(frozen=True, slots=True)
class H2Limits:
    """Per-connection HTTP/2 resource limits, advertised in SETTINGS and enforced locally.

    A header block may not exceed ``max_header_list_size`` decoded (RFC 9113 sizes: name, value
    and 32 bytes a field), nor take more than 8 CONTINUATION frames to arrive.
    """

    max_concurrent_streams: int = 256
    max_header_list_size: int = 64 * 1024
    initial_window_size: int = 1024 * 1024  # per-stream receive window: body bytes buffered
    connection_window_size: int = 4 * 1024 * 1024  # receive window shared by all streams
    max_frame_size: int = 16384  # largest frame accepted from clients
    max_resets: int = 200  # Rapid Reset (CVE-2023-44487): more client RST_STREAMs than this ...
    reset_window: float = 10.0  # ... within this many seconds -> GOAWAY ENHANCE_YOUR_CALM
    preface_timeout: float = 10.0  # seconds for a connection's first bytes, then its SETTINGS

    def __post_init__(self) -> None:
        if self.max_concurrent_streams < 1 or self.max_header_list_size < 1:
            raise ValueError("max_concurrent_streams and max_header_list_size must be positive")
        if not 1 <= self.initial_window_size <= 2**31 - 1:
            raise ValueError("initial_window_size must be in 1..2**31-1")
        if not _DEFAULT_WINDOW <= self.connection_window_size <= 2**31 - 1:
            raise ValueError("connection_window_size must be in 65535..2**31-1")
        if not 2**14 <= self.max_frame_size <= 2**24 - 1:
            raise ValueError("max_frame_size must be in 16384..16777215")
        if self.max_resets < 0 or self.reset_window <= 0 or self.preface_timeout <= 0:
            raise ValueError("max_resets, reset_window and preface_timeout must be positive")

    def bounded(self, connection_bytes: int) -> H2Limits:
        """These limits with receive windows of at most ``connection_bytes`` (65535 at least):
        what a client may send ahead of the handlers stays within one connection's share."""
        window = max(_DEFAULT_WINDOW, min(self.connection_window_size, connection_bytes))
        return replace(
            self,
            connection_window_size=window,
            initial_window_size=min(self.initial_window_size, window),
        )


class _ConnectionTransport(asyncio.Transport):
    """``request.transport`` on HTTP/2: the shared TCP/TLS connection, minus raw writes.

    Raw bytes (or ``loop.sendfile``) would corrupt the multiplexed framing, so writes are refused.
    """

    @property
    def _sendfile_compatible(self) -> NoReturn:
        """Make ``loop.sendfile`` raise NotImplementedError: FileResponse then writes frames."""
        raise NotImplementedError

    __slots__ = ("_transport",)

    def __init__(self, transport: asyncio.Transport) -> None:
        super().__init__()
        self._transport = transport

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def close(self) -> None:
        self._transport.close()

    def abort(self) -> None:
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size()

    def write(self, data: Any) -> None:
        raise RuntimeError("Cannot write raw bytes to a multiplexed HTTP/2 connection")

    def writelines(self, list_of_data: Any) -> None:
        raise RuntimeError("Cannot write raw bytes to a multiplexed HTTP/2 connection")


_MESSAGES_KEPT = 512  # header blocks remembered (process-wide)
_MESSAGE_MAX_BYTES = 2048  # only blocks this small (names, values, a NUL after each) are kept
_UNSEEN = object()
_messages: Memo[bytes, RawRequestMessage | None] = Memo(_MESSAGES_KEPT)


def _message_of(block: bytes) -> RawRequestMessage | None:
    """`_build_message`'s answer, remembered for small blocks: a client repeats its header
    block from one request to the next (what HPACK is for), and building one costs ~4 µs, a
    twentieth of a one-record produce. The answer is immutable, so requests share it."""
    message = _messages.get(block, _UNSEEN)
    if message is not _UNSEEN:
        return cast(RawRequestMessage | None, message)
    built = _build_message(block)
    if len(block) <= _MESSAGE_MAX_BYTES:
        _messages.remember(block, built)
    return built


def _build_message(block: bytes) -> RawRequestMessage | None:
    """Map an HTTP/2 header block (``name\\0value\\0`` a field) to aiohttp's parsed-request
    tuple; None if malformed."""
    method = path = authority = ""
    fields: CIMultiDict[str] = CIMultiDict()
    raw: list[tuple[bytes, bytes]] = []
    parts = block.split(b"\0")
    for name, value in zip(parts[0:-1:2], parts[1::2], strict=True):
        if name[:1] == b":":
            if name == b":method":
                method = value.decode("ascii", "surrogateescape")
            elif name == b":path":
                path = value.decode("utf-8", "surrogateescape")
            elif name == b":authority":
                authority = value.decode("utf-8", "surrogateescape")
            continue
        if name == b"host":
            # RFC 9113 §8.3.1: :authority, when present, wins over Host.
            authority = authority or value.decode("utf-8", "surrogateescape")
            continue
        raw.append((name, value))
        fields.add(name.decode("ascii"), value.decode("utf-8", "surrogateescape"))
    if authority:
        raw.append((b"host", authority.encode("utf-8", "surrogateescape")))
        fields["Host"] = authority
    if _FORBIDDEN_TARGET.search(path):
        return None
    if path[:1] == "/":
        target, _, fragment = path.partition("#")
        target, _, query = target.partition("?")
        url = URL.build(path=target, query_string=query, fragment=fragment, encoded=True)
    elif path == "*" and method == "OPTIONS":
        url = URL(path, encoded=True)
    else:
        return None
    return RawRequestMessage(
        method,
        path,
        HttpVersion20,
        CIMultiDictProxy(fields),
        tuple(raw),
        False,
        None,
        False,
        False,
        url,
    )


class TurnFlushes:
    """The HTTP/2 connections with frames to send, flushed one after another at the end of the
    loop's turn: one callback a turn rather than one a connection, ~1,000 instructions less
    an h2c request (docs/PERFORMANCE.md, "One flush a turn")."""

    __slots__ = ("_due", "_handle", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._due: list[H2Protocol] = []
        self._handle: asyncio.Handle | None = None

    def add(self, protocol: H2Protocol) -> None:
        if not self._due:
            self._handle = self._loop.call_soon(self._flush_all)
        self._due.append(protocol)

    def flush_now(self) -> None:
        """Flush the connections with frames due now, not at the end of the turn."""
        if self._due:
            assert self._handle is not None
            self._handle.cancel()
            self._flush_all()

    def _flush_all(self) -> None:
        self._handle = None
        due, self._due = self._due, []
        for protocol in due:
            try:
                protocol._flush()
            except Exception as exc:  # one connection's failure must not stall the others
                self._loop.call_exception_handler(
                    {"message": "HTTP/2 flush failed", "exception": exc, "protocol": protocol}
                )


turn_flushes: PerLoop[TurnFlushes] = PerLoop(TurnFlushes)


class H2Protocol(HandlerInternals):
    """One HTTP/2 connection; each stream's handler runs as its own task.

    It subclasses aiohttp's ``RequestHandler`` so that requests see a genuine ``request.protocol``,
    the ``web.Server`` tracks it (``pre_shutdown``/``shutdown`` become GOAWAY and drain), and
    request handling reuses aiohttp's own error handling and access logging.
    """

    __slots__ = (
        "_beginning",
        "_blocked",
        "_flush_scheduled",
        "_flushes",
        "_goaway_sent",
        "_h2",
        "_idle_handle",
        "_idle_since",
        "_last_stream_id",
        "_limits",
        "_lingering",
        "_resets",
        "_settings_handle",
        "_streams",
        "_streams_finished",
        "_transport",
    )

    def __init__(self, manager: web.Server, *, limits: H2Limits, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._limits = limits
        # Window goes back as handlers read (body_consumed), not as frames arrive.
        self._h2: SessionLike = Session(
            max_concurrent_streams=limits.max_concurrent_streams,
            max_header_list_size=limits.max_header_list_size,
            initial_window_size=limits.initial_window_size,
            max_frame_size=limits.max_frame_size,
            connection_window_size=limits.connection_window_size,
        )
        self._transport: asyncio.Transport | None = None
        self._streams: dict[int, H2Stream] = {}
        self._streams_finished: asyncio.Future[None] | None = None  # a shutdown waits on it
        # Held, to begin, each with its whole body when it came with its header block.
        self._beginning: list[tuple[H2Stream, RawRequestMessage, bytes | None]] = []
        self._lingering: dict[int, asyncio.TimerHandle] = {}
        self._blocked: set[H2Stream] = set()
        self._resets: deque[float] = deque()
        self._goaway_sent = False
        self._flush_scheduled = False
        self._flushes = turn_flushes(self.event_loop)
        self._last_stream_id = 0
        self._idle_since = 0.0
        self._idle_handle: asyncio.TimerHandle | None = None
        self._settings_handle: asyncio.TimerHandle | None = None

    # -- connection lifecycle -------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._transport is not None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        real = cast(asyncio.Transport, transport)
        super(RequestHandler, self).connection_made(real)
        self.transport = _ConnectionTransport(real)
        self._transport = real
        if self.tcp_keepalive:
            tcp_keepalive(real)
        assert self.web_server is not None
        self.web_server.connection_made(self, real)
        self._flush()  # our SETTINGS (and connection window), queued by the session
        self._idle_since = self.event_loop.time()
        if self.keepalive_timeout > 0:
            self._idle_handle = self.event_loop.call_later(self.keepalive_timeout, self._on_idle)
        # The client's SETTINGS must follow its preface: a client dribbling it is cut off.
        self._settings_handle = self.event_loop.call_later(
            self._limits.preface_timeout, self._on_settings_timeout
        )

    def connection_lost(self, exc: BaseException | None) -> None:
        if self.web_server is not None:
            self.web_server.connection_lost(self, exc)
            self.web_server = None
        self._transport = None
        if self._idle_handle is not None:
            self._idle_handle.cancel()
            self._idle_handle = None
        self._settings_received()
        for handle in self._lingering.values():
            handle.cancel()
        self._lingering.clear()
        self._abort_streams()
        super(RequestHandler, self).connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._transport is None:
            return
        conn = self._h2
        try:
            events = conn.receive(data)
        except SessionError as exc:
            # The engine dropped the connection (a resource limit, a fatal protocol error) and
            # can write nothing more: say why ourselves, then hang up.
            code = (
                ErrorCode.ENHANCE_YOUR_CALM
                if isinstance(exc, CalmError)
                else ErrorCode.PROTOCOL_ERROR
            )
            self._abandon(code)
            return
        if events:
            self._on_events(events)
        if self._transport is not None and conn.want_write and not self._flush_scheduled:
            # What the read answered (refusals) goes with the flush at the end of the turn;
            # frames the engine owes when none is due (SETTINGS and PING acks) go now.
            self._flush()

    def pause_writing(self) -> None:
        """Stop reading while our output backs up, so the frames the engine answers (PING and
        SETTINGS acknowledgements) stay bounded."""
        super().pause_writing()
        if self._transport is not None:
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._transport is not None:
            self._transport.resume_reading()

    def close(self) -> None:
        """Begin a graceful close: GOAWAY now, hang up once in-flight streams are done."""
        self._send_goaway()
        if not self._streams:
            self._close_transport()

    def force_close(self) -> None:
        self._close_transport()

    async def shutdown(self, timeout: float | None = 15.0) -> None:
        """Send GOAWAY, let in-flight streams finish within ``timeout``, cancel the rest, close."""
        self.close()
        if self._streams:  # each is released once answered (a direct answer after its future)
            finished = self._streams_finished = self.event_loop.create_future()
            try:
                async with asyncio.timeout(timeout):
                    await asyncio.shield(finished)
            except TimeoutError:
                for stream in list(self._streams.values()):
                    if stream.task is not None:
                        stream.task.cancel()
        self._close_transport()

    # -- frame events ---------------------------------------------------------------------

    def _on_events(self, events: list[Event]) -> None:
        """Act on what the engine made of the bytes received (or sent) since the last call."""
        if events[-1][0] == TERMINATED:
            # The engine has ended the connection (it is always the last event): nothing in
            # this batch can be answered any more.
            self._close_transport()
            return
        try:
            for kind, stream_id, value, ended in events:
                if self._transport is None:
                    return
                if kind == REQUEST_WITH_BODY:
                    self._on_request(stream_id, value, True, ended)
                elif kind == REQUEST:
                    self._on_request(stream_id, value, ended)
                elif kind == DATA:
                    self._on_data(stream_id, value, ended)
                elif kind == CLOSED:
                    self._on_closed(stream_id)
                elif kind == WINDOW:
                    self._on_window_update(stream_id)
                elif kind == RESET:
                    self._on_reset(stream_id)
                elif kind == TRAILERS:
                    self._on_stream_ended(stream_id)
                elif kind == SETTINGS:
                    self._settings_received()
                    self._on_window_update(0)
                elif kind == GOAWAY:
                    self.close()
        except SessionError:
            # The engine refuses new work while it closes the connection (its GOAWAY queued).
            self._close_transport()
        beginning = self._beginning
        if beginning:
            self._beginning = []
            for stream, message, body in beginning:
                self._begin_held(stream, message, body)

    def _on_request(
        self, stream_id: int, block: bytes, end_stream: bool, body: bytes | None = None
    ) -> None:
        """A request's header block; `body` its whole body when it came with the block (a
        REQUEST_WITH_BODY event), taken as a DATA event ending the stream would be."""
        conn = self._h2
        if self._goaway_sent:
            self._refuse(stream_id, ErrorCode.REFUSED_STREAM, body)
            return
        self._last_stream_id = stream_id
        message = _message_of(block)
        if message is None:
            self._refuse(stream_id, ErrorCode.PROTOCOL_ERROR, body)
            return
        stream = H2Stream(self, stream_id, self.event_loop)
        stream.remote_ended = end_stream
        self._streams[stream_id] = stream
        if body is not None:
            stream.received = len(body)  # its window goes back as a DATA event's would
        if self.may_answer_directly(message):
            # A reader is made only if the Application is to read the body. Begun once the
            # frames of this read are in (`_on_events`), as its task's first step would be.
            stream.held = []
            self._beginning.append((stream, message, body))
            return
        payload: StreamReader
        if end_stream and body is None:
            payload = EMPTY_PAYLOAD
        else:
            payload = stream.reader = StreamReader(
                stream, self._limits.initial_window_size, loop=self.event_loop
            )
            if message.headers.get("expect", "").lower() == "100-continue":
                conn.send_informational(stream_id, [(b":status", b"100")])
            if body is not None:
                if body:
                    payload.feed_data(body)
                payload.feed_eof()
        stream.task = self.event_loop.create_task(self._run_stream(stream, message, payload))

    def _refuse(self, stream_id: int, error_code: int, body: bytes | None) -> None:
        """Reset a stream not taken; a body that came with its request is discarded and its
        window given back at once, as a DATA event's on a stream nobody reads."""
        conn = self._h2
        conn.reset_stream(stream_id, error_code)
        if body:
            conn.acknowledge_received_data(len(body), stream_id)

    def _begin_held(self, stream: H2Stream, message: RawRequestMessage, body: bytes | None) -> None:
        """A stream whose body was held: answered directly when it came whole and the subclass
        takes it (no task), else handed to the Application with a reader of what was held.
        `body`, when not None, is the whole body, which came with the header block."""
        held = stream.held
        if stream.reset or held is None or self._streams.get(stream.stream_id) is not stream:
            return  # reset (and released) before it began
        stream.held = None
        if stream.remote_ended:
            answering = self.start_directly(
                message,
                b"".join(held) if body is None else body,
                functools.partial(self._answer_directly, stream),
            )
            if answering is not None:
                stream.started = True
                if self.web_server is not None:
                    self.web_server.requests_count += 1
                if isinstance(answering, asyncio.Future):  # not a Python call per produce
                    stream.task = answering
                else:
                    self._answer_directly(stream, answering)
                return
        if body:
            held = [body]
        # No body at all is aiohttp's EMPTY_PAYLOAD, as on HTTP/1.1: a reader would be
        # counted as a body of --max-request-bytes by the in-flight limits.
        payload = (
            self._reader_of(stream, held) if held or not stream.remote_ended else EMPTY_PAYLOAD
        )
        stream.task = self.event_loop.create_task(self._run_stream(stream, message, payload))

    def _answer_directly(self, stream: H2Stream, answer: Answer | None) -> None:
        """Send what `start_directly` answered (None: the stream went first) and release it."""
        if self._streams.get(stream.stream_id) is not stream:
            return
        if answer is not None and not stream.reset and self._transport is not None:
            try:
                self._h2.respond(stream.stream_id, answer.h2_headers(), answer.body)
            except SessionError:
                self.log_debug("Ignored premature client disconnection")
            else:
                stream.local_ended = True
                if self.writing_paused:  # its next frames wait for the socket to drain
                    self._schedule_flush()
                    stream.task = asyncio.ensure_future(self._drain_then_finish(stream))
                    return
        self._finish_stream(stream, None)

    async def _drain_then_finish(self, stream: H2Stream) -> None:
        try:
            await self.drain()
        except ConnectionError:
            self.log_debug("Ignored premature client disconnection")
        finally:
            self._finish_stream(stream, None)

    def _on_data(self, stream_id: int, data: bytes, end_stream: bool) -> None:
        stream = self._streams.get(stream_id)
        if stream is not None and stream.held is not None and not stream.reset:
            stream.received += len(data)
            if data:
                stream.held.append(data)
            if end_stream:  # unanswered, so not lingering, and with no reader to end
                stream.remote_ended = True
            return
        if stream is None or stream.reader is None or stream.reset:
            # Body nobody will read (e.g. a lingering upload): discard it, return the window.
            if data:
                self._h2.acknowledge_received_data(len(data), stream_id)
        elif data:
            stream.received += len(data)
            stream.reader.feed_data(data)
        if end_stream:
            self._on_stream_ended(stream_id)

    def _on_stream_ended(self, stream_id: int) -> None:
        self._stop_lingering(stream_id)
        stream = self._streams.get(stream_id)
        if stream is not None:
            stream.remote_ended = True
            if stream.reader is not None:
                stream.reader.feed_eof()

    def _on_reset(self, stream_id: int) -> None:
        if self._reset_flood():
            self._terminate(ErrorCode.ENHANCE_YOUR_CALM)
            return
        self._stop_lingering(stream_id)
        stream = self._streams.get(stream_id)
        if stream is not None:
            self._abort_stream(stream, ConnectionResetError("Stream reset by peer"))

    def _on_closed(self, stream_id: int) -> None:
        """The engine closed a stream: both sides ended, or a reset (ours, the peer's, its own)."""
        if self._lingering:
            self._stop_lingering(stream_id)
        stream = self._streams.get(stream_id)
        if stream is not None and not stream.reset:
            # After its answer, a handler is only finishing up: fail reads, let it end.
            self._abort_stream(
                stream, ConnectionResetError("HTTP/2 stream closed"), cancel=not stream.local_ended
            )

    def _reset_flood(self) -> bool:
        """Record one client RST_STREAM; True if the rate exceeds the Rapid Reset limit."""
        now = self.event_loop.time()
        resets = self._resets
        resets.append(now)
        horizon = now - self._limits.reset_window
        while resets[0] < horizon:
            resets.popleft()
        return len(resets) > self._limits.max_resets

    def _on_window_update(self, stream_id: int) -> None:
        if stream_id:
            stream = self._streams.get(stream_id)
            if stream is not None:
                stream.wake()
        else:
            for stream in self._blocked:
                stream.wake()

    # -- per-stream request handling ------------------------------------------------------

    async def _run_stream(
        self, stream: H2Stream, message: RawRequestMessage, payload: StreamReader
    ) -> None:
        stream.started = True
        task = stream.task
        server = self.web_server
        assert isinstance(task, asyncio.Task) and server is not None
        server.requests_count += 1
        request: web.BaseRequest | None = None
        try:
            writer = H2StreamWriter(self, stream)
            request = server.request_factory(message, payload, self, writer, task)
            start = self.event_loop.time() if self.access_logging else None
            await self.run_request(request, start, server.request_handler)
        except ConnectionError:
            self.log_debug("Ignored premature client disconnection")
        except Exception as exc:
            self.log_exception("Unhandled exception", exc_info=exc)
        finally:
            if request is not None:
                release_task(request)
            self._finish_stream(stream, payload)

    def may_answer_directly(self, message: RawRequestMessage) -> bool:
        """Whether a subclass may answer this request itself once its body is whole: its body
        is then held as it comes, with no reader, until the stream's handler first runs."""
        return False

    def start_directly(
        self,
        message: RawRequestMessage,
        body: bytes,
        answered: Ready,
    ) -> asyncio.Future[Any] | Answer | None:
        """Begin a subclass's answer to a request it serves without the Application, given its
        whole body: `answered` gets it, or None once the returned future was cancelled (the
        stream was reset). An answer made already (a refusal) is returned instead, and sent
        at once, with no future or callback. None: the Application answers it."""
        return None

    def _reader_of(self, stream: H2Stream, held: list[bytes]) -> StreamReader:
        """The reader of a body held for a direct answer, for the Application after all."""
        reader = stream.reader = StreamReader(
            stream, self._limits.initial_window_size, loop=self.event_loop
        )
        for chunk in held:
            reader.feed_data(chunk)
        if stream.remote_ended:
            reader.feed_eof()
        return reader

    def _finish_stream(self, stream: H2Stream, payload: StreamReader | None) -> None:
        """Release a stream after its handler ended: settle its state and flow-control credit."""
        del self._streams[stream.stream_id]
        if self._blocked:
            self._blocked.discard(stream)
        if payload is not None and payload is not EMPTY_PAYLOAD:
            payload.set_exception(PayloadAccessError())
        finished = self._streams_finished
        if not self._streams and finished is not None and not finished.done():
            finished.set_result(None)  # a shutdown waits for this, connection lost or not
        if self._transport is None:
            return
        conn = self._h2
        stream_id = stream.stream_id
        if stream.reset or not stream.local_ended or stream.remote_ended:
            if not stream.reset and not stream.local_ended:
                conn.reset_stream(stream_id, ErrorCode.INTERNAL_ERROR)
            conn.forget(stream_id)  # released: its closing needs nothing of us
        else:
            self._linger(stream_id)  # its closing ends the lingering
        unacked = stream.received - stream.acked
        if unacked:
            stream.acked = stream.received
            conn.acknowledge_received_data(unacked, stream_id)
        self._schedule_flush()
        if not self._streams:
            if self._goaway_sent:
                self._close_transport()
            else:
                self._idle_since = self.event_loop.time()

    def _linger(self, stream_id: int) -> None:
        """Response sent before the whole request body: keep accepting (and discarding) the rest.

        This mirrors aiohttp's HTTP/1.1 lingering close; many clients mishandle an early
        RST_STREAM. After ``lingering_time`` the upload is stopped with RST_STREAM(NO_ERROR).
        """
        if self.lingering_time > 0:
            handle = self.event_loop.call_later(self.lingering_time, self._end_lingering, stream_id)
            self._lingering[stream_id] = handle
        else:
            self._h2.reset_stream(stream_id, ErrorCode.NO_ERROR)

    def _end_lingering(self, stream_id: int) -> None:
        if self._lingering.pop(stream_id, None) is not None and self._transport is not None:
            self._h2.reset_stream(stream_id, ErrorCode.NO_ERROR)
            self._flush()

    def _stop_lingering(self, stream_id: int) -> None:
        if self._lingering:
            handle = self._lingering.pop(stream_id, None)
            if handle is not None:
                handle.cancel()

    def _abort_stream(
        self, stream: H2Stream, error: ConnectionError, *, cancel: bool = True
    ) -> None:
        """The client or the connection went away: fail body reads and cancel the handler."""
        stream.reset = True
        if stream.reader is not None:
            stream.reader.set_exception(error)
        stream.wake()
        if not cancel:
            return
        if stream.task is not None:
            stream.task.cancel()
        if not stream.started:
            # Cancelled before its first step, the task never reaches _run_stream's finally (nor
            # does a held stream reset before it began, which has no task yet).
            self._finish_stream(stream, stream.reader or EMPTY_PAYLOAD)

    # -- output path used by H2Stream / H2StreamWriter ------------------------------------

    def body_consumed(self, stream: H2Stream) -> None:
        """Return window for body bytes the handler has read since the last call.

        The engine batches it: WINDOW_UPDATE goes out once half a window has been consumed.
        """
        consumed = stream.received - stream.unconsumed
        delta = consumed - stream.acked
        if delta > 0 and self._transport is not None:
            stream.acked = consumed
            self._h2.acknowledge_received_data(delta, stream.stream_id)
            self._schedule_flush()

    def send_headers(self, stream: H2Stream, headers: Headers, *, end_stream: bool) -> None:
        self._check_open(stream)
        try:
            self._h2.send_headers(stream.stream_id, headers, end_stream)
        except SessionError as exc:
            raise ConnectionResetError("HTTP/2 stream closed") from exc
        stream.local_ended = end_stream
        self._schedule_flush()

    async def send_data(
        self, stream: H2Stream, data: bytes | bytearray | memoryview, *, end_stream: bool
    ) -> None:
        """Queue a body chunk; the engine frames it as the peer's windows allow.

        A handler that writes more waits while its stream's unsent bytes pass a high-water mark.
        """
        self._queue_data(stream, data, end_stream=end_stream)
        conn = self._h2
        stream_id = stream.stream_id
        if not end_stream and conn.queued_body_size(stream_id) > _QUEUED_HIGH_WATER:
            self._flush()
            while conn.queued_body_size(stream_id) > _QUEUED_HIGH_WATER:
                self._check_open(stream)
                self._blocked.add(stream)
                try:
                    await stream.wait_for_window()
                finally:
                    self._blocked.discard(stream)
        self._schedule_flush()
        if self.writing_paused:
            await self.drain()

    def _queue_data(
        self, stream: H2Stream, data: bytes | bytearray | memoryview, *, end_stream: bool
    ) -> None:
        """Hand a body chunk to the engine (flushed at the end of the loop's turn)."""
        self._check_open(stream)
        try:
            self._h2.send_data(stream.stream_id, data, end_stream)
        except SessionError as exc:
            raise ConnectionResetError("HTTP/2 stream closed") from exc
        if end_stream:
            stream.local_ended = True
        self._schedule_flush()

    async def drain(self) -> None:
        """Wait while the socket's write buffer is above its high-water mark."""
        if self.writing_paused and self.transport is not None:
            await self.wait_drained()

    # -- helpers --------------------------------------------------------------------------

    def _check_open(self, stream: H2Stream) -> None:
        if stream.reset or self._transport is None:
            task = stream.task
            if (
                isinstance(task, asyncio.Task)
                and asyncio.current_task() is task
                and task.cancelling()
            ):
                # The reset cancelled the handler: end it that way, not as a failed write (500).
                raise asyncio.CancelledError
            raise ConnectionResetError("HTTP/2 stream was reset or its connection closed")

    def _schedule_flush(self) -> None:
        """Coalesce frames from all streams into one socket write per event-loop iteration."""
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._flushes.add(self)

    def _flush(self) -> None:
        self._flush_scheduled = False
        transport = self._transport
        if transport is None:
            return
        conn = self._h2
        data = conn.data_to_send()
        if data:
            transport.write(data)
        # Sending can close streams (both sides ended) or, after a GOAWAY, the connection. A
        # released stream's closing raises no event (`forget`), nor is it asked for then.
        if self._streams or not conn.want_read:
            events = conn.events()
            if events:
                self._on_events(events)

    def _send_goaway(self) -> None:
        """Announce shutdown without ending the engine's session, so in-flight streams finish.

        Streams the client opens after it are refused (``_on_request``).
        """
        if self._goaway_sent or self._transport is None:
            return
        self._goaway_sent = True
        self._flush()
        if self._transport is not None:
            self._transport.write(_goaway_frame(self._last_stream_id, ErrorCode.NO_ERROR))

    def _terminate(self, error_code: int) -> None:
        """Close with a final GOAWAY (never naming a stream above one announced before)."""
        self._h2.terminate(error_code, self._last_stream_id)
        self._close_transport()

    def _abandon(self, error_code: int) -> None:
        """Hang up on a connection whose engine failed, with a GOAWAY of our own."""
        transport = self._transport
        if transport is not None:
            self._transport = None
            transport.write(_goaway_frame(self._last_stream_id, error_code))
            transport.close()
            self._abort_streams()

    def _close_transport(self) -> None:
        transport = self._transport
        if transport is not None:
            self._transport = None
            data = self._h2.data_to_send()
            if data:
                transport.write(data)
            transport.close()
            self._abort_streams()

    def _abort_streams(self) -> None:
        """The connection is closed: fail the body reads and cancel the handlers still running."""
        error = ConnectionResetError("Connection lost")
        for stream in list(self._streams.values()):
            if not stream.reset:
                self._abort_stream(stream, error)

    def _settings_received(self) -> None:
        if self._settings_handle is not None:
            self._settings_handle.cancel()
            self._settings_handle = None

    def _on_settings_timeout(self) -> None:
        self._settings_handle = None
        if self._transport is not None:
            self._terminate(ErrorCode.SETTINGS_TIMEOUT)

    def _on_idle(self) -> None:
        """Keep-alive timer, armed once: closes the connection or re-arms for the time left."""
        self._idle_handle = None
        if self._transport is None:
            return
        due = self._idle_since + self.keepalive_timeout
        now = self.event_loop.time()
        if not self._streams and now >= due:
            self._terminate(ErrorCode.NO_ERROR)
            return
        delay = self.keepalive_timeout if self._streams else due - now
        self._idle_handle = self.event_loop.call_later(delay, self._on_idle)


def _goaway_frame(last_stream_id: int, error_code: int) -> bytes:
    return _GOAWAY.pack(0, 8, 0x7, 0, 0, last_stream_id, error_code)


class _ProtocolSelector(asyncio.Protocol):
    """Placeholder protocol of a fresh connection: picks HTTP/2 or HTTP/1.1, then steps aside.

    TLS connections decide by ALPN; cleartext ones (and TLS without ALPN) by whether the first
    bytes are the HTTP/2 client preface. Bytes read while sniffing are replayed to the winner.
    """

    __slots__ = ("_buffer", "_http1", "_http2_class", "_limits", "_server", "_timer", "_transport")

    def __init__(
        self,
        server: web.Server,
        limits: H2Limits,
        http1: Callable[..., RequestHandler] | None,
        http2: Callable[..., H2Protocol],
    ) -> None:
        self._server = server
        self._limits = limits
        self._http1 = http1
        self._http2_class = http2
        self._buffer = b""
        self._timer: asyncio.TimerHandle | None = None
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        real = cast(asyncio.Transport, transport)
        self._transport = real
        ssl_object = real.get_extra_info("ssl_object")
        alpn = ssl_object.selected_alpn_protocol() if ssl_object is not None else None
        if alpn == "h2":
            self._hand_over(self._http2(), b"")
        elif alpn == "http/1.1":
            self._hand_over(self._http11(), b"")
        else:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self._limits.preface_timeout, real.close)

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer + data if self._buffer else data
        size = min(len(buffer), len(PREFACE))
        if buffer[:size] != PREFACE[:size]:
            self._hand_over(self._http11(), buffer)
        elif size == len(PREFACE):
            self._hand_over(self._http2(), buffer)
        else:
            self._buffer = buffer

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _http11(self) -> RequestHandler:
        if self._http1 is None:
            return self._server()
        server = self._server
        return self._http1(server, loop=asyncio.get_running_loop(), **handler_kwargs(server))

    def _http2(self) -> H2Protocol:
        server = self._server
        loop = asyncio.get_running_loop()
        # Same handler settings (access log, timeouts, limits) the Server gives RequestHandler.
        kwargs = handler_kwargs(server)
        protocol = self._http2_class
        try:
            return protocol(server, loop=loop, limits=self._limits, **kwargs)
        except TypeError:
            return protocol(server, loop=loop, limits=self._limits)

    def _hand_over(self, protocol: asyncio.Protocol, data: bytes) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        transport = self._transport
        assert transport is not None
        self._transport = None
        self._buffer = b""
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        if data:
            protocol.data_received(data)


class Http2Site(web.TCPSite):
    """A ``TCPSite`` that also speaks HTTP/2: h2c by prior knowledge, and h2 via ALPN under TLS.

    Use it with ``web.AppRunner`` exactly like ``TCPSite``. The given ``ssl_context`` gets its
    ALPN protocols set to ``h2, http/1.1``. ``runner.cleanup()`` shuts down gracefully: GOAWAY on
    every HTTP/2 connection, then in-flight streams get the runner's ``shutdown_timeout``.
    ``http1`` makes HTTP/1.1 connections' protocols (called as ``web.Server`` calls
    ``RequestHandler``; default: the server's own), ``http2`` is the HTTP/2 protocol class.
    """

    __slots__ = ("_http1", "_http2", "_limits", "_listen", "_site_runner")

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str | None = None,
        port: int | None = None,
        *,
        ssl_context: ssl.SSLContext | None = None,
        limits: H2Limits | None = None,
        http1: Callable[..., RequestHandler] | None = None,
        http2: Callable[..., H2Protocol] = H2Protocol,
        backlog: int = 128,
        reuse_address: bool | None = None,
        reuse_port: bool | None = None,
    ) -> None:
        super().__init__(
            runner,
            host,
            port,
            ssl_context=ssl_context,
            backlog=backlog,
            reuse_address=reuse_address,
            reuse_port=reuse_port,
        )
        if ssl_context is not None:
            ssl_context.set_alpn_protocols(_ALPN_PROTOCOLS)
        self._limits = limits or H2Limits()
        self._http1 = http1
        self._http2 = http2
        self._site_runner = runner
        # What TCPSite.start passes to create_server, as given (its port defaults as TCPSite's).
        self._listen: dict[str, Any] = {
            "host": host,
            "port": self.port,
            "ssl": ssl_context,
            "backlog": backlog,
            "reuse_address": reuse_address,
            "reuse_port": reuse_port,
        }

    @property
    def runner(self) -> web.BaseRunner:
        return self._site_runner

    async def start(self) -> None:
        await web.BaseSite.start(self)
        loop = asyncio.get_running_loop()
        server = self._site_runner.server
        assert server is not None
        limits, http1, http2 = self._limits, self._http1, self._http2
        listening = await loop.create_server(
            lambda: _ProtocolSelector(server, limits, http1, http2), **self._listen
        )
        sockets = listening.sockets
        set_listening(self, listening, sockets[0].getsockname()[1] if sockets else self.port)


async def start_server(
    app: web.Application,
    host: str,
    port: int,
    *,
    ssl_context: ssl.SSLContext | None = None,
    limits: H2Limits | None = None,
    http1: Callable[..., RequestHandler] | None = None,
    http2: Callable[..., H2Protocol] = H2Protocol,
    reuse_port: bool = False,
    backlog: int = 128,
    **runner_kwargs: Any,
) -> Http2Site:
    """Set up an ``AppRunner`` for ``app`` and start an :class:`Http2Site` on ``host:port``.

    ``runner_kwargs`` go to ``web.AppRunner`` (e.g. ``shutdown_timeout``, ``access_log``);
    ``http1`` and ``http2`` choose the connections' protocols (see :class:`Http2Site`);
    ``reuse_port`` (SO_REUSEPORT) lets processes share the port, the kernel spreading connections;
    ``backlog`` is the listen queue (connections the kernel completed, not yet accepted);
    ``handler_cancellation`` defaults to True so HTTP/1.1 disconnects cancel handlers as HTTP/2
    resets do. The bound port is ``site.port``; stop with ``await site.runner.cleanup()``.
    """
    runner_kwargs.setdefault("handler_cancellation", True)
    runner = web.AppRunner(app, **runner_kwargs)
    await runner.setup()
    site = Http2Site(
        runner,
        host,
        port,
        ssl_context=ssl_context,
        limits=limits,
        http1=http1,
        http2=http2,
        backlog=backlog,
        reuse_port=reuse_port,
    )
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return site
