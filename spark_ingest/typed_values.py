"""Typed columns from values in Confluent's wire format (`--value-schema registry`).

The columns of a topic are the union of its subject's versions: each field of the version's
record (Avro), object (JSON Schema) or first message (Protobuf) becomes a column of the Arrow
type its schema type maps to (avro_columns.py, json_columns.py, protobuf_columns.py). A field
several versions declare takes the widest of their types (int < long < float < double; string
and bytes → binary). Each value is read
with its own version, found by the id in its header, and projected onto the columns: fields
its version lacks are null. A value that is not in the wire format, names an id that is not
one of the subject's versions, or does not decode to the version's types gets null in every
typed column and in `value_schema_id`; its bytes stay in `value_bytes`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from schemas import wire
from schemas.types import InvalidValue
from spark_ingest import avro_columns, json_columns, protobuf_columns
from spark_ingest.errors import IngestError

SCHEMA_ID = pa.field("value_schema_id", pa.int32())
# Typed fields that collide with the source's columns (case-insensitively) get this prefix.
COLLISION_PREFIX = "value_"
# Avro's promotions, narrowest first: a field declared with several of them takes the widest.
_NUMERIC = (pa.int32(), pa.int64(), pa.float32(), pa.float64())

Reader = Callable[[bytes], Any]  # a version's payload to its record; raises if it is not one


@dataclass(frozen=True)
class Version:
    """One registered version of a subject: its id, type, and schema with the texts of the
    schemas it references (dependencies first), all as the registry stores them, and the
    names the references go by (a Protobuf import path; in the same order)."""

    subject: str
    version: int
    schema_id: int
    text: str
    references: tuple[str, ...] = ()
    schema_type: str = "AVRO"
    reference_names: tuple[str, ...] = ()

    def where(self) -> str:
        return f"subject {self.subject} version {self.version}"


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
        key = widest(a.key_type, b.key_type, f"{where}{{key}}")
        return pa.map_(key, widest(a.item_type, b.item_type, f"{where}{{}}"))
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


def columns_of(version: Version) -> tuple[list[pa.Field], Reader]:
    """The version's fields and the reader of its payloads, by its schema type."""
    if version.schema_type == "AVRO":
        return avro_columns.columns_of(version)
    if version.schema_type == "JSON":
        return json_columns.columns_of(version)
    if version.schema_type == "PROTOBUF":
        return protobuf_columns.columns_of(version)
    raise IngestError(
        f"{version.where()} is {version.schema_type}: --value-schema registry types Avro, "
        "JSON Schema and Protobuf values"
    )


class ValueColumns:
    """Decodes one topic's values with its subject's versions into typed columns."""

    def __init__(self, topic: str, versions: list[Version], taken: frozenset[str]) -> None:
        if not versions:
            raise IngestError(f"subject {topic}-value has no versions to type values with")
        self.readers: dict[int, Reader] = {}
        record_fields: list[list[pa.Field]] = []
        for v in versions:
            fields, self.readers[v.schema_id] = columns_of(v)
            record_fields.append(fields)
        # What the readers' values convert to, and what the files hold.
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
        reader = self.readers.get(schema_id)
        if reader is None:
            return None, None
        try:
            return schema_id, reader(payload)
        except Exception:  # the decoders raise many types for bytes a schema does not describe
            return None, None

    def add_to(self, table: pa.Table) -> pa.Table:
        """`table` (the source's columns) with `value_schema_id` and the typed columns."""
        ids: list[int | None] = []
        records: list[Any] = []
        for raw in table.column("value_bytes").to_pylist():
            schema_id, record = self.decode(raw)
            ids.append(schema_id)
            records.append(record)
        typed = self.to_arrow(ids, records)
        if self.stored_type != self.type:
            typed = typed.cast(self.stored_type)
        table = table.append_column(SCHEMA_ID, pa.array(ids, SCHEMA_ID.type))
        for name, column in zip(self.names, typed.flatten(), strict=True):
            table = table.append_column(name, column)
        return table

    def to_arrow(self, ids: list[int | None], records: list[Any]) -> pa.Array:
        """The records as one struct array; a record that does not fit the columns' types (a
        JSON value its schema does not describe) becomes null, its id too."""
        try:
            return pa.array(records, type=self.type)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            pass
        for i, record in enumerate(records):
            try:
                pa.array([record], type=self.type)
            except (pa.ArrowException, TypeError, ValueError, OverflowError):
                ids[i] = records[i] = None
        return pa.array(records, type=self.type)
