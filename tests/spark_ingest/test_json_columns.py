"""JSON Schema versions to Arrow columns, and JSON payloads read into them, without Spark."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

from schemas import wire
from spark_ingest.errors import IngestError
from spark_ingest.typed_values import ValueColumns, Version


def obj(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


def columns(*schemas: Any, references: tuple[str, ...] = ()) -> ValueColumns:
    versions = [
        Version("t-value", i, 200 + i, json.dumps(s), references, "JSON")
        for i, s in enumerate(schemas, 1)
    ]
    return ValueColumns("t", versions, frozenset({"offset"}))


def test_properties_become_columns_in_their_order() -> None:
    schema = {
        **obj(
            id={"type": "integer"},
            offset={"type": "string"},
            price={"type": "number"},
            ok={"type": "boolean"},
            note={"type": ["null", "string"]},
            tags={"type": "array", "items": {"type": "string"}},
            counts={"type": "object", "additionalProperties": {"type": "integer"}},
            ship={"$ref": "#/definitions/Address"},
            at={"$ref": "#/$defs/When"},
        ),
        "definitions": {"Address": obj(city={"type": "string"})},
        "$defs": {"When": {"type": "string", "format": "date-time"}},
    }
    typed = columns(schema)
    assert typed.type == pa.struct(
        [
            ("id", pa.int64()),
            ("offset", pa.string()),
            ("price", pa.float64()),
            ("ok", pa.bool_()),
            ("note", pa.string()),
            ("tags", pa.list_(pa.string())),
            ("counts", pa.map_(pa.string(), pa.int64())),
            ("ship", pa.struct([("city", pa.string())])),
            ("at", pa.string()),
        ]
    )
    assert typed.names[1] == "value_offset"


def test_an_integer_widened_to_a_number_is_a_double() -> None:
    typed = columns(obj(n={"type": "integer"}), obj(n={"type": "number"}, m={"type": "string"}))
    assert typed.type == pa.struct([("n", pa.float64()), ("m", pa.string())])


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (obj(a={"anyOf": [{"type": "string"}, {"type": "integer"}]}), "field.a: .* no single type"),
        (obj(a={}), "field.a: .* no single type"),
        (obj(a={"type": ["string", "integer"]}), "several types besides null"),
        (obj(a={"type": "object"}), "field.a: an object without properties"),
        (obj(a={"type": "array"}), r"field.a\[\]: None declares no single type"),
        (obj(a={"$ref": "other.json#/X"}), "is not one of the schema's own definitions"),
        (
            {
                **obj(a={"$ref": "#/definitions/N"}),
                "definitions": {"N": obj(n={"$ref": "#/definitions/N"})},
            },
            "recursive \\$ref",
        ),
        ({"type": "array", "items": {"type": "string"}}, "not a JSON Schema of objects"),
        ({"type": "object"}, "an object without properties"),
    ],
)
def test_schemas_that_give_no_columns_are_refused(schema: Any, message: str) -> None:
    with pytest.raises(IngestError, match=message):
        columns(schema)


def test_references_and_text_that_is_not_json_are_refused() -> None:
    with pytest.raises(IngestError, match="references are not followed"):
        columns(obj(a={"type": "string"}), references=('{"type": "string"}',))
    with pytest.raises(IngestError, match="not JSON"):
        ValueColumns("t", [Version("t-value", 1, 1, "{nope", (), "JSON")], frozenset())


def test_versions_of_another_schema_type_are_refused() -> None:
    other = Version("t-value", 3, 1, "<xs:schema/>", (), "XML")
    with pytest.raises(IngestError, match=r"version 3 is XML: .* Avro, JSON Schema and Protobuf"):
        ValueColumns("t", [other], frozenset())


def test_values_that_do_not_fit_their_schema_are_null_and_the_others_kept() -> None:
    typed = columns(obj(id={"type": "integer"}, name={"type": "string"}))
    values = [
        wire.frame(201, b'{"id": 1, "name": "a", "extra": true}'),
        wire.frame(201, b'{"id": "not a number"}'),
        wire.frame(201, b"[1, 2]"),
        wire.frame(201, b"{not json"),
        wire.frame(201, b'{"id": 99999999999999999999999}'),
        wire.frame(201, b'{"name": "b"}'),
    ]
    table = typed.add_to(pa.table({"value_bytes": pa.array(values, pa.binary())}))
    assert table.select(["value_schema_id", "id", "name"]).to_pylist() == [
        {"value_schema_id": 201, "id": 1, "name": "a"},
        *[{"value_schema_id": None, "id": None, "name": None}] * 4,
        {"value_schema_id": 201, "id": None, "name": "b"},
    ]
