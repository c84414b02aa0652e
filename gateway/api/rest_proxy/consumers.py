"""v2 consumer instances: create, subscribe, read records, commit, committed offsets, seek,
delete. Each instance is a static member of the Sluice group (its name is the member's
`instance_id`), so it gets the group's assignment, sessions and rebalances, shows in `sluice
groups describe`, and lives in `__consumer_offsets`: any node serves it, forwarding to the
group's coordinator like every /v1 group call. Input checks here; the coordinator does the rest.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import msgspec
import orjson
from aiohttp import web

from engine.internal_topics import INTERNAL_TOPICS
from engine.producer_state import Isolation
from gateway.api.fetch import ISOLATIONS, refuse_when_full
from gateway.api.groups import valid_group_id
from gateway.api.rest_proxy import schema_formats
from gateway.api.rest_proxy.errors import (
    CONSUMER_NOT_FOUND,
    ILLEGAL_STATE,
    INVALID_CONSUMER_CONFIG,
    UNSUPPORTED_FORMAT,
    v2_error,
)
from gateway.api.rest_proxy.fast import record_decoder
from gateway.api.rest_proxy.media import (
    RECORDS_TYPES,
    SCHEMA_FORMATS,
    add_route,
    answer,
    json_body_type,
)
from gateway.api.topics import refuse_internal
from gateway.auth.middleware import may, require
from gateway.formats import codecs
from gateway.http.params import int_param, read_body
from gateway.http.problem import Problem
from gateway.state import gateway_of
from groups.coordinator import GroupCoordinator, JoinRequest, Member
from replication.fetch_limits import FetchLimits

INSTANCE = "/consumers/{group}/instances/{instance}"
INSTANCE_TIMEOUT_MS = 300_000  # Confluent's consumer.instance.timeout.ms
DEFAULT_REQUEST_TIMEOUT_MS = 1_000  # Confluent's consumer.request.timeout.ms
MAX_RECORDS = 10_000
MAX_PARTITIONS = 10_000  # partitions a body may list
MAX_PATTERN = 1_000  # characters of a topic_pattern
PATTERN = "topic_pattern"  # the instance setting that keeps a pattern subscription
INT64_MAX = 2**63 - 1
# Subscribing by name and by pattern at once (Karapace's words: its clients match them).
_ONE_WAY = (
    "IllegalStateError: You must choose only one way to configure your consumer: (1) subscribe "
    "to specific topics by name, (2) subscribe to topics matching a regex pattern, (3) assign "
    "itself specific topic-partitions."
)
_RESETS = {"earliest": "earliest", "latest": "latest", "none": "none", "smallest": "earliest",
           "largest": "latest"}  # fmt: skip


def add_routes(app: web.Application) -> None:
    add_route(app, "POST", "/consumers/{group}", create)
    add_route(app, "DELETE", INSTANCE, delete)
    add_route(app, "POST", f"{INSTANCE}/subscription", subscribe)
    add_route(app, "GET", f"{INSTANCE}/subscription", subscription)
    add_route(app, "DELETE", f"{INSTANCE}/subscription", unsubscribe)
    add_route(app, "POST", f"{INSTANCE}/assignments", assign)
    add_route(app, "GET", f"{INSTANCE}/assignments", assignments)
    add_route(app, "GET", f"{INSTANCE}/records", records)
    add_route(app, "POST", f"{INSTANCE}/offsets", commit)
    add_route(app, "GET", f"{INSTANCE}/offsets", committed)
    add_route(app, "POST", f"{INSTANCE}/positions", seek)
    add_route(app, "POST", f"{INSTANCE}/positions/beginning", seek_beginning)
    add_route(app, "POST", f"{INSTANCE}/positions/end", seek_end)


def _coordinator(request: web.Request) -> GroupCoordinator:
    return gateway_of(request).groups


def _group(request: web.Request) -> str:
    name = request.match_info["group"]
    if not valid_group_id(name):
        raise v2_error(404, CONSUMER_NOT_FOUND, f"group {name!r} is not a valid group id")
    return name


def _instance(request: web.Request) -> str:
    return request.match_info["instance"]


def _invalid(message: str) -> Problem:
    return v2_error(422, INVALID_CONSUMER_CONFIG, message)


async def _body(request: web.Request, *, optional: bool = False) -> dict[str, Any]:
    """The JSON object body (a v2 media type or plain JSON); {} for an empty optional one."""
    raw = await read_body(request, gateway_of(request).settings)
    if optional and not raw.strip():
        return {}
    json_body_type(request)
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise v2_error(400, 400, f"malformed JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise v2_error(422, INVALID_CONSUMER_CONFIG, "the body must be a JSON object")
    return doc


def _config_int(doc: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    """A consumer config integer; v2 clients send them as numbers or decimal strings."""
    value = doc.get(name, default)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _invalid(f"{name} must be an integer between {low} and {high}")
    return value


def _base_uri(request: web.Request, group: str, instance: str) -> str:
    """The instance's URL at the node the client reached (through a forward, the front
    node's), so any node keeps serving it."""
    host = request.headers.get("X-Forwarded-Host", request.host).split(",")[0].strip()
    scheme = request.headers.get("X-Forwarded-Proto", request.scheme).split(",")[0].strip()
    return f"{scheme}://{host}/consumers/{group}/instances/{instance}"


