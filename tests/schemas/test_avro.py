"""Avro schemas: parsing, canonical form, references, values in Avro's JSON encoding, the
binary payload as confluent-kafka's AvroSerializer writes it, and schema bombs. The
compatibility cases are from Karapace's tests/unit/test_avro_compatibility.py (themselves
from Confluent's AvroCompatibilityTest and Apache Avro's TestSchemaCompatibility)."""

from __future__ import annotations

import io
import json
from typing import Any, cast

import pytest
from confluent_kafka.schema_registry._sync.mock_schema_registry_client import (
    MockSchemaRegistryClient,
)
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from fastavro import parse_schema, schemaless_writer

from schemas import wire
from schemas.errors import INVALID_SCHEMA, SchemaError
from schemas.types import InvalidValue, ParsedSchema, limits, parse
from schemas.types.avro import AvroSchema


def avro(schema: Any, references: dict[str, Any] | None = None) -> AvroSchema:
    """The Avro schema of a JSON value (a primitive's name is a JSON string)."""
    return avro_text(json.dumps(schema), references)


def avro_text(text: str, references: dict[str, Any] | None = None) -> AvroSchema:
    parsed = parse("AVRO", text, references or {})
    assert isinstance(parsed, AvroSchema)
    return parsed


class NotAvro:
    """A schema of another type, as far as the Avro module looks at one."""

    schema_type = "JSON"


