"""Subjects and their versions: list, register, look up, read, delete, and who references a
version."""

from __future__ import annotations

import functools
from typing import Any

from aiohttp import web

from gateway.api.schema_registry.media import (
    add_route,
    answer,
    body_object,
    flag,
    invalid,
    store_of,
    view,
    window,
)
from gateway.auth.middleware import may
from schemas import errors, registry
from schemas.errors import SchemaError
from schemas.records import SchemaVersion
from schemas.state import RegistryState
from schemas.types import SCHEMA_TYPES, Reference, SchemaType

SCHEMA_FIELDS: dict[str, tuple[type, ...]] = {
    "schema": (str,),
    "schemaType": (str,),
    "references": (list,),
    "metadata": (dict,),
    "ruleSet": (dict,),
}
REGISTER_FIELDS = {**SCHEMA_FIELDS, "id": (int,), "version": (int,)}


def add_routes(app: web.Application) -> None:
    add_route(app, "GET", "/subjects", list_subjects)
    add_route(app, "POST", "/subjects/{subject}", lookup)
    add_route(app, "DELETE", "/subjects/{subject}", delete_subject)
    add_route(app, "GET", "/subjects/{subject}/versions", list_versions)
    add_route(app, "POST", "/subjects/{subject}/versions", register)
    add_route(app, "GET", "/subjects/{subject}/versions/{version}", get_version)
    add_route(app, "DELETE", "/subjects/{subject}/versions/{version}", delete_version)
    add_route(app, "GET", "/subjects/{subject}/versions/{version}/schema", get_version_schema)
    add_route(app, "GET", "/subjects/{subject}/versions/{version}/referencedby", referenced_by)


def version_doc(state: RegistryState, found: SchemaVersion) -> dict[str, Any]:
    """A subject's version as Confluent shows it (schemaType only when not Avro)."""
    doc: dict[str, Any] = {
        "subject": found.subject,
        "version": found.version,
        "id": found.schema_id,
        "schema": state.version_text(found),
    }
    if found.schema_type != "AVRO":
        doc["schemaType"] = found.schema_type
    if found.references:
        doc["references"] = references_doc(found.references)
    return doc


def references_doc(references: tuple[Reference, ...]) -> list[dict[str, Any]]:
    """References as Confluent's bodies carry them."""
    return [{"name": r.name, "subject": r.subject, "version": r.version} for r in references]


def schema_of(doc: dict[str, Any]) -> tuple[SchemaType, str, tuple[Reference, ...]]:
    """A body's schema: its type (Avro by default), text and references, checked."""
    schema_type = doc.get("schemaType", "AVRO")
    if schema_type not in SCHEMA_TYPES:
        raise SchemaError(
            errors.INVALID_SCHEMA,
            f"Invalid schemaType {schema_type!r}: one of {', '.join(SCHEMA_TYPES)}",
        )
    references = []
    for item in doc.get("references", ()):
        if not (
            isinstance(item, dict)
            and isinstance(item.get("name"), str)
            and isinstance(item.get("subject"), str)
            and isinstance(item.get("version"), int)
            and not isinstance(item.get("version"), bool)
        ):
            raise invalid(
                "Each reference must be an object with a name, a subject and a version", 422
            )
        references.append(Reference(item["name"], item["subject"], item["version"]))
    if not doc["schema"].strip():
        raise SchemaError(errors.INVALID_SCHEMA, "Empty schema")
    return schema_type, doc["schema"], tuple(references)


async def list_subjects(request: web.Request) -> web.Response:
    """The subjects with a live version (deleted=true: any), those the principal may read."""
    state = await view(request)
    deleted = flag(request, "deleted")
    prefix = request.query.get("subjectPrefix", "")
    names = [n for n in state.subject_names(deleted) if n.startswith(prefix)]
    if flag(request, "deleted_only"):
        live = set(state.subject_names())
        names = [n for n in state.subject_names(True) if n not in live and n.startswith(prefix)]
    return answer(window(request, [n for n in names if may(request, "subject", n, "read")]))


