"""The delivery client: POSTs to subscription endpoints over HTTP/1.1 keep-alive connections
pooled per origin, each an asyncio Protocol. The requests of a loop turn are written at its
end, one write per connection (the origin's request line and fixed headers rendered once);
the answer is read as its bytes arrive by the sans-IO reader the calls to other nodes use too
(`replication.http1_reader`), unless a read brings bytes that were a whole answer before: an
endpoint tends to answer alike, byte for byte, so what they were read as is remembered.

It replaces aiohttp's client on the delivery path for its cost: aiohttp's per-request
machinery (request and response objects, connector, timers, tracing hooks) was about 28% of
the gateway's CPU delivering one record a request (docs/PERFORMANCE.md, "Push subscriptions"). As
aiohttp did, it follows no redirects (a 3xx is an answer), reads at most `body_limit` bytes of
an answer (a longer one is cut there and its connection closed), and refuses names that
resolve to loopback or link-local addresses unless allowed (endpoints.py)."""

from __future__ import annotations

import asyncio
import ipaddress
import math
import socket
import ssl
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import NamedTuple, cast
from urllib.parse import urlsplit

from groups.subscriptions.endpoints import blocked_address
from replication.http1_reader import AnswerError, AnswerReader

IDLE_S = 15.0  # a pooled connection idle this long is closed (aiohttp's keep-alive default)
# Answers remembered by their bytes (forgotten together when full), each of at most so many.
KNOWN_ANSWERS = 256
KNOWN_ANSWER_MAX_BYTES = 2048
USER_AGENT = "sluice-subscriptions/1"


class Response(NamedTuple):
    """An endpoint's answer: headers by lower-case name (the last of a repeated one), and at
    most the body limit's bytes of its body. Shared by the requests answered with the same
    bytes: read only."""

    status: int
    reason: str
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True, slots=True)
class Origin:
    """Where requests to one endpoint URL go, and their request line and fixed headers."""

    key: tuple[str, str, int]  # scheme, host, port: the pool's key
    host: str
    port: int
    tls: bool
    head: bytes  # "POST target HTTP/1.1", Host and User-Agent, each line ended


