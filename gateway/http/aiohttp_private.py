"""Every use of aiohttp's private names, in one place: the connections drive aiohttp's HTTP/1.1
request loop from outside (the fast path takes requests off its queue while the loop idles) and
run HTTP/2 streams through its request handling, which its public interface does not offer.

`PRIVATE` lists each name used and why; tests/gateway/test_aiohttp_private.py checks that the
installed aiohttp still has each one (with the signature used, for methods) and fails naming
the one that changed. Nothing else in the gateway reads or writes an aiohttp private name: the
modules of gateway.http go through `HandlerInternals` (their base class) and the functions here.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from aiohttp import web, web_protocol
from aiohttp.base_protocol import BaseProtocol
from aiohttp.http import RawRequestMessage
from aiohttp.streams import EmptyStreamReader, StreamReader
from aiohttp.web_protocol import RequestHandler, _ErrInfo

# A parse error queued in place of a request (aiohttp answers it 400 when its loop gets to it).
ErrInfo = _ErrInfo
Queued = tuple[RawRequestMessage | ErrInfo, StreamReader]


@dataclass(frozen=True, slots=True)
class Private:
    """One private name of aiohttp's: on what, the parameters used (methods), and why."""

    owner: type | ModuleType
    name: str
    why: str
    parameters: tuple[str, ...] | None = None  # a method's (`self` included), a class's
    instance: bool = False  # set on each instance, not found on the class


PRIVATE: tuple[Private, ...] = (
    Private(
        RequestHandler,
        "_messages",
        "the queue of parsed requests: the fast path takes the first off it while aiohttp's loop "
        "idles, and a known head is served before the parser sees it",
    ),
    Private(
        RequestHandler,
        "_waiter",
        "aiohttp's loop waits on it for a request: set only for the requests the fast path "
        "leaves, so answers keep the order of their requests",
    ),
    Private(
        RequestHandler,
        "_request_in_progress",
        "a request the fast path serves counts as in progress for a graceful shutdown",
    ),
    Private(
        RequestHandler, "_handler_waiter", "a graceful shutdown waits on it for the fast answer"
    ),
    Private(
        RequestHandler,
        "_request_count",
        "counts the requests served from a known head, which the parser never saw",
    ),
    Private(RequestHandler, "_close", "the connection closes after its current answer"),
    Private(RequestHandler, "_force_close", "the connection is closing at once"),
    Private(
        RequestHandler,
        "_keepalive_timeout",
        "the idle timer, restarted after a fast answer as aiohttp's loop does after its own",
    ),
    Private(RequestHandler, "_next_keepalive_close_time", "(the idle timer)"),
    Private(RequestHandler, "_keepalive_handle", "(the idle timer)"),
    Private(
        RequestHandler,
        "_process_keepalive",
        "overridden: a connection busy with a fast answer is not idle",
        ("self",),
    ),
    Private(
        RequestHandler,
        "_msg_queue_resume_size",
        "after the fast path takes a request, reading resumes as aiohttp's loop would",
    ),
    Private(RequestHandler, "_resume_reading_if_drained", "(resuming)", ("self",)),
    Private(
        RequestHandler,
        "_handle_request",
        "an HTTP/2 stream's request runs through aiohttp's handling: errors, 504s, finishing",
        ("self", "request", "start_time", "request_handler"),
    ),
    Private(RequestHandler, "_lingering_time", "an HTTP/2 stream answered early lingers as long"),
    Private(RequestHandler, "_tcp_keepalive", "HTTP/2 sets TCP keep-alive as aiohttp would"),
    Private(RequestHandler, "_logging_enabled", "HTTP/2 times a request only for the access log"),
    Private(BaseProtocol, "_parser", "the parser is told when a queued request is taken off"),
    Private(BaseProtocol, "_buffer_paused", "(resuming)"),
    Private(BaseProtocol, "_upgraded", "an upgraded connection's bytes are not requests"),
    Private(
        BaseProtocol,
        "_drain_helper",
        "a client that does not read holds back its next request until it takes the answer",
        ("self",),
    ),
    Private(
        StreamReader,
        "_buffer",
        "a body that arrived with its head is read where it lies, and left for the Application",
    ),
    Private(StreamReader, "_buffer_offset", "(the same: where the unread part of it begins)"),
    Private(StreamReader, "_size", "an HTTP/2 stream's window goes back as its body is read"),
    Private(
        web.BaseRequest,
        "_task",
        "released after an HTTP/2 stream's request, as aiohttp does",
        instance=True,
    ),
    Private(
        web.Server,
        "_kwargs",
        "HTTP/1.1 and HTTP/2 protocols get its handler arguments (timeouts, access log, "
        "limits) as aiohttp's own RequestHandler does",
        instance=True,
    ),
    Private(
        web_protocol,
        "_ErrInfo",
        "a parse error queued in place of a request: its `exc` fails the body a handler reads",
        ("status", "exc", "message"),
    ),
    Private(
        web.BaseSite, "_server", "the listening server our protocol selector runs, closed on stop"
    ),
    Private(web.TCPSite, "_bound_port", "the port bound, as TCPSite.start records it"),
)


