"""v2's metadata routes: topics (with configs and partitions), partitions, a partition's
beginning and end offsets, brokers. Read from this node's view of the cluster, as /v1 does;
a partition's offsets come from its leader (forwarded there if another node leads it)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from engine.errors import UnknownTopic
from engine.internal_topics import INTERNAL_TOPICS
from gateway.api.rest_proxy.errors import PARTITION_NOT_FOUND, v2_error
from gateway.api.rest_proxy.media import add_route, answer
from gateway.auth.middleware import may
from gateway.state import gateway_of
from replication.metadata import NO_LEADER, TopicSpec
from replication.replica_manager import ReplicaManager


def add_routes(app: web.Application) -> None:
    add_route(app, "GET", "/topics", list_topics)
    add_route(app, "GET", "/topics/{topic}", describe_topic)
    add_route(app, "GET", "/topics/{topic}/partitions", list_partitions)
    add_route(app, "GET", "/topics/{topic}/partitions/{partition}", describe_partition)
    add_route(app, "GET", "/topics/{topic}/partitions/{partition}/offsets", partition_offsets)
    add_route(app, "GET", "/brokers", list_brokers)


def topic_named(replicas: ReplicaManager, name: str) -> TopicSpec:
    """The topic, or v2's 40401 with the message Karapace's clients look for (raised as the
    partition layer's UnknownTopic, so that a node whose view lags asks the store first)."""
    spec = replicas.store.view.topics.get(name)
    if spec is None:
        raise UnknownTopic(f"Topic {name} not found", name)
    return spec


def v2_partition(request: web.Request) -> int:
    """The path's partition number; one that is not a number is a path v2 does not have
    (404, error code 404, as Confluent's and Karapace's proxies answer it)."""
    raw = request.match_info["partition"]
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 9:
        raise v2_error(404, 404, f"Partition {raw} not found")
    return int(raw)


def partition_named(request: web.Request) -> tuple[str, int]:
    """The path's topic and partition, both known (40401, 40402 otherwise)."""
    topic, partition = request.match_info["topic"], v2_partition(request)
    spec = topic_named(gateway_of(request).replicas, topic)
    if partition >= spec.partitions:
        raise v2_error(404, PARTITION_NOT_FOUND, f"Partition {partition} not found")
    return topic, partition


def partition_doc(replicas: ReplicaManager, topic: str, partition: int) -> dict[str, Any]:
    """A partition as v2 shows it: its leader (-1: none now) and each replica, whether it
    leads and whether it is in sync."""
    state = replicas.store.view.partition(topic, partition)
    if state is None:  # not placed yet (being created)
        return {"partition": partition, "leader": -1, "replicas": []}
    leader = -1 if state.leader == NO_LEADER else state.leader
    return {
        "partition": partition,
        "leader": leader,
        "replicas": [
            {"broker": node, "leader": node == leader, "in_sync": node in state.isr}
            for node in state.replicas
        ],
    }


async def list_topics(request: web.Request) -> web.Response:
    """The user topics' names (internal ones left out, as /v1 lists them); with auth, only
    those the principal may describe."""
    topics = gateway_of(request).broker.store.view.topics
    return answer(
        request,
        sorted(
            name
            for name in topics
            if name not in INTERNAL_TOPICS and may(request, "topic", name, "describe")
        ),
    )


async def describe_topic(request: web.Request) -> web.Response:
    replicas = gateway_of(request).replicas
    spec = topic_named(replicas, request.match_info["topic"])
    configs = replicas.topic_config(spec.name).to_dict()
    return answer(
        request,
        {
            "name": spec.name,
            "configs": {name: _config_text(value) for name, value in configs.items()},
            "partitions": [partition_doc(replicas, spec.name, p) for p in range(spec.partitions)],
        },
    )


def _config_text(value: object) -> str | None:
    """A config value as Kafka's admin API gives it: a string (booleans in lower case)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


async def list_partitions(request: web.Request) -> web.Response:
    replicas = gateway_of(request).replicas
    spec = topic_named(replicas, request.match_info["topic"])
    return answer(request, [partition_doc(replicas, spec.name, p) for p in range(spec.partitions)])


async def describe_partition(request: web.Request) -> web.Response:
    topic, partition = partition_named(request)
    return answer(request, partition_doc(gateway_of(request).replicas, topic, partition))


async def partition_offsets(request: web.Request) -> web.Response:
    """The first offset still in the log and the high watermark (what a consumer can read up
    to), from the partition's leader."""
    gateway = gateway_of(request)
    topic, partition = partition_named(request)
    leader = await gateway.replicas.leader(topic, partition)
    return answer(
        request, {"beginning_offset": leader.log_start_offset, "end_offset": leader.high_watermark}
    )


async def list_brokers(request: web.Request) -> web.Response:
    """The cluster's live nodes, by id."""
    return answer(request, {"brokers": sorted(gateway_of(request).broker.store.view.live)})
