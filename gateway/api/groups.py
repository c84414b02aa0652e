"""Consumer-group routes: join, long-poll records, commit, leave, list, describe, reset offsets.

Every input is checked here; the coordinator (groups.coordinator) does the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
from aiohttp import web

from engine.config import validate_topic_name
from engine.errors import InvalidTopicName
from gateway.api import all_workers
from gateway.api.acls import with_authorized_operations
from gateway.api.fetch import limits_of, refuse_when_full
from gateway.api.topics import refuse_internal
from gateway.auth.middleware import may, require
from gateway.formats import codecs
from gateway.http.params import json_object, json_response, query_int, read_body
from gateway.http.problem import Problem, bad_request
from gateway.settings import Settings
from gateway.state import Gateway, gateway_of
from groups.assignors import ASSIGNORS
from groups.coordinator import (
    CURSOR_MASK,
    OFFSET_RESETS,
    GroupCoordinator,
    JoinRequest,
)
from replication.fetch_limits import FetchLimits

MAX_GROUP_ID = 255
MAX_TOPICS = 1000
MAX_METADATA = 4096  # offset.metadata.max.bytes
INT64_MAX = 2**63 - 1
DEFAULT_SESSION_TIMEOUT_MS = 45_000  # session.timeout.ms
JOIN_FIELDS = {
    "topics",
    "session_timeout_ms",
    "auto_offset_reset",
    "auto_commit",
    "assignor",
    "instance_id",
}
_ENCODER = msgspec.json.Encoder()


def add_routes(app: web.Application) -> None:
    app.router.add_get("/v1/groups", list_groups)
    app.router.add_get("/v1/groups/{group}", describe_group)
    app.router.add_delete("/v1/groups/{group}", delete_group)
    app.router.add_put("/v1/groups/{group}/offsets", reset_offsets)
    app.router.add_post("/v1/groups/{group}/members", join)
    app.router.add_get("/v1/groups/{group}/members/{member}/records", fetch)
    app.router.add_post("/v1/groups/{group}/members/{member}/commit", commit)
    app.router.add_delete("/v1/groups/{group}/members/{member}", leave)


def _coordinator(request: web.Request) -> GroupCoordinator:
    return gateway_of(request).groups


def valid_id(value: object, max_length: int) -> bool:
    """An id that goes in a path: 1 to `max_length` printable characters without '/'."""
    return (
        isinstance(value, str)
        and 1 <= len(value) <= max_length
        and value.isprintable()
        and "/" not in value
    )


def valid_group_id(value: object) -> bool:
    """A group or instance id: 1 to MAX_GROUP_ID printable characters without '/'."""
    return valid_id(value, MAX_GROUP_ID)


def id_param(request: web.Request, name: str, max_length: int, what: str, code: str) -> str:
    """The route's {name}, checked as `valid_id` (400 `code` naming `what` otherwise)."""
    value = request.match_info[name]
    if not valid_id(value, max_length):
        raise bad_request(f"{what} is 1 to {max_length} printable characters without '/'", code)
    return value


def group_param(request: web.Request) -> str:
    """The route's {group}, checked."""
    return id_param(request, "group", MAX_GROUP_ID, "a group id", "INVALID_GROUP_ID")


def check_fields(doc: dict[str, Any], allowed: set[str]) -> None:
    """400 for a body member not in `allowed`."""
    unknown = sorted(set(doc) - allowed)
    if unknown:
        raise bad_request(
            f"unknown fields {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}",
            "INVALID_REQUEST",
        )


def int_field(doc: dict[str, Any], name: str, minimum: int, maximum: int, where: str = "") -> int:
    """A body member that must be an integer in [minimum, maximum]."""
    value = doc.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(f"{where}{name} must be an integer", "INVALID_PARAMETER")
    if not minimum <= value <= maximum:
        raise bad_request(
            f"{where}{name} must be between {minimum} and {maximum}, got {value}",
            "INVALID_PARAMETER",
        )
    return value


def topic_field(value: object, where: str) -> str:
    """A topic name from a body, checked."""
    try:
        return validate_topic_name(value)
    except InvalidTopicName as exc:
        raise bad_request(f"{where}: {exc}", "INVALID_TOPIC_NAME") from None


