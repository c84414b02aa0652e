"""Operational routes: cluster description, health, readiness, metrics, the OpenAPI contract."""

from __future__ import annotations

import shutil

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from engine.config import TopicConfig
from gateway.params import json_response
from gateway.problems import Problem
from gateway.state import gateway_of
from openapi import SPEC


def add_routes(app: web.Application) -> None:
    app.router.add_get("/v1/cluster", cluster)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/openapi.yaml", openapi)


async def cluster(request: web.Request) -> web.Response:
    """The cluster as this node sees it: its id, the controller, every node and its liveness."""
    view = gateway_of(request).broker.store.view
    return json_response(
        {
            "cluster_id": view.cluster_id,
            "controller": view.controller,
            "nodes": [
                {"node_id": node.node_id, "url": node.url, "alive": node.node_id in view.live}
                for node in sorted(view.nodes.values(), key=lambda n: n.node_id)
            ],
        }
    )


async def healthz(request: web.Request) -> web.Response:
    """The process answers: it is alive."""
    return json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """Ready once the logs are open, until shutdown starts."""
    gateway = gateway_of(request)
    if not gateway.ready:
        raise Problem(503, "NOT_READY", "the gateway is starting or shutting down")
    free = shutil.disk_usage(gateway.settings.data_dir).free
    doc: dict[str, object] = {
        "status": "ready",
        # Full: a record of the default max.message.bytes would not fit (produce answers 507).
        "storage": {"free_bytes": free, "full": free < TopicConfig().max_message_bytes},
    }
    tiering = gateway.broker.tiering
    if tiering is not None:
        backlog = tiering.counters.backlog.values()
        doc["tiering"] = {
            "upload_lag_records": sum(records for records, _ in backlog),
            "upload_lag_seconds": max((seconds for _, seconds in backlog), default=0.0),
            "last_error": tiering.counters.last_error,
        }
    return json_response(doc)


async def metrics(request: web.Request) -> web.Response:
    registry = gateway_of(request).metrics.registry
    response = web.Response(body=generate_latest(registry))
    response.headers["Content-Type"] = CONTENT_TYPE_LATEST
    return response


async def openapi(request: web.Request) -> web.FileResponse:
    return web.FileResponse(SPEC, headers={"Content-Type": "application/yaml"})
