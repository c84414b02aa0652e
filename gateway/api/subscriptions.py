"""Push-subscription routes: create, list, describe, change, pause, resume, delete; and the
internal routes through which the node describing a subscription asks the others for the
partitions they dispatch, and a dispatcher commits (or the deleting node forgets) positions at
the group's coordinator.

Any node answers: specs live in the cluster's metadata store, and a description gathers each
partition's row from the node leading it. Checks of the body are the domain's
(groups.subscriptions.spec); ACLs are checked here: a subscription reads its topic and writes
its dead-letter topic, so creating or changing one needs Read on the topic and Write on the
dead-letter topic; describing it needs Describe on the topic."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

from aiohttp import web

from gateway.auth.middleware import may, require
from gateway.http.params import json_object, json_response
from gateway.state import gateway_of
from groups.subscriptions import spec as specs
from groups.subscriptions.errors import SubscriptionError, invalid
from groups.subscriptions.service import SubscriptionService
from groups.subscriptions.spec import Subscription
from replication.node_contract import SUBSCRIPTION_PARTITIONS_ROUTE, SUBSCRIPTION_POSITIONS_ROUTE

UID = re.compile(r"[0-9a-f]{1,32}")


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/subscriptions", create)
    app.router.add_get("/v1/subscriptions", list_subscriptions)
    app.router.add_get("/v1/subscriptions/{name}", describe)
    app.router.add_patch("/v1/subscriptions/{name}", change)
    app.router.add_delete("/v1/subscriptions/{name}", delete)
    app.router.add_post("/v1/subscriptions/{name}/pause", pause)
    app.router.add_post("/v1/subscriptions/{name}/resume", resume)
    app.router.add_get(SUBSCRIPTION_PARTITIONS_ROUTE, own_partitions)
    app.router.add_put(SUBSCRIPTION_POSITIONS_ROUTE, commit_position)
    app.router.add_delete(SUBSCRIPTION_POSITIONS_ROUTE, forget_positions)


def _service(request: web.Request) -> SubscriptionService:
    return gateway_of(request).subscriptions


def _name(request: web.Request) -> str:
    name = request.match_info["name"]
    if not specs.NAME.fullmatch(name):
        raise SubscriptionError(
            "UNKNOWN_SUBSCRIPTION", f"subscription {name[:200]!r} does not exist"
        )
    return name


def _may_change(request: web.Request, sub: Subscription) -> None:
    require(request, "topic", sub.topic, "read")
    if sub.dead_letter_topic is not None:
        require(request, "topic", sub.dead_letter_topic, "write")
    if sub.reply is not None:
        require(request, "topic", sub.reply.topic, "write")


def _reply_topic(request: web.Request, doc: dict[str, Any]) -> None:
    """A document's reply topic: Write on it (ACLs first: no probing by error answers), and a
    node that may call its own API as the internal principal (OwnApiTransactions)."""
    reply = doc.get("reply")
    if not isinstance(reply, dict):
        return
    if isinstance(reply.get("topic"), str):
        require(request, "topic", reply["topic"], "write")
    gateway = gateway_of(request)
    if gateway.settings.auth and gateway.auth.authorization is None:
        raise SubscriptionError(
            "INVALID_SUBSCRIPTION",
            "a subscription with a reply topic commits its replies through the node's own API "
            "as the internal principal: with --auth, start the nodes with --internal-key-file",
            pointer="/reply",
        )


async def create(request: web.Request) -> web.Response:
    """201 with the subscription; the only answer that shows its signing secret."""
    gateway = gateway_of(request)
    doc = await json_object(request, gateway.settings)
    service = _service(request)
    for field in ("topic", "dead_letter_topic"):  # ACLs first: no probing by error answers
        if isinstance(doc.get(field), str):
            require(request, "topic", doc[field], "read" if field == "topic" else "write")
    _reply_topic(request, doc)
    if doc.get("mode") == "queue":
        await gateway.share_groups_ready()  # its share group's state topic, made at first use
    sub = await service.create(doc)
    body: dict[str, Any] = specs.public_view(sub) | {"signing_secret": sub.signing_secret}
    response = json_response(body, 201)
    response.headers["Location"] = f"/v1/subscriptions/{quote(sub.name, safe='')}"
    return response


async def list_subscriptions(request: web.Request) -> web.Response:
    """Every subscription of the cluster whose topic the caller may describe."""
    return json_response(
        {
            "subscriptions": [
                s
                for s in _service(request).summaries()
                if may(request, "topic", s["topic"], "describe")
            ]
        }
    )


async def describe(request: web.Request) -> web.Response:
    service = _service(request)
    sub = service.get(_name(request))
    require(request, "topic", sub.topic, "describe")
    return json_response(await service.describe(sub.name))


async def change(request: web.Request) -> web.Response:
    """A JSON merge patch of the mutable fields; new delivery settings restart the
    dispatchers from the committed positions."""
    service = _service(request)
    name = _name(request)
    _may_change(request, service.get(name))
    patch = await json_object(request, gateway_of(request).settings)
    if isinstance(patch.get("dead_letter_topic"), str):
        require(request, "topic", patch["dead_letter_topic"], "write")
    _reply_topic(request, patch)
    await service.update(name, patch)
    return json_response(await service.describe(name))


async def pause(request: web.Request) -> web.Response:
    service = _service(request)
    name = _name(request)
    _may_change(request, service.get(name))
    await service.pause(name)
    return json_response(await service.describe(name))


async def resume(request: web.Request) -> web.Response:
    service = _service(request)
    name = _name(request)
    _may_change(request, service.get(name))
    await service.resume(name)
    return json_response(await service.describe(name))


async def delete(request: web.Request) -> web.Response:
    """Stop the subscription and forget its positions."""
    service = _service(request)
    name = _name(request)
    _may_change(request, service.get(name))
    await service.delete(name)
    return web.Response(status=204)


async def own_partitions(request: web.Request) -> web.Response:
    """The partitions this node dispatches (another node is describing the subscription)."""
    return json_response(
        {"partitions": _service(request).local_partitions(request.match_info["name"])}
    )


def _uid(value: object) -> str:
    if not isinstance(value, str) or not UID.fullmatch(value):
        raise invalid("uid must be 1 to 32 hexadecimal digits", "/uid")
    return value


def _count(doc: dict[str, Any], field: str) -> int:
    value = doc.get(field)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise invalid(f"{field} must be a non-negative integer", f"/{field}")
    return value


async def commit_position(request: web.Request) -> web.Response:
    """A dispatcher's commit, at the group's coordinator (this node), judged once this node's
    view has reached the revision the dispatcher saw the subscription at: refused with 404
    once the view has lost the subscription, so that a delete stays final."""
    name = _name(request)
    doc = await json_object(request, gateway_of(request).settings)
    topic = doc.get("topic")
    if not isinstance(topic, str) or not 0 < len(topic) <= 249:
        raise invalid("topic must be a topic name", "/topic")
    seen_at = _count(doc, "version") if "version" in doc else 0
    await _service(request).positions.commit_here(
        name, _uid(doc.get("uid")), topic, _count(doc, "partition"), _count(doc, "offset"),
        seen_at,
    )  # fmt: skip
    return web.Response(status=204)


async def forget_positions(request: web.Request) -> web.Response:
    """A deleted subscription's positions forgotten at the coordinator (this node), once this
    node's view has lost it."""
    name = _name(request)
    await _service(request).positions.forget_here(name, _uid(request.query.get("uid")))
    return web.Response(status=204)
