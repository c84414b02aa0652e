"""Bounded request memory: the bodies of requests being served (HTTP/1.1 and every HTTP/2
stream) may hold at most `max_inflight_request_bytes` in all, and those of one connection (its
HTTP/2 streams) at most `max_connection_inflight_bytes`. A request that would go past either
is answered 503 (SERVER_BUSY, CONNECTION_BUSY) with Retry-After before its body is read; the
first body of a connection always fits its connection's share, so every client progresses."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from gateway.http.problem import Problem
from gateway.settings import Settings


class InflightBodies:
    """The body bytes reserved by the requests being served."""

    def __init__(self, settings: Settings) -> None:
        self.limit = settings.max_inflight_request_bytes
        self.connection_limit = settings.max_connection_inflight_bytes
        self.max_body = settings.max_request_bytes
        self.reserved = 0
        self.by_connection: dict[object, int] = {}  # protocol -> bytes, while above 0

    def room_for(self, size: int, connection: object) -> bool:
        """Whether a body of `size` bytes fits the limits: the connection's share (once it
        holds any), and the whole."""
        held = self.by_connection.get(connection, 0)
        if held and held + size > self.connection_limit:
            return False
        return self.reserved + size <= self.limit

    def reserve(self, size: int, connection: object) -> None:
        """Count a body being served in the account, until `release`."""
        self.reserved += size
        self.by_connection[connection] = self.by_connection.get(connection, 0) + size

    def release(self, size: int, connection: object) -> None:
        self.reserved -= size
        left = self.by_connection.pop(connection) - size
        if left:
            self.by_connection[connection] = left


INFLIGHT = web.AppKey("inflight_bodies", InflightBodies)


def reserve_size(request: web.Request, max_request_bytes: int) -> int:
    """What a request's body may occupy: its Content-Length, else (chunked, or decoded from a
    Content-Encoding) the most that the size limit lets through; nothing without a body."""
    if request.content_length is not None and "Content-Encoding" not in request.headers:
        return min(request.content_length, max_request_bytes)
    return max_request_bytes if request.body_exists else 0


@web.middleware
async def backpressure_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    inflight = request.app[INFLIGHT]
    size = reserve_size(request, inflight.max_body)
    if not size:
        return await handler(request)
    connection = request.protocol
    held = inflight.by_connection.get(connection, 0)
    if held and held + size > inflight.connection_limit:
        raise Problem(
            503,
            "CONNECTION_BUSY",
            f"request bodies in progress on this connection hold {held} of "
            f"{inflight.connection_limit} bytes; this one needs {size}: retry shortly",
            headers={"Retry-After": "1"},
        )
    if inflight.reserved + size > inflight.limit:
        raise Problem(
            503,
            "SERVER_BUSY",
            f"request bodies in progress hold {inflight.reserved} of {inflight.limit} bytes; "
            f"this one needs {size}: retry shortly",
            headers={"Retry-After": "1", "Connection": "close"},
        )
    inflight.reserve(size, connection)
    try:
        return await handler(request)
    finally:
        inflight.release(size, connection)
