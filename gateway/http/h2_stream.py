"""Per-stream pieces of the HTTP/2 transport: stream state and the aiohttp response writer."""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING, Any

from aiohttp.abc import AbstractStreamWriter
from aiohttp.base_protocol import BaseProtocol
from aiohttp.compression_utils import ZLibCompressor
from aiohttp.streams import StreamReader
from multidict import CIMultiDict

from .aiohttp_private import unread_size

if TYPE_CHECKING:
    from .http2 import H2Protocol

__all__ = ("H2Stream", "H2StreamWriter", "response_headers")

# RFC 9113 §8.2.2: connection-specific fields must not appear in HTTP/2 messages.
_CONNECTION_SPECIFIC = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te"}
)
# Same rule aiohttp's HTTP/1.1 serializer applies, so an app fails alike on both protocols.
_FORBIDDEN_CHARS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")

Headers = list[tuple[bytes, bytes]]


def response_headers(status_line: str, headers: CIMultiDict[str]) -> tuple[Headers, int]:
    """Turn aiohttp's status line and headers into an HTTP/2 header list and its HTTP/1 size.

    The size mirrors what aiohttp's HTTP/1.1 writer would count in ``output_size``.
    """
    out: Headers = [(b":status", status_line.split(" ", 2)[1].encode())]
    size = len(status_line) + 4
    text: list[str] = []
    for name, value in headers.items():
        text += (name, value)
        lname = name.lower()
        if lname not in _CONNECTION_SPECIFIC:
            out.append((lname.encode(), value.encode()))
            size += len(name) + len(value) + 4
    # One search over every name and value: a tab, allowed in values, cannot join two controls.
    if _FORBIDDEN_CHARS.search("\t".join(text)):
        raise ValueError("Forbidden control character detected in headers.")
    return out, size


class H2Stream(BaseProtocol):
    """State of one HTTP/2 stream.

    It doubles as the ``protocol`` of the request's StreamReader: aiohttp calls
    ``resume_reading()`` whenever the handler consumes body bytes, which is when
    we hand flow-control window back to the client.
    """

    __slots__ = (
        "_owner",
        "_window_waiter",
        "acked",
        "held",
        "local_ended",
        "reader",
        "received",
        "remote_ended",
        "reset",
        "started",
        "stream_id",
        "task",
    )

    def __init__(self, owner: H2Protocol, stream_id: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self._owner = owner
        self._window_waiter: asyncio.Future[None] | None = None
        self.stream_id = stream_id
        self.reader: StreamReader | None = None
        # Body chunks held, with no reader yet, while the request may be answered directly.
        self.held: list[bytes] | None = None
        # What answers it: the handler's task, or what a subclass serves it directly.
        self.task: asyncio.Future[Any] | None = None
        self.received = 0
        self.acked = 0
        self.remote_ended = False
        self.local_ended = False
        self.reset = False
        self.started = False  # whether its handler (or direct answer) has begun

    @property
    def connected(self) -> bool:
        """Whether reads can still make progress (checked by StreamReader before waiting)."""
        return not self.reset and self._owner.connected

    @property
    def unconsumed(self) -> int:
        """Body bytes received but not yet read by the handler."""
        reader = self.reader
        return unread_size(reader) if reader is not None else 0

    def pause_reading(self) -> None:
        """Ignore: the stream's receive window, not transport pausing, bounds its buffer."""

    def resume_reading(self, resume_parser: bool = True) -> None:
        """The handler consumed body bytes: return that much window to the client."""
        self._owner.body_consumed(self)

    async def wait_for_window(self) -> None:
        """Block until a WINDOW_UPDATE, a settings change, a reset or connection loss."""
        waiter = self._window_waiter = self._owner.event_loop.create_future()
        try:
            await waiter
        finally:
            self._window_waiter = None

    def wake(self) -> None:
        """Release a writer blocked in ``wait_for_window``."""
        waiter = self._window_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class H2StreamWriter(AbstractStreamWriter):
    """aiohttp response writer that emits HEADERS/DATA frames on one HTTP/2 stream."""

    def __init__(self, protocol: H2Protocol, stream: H2Stream) -> None:
        self._protocol = protocol
        self._stream = stream
        self._headers: Headers | None = None
        self._headers_size = 0
        self._headers_sent = False
        self._compress: ZLibCompressor | None = None
        self._eof = False
        self.length: int | None = None
        self.on_body_write = None

    def enable_chunking(self) -> None:
        """Ignore: HTTP/2 frames the body itself, chunked coding does not exist."""

    def enable_compression(self, encoding: str = "deflate", strategy: int | None = None) -> None:
        self._compress = ZLibCompressor(encoding=encoding, strategy=strategy)

    async def write_headers(self, status_line: str, headers: CIMultiDict[str]) -> None:
        self._headers, self._headers_size = response_headers(status_line, headers)

    def send_headers(self) -> None:
        if not self._headers_sent:
            self._send_headers(end_stream=False)

    def _send_headers(self, *, end_stream: bool) -> None:
        headers = self._headers
        if headers is None:
            raise RuntimeError("Response headers were not prepared")
        self._headers_sent = True
        self.output_size += self._headers_size
        self._protocol.send_headers(self._stream, headers, end_stream=end_stream)

    async def write(self, chunk: bytes | bytearray | memoryview) -> None:
        if self._compress is not None:
            chunk = await self._compress.compress(chunk)
        size = chunk.nbytes if isinstance(chunk, memoryview) else len(chunk)
        if self.length is not None:
            # Like aiohttp's HTTP/1.1 writer: bytes beyond the declared length are dropped.
            if size > self.length:
                chunk = chunk[: self.length]
                size = self.length
            self.length -= size
        if not self._headers_sent:
            self._send_headers(end_stream=False)
        if not size:
            return
        self.buffer_size += size
        self.output_size += size
        await self._protocol.send_data(self._stream, chunk, end_stream=False)
        if (notify := self.on_body_write) is not None:
            notify(size, self.output_size)

    async def write_eof(self, chunk: bytes = b"") -> None:
        if self._eof:
            return
        self._eof = True
        if self._compress is not None:
            head = await self._compress.compress(chunk) if chunk else b""
            chunk = head + self._compress.flush()
        if not chunk and not self._headers_sent:
            self._send_headers(end_stream=True)
            return
        if not self._headers_sent:
            self._send_headers(end_stream=False)
        self.output_size += len(chunk)
        await self._protocol.send_data(self._stream, chunk, end_stream=True)

    async def drain(self) -> None:
        await self._protocol.drain()
