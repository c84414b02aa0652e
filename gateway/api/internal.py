"""Internal routes between nodes: a follower's fetches (one partition, or every partition it
follows here in a fetch session) and its leader-epoch query (the contract of
`replication.replica_client`), a group coordinator's consumer fetch of its members' partitions
led here (`groups.remote`), and the append of batches a front node built for a partition led
here (`replication.forward_client`). Errors are problem+json like elsewhere."""

from __future__ import annotations

from aiohttp import web

from engine.errors import EngineError
from engine.producer_state import ProducerIdentity
from gateway.api.fetch import refuse_when_full
from gateway.api.problems import from_engine_error
from gateway.api.records import produce_delivery
from gateway.formats import codecs
from gateway.http.params import int_param, json_object, json_response, partition_param, read_body
from gateway.http.problem import Problem, problem_body
from gateway.state import gateway_of
from groups.transactions import group_offsets
from replication import session_wire
from replication.node_contract import (
    APPEND_ROUTE,
    EPOCH_END_ROUTE,
    HIGH_WATERMARK,
    LOG_START_OFFSET,
    MARKER_ROUTE,
    REPLICA_RECORDS_ROUTE,
    SESSION_FETCH,
    SESSION_FETCH_ROUTE,
    TRANSACTION_OFFSETS_ROUTE,
)

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
INT16_MAX = 2**15 - 1


def add_routes(app: web.Application) -> None:
    app.router.add_get(REPLICA_RECORDS_ROUTE, replica_fetch)
    app.router.add_post(SESSION_FETCH_ROUTE, session_fetch)
    app.router.add_get(EPOCH_END_ROUTE, epoch_end)
    app.router.add_post(APPEND_ROUTE, append)
    app.router.add_post(MARKER_ROUTE, write_marker)
    app.router.add_post(TRANSACTION_OFFSETS_ROUTE, transaction_offsets)


async def append(request: web.Request) -> web.Response:
    """Batches another node's produce front built for a partition led here: appended as the
    leader appends any producer batch (CRC and sizes checked), acks honoured."""
    gateway = gateway_of(request)
    settings = gateway.settings
    if request.content_type != codecs.RECORD_BATCH:
        raise Problem(415, "UNSUPPORTED_MEDIA_TYPE", f"expected {codecs.RECORD_BATCH}")
    acks, timeout_ms = produce_delivery(request.query, settings)
    body = await read_body(request, settings)
    topic, partition = request.match_info["topic"], partition_param(request)
    if "producer_id" in request.query:
        producer = ProducerIdentity(
            int_param(request, "producer_id", 0, 0, INT64_MAX),
            int_param(request, "producer_epoch", 0, 0, INT16_MAX),
        )
        info = await gateway.replicas.append_transactional(
            topic, partition, body, acks, timeout_ms, producer
        )
    else:
        info = await gateway.replicas.append(topic, partition, body, acks, timeout_ms)
    return json_response({"base_offset": info.first_offset, "count": info.record_count})


async def write_marker(request: web.Request) -> web.Response:
    """A transaction coordinator's marker for a partition led here (`replication.markers`)."""
    gateway = gateway_of(request)
    doc = await json_object(request, gateway.settings)
    try:
        producer = ProducerIdentity(int(doc["producer_id"]), int(doc["producer_epoch"]))
        commit, coordinator_epoch = bool(doc["commit"]), int(doc["coordinator_epoch"])
        timeout_ms = int(doc["timeout_ms"])
    except (KeyError, TypeError, ValueError) as exc:
        raise Problem(400, "INVALID_REQUEST", f"a malformed marker request: {exc!r}") from exc
    await gateway.replicas.write_marker(
        request.match_info["topic"],
        partition_param(request),
        producer,
        commit,
        coordinator_epoch,
        timeout_ms,
    )
    return web.Response(status=204)


