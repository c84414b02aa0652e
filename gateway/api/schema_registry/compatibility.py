"""The compatibility check: could this schema be registered under the subject (against one
version, or per the subject's level against its versions)?"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gateway.api.schema_registry.media import add_route, answer, body_object, flag, view
from gateway.api.schema_registry.subjects import SCHEMA_FIELDS, schema_of
from schemas import registry


def add_routes(app: web.Application) -> None:
    add_route(app, "POST", "/compatibility/subjects/{subject}/versions", check)
    add_route(app, "POST", "/compatibility/subjects/{subject}/versions/{version}", check)


async def check(request: web.Request) -> web.Response:
    """`is_compatible`, and with verbose=true the reasons it is not (schemas.registry.check
    says against what)."""
    subject = request.match_info["subject"]
    raw = request.match_info.get("version")
    version = None if raw is None else registry.parse_version(raw)
    verbose = flag(request, "verbose")
    flag(request, "normalize")
    doc = await body_object(request, SCHEMA_FIELDS, ("schema",))
    schema_type, text, references = schema_of(doc)
    state = await view(request)
    problems = registry.check(state, subject, version, schema_type, text, references)
    result: dict[str, Any] = {"is_compatible": not problems}
    if verbose:
        result["messages"] = problems
    return answer(result)
