"""One view over the workers of `sluice serve --workers N`: the worker a client reaches answers
/readyz, /metrics, topic and group descriptions and the group list for all of them, from the
other workers' own answers (asked in parallel, with a short timeout); and a change of keys or
ACLs made through one worker is read by the others before it is acknowledged."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

import orjson
from aiohttp import web
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from gateway.http.problem import Problem
from gateway.state import Gateway, gateway_of
from replication.errors import NodeUnreachable
from replication.forward_client import Answer
from replication.node_contract import FORWARDED_BY

OWN_READY = "/internal/v1/ready"
OWN_METRICS = "/internal/v1/metrics"
AUTH_REFRESH = "/internal/v1/auth/refresh"
PEER_TIMEOUT_S = 2.0  # a worker slower than this to answer counts as not ready / missing
# Gauges that are not summed over workers: the slowest start-up, and clean only if all were.
LARGEST = frozenset({"sluice_startup_seconds"})
SMALLEST = frozenset({"sluice_startup_clean"})
PARTITION_OFFSETS = (
    "log_start_offset",
    "local_log_start_offset",
    "high_watermark",
    "log_end_offset",
    "size_bytes",
)
log = logging.getLogger(__name__)


async def _ask(
    gateway: Gateway, node_id: int, path: str, timeout_s: float = PEER_TIMEOUT_S
) -> Answer | None:
    node = gateway.broker.store.view.nodes.get(node_id)
    if node is None:
        return None
    try:
        async with asyncio.timeout(timeout_s):
            return await gateway.forwarder.forward(node.url, "GET", path, {}, b"")
    except (NodeUnreachable, TimeoutError):
        return None


async def node_docs(
    gateway: Gateway, nodes: Iterable[int], path: str, timeout_s: float = PEER_TIMEOUT_S
) -> dict[int, Any]:
    """Other nodes' JSON answers to an internal GET `path`, asked in parallel; a node that did
    not answer 200 within `timeout_s` is left out."""
    ids = [n for n in nodes if n != gateway.settings.node_id]
    answers = await asyncio.gather(*(_ask(gateway, n, path, timeout_s) for n in ids))
    return {
        n: orjson.loads(answer.body)
        for n, answer in zip(ids, answers, strict=True)
        if answer is not None and answer.status == 200
    }


async def _peers(gateway: Gateway, path: str) -> dict[int, Answer | None]:
    """Every other worker's answer to `path` (None: it did not answer in time)."""
    me = gateway.settings.node_id
    ids = [i for i in range(gateway.settings.workers) if i != me]
    answers = await asyncio.gather(*(_ask(gateway, i, path) for i in ids))
    return dict(zip(ids, answers, strict=True))


async def auth_changed(gateway: Gateway) -> None:
    """After this worker changed the keys or ACLs (in the files they share), before the change
    is acknowledged: every other worker reads them again, so the client that made it finds it
    on whichever worker its next request lands. A worker that does not answer in time
    (restarting) reads the files as it starts, or at its next look (at most 0.5 s later)."""
    if gateway.settings.workers < 2:
        return
    for node_id, answer in (await _peers(gateway, AUTH_REFRESH)).items():
        if answer is None or answer.status != 204:
            status = "no answer" if answer is None else f"status {answer.status}"
            log.warning("worker %d did not confirm the auth change (%s)", node_id, status)


def merging(request: web.Request) -> bool:
    """Whether this answer covers every worker: under --workers, unless another worker asked
    for this one's own view (its request is marked forwarded)."""
    return gateway_of(request).settings.workers > 1 and FORWARDED_BY not in request.headers


async def _peer_docs(gateway: Gateway, path: str) -> list[Any]:
    """The other workers' own JSON answers to `path`; those that did not answer are left out."""
    return list((await node_docs(gateway, range(gateway.settings.workers), path)).values())


async def fill_partitions(gateway: Gateway, doc: dict[str, Any]) -> None:
    """A topic's description: the offsets of partitions held by other workers, from them."""
    missing = [row for row in doc["partitions"] if row["high_watermark"] is None]
    if not missing:
        return
    for theirs in await _peer_docs(gateway, f"/v1/topics/{quote(doc['name'], safe='')}"):
        rows = {row["partition"]: row for row in theirs["partitions"]}
        for row in missing:
            other = rows.get(row["partition"])
            if other is not None and other["high_watermark"] is not None:
                for name in PARTITION_OFFSETS:
                    row[name] = other[name]


