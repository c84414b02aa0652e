"""Operational routes: cluster description, health, readiness, metrics, the OpenAPI contract."""

from __future__ import annotations

import shutil
import time
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from engine.config import TopicConfig
from engine.errors import KafkaStorageError
from engine.offsets_topic import OFFSETS_TOPIC
from gateway.api import all_workers
from gateway.api.acls import with_authorized_operations
from gateway.auth.acl import CLUSTER
from gateway.http.params import json_response
from gateway.http.problem import Problem
from gateway.state import Gateway, gateway_of
from openapi import SPEC


def add_routes(app: web.Application) -> None:
    app.router.add_get("/v1/cluster", cluster)
    app.router.add_get("/v1/traffic", traffic)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/openapi.yaml", openapi)
    app.router.add_get(all_workers.OWN_READY, own_ready)
    app.router.add_get(all_workers.OWN_METRICS, own_metrics)


async def cluster(request: web.Request) -> web.Response:
    """The cluster as this node sees it: its id, the controller, every node and its liveness
    (and what the caller may do to it, when asked)."""
    view = gateway_of(request).broker.store.view
    doc: dict[str, Any] = {
        "cluster_id": view.cluster_id,
        "controller": view.controller,
        "nodes": [
            {
                "node_id": node.node_id,
                "url": node.url,
                "alive": node.node_id in view.live,
                "rack": node.rack,
                **(
                    {"state": view.node_states[node.node_id]}
                    if node.node_id in view.node_states
                    else {}
                ),
                **({"shutting_down": True} if node.node_id in view.shutting_down else {}),
            }
            for node in sorted(view.nodes.values(), key=lambda n: n.node_id)
        ],
    }
    return json_response(with_authorized_operations(request, doc, "cluster", CLUSTER))


# The per-topic counters of gateway.metrics.requests.TopicTraffic, by the field they answer as.
_TRAFFIC = {
    "sluice_records_in": "records_in",
    "sluice_bytes_in": "bytes_in",
    "sluice_records_out": "records_out",
    "sluice_bytes_out": "bytes_out",
}
# The admission control's counts (gateway.api.admission), by the field they answer as.
_ADMISSION = {
    "sluice_admission_admitted": "admitted",
    "sluice_admission_shed": "shed",
    "sluice_admission_inflight": "inflight",
}


async def traffic(request: web.Request) -> web.Response:
    """Records and bytes produced and fetched per topic since the node started (with workers,
    every worker's added up), the produces admitted and shed by the admission control, and the
    time read: a client's rates are the differences of two answers. The metrics' own counters,
    as JSON, for clients without Prometheus (the console)."""
    gateway = gateway_of(request)
    registry: Collector = gateway.metrics.registry
    if gateway.settings.workers > 1:
        registry = await all_workers.metrics(gateway)
    topics: dict[str, dict[str, int]] = {}
    admission = dict.fromkeys(_ADMISSION.values(), 0)
    for family in registry.collect():
        counted = _ADMISSION.get(family.name)
        if counted is not None:  # every worker's, added up
            admission[counted] += sum(int(sample.value) for sample in family.samples)
            continue
        field = _TRAFFIC.get(family.name)
        if field is None:
            continue
        for sample in family.samples:
            if sample.name.endswith("_total"):
                counts = topics.setdefault(
                    sample.labels["topic"], dict.fromkeys(_TRAFFIC.values(), 0)
                )
                counts[field] = int(sample.value)
    return json_response(
        {
            "time_ms": int(time.time() * 1000),
            "topics": [{"topic": name} | counts for name, counts in sorted(topics.items())],
            "admission": admission,
        }
    )


async def healthz(request: web.Request) -> web.Response:
    """The process answers: it is alive."""
    return json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """Ready once the logs are open, until shutdown starts; with workers, once all are. Not
    ready (503 KAFKA_STORAGE_ERROR, with the storage section) while a storage failure keeps
    partitions offline: unlike a full disk, that lasts until the node restarts."""
    gateway = gateway_of(request)
    doc = own_readiness(gateway)
    if gateway.settings.workers > 1:
        doc = await all_workers.readiness(gateway, doc)
    storage = doc["storage"]
    offline = storage["offline_partitions"] if isinstance(storage, dict) else None
    if offline:
        raise Problem(503, KafkaStorageError.code, offline_detail(offline), storage=storage)
    return json_response(doc)


def offline_detail(offline: list[dict[str, Any]], shown: int = 5) -> str:
    """`2 partitions are offline after a storage failure: t-0 (...), t-1 (...); restart...`."""
    named = ", ".join(f"{p['topic']}-{p['partition']} ({p['error']})" for p in offline[:shown])
    more = f" and {len(offline) - shown} more" if len(offline) > shown else ""
    count = "1 partition is" if len(offline) == 1 else f"{len(offline)} partitions are"
    return (
        f"{count} offline after a storage failure: {named}{more}; "
        "restart the node once its disk is fixed"
    )


async def own_ready(request: web.Request) -> web.Response:
    """This process's own readiness (a worker's part of /readyz)."""
    return json_response(own_readiness(gateway_of(request)))


def own_readiness(gateway: Gateway) -> dict[str, object]:
    """This process: its logs open and not shutting down; a worker also waits for the
    controller and the groups' topic (created once every worker is up)."""
    view = gateway.broker.store.view
    if not gateway.ready:
        raise Problem(503, "NOT_READY", "the gateway is starting or shutting down")
    if gateway.settings.workers > 1 and (
        view.controller is None or OFFSETS_TOPIC not in view.topics
    ):
        raise Problem(503, "NOT_READY", "the workers are still starting")
    free = shutil.disk_usage(gateway.settings.data_dir).free
    doc: dict[str, object] = {
        "status": "ready",
        "storage": {
            "free_bytes": free,
            # A record of the default max.message.bytes would not fit (produce answers 507).
            "full": free < TopicConfig().max_message_bytes,
            # A storage failure (EIO, EROFS, a failed fsync) took them offline until a restart.
            "offline_partitions": [
                {"topic": topic, "partition": partition, "error": error}
                for topic, partition, error in gateway.replicas.offline_partitions()
            ],
        },
    }
    tiering = gateway.broker.tiering
    if tiering is not None:
        backlog = tiering.counters.backlog.values()
        doc["tiering"] = {
            "upload_lag_records": sum(records for records, _ in backlog),
            "upload_lag_seconds": max((seconds for _, seconds in backlog), default=0.0),
            "last_error": tiering.counters.last_error,
        }
    return doc


async def metrics(request: web.Request) -> web.Response:
    """This process's metrics; with workers, every worker's merged (gateway.api.all_workers)."""
    gateway = gateway_of(request)
    registry: Collector = gateway.metrics.registry
    if gateway.settings.workers > 1:
        registry = await all_workers.metrics(gateway)
    response = web.Response(body=generate_latest(registry))
    response.headers["Content-Type"] = CONTENT_TYPE_LATEST
    return response


async def own_metrics(request: web.Request) -> web.Response:
    """This process's own metrics (a worker's part of /metrics)."""
    response = web.Response(body=generate_latest(gateway_of(request).metrics.registry))
    response.headers["Content-Type"] = CONTENT_TYPE_LATEST
    return response


async def openapi(request: web.Request) -> web.FileResponse:
    return web.FileResponse(SPEC, headers={"Content-Type": "application/yaml"})