def member_request(
    request: web.Request, doc: dict[str, Any], settings: Settings, kind: str
) -> tuple[tuple[str, ...], int]:
    """A join's topics (read on each required; no internal topic) and session timeout, for
    a consumer group's and a share group's (`kind` names which, in a refusal)."""
    topics = doc.get("topics")
    if not isinstance(topics, list) or not 1 <= len(topics) <= MAX_TOPICS:
        raise bad_request(f"topics must be a list of 1 to {MAX_TOPICS} topic names")
    names = tuple(dict.fromkeys(topic_field(t, f"topics[{i}]") for i, t in enumerate(topics)))
    for topic in names:
        refuse_internal(topic, f"consuming it in {kind}")
        require(request, "topic", topic, "read")
    session = DEFAULT_SESSION_TIMEOUT_MS
    if "session_timeout_ms" in doc:
        session = int_field(
            doc,
            "session_timeout_ms",
            settings.group_min_session_timeout_ms,
            settings.group_max_session_timeout_ms,
        )
    return names, session


async def join(request: web.Request) -> web.Response:
    gateway = gateway_of(request)
    settings = gateway.settings
    name = group_param(request)
    doc = await json_object(request, settings)
    check_fields(doc, JOIN_FIELDS)
    names, session = member_request(request, doc, settings, "a group")
    reset = doc.get("auto_offset_reset", "latest")
    if reset not in OFFSET_RESETS:
        raise bad_request(
            f"auto_offset_reset must be one of {', '.join(OFFSET_RESETS)}", "INVALID_PARAMETER"
        )
    auto_commit = doc.get("auto_commit", True)
    if not isinstance(auto_commit, bool):
        raise bad_request("auto_commit must be true or false", "INVALID_PARAMETER")
    assignor = doc.get("assignor")
    if assignor is not None and (not isinstance(assignor, str) or assignor not in ASSIGNORS):
        raise bad_request(f"assignor must be one of {', '.join(ASSIGNORS)}", "INVALID_PARAMETER")
    instance_id = doc.get("instance_id")
    if instance_id is not None and not valid_group_id(instance_id):
        raise bad_request(
            f"instance_id must be 1 to {MAX_GROUP_ID} printable characters without '/'",
            "INVALID_PARAMETER",
        )
    coordinator = _coordinator(request)
    group, member = coordinator.join(
        name, JoinRequest(names, session, reset, auto_commit, assignor, instance_id)
    )
    await _durable(request, name)
    return json_response(
        {
            "member_id": member.member_id,
            "generation": group.generation,
            "assignment": member.assignment(),
            "assignor": group.assignor,
            "session_timeout_ms": member.session_timeout_ms,
            "cursor": member.cursor,
        },
        201,
    )


async def fetch(request: web.Request) -> web.Response:
    gateway = gateway_of(request)
    settings = gateway.settings
    name = group_param(request)
    accept = codecs.negotiate(request.headers.get("Accept", ""), (codecs.JSON,), codecs.JSON)
    if accept is None:
        raise Problem(406, "NOT_ACCEPTABLE", f"Accept allows none of {codecs.JSON}")
    limits, cursor = member_fetch_query(request.query, settings)
    refuse_when_full(gateway.notifier, settings)
    _require_member_topics(request, name)
    body = await member_records(gateway, name, request.match_info["member"], limits, cursor)
    return web.Response(body=body, content_type=codecs.JSON)


def member_fetch_query(query: Mapping[str, str], settings: Settings) -> tuple[FetchLimits, int]:
    """A member fetch's limits and `cursor` (-1: none) from its query (the route's and the
    fast routes')."""
    return limits_of(query, settings), query_int(query, "cursor", -1, 0, CURSOR_MASK)


async def member_records(
    gateway: Gateway, name: str, member: str, limits: FetchLimits, cursor: int
) -> bytes:
    """A member's long-poll across its partitions as the JSON answer (`cursor` -1: none
    given); the records counted per topic. The route's and the fast routes'."""
    answer = await gateway.groups.fetch(name, member, limits, None if cursor < 0 else cursor)
    for topic, count in answer.counts.items():
        gateway.metrics.traffic.fetched(topic, count, 0)
    return _ENCODER.encode(
        {
            "records": answer.records,
            "assignment": answer.assignment,
            "generation": answer.generation,
            "cursor": answer.cursor,
        }
    )


def _require_member_topics(request: web.Request, name: str) -> None:
    """Read on each topic the member consumes, where its group is coordinated here (elsewhere,
    the coordinator checks the forwarded request)."""
    group = _coordinator(request).groups.get(name)
    member = None if group is None else group.members.get(request.match_info["member"])
    for topic in () if member is None else member.topics:
        require(request, "topic", topic, "read")


