"""The floor of a Python server on this machine: uvloop and a bare asyncio Protocol that finds
each HTTP/1.1 request's end (its head and Content-Length) and writes a canned 200 the size of a
one-record produce's answer. No parsing beyond that, no routing, no log: what any Python
request path here pays before doing work (`loadtests.request_cost`'s "floor" cell).

    python -m loadtests.floor_server PORT     # prints "listening on PORT" once it accepts
"""

from __future__ import annotations

import asyncio
import re
import sys
from typing import cast

import uvloop

HEAD_END = b"\r\n\r\n"
CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d{1,9})", re.IGNORECASE)
MAX_PENDING = 1 << 20  # a client that sends more without a whole request is hung up on
# The listen queue of the benchmarks' own servers, as the gateway's (`listen_backlog`): a cell's
# connections open at once, and one the kernel drops waits a second to try again.
LISTEN_BACKLOG = 4096
_BODY = b'{"results":[{"partition":0,"base_offset":1234567,"count":1}]}'
ANSWER = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
    b"Date: Mon, 23 Nov 2026 08:00:00 GMT\r\nServer: Python/3.11 aiohttp/3.14.5\r\n\r\n%s"
    % (len(_BODY), _BODY)
)


class HttpRequests(asyncio.Protocol):
    """A connection's HTTP/1.1 requests, found by their head's end and Content-Length and
    handed to `answer` whole and in order (the body is not looked at); a client that sends
    more than `max_pending` bytes without a whole request is hung up on."""

    max_pending = MAX_PENDING

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.pending = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's: not a subclass

    def data_received(self, data: bytes) -> None:
        buf = self.pending + data if self.pending else data
        while True:
            end = buf.find(HEAD_END)
            if end < 0:
                break
            length = CONTENT_LENGTH.search(buf, 0, end + 2)
            size = end + 4 + (int(length.group(1)) if length else 0)
            if len(buf) < size:
                break
            self.answer(buf[: end + 2])
            buf = buf[size:]
        self.pending = buf
        if len(buf) > self.max_pending and self.transport is not None:
            self.transport.close()

    def answer(self, head: bytes) -> None:
        """Answer one request, given its head (the request line and headers, CRLF-ended)."""
        raise NotImplementedError


class FloorProtocol(HttpRequests):
    """Answers every whole request on the connection, in order, with ANSWER."""

    def answer(self, head: bytes) -> None:
        assert self.transport is not None
        self.transport.write(ANSWER)


async def serve(port: int) -> None:
    server = await asyncio.get_running_loop().create_server(
        FloorProtocol, "127.0.0.1", port, backlog=LISTEN_BACKLOG
    )
    print(f"listening on {server.sockets[0].getsockname()[1]}", flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(serve(int(sys.argv[1])))
