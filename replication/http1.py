"""A lean HTTP/1.1 client for forwarded requests: keep-alive connections pooled per node, a
request written in one piece, its answer read by the shared sans-IO reader
(`replication.http1_reader`) as the bytes arrive, a body kept as they came and joined once.

It replaces aiohttp's client on the forwarding path only because of its cost: aiohttp spends
100-200 µs of CPU on each call (request object, connector, timers, cookie jar, tracing hooks),
about as much as serving a one-record produce, where this spends 20-30 µs (docs/PERFORMANCE.md,
"Workers"). The nodes talk to each other only, so this speaks what the gateway answers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast
from urllib.parse import quote, urlsplit

from replication.http1_reader import AnswerError, AnswerReader

IDLE_S = 60.0  # a pooled connection idle longer is closed (the gateway closes at 75 s)
DRAIN_ABOVE = 256 * 1024  # wait for the socket to take a request's bytes past this backlog
_TARGET_SAFE = "/?#&=%:@!$'()*+,;[]~"  # kept as they are in a request target


class ConnectFailed(OSError):
    """The connection could not be made: the request surely never reached the node."""


@dataclass
class Reply:
    status: int
    headers: list[tuple[str, str]]
    body: bytes


class _Connection(asyncio.Protocol):
    """One keep-alive connection to a node, one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.reader: AnswerReader | None = None  # the answer being read
        self.answered: asyncio.Future[AnswerReader] | None = None
        self.drained: asyncio.Future[None] | None = None  # while the socket's buffer is full
        self.broken = False  # closed, or it sent bytes nobody asked for
        self.idle_since = time.monotonic()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.transport.set_write_buffer_limits(high=DRAIN_ABOVE)

    def usable(self) -> bool:
        return (
            not self.broken
            and self.transport is not None
            and not self.transport.is_closing()
            and time.monotonic() - self.idle_since < IDLE_S
        )

    async def exchange(self, head: bytes, body: bytes, reader: AnswerReader) -> AnswerReader:
        """Write a request and read its answer with `reader`."""
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        self.reader, self.answered = reader, loop.create_future()
        self.transport.writelines((head, body))
        if self.drained is not None:  # past DRAIN_ABOVE: until the socket takes more
            await self.drained
        return await self.answered

    def pause_writing(self) -> None:
        if self.drained is None:
            self.drained = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        drained, self.drained = self.drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    def data_received(self, data: bytes) -> None:
        reader = self.reader
        if reader is None:
            self.broken = True  # bytes nobody asked for: this connection cannot be trusted
            self.close()
            return
        try:
            used = reader.feed(data)
        except AnswerError as exc:
            self._settle(exc)
            return
        if reader.done:
            self.broken = self.broken or used < len(data)
            self._settle(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.broken = True
        self.resume_writing()
        if self.reader is not None:
            try:
                self.reader.closed()
            except AnswerError as error:
                self._settle(error)
                return
            self._settle(None)

    def _settle(self, error: BaseException | None) -> None:
        reader, answered = self.reader, self.answered
        self.reader = self.answered = None
        if answered is None or answered.done():
            return
        if error is None and reader is not None:
            answered.set_result(reader)
        else:
            self.broken = True
            answered.set_exception(error or AnswerError("no answer"))

    def close(self) -> None:
        self.broken = True
        if self.transport is not None:
            self.transport.abort()


class Http1Pool:
    """Connections to other nodes by (host, port); as many as calls in progress need."""

    def __init__(self, connect_timeout_s: float = 5.0) -> None:
        self.connect_timeout_s = connect_timeout_s
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._origins: dict[str, tuple[str, int, bytes]] = {}

    def _origin(self, url: str) -> tuple[str, int, bytes]:
        origin = self._origins.get(url)
        if origin is None:
            parts = urlsplit(url)
            if parts.scheme != "http" or parts.hostname is None:
                raise ValueError(f"{url!r}: nodes are reached over http://HOST:PORT")
            port = parts.port or 80
            origin = self._origins[url] = (parts.hostname, port, parts.netloc.encode("idna"))
        return origin

    async def request(
        self,
        url: str,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes,
        timeout_s: float | None = None,
    ) -> Reply:
        """One call; ConnectFailed if no connection could be made, else OSError (AnswerError
        for an answer that cannot be read, TimeoutError for none within `timeout_s` of the
        connection) once the request may have been sent."""
        host, port, netloc = self._origin(url)
        key = (host, port)
        head = [
            f"{method} {quote(target, safe=_TARGET_SAFE)} HTTP/1.1\r\n".encode(),
            b"Host: " + netloc + b"\r\n",
        ]
        for name, value in headers.items():
            head.append(f"{name}: {value}\r\n".encode("utf-8", "surrogateescape"))
        head.append(b"Content-Length: %d\r\n\r\n" % len(body))
        connection = self._take(key) or await self._connect(host, port)
        reader = AnswerReader(bodiless=method == "HEAD")
        try:
            async with asyncio.timeout(timeout_s):
                await connection.exchange(b"".join(head), body, reader)
        except BaseException:
            connection.close()
            raise
        if reader.reusable and not connection.broken:
            connection.idle_since = time.monotonic()
            self._idle.setdefault(key, []).append(connection)
        else:
            connection.close()
        return Reply(reader.status, reader.headers, reader.body())

    def _take(self, key: tuple[str, int]) -> _Connection | None:
        idle = self._idle.get(key)
        while idle:
            connection = idle.pop()
            if connection.usable():
                return connection
            connection.close()
        return None

    async def _connect(self, host: str, port: int) -> _Connection:
        connection = _Connection()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                await asyncio.get_running_loop().create_connection(lambda: connection, host, port)
        except (OSError, TimeoutError) as exc:
            raise ConnectFailed(f"cannot connect to {host}:{port}: {exc!r}") from exc
        return connection

    async def close(self) -> None:
        for idle in self._idle.values():
            for connection in idle:
                connection.close()
        self._idle.clear()
