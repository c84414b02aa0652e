"""Record routes: produce, long-poll fetch, offset lookup by time, delete-records."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from aiohttp import web

from engine.errors import UnknownTopic
from gateway.api.fetch import (
    INT64_MAX,
    FetchAnswer,
    fetch_position,
    isolation_of,
    read_from_sibling,
    read_in_sync,
    read_partition,
    refuse_when_full,
    start_offset,
)
from gateway.api.topics import refuse_internal
from gateway.api.transactions import produce_transaction
from gateway.auth.middleware import require_create_topic
from gateway.formats import codecs
from gateway.formats.decoded import decode_values
from gateway.http.params import (
    json_object,
    json_response,
    parse_int,
    partition_param,
    query_int,
    read_body,
)
from gateway.http.problem import Problem, bad_request
from gateway.produce.front import ProduceRequest
from gateway.produce.idempotency import validate_key
from gateway.settings import Settings
from gateway.state import Gateway, gateway_of
from replication.acks import Acks
from replication.errors import NotLeader
from replication.fetch_limits import FetchLimits, latest_offset
from replication.metadata import RACK_NAME
from replication.node_contract import FORWARDED_BY
from schemas.validation import MAX_SCHEMA_ID, Field, Named


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/topics/{topic}/records", produce)
    app.router.add_post("/v1/topics/{topic}/partitions/{partition}/records", produce)
    app.router.add_get("/v1/topics/{topic}/partitions/{partition}/records", fetch)
    app.router.add_get("/v1/topics/{topic}/partitions/{partition}/offsets", offsets)
    app.router.add_post("/v1/topics/{topic}/partitions/{partition}/delete-records", delete_records)


async def ensure_topic(request: web.Request, gateway: Gateway, name: str) -> None:
    if name in gateway.broker.store.view.topics:
        return
    if not gateway.settings.auto_create_topics:
        raise UnknownTopic(f"topic {name!r} does not exist", name)
    require_create_topic(request, name)
    await gateway.broker.create_topic(name, gateway.settings.default_partitions, None, {})


async def produce(request: web.Request) -> web.Response:
    gateway = gateway_of(request)
    name = request.match_info["topic"]
    refuse_internal(name, "producing to it")
    partition = partition_param(request) if "partition" in request.match_info else None
    if request.content_type not in codecs.PRODUCE_TYPES:
        raise Problem(
            415,
            "UNSUPPORTED_MEDIA_TYPE",
            f"Content-Type {request.content_type!r} is not one of "
            f"{', '.join(codecs.PRODUCE_TYPES)}",
        )
    acks, timeout_ms, key = produce_options(request, gateway)
    body = await read_body(request, gateway.settings)
    await ensure_topic(request, gateway, name)
    answer = await gateway.producer.produce(
        ProduceRequest(
            topic=name,
            partition=partition,
            acks=acks,
            timeout_ms=timeout_ms,
            content_type=request.content_type,
            body=body,
            key=request.query.get("key"),
            idempotency_key=key,
            target=request.path_qs,
            forwarded=FORWARDED_BY in request.headers,
            schemas=_named_schemas(request.query),
            transaction=produce_transaction(request, request.query),
        )
    )
    return json_response(answer, produced(acks))


def _named_schemas(query: Mapping[str, str]) -> dict[Field, Named] | None:
    """`value_schema_id` / `key_schema_id`: the registered schema a validated topic checks the
    request's JSON values (keys) against, instead of their subject's latest."""
    named: dict[Field, Named] = {}
    for field in ("key", "value"):
        name = f"{field}_schema_id"
        if query.get(name, "") != "":
            named[field] = Named(schema_id=query_int(query, name, None, 1, MAX_SCHEMA_ID))
    return named or None


async def fetch(request: web.Request) -> web.StreamResponse:
    gateway = gateway_of(request)
    settings = gateway.settings
    topic, partition = request.match_info["topic"], partition_param(request)
    if decode_values(request.query):
        return await _fetch_decoded(request, topic, partition)
    client_rack = request.query.get("client_rack")
    if client_rack is not None:
        answer = await _fetch_in_rack(request, topic, partition, client_rack)
        if answer is not None:
            return web.Response(
                body=answer.body, content_type=answer.content_type, headers=answer.headers
            )
    try:
        leader = await gateway.replicas.leader(topic, partition)
    except NotLeader:
        accept, offset, limits = _fetch_params(request, settings)
        read = read_from_sibling(gateway, topic, partition, offset, limits, accept)
        if read is None:
            if gateway.replicas.siblings is not None:
                gateway.replicas.siblings.note_forwarded()
            raise  # the forwarding middleware takes it to the leader
        answer = read
    else:
        accept, offset, limits = _fetch_params(request, settings)
        refuse_when_full(gateway.notifier, settings)
        start = start_offset(offset, leader, limits.isolation)
        answer = await read_partition(gateway, topic, partition, start, limits, accept)
    return web.Response(body=answer.body, content_type=answer.content_type, headers=answer.headers)


async def _fetch_decoded(request: web.Request, topic: str, partition: int) -> web.Response:
    """A fetch with `decode_values=schema`: JSON or NDJSON, served by the partition's leader
    (another node's, or another worker's, is forwarded there)."""
    gateway = gateway_of(request)
    leader = await gateway.replicas.leader(topic, partition)
    accept, offset, limits = _fetch_params(request, gateway.settings)
    if accept == codecs.RECORD_BATCH:
        raise Problem(
            406,
            "NOT_ACCEPTABLE",
            f"decode_values=schema answers {codecs.JSON} or {codecs.NDJSON}: record batches "
            "carry values as stored",
        )
    refuse_when_full(gateway.notifier, gateway.settings)
    start = start_offset(offset, leader, limits.isolation)
    answer = await read_partition(
        gateway, topic, partition, start, limits, accept, gateway.value_decoder
    )
    return web.Response(body=answer.body, content_type=answer.content_type, headers=answer.headers)


async def _fetch_in_rack(
    request: web.Request, topic: str, partition: int, client_rack: str
) -> FetchAnswer | None:
    """A fetch naming the consumer's rack (KIP-392): served here by an in-sync replica of that
    rack, or sent to one (NotLeader naming it); None: none stands there, the leader serves."""
    gateway = gateway_of(request)
    if not RACK_NAME.fullmatch(client_rack):
        raise bad_request(
            f"client_rack must be 1 to 64 printable ASCII characters without spaces, got "
            f"{client_rack!r}",
            "INVALID_PARAMETER",
        )
    gateway.replicas.check_partition(topic, partition)
    node = gateway.replicas.read_replica_for(topic, partition, client_rack)
    if node is None:
        return None
    if node != gateway.settings.node_id:
        raise NotLeader(f"node {node} serves {topic}-{partition} in rack {client_rack!r}", node)
    accept, offset, limits = _fetch_params(request, gateway.settings)
    refuse_when_full(gateway.notifier, gateway.settings)
    local = gateway.replicas.local(topic, partition)
    if local is None:
        return None
    return await read_in_sync(
        gateway, topic, partition, start_offset(offset, local, limits.isolation), limits, accept
    )


def _fetch_params(request: web.Request, settings: Settings) -> tuple[str, int | str, FetchLimits]:
    """A partition fetch's media type, offset (or earliest/latest) and limits, checked."""
    accept = codecs.negotiate(request.headers.get("Accept", ""), codecs.FETCH_TYPES, codecs.JSON)
    if accept is None:
        raise Problem(
            406,
            "NOT_ACCEPTABLE",
            f"Accept allows none of {', '.join(codecs.FETCH_TYPES)}",
        )
    return accept, *fetch_position(request.query, settings)


