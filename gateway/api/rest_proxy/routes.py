"""Registers the REST Proxy compatibility routes and their error dialect on the app."""

from __future__ import annotations

from aiohttp import web

from gateway.api.rest_proxy import consumers, errors, metadata, produce, v3


def add_routes(app: web.Application) -> None:
    errors.setup(app)
    metadata.add_routes(app)
    produce.add_routes(app)
    consumers.add_routes(app)
    v3.add_routes(app)
