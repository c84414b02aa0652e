"""Avro types to Arrow columns and their union over a subject's versions, without Spark.

The promotion cases (int → long → float → double, string ↔ bytes) are the Avro
specification's schema resolution rules.
"""

from __future__ import annotations

import datetime as dt
import io
import json
from typing import Any

import fastavro
import pyarrow as pa
import pytest

from schemas import wire
from spark_ingest import registry
from spark_ingest.errors import IngestError
from spark_ingest.typed_values import ValueColumns, Version


def record(*fields: tuple[str, Any], name: str = "R") -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": [{"name": n, "type": t} for n, t in fields]}


def columns(*schemas: dict[str, Any], taken: frozenset[str] = frozenset()) -> ValueColumns:
    versions = [Version("t-value", i, 100 + i, json.dumps(s)) for i, s in enumerate(schemas, 1)]
    return ValueColumns("t", versions, taken)


@pytest.mark.parametrize(
    ("avro", "arrow"),
    [
        ("boolean", pa.bool_()),
        ({"type": "long"}, pa.int64()),
        ({"type": "int", "logicalType": "time-millis"}, pa.time32("ms")),
        ({"type": "long", "logicalType": "time-micros"}, pa.time64("us")),
        ({"type": "long", "logicalType": "timestamp-micros"}, pa.timestamp("us", tz="UTC")),
        ({"type": "long", "logicalType": "local-timestamp-millis"}, pa.timestamp("ms")),
        ({"type": "string", "logicalType": "uuid"}, pa.string()),
        ({"type": "int", "logicalType": "no-such-logical-type"}, pa.int32()),
        (
            {"type": "fixed", "name": "D", "size": 16, "logicalType": "decimal", "precision": 38},
            pa.decimal128(38, 0),
        ),
        (
            {"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 3},
            pa.decimal256(40, 3),
        ),
        (["null", {"type": "array", "items": ["null", "int"]}], pa.list_(pa.int32())),
        ("null", pa.null()),
    ],
)
def test_each_avro_type_has_its_column_type(avro: Any, arrow: pa.DataType) -> None:
    assert columns(record(("f", avro))).type == pa.struct([("f", arrow)])


@pytest.mark.parametrize(
    ("old", "new", "merged"),
    [
        ("int", "long", pa.int64()),
        ("int", "float", pa.float32()),
        ("long", "double", pa.float64()),
        ("double", "int", pa.float64()),  # the widest, whichever version is newer
        ("string", "bytes", pa.binary()),
        ("null", "string", pa.string()),
        (
            {"type": "array", "items": "int"},
            {"type": "array", "items": "long"},
            pa.list_(pa.int64()),
        ),
        (
            {"type": "map", "values": "float"},
            {"type": "map", "values": "double"},
            pa.map_(pa.string(), pa.float64()),
        ),
    ],
)
def test_a_field_of_several_versions_takes_the_widest_type(
    old: Any, new: Any, merged: pa.DataType
) -> None:
    assert columns(record(("f", old)), record(("f", new))).type == pa.struct([("f", merged)])


def test_times_are_stored_as_the_integers_avro_writes() -> None:
    millis = {"type": "int", "logicalType": "time-millis"}
    micros = {"type": "long", "logicalType": "time-micros"}
    schema = record(
        ("t", millis),
        ("in", record(("u", micros), name="In")),
        ("ts", {"type": "array", "items": millis}),
    )
    typed = columns(schema)
    assert typed.stored_type == pa.struct(
        [("t", pa.int32()), ("in", pa.struct([("u", pa.int64())])), ("ts", pa.list_(pa.int32()))]
    )
    value = {
        "t": dt.time(0, 0, 1, 500_000),
        "in": {"u": dt.time(0, 0, 0, 7)},
        "ts": [dt.time(0, 1)],
    }
    table = typed.add_to(pa.table({"value_bytes": pa.array([framed(101, schema, value)])}))
    assert table.select(["t", "in", "ts"]).to_pylist() == [
        {"t": 1500, "in": {"u": 7}, "ts": [60_000]}
    ]


def test_fields_are_the_union_of_the_versions_nested_records_too() -> None:
    old = record(("a", "int"), ("in", record(("x", "int"), name="In")))
    new = record(("in", record(("y", "string"), ("x", "long"), name="In")), ("b", "string"))
    assert columns(old, new).type == pa.struct(
        [
            ("a", pa.int32()),
            ("in", pa.struct([("x", pa.int64()), ("y", pa.string())])),
            ("b", pa.string()),
        ]
    )


@pytest.mark.parametrize(
    ("schemas", "message"),
    [
        (
            [record(("f", "int")), record(("f", "string"))],
            "field.f is int32 in one version and string",
        ),
        (
            [
                record(("f", {"type": "bytes", "logicalType": "decimal", "precision": 9})),
                record(("f", {"type": "bytes", "logicalType": "decimal", "precision": 10})),
            ],
            "no column holds both",
        ),
        ([record(("f", ["int", "string"]))], "a union of several types besides null"),
        ([record(("next", ["null", "R"]))], "recursive type R"),
        (["string"], "is not an Avro record"),
        (
            [{"type": "record", "name": "R", "fields": [{"name": "f", "type": "nope"}]}],
            "not an Avro",
        ),
    ],
)
def test_schemas_that_give_no_columns_are_refused(schemas: list[Any], message: str) -> None:
    with pytest.raises(IngestError, match=message):
        columns(*schemas)


def test_no_versions_is_refused() -> None:
    with pytest.raises(IngestError, match="no versions"):
        ValueColumns("t", [], frozenset())


def test_fields_named_like_a_source_column_are_prefixed() -> None:
    typed = columns(record(("Offset", "int"), ("id", "int")), taken=frozenset({"offset"}))
    assert typed.names == ["value_Offset", "id"]


def framed(schema_id: int, schema: dict[str, Any], value: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return wire.frame(schema_id, out.getvalue())


def test_each_value_is_read_with_its_own_version_and_bad_ones_are_null() -> None:
    v1 = record(("a", "int"))
    v2 = record(("a", "long"), ("b", ["null", "string"]))
    typed = columns(v1, v2)
    good = [framed(101, v1, {"a": 1}), framed(102, v2, {"a": 2**40, "b": "x"})]
    bad = [
        None,
        b"",
        b"\x01\x00\x00\x00\x65\x02",  # magic byte 1
        framed(7, v1, {"a": 1}),  # an id of another subject
        framed(102, v1, {"a": 1}),  # v1's bytes under v2's id: too short for v2
        framed(101, v1, {"a": 1}) + b"\x00",  # trailing bytes
    ]
    table = typed.add_to(pa.table({"value_bytes": pa.array([*good, *bad], pa.binary())}))
    assert table.column_names == ["value_bytes", "value_schema_id", "a", "b"]
    assert table.column("value_schema_id").to_pylist() == [101, 102, *[None] * len(bad)]
    assert table.column("a").to_pylist() == [1, 2**40, *[None] * len(bad)]
    assert table.column("b").to_pylist() == [None, "x", *[None] * len(bad)]


def test_the_plan_stores_the_versions_and_refuses_a_malformed_copy() -> None:
    found = {"t": [Version("t-value", 1, 5, '"int"', ('"string"',))]}
    assert registry.from_json(registry.to_json(found)) == found
    with pytest.raises(IngestError, match="malformed"):
        registry.from_json('{"registry": {"t": [{"id": 1}]}}')
