"""The quota middleware: hold each principal to its produce byte rate, fetch byte rate and
request rate (gateway.auth.quotas). Over a quota, the request is refused with 429 and
Retry-After (`--quota-mode reject`), or, Kafka's way (`--quota-mode delay`), answered only
after the throttle time. The decisions are gateway.auth.checks', which the fast routes make
too."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable

from aiohttp import web

from gateway.auth.checks import UNLIMITED_AUDIENCES, quota_charged, quota_refusal
from gateway.auth.middleware import AUTH, principal_of
from gateway.auth.quotas import ANONYMOUS, PrincipalUsage, QuotaBook, QuotaKind
from gateway.auth.route_operations import access
from gateway.http.params import BODY
from replication.node_contract import FORWARDED_BY

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
THROTTLE_HEADER = "Sluice-Throttle-Time-Ms"  # Kafka's throttle_time_ms, on a delayed answer


@web.middleware
async def quota_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Runs after authentication (the principal is known) and before any body is read."""
    auth = request.app[AUTH]
    book = auth.quotas
    if not book.active:
        return await handler(request)
    resource = request.match_info.route.resource
    template = None if resource is None else resource.canonical
    rule = None if template is None else access(request.method, template)
    if template is None or rule is None or rule.audience in UNLIMITED_AUDIENCES:
        return await handler(request)
    if _from_a_node(request):
        return await handler(request)
    usage = book.usage_of(principal_of(request) or ANONYMOUS)
    if usage is None:
        return await handler(request)
    charged = quota_charged(request.method, template)
    throttle = book.check(usage, charged)
    delayed = None
    if throttle is not None:
        refusal = quota_refusal(auth, usage, throttle)
        if refusal is not None:
            raise refusal
        kind, delayed = throttle.kind, 0.0
        while throttle is not None:  # others may have spent the tokens meanwhile
            await asyncio.sleep(throttle.wait_s)
            delayed += throttle.wait_s
            throttle = book.check(usage, charged)
        usage.note_throttled(kind, delayed)  # one delayed request, its whole delay
    response = await _serve(request, handler, book, usage, charged)
    if delayed is not None:
        response.headers[THROTTLE_HEADER] = str(math.ceil(delayed * 1000))
    return response


async def _serve(
    request: web.Request,
    handler: Handler,
    book: QuotaBook,
    usage: PrincipalUsage,
    charged: QuotaKind | None,
) -> web.StreamResponse:
    """Serve the request and charge its bytes: a produce's body (its Content-Length at once,
    so concurrent requests see it; else what was read, a streamed body's as it ended), a
    fetch's answer."""
    if charged == "produce_bytes":
        length = request.content_length
        if length is not None:
            book.charge(usage, charged, length)
        try:
            return await handler(request)
        finally:
            if length is None:
                read = len(request[BODY]) if BODY in request else request.content.total_bytes
                book.charge(usage, charged, read)
    response = await handler(request)
    if charged == "fetch_bytes":
        book.charge(usage, charged, response.content_length or 0)
    return response


def _from_a_node(request: web.Request) -> bool:
    """A request another node forwarded: its principal was charged where it came in."""
    if FORWARDED_BY not in request.headers:
        return False
    auth = request.app[AUTH]
    return not auth.enabled or auth.authenticator.from_node(request)
