"""v2's metadata routes: topics (with configs and partitions), partitions, a partition's
beginning and end offsets, brokers. Read from this node's view of the cluster, as /v1 does;
a partition's offsets come from its leader (forwarded there if another node leads it)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gateway.api.rest_proxy.media import add_route, answer
from gateway.api.topics import INTERNAL_TOPICS
from gateway.auth.middleware import may
from gateway.http.params import partition_param
from gateway.state import gateway_of
from replication.metadata import NO_LEADER
from replication.replica_manager import ReplicaManager


def add_routes(app: web.Application) -> None:
    add_route(app, "GET", "/topics", list_topics)
    add_route(app, "GET", "/topics/{topic}", describe_topic)
    add_route(app, "GET", "/topics/{topic}/partitions", list_partitions)
    add_route(app, "GET", "/topics/{topic}/partitions/{partition}", describe_partition)
    add_route(app, "GET", "/topics/{topic}/partitions/{partition}/offsets", partition_offsets)
    add_route(app, "GET", "/brokers", list_brokers)


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
    spec = replicas.topic(request.match_info["topic"])
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
    spec = replicas.topic(request.match_info["topic"])
    return answer(request, [partition_doc(replicas, spec.name, p) for p in range(spec.partitions)])


async def describe_partition(request: web.Request) -> web.Response:
    replicas = gateway_of(request).replicas
    topic, partition = request.match_info["topic"], partition_param(request)
    replicas.check_partition(topic, partition)
    return answer(request, partition_doc(replicas, topic, partition))


async def partition_offsets(request: web.Request) -> web.Response:
    """The first offset still in the log and the high watermark (what a consumer can read up
    to), from the partition's leader."""
    gateway = gateway_of(request)
    topic, partition = request.match_info["topic"], partition_param(request)
    gateway.replicas.check_partition(topic, partition)
    leader = await gateway.replicas.leader(topic, partition)
    return answer(
        request, {"beginning_offset": leader.log_start_offset, "end_offset": leader.high_watermark}
    )


async def list_brokers(request: web.Request) -> web.Response:
    """The cluster's live nodes, by id."""
    return answer(request, {"brokers": sorted(gateway_of(request).broker.store.view.live)})