def origin_of(url: str) -> Origin:
    """An endpoint URL's origin (URLs are checked when a subscription is stored)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an absolute http(s) URL")
    tls = parts.scheme == "https"
    port = parts.port or (443 if tls else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    head = (
        f"POST {target} HTTP/1.1\r\nHost: {parts.netloc}\r\nUser-Agent: {USER_AGENT}\r\n"
    ).encode("ascii")
    host = parts.hostname
    return Origin((parts.scheme, host, port), host, port, tls, head)


# A request's end: (request, answer, None) or (request, None, why there was none).
Answered = Callable[["Request", "Response | None", "BaseException | None"], None]
TIMER_SLACK_S = 0.001  # a deadline this close counts as passed (the loop's timers are in ms)


class Request:
    """One request on a connection: how much of its answer's body is kept (`body_limit`), the
    reader of its answer once one is needed, its deadline (loop time) and the
    callback its end is handed to, at once, in the loop turn that ends it (no future, no
    timer of its own: a request a few µs cheaper)."""

    __slots__ = ("answered", "body_limit", "connection", "deadline", "reader")

    def __init__(
        self, connection: _Connection, body_limit: int, deadline: float, answered: Answered
    ) -> None:
        self.connection = connection
        self.body_limit = body_limit
        self.reader: AnswerReader | None = None
        self.deadline = deadline
        self.answered = answered

    def cancel(self) -> None:
        """Give the request up: if it still waits, its connection is dropped, and the
        requests behind it there fail (their answers would come after its own)."""
        self.connection.give_up(self, AnswerError("a request before it was cancelled"))


class _Connection(asyncio.Protocol):
    """One connection to an origin: up to `depth` requests written before their answers,
    which come back in the order of the requests (HTTP/1.1 pipelining; 1: one at a time).

    The requests of one event loop turn go out at its end, in one write per connection. One
    timer per connection watches its requests' deadlines: armed at the earliest, moved on
    when it fires early for the requests now waiting."""

    def __init__(self, pool: DeliveryClient, origin: Origin, depth: int) -> None:
        self.pool = pool
        self.origin = origin
        self.depth = depth
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.pending: deque[Request] = deque()
        self.outbox: list[bytes] = []  # requests of this turn, not yet written
        self.reserved = 0  # requests promised a place here, not yet sent
        self.listed = False  # on the pool's list of connections with room
        self.connected: asyncio.Future[None] = self.loop.create_future()
        self.opening: asyncio.Future[None] | None = None
        self.closed = False
        self.idle_since = 0.0
        self.key = (*origin.key, depth)  # the pool's: connections of one depth are pooled apart
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at = math.inf

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        if self.closed:
            self.transport.abort()  # given up on while it was being opened
        elif not self.connected.done():
            self.connected.set_result(None)

    def opened(self, opening: asyncio.Future[None]) -> None:
        """Opening the socket ended: if it failed, so do the requests that waited for it."""
        if opening.cancelled():
            self._fail(ConnectionError("opening the connection was cancelled"))
        elif opening.exception() is not None:
            self._fail(cast(BaseException, opening.exception()))

    def send(
        self, data: bytes, body: bytes, body_limit: int, deadline: float, answered: Answered
    ) -> Request:
        """Write one request, `data` its head, at the end of this loop turn; `answered` is
        told how it ended, TimeoutError past `deadline`."""
        assert self.transport is not None and self.reserved > 0
        self.reserved -= 1
        request = Request(self, body_limit, deadline, answered)
        self.pending.append(request)
        if deadline < self.timer_at:
            self._arm(deadline)
        if not self.outbox:
            self.pool.unwritten(self)
        self.outbox += (data, body)
        return request

    def _arm(self, deadline: float) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.loop.call_at(deadline, self._expire)
        self.timer_at = deadline

    def _expire(self) -> None:
        """The timer fired: a request past its deadline fails the connection (and so the
        requests behind it); else the timer moves to the earliest deadline still waiting."""
        self.timer, self.timer_at = None, math.inf
        if not self.pending:
            return
        passed = self.loop.time() + TIMER_SLACK_S
        if any(r.deadline <= passed for r in self.pending):
            self._fail(TimeoutError())
        else:
            self._arm(min(r.deadline for r in self.pending))

    def write_outbox(self) -> None:
        outbox, self.outbox = self.outbox, []
        if not self.closed and self.transport is not None:
            self.transport.writelines(outbox)  # one writev

    @property
    def has_room(self) -> bool:
        return not self.closed and len(self.pending) + self.reserved < self.depth

    def data_received(self, data: bytes) -> None:
        pending = self.pending
        if not pending:
            self.abort()  # bytes nobody asked for: this connection cannot be trusted again
            return
        known = self.pool.known
        while pending:
            request = pending[0]
            answer = request.reader
            if answer is None:  # nothing of its answer read yet
                response = known.get(data)
                if response is not None and len(response.body) <= request.body_limit:
                    pending.popleft()
                    request.answered(request, response, None)
                    self._after_answer()
                    return
                answer = request.reader = AnswerReader(request.body_limit)
                whole = data
            else:
                whole = b""
            try:
                used = answer.feed(data)
            except AnswerError as exc:
                self._fail(exc)
                return
            if not answer.done:
                return
            data = data[used:]
            pending.popleft()
            response = _response(answer)
            request.answered(request, response, None)
            if not answer.reusable:
                self._fail(AnswerError("the connection closed before this request's answer"))
                return
            if whole and not data and len(whole) <= KNOWN_ANSWER_MAX_BYTES:
                # One whole answer in one read: an endpoint tends to answer alike, byte for
                # byte, and the next read of these bytes needs no reader.
                if len(known) >= KNOWN_ANSWERS:
                    known.clear()
                known[whole] = response
            self._after_answer()
            if not data:
                return
        self.abort()  # more bytes than the requests asked for

    def _after_answer(self) -> None:
        """A request's answer was whole and the connection may carry more."""
        if not self.pending:
            self.idle_since = self.loop.time()
        if not self.listed:
            self.pool.release(self)  # it was full: room again

    def _fail(self, exc: BaseException) -> None:
        """Fail every request still waiting here (and those waiting for it to connect), and
        drop the connection."""
        pending, self.pending = self.pending, deque()
        self.abort()
        if not self.connected.done():
            self.connected.set_exception(exc)
            self.connected.exception()  # retrieved: a connection nobody else waited for
        for request in pending:
            request.answered(request, None, exc)

    def eof_received(self) -> bool | None:
        return None  # the transport closes; connection_lost settles an answer in progress

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool.forget(self)
        if not self.pending:
            return
        request = self.pending[0]
        reader = request.reader
        if reader is not None:  # an answer read to the close is whole now
            try:
                reader.closed()
            except AnswerError:
                pass
            else:
                self.pending.popleft()
                request.answered(request, _response(reader), None)
        self._fail(AnswerError(f"the connection closed before the answer was whole: {exc}"))

    def give_up(self, request: Request, exc: BaseException) -> None:
        """`request` was cancelled: if it is still waiting here, fail it and drop the
        connection (the requests behind it on the connection fail with it: their answers
        would come after its own)."""
        if request in self.pending:
            self._fail(exc)

    def abort(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer, self.timer_at = None, math.inf
        if not self.closed:
            self.closed = True
            self.pool.forget(self)
            if self.transport is not None:
                self.transport.abort()
            elif self.opening is not None:
                self.opening.cancel()


def _response(answer: AnswerReader) -> Response:
    """An answer as the dispatcher takes it: headers by lower-case name (the last of a
    repeated one)."""
    headers = {name.lower(): value for name, value in answer.headers}
    return Response(answer.status, answer.reason, headers, answer.body())


class DeliveryClient:
    """Connections to endpoints by origin and pipelining depth: a request goes on a connection
    with room, else a new one, up to `per_origin` (and `limit` in all); idle ones kept for
    IDLE_S."""

    def __init__(
        self,
        allowed_hosts: Collection[str] = (),
        connect_timeout_s: float = 10.0,
        limit: int = 256,
        per_origin: int = 64,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.allowed = frozenset(h.lower() for h in allowed_hosts)
        self.connect_timeout_s = connect_timeout_s
        self.limit = limit
        self.per_origin = per_origin
        self.ssl_context = ssl_context
        self._origins: dict[str, Origin] = {}
        self._ready: dict[tuple[str, str, int, int], list[_Connection]] = {}  # with room
        self._open: dict[tuple[str, str, int, int], set[_Connection]] = {}
        self._total = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._sweeper: asyncio.TimerHandle | None = None
        self._unwritten: list[_Connection] = []  # with requests of this turn to write
        self.known: dict[bytes, Response] = {}  # answers read whole from one read, by its bytes

    def unwritten(self, connection: _Connection) -> None:
        """`connection` has requests to write: they go out at the end of this loop turn, with
        every other connection's, back to back."""
        if not self._unwritten:
            connection.loop.call_soon(self._write)
        self._unwritten.append(connection)

    def _write(self) -> None:
        """The turn's requests, one write a connection after the turn's work: a receiver
        woken by the first finds the next ones while it is still awake."""
        unwritten, self._unwritten = self._unwritten, []
        for connection in unwritten:
            connection.write_outbox()

    def origin(self, url: str) -> Origin:
        found = self._origins.get(url)
        if found is None:
            if len(self._origins) > 4096:
                self._origins.clear()
            found = self._origins[url] = origin_of(url)
        return found

    async def post(
        self,
        url: str,
        head: bytes,
        body: bytes,
        timeout_s: float,
        body_limit: int,
        depth: int = 1,
    ) -> Response:
        """One POST: `head` its header lines past the origin's (Content-Length included,
        ended by the blank line), on a connection taking up to `depth` requests at once;
        TimeoutError past `timeout_s` (connecting included), else OSError if no whole answer
        came. Cancelling it drops the connection."""
        waiter: asyncio.Future[Response] = asyncio.get_running_loop().create_future()

        def answered(_: Request, response: Response | None, error: BaseException | None) -> None:
            if waiter.done():
                return
            if response is not None:
                waiter.set_result(response)
            else:
                waiter.set_exception(cast(BaseException, error))

        request = self.try_send(url, head, body, timeout_s, body_limit, depth, answered)
        if request is None:
            request = await self._connect_and_send(
                url, head, body, timeout_s, body_limit, depth, answered
            )
        try:
            return await waiter
        except asyncio.CancelledError:
            request.cancel()
            raise

    async def _connect_and_send(
        self,
        url: str,
        head: bytes,
        body: bytes,
        timeout_s: float,
        body_limit: int,
        depth: int,
        answered: Answered,
    ) -> Request:
        """`try_send` once a connection with room is open, or opened, for it."""
        origin = self.origin(url)
        deadline = asyncio.get_running_loop().time() + timeout_s
        connection = None
        try:
            async with asyncio.timeout_at(deadline):
                connection = self._take((*origin.key, depth))  # one being opened, if any
                if connection is None:
                    connection = await self._connect(origin, depth)
                if not connection.connected.done():
                    await asyncio.shield(connection.connected)
        except BaseException:
            if connection is not None:
                self.unreserve(connection)
            raise
        return connection.send(origin.head + head, body, body_limit, deadline, answered)

    def try_send(
        self,
        url: str,
        head: bytes,
        body: bytes,
        timeout_s: float,
        body_limit: int,
        depth: int,
        answered: Answered,
    ) -> Request | None:
        """`post` without a coroutine or a future, when a connection with room is open: the
        request, whose end `answered` is told in the loop turn that ends it (TimeoutError
        past `timeout_s`); else None, and the caller posts."""
        origin = self.origin(url)
        connection = self._take((*origin.key, depth))
        if connection is None:
            return None
        if not connection.connected.done():
            self.unreserve(connection)
            return None
        deadline = connection.loop.time() + timeout_s
        return connection.send(origin.head + head, body, body_limit, deadline, answered)

    def _take(self, key: tuple[str, str, int, int]) -> _Connection | None:
        """A connection with room, one place on it reserved; taken off the list of those with
        room if that fills it (the most recently listed first, so that a turn's requests go
        on one connection and share a write)."""
        ready = self._ready.get(key)
        while ready:
            connection = ready[-1]
            if not connection.has_room:
                ready.pop()
                connection.listed = False
                continue
            connection.reserved += 1
            if not connection.has_room:
                ready.pop()
                connection.listed = False
            return connection
        return None

    def unreserve(self, connection: _Connection) -> None:
        """A reserved place that will not be used (its request timed out or was cancelled
        while the connection was being opened)."""
        connection.reserved -= 1
        if not connection.listed:
            self.release(connection)

    def release(self, connection: _Connection) -> None:
        """A connection that has room, onto the list of those with room."""
        if connection.listed or not connection.has_room:
            return
        connection.listed = True
        self._ready.setdefault(connection.key, []).append(connection)
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().call_later(IDLE_S, self._sweep)
        self._wake()

    def forget(self, connection: _Connection) -> None:
        """A connection closed."""
        opened = self._open.get(connection.key)
        if opened is not None and connection in opened:
            opened.discard(connection)
            self._total -= 1
            if not opened:
                del self._open[connection.key]
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _sweep(self) -> None:
        """Close connections idle past IDLE_S."""
        self._sweeper = None
        old = asyncio.get_running_loop().time() - IDLE_S
        for key, ready in list(self._ready.items()):
            for connection in [
                c
                for c in ready
                if c.closed or (not c.pending and not c.reserved and c.idle_since <= old)
            ]:
                ready.remove(connection)
                connection.listed = False
                connection.abort()
            if not ready:
                del self._ready[key]
        if self._ready:
            self._sweeper = asyncio.get_running_loop().call_later(IDLE_S / 2, self._sweep)

    async def _connect(self, origin: Origin, depth: int) -> _Connection:
        """A new connection, once the limits allow one (or one with room, if that comes
        first)."""
        key = (*origin.key, depth)
        while True:
            ready = self._take(key)
            if ready is not None:
                return ready
            opened = self._open.setdefault(key, set())
            if len(opened) < self.per_origin and self._total < self.limit:
                break
            if self._total >= self.limit and self._close_an_idle():
                continue
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter
        connection = _Connection(self, origin, depth)
        connection.reserved = 1
        opened.add(connection)
        self._total += 1
        self.release(connection)  # with a depth above one, others may queue on it at once
        connection.opening = asyncio.ensure_future(self._open_socket(origin, connection))
        connection.opening.add_done_callback(connection.opened)
        return connection

    def _close_an_idle(self) -> bool:
        for ready in self._ready.values():
            for connection in ready:
                if not connection.closed and not connection.pending and not connection.reserved:
                    ready.remove(connection)
                    connection.listed = False
                    connection.abort()
                    return True
        return False

    async def _open_socket(self, origin: Origin, connection: _Connection) -> None:
        addresses = await self._addresses(origin)
        context = None
        if origin.tls:
            if self.ssl_context is None:
                self.ssl_context = ssl.create_default_context()
            context = self.ssl_context
        error: OSError | None = None
        async with asyncio.timeout(self.connect_timeout_s):
            for address in addresses:
                try:
                    await asyncio.get_running_loop().create_connection(
                        lambda: connection,
                        address,
                        origin.port,
                        ssl=context,
                        server_hostname=origin.host if context is not None else None,
                    )
                    return
                except OSError as exc:
                    error = exc
        raise ConnectionError(f"cannot connect to {origin.host}:{origin.port}: {error}")

    async def _addresses(self, origin: Origin) -> list[str]:
        """The addresses to try: a literal as it is, a name's resolved ones, loopback and
        link-local left out unless the host is allowed by name."""
        host = origin.host
        allowed = host.lower() in self.allowed
        try:
            ipaddress.ip_address(host.split("%", 1)[0])
        except ValueError:
            pass
        else:
            if not allowed and blocked_address(host):
                raise ConnectionRefusedError(f"{host} is loopback or link-local (refused)")
            return [host]
        found = await asyncio.get_running_loop().getaddrinfo(
            host, origin.port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
        )
        addresses = list(dict.fromkeys(str(info[4][0]) for info in found))
        kept = addresses if allowed else [a for a in addresses if not blocked_address(a)]
        if not kept:
            raise ConnectionRefusedError(
                f"{host} resolves to loopback or link-local addresses only (refused)"
            )
        return kept

    async def close(self) -> None:
        """Close every connection (requests in flight fail)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for opened in list(self._open.values()):
            for connection in list(opened):
                connection.abort()
        self._ready.clear()
