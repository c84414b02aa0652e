"""v2's schema formats (avro, jsonschema, protobuf) on the node's registry: which schema id a
produce's key or value side uses, each record in Confluent's wire format, and a read's
records decoded back to JSON.

A side names its schema by id (`value_schema_id`, a number or its decimal text) or by text
(`value_schema`), registered under the topic's subject (`<topic>-value`, `<topic>-key`) through
the registry's one writer first, idempotently; with both, the id is used (as Karapace does).
Ids of schema texts are kept per subject, so a producer sending the same text on every request
registers it once. An id must be one of the subject's (Karapace's name-strategy validation).

The answers are Karapace's: 42205 "Invalid schema" for an unknown id, another subject's, or a
text that is no schema; 408/40801 when registering fails (incompatible, read-only); 42205 for
a value the schema does not describe. A read decodes each record with the schema its id
names; a key that is not one falls back to base64 (avro, protobuf), a value answers 422.
"""

from __future__ import annotations

import base64
import functools
import json
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Literal
from urllib.parse import quote

import jsonschema.exceptions
import jsonschema.validators
import orjson
import referencing.exceptions
from aiohttp import web

from gateway.api.rest_proxy.errors import INVALID_DATA, SCHEMA_RETRIEVAL_ERROR, v2_error
from gateway.api.schema_registry import media as registry_media
from gateway.auth.middleware import principal_of, require
from gateway.http.problem import Problem
from gateway.state import Gateway, gateway_of
from replication.errors import NotLeader
from replication.node_contract import ON_BEHALF_OF
from schemas import errors, registry, wire
from schemas.errors import SchemaError
from schemas.state import RegistryState
from schemas.types import InvalidValue, ParsedSchema, SchemaType, parse
from schemas.types.avro import AvroSchema
from schemas.types.protobuf import ProtobufSchema

Side = Literal["key", "value"]
SCHEMA_TYPES: dict[str, SchemaType] = {"avro": "AVRO", "jsonschema": "JSON", "protobuf": "PROTOBUF"}
DOES_NOT_FIT = "Object does not fit to stored schema"  # Karapace's words for avro, protobuf
IDS_KEPT = 4096
_IDS: web.AppKey[SchemaIds] = web.AppKey("rest_proxy_schema_ids")


class SchemaIds:
    """The ids of schema texts produces named, per subject (oldest forgotten first)."""

    def __init__(self, size: int = IDS_KEPT) -> None:
        self._ids: OrderedDict[tuple[str, SchemaType, str], int] = OrderedDict()
        self._size = size

    def get(self, key: tuple[str, SchemaType, str]) -> int | None:
        return self._ids.get(key)

    def remember(self, key: tuple[str, SchemaType, str], schema_id: int) -> None:
        self._ids[key] = schema_id
        if len(self._ids) > self._size:
            self._ids.popitem(last=False)


def setup(app: web.Application) -> None:
    app[_IDS] = SchemaIds()


def subject_of(topic: str, side: Side) -> str:
    """The topic's subject for a side (TopicNameStrategy, the proxies' default)."""
    return f"{topic}-{side}"


async def side_schema(
    request: web.Request, topic: str, side: Side, embedded: str, doc: dict[str, Any]
) -> tuple[int, ParsedSchema]:
    """The schema id a produce's side uses, and the schema: its `_schema_id`, or its
    `_schema` text registered under the subject (once per text and subject)."""
    gateway = gateway_of(request)
    schema_type = SCHEMA_TYPES[embedded]
    subject = subject_of(topic, side)
    given = doc.get(f"{side}_schema_id")
    if given is not None:
        schema_id = int(given)
        state = await view_with(gateway, schema_id)
        if not uses(state, schema_id, subject):
            raise _invalid_schema(schema_type, f"schema_id = {schema_id}")
        return schema_id, state.parsed(schema_id)
    text = doc[f"{side}_schema"]
    try:
        parsed = parse(schema_type, text, {})
    except SchemaError:
        raise _invalid_schema(schema_type, f"schema = {text}") from None
    try:
        schema_id = await registered_id(request, subject, parsed)
    except SchemaError as exc:
        raise v2_error(
            408,
            SCHEMA_RETRIEVAL_ERROR,
            f"Error when registering schema. format = {schema_type}, subject = {subject}: "
            f"{exc.message}",
        ) from None
    return schema_id, (await view_with(gateway, schema_id)).parsed(schema_id)


async def view_with(gateway: Gateway, schema_id: int) -> RegistryState:
    """The node's registry view, brought up to date first if it lacks this id (registered
    through another node a moment ago)."""
    state = gateway.schemas.state
    if schema_id not in state.schemas:
        state = await gateway.schemas.synced()
    return state


def uses(state: RegistryState, schema_id: int, subject: str) -> bool:
    """Whether a live version of the subject has this schema id."""
    users = state.uses.get(schema_id, ())
    return any(s == subject and not state.subjects[s][v].deleted for s, v in users)


def _invalid_schema(schema_type: SchemaType, what: str) -> Problem:
    return v2_error(422, INVALID_DATA, f"Invalid schema. format = {schema_type}, {what}")


