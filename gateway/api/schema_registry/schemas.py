"""Schemas: every subject's versions (`/schemas`); by id, the schema, its text alone, the
subjects and versions using it; the types."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gateway.api.schema_registry.media import (
    V1_JSON,
    add_route,
    answer,
    flag,
    store_of,
    view,
    window,
)
from gateway.api.schema_registry.subjects import references_doc, version_doc
from gateway.auth.middleware import may
from schemas.state import RegistryState, StoredSchema
from schemas.types import SCHEMA_TYPES


def add_routes(app: web.Application) -> None:
    add_route(app, "GET", "/schemas", list_schemas)
    add_route(app, "GET", "/schemas/types", schema_types)
    add_route(app, "GET", "/schemas/ids/{id}", get_schema)
    add_route(app, "GET", "/schemas/ids/{id}/schema", get_schema_text)
    add_route(app, "GET", "/schemas/ids/{id}/subjects", get_subjects)
    add_route(app, "GET", "/schemas/ids/{id}/versions", get_versions)


async def list_schemas(request: web.Request) -> web.Response:
    """Every live version (deleted=true: soft-deleted ones too) of the subjects starting with
    subjectPrefix that the principal may read, by subject then version, as
    /subjects/{subject}/versions/{version} shows each; latestOnly=true: each subject's newest
    of those only. Confluent's `GET /schemas`."""
    state = await view(request)
    deleted = flag(request, "deleted")
    latest_only = flag(request, "latestOnly")
    prefix = request.query.get("subjectPrefix", "")
    found: list[dict[str, Any]] = []
    for subject in state.subject_names(deleted):
        if not subject.startswith(prefix) or not may(request, "subject", subject, "read"):
            continue
        versions = state.versions(subject, deleted)
        found.extend(version_doc(state, v) for v in (versions[-1:] if latest_only else versions))
    return answer(window(request, found))


async def schema_types(request: web.Request) -> web.Response:
    """The schema types this registry parses."""
    return answer(list(SCHEMA_TYPES))


async def _by_id(request: web.Request) -> tuple[RegistryState, StoredSchema]:
    """The schema the path's id names. An id never changes its schema: one already in the
    view is answered at once; another waits for the view to catch up first."""
    raw = request.match_info["id"]
    try:
        schema_id = int(raw)
    except ValueError:
        raise web.HTTPNotFound(text="HTTP 404 Not Found") from None
    store = store_of(request)
    state = store.state
    if schema_id not in state.schemas:
        state = await store.synced()
    return state, state.schema(schema_id)


async def get_schema(request: web.Request) -> web.Response:
    """The schema with this id (its type unless Avro, its references if any)."""
    state, stored = await _by_id(request)
    doc: dict[str, Any] = {"schema": state.text_as(stored.schema_id, request.query.get("format"))}
    if stored.schema_type != "AVRO":
        doc["schemaType"] = stored.schema_type
    if stored.references:
        doc["references"] = references_doc(stored.references)
    return answer(doc)


async def get_schema_text(request: web.Request) -> web.Response:
    """The schema's text alone, as registered (or in the form `format` asks for)."""
    state, stored = await _by_id(request)
    text = state.text_as(stored.schema_id, request.query.get("format"))
    return web.Response(text=text, content_type=V1_JSON)


async def get_subjects(request: web.Request) -> web.Response:
    """The subjects with a version using this id."""
    state, stored = await _by_id(request)
    users = state.users(stored.schema_id, flag(request, "deleted"))
    subject = request.query.get("subject")
    names = sorted({s for s, _ in users if subject is None or s == subject})
    return answer(window(request, names))


async def get_versions(request: web.Request) -> web.Response:
    """The (subject, version) pairs using this id."""
    state, stored = await _by_id(request)
    users = state.users(stored.schema_id, flag(request, "deleted"))
    subject = request.query.get("subject")
    found = [{"subject": s, "version": v} for s, v in users if subject is None or s == subject]
    return answer(window(request, found))
