"""Server-Sent Events on an aiohttp stream: an event's framing, and a writer that cuts off a
client too slow to take what it is sent (a stream never grows the server's memory)."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import orjson
from aiohttp import HttpVersion, web

from gateway.http.problem import Problem

EVENT_STREAM = "text/event-stream"
RETRY_MS = 1000  # how soon a disconnected EventSource comes back
SLOW_READER_S = 30.0  # a chunk the client has not taken by then ends its stream
HEADERS = {
    "Content-Type": EVENT_STREAM,
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",  # nginx: pass events on as they come
}
HEARTBEAT = b": heartbeat\n\n"
log = logging.getLogger(__name__)


def event(kind: str, data: bytes, cursor: str | None = None) -> bytes:
    """One event; a line break inside the data (stored JSON may hold some) starts another
    `data:` line, which EventSource joins back with a newline."""
    lines = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n").replace(b"\n", b"\ndata: ")
    head = b"event: %s\n" % kind.encode()
    if cursor is not None:
        head = b"id: %s\n%s" % (cursor.encode(), head)
    return b"%sdata: %s\n\n" % (head, lines)


def problem_event(problem: Problem) -> bytes:
    """The `problem` event a stream ends with (not `error`: that name is EventSource's own)."""
    doc = {"status": problem.status, "code": problem.code, "detail": problem.detail}
    return event("problem", orjson.dumps(doc))


class EventWriter:
    """Writes a stream's chunks, one at a time; a chunk the client has not taken within
    SLOW_READER_S ends the stream (`cut_off`)."""

    def __init__(self, response: web.StreamResponse, what: str) -> None:
        self.response = response
        self.what = what  # for the log line of a cut-off
        self.cut_off = False

    async def send(self, chunk: bytes) -> bool:
        """Write a chunk; False once the client is gone or too slow to take it (then told so,
        if it ever reads again, and cut off)."""
        try:
            async with asyncio.timeout(SLOW_READER_S):
                await self.response.write(chunk)
        except TimeoutError:
            detail = f"the client took no events for {SLOW_READER_S:.0f} s"
            with contextlib.suppress(Exception):
                slow = problem_event(Problem(503, "SLOW_READER", detail))
                async with asyncio.timeout(1.0):
                    await self.response.write(slow)
            log.info("an event stream of %s was cut off: %s", self.what, detail)
            self.cut_off = True
            return False
        except (ConnectionError, RuntimeError):  # the client went (aiohttp: closing transport)
            return False
        return True

    def finish(self, request: web.Request) -> web.StreamResponse:
        """The handler's answer once the stream ended. A cut-off one ends as when the client
        goes: HTTP/1.1 drops the connection and what it buffered, HTTP/2 resets the stream
        (the connection's other streams go on)."""
        if not self.cut_off:
            return self.response
        if request.version < HttpVersion(2, 0) and request.transport is not None:
            request.transport.abort()
        raise asyncio.CancelledError