async def create(request: web.Request) -> web.Response:
    gateway = gateway_of(request)
    name = _group(request)
    doc = await _body(request)
    instance = doc.get("name", doc.get("id")) or f"rest-consumer-{uuid.uuid4().hex}"
    if not valid_group_id(instance):
        raise _invalid("name must be 1 to 255 printable characters without '/'")
    embedded = doc.get("format", "binary")
    if not isinstance(embedded, str) or embedded not in RECORDS_TYPES:
        raise _invalid(f"format must be one of {', '.join(RECORDS_TYPES)}")
    reset = _RESETS.get(str(doc.get("auto.offset.reset", "latest")))
    if reset is None:
        raise _invalid("auto.offset.reset must be earliest, latest or none")
    auto_commit = str(doc.get("auto.commit.enable", "true")).lower()
    if auto_commit not in ("true", "false"):
        raise _invalid("auto.commit.enable must be true or false")
    isolation = doc.get("isolation.level", Isolation.READ_UNCOMMITTED.value)
    if not isinstance(isolation, str) or isolation not in ISOLATIONS:
        raise _invalid("isolation.level must be read_uncommitted or read_committed")
    settings = gateway.settings
    min_bytes = _config_int(doc, "fetch.min.bytes", 1, 1, settings.max_fetch_bytes)
    timeout_ms = _config_int(
        doc, "consumer.request.timeout.ms", DEFAULT_REQUEST_TIMEOUT_MS, 0, settings.max_wait_ms
    )
    session = min(
        max(INSTANCE_TIMEOUT_MS, settings.group_min_session_timeout_ms),
        settings.group_max_session_timeout_ms,
    )
    _coordinator(request).create_instance(
        name,
        JoinRequest((), session, reset, auto_commit == "true", instance_id=instance),
        {
            "format": embedded,
            "fetch_min_bytes": min_bytes,
            "request_timeout_ms": timeout_ms,
            "isolation": isolation,
        },
    )
    await _durable(request, name)
    return answer(
        request, {"instance_id": instance, "base_uri": _base_uri(request, name, instance)}
    )


async def delete(request: web.Request) -> web.Response:
    name = _group(request)
    _coordinator(request).leave(name, _instance(request))
    await _durable(request, name)
    return web.Response(status=204)


async def subscribe(request: web.Request) -> web.Response:
    """Subscribe to `topics`, or to `topic_pattern`: the topics it matches now, and those
    created later, picked up at the instance's next read (as a Kafka consumer's metadata
    refresh picks them up); with auth, only topics the principal may read match."""
    gateway = gateway_of(request)
    name, instance = _group(request), _instance(request)
    doc = await _body(request)
    topics, pattern = doc.get("topics"), doc.get("topic_pattern")
    if topics is None and pattern is None:
        raise _invalid("give topics or topic_pattern")
    if topics is not None and pattern is not None:
        raise v2_error(409, ILLEGAL_STATE, _ONE_WAY)
    coordinator = _coordinator(request)
    settings = {k: v for k, v in coordinator.touch(name, instance).instance.items()}
    settings.pop(PATTERN, None)
    if pattern is not None:
        if not isinstance(pattern, str) or len(pattern) > MAX_PATTERN:
            raise _invalid(
                f"topic_pattern must be a regular expression of at most {MAX_PATTERN} characters"
            )
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise _invalid(f"topic_pattern: {exc}") from None
        settings[PATTERN] = pattern
        names = _matching(request, compiled)
    else:
        if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics):
            raise _invalid("topics must be a list of topic names")
        names = tuple(dict.fromkeys(topics))
        for topic in names:
            refuse_internal(topic, "consuming it")
            require(request, "topic", topic, "read")
            gateway.replicas.topic(topic)
    coordinator.subscribe(name, instance, names, settings)
    await _durable(request, name)
    return web.Response(status=204)


