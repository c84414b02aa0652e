"""Any node serves any request: what only another node can do (a partition's leader, a
group's coordinator, the controller) is forwarded there once, and its answer relayed as is."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from multidict import CIMultiDict

from engine.errors import UnknownTopic
from gateway.auth.middleware import principal_of
from gateway.http.params import read_body
from gateway.state import gateway_of
from replication.errors import (
    LeaderNotAvailable,
    MetadataUnavailable,
    NodeUnreachable,
    NotController,
    NotLeader,
)
from replication.node_contract import FORWARDED_BY, ON_BEHALF_OF


@web.middleware
async def forwarding_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """On NotLeader or NotController, send the request to the node named; a request that was
    forwarded already is answered here (no loops: a stale view shows as 421 or 503). If that
    node is down, wait (bounded) for the cluster to notice and choose another, and try again."""
    gateway = gateway_of(request)
    view = gateway.broker.store.view
    error: NotLeader | NotController
    try:
        return await handler(request)
    except UnknownTopic as exc:
        return await _confirm_unknown(request, handler, exc)
    except NotLeader as exc:
        target, error = exc.leader, exc
    except NotController as exc:
        target, error = view.controller, exc
    node = None if target is None else view.nodes.get(target)
    if node is None or FORWARDED_BY in request.headers or target == gateway.settings.node_id:
        raise error
    body = await read_body(request, gateway.settings)
    headers = CIMultiDict(request.headers)
    headers.setdefault("X-Forwarded-Host", request.host)
    headers.setdefault("X-Forwarded-Proto", request.scheme)
    principal = principal_of(request)
    if principal is not None:  # authenticated here: the other node takes our word for it
        headers[ON_BEHALF_OF] = principal
    try:
        answer = await gateway.forwarder.forward(
            node.url, request.method, request.path_qs, headers, body
        )
    except NodeUnreachable as unreachable:
        if unreachable.delivered:
            raise  # it may have been served: running it again could do it twice
        wait_s = gateway.settings.leader_wait_ms / 1000
        if not await gateway.broker.store.wait_for(lambda v: target not in v.live, wait_s):
            raise LeaderNotAvailable(
                f"node {target} does not answer and is still in the cluster; retry shortly"
            ) from None
        return await forwarding_middleware(request, handler)
    return web.Response(status=answer.status, body=answer.body, headers=answer.headers)


async def _confirm_unknown(
    request: web.Request,
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    exc: UnknownTopic,
) -> web.StreamResponse:
    """A topic this node's view lacks may have just been created through another node (the
    view follows the store's watch): ask the store before answering 404, and if it is there,
    wait (bounded) for the view and serve the request."""
    store = gateway_of(request).broker.store
    name = exc.topic
    if name is None or name in store.view.topics or not await store.topic_exists(name):
        raise exc
    wait_s = gateway_of(request).settings.leader_wait_ms / 1000
    if not await store.wait_for(lambda v: name in v.topics, wait_s):
        raise MetadataUnavailable(
            f"topic {name!r} exists but this node has not caught up with it yet; retry shortly"
        ) from None
    return await forwarding_middleware(request, handler)