def record(name: str, *fields: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": list(fields), **extra}


USER = record(
    "User",
    {"name": "name", "type": "string"},
    {"name": "age", "type": ["null", "int"], "default": None},
    {"name": "avatar", "type": "bytes"},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "scores", "type": {"type": "map", "values": "double"}},
    {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
    {"name": "id", "type": {"type": "fixed", "name": "Id", "size": 2}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    namespace="com.example",
)
A_USER = {
    "name": "ada",
    "age": {"int": 36},
    "avatar": "\u0000\u00ff",
    "tags": ["x"],
    "scores": {"m": 1.5},
    "kind": "B",
    "id": "ab",
    "at": 1700000000000,
}


def test_canonical_form_ignores_whitespace_and_key_order_but_keeps_docs() -> None:
    one = avro_text('{"type": "record", "name": "R", "fields": [{"name": "f", "type": "int"}]}')
    two = avro_text('{"fields":[{"type":"int","name":"f"}],\n "name":"R","type":"record"}')
    assert one.canonical() == two.canonical()
    assert one.canonical() == '{"fields":[{"name":"f","type":"int"}],"name":"R","type":"record"}'
    documented = avro(record("R", {"name": "f", "type": "int", "doc": "the f"}))
    assert documented.canonical() != one.canonical()
    assert one.text.startswith('{"type": "record"')


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{not json", "not valid JSON"),
        ('"strin"', "invalid Avro schema"),
        ('{"type": "record", "fields": []}', "invalid Avro schema"),
        ('{"type": "record", "name": "R", "fields": [{"name": "f"}]}', "invalid Avro schema"),
        ('{"type": "record", "name": "R", "fields": [{"name": "f", "type": "Nope"}]}', "Nope"),
        ('{"type": "enum", "name": "E", "symbols": ["A", "A"]}', "invalid Avro schema"),
        ('{"type": "fixed", "name": "F"}', "invalid Avro schema"),
        ('{"type": "array"}', "invalid Avro schema"),
        ('["null", "null"]', "invalid Avro schema"),
        ("42", "invalid Avro schema"),
    ],
)
def test_invalid_schemas_are_refused_with_invalid_schema(text: str, why: str) -> None:
    with pytest.raises(SchemaError, match=why) as refused:
        avro_text(text)
    assert refused.value.error_code == INVALID_SCHEMA


def test_a_reference_names_a_record_of_another_schema() -> None:
    address = avro(record("Address", {"name": "city", "type": "string"}, namespace="geo"))
    person = avro(
        record("Person", {"name": "home", "type": "geo.Address"}), {"geo.Address": address}
    )
    value = {"home": {"city": "Paris"}}
    assert person.decode(person.encode(value)) == value
    with pytest.raises(SchemaError, match=r"geo\.Address"):
        avro(record("Person", {"name": "home", "type": "geo.Address"}))


def test_references_of_references_resolve_and_a_shared_one_counts_once() -> None:
    base = avro(record("Base", {"name": "n", "type": "int"}))
    left = avro(record("Left", {"name": "b", "type": "Base"}), {"Base": base})
    right = avro(record("Right", {"name": "b", "type": "Base"}), {"Base": base})
    both = avro(
        record("Both", {"name": "l", "type": "Left"}, {"name": "r", "type": "Right"}),
        {"Left": left, "Right": right},
    )
    value = {"l": {"b": {"n": 1}}, "r": {"b": {"n": 2}}}
    assert both.decode(both.encode(value)) == value
    assert both.reference_depth == 2


def test_a_reference_of_another_type_is_refused() -> None:
    with pytest.raises(SchemaError, match="is JSON, not AVRO"):
        avro(record("R", {"name": "f", "type": "int"}), {"Other": NotAvro()})


def test_values_in_avro_json_encoding_round_trip() -> None:
    user = avro(USER)
    payload = user.encode(A_USER)
    assert user.decode(payload) == {**A_USER, "age": 36}
    user.validate(A_USER)
    user.validate({**A_USER, "age": 36})
    user.validate({**A_USER, "age": None})


def test_values_are_written_as_fastavros_public_writer_writes_them() -> None:
    """The type writes through fastavro's compiled writer below `schemaless_writer`."""
    datum = {**A_USER, "age": 36, "avatar": b"\x00\xff", "id": b"ab"}
    out = io.BytesIO()
    schemaless_writer(out, parse_schema(USER), datum)
    assert avro(USER).encode(A_USER) == out.getvalue()


def test_a_recursive_record_round_trips() -> None:
    node = avro(
        record("Node", {"name": "v", "type": "bytes"}, {"name": "next", "type": ["null", "Node"]})
    )
    value = {"v": "a", "next": {"Node": {"v": "\u00e9", "next": None}}}
    assert node.decode(node.encode(value)) == {"v": "a", "next": {"v": "\u00e9", "next": None}}


def test_a_value_or_payload_nested_too_deep_is_invalid_not_a_crash() -> None:
    node = avro(
        record("Node", {"name": "v", "type": "bytes"}, {"name": "next", "type": ["null", "Node"]})
    )
    value: Any = None
    for _ in range(5000):
        value = {"v": "", "next": value}
    with pytest.raises(InvalidValue, match="nested too deep"):
        node.validate(value)
    with pytest.raises(InvalidValue):
        node.decode(b"\x00\x02" * 50_000 + b"\x00\x00")


def test_a_plain_union_value_takes_the_first_branch_that_describes_it() -> None:
    union = avro(["null", "string", "bytes", {"type": "map", "values": "int"}])
    assert union.encode("x") == b"\x02\x02x"
    assert union.encode({"bytes": "x"}) == b"\x04\x02x"
    assert union.encode({"a": 1}) == b"\x06\x02\x02a\x02\x00"
    assert union.encode(None) == b"\x00"


@pytest.mark.parametrize(
    ("value", "where"),
    [
        ({**A_USER, "name": 1}, "name"),
        ({**A_USER, "age": "old"}, "age"),
        ({**A_USER, "kind": "C"}, "kind"),
        ({**A_USER, "id": "abc"}, "id"),
        ({**A_USER, "tags": "x"}, "tags"),
        ({key: v for key, v in A_USER.items() if key != "name"}, "name"),
        ({**A_USER, "avatar": "\u0100"}, "code points 0-255"),
        ([], "User"),
    ],
)
def test_values_the_schema_does_not_describe_are_invalid(value: Any, where: str) -> None:
    user = avro(USER)
    with pytest.raises(InvalidValue, match=where):
        user.validate(value)
    with pytest.raises(InvalidValue):
        user.encode(value)


@pytest.mark.parametrize(
    "payload", [b"", b"\x06ad", b"\x02\x02x\x00", b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"]
)
def test_payloads_not_of_the_schema_are_invalid(payload: bytes) -> None:
    pair = avro(record("P", {"name": "s", "type": "string"}, {"name": "n", "type": "long"}))
    with pytest.raises(InvalidValue):
        pair.decode(payload)


def test_bytes_equal_confluent_kafka_avro_serializer_and_decode_with_its_deserializer() -> None:
    client = MockSchemaRegistryClient({"url": "mock://avro-types"})
    text = json.dumps(
        {**USER, "fields": [f for f in USER["fields"] if f["name"] not in ("age", "at")]}
    )
    value = {key: v for key, v in A_USER.items() if key not in ("age", "at")}
    native = {**value, "avatar": b"\x00\xff", "id": b"ab"}
    context = SerializationContext("t", MessageField.VALUE)
    theirs = AvroSerializer(client, text)(native, context)
    assert theirs is not None
    schema_id, payload = wire.unframe(theirs)
    ours = avro_text(text)
    assert ours.encode(value) == payload
    assert ours.decode(payload) == value
    decoded = AvroDeserializer(client)(wire.frame(schema_id, ours.encode(value)), context)
    assert decoded == native


def test_a_schema_nested_too_deep_is_refused() -> None:
    deep: Any = "int"
    for _ in range(limits.MAX_DEPTH):
        deep = {"type": "array", "items": deep}
    with pytest.raises(SchemaError, match="nested more than 64 levels") as refused:
        avro(deep)
    assert refused.value.error_code == INVALID_SCHEMA
    with pytest.raises(SchemaError, match="nested more than"):
        avro_text("[" * 100_000 + "]" * 100_000)


@pytest.mark.parametrize(
    "items",
    [
        "null",
        {"type": "null"},
        record("Empty"),
        record("Nulls", {"name": "a", "type": "null"}, {"name": "b", "type": record("E")}),
        {"type": "fixed", "name": "F0", "size": 0},
    ],
)
def test_an_array_of_items_that_take_no_bytes_is_refused(items: Any) -> None:
    with pytest.raises(SchemaError, match="items take no bytes") as refused:
        avro(record("R", {"name": "a", "type": {"type": "array", "items": items}}))
    assert refused.value.error_code == INVALID_SCHEMA


def test_arrays_of_items_that_take_bytes_are_kept() -> None:
    for items in (
        ["null", "int"],
        {"type": "enum", "name": "E", "symbols": ["A"]},
        record("I", {"name": "i", "type": "int"}),
    ):
        avro({"type": "array", "items": items})
    avro({"type": "map", "values": "null"})


def test_a_schema_text_too_long_is_refused() -> None:
    huge = json.dumps(
        record("R", {"name": "f", "type": "string", "doc": "x" * limits.MAX_SCHEMA_CHARS})
    )
    with pytest.raises(SchemaError, match="more than the limit"):
        avro_text(huge)


def test_an_enum_with_too_many_symbols_is_refused() -> None:
    symbols = [f"S{i}" for i in range(limits.MAX_ENUM_SYMBOLS + 1)]
    with pytest.raises(SchemaError, match="enum 'E' has 10001 symbols"):
        avro({"type": "enum", "name": "E", "symbols": symbols})
    avro({"type": "enum", "name": "E", "symbols": symbols[:-1]})


def test_references_nested_too_deep_are_refused() -> None:
    schema = avro(record("R0", {"name": "f", "type": "int"}))
    with pytest.raises(SchemaError, match="references nest more than 32 deep"):
        for i in range(1, limits.MAX_REFERENCE_DEPTH + 2):
            schema = avro(
                record(f"R{i}", {"name": "f", "type": f"R{i - 1}"}), {f"R{i - 1}": schema}
            )
    assert schema.reference_depth == limits.MAX_REFERENCE_DEPTH


SCHEMA1 = record("myrecord", {"type": "string", "name": "f1"})
SCHEMA2 = record(
    "myrecord", {"type": "string", "name": "f1"}, {"type": "string", "name": "f2", "default": "foo"}
)
SCHEMA3 = record("myrecord", {"type": "string", "name": "f1"}, {"type": "string", "name": "f2"})
SCHEMA4 = record("myrecord", {"type": "string", "name": "f1_new", "aliases": ["f1"]})
SCHEMA6 = record("myrecord", {"type": ["null", "string"], "name": "f1", "doc": "doc of f1"})
SCHEMA7 = record("myrecord", {"type": ["null", "string", "int"], "name": "f1", "doc": "doc of f1"})
ENUM_AB = {"type": "enum", "name": "Enum1", "symbols": ["A", "B"]}
ENUM_ABC = {"type": "enum", "name": "Enum1", "symbols": ["A", "B", "C"]}
ENUM2_AB = {"type": "enum", "name": "Enum2", "symbols": ["A", "B"]}
A_INT = record("Record1", {"name": "a", "type": "int"})
A_LONG = record("Record1", {"name": "a", "type": "long"})
A_DINT = record("Record1", {"name": "a", "type": "int", "default": 0})
A_INT_B_INT = record("Record1", {"name": "a", "type": "int"}, {"name": "b", "type": "int"})
A_INT_B_DINT = record(
    "Record1", {"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 0}
)
FIXED_4 = {"type": "fixed", "name": "Fixed", "size": 4}
FIXED_8 = {"type": "fixed", "name": "Fixed", "size": 8}


@pytest.mark.parametrize(
    ("reader", "writer", "compatible"),
    [
        (SCHEMA2, SCHEMA1, True),
        (SCHEMA3, SCHEMA1, False),
        (SCHEMA4, SCHEMA1, True),
        (SCHEMA6, SCHEMA1, True),
        (SCHEMA1, SCHEMA6, False),
        (SCHEMA7, SCHEMA6, True),
        (SCHEMA6, SCHEMA7, False),
        (SCHEMA1, SCHEMA2, True),
        (SCHEMA1, SCHEMA3, True),
        (SCHEMA3, SCHEMA2, True),
        (SCHEMA2, SCHEMA3, True),
        ("long", "int", True),
        ("int", "long", False),
        ("float", "long", True),
        ("double", "float", True),
        ("float", "double", False),
        ("string", "bytes", True),
        ("bytes", "string", True),
        ("int", "string", False),
        ({"type": "array", "items": "long"}, {"type": "array", "items": "int"}, True),
        ({"type": "array", "items": "int"}, {"type": "array", "items": "long"}, False),
        ({"type": "map", "values": "long"}, {"type": "map", "values": "int"}, True),
        (ENUM_ABC, ENUM_AB, True),
        (ENUM_AB, ENUM_ABC, False),
        (ENUM2_AB, ENUM_AB, False),
        (["int", "string"], "int", True),
        ("int", ["int", "string"], False),
        (["long", "string"], ["int", "string"], True),
        (A_LONG, A_INT, True),
        (A_INT, A_LONG, False),
        (A_INT, A_INT_B_INT, True),
        (A_INT_B_DINT, A_INT, True),
        (A_INT_B_INT, A_INT, False),
        (A_DINT, record("Record1"), True),
        (A_INT, record("Record1"), False),
        (["int", "string"], ["string", "int"], True),
        (["float"], ["int", "long"], True),
        ("long", ["int", "long"], True),
        ("double", ["int", "long", "float", "double"], True),
        ("int", ["int"], True),
        (["int"], "int", True),
        (["int", "string"], ["int", "string", "long"], False),
        ({"type": "map", "values": "string"}, {"type": "array", "items": "string"}, False),
        (A_INT, A_DINT, True),
        (A_DINT, A_INT_B_INT, True),
        (FIXED_4, FIXED_8, False),
        (FIXED_4, FIXED_4, True),
    ],
)
def test_reader_writer_compatibility(reader: Any, writer: Any, compatible: bool) -> None:
    found = avro(reader).incompatibilities(avro(writer))
    assert (found == []) is compatible, found


def test_incompatibilities_name_the_error_type_and_where() -> None:
    found = avro(SCHEMA3).incompatibilities(avro(SCHEMA1))
    assert found[0].startswith("{errorType:'READER_FIELD_MISSING_DEFAULT_VALUE'")
    assert "/fields/1" in found[-1] and "f2" in found[-1]
    fixed = avro(FIXED_4).incompatibilities(avro(FIXED_8))
    assert fixed[0].startswith("{errorType:'FIXED_SIZE_MISMATCH'")
    assert "'/size'" in fixed[-1] and "expected: 8, found: 4" in fixed[-1]
    mismatch = avro(A_INT).incompatibilities(avro(A_LONG))
    assert mismatch[0].startswith("{errorType:'TYPE_MISMATCH'")
    assert avro(A_INT).incompatibilities(cast(ParsedSchema, NotAvro())) == [
        "the old schema is JSON, not AVRO"
    ]