def _matching(request: web.Request, pattern: re.Pattern[str]) -> tuple[str, ...]:
    """The user topics the pattern matches in full that the principal may read."""
    known = gateway_of(request).broker.store.view.topics
    return tuple(
        sorted(
            t
            for t in known
            if t not in INTERNAL_TOPICS
            and pattern.fullmatch(t)
            and may(request, "topic", t, "read")
        )
    )


async def _current(request: web.Request, name: str, instance: str) -> Member:
    """The instance, its pattern subscription brought up to the topics that exist now."""
    coordinator = _coordinator(request)
    member = coordinator.touch(name, instance)
    pattern = member.instance.get(PATTERN)
    if pattern is None:
        return member
    matched = _matching(request, re.compile(pattern))
    if matched == member.topics:
        return member
    member = coordinator.subscribe(name, instance, matched)
    await _durable(request, name)
    return member


async def subscription(request: web.Request) -> web.Response:
    member = await _current(request, _group(request), _instance(request))
    return answer(request, {"topics": list(member.topics)})


async def unsubscribe(request: web.Request) -> web.Response:
    name, instance = _group(request), _instance(request)
    coordinator = _coordinator(request)
    settings = {k: v for k, v in coordinator.touch(name, instance).instance.items() if k != PATTERN}
    coordinator.subscribe(name, instance, (), settings)
    await _durable(request, name)
    return web.Response(status=204)


async def records(request: web.Request) -> web.Response:
    """The instance's next records from its assignment, in its format: a long-poll of up to
    `timeout` ms (default: its consumer.request.timeout.ms) for fetch.min.bytes; their keys
    and values take at most `max_bytes` (one larger record comes alone)."""
    gateway = gateway_of(request)
    settings = gateway.settings
    name, instance = _group(request), _instance(request)
    coordinator = _coordinator(request)
    member = await _current(request, name, instance)
    embedded = member.instance.get("format", "binary")
    media = _records_type(request, embedded)
    timeout_ms = int_param(
        request,
        "timeout",
        int(member.instance.get("request_timeout_ms", DEFAULT_REQUEST_TIMEOUT_MS)),
        0,
        settings.max_wait_ms,
    )
    max_bytes = int_param(
        request, "max_bytes", settings.default_fetch_bytes, 1, settings.max_fetch_bytes
    )
    min_bytes = min(int(member.instance.get("fetch_min_bytes", 1)), max_bytes)
    for topic in _topics_of(member):
        require(request, "topic", topic, "read")
    refuse_when_full(gateway.notifier, settings)
    # An instance created before it had the setting reads as Kafka's default does.
    isolation = ISOLATIONS[member.instance.get("isolation", Isolation.READ_UNCOMMITTED.value)]
    limits = FetchLimits(MAX_RECORDS, max_bytes, min_bytes, timeout_ms, isolation)
    schemas = embedded in SCHEMA_FORMATS
    decode = record_decoder("binary" if schemas else embedded, codecs.ByteBudget(max_bytes))
    fetched = await coordinator.fetch(name, instance, limits, decode=decode)
    for topic, count in fetched.counts.items():
        gateway.metrics.traffic.fetched(topic, count, 0)
    found = fetched.records
    if schemas:
        found = await schema_formats.decoded(request, embedded, found)
    return web.Response(body=_ENCODER.encode(found), content_type=media)


def _topics_of(member: Member) -> list[str]:
    """The topics an instance reads: subscribed, or manually assigned."""
    return sorted(set(member.topics) | {topic for topic, _ in member.target})


async def assign(request: web.Request) -> web.Response:
    """Kafka's assign(): `{"partitions": [{"topic", "partition"}]}` (none: nothing); refused
    with 40903 for a subscribed instance, as v2 refuses it."""
    name = _group(request)
    asked = _partitions(await _body(request), "partitions", with_offset=False, empty=True)
    for topic, _ in asked:
        refuse_internal(topic, "consuming it")
        require(request, "topic", topic, "read")
    _coordinator(request).assign(name, _instance(request), tuple(dict.fromkeys(asked)))
    await _durable(request, name)
    return web.Response(status=204)


async def assignments(request: web.Request) -> web.Response:
    """The partitions the instance reads, assigned manually or by its group."""
    member = _coordinator(request).touch(_group(request), _instance(request))
    return answer(
        request,
        {"partitions": [{"topic": t, "partition": p} for t, p in sorted(member.target)]},
    )