class HandlerInternals(RequestHandler):
    """aiohttp's RequestHandler with the state the connections act on reachable by name."""

    __slots__ = ("event_loop", "web_server")
    web_server: web.Server | None  # None once an HTTP/2 connection is lost

    def __init__(
        self, manager: web.Server, *, loop: asyncio.AbstractEventLoop, **kwargs: Any
    ) -> None:
        super().__init__(manager, loop=loop, **kwargs)
        self.event_loop = loop
        self.web_server = manager

    @property
    def request_queue(self) -> deque[Queued]:
        """The parsed requests aiohttp's loop has yet to take, in order."""
        queue: deque[Queued] = self._messages
        return queue

    @property
    def loop_waiter(self) -> asyncio.Future[None] | None:
        """What aiohttp's loop waits on for the next request (None while it serves one)."""
        return self._waiter

    def parse_quietly(self, data: bytes) -> None:
        """aiohttp's parser takes `data`, queueing what it completes, without waking aiohttp's
        loop for it (the caller decides who serves it)."""
        waiter = self._waiter
        self._waiter = None
        try:
            self.parse(data)
        finally:
            self._waiter = waiter

    def parse(self, data: bytes) -> None:
        """aiohttp's parser takes `data` (a subclass adds to it)."""
        RequestHandler.data_received(self, data)

    @property
    def reading_paused(self) -> bool:
        """Whether a body's reader paused the transport (its buffer reached its high water),
        which reads again only once the body is read from."""
        paused: bool = self._reading_paused
        return paused

    def take_first_queued(self) -> None:
        """Take the first queued request off the queue, as aiohttp's loop does."""
        self._messages.popleft()
        if self._parser is not None:
            self._parser.message_consumed()

    def resume_reading_if_drained(self) -> None:
        """Read again if reading paused for a full queue and the queue has drained (re-parses
        what was held back, which comes back to `data_received`)."""
        if self._buffer_paused and len(self._messages) <= self._msg_queue_resume_size:
            self._resume_reading_if_drained()

    @property
    def closing(self) -> bool:
        """Whether the connection closes after its current answer, or at once."""
        return self._close or self._force_close

    @property
    def force_closing(self) -> bool:
        """Whether the connection is closing at once."""
        return self._force_close

    @property
    def upgraded(self) -> bool:
        """Whether the connection was upgraded (what follows is not HTTP/1.1 requests)."""
        return self._upgraded

    @property
    def request_in_progress(self) -> bool:
        """Whether a request is being answered (by aiohttp's loop or from outside it)."""
        return self._request_in_progress

    def request_started(self) -> None:
        """A request served outside aiohttp's loop began: a graceful shutdown waits for it."""
        self._request_in_progress = True

    def request_finished(self) -> None:
        """That request was answered (or its client went)."""
        self._request_in_progress = False
        waiter = self._handler_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def linger_then_close(self, seconds: float) -> None:
        """Close once the answer written is read: the write side ends now (with TLS, which
        cannot end it alone, at the close), what still arrives is dropped, and the connection
        closes `seconds` later. Closed at once while the client still sends, its bytes arriving
        after the close would make the kernel reset the connection, and the client could lose
        the answer unread."""
        self._close = True  # aiohttp's data_received drops what arrives from now on
        transport = self.transport
        if transport is not None and transport.can_write_eof():
            transport.write_eof()
        self.event_loop.call_later(seconds, self.force_close)

    def count_requests(self, count: int) -> None:
        """`count` more requests on this connection that aiohttp's parser did not see."""
        self._request_count += count

    def keep_alive_from_now(self) -> None:
        """aiohttp's idle timer, restarted as its loop does after each answer."""
        if self._keepalive_timeout <= 0:
            return
        close_time = self.event_loop.time() + self._keepalive_timeout
        self._next_keepalive_close_time = close_time
        if self._keepalive_handle is None:
            self._keepalive_handle = self.event_loop.call_at(close_time, self._process_keepalive)

    def busy(self) -> bool:
        """Whether something outside aiohttp's loop serves the connection (then not idle)."""
        return False

    def _process_keepalive(self) -> None:
        if self.busy():  # the answer restarts the timer
            self._keepalive_handle = None
            return
        super()._process_keepalive()

    async def wait_drained(self) -> None:
        """Wait while the socket's write buffer is above its high-water mark."""
        await self._drain_helper()

    @property
    def lingering_time(self) -> float:
        """How long an upload answered early is read and dropped (handler argument)."""
        return self._lingering_time

    @property
    def tcp_keepalive(self) -> bool:
        """Whether connections get TCP keep-alive (handler argument)."""
        return self._tcp_keepalive

    @property
    def access_logging(self) -> bool:
        """Whether an access log is kept (then requests are timed for it)."""
        return self._logging_enabled

    async def run_request(
        self,
        request: web.BaseRequest,
        start_time: float | None,
        handler: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]],
    ) -> None:
        """Run `request` through aiohttp's handling (its errors, 504s, finishing the answer)."""
        await self._handle_request(request, start_time, handler)


def buffered_body(payload: StreamReader) -> bytes:
    """A body its reader holds whole and unread, left there for the general path."""
    if isinstance(payload, EmptyStreamReader):
        return b""
    body = b"".join(payload._buffer)
    offset: int = payload._buffer_offset
    return body[offset:] if offset else body


def unread_size(reader: StreamReader) -> int:
    """Body bytes a reader holds that the handler has not read yet."""
    size: int = reader._size
    return size


def release_task(request: web.BaseRequest) -> None:
    """Drop a finished request's reference to its task (a cycle aiohttp breaks the same way)."""
    request._task = None  # type: ignore[assignment]


def handler_kwargs(server: web.Server) -> dict[str, Any]:
    """The handler arguments a web.Server gives each RequestHandler it makes."""
    kwargs: dict[str, Any] = server._kwargs
    return kwargs


def set_listening(site: web.TCPSite, server: asyncio.AbstractServer, port: int) -> None:
    """Record a site's listening server and bound port, as TCPSite.start does."""
    site._server = server
    site._bound_port = port
