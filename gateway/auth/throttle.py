"""The quota middleware: hold each principal to its produce byte rate, fetch byte rate and
request rate (gateway.auth.quotas). Over a quota, the request is refused with 429 and
Retry-After (`--quota-mode reject`), or, Kafka's way (`--quota-mode delay`), answered only
after the throttle time."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable

from aiohttp import hdrs, web

from gateway.auth.middleware import principal_of
from gateway.auth.quotas import (
    ANONYMOUS,
    FIELD_OF,
    PrincipalUsage,
    QuotaBook,
    QuotaKind,
    Throttle,
)
from gateway.auth.route_operations import access
from gateway.http.params import BODY
from gateway.http.problem import Problem
from gateway.state import gateway_of
from replication.node_contract import FORWARDED_BY

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
THROTTLE_HEADER = "Sluice-Throttle-Time-Ms"  # Kafka's throttle_time_ms, on a delayed answer

_RECORDS = "/v1/topics/{topic}/partitions/{partition}/records"
PRODUCE_ROUTES = frozenset({("POST", "/v1/topics/{topic}/records"), ("POST", _RECORDS)})
_MEMBER_RECORDS = "/v1/groups/{group}/members/{member}/records"
FETCH_ROUTES = frozenset({("GET", _RECORDS), ("GET", _MEMBER_RECORDS)})
UNLIMITED_AUDIENCES = frozenset({"public", "ops", "internal"})  # probes and nodes: never


@web.middleware
async def quota_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Runs after authentication (the principal is known) and before any body is read."""
    gateway = gateway_of(request)
    book = gateway.auth.quotas
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
    route = (request.method, template)
    charged: QuotaKind | None = (
        "produce_bytes" if route in PRODUCE_ROUTES else "fetch_bytes" if route in FETCH_ROUTES
        else None
    )  # fmt: skip
    throttle = book.check(usage, charged)
    delayed = None
    if throttle is not None:
        settings = gateway.settings
        if settings.quota_mode == "reject" or throttle.wait_s > settings.quota_max_delay_s:
            usage.note_throttled(throttle.kind, throttle.wait_s)
            raise _over_quota(throttle)
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
    so concurrent requests see it; else what was read), a fetch's answer."""
    if charged == "produce_bytes":
        length = request.content_length
        if length is not None:
            book.charge(usage, charged, length)
        try:
            return await handler(request)
        finally:
            if length is None and BODY in request:
                book.charge(usage, charged, len(request[BODY]))
    response = await handler(request)
    if charged == "fetch_bytes":
        book.charge(usage, charged, response.content_length or 0)
    return response


def _from_a_node(request: web.Request) -> bool:
    """A request another node forwarded: its principal was charged where it came in."""
    if FORWARDED_BY not in request.headers:
        return False
    auth = gateway_of(request).auth
    return not auth.enabled or auth.authenticator.from_node(request)


def _over_quota(throttle: Throttle) -> Problem:
    wait_ms = math.ceil(throttle.wait_s * 1000)
    return Problem(
        429,
        "QUOTA_EXCEEDED",
        f"over the {FIELD_OF[throttle.kind]} quota: retry in {wait_ms} ms",
        headers={hdrs.RETRY_AFTER: str(max(1, math.ceil(throttle.wait_s)))},
        quota=FIELD_OF[throttle.kind],
        retry_after_ms=wait_ms,
    )