async def list_versions(request: web.Request) -> web.Response:
    """The subject's version numbers, oldest first."""
    state = await view(request)
    subject = request.match_info["subject"]
    found = state.versions(subject, deleted=flag(request, "deleted"))
    if flag(request, "deleted_only"):
        found = [v for v in state.versions(subject, deleted=True) if v.deleted]
    return answer(window(request, [v.version for v in found]))


async def get_version(request: web.Request) -> web.Response:
    """One version of the subject (latest / -1: its newest live one)."""
    state = await view(request)
    version = registry.parse_version(request.match_info["version"])
    found = state.version(request.match_info["subject"], version, flag(request, "deleted"))
    doc = version_doc(state, found)
    doc["schema"] = state.text_as(found.schema_id, request.query.get("format"))
    return answer(doc)


async def get_version_schema(request: web.Request) -> web.Response:
    """The version's schema text alone, as it was registered."""
    state = await view(request)
    version = registry.parse_version(request.match_info["version"])
    found = state.version(request.match_info["subject"], version, flag(request, "deleted"))
    text = state.text_as(found.schema_id, request.query.get("format"))
    return web.Response(text=text, content_type="application/vnd.schemaregistry.v1+json")


async def referenced_by(request: web.Request) -> web.Response:
    """The ids of the live schemas whose references name this version; with deleted=true, of
    the soft-deleted ones too (what holds the version against a permanent delete), and the
    version may be soft-deleted."""
    state = await view(request)
    subject = request.match_info["subject"]
    deleted = flag(request, "deleted")
    found = state.version(subject, registry.parse_version(request.match_info["version"]), deleted)
    return answer(window(request, state.referenced_by(subject, found.version, deleted)))


async def register(request: web.Request) -> web.Response:
    """Register a schema (idempotent: the same schema answers its id again)."""
    subject = request.match_info["subject"]
    flag(request, "normalize")
    doc = await body_object(request, REGISTER_FIELDS, ("schema",))
    schema_type, text, references = schema_of(doc)
    decide = functools.partial(
        registry.register,
        subject=subject,
        schema_type=schema_type,
        text=text,
        references=references,
        schema_id=doc.get("id"),
        version=doc.get("version"),
    )
    registered = await store_of(request).write(decide)
    return answer({"id": registered.schema_id})


async def lookup(request: web.Request) -> web.Response:
    """The subject's version holding this schema: 40401 without the subject, 40403 if the
    schema is not one of its versions."""
    subject = request.match_info["subject"]
    flag(request, "normalize")
    deleted = flag(request, "deleted")
    doc = await body_object(request, SCHEMA_FIELDS, ("schema",))
    schema_type, text, references = schema_of(doc)
    state = await view(request)
    state.versions(subject, deleted)
    references = registry.pin_latest(state, references)
    parsed = registry.parse_schema(state, schema_type, text, references)
    found = state.find_in_subject(subject, parsed, references)
    if found is None or (found.deleted and not deleted):
        raise SchemaError(errors.SCHEMA_NOT_FOUND, "Schema not found")
    return answer(version_doc(state, found))


async def delete_subject(request: web.Request) -> web.Response:
    """Soft-delete the subject, or remove it once soft-deleted (permanent=true)."""
    decide = functools.partial(
        registry.delete_subject,
        subject=request.match_info["subject"],
        permanent=flag(request, "permanent"),
    )
    versions: list[int] = await store_of(request).write(decide)
    return answer(versions)


async def delete_version(request: web.Request) -> web.Response:
    """Soft-delete a version, or remove it once soft-deleted (permanent=true)."""
    decide = functools.partial(
        registry.delete_version,
        subject=request.match_info["subject"],
        version=registry.parse_version(request.match_info["version"]),
        permanent=flag(request, "permanent"),
    )
    version: int = await store_of(request).write(decide)
    return answer(version)