def _offsets(doc: dict[str, Any]) -> list[tuple[tuple[str, int], int, str]]:
    check_fields(doc, {"offsets", "generation"})
    items = doc.get("offsets")
    if not isinstance(items, list) or not items:
        raise bad_request("offsets must be a non-empty list of {topic, partition, offset}")
    out: dict[tuple[str, int], tuple[tuple[str, int], int, str]] = {}
    for i, item in enumerate(items):
        where = f"offsets[{i}]."
        if not isinstance(item, dict):
            raise bad_request(f"offsets[{i}] must be an object")
        check_fields(item, {"topic", "partition", "offset", "metadata"})
        topic = topic_field(item.get("topic"), f"offsets[{i}].topic")
        partition = int_field(item, "partition", 0, 2**31 - 1, where)
        offset = int_field(item, "offset", 0, INT64_MAX, where)
        metadata = item.get("metadata", "")
        if not isinstance(metadata, str) or len(metadata.encode()) > MAX_METADATA:
            raise bad_request(f"{where}metadata must be a string of at most {MAX_METADATA} bytes")
        out[(topic, partition)] = ((topic, partition), offset, metadata)
    return list(out.values())


async def commit(request: web.Request) -> web.Response:
    gateway = gateway_of(request)
    name = group_param(request)
    body = await read_body(request, gateway.settings)
    offsets = None
    generation = None
    if body.strip():
        doc = await json_object(request, gateway.settings)
        if "generation" in doc:
            generation = int_field(doc, "generation", 0, INT64_MAX)
        if "offsets" in doc or set(doc) - {"generation"}:
            offsets = _offsets(doc)
    if offsets is None:
        _require_member_topics(request, name)
    for (topic, _), _, _ in offsets or ():
        require(request, "topic", topic, "read")
    committed = _coordinator(request).commit(
        name, request.match_info["member"], offsets, generation
    )
    await _durable(request, name)
    return json_response(
        {"offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in committed]}
    )


async def leave(request: web.Request) -> web.Response:
    name = group_param(request)
    _coordinator(request).leave(name, request.match_info["member"])
    await _durable(request, name)
    return web.Response(status=204)


async def _durable(request: web.Request, name: str) -> None:
    """Answer a group change only once its offsets partition's replicas all have it."""
    timeout_ms = gateway_of(request).settings.default_produce_timeout_ms
    await _coordinator(request).durable(name, timeout_ms)


async def list_groups(request: web.Request) -> web.Response:
    """The groups this node coordinates; with workers, every worker's."""
    groups = _coordinator(request).list_groups()
    if all_workers.merging(request):
        groups = await all_workers.all_groups(gateway_of(request), groups)
    return json_response(
        {"groups": [g for g in groups if may(request, "group", g["group"], "describe")]}
    )


async def describe_group(request: web.Request) -> web.Response:
    name = group_param(request)
    doc = _coordinator(request).describe(name)
    if gateway_of(request).settings.workers > 1:  # asks topic descriptions: no loop
        await all_workers.fill_lag(gateway_of(request), doc)
    return json_response(with_authorized_operations(request, doc, "group", name))


async def delete_group(request: web.Request) -> web.Response:
    """Delete a group that has no members: its committed offsets and metadata."""
    name = group_param(request)
    _coordinator(request).delete_group(name)
    await _durable(request, name)
    return web.Response(status=204)


async def reset_offsets(request: web.Request) -> web.Response:
    gateway = gateway_of(request)
    name = group_param(request)
    topic, partitions, to = reset_request(request, await json_object(request, gateway.settings))
    reset = await _coordinator(request).reset_offsets(name, topic, partitions, to)
    await _durable(request, name)
    return json_response(
        {
            "group": name,
            "offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in reset],
        }
    )


def reset_request(
    request: web.Request, doc: dict[str, Any]
) -> tuple[str, list[int] | None, str | int | dict[str, int]]:
    """An offsets reset's topic (read on it required), partitions (None: all) and target:
    earliest, latest, an offset or {"timestamp": ms}. A group's and a share group's."""
    check_fields(doc, {"topic", "partitions", "to"})
    topic = topic_field(doc.get("topic"), "topic")
    require(request, "topic", topic, "read")
    partitions = doc.get("partitions")
    if partitions is not None:
        if not isinstance(partitions, list) or not partitions:
            raise bad_request("partitions must be a non-empty list of partition numbers")
        for i, p in enumerate(partitions):
            if isinstance(p, bool) or not isinstance(p, int) or p < 0:
                raise bad_request(f"partitions[{i}] must be a partition number")
        partitions = sorted(set(partitions))
    to = doc.get("to")
    if isinstance(to, dict):
        check_fields(to, {"timestamp"})
        int_field(to, "timestamp", 0, INT64_MAX, "to.")
    elif isinstance(to, bool) or not (
        to in ("earliest", "latest") or (isinstance(to, int) and 0 <= to <= INT64_MAX)
    ):
        raise bad_request(
            'to must be "earliest", "latest", an offset or {"timestamp": ms}', "INVALID_PARAMETER"
        )
    return topic, partitions, to
