"""Registers the schema registry's routes and its error dialect on an app: under the prefix on
the gateway's port, at the root on the registry's own port."""

from __future__ import annotations

from aiohttp import web

from gateway.api.schema_registry import compatibility, config, media, mode, schemas, subjects


async def root(request: web.Request) -> web.Response:
    """The registry's root: an empty object, as Confluent's `GET /` answers (a liveness probe
    some tools use)."""
    return media.answer({})


def add_routes(app: web.Application) -> None:
    media.setup(app)
    media.add_route(app, "GET", "", root)
    subjects.add_routes(app)
    schemas.add_routes(app)
    config.add_routes(app)
    mode.add_routes(app)
    compatibility.add_routes(app)
