"""Partition reassignment routes (Kafka's KIP-455 and kafka-reassign-partitions): start a plan,
follow the moves with the bytes copied so far, cancel them, set the reassignment throttle
(KIP-73). The controller carries the moves (other nodes forward to it); any node answers a
listing, asking the live nodes for their replicas' sizes."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gateway.api.all_workers import node_docs
from gateway.http.params import json_object, json_response, partition_param
from gateway.http.problem import bad_request
from gateway.state import Gateway, gateway_of
from replication import reassignment
from replication.metadata import NO_LEADER, PartitionState, TopicPartition

ROUTE = "/v1/cluster/reassignments"
REPLICA_SIZES_ROUTE = "/internal/v1/reassignments/replicas"
SIZES_TIMEOUT_S = 2.0  # a node slower than this to tell its replicas' sizes is left out
_PLAN_FIELDS = {"version", "partitions"}
_MOVE_FIELDS = {"topic", "partition", "replicas", "log_dirs"}


def add_routes(app: web.Application) -> None:
    app.router.add_post(ROUTE, start)
    app.router.add_get(ROUTE, listing)
    app.router.add_delete(ROUTE, cancel_all)
    app.router.add_delete(ROUTE + "/{topic}/{partition}", cancel_one)
    app.router.add_put(ROUTE + "/throttle", set_throttle)
    app.router.add_get(REPLICA_SIZES_ROUTE, replica_sizes)


def _plan(doc: dict[str, Any]) -> list[tuple[TopicPartition, list[object]]]:
    """A plan in kafka-reassign-partitions' JSON: {"version": 1, "partitions": [{"topic",
    "partition", "replicas"}]} ("log_dirs" is accepted and must be "any")."""
    unknown = set(doc) - _PLAN_FIELDS
    if unknown:
        raise bad_request(f"unknown field(s): {', '.join(sorted(unknown))}", "INVALID_REQUEST")
    if doc.get("version", 1) != 1:
        raise bad_request("version must be 1", "INVALID_REQUEST")
    moves = doc.get("partitions")
    if not isinstance(moves, list) or not moves:
        raise bad_request("partitions must be a non-empty list of moves", "INVALID_REQUEST")
    plan: list[tuple[TopicPartition, list[object]]] = []
    for i, move in enumerate(moves):
        where = f"partitions[{i}]"
        if not isinstance(move, dict):
            raise bad_request(f"{where} must be an object", "INVALID_REQUEST")
        unknown = set(move) - _MOVE_FIELDS
        if unknown:
            raise bad_request(
                f"{where}: unknown field(s): {', '.join(sorted(unknown))}", "INVALID_REQUEST"
            )
        topic, partition, replicas = move.get("topic"), move.get("partition"), move.get("replicas")
        if not isinstance(topic, str) or not topic:
            raise bad_request(f"{where}.topic must be a topic name", "INVALID_REQUEST")
        if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
            raise bad_request(f"{where}.partition must be an integer >= 0", "INVALID_REQUEST")
        if not isinstance(replicas, list):
            raise bad_request(f"{where}.replicas must be a list of node ids", "INVALID_REQUEST")
        dirs = move.get("log_dirs", [])
        if not isinstance(dirs, list) or any(d != "any" for d in dirs):
            raise bad_request(f'{where}.log_dirs: only "any" is supported', "INVALID_REQUEST")
        plan.append(((topic, partition), replicas))
    return plan


def _move(key: TopicPartition, state: PartitionState) -> dict[str, Any]:
    return {
        "topic": key[0],
        "partition": key[1],
        "replicas": list(state.target_replicas),
        "adding": list(state.adding),
        "removing": list(state.removing),
        "leader": None if state.leader == NO_LEADER else state.leader,
        "leader_epoch": state.leader_epoch,
        "isr": list(state.isr),
    }


async def start(request: web.Request) -> web.Response:
    """Start a plan: every move checked first, then all started (202), or none (a problem)."""
    gateway = gateway_of(request)
    plan = _plan(await json_object(request, gateway.settings))
    started = await gateway.broker.reassign(plan)
    moves = [_move(key, state) for key, state in started.items()]
    return json_response({"reassignments": moves}, status=202)


async def listing(request: web.Request) -> web.Response:
    """The moves in progress, each with its new replicas' progress: the bytes each holds
    against the leader's (what `sluice cluster reassign` shows as bars), and the throttle."""
    gateway = gateway_of(request)
    view = gateway.broker.store.view
    moving = reassignment.moving(view)
    sizes = await _sizes(gateway, {node for state in moving.values() for node in _asked(state)})
    moves = []
    for key, state in sorted(moving.items()):
        move = _move(key, state)
        total = sizes.get((state.leader, key))
        move["leader_size_bytes"] = total
        move["progress"] = [
            {
                "replica": r,
                "in_sync": r in state.isr,
                "size_bytes": sizes.get((r, key)),
            }
            for r in state.adding
        ]
        moves.append(move)
    return json_response(
        {"throttle_bytes_per_second": view.reassignment_throttle, "reassignments": moves}
    )


def _asked(state: PartitionState) -> set[int]:
    return {state.leader, *state.adding} - {NO_LEADER}


async def _sizes(gateway: Gateway, nodes: set[int]) -> dict[tuple[int, TopicPartition], int]:
    """(node, partition) -> the bytes of its replica, as each node tells (self included)."""
    me = gateway.settings.node_id
    found = {(me, key): size for key, size in _own_sizes(gateway).items()}
    live = sorted(nodes & gateway.broker.store.view.live)
    docs = await node_docs(gateway, live, REPLICA_SIZES_ROUTE, SIZES_TIMEOUT_S)
    for node, doc in docs.items():
        for row in doc["replicas"]:
            found[(node, (row["topic"], row["partition"]))] = row["size_bytes"]
    return found


def _own_sizes(gateway: Gateway) -> dict[TopicPartition, int]:
    moving = reassignment.moving(gateway.broker.store.view)
    sizes = {}
    for key in moving:
        local = gateway.replicas.local(*key)
        if local is not None:
            sizes[key] = local.size_bytes
    return sizes


async def replica_sizes(request: web.Request) -> web.Response:
    """This node's replicas of moving partitions and their sizes (for another node's listing)."""
    sizes = _own_sizes(gateway_of(request))
    rows = [{"topic": t, "partition": p, "size_bytes": size} for (t, p), size in sizes.items()]
    return json_response({"replicas": rows})


async def cancel_all(request: web.Request) -> web.Response:
    """Cancel every move in progress; answers the partitions put back."""
    cancelled = await gateway_of(request).broker.cancel_reassignments(None)
    return json_response({"cancelled": [_move(key, state) for key, state in cancelled.items()]})


async def cancel_one(request: web.Request) -> web.Response:
    topic = request.match_info["topic"]
    partition = partition_param(request)
    cancelled = await gateway_of(request).broker.cancel_reassignments([(topic, partition)])
    return json_response({"cancelled": [_move(key, state) for key, state in cancelled.items()]})


async def set_throttle(request: web.Request) -> web.Response:
    """{"bytes_per_second": N} sets the throttle every node applies, null lifts it; it takes
    effect on moves already running."""
    gateway = gateway_of(request)
    doc = await json_object(request, gateway.settings)
    if set(doc) != {"bytes_per_second"}:
        raise bad_request('the body must be {"bytes_per_second": N or null}', "INVALID_REQUEST")
    rate = doc["bytes_per_second"]
    await gateway.broker.set_reassignment_throttle(rate)  # InvalidConfig: not a positive int
    return json_response({"throttle_bytes_per_second": rate})
