"""Any node serves any request: what only another node can do (a partition's leader, a
group's coordinator, the controller) is forwarded there once, and its answer relayed as is."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from engine.errors import UnknownTopic
from gateway.auth.middleware import ROUTE_PREFIX, principal_of
from gateway.http import sse
from gateway.http.params import parse_int, read_body
from gateway.state import Gateway, gateway_of
from replication.errors import (
    LeaderNotAvailable,
    MetadataUnavailable,
    NodeUnreachable,
    NotController,
    NotLeader,
)
from replication.forward_client import Answer
from replication.metadata import ClusterView
from replication.node_contract import FORWARDED_BY, ON_BEHALF_OF

MISDIRECTED = 421  # NotLeader, NotController: the node refused the request before doing anything


@web.middleware
async def forwarding_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """On NotLeader or NotController, send the request to the node named; a request that was
    forwarded already is answered here (no loops: a stale view shows as 421 or 503). If that
    node is down, wait (bounded by leader_wait_ms in all) for the cluster to notice and choose
    another, and try again; if it answers 421, route again once this node's view is newer (the
    controller that made a coordinator's topic for the request may find the coordinator is
    the node it came from)."""
    gateway = gateway_of(request)
    store = gateway.broker.store
    deadline = asyncio.get_running_loop().time() + gateway.settings.leader_wait_ms / 1000
    unreachable: set[int] = set()  # nodes this request found down
    while True:
        view = store.view
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
        if target is None or node is None or FORWARDED_BY in request.headers:
            raise error
        if target == gateway.settings.node_id:
            raise error
        remaining = deadline - asyncio.get_running_loop().time()
        if target in unreachable:
            # The view still routes to the node found down: wait for a newer view (the
            # node's loss, then another leader or controller), then route again.
            newer = functools.partial(_newer, view.revision)
            if remaining <= 0 or not await store.wait_for(newer, remaining):
                raise LeaderNotAvailable(
                    f"node {target} does not answer and no other node has taken over yet; "
                    "retry shortly"
                ) from None
            continue
        body = await read_body(request, gateway.settings)
        try:
            answer = await _forward(gateway, request, node.url, body)
        except NodeUnreachable as exc:
            if exc.delivered:
                raise  # it may have been served: running it again could do it twice
            unreachable.add(target)
            gone = functools.partial(_gone, target)
            if not await store.wait_for(gone, max(remaining, 0.0)):
                raise LeaderNotAvailable(
                    f"node {target} does not answer and is still in the cluster; retry shortly"
                ) from None
            continue
        if answer is None:
            raise error  # this node drains: the client asks again, elsewhere
        if answer.status == MISDIRECTED:
            # Refused there as not its own, nothing done: that node's view is newer or older
            # than the one this request was routed by (a topic it just made, a leader moved).
            # Routed again once this node's view has moved on too.
            remaining = deadline - asyncio.get_running_loop().time()
            newer = functools.partial(_newer, view.revision)
            if remaining > 0 and await store.wait_for(newer, remaining):
                continue
        return web.Response(status=answer.status, body=answer.body, headers=answer.headers)


def _newer(revision: int, view: ClusterView) -> bool:
    return view.revision > revision


def _gone(node: int, view: ClusterView) -> bool:
    return node not in view.live


async def _forward(gateway: Gateway, request: web.Request, url: str, body: bytes) -> Answer | None:
    """The other node's answer; None for a read (GET: a long-poll may wait there for
    minutes) still waiting when this node starts draining, so that shutting down neither
    waits for it nor cuts it off unanswered. Writes always run to their end."""
    path = request.app.get(ROUTE_PREFIX, "") + request.path_qs
    forwarding = gateway.forwarder.forward(
        url, request.method, path, _forwarded_headers(request), body, _waits_ms(request)
    )
    if request.method != "GET":
        return await forwarding
    task = asyncio.ensure_future(forwarding)
    draining = asyncio.ensure_future(gateway.draining.wait())
    try:
        await asyncio.wait({task, draining}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # the client went
        task.cancel()
        raise
    finally:
        draining.cancel()
    if task.done():
        return task.result()
    task.cancel()
    return None


def _waits_ms(request: web.Request) -> int:
    """How long the request may wait at the other node by its own `timeout_ms` (a long-poll,
    a produce's acks): the forwarding bound comes on top. A value that node will refuse adds
    nothing."""
    waits = parse_int(request.query.get("timeout_ms", ""))
    return waits if waits is not None and 0 <= waits <= MAX_WAITS_MS else 0


MAX_WAITS_MS = 24 * 3600 * 1000
MAX_RELAYED_PROBLEM = 64 * 1024  # a refusal's body, passed on whole


async def relay_stream(request: web.Request, error: NotLeader) -> web.StreamResponse:
    """An event stream only the node `error` names can serve (a group's, at its coordinator):
    the same request is opened there and its chunks passed on as they come, one at a time, at
    the client's pace; when either side ends, so does the other."""
    gateway = gateway_of(request)
    node = None if error.leader is None else gateway.broker.store.view.nodes.get(error.leader)
    if node is None or FORWARDED_BY in request.headers or error.leader == gateway.settings.node_id:
        raise error
    headers = _forwarded_headers(request)
    async with gateway.forwarder.stream(
        node.url, request.path_qs, headers, ("Last-Event-ID",)
    ) as upstream:
        if upstream.status != 200:
            body = await upstream.content.read(MAX_RELAYED_PROBLEM)
            kept = {
                name: upstream.headers[name]
                for name in ("Content-Type", "Retry-After")
                if name in upstream.headers
            }
            return web.Response(status=upstream.status, body=body, headers=kept)
        response = web.StreamResponse(headers=sse.HEADERS)
        await response.prepare(request)
        writer = sse.EventWriter(response, request.path)
        try:
            async for chunk in upstream.content.iter_any():
                if not await writer.send(chunk):
                    break
        except aiohttp.ClientError:
            pass  # the other node went: the stream ends, and its client reconnects
        return writer.finish(request)


def _forwarded_headers(request: web.Request) -> CIMultiDict[str]:
    """The request's headers, plus where the client sent it and who it was (authenticated
    here: the other node takes our word for it)."""
    headers = CIMultiDict(request.headers)
    headers.setdefault("X-Forwarded-Host", request.host)
    headers.setdefault("X-Forwarded-Proto", request.scheme)
    principal = principal_of(request)
    if principal is not None:
        headers[ON_BEHALF_OF] = principal
    return headers


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
