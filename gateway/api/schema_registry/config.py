"""Compatibility levels: the global one (`/config`) and each subject's (`/config/{subject}`)."""

from __future__ import annotations

import functools

from aiohttp import web

from gateway.api.schema_registry.media import add_route, answer, body_object, flag, store_of, view
from schemas import registry

FIELDS: dict[str, tuple[type, ...]] = {"compatibility": (str,), "compatibilityLevel": (str,)}


def add_routes(app: web.Application) -> None:
    for path in ("/config", "/config/{subject}"):
        add_route(app, "GET", path, get_config)
        add_route(app, "PUT", path, put_config)
        add_route(app, "DELETE", path, delete_config)


async def get_config(request: web.Request) -> web.Response:
    """The level that applies (the global one for a subject without its own, unless
    defaultToGlobal=false: then 40408)."""
    state = await view(request)
    subject = request.match_info.get("subject")
    level = registry.compatibility_of(
        state, subject, flag(request, "defaultToGlobal") or subject is None
    )
    return answer({"compatibilityLevel": level})


async def put_config(request: web.Request) -> web.Response:
    """Set the subject's level (or the global one); 42203 for none of Confluent's."""
    doc = await body_object(request, FIELDS)
    level = registry.compatibility_level(doc.get("compatibility", doc.get("compatibilityLevel")))
    decide = functools.partial(
        registry.set_config, subject=request.match_info.get("subject"), level=level
    )
    return answer({"compatibility": await store_of(request).write(decide)})


async def delete_config(request: web.Request) -> web.Response:
    """Forget the subject's level (the global one returns to BACKWARD); answers the old one."""
    decide = functools.partial(registry.delete_config, subject=request.match_info.get("subject"))
    return answer({"compatibilityLevel": await store_of(request).write(decide)})
