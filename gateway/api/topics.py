"""Topic admin routes: create, list, describe, alter (configs, partitions), delete."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from engine.internal_topics import INTERNAL_TOPICS
from engine.manager import check_partition_count
from gateway.api import all_workers
from gateway.api.acls import with_authorized_operations
from gateway.auth.middleware import may, require_create_topic
from gateway.http.params import choice_param, json_object, json_response
from gateway.http.problem import Problem, bad_request
from gateway.state import gateway_of
from replication.metadata import NO_LEADER
from replication.replica_manager import ReplicaManager

_CREATE_FIELDS = {"name", "partitions", "replication_factor", "configs"}
_ALTER_FIELDS = {"partitions", "configs"}


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/topics", create_topic)
    app.router.add_get("/v1/topics", list_topics)
    app.router.add_get("/v1/topics/{topic}", describe_topic)
    app.router.add_patch("/v1/topics/{topic}", alter_topic)
    app.router.add_delete("/v1/topics/{topic}", delete_topic)


def describe(replicas: ReplicaManager, name: str) -> dict[str, Any]:
    """A topic with each partition's leader, replicas, ISR, eligible leader replicas and the
    replicas whose log a storage failure took offline, and the offsets of this node's replica
    of it (null where this node holds none): its logical log start and, tiered, the first
    offset still on local disk (below it, reads come from S3)."""
    spec = replicas.topic(name)
    view = replicas.store.view
    rows = []
    for p in range(spec.partitions):
        state = view.partition(name, p)
        local = replicas.local(name, p)
        rows.append(
            {
                "partition": p,
                "leader": None if state is None or state.leader == NO_LEADER else state.leader,
                "replicas": [] if state is None else list(state.replicas),
                "isr": [] if state is None else list(state.isr),
                "eligible_leader_replicas": [] if state is None else list(state.elr),
                "offline_replicas": sorted(view.offline_replicas(name, p)),
                "log_start_offset": None if local is None else local.log_start_offset,
                "local_log_start_offset": None if local is None else local.local_log_start_offset,
                "high_watermark": None if local is None else local.high_watermark,
                "log_end_offset": None if local is None else local.log_end_offset,
                "size_bytes": None if local is None else local.size_bytes,
            }
        )
    return {
        "name": spec.name,
        "topic_id": spec.topic_id,
        "configs": replicas.topic_config(name).to_dict(),
        "overrides": dict(spec.configs),
        "partitions": rows,
    }


def _unknown_fields(doc: dict[str, Any], allowed: set[str]) -> None:
    unknown = set(doc) - allowed
    if unknown:
        raise bad_request(f"unknown field(s): {', '.join(sorted(unknown))}", "INVALID_REQUEST")


def _configs(doc: dict[str, Any]) -> dict[str, object]:
    configs = doc.get("configs", {})
    if not isinstance(configs, dict):
        raise bad_request("configs must be an object of config names to values", "INVALID_CONFIG")
    return configs


async def create_topic(request: web.Request) -> web.Response:
    gateway = gateway_of(request)
    doc = await json_object(request, gateway.settings)
    _unknown_fields(doc, _CREATE_FIELDS)
    replication = doc.get("replication_factor")
    if "replication_factor" in doc and (
        isinstance(replication, bool) or not isinstance(replication, int) or replication < 1
    ):
        raise bad_request("replication_factor must be a positive integer", "INVALID_REQUEST")
    name = doc.get("name")
    if not isinstance(name, str):
        raise Problem(400, "INVALID_TOPIC_NAME", "name must be a string")
    require_create_topic(request, name)
    partitions = doc.get("partitions", 1)
    check_partition_count(partitions)
    spec = await gateway.broker.create_topic(name, partitions, replication, _configs(doc))
    return json_response(await _described(request, spec.name), status=201)


async def _described(request: web.Request, name: str) -> dict[str, Any]:
    """describe(), with the offsets of partitions held by other workers filled in."""
    gateway = gateway_of(request)
    doc = describe(gateway.replicas, name)
    if all_workers.merging(request):
        await all_workers.fill_partitions(gateway, doc)
    return doc


def refuse_internal(name: str, action: str) -> None:
    """The internal topics are written only by their coordinators (groups, share groups, the
    schema registry), and their partition counts decide where every group lives."""
    if name in INTERNAL_TOPICS:
        raise Problem(403, "INTERNAL_TOPIC", f"{name!r} is an internal topic; {action} is refused")


async def list_topics(request: web.Request) -> web.Response:
    """User topics; `internal=true` adds the internal ones (kafka-topics' --exclude-internal,
    the other way round). With auth, only those the principal may describe."""
    topics = gateway_of(request).broker.store.view.topics
    internal = choice_param(request, "internal", "false", ("true", "false")) == "true"
    return json_response(
        {
            "topics": [
                {"name": t.name, "partitions": t.partitions}
                for t in sorted(topics.values(), key=lambda t: t.name)
                if (internal or t.name not in INTERNAL_TOPICS)
                and may(request, "topic", t.name, "describe")
            ]
        }
    )


async def describe_topic(request: web.Request) -> web.Response:
    name = request.match_info["topic"]
    doc = await _described(request, name)
    return json_response(with_authorized_operations(request, doc, "topic", name))


async def alter_topic(request: web.Request) -> web.Response:
    """Set or remove (null) config overrides, and/or grow the partition count."""
    gateway = gateway_of(request)
    name = request.match_info["topic"]
    spec = gateway.replicas.topic(name)
    doc = await json_object(request, gateway.settings)
    _unknown_fields(doc, _ALTER_FIELDS)
    partitions = None
    if "partitions" in doc:
        check_partition_count(doc["partitions"])
        if doc["partitions"] != spec.partitions:
            refuse_internal(name, "changing its partition count")
            check_partition_count(doc["partitions"], more_than=spec.partitions)
            partitions = doc["partitions"]
    configs = _configs(doc) if "configs" in doc else None
    if partitions is not None or configs is not None:
        await gateway.broker.alter_topic(name, partitions, configs)
    return json_response(await _described(request, name))


async def delete_topic(request: web.Request) -> web.Response:
    gateway = gateway_of(request)
    name = request.match_info["topic"]
    gateway.replicas.topic(name)
    refuse_internal(name, "deleting it")
    await gateway.broker.delete_topic(name)
    return web.Response(status=204)
