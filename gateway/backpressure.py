"""Bounded request memory: the bodies of requests being served (HTTP/1.1 and every HTTP/2
stream) may hold at most `max_inflight_request_bytes` in all. A request that would go past
it is answered 503 SERVER_BUSY with Retry-After before its body is read."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from gateway.problems import Problem
from gateway.settings import Settings


class InflightBodies:
    """The body bytes reserved by the requests being served."""

    def __init__(self, settings: Settings) -> None:
        self.limit = settings.max_inflight_request_bytes
        self.max_body = settings.max_request_bytes
        self.reserved = 0


INFLIGHT = web.AppKey("inflight_bodies", InflightBodies)


def reserve_size(request: web.Request, max_request_bytes: int) -> int:
    """What a request's body may occupy: its Content-Length, else (chunked) the most that
    the size limit lets through; nothing for a request without a body."""
    if request.content_length is not None:
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
    if inflight.reserved + size > inflight.limit:
        raise Problem(
            503,
            "SERVER_BUSY",
            f"request bodies in progress hold {inflight.reserved} of {inflight.limit} bytes; "
            f"this one needs {size}: retry shortly",
            headers={"Retry-After": "1", "Connection": "close"},
        )
    inflight.reserved += size
    try:
        return await handler(request)
    finally:
        inflight.reserved -= size
