"""Typed columns from Avro values in Confluent's wire format (`--value-schema registry`).

The columns of a topic are the union of its subject's versions: each record field becomes a
column of the Arrow type its Avro type maps to (record → struct, array → list, map → map,
a union with null → that branch, enum → string, fixed and bytes → binary, date, time,
timestamp and decimal logical types → their Arrow types; time-millis and time-micros are
stored as their Avro int and long, since Spark reads no Parquet TIME). A field several
versions declare
takes the widest of their types (int < long < float < double; string and bytes → binary).
Each value is read with its own writer schema, found by the id in its header, and projected
onto the columns: fields its version lacks are null. A value that is not in the wire format,
names an id that is not one of the subject's versions, or does not decode, gets null in every
typed column and in `value_schema_id`; its bytes stay in `value_bytes`.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from fastavro import parse_schema, schemaless_reader

from schemas import wire
from schemas.types import InvalidValue
from spark_ingest.errors import IngestError

SCHEMA_ID = pa.field("value_schema_id", pa.int32())
# Typed fields that collide with the source's columns (case-insensitively) get this prefix.
COLLISION_PREFIX = "value_"

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
# Avro's promotions, narrowest first: a field declared with several of them takes the widest.
_NUMERIC = (pa.int32(), pa.int64(), pa.float32(), pa.float64())


@dataclass(frozen=True)
class Version:
    """One registered version of a subject: its id, and its schema with the texts of the
    schemas it references (dependencies first), all as the registry stores them."""

    subject: str
    version: int
    schema_id: int
    text: str
    references: tuple[str, ...] = ()

    def parsed(self) -> Any:
        """fastavro's parsed form of the schema, its references' named types resolved."""
        named: dict[str, Any] = {}
        try:
            for text in self.references:
                parse_schema(json.loads(text), named)
            parsed = parse_schema(json.loads(self.text), named)
        except Exception as exc:  # fastavro raises several types for a schema it rejects
            raise IngestError(
                f"subject {self.subject} version {self.version}: not an Avro schema ({exc})"
            ) from exc
        return parsed


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


def stored(kind: Any) -> Any:
    """`kind` with each time type replaced by the integer Avro stores it as."""
    if pa.types.is_time32(kind):
        return pa.int32()
    if pa.types.is_time64(kind):
        return pa.int64()
    if pa.types.is_struct(kind):
        return pa.struct([f.with_type(stored(f.type)) for f in kind])
    if pa.types.is_list(kind):
        return pa.list_(stored(kind.value_type))
    if pa.types.is_map(kind):
        return pa.map_(kind.key_type, stored(kind.item_type))
    return kind


def widest(a: Any, b: Any, where: str) -> Any:
    """The one Arrow type that holds values of both `a` and `b` (see the module docstring)."""
    if a == b:
        return a
    if pa.types.is_null(a):
        return b
    if pa.types.is_null(b):
        return a
    if a in _NUMERIC and b in _NUMERIC:
        return max(a, b, key=_NUMERIC.index)
    if {a, b} == {pa.string(), pa.binary()}:
        return pa.binary()
    if pa.types.is_struct(a) and pa.types.is_struct(b):
        return pa.struct(merge_fields([list(a), list(b)], where))
    if pa.types.is_list(a) and pa.types.is_list(b):
        return pa.list_(widest(a.value_type, b.value_type, f"{where}[]"))
    if pa.types.is_map(a) and pa.types.is_map(b):
        return pa.map_(pa.string(), widest(a.item_type, b.item_type, f"{where}{{}}"))
    raise IngestError(f"{where} is {a} in one version and {b} in another: no column holds both")


def merge_fields(versions: Iterable[list[pa.Field]], where: str) -> list[pa.Field]:
    """The union of the versions' fields, in order of first appearance, each of the widest type."""
    merged: dict[str, pa.DataType] = {}
    for fields in versions:
        for f in fields:
            name = f.name
            merged[name] = (
                widest(merged[name], f.type, f"{where}.{name}") if name in merged else f.type
            )
    return [pa.field(name, kind) for name, kind in merged.items()]


def column_name(name: str, taken: frozenset[str]) -> str:
    """A typed column's name: the field's, prefixed if a source column has it already."""
    return COLLISION_PREFIX + name if name.lower() in taken else name


class ValueColumns:
    """Decodes one topic's values with its subject's versions into typed columns."""

    def __init__(self, topic: str, versions: list[Version], taken: frozenset[str]) -> None:
        if not versions:
            raise IngestError(f"subject {topic}-value has no versions to type values with")
        self.writers: dict[int, Any] = {}
        record_fields: list[list[pa.Field]] = []
        for v in versions:
            parsed = v.parsed()
            if not isinstance(parsed, dict) or parsed.get("type") not in ("record", "error"):
                raise IngestError(
                    f"subject {v.subject} version {v.version} is not an Avro record: only a "
                    "record's fields become columns"
                )
            where = f"subject {v.subject} version {v.version}: field"
            named = parsed["__named_schemas"]
            record_fields.append(list(arrow_type(parsed, named, where, frozenset())))
            self.writers[v.schema_id] = parsed
        # What fastavro's values convert to, and what the files hold.
        self.type = pa.struct(merge_fields(record_fields, f"subject {topic}-value: field"))
        self.stored_type = stored(self.type)
        self.names = [column_name(f.name, taken) for f in self.type]

    def decode(self, raw: bytes | None) -> tuple[int | None, Any]:
        """(schema id, record) of one value, or (None, None) if it is not one of the subject's."""
        if raw is None:
            return None, None
        try:
            schema_id, payload = wire.unframe(raw)
        except InvalidValue:
            return None, None
        writer = self.writers.get(schema_id)
        if writer is None:
            return None, None
        stream = io.BytesIO(payload)
        try:
            record = schemaless_reader(stream, writer, None)
        except Exception:  # fastavro raises many types for bytes its schema does not describe
            return None, None
        if stream.tell() != len(payload):
            return None, None
        return schema_id, record

    def add_to(self, table: pa.Table) -> pa.Table:
        """`table` (the source's columns) with `value_schema_id` and the typed columns."""
        ids: list[int | None] = []
        records: list[Any] = []
        for raw in table.column("value_bytes").to_pylist():
            schema_id, record = self.decode(raw)
            ids.append(schema_id)
            records.append(record)
        typed = pa.array(records, type=self.type)
        if self.stored_type != self.type:
            typed = typed.cast(self.stored_type)
        table = table.append_column(SCHEMA_ID, pa.array(ids, SCHEMA_ID.type))
        for name, column in zip(self.names, typed.flatten(), strict=True):
            table = table.append_column(name, column)
        return table
