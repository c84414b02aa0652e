"""Avro schemas to Arrow columns, and the reader of Avro payloads (fastavro, compiled).

A version's record fields become columns: record → struct, array → list, map → map, a union
with null → that branch, enum → string, fixed and bytes → binary; the date, timestamp and
decimal logical types → their Arrow types; time-millis and time-micros are read as times and
stored as the int and long Avro writes (typed_values.stored), since Spark reads no Parquet TIME.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from fastavro import parse_schema, schemaless_reader

from schemas.types import InvalidValue
from spark_ingest.errors import IngestError

if TYPE_CHECKING:
    from spark_ingest.typed_values import Reader, Version

_PRIMITIVES: dict[str, pa.DataType] = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}
_LOGICAL: dict[tuple[str, str], pa.DataType] = {
    ("int", "date"): pa.date32(),
    ("int", "time-millis"): pa.time32("ms"),
    ("long", "time-micros"): pa.time64("us"),
    ("long", "timestamp-millis"): pa.timestamp("ms", tz="UTC"),
    ("long", "timestamp-micros"): pa.timestamp("us", tz="UTC"),
    ("long", "local-timestamp-millis"): pa.timestamp("ms"),
    ("long", "local-timestamp-micros"): pa.timestamp("us"),
}


def arrow_type(schema: Any, named: Mapping[str, Any], where: str, seen: frozenset[str]) -> Any:
    """The Arrow type of an Avro type in fastavro's parsed form."""
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) > 1:
            raise IngestError(
                f"{where}: a union of several types besides null ({schema}) has no typed column"
            )
        return arrow_type(branches[0] if branches else "null", named, where, seen)
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema]
        if schema in seen:
            raise IngestError(f"{where}: recursive type {schema} has no typed column")
        return arrow_type(named[schema], named, where, seen)
    kind = schema["type"]
    logical = schema.get("logicalType")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = int(schema["precision"]), int(schema.get("scale", 0))
        return (pa.decimal128 if precision <= 38 else pa.decimal256)(precision, scale)
    if isinstance(kind, str) and (kind, logical) in _LOGICAL:
        return _LOGICAL[(kind, logical)]
    if kind in ("record", "error"):
        inner = seen | {schema["name"]}
        return pa.struct(
            [
                pa.field(f["name"], arrow_type(f["type"], named, f"{where}.{f['name']}", inner))
                for f in schema["fields"]
            ]
        )
    if kind == "enum":
        return pa.string()
    if kind == "fixed":
        return pa.binary()
    if kind == "array":
        return pa.list_(arrow_type(schema["items"], named, f"{where}[]", seen))
    if kind == "map":
        return pa.map_(pa.string(), arrow_type(schema["values"], named, f"{where}{{}}", seen))
    return arrow_type(kind, named, where, seen)  # a primitive in its {"type": ...} form


def parsed(version: Version) -> Any:
    """fastavro's parsed form of the version's schema, its references' named types resolved."""
    named: dict[str, Any] = {}
    try:
        for text in version.references:
            parse_schema(json.loads(text), named)
        return parse_schema(json.loads(version.text), named)
    except Exception as exc:  # fastavro raises several types for a schema it rejects
        raise IngestError(f"{version.where()}: not an Avro schema ({exc})") from exc


def columns_of(version: Version) -> tuple[list[pa.Field], Reader]:
    """The version's record fields as Arrow fields, and the reader of its payloads."""
    schema = parsed(version)
    if not isinstance(schema, dict) or schema.get("type") not in ("record", "error"):
        raise IngestError(
            f"{version.where()} is not an Avro record: only a record's fields become columns"
        )
    where = f"{version.where()}: field"
    fields = list(arrow_type(schema, schema["__named_schemas"], where, frozenset()))

    def read(payload: bytes) -> Any:
        stream = io.BytesIO(payload)
        record = schemaless_reader(stream, schema, None)
        if stream.tell() != len(payload):
            raise InvalidValue("bytes left over after the record")
        return record

    return fields, read
