"""Share-group routes (queues, KIP-932): configs, join and leave, acquire records under locks,
acknowledge them one by one or by offset ranges, describe, list, reset the start, delete.

Every input is checked here; the share coordinator (groups.share.coordinator) does the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
import orjson
from aiohttp import web

from gateway.api.acls import with_authorized_operations
from gateway.api.fetch import refuse_when_full
from gateway.api.groups import (
    MAX_GROUP_ID,
    check_fields,
    group_param,
    int_field,
    member_request,
    reset_request,
    valid_group_id,
)
from gateway.auth.middleware import may, require
from gateway.formats import codecs
from gateway.formats.share_records import deliveries_json
from gateway.http.params import json_object, json_response, query_int, read_body
from gateway.http.problem import Problem, bad_request, problem_body
from gateway.settings import Settings
from gateway.state import Gateway, gateway_of
from groups.share.coordinator import Ack, AckRange, AckResult, ShareCoordinator
from groups.share.partition_state import AckType

MAX_ACQUIRE_RECORDS = 1_000  # records one acquire may take
MAX_ACKNOWLEDGEMENTS = 1_000  # acknowledgements in one request
MAX_RELEASE_DELAY_MS = 12 * 3_600_000  # as SQS's longest visibility timeout
_BASE = "/v1/share-groups/{group}"
_MEMBER = _BASE + "/members/{member}"
_ENCODER = msgspec.json.Encoder()
_ACK_TYPES = {t.value: t for t in AckType}
_ACK_FIELDS = frozenset({"token", "type", "delay_ms"})
_RANGE = ("topic", "partition", "first_offset", "last_offset")
_RANGE_FIELDS = frozenset({*_RANGE, "type", "delay_ms"})
_MAX_OFFSET = 2**63 - 1
_MAX_PARTITION = 2**31 - 1


def add_routes(app: web.Application) -> None:
    app.router.add_get("/v1/share-groups", list_share_groups)
    app.router.add_get(_BASE, describe)
    app.router.add_delete(_BASE, delete)
    app.router.add_put(_BASE + "/configs", set_configs)
    app.router.add_put(_BASE + "/offsets", reset_offsets)
    app.router.add_post(_BASE + "/members", join)
    app.router.add_delete(_MEMBER, leave)
    app.router.add_post(_MEMBER + "/acquire", acquire)
    app.router.add_post(_MEMBER + "/acknowledge", acknowledge)


async def _coordinator(request: web.Request) -> ShareCoordinator:
    return await gateway_of(request).share_groups_ready()


async def set_configs(request: web.Request) -> web.Response:
    """Set or (null) unset the group's configs; the group is made if new."""
    gateway = gateway_of(request)
    name = group_param(request)
    doc = await json_object(request, gateway.settings)
    check_fields(doc, {"configs"})
    configs = doc.get("configs")
    if not isinstance(configs, dict) or not configs:
        raise bad_request("configs must be a non-empty object of config names to values")
    stored = await (await _coordinator(request)).set_configs(name, configs)
    return json_response({"group": name, "configs": stored})


async def join(request: web.Request) -> web.Response:
    gateway = gateway_of(request)
    settings = gateway.settings
    name = group_param(request)
    doc = await json_object(request, settings)
    check_fields(doc, {"topics", "session_timeout_ms", "member_id"})
    member_id = doc.get("member_id")
    if member_id is not None and not valid_group_id(member_id):
        raise bad_request(
            f"member_id must be 1 to {MAX_GROUP_ID} printable characters without '/'",
            "INVALID_PARAMETER",
        )
    names, session = member_request(request, doc, settings, "a share group")
    for topic in names:
        gateway.replicas.topic(topic)  # 404 UNKNOWN_TOPIC for a topic not made
    member_id = await (await _coordinator(request)).join(name, names, session, member_id)
    return json_response(
        {"member_id": member_id, "topics": list(names), "session_timeout_ms": session}, 201
    )


async def leave(request: web.Request) -> web.Response:
    name = group_param(request)
    released = await (await _coordinator(request)).leave(name, request.match_info["member"])
    return json_response({"released": released})