async def fill_lag(gateway: Gateway, doc: dict[str, Any]) -> None:
    """A group's description: the log ends (high watermarks) and lag of partitions held by
    other workers, from them."""
    ends: dict[tuple[str, int], int] = {}
    for topic in sorted({r["topic"] for r in doc["partitions"] if r["log_end_offset"] is None}):
        for theirs in await _peer_docs(gateway, f"/v1/topics/{quote(topic, safe='')}"):
            for row in theirs["partitions"]:
                if row["high_watermark"] is not None:
                    ends[(topic, row["partition"])] = row["high_watermark"]
    for row in doc["partitions"]:
        end = ends.get((row["topic"], row["partition"]))
        if row["log_end_offset"] is None and end is not None:
            row["log_end_offset"] = end
            committed = row["committed_offset"]
            row["lag"] = None if committed is None else max(end - committed, 0)
    doc["lag"] = sum(row["lag"] or 0 for row in doc["partitions"])


async def all_groups(gateway: Gateway, own: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every worker's groups (each coordinates its own), by name."""
    groups = list(own)
    for theirs in await _peer_docs(gateway, "/v1/groups"):
        groups.extend(theirs["groups"])
    return sorted(groups, key=lambda g: str(g["group"]))


async def readiness(gateway: Gateway, own: dict[str, Any]) -> dict[str, Any]:
    """Ready when every worker is: the storage of the fullest disk, tiering backlogs added up,
    and which worker answered. 503 NOT_READY names the workers that are not."""
    docs: dict[int, dict[str, Any] | None] = {gateway.settings.node_id: own}
    for node_id, answer in (await _peers(gateway, OWN_READY)).items():
        docs[node_id] = orjson.loads(answer.body) if answer and answer.status == 200 else None
    waiting = sorted(node_id for node_id, doc in docs.items() if doc is None)
    if waiting:
        raise Problem(
            503,
            "NOT_READY",
            f"workers {waiting} are not ready (starting, restarting or shutting down)",
            not_ready=waiting,
        )
    ready = [doc for doc in docs.values() if doc is not None]
    merged: dict[str, Any] = {
        "status": "ready",
        "storage": {
            "free_bytes": min(doc["storage"]["free_bytes"] for doc in ready),
            "full": any(doc["storage"]["full"] for doc in ready),
            "offline_partitions": [
                p for doc in ready for p in doc["storage"].get("offline_partitions", [])
            ],
        },
    }
    tiering = [doc["tiering"] for doc in ready if "tiering" in doc]
    if tiering:
        merged["tiering"] = {
            "upload_lag_records": sum(t["upload_lag_records"] for t in tiering),
            "upload_lag_seconds": max(t["upload_lag_seconds"] for t in tiering),
            "last_error": next((t["last_error"] for t in tiering if t["last_error"]), None),
        }
    merged["worker"] = gateway.settings.node_id
    merged["workers"] = gateway.settings.workers
    return merged


class _Merged(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


async def metrics(gateway: Gateway) -> Collector:
    """Every worker's metrics as one: counters, histograms and gauges added up by identical
    labels, except a partition's series, which come from its leader, and the start-up gauges
    (the largest time; clean only if every worker's was)."""
    sources: dict[int, list[Metric]] = {
        gateway.settings.node_id: list(gateway.metrics.registry.collect())
    }
    missing = 0
    for node_id, answer in (await _peers(gateway, OWN_METRICS)).items():
        if answer is None or answer.status != 200:
            missing += 1
            continue
        sources[node_id] = list(text_string_to_metric_families(answer.body.decode()))
    view = gateway.broker.store.view
    families: dict[str, Metric] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for node_id, collected in sources.items():
        for family in collected:
            if family.name not in families:
                families[family.name] = Metric(family.name, family.documentation, family.type)
                values[family.name] = {}
            table = values[family.name]
            for sample in family.samples:
                if "partition" in sample.labels and "topic" in sample.labels:
                    state = view.partition(sample.labels["topic"], int(sample.labels["partition"]))
                    if state is not None and state.leader != node_id:
                        continue
                key = (sample.name, tuple(sorted(sample.labels.items())))
                value = sample.value
                if key in table:
                    old = table[key]
                    if family.name in LARGEST:
                        value = max(old, value)
                    elif family.name in SMALLEST:
                        value = min(old, value)
                    else:
                        value += old
                table[key] = value
    merged = []
    for name, family in families.items():
        family.samples = [
            Sample(sample_name, dict(labels), value)
            for (sample_name, labels), value in values[name].items()
        ]
        merged.append(family)
    gap = Metric(
        "sluice_metrics_missing_workers",
        f"Workers whose metrics this answer lacks (no answer within {PEER_TIMEOUT_S:g} s)",
        "gauge",
    )
    gap.add_sample("sluice_metrics_missing_workers", {}, float(missing))
    merged.append(gap)
    return _Merged(merged)