async def transaction_offsets(request: web.Request) -> web.Response:
    """A transaction coordinator's call for a group coordinated here
    (`groups.transactions.group_offsets`): check a member's generation (offsets null), or
    commit a committed transaction's offsets."""
    gateway = gateway_of(request)
    doc = await json_object(request, gateway.settings)
    group = request.match_info["group"]
    try:
        member_id, generation = str(doc["member_id"]), int(doc["generation_id"])
        raw = doc["offsets"]
        offsets = None if raw is None else [(str(t), int(p), int(o), str(m)) for t, p, o, m in raw]
    except (KeyError, TypeError, ValueError) as exc:
        raise Problem(400, "INVALID_REQUEST", f"a malformed offsets request: {exc!r}") from exc
    if offsets is None:
        gateway.groups.check_generation(group, member_id, generation)
    else:
        group_offsets.here(gateway.groups, group, offsets)
        await gateway.groups.durable(group, gateway.settings.default_produce_timeout_ms)
    return web.Response(status=204)


async def replica_fetch(request: web.Request) -> web.Response:
    gateway = gateway_of(request)
    settings = gateway.settings
    result, leader = await gateway.replicas.replica_fetch(
        request.match_info["topic"],
        partition_param(request),
        replica=int_param(request, "replica", None, 0, INT32_MAX),
        leader_epoch=int_param(request, "leader_epoch", None, 0, INT32_MAX),
        offset=int_param(request, "offset", None, 0, INT64_MAX),
        max_bytes=int_param(request, "max_bytes", None, 1, settings.max_fetch_bytes),
        timeout_ms=int_param(request, "timeout_ms", 0, 0, settings.max_wait_ms),
    )
    return web.Response(
        body=bytes(result.data),
        content_type=codecs.RECORD_BATCH,
        headers={
            HIGH_WATERMARK: str(leader.high_watermark),
            LOG_START_OFFSET: str(leader.log_start_offset),
        },
    )


async def session_fetch(request: web.Request) -> web.Response:
    """A follower node's fetch for every partition it follows here, or a consumer's (replica
    -1: another node's group coordinator) for its members' partitions led here
    (replication.session_wire): each partition's records, marks or problem, one part each. A
    consumer's long-poll counts as a parked fetch, refused as a partition's is when too many
    are parked."""
    gateway = gateway_of(request)
    settings = gateway.settings
    if request.content_type != SESSION_FETCH:
        raise Problem(415, "UNSUPPORTED_MEDIA_TYPE", f"expected {SESSION_FETCH}")
    try:
        fetch = session_wire.decode_request(await read_body(request, settings))
    except session_wire.MalformedSessionFetch as exc:
        raise Problem(400, "MALFORMED_SESSION_FETCH", str(exc)) from None
    if fetch.max_wait_ms > settings.max_wait_ms or fetch.max_bytes > settings.max_fetch_bytes:
        raise Problem(
            400,
            "INVALID_PARAMETER",
            f"max_wait_ms and max_bytes are at most {settings.max_wait_ms} and "
            f"{settings.max_fetch_bytes}",
        )
    if fetch.consumer and fetch.max_wait_ms:
        refuse_when_full(gateway.notifier, settings)
    session_id, found = await gateway.replicas.session_fetch(fetch)
    parts: dict[tuple[str, int], session_wire.PartitionAnswer] = {}
    for key, outcome in found.items():
        if isinstance(outcome, EngineError):
            problem = from_engine_error(outcome)
            parts[key] = session_wire.PartitionAnswer(
                -1, -1, error_status=problem.status, error_body=problem_body(problem)
            )
        else:
            parts[key] = session_wire.PartitionAnswer(
                outcome.high_watermark, outcome.log_start_offset, outcome.data
            )
    body = b"".join(session_wire.encode_answer(session_wire.SessionFetchAnswer(session_id, parts)))
    return web.Response(body=body, content_type=SESSION_FETCH)


async def epoch_end(request: web.Request) -> web.Response:
    epoch, end = gateway_of(request).replicas.epoch_end(
        request.match_info["topic"],
        partition_param(request),
        int_param(request, "leader_epoch", None, 0, INT32_MAX),
        int_param(request, "epoch", None, -1, INT32_MAX),
    )
    return json_response({"epoch": epoch, "end_offset": end})
