"""The cluster's shape: balance the nodes, decommission one, remove a lost one (its replicas
re-created on the others). Each answers its plan (what moves, how many bytes, each node's
figures before and after); `dry_run=true` only plans. The controller plans and starts the
moves (other nodes forward to it); it learns the partitions' sizes from their leaders."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web

from gateway.api.all_workers import node_docs
from gateway.http.params import choice_param, json_response
from gateway.http.problem import Problem
from gateway.state import GATEWAY, Gateway, gateway_of
from replication.metadata import TopicPartition
from replication.placement import Plan, Spread

SIZES_ROUTE = "/internal/v1/partition-sizes"
SIZES_TIMEOUT_S = 5.0  # a leader slower than this to tell its partitions' sizes: they count 0


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/cluster/balance", balance)
    app.router.add_post("/v1/cluster/nodes/{node}/decommission", decommission)
    app.router.add_post("/v1/cluster/nodes/{node}/remove", remove_node)
    app.router.add_get(SIZES_ROUTE, partition_sizes)
    app.on_startup.append(_provide_sizes)


async def _provide_sizes(app: web.Application) -> None:
    """The controller's planners learn the partitions' sizes through this node."""
    gateway = app[GATEWAY]
    gateway.broker.controller.sizes = lambda: _gather_sizes(gateway)


def _dry_run(request: web.Request) -> bool:
    return choice_param(request, "dry_run", "false", ("true", "false")) == "true"


def _node(request: web.Request) -> int:
    raw = request.match_info["node"]
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 9:
        raise Problem(404, "UNKNOWN_NODE", f"no node {raw!r} is known to the cluster")
    node = int(raw)
    if node not in gateway_of(request).broker.store.view.nodes:
        raise Problem(404, "UNKNOWN_NODE", f"no node {node} is known to the cluster")
    return node


def _answer(
    plan: Plan, dry_run: bool, current: Mapping[TopicPartition, tuple[int, ...]]
) -> web.Response:
    def spread(s: Spread) -> dict[str, list[float]]:
        return {"replicas": list(s.replicas), "leaders": list(s.leaders), "bytes": list(s.bytes)}

    doc: dict[str, Any] = {
        "dry_run": dry_run,
        "moves": [
            {
                "topic": topic,
                "partition": partition,
                "replicas": list(target),
                "from": list(current.get((topic, partition), ())),
            }
            for (topic, partition), target in sorted(plan.targets.items())
        ],
        "bytes_to_move": plan.bytes_to_move,
        "replica_moves": plan.replica_moves,
        "partitions_moved": plan.partitions_moved,
        "leadership_changes": plan.leadership_changes,
        "goal_met": plan.goal_met,
        "tolerance": plan.tolerance,
        "before": spread(plan.before),
        "after": spread(plan.after),
        "nodes": [
            {"node_id": node, **vars(figures)} for node, figures in sorted(plan.nodes.items())
        ],
        "notes": list(plan.notes),
        "skipped": [{"topic": t, "partition": p} for t, p in plan.skipped],
    }
    return json_response(doc, status=200 if dry_run else 202)


def _current(gateway: Gateway) -> dict[TopicPartition, tuple[int, ...]]:
    return {key: state.replicas for key, state in gateway.broker.store.view.partitions.items()}


async def balance(request: web.Request) -> web.Response:
    """Moves and leaderships that bring every node within ±10% of the mean (replicas,
    preferred leaders, bytes), as few bytes as that allows."""
    gateway = gateway_of(request)
    dry_run = _dry_run(request)
    current = _current(gateway)
    plan = await gateway.broker.balance(dry_run=dry_run)
    return _answer(plan, dry_run, current)


async def decommission(request: web.Request) -> web.Response:
    """Move every replica off the node (it keeps serving); it is marked removed once empty."""
    return await _node_plan(request, gateway_of(request).broker.decommission)


async def remove_node(request: web.Request) -> web.Response:
    """Mark a down node removed and re-create its replicas on the others."""
    return await _node_plan(request, gateway_of(request).broker.remove_node)


async def _node_plan(
    request: web.Request, operation: Callable[..., Awaitable[Plan]]
) -> web.Response:
    node, dry_run = _node(request), _dry_run(request)
    current = _current(gateway_of(request))
    return _answer(await operation(node, dry_run=dry_run), dry_run, current)


def _own_sizes(gateway: Gateway) -> dict[TopicPartition, int]:
    """The sizes of the partitions this node leads."""
    return {
        key: partition.size_bytes
        for key, partition in gateway.replicas.partitions.items()
        if partition.is_leader
    }


async def partition_sizes(request: web.Request) -> web.Response:
    """The bytes of each partition this node leads (for the controller's planners)."""
    sizes = _own_sizes(gateway_of(request))
    return json_response({"partitions": [[t, p, size] for (t, p), size in sizes.items()]})


async def _gather_sizes(gateway: Gateway) -> dict[TopicPartition, int]:
    """Every partition's size, as its leader tells (this node's own at once)."""
    sizes = _own_sizes(gateway)
    live = sorted(gateway.broker.store.view.live)
    for doc in (await node_docs(gateway, live, SIZES_ROUTE, SIZES_TIMEOUT_S)).values():
        for topic, partition, size in doc["partitions"]:
            sizes[(topic, partition)] = size
    return sizes
