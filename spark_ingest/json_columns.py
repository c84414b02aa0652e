"""JSON Schemas to Arrow columns, and the reader of JSON payloads.

A version's object properties become columns, in the order the schema declares them:
object with properties → struct, object with only `additionalProperties` → map of strings to
its type, array → list of its `items`, string → string, integer → long, number → double,
boolean → boolean, a type list of null and one type → that type. `$ref` to the schema's own
`definitions` or `$defs` is followed. A property with no single type (no `type`, `anyOf`,
`oneOf`, several types besides null) has no column: the version is refused, naming it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from schemas.types import InvalidValue
from spark_ingest.errors import IngestError

if TYPE_CHECKING:
    from spark_ingest.typed_values import Reader, Version

_PRIMITIVES: dict[str, pa.DataType] = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "integer": pa.int64(),
    "number": pa.float64(),
    "string": pa.string(),
}
_LOCAL_REFS = ("#/definitions/", "#/$defs/")


def resolve(ref: str, root: dict[str, Any], where: str) -> Any:
    """The schema a local `$ref` points to."""
    for prefix in _LOCAL_REFS:
        if ref.startswith(prefix):
            found = root.get(prefix[2:-1], {}).get(ref.removeprefix(prefix))
            if found is not None:
                return found
    raise IngestError(f"{where}: $ref {ref!r} is not one of the schema's own definitions")


def arrow_type(schema: Any, root: dict[str, Any], where: str, seen: frozenset[str]) -> Any:
    """The Arrow type of a JSON Schema."""
    if not isinstance(schema, dict):
        raise IngestError(f"{where}: {schema!r} declares no single type, so it has no column")
    if "$ref" in schema:
        ref = str(schema["$ref"])
        if ref in seen:
            raise IngestError(f"{where}: recursive $ref {ref} has no typed column")
        return arrow_type(resolve(ref, root, where), root, where, seen | {ref})
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        if len(kinds) > 1:
            raise IngestError(f"{where}: several types besides null ({kind}) have no one column")
        return arrow_type({**schema, "type": kinds[0] if kinds else "null"}, root, where, seen)
    if kind == "object":
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        if not properties and isinstance(extra, dict):
            return pa.map_(pa.string(), arrow_type(extra, root, f"{where}{{}}", seen))
        if not isinstance(properties, dict) or not properties:
            raise IngestError(f"{where}: an object without properties has no columns")
        return pa.struct(
            [
                pa.field(name, arrow_type(sub, root, f"{where}.{name}", seen))
                for name, sub in properties.items()
            ]
        )
    if kind == "array":
        return pa.list_(arrow_type(schema.get("items"), root, f"{where}[]", seen))
    if isinstance(kind, str) and kind in _PRIMITIVES:
        return _PRIMITIVES[kind]
    raise IngestError(f"{where}: {json.dumps(schema)} declares no single type, so it has no column")


def _read(payload: bytes) -> Any:
    record = json.loads(payload)
    if not isinstance(record, dict):
        raise InvalidValue("the value is not a JSON object")
    return record


def columns_of(version: Version) -> tuple[list[pa.Field], Reader]:
    """The version's object properties as Arrow fields, and the reader of its payloads."""
    if version.references:
        raise IngestError(f"{version.where()}: JSON Schema references are not followed")
    try:
        schema = json.loads(version.text)
    except ValueError as exc:
        raise IngestError(f"{version.where()}: not JSON ({exc})") from exc
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise IngestError(
            f"{version.where()} is not a JSON Schema of objects: only an object's properties "
            "become columns"
        )
    fields = list(arrow_type(schema, schema, f"{version.where()}: field", frozenset()))
    return fields, _read