async def acquire(request: web.Request) -> web.Response:
    """Acquire up to max_records records, waiting up to timeout_ms for one."""
    gateway = gateway_of(request)
    settings = gateway.settings
    name = group_param(request)
    accept = codecs.negotiate(
        request.headers.get("Accept", ""), (codecs.JSON, codecs.NDJSON), codecs.JSON
    )
    if accept is None:
        raise Problem(
            406, "NOT_ACCEPTABLE", f"Accept allows none of {codecs.JSON}, {codecs.NDJSON}"
        )
    max_records, max_bytes, timeout_ms = acquire_query(request.query, settings)
    if (await read_body(request, settings)).strip():
        raise bad_request("an acquire takes its limits in the query; send no body")
    coordinator = await _coordinator(request)
    member_id = request.match_info["member"]
    group = coordinator.groups.get(name)
    member = None if group is None else group.members.get(member_id)
    for topic in () if member is None else member.topics:
        require(request, "topic", topic, "read")
    if timeout_ms:
        refuse_when_full(gateway.notifier, settings)
    body = await acquired(gateway, name, member_id, max_records, max_bytes, timeout_ms, accept)
    return web.Response(body=body, content_type=accept)


def acquire_query(query: Mapping[str, str], settings: Settings) -> tuple[int, int, int]:
    """An acquire's max_records, max_bytes and timeout_ms (the route's and the fast routes')."""
    return (
        query_int(query, "max_records", 1, 1, MAX_ACQUIRE_RECORDS),
        query_int(query, "max_bytes", settings.default_fetch_bytes, 1, settings.max_fetch_bytes),
        query_int(query, "timeout_ms", 0, 0, settings.max_wait_ms),
    )


async def acquired(
    gateway: Gateway,
    name: str,
    member_id: str,
    max_records: int,
    max_bytes: int,
    timeout_ms: int,
    accept: str,
) -> bytes:
    """A member's acquire as its answer's body, JSON or NDJSON; the records counted per topic
    (the route's and the fast routes')."""
    deliveries = await gateway.share_groups.deliver(
        name, member_id, max_records, max_bytes, timeout_ms
    )
    traffic = gateway.metrics.traffic
    for d in deliveries:
        traffic.fetched(d.topic, d.count, 0)
    if accept == codecs.NDJSON:
        return deliveries_json(deliveries, b"\n") + b"\n" if deliveries else b""
    return b'{"records":[' + deliveries_json(deliveries, b",") + b"]}"


async def acknowledge(request: web.Request) -> web.Response:
    """Accept, release (optionally after delay_ms), reject or renew acquired records; each
    answers on its own whether it took effect."""
    gateway = gateway_of(request)
    name = group_param(request)
    items = await _acknowledgements(request, gateway)
    await _coordinator(request)
    body = await acknowledged(gateway, name, request.match_info["member"], items)
    return web.Response(body=body, content_type=codecs.JSON)


async def acknowledged(gateway: Gateway, name: str, member_id: str, items: list[Ack]) -> bytes:
    """A member's acknowledgements as their answer's body (the route's and the fast
    routes')."""
    results = await gateway.share_groups.acknowledge(name, member_id, items)
    return _ENCODER.encode({"results": [_result(r) for r in results]})


async def _acknowledgements(request: web.Request, gateway: Gateway) -> list[Ack]:
    """The body's acknowledgements: {"acknowledgements": [...]} as JSON, or one per line as
    NDJSON."""
    if request.content_type == codecs.NDJSON:
        return acknowledgements_of(ndjson_items(await read_body(request, gateway.settings)))
    return acknowledgements_of(json_items(await json_object(request, gateway.settings)))


def ndjson_items(body: bytes) -> list[Any]:
    """An NDJSON body's acknowledgements, one a line."""
    items: list[Any] = []
    for n, line in enumerate(body.splitlines(), 1):
        if line.strip():
            try:
                items.append(orjson.loads(line))
            except orjson.JSONDecodeError as exc:
                raise bad_request(f"line {n} is not JSON: {exc}", "INVALID_JSON") from None
    return items


def json_items(doc: dict[str, Any]) -> list[Any]:
    """A JSON body's acknowledgements: {"acknowledgements": [...]}."""
    if len(doc) != 1 or "acknowledgements" not in doc:
        check_fields(doc, {"acknowledgements"})
    items = doc.get("acknowledgements")
    if not isinstance(items, list):
        raise bad_request(
            "acknowledgements must be a list of {token, type} or "
            "{topic, partition, first_offset, last_offset, type}"
        )
    return items


