"""Modes: READWRITE, READONLY (writes refused), IMPORT (ids and versions given by the client),
globally (`/mode`) and per subject (`/mode/{subject}`)."""

from __future__ import annotations

import functools

from aiohttp import web

from gateway.api.schema_registry.media import add_route, answer, body_object, flag, store_of, view
from schemas import registry


def add_routes(app: web.Application) -> None:
    add_route(app, "GET", "/mode", get_mode)
    add_route(app, "PUT", "/mode", put_mode)
    add_route(app, "GET", "/mode/{subject}", get_mode)
    add_route(app, "PUT", "/mode/{subject}", put_mode)
    add_route(app, "DELETE", "/mode/{subject}", delete_mode)


async def get_mode(request: web.Request) -> web.Response:
    """The mode that applies (the global one for a subject without its own, unless
    defaultToGlobal=false: then 40409)."""
    state = await view(request)
    subject = request.match_info.get("subject")
    mode = registry.mode_of(state, subject, flag(request, "defaultToGlobal") or subject is None)
    return answer({"mode": mode})


async def put_mode(request: web.Request) -> web.Response:
    """Set the subject's mode (or the global one); IMPORT only where nothing is registered yet
    unless force=true."""
    doc = await body_object(request, {"mode": (str,)}, ("mode",))
    decide = functools.partial(
        registry.set_mode,
        subject=request.match_info.get("subject"),
        value=registry.mode(doc["mode"]),
        force=flag(request, "force"),
    )
    return answer({"mode": await store_of(request).write(decide)})


async def delete_mode(request: web.Request) -> web.Response:
    """Forget the subject's mode; answers the old one."""
    decide = functools.partial(registry.delete_mode, subject=request.match_info["subject"])
    return answer({"mode": await store_of(request).write(decide)})
