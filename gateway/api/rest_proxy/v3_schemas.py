"""v3's schema-aware produce, as Confluent's REST Proxy documents it: a key or value names its
schema by `schema_id`, by `schema_version` of its subject, by the `schema` text (with its
`type`: registered under the subject first, idempotently), or by nothing but its `type` or
subject (the subject's latest version). The subject is `subject` if given, else the
`subject_name_strategy`'s (TOPIC_NAME by default, RECORD_NAME, TOPIC_RECORD_NAME).

The data is encoded by the schema and stored in Confluent's wire format; the delivery report
names the subject, schema id and version. A request the schema fields do not add up in, a
schema or subject the registry lacks, or data the schema does not describe answer 400 (v3
gives every client error its HTTP status); a schema the registry refuses to register answers
its status (409 incompatible, 422 invalid, 403 read-only)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import orjson
from aiohttp import web

from gateway.api.rest_proxy.schema_formats import registered_id, subject_of, uses, view_with
from gateway.auth.middleware import require
from gateway.http.problem import Problem
from gateway.state import gateway_of
from schemas import wire
from schemas.errors import SchemaError
from schemas.state import LATEST, RegistryState, StoredSchema
from schemas.types import InvalidValue, ParsedSchema, SchemaType, parse
from schemas.validation import record_name

SCHEMA_TYPES: dict[str, SchemaType] = {"AVRO": "AVRO", "JSONSCHEMA": "JSON", "PROTOBUF": "PROTOBUF"}
V3_TYPES = {schema_type: name for name, schema_type in SCHEMA_TYPES.items()}
STRATEGIES = ("TOPIC_NAME", "RECORD_NAME", "TOPIC_RECORD_NAME")
Side = Literal["key", "value"]


@dataclass(frozen=True, slots=True)
class SchemaFields:
    """A key's or value's schema fields, as the request gives them."""

    type: str | None
    subject: str | None
    subject_name_strategy: str | None
    schema_id: int | None
    schema_version: int | None
    schema: str | None

    def named(self) -> bool:
        """Whether the data is schema-aware (a schema type, or any schema field)."""
        return (self.type or "").upper() in SCHEMA_TYPES or any(
            f is not None
            for f in (
                self.subject,
                self.subject_name_strategy,
                self.schema_id,
                self.schema_version,
                self.schema,
            )
        )


@dataclass(frozen=True, slots=True)
class Encoded:
    """A key or value in the wire format (None: null data), and the schema it was written with."""

    data: bytes | None
    type: str
    subject: str
    schema_id: int
    schema_version: int

    def report(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "subject": self.subject,
            "schema_id": self.schema_id,
            "schema_version": self.schema_version,
            "size": 0 if self.data is None else len(self.data),
        }


def _bad(message: str) -> Problem:
    return Problem(400, "INVALID_RECORD", message)


async def encoded(
    request: web.Request, topic: str, field: str, fields: SchemaFields, raw: bytes
) -> Encoded:
    """The field's data (`raw`, its JSON text) encoded by the schema its fields name."""
    gateway = gateway_of(request)
    side: Side = "key" if field == "key" else "value"
    kind = None if fields.type is None else fields.type.upper()
    if kind is not None and kind not in SCHEMA_TYPES:
        raise _bad(f"{field}: the {kind} type takes no schema fields")
    strategy = fields.subject_name_strategy or "TOPIC_NAME"
    if strategy not in STRATEGIES:
        raise _bad(f"{field}.subject_name_strategy must be one of {', '.join(STRATEGIES)}")
    given = [n for n in ("schema_id", "schema_version", "schema") if getattr(fields, n) is not None]
    if len(given) > 1:
        raise _bad(f"{field}: give one of schema_id, schema_version and schema, not {given}")
    if fields.schema_id is not None:
        if kind is not None:
            raise _bad(f"{field}: schema_id names the schema's type: leave out type")
        state = await view_with(gateway, fields.schema_id)
        stored = _stored(state, fields.schema_id, field)
        parsed = state.parsed(stored.schema_id)
        subject = fields.subject or _subject(topic, side, strategy, stored, parsed)
        version = _version_with(state, subject, stored.schema_id, field)
    elif fields.schema is not None:
        if kind is None:
            raise _bad(f"{field}: a schema needs its type (AVRO, JSONSCHEMA or PROTOBUF)")
        try:
            parsed = parse(SCHEMA_TYPES[kind], fields.schema, {})
        except SchemaError as exc:
            raise _bad(f"{field}.schema: {exc.message}") from None
        stored = StoredSchema(0, parsed.schema_type, parsed.text, ())
        subject = fields.subject or _subject(topic, side, strategy, stored, parsed)
        try:
            schema_id = await registered_id(request, subject, parsed)
        except SchemaError as exc:
            raise Problem(exc.status, "SCHEMA_REFUSED", f"{field}: {exc.message}") from None
        state = await view_with(gateway, schema_id)
        version = _version_with(state, subject, schema_id, field)
    else:
        if fields.subject is None and strategy != "TOPIC_NAME":
            raise _bad(
                f"{field}: subject_name_strategy {strategy} needs a schema_id or schema to "
                "name the subject"
            )
        subject = fields.subject or subject_of(topic, side)
        require(request, "subject", subject, "read")
        state = await gateway.schemas.synced()
        wanted = LATEST if fields.schema_version is None else fields.schema_version
        try:
            found = state.version(subject, wanted)
        except SchemaError as exc:
            raise _bad(f"{field}: {exc.message} (subject {subject})") from None
        version = (found.schema_id, found.version)
        parsed = state.parsed(found.schema_id)
        if kind is not None and SCHEMA_TYPES[kind] != parsed.schema_type:
            raise _bad(
                f"{field}: subject {subject} holds {V3_TYPES[parsed.schema_type]}, not {kind}"
            )
    schema_id, number = version
    value = orjson.loads(raw)
    try:
        data = None if value is None else wire.frame(schema_id, parsed.encode(value))
    except InvalidValue as exc:
        raise _bad(f"{field}.data does not fit schema {schema_id}: {exc}") from None
    return Encoded(data, V3_TYPES[parsed.schema_type], subject, schema_id, number)


def _stored(state: RegistryState, schema_id: int, field: str) -> StoredSchema:
    try:
        return state.schema(schema_id)
    except SchemaError as exc:
        raise _bad(f"{field}: {exc.message}") from None


def _subject(
    topic: str, side: Side, strategy: str, stored: StoredSchema, parsed: ParsedSchema
) -> str:
    if strategy == "TOPIC_NAME":
        return subject_of(topic, side)
    name = record_name(stored, parsed)
    return name if strategy == "RECORD_NAME" else f"{topic}-{name}"


def _version_with(
    state: RegistryState, subject: str, schema_id: int, field: str
) -> tuple[int, int]:
    """The schema id and the subject's newest live version holding it (400 if none does)."""
    if uses(state, schema_id, subject):
        found = max(v for s, v in state.users(schema_id) if s == subject)
        return schema_id, found
    raise _bad(f"{field}: schema {schema_id} is not a version of subject {subject}")