def _records_type(request: web.Request, embedded: str) -> str:
    """The records' media type: the instance's format; an Accept naming another embedded
    format answers 406 (40601), as v2 does."""
    own = RECORDS_TYPES[embedded]
    offered = (own, "application/vnd.kafka.v2+json", codecs.JSON)
    chosen = codecs.negotiate(request.headers.get("Accept", ""), offered, own)
    if chosen is None:
        raise v2_error(
            406,
            UNSUPPORTED_FORMAT,
            f"this consumer instance reads the {embedded} format; Accept {own}",
        )
    return own


_ENCODER = msgspec.json.Encoder()


def _partitions(
    doc: dict[str, Any], field: str, with_offset: bool, empty: bool = False
) -> list[tuple[Any, ...]]:
    """`[{"topic", "partition"(, "offset")}]` from the body, checked (`empty`: may be [])."""
    items = doc.get(field)
    if not isinstance(items, list) or not (items or empty):
        raise _invalid(f"{field} must be a non-empty list")
    if len(items) > MAX_PARTITIONS:
        raise _invalid(f"{field} lists more than {MAX_PARTITIONS} partitions")
    out: list[tuple[Any, ...]] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise _invalid(f"{field}[{i}] must be an object")
        topic, partition = item.get("topic"), item.get("partition")
        if not isinstance(topic, str):
            raise _invalid(f"{field}[{i}].topic must be a topic name")
        if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
            raise _invalid(f"{field}[{i}].partition must be a partition number")
        if not with_offset:
            out.append((topic, partition))
            continue
        offset = item.get("offset")
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset < INT64_MAX:
            raise _invalid(f"{field}[{i}].offset must be a non-negative offset")
        out.append((topic, partition, offset))
    return out


async def commit(request: web.Request) -> web.Response:
    """No body: everything delivered so far. `{"offsets": [...]}`: each the offset of the last
    record consumed (the next one, offset + 1, is committed, as v2 does)."""
    name, instance = _group(request), _instance(request)
    doc = await _body(request, optional=True)
    coordinator = _coordinator(request)
    if "offsets" not in doc:
        for topic in coordinator.touch(name, instance).topics:
            require(request, "topic", topic, "read")
        coordinator.commit(name, instance, None, None)
    else:
        given = _partitions(doc, "offsets", with_offset=True)
        for topic, _, _ in given:
            require(request, "topic", topic, "read")
        targets = [((t, p), o + 1, "") for t, p, o in given]
        coordinator.commit(name, instance, targets, None, within_log=False)
    await _durable(request, name)
    return web.Response(status=200)


async def committed(request: web.Request) -> web.Response:
    name, instance = _group(request), _instance(request)
    asked = _partitions(await _body(request), "partitions", with_offset=False)
    for topic, _ in asked:
        require(request, "topic", topic, "read")
    found = _coordinator(request).committed(name, instance, asked)
    return answer(
        request,
        {
            "offsets": [
                {"topic": t, "partition": p, "offset": c.offset, "metadata": c.metadata}
                for (t, p), c in found
                if c is not None
            ]
        },
    )


async def seek(request: web.Request) -> web.Response:
    given = _partitions(await _body(request), "offsets", with_offset=True)
    return await _seek(request, [((t, p), o) for t, p, o in given])


async def seek_beginning(request: web.Request) -> web.Response:
    asked = _partitions(await _body(request), "partitions", with_offset=False)
    return await _seek(request, [(tp, "earliest") for tp in asked])


async def seek_end(request: web.Request) -> web.Response:
    asked = _partitions(await _body(request), "partitions", with_offset=False)
    return await _seek(request, [(tp, "latest") for tp in asked])


async def _seek(
    request: web.Request, targets: list[tuple[tuple[str, int], object]]
) -> web.Response:
    for (topic, _), _ in targets:
        require(request, "topic", topic, "read")
    name, instance = _group(request), _instance(request)
    coordinator = _coordinator(request)
    configs = coordinator.touch(name, instance).instance  # seekToEnd: at its isolation.level
    isolation = ISOLATIONS[configs.get("isolation", Isolation.READ_UNCOMMITTED.value)]
    await coordinator.seek(name, instance, targets, within_log=False, isolation=isolation)
    return web.Response(status=204)


async def _durable(request: web.Request, name: str) -> None:
    """Answer a group change only once its offsets partition's replicas all have it."""
    timeout_ms = gateway_of(request).settings.default_produce_timeout_ms
    await _coordinator(request).durable(name, timeout_ms)