async def offsets(request: web.Request) -> web.Response:
    """The first offset at or after a timestamp, like Kafka's ListOffsets: at `isolation`
    read_committed, `latest` is the last stable offset, and a timestamp's offset one below it
    (none at or past it: the last stable offset is answered)."""
    gateway = gateway_of(request)
    leader = await gateway.replicas.leader(request.match_info["topic"], partition_param(request))
    raw = request.query.get("timestamp", "latest")
    isolation = isolation_of(request.query)
    if raw == "earliest":
        return json_response({"offset": leader.log_start_offset, "timestamp": None})
    if raw == "latest":
        return json_response({"offset": latest_offset(leader, isolation), "timestamp": None})
    timestamp = parse_int(raw)
    if timestamp is None or not 0 <= timestamp <= INT64_MAX:
        raise bad_request(
            f"timestamp must be milliseconds since the epoch, earliest or latest, got {raw!r}",
            "INVALID_PARAMETER",
        )
    found = await gateway.replicas.offset_for_timestamp(leader, timestamp)
    latest = latest_offset(leader, isolation)
    if found is None or found[0] >= latest:
        return json_response({"offset": latest, "timestamp": None})
    return json_response({"offset": found[0], "timestamp": found[1]})


async def delete_records(request: web.Request) -> web.Response:
    gateway = gateway_of(request)
    topic = request.match_info["topic"]
    refuse_internal(topic, "deleting its records")
    leader = await gateway.replicas.leader(topic, partition_param(request))
    doc = await json_object(request, gateway.settings)
    before = doc.get("before_offset")
    if isinstance(before, bool) or not isinstance(before, int):
        raise bad_request("before_offset must be an integer", "INVALID_PARAMETER")
    if set(doc) - {"before_offset"}:
        raise bad_request("the only field is before_offset", "INVALID_REQUEST")
    start = await asyncio.to_thread(leader.delete_records, before)
    return json_response({"log_start_offset": start})


def produced(acks: Acks) -> int:
    """A produce's status: 202 when nothing was awaited (acks=0), else 200."""
    return 202 if acks is Acks.NONE else 200


def produce_delivery(query: Mapping[str, str], settings: Settings) -> tuple[Acks, int]:
    """A produce's `acks` (all when absent: 0, 1, all or Kafka's -1 for all) and
    `timeout_ms`, from its query: every produce route's and the internal append's, on aiohttp
    and on the fast routes."""
    try:
        acks = Acks.parse(query.get("acks", "all"))
    except ValueError as exc:
        raise bad_request(str(exc), "INVALID_PARAMETER") from None
    timeout_ms = query_int(
        query, "timeout_ms", settings.default_produce_timeout_ms, 0, settings.max_wait_ms
    )
    return acks, timeout_ms


def produce_options(request: web.Request, gateway: Gateway) -> tuple[Acks, int, str | None]:
    """A produce's `acks`, `timeout_ms` and `Idempotency-Key`, checked (/v1 and the REST
    Proxy take the same)."""
    acks, timeout_ms = produce_delivery(request.query, gateway.settings)
    raw_key = request.headers.get("Idempotency-Key")
    return acks, timeout_ms, None if raw_key is None else validate_key(raw_key)