async def registered_id(request: web.Request, subject: str, parsed: ParsedSchema) -> int:
    """The schema's id under the subject: remembered, found in the view, else registered by
    the registry's writer (this node, or the one NotLeader names); SchemaError if the
    registry refuses it (incompatible, read-only). Needs `write` on the subject, as the
    registry's own register does."""
    require(request, "subject", subject, "write")
    gateway = gateway_of(request)
    key = (subject, parsed.schema_type, parsed.text)
    ids = request.app[_IDS]
    known = ids.get(key)
    if known is not None and uses(gateway.schemas.state, known, subject):
        return known
    state = await gateway.schemas.synced()
    found = state.find_in_subject(subject, parsed, ())
    if found is not None and not found.deleted:
        known = found.schema_id
    else:
        decide = functools.partial(
            registry.register,
            subject=subject,
            schema_type=parsed.schema_type,
            text=parsed.text,
            references=(),
        )
        try:
            registered: registry.Registered = await gateway.schemas.write(decide)
            known = registered.schema_id
        except NotLeader as exc:
            known = await _register_at(request, gateway, exc, subject, parsed)
    ids.remember(key, known)
    return known


async def _register_at(
    request: web.Request, gateway: Gateway, error: NotLeader, subject: str, parsed: ParsedSchema
) -> int:
    """Register through the registry's writer node (its registry API, on the client's
    behalf), as the registry's own register is forwarded."""
    node = None if error.leader is None else gateway.broker.store.view.nodes.get(error.leader)
    if node is None or error.leader == gateway.settings.node_id:
        raise error
    headers = {"Content-Type": registry_media.V1_JSON, "Accept": registry_media.V1_JSON}
    principal = principal_of(request)
    if principal is not None:
        headers[ON_BEHALF_OF] = principal
    body = orjson.dumps({"schema": parsed.text, "schemaType": parsed.schema_type})
    path = f"{registry_media.PREFIX}/subjects/{quote(subject, safe='')}/versions"
    answer = await gateway.forwarder.forward(node.url, "POST", path, headers, body)
    try:
        doc = orjson.loads(answer.body)
    except orjson.JSONDecodeError:
        doc = {}
    if answer.status == 200 and isinstance(doc.get("id"), int):
        schema_id: int = doc["id"]
        return schema_id
    code = doc.get("error_code")
    raise SchemaError(
        code if isinstance(code, int) else errors.STORE_ERROR,
        str(doc.get("message", f"the registry's writer answered {answer.status}")),
    )


def framed(schema_id: int, parsed: ParsedSchema, values: Sequence[Any]) -> list[bytes | None]:
    """Each value in the wire format (None stays None: no key, or a tombstone); a value the
    schema does not describe answers 42205, in Karapace's words."""
    out: list[bytes | None] = []
    for value in values:
        if value is None:
            out.append(None)
            continue
        try:
            out.append(wire.frame(schema_id, parsed.encode(value)))
        except InvalidValue as exc:
            raise v2_error(422, INVALID_DATA, _misfit(parsed, value, str(exc))) from None
    return out


def _misfit(parsed: ParsedSchema, value: Any, why: str) -> str:
    """Why a value does not fit: python-jsonschema's message for JSON Schema (as Karapace
    answers), Karapace's fixed sentence for the others."""
    if parsed.schema_type != "JSON":
        return DOES_NOT_FIT
    try:
        document = json.loads(parsed.text)
        validator = jsonschema.validators.validator_for(document)(document)
        found = jsonschema.exceptions.best_match(validator.iter_errors(value))
    except (referencing.exceptions.Unresolvable, jsonschema.exceptions.SchemaError):
        return why
    return why if found is None else str(found)


async def decoded(request: web.Request, embedded: str, records: list[Any]) -> list[dict[str, Any]]:
    """A read's records (v2's binary shape) with keys and values decoded by the schema each
    one's id names: a key that is not in the wire format stays base64 (avro, protobuf, as
    Karapace answers), a value answers 422 "value deserialization error"."""
    gateway = gateway_of(request)
    state = gateway.schemas.state
    out = []
    for raw in records:
        item: dict[str, Any] = raw if isinstance(raw, dict) else orjson.loads(bytes(raw))
        for side in ("key", "value"):
            text = item[side]
            if text is None:
                continue
            data = base64.b64decode(text)
            try:
                state, item[side] = await _decode(gateway, state, data)
            except InvalidValue as exc:
                if side == "key" and embedded != "jsonschema":
                    continue
                raise v2_error(
                    422, 422, f"{side} deserialization error for format {embedded}: {exc}"
                ) from None
        out.append(item)
    return out


async def _decode(gateway: Gateway, state: RegistryState, data: bytes) -> tuple[RegistryState, Any]:
    schema_id, payload = wire.unframe(data)
    if schema_id not in state.schemas:
        state = await view_with(gateway, schema_id)
    try:
        parsed = state.parsed(schema_id)
    except SchemaError as exc:
        if exc.error_code == errors.SCHEMA_NOT_FOUND:
            raise InvalidValue(f"no schema with id {schema_id}") from None
        raise InvalidValue(exc.message) from None
    if isinstance(parsed, AvroSchema):
        return state, parsed.decode_base64_bytes(payload)
    if isinstance(parsed, ProtobufSchema):
        return state, parsed.decode_with_defaults(payload)
    return state, parsed.decode(payload)