def acknowledgements_of(items: list[Any]) -> list[Ack]:
    """Each acknowledgement checked, of a delivery by its token {"token", "type", "delay_ms"?}
    or of records by their offsets {"topic", "partition", "first_offset", "last_offset",
    "type", "delay_ms"?} (type accept|release|reject|renew, accept by default), as (token or
    range, type, delay_ms); a bad one refuses the whole request (400)."""
    if not 1 <= len(items) <= MAX_ACKNOWLEDGEMENTS:
        raise bad_request(f"a request acknowledges 1 to {MAX_ACKNOWLEDGEMENTS} records")
    out: list[Ack] = []
    for i, item in enumerate(items):
        where = f"acknowledgements[{i}]"
        if not isinstance(item, dict):
            raise bad_request(
                f"{where} must be an object {{token, type}} or "
                "{topic, partition, first_offset, last_offset, type}"
            )
        target: str | AckRange
        if "token" in item or "topic" not in item:
            if not item.keys() <= _ACK_FIELDS:
                check_fields(item, set(_ACK_FIELDS))
            token = item.get("token")
            if not isinstance(token, str) or not 1 <= len(token) <= 512:
                raise bad_request(f"{where}.token must be a token from an acquire")
            target = token
        else:
            target = _range(item, where)
        name = item.get("type", "accept")
        kind = _ACK_TYPES.get(name) if isinstance(name, str) else None
        if kind is None:
            raise bad_request(f"{where}.type must be one of {', '.join(_ACK_TYPES)}")
        delay = 0
        if "delay_ms" in item:
            if kind is not AckType.RELEASE:
                raise bad_request(f"{where}.delay_ms is for a release only")
            delay = int_field(item, "delay_ms", 0, MAX_RELEASE_DELAY_MS, f"{where}.")
        out.append((target, kind, delay))
    return out


def _range(item: dict[str, Any], where: str) -> AckRange:
    """An acknowledgement of records by their offsets, checked."""
    if not item.keys() <= _RANGE_FIELDS:
        check_fields(item, set(_RANGE_FIELDS))
    topic, partition = item.get("topic"), item.get("partition")
    first, last = item.get("first_offset"), item.get("last_offset")
    if (
        type(topic) is str
        and topic
        and type(partition) is int
        and type(first) is int
        and type(last) is int
        and 0 <= partition <= _MAX_PARTITION
        and 0 <= first <= last <= _MAX_OFFSET
    ):
        return AckRange(topic, partition, first, last)
    missing = [name for name in _RANGE if name not in item]
    if missing:
        raise bad_request(
            f"{where} names records by topic, partition, first_offset and last_offset "
            f"(or one delivery by its token); {', '.join(missing)} missing"
        )
    topic = item["topic"]
    if not isinstance(topic, str) or not topic:
        raise bad_request(f"{where}.topic must be a topic's name")
    partition = int_field(item, "partition", 0, _MAX_PARTITION, f"{where}.")
    first = int_field(item, "first_offset", 0, _MAX_OFFSET, f"{where}.")
    last = int_field(item, "last_offset", first, _MAX_OFFSET, f"{where}.")
    return AckRange(topic, partition, first, last)


def _result(r: AckResult) -> dict[str, Any]:
    target = r.target
    doc: dict[str, Any]
    if isinstance(target, AckRange):
        doc = {
            "topic": target.topic,
            "partition": target.partition,
            "first_offset": target.first,
            "last_offset": target.last,
            "type": r.kind.value,
        }
    else:
        doc = {"token": target, "type": r.kind.value}
    if r.refused is None:
        doc["status"] = "ok"
        if r.lock_deadline_ms is not None:
            doc["lock_expires_at"] = r.lock_deadline_ms
        return doc
    doc["status"] = "refused"
    doc["problem"] = orjson.loads(problem_body(Problem(409, r.refused.code, str(r.refused))))
    return doc


async def describe(request: web.Request) -> web.Response:
    """The group; with `include_authorized_operations=true`, what the caller may do to it."""
    name = group_param(request)
    doc = await (await _coordinator(request)).describe(name)
    return json_response(with_authorized_operations(request, doc, "group", name))


async def list_share_groups(request: web.Request) -> web.Response:
    groups = (await _coordinator(request)).list_groups()
    return json_response(
        {"share_groups": [g for g in groups if may(request, "group", g["group"], "describe")]}
    )


async def delete(request: web.Request) -> web.Response:
    await (await _coordinator(request)).delete(group_param(request))
    return web.Response(status=204)


async def reset_offsets(request: web.Request) -> web.Response:
    """Start the group's share-partitions of a topic over (no members may be in it)."""
    gateway = gateway_of(request)
    name = group_param(request)
    topic, partitions, to = reset_request(request, await json_object(request, gateway.settings))
    starts = await (await _coordinator(request)).reset(name, topic, partitions, to)
    return json_response(
        {
            "group": name,
            "offsets": [{"topic": t, "partition": p, "start_offset": o} for (t, p), o in starts],
        }
    )
