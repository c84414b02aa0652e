"""Topic admin routes: create, list, describe, alter (configs, partitions), delete."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from engine.manager import Topic, check_partition_count
from engine.offsets_topic import OFFSETS_TOPIC
from gateway.params import choice_param, json_object, json_response
from gateway.problems import Problem, bad_request
from gateway.state import gateway_of

_CREATE_FIELDS = {"name", "partitions", "replication_factor", "configs"}
_ALTER_FIELDS = {"partitions", "configs"}
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC})


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/topics", create_topic)
    app.router.add_get("/v1/topics", list_topics)
    app.router.add_get("/v1/topics/{topic}", describe_topic)
    app.router.add_patch("/v1/topics/{topic}", alter_topic)
    app.router.add_delete("/v1/topics/{topic}", delete_topic)


def describe(topic: Topic, node_id: int) -> dict[str, Any]:
    return {
        "name": topic.name,
        "topic_id": topic.topic_id,
        "configs": topic.config.to_dict(),
        "overrides": topic.overrides,
        "partitions": [
            {
                "partition": log.partition,
                "leader": node_id,
                "replicas": [node_id],
                "isr": [node_id],
                "log_start_offset": log.log_start_offset,
                "high_watermark": log.high_watermark,
                "log_end_offset": log.log_end_offset,
                "size_bytes": log.size_bytes,
            }
            for log in topic.partitions
        ],
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
    replication = doc.get("replication_factor", 1)
    if isinstance(replication, bool) or not isinstance(replication, int) or replication < 1:
        raise bad_request("replication_factor must be a positive integer", "INVALID_REQUEST")
    if replication > 1:
        raise Problem(
            400,
            "INVALID_REPLICATION_FACTOR",
            f"replication_factor {replication} is larger than the 1 available broker",
        )
    name = doc.get("name")
    if not isinstance(name, str):
        raise Problem(400, "INVALID_TOPIC_NAME", "name must be a string")
    topic = await asyncio.to_thread(
        gateway.manager.create_topic, name, doc.get("partitions", 1), _configs(doc)
    )
    gateway.groups.topics_changed()  # a deleted topic that a group still reads, made again
    return json_response(describe(topic, gateway.settings.node_id), status=201)


def refuse_internal(name: str, action: str) -> None:
    """The offsets topic is written only by the group coordinator, and its partition count
    decides where every group lives."""
    if name in INTERNAL_TOPICS:
        raise Problem(403, "INTERNAL_TOPIC", f"{name!r} is an internal topic; {action} is refused")


async def list_topics(request: web.Request) -> web.Response:
    """User topics; `internal=true` adds the internal ones (kafka-topics' --exclude-internal,
    the other way round)."""
    topics = gateway_of(request).manager.topics
    internal = choice_param(request, "internal", "false", ("true", "false")) == "true"
    return json_response(
        {
            "topics": [
                {"name": t.name, "partitions": len(t.partitions)}
                for t in sorted(topics.values(), key=lambda t: t.name)
                if internal or t.name not in INTERNAL_TOPICS
            ]
        }
    )


async def describe_topic(request: web.Request) -> web.Response:
    gateway = gateway_of(request)
    topic = gateway.manager.topic(request.match_info["topic"])
    return json_response(describe(topic, gateway.settings.node_id))


async def alter_topic(request: web.Request) -> web.Response:
    """Set or remove (null) config overrides, and/or grow the partition count."""
    gateway = gateway_of(request)
    name = request.match_info["topic"]
    topic = gateway.manager.topic(name)
    doc = await json_object(request, gateway.settings)
    _unknown_fields(doc, _ALTER_FIELDS)
    grow = False
    if "partitions" in doc:
        check_partition_count(doc["partitions"])
        if doc["partitions"] != len(topic.partitions):
            refuse_internal(name, "changing its partition count")
        grow = doc["partitions"] != len(topic.partitions)
        if grow:
            check_partition_count(doc["partitions"], more_than=len(topic.partitions))
    if "configs" in doc:
        topic = gateway.manager.alter_topic_configs(name, _configs(doc))
    if grow:
        topic = await asyncio.to_thread(gateway.manager.add_partitions, name, doc["partitions"])
        gateway.groups.topics_changed()
    return json_response(describe(topic, gateway.settings.node_id))


async def delete_topic(request: web.Request) -> web.Response:
    gateway = gateway_of(request)
    name = request.match_info["topic"]
    topic = gateway.manager.topic(name)
    refuse_internal(name, "deleting it")
    await asyncio.to_thread(gateway.manager.delete_topic, name)
    for log in topic.partitions:
        gateway.notifier.unwatch(log)
    gateway.idempotency.forget_topic(name)
    gateway.groups.topics_changed(deleted=name)
    return web.Response(status=204)
