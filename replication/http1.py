"""A lean HTTP/1.1 client for forwarded requests: keep-alive connections pooled per node, a
request written in one piece, its answer read by Content-Length (or chunks, or to the end).

It replaces aiohttp's client on the forwarding path only because of its cost: aiohttp spends
100-200 µs of CPU on each call (request object, connector, timers, cookie jar, tracing hooks),
about as much as serving a one-record produce, where this spends 20-30 µs (docs/PERFORMANCE.md,
"Workers"). The nodes talk to each other only, so this speaks what the gateway answers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import quote, urlsplit

MAX_HEAD = 64 * 1024  # a status line and headers larger than this are refused
IDLE_S = 60.0  # a pooled connection idle longer is closed (the gateway closes at 75 s)
DRAIN_ABOVE = 256 * 1024  # wait for the socket to take a request's bytes past this backlog
_TARGET_SAFE = "/?#&=%:@!$'()*+,;[]~"  # kept as they are in a request target
_NO_BODY = frozenset({204, 304})


class ConnectFailed(OSError):
    """The connection could not be made: the request surely never reached the node."""


@dataclass
class Reply:
    status: int
    headers: list[tuple[str, str]]
    body: bytes


@dataclass
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    idle_since: float = field(default_factory=time.monotonic)

    def usable(self) -> bool:
        return (
            not self.writer.transport.is_closing()
            and not self.reader.at_eof()
            and time.monotonic() - self.idle_since < IDLE_S
        )

    def close(self) -> None:
        self.writer.transport.abort()


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
        self, url: str, method: str, target: str, headers: Mapping[str, str], body: bytes
    ) -> Reply:
        """One call; ConnectFailed if no connection could be made, else OSError, ValueError or
        asyncio.IncompleteReadError once the request may have been sent."""
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
        try:
            connection.writer.writelines([b"".join(head), body])
            if connection.writer.transport.get_write_buffer_size() > DRAIN_ABOVE:
                await connection.writer.drain()
            reply, reusable = await _read_reply(connection.reader, method)
        except BaseException:
            connection.close()
            raise
        if reusable:
            connection.idle_since = time.monotonic()
            self._idle.setdefault(key, []).append(connection)
        else:
            connection.close()
        return reply

    def _take(self, key: tuple[str, int]) -> _Connection | None:
        idle = self._idle.get(key)
        while idle:
            connection = idle.pop()
            if connection.usable():
                return connection
            connection.close()
        return None

    async def _connect(self, host: str, port: int) -> _Connection:
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                reader, writer = await asyncio.open_connection(host, port, limit=MAX_HEAD)
        except (OSError, TimeoutError) as exc:
            raise ConnectFailed(f"cannot connect to {host}:{port}: {exc!r}") from exc
        return _Connection(reader, writer)

    async def close(self) -> None:
        for idle in self._idle.values():
            for connection in idle:
                connection.close()
        self._idle.clear()


async def _read_reply(reader: asyncio.StreamReader, method: str) -> tuple[Reply, bool]:
    """The answer (interim 1xx answers skipped) and whether the connection can be reused."""
    while True:
        try:
            raw = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError as exc:
            raise ValueError(f"an answer's head exceeds {MAX_HEAD} bytes") from exc
        lines = raw[:-4].decode("utf-8", "surrogateescape").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        status = int(rest[:3])
        if status >= 200:
            break
    headers = []
    length: int | None = None
    chunked = False
    close = version == "HTTP/1.0"
    for line in lines[1:]:
        name, _, value = line.partition(":")
        value = value.strip()
        lowered = name.lower()
        if lowered == "content-length":
            length = int(value)
        elif lowered == "transfer-encoding":
            chunked = value.lower().endswith("chunked")
        elif lowered == "connection":
            close = close or "close" in value.lower()
        headers.append((name, value))
    if method == "HEAD" or status in _NO_BODY:
        body = b""
    elif chunked:
        body = await _read_chunks(reader)
    elif length is not None:
        body = await reader.readexactly(length)
    else:
        body, close = await reader.read(), True
    return Reply(status, headers, body), not close


async def _read_chunks(reader: asyncio.StreamReader) -> bytes:
    parts: list[bytes] = []
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0].strip(), 16)
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers, if any
                pass
            return b"".join(parts)
        parts.append((await reader.readexactly(size + 2))[:-2])
