"""Protobuf schemas: protoc's parsing of proto3 and proto2, imports as references, values in
protobuf's JSON mapping, the payload as confluent-kafka's ProtobufSerializer writes it (message
indexes first), schema bombs, and Confluent's compatibility rules. The compatibility cases
in test_compatibility_rules are from Karapace's tests/unit/protobuf/test_protobuf_compatibility.py
and tests/unit/compatibility/test_protobuf_checks.py, with the wire-level rules Confluent
documents."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka.schema_registry._sync.mock_schema_registry_client import (
    MockSchemaRegistryClient,
)
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from schemas import wire
from schemas.errors import INVALID_SCHEMA, SchemaError
from schemas.types import InvalidValue, limits, parse
from schemas.types.protobuf import ProtobufSchema, is_serialized


def proto(text: str, references: dict[str, Any] | None = None) -> ProtobufSchema:
    parsed = parse("PROTOBUF", text, references or {})
    assert isinstance(parsed, ProtobufSchema)
    return parsed


ORDER = """
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";

message Order {
  string id = 1;
  int64 cents = 2;
  repeated string items = 3;
  google.protobuf.Timestamp at = 4;
  map<string, int32> counts = 5;
  oneof paid { string card = 6; bool cash = 7; }
  Status status = 8;
  bytes note = 9;
  Line line = 10;
  message Line { string sku = 1; }
}
enum Status { NEW = 0; SHIPPED = 1; }
message Other { int32 n = 1; }
"""
AN_ORDER = {
    "id": "o1",
    "cents": "1250",
    "items": ["a", "b"],
    "at": "2024-01-02T03:04:05Z",
    "counts": {"a": 2},
    "card": "visa",
    "status": "SHIPPED",
    "note": "AAE=",
    "line": {"sku": "x"},
}


def test_canonical_form_ignores_comments_whitespace_and_type_spelling() -> None:
    one = proto(
        'syntax = "proto3";\npackage p;\nmessage M { N n = 1; }\nmessage N { int32 x = 1; }\n'
    )
    two = proto(
        '// a comment\nsyntax="proto3"; package p;\n\nmessage M {\n  .p.N n = 1; // field\n}\n'
        "message N { int32 x = 1; }"
    )
    assert one.canonical() == two.canonical()
    three = proto(
        'syntax = "proto3";\npackage p;\nmessage M { N n = 2; }\nmessage N { int32 x = 1; }\n'
    )
    assert three.canonical() != one.canonical()


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("not a proto", "invalid Protobuf schema"),
        ('syntax = "proto3"; message M { strin a = 1; }', '"strin" is not defined'),
        ('syntax = "proto3"; message M { int32 a = 1; int32 b = 1; }', "has already been used"),
        ('syntax = "proto3"; message M { int32 a = 0; }', "positive"),
        ('syntax = "proto3"; message M { required int32 a = 1; }', "Required fields"),
        ('syntax = "proto3"; import "missing.proto"; message M {}', "missing.proto"),
        ('syntax = "proto4";', "proto4"),
        ('syntax = "proto3"; enum E { A = 1; }', "first enum value"),
    ],
)
def test_invalid_schemas_are_refused_with_invalid_schema(text: str, why: str) -> None:
    with pytest.raises(SchemaError, match=why) as refused:
        proto(text)
    assert refused.value.error_code == INVALID_SCHEMA
    assert "sluice-proto-" not in refused.value.message


def test_proto2_with_required_fields_and_defaults() -> None:
    legacy = proto(
        'syntax = "proto2"; message L { required string id = 1; '
        "optional int32 n = 2 [default = 7]; }"
    )
    assert legacy.decode(legacy.encode({"id": "x"})) == {"id": "x"}
    with pytest.raises(InvalidValue, match="required fields are missing: id"):
        legacy.validate({"n": 1})


def test_values_round_trip_in_the_json_mapping() -> None:
    order = proto(ORDER)
    payload = order.encode(AN_ORDER)
    assert payload[:1] == b"\x00"
    assert order.decode(payload) == AN_ORDER
    assert order.decode(order.encode({"id": "o2", "cents": 5})) == {"id": "o2", "cents": "5"}


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ({"nope": 1}, "nope"),
        ({"cents": "lots"}, "cents"),
        ({"status": "LOST"}, "LOST"),
        ({"items": "a"}, "items"),
        ({"card": "visa", "cash": True}, "paid"),
        ([], "an object, not list"),
    ],
)
def test_values_the_schema_does_not_describe_are_invalid(value: Any, why: str) -> None:
    order = proto(ORDER)
    with pytest.raises(InvalidValue, match=why):
        order.validate(value)
    with pytest.raises(InvalidValue):
        order.encode(value)


def test_a_payload_names_its_message_by_index_path() -> None:
    order = proto(ORDER)
    other = b"\x02\x02" + b"\x08\x05"
    assert order.decode(other) == {"n": 5}
    line = b"\x04\x00\x02" + b"\x0a\x01x"
    assert order.decode(line) == {"sku": "x"}, "a map's entry counts among the nested messages"
    with pytest.raises(InvalidValue, match="names no message"):
        order.decode(b"\x02\x08" + b"\x08\x05")
    with pytest.raises(InvalidValue, match="not a Protobuf payload"):
        order.decode(b"\x00\x0a\x05ab")
    with pytest.raises(InvalidValue, match="truncated"):
        order.decode(b"")


def test_imports_resolve_to_references_transitively() -> None:
    base = proto('syntax = "proto3"; package base; message Money { int64 cents = 1; }')
    price = proto(
        'syntax = "proto3"; package price; import "base/money.proto"; '
        "message Price { base.Money amount = 1; }",
        {"base/money.proto": base},
    )
    item = proto(
        'syntax = "proto3"; import "price.proto"; message Item { price.Price price = 1; }',
        {"price.proto": price},
    )
    value = {"price": {"amount": {"cents": "3"}}}
    assert item.decode(item.encode(value)) == value
    assert item.reference_depth == 2


@pytest.mark.parametrize("name", ["../evil.proto", "/abs.proto", "notproto.txt", "schema.proto"])
def test_a_reference_name_must_be_a_relative_proto_path(name: str) -> None:
    base = proto('syntax = "proto3"; message B {}')
    with pytest.raises(SchemaError, match="reference"):
        proto('syntax = "proto3"; message M {}', {name: base})


@pytest.mark.parametrize("path", ["../../../../etc/hostname", "/etc/hostname", "a/../../x.proto"])
def test_an_import_outside_the_references_is_never_read(path: str) -> None:
    with pytest.raises(SchemaError, match=r"not found|not allowed") as refused:
        proto(f'syntax = "proto3"; import "{path}"; message M {{}}')
    assert refused.value.error_code == INVALID_SCHEMA


def test_a_reference_of_another_type_is_refused() -> None:
    with pytest.raises(SchemaError, match="is AVRO, not PROTOBUF"):
        proto('syntax = "proto3"; message M {}', {"a.proto": parse("AVRO", '"int"', {})})


def test_bytes_equal_confluent_kafka_protobuf_serializer_and_decode_with_its_deserializer() -> None:
    order = proto(ORDER)
    order_class = order._class([0])
    client = MockSchemaRegistryClient({"url": "mock://protobuf-types"})
    context = SerializationContext("t", MessageField.VALUE)
    native = order_class()
    native.ParseFromString(order.encode(AN_ORDER)[1:])
    theirs = ProtobufSerializer(order_class, client, {"use.deprecated.format": False})(
        native, context
    )
    assert theirs is not None
    schema_id, payload = wire.unframe(theirs)
    assert payload == order.encode(AN_ORDER)
    decoded = ProtobufDeserializer(order_class, {"use.deprecated.format": False})(
        wire.frame(schema_id, order.encode(AN_ORDER)), context
    )
    assert decoded == native


def test_a_schema_nested_too_deep_is_refused() -> None:
    deep = (
        'syntax = "proto3"; '
        + "message M { " * (limits.MAX_DEPTH + 1)
        + "}" * (limits.MAX_DEPTH + 1)
    )
    with pytest.raises(SchemaError, match="nested more than 64 levels") as refused:
        proto(deep)
    assert refused.value.error_code == INVALID_SCHEMA
    with pytest.raises(SchemaError, match="nested more than"):
        proto(
            'syntax = "proto3"; message M { option (x) = ' + "{a:" * 100_000 + "}" * 100_000 + "; }"
        )
    proto('syntax = "proto3"; // {{{{\n message M { string s = 1 [json_name = "{{{{"]; }')


def test_an_enum_too_large_and_a_text_too_long_are_refused() -> None:
    values = " ".join(f"V{i} = {i};" for i in range(limits.MAX_ENUM_SYMBOLS + 1))
    with pytest.raises(SchemaError, match="enum 'E' has 10001 symbols"):
        proto(f'syntax = "proto3"; message M {{ enum E {{ {values} }} }}')
    with pytest.raises(SchemaError, match="more than the limit"):
        proto('syntax = "proto3";' + " " * limits.MAX_SCHEMA_CHARS)


def test_references_nested_too_deep_are_refused() -> None:
    current = proto('syntax = "proto3"; message R0 {}')
    with pytest.raises(SchemaError, match="references nest more than 32 deep"):
        for i in range(1, limits.MAX_REFERENCE_DEPTH + 2):
            current = proto(
                f'syntax = "proto3"; import "r{i - 1}.proto"; message R{i} {{ R{i - 1} r = 1; }}',
                {f"r{i - 1}.proto": current},
            )


def message(
    body: str, *, package: str = "p", syntax: str = "proto3", extra: str = ""
) -> ProtobufSchema:
    return proto(f'syntax = "{syntax}"; package {package}; message M {{ {body} }} {extra}')


NESTED = "message Value { string str = 1; %s } string test = 1; Value val = 2; %s"


@pytest.mark.parametrize(
    ("reader", "writer", "kind"),
    [
        (message("int32 a = 1;"), message("int32 a = 1; string b = 2;"), None),
        (message("int32 a = 1; string b = 2;"), message("int32 a = 1;"), None),
        (message("int32 a = 1;"), message("int64 a = 1;"), None),
        (message("uint64 a = 1;"), message("bool a = 1;"), None),
        (message("sint32 a = 1;"), message("sint64 a = 1;"), None),
        (message("bytes a = 1;"), message("string a = 1;"), None),
        (message("repeated string a = 1;"), message("string a = 1;"), None),
        (message("int32 renamed = 1;"), message("int32 a = 1;"), None),
        (message("int32 a = 1;"), message("optional int32 a = 1;", syntax="proto2"), None),
        (message("int32 a = 1;", extra="message N {}"), message("int32 a = 1;"), None),
        (message("int32 a = 1;"), message("int32 a = 1;", extra="enum E { A = 0; }"), None),
        (message("oneof o { int32 a = 1; }"), message("int32 a = 1;"), None),
        (
            proto('syntax = "proto3"; message Human { string name = 1; }'),
            proto('syntax = "proto3"; message Person { string name = 1; }'),
            "MESSAGE_REMOVED",
        ),
        (
            message("E e = 1;", extra="enum E { A = 0; B = 1; C = 2; }"),
            message("E e = 1;", extra="enum E { A = 0; B = 1; }"),
            None,
        ),
        (message("string a = 1;"), message("int32 a = 1;"), "FIELD_KIND_CHANGED"),
        (message("sint32 a = 1;"), message("int32 a = 1;"), "FIELD_KIND_CHANGED"),
        (message("fixed32 a = 1;"), message("fixed64 a = 1;"), "FIELD_KIND_CHANGED"),
        (message("M a = 1;"), message("string a = 1;"), "FIELD_KIND_CHANGED"),
        (message("repeated int32 a = 1;"), message("int32 a = 1;"), "FIELD_NUMERIC_LABEL_CHANGED"),
        (message("int32 a = 2;"), message("int32 a = 1;"), "FIELD_NUMBER_CHANGED"),
        (message("int32 a = 1;", package="q"), message("int32 a = 1;"), "PACKAGE_CHANGED"),
        (message("int32 a = 1;"), message("int32 a = 1;", extra="message N {}"), "MESSAGE_REMOVED"),
        (
            message("N a = 1;", extra="message N {} message O {}"),
            message("O a = 1;", extra="message N {} message O {}"),
            "FIELD_NAMED_TYPE_CHANGED",
        ),
        (
            message("required int32 a = 1; required int32 b = 2;", syntax="proto2"),
            message("required int32 a = 1;", syntax="proto2"),
            "REQUIRED_FIELD_ADDED",
        ),
        (
            message("required int32 a = 1;", syntax="proto2"),
            message("required int32 a = 1; required int32 b = 2;", syntax="proto2"),
            "REQUIRED_FIELD_REMOVED",
        ),
        (
            message("required int32 a = 1;", syntax="proto2"),
            message("optional int32 a = 1;", syntax="proto2"),
            "REQUIRED_FIELD_ADDED",
        ),
        (
            message("oneof o { int32 a = 1; }"),
            message("oneof o { int32 a = 1; int32 b = 2; }"),
            "ONEOF_FIELD_REMOVED",
        ),
        (
            message("oneof o { int32 a = 1; int32 b = 2; }"),
            message("oneof o { int32 a = 1; } int32 b = 2;"),
            "FIELD_MOVED_TO_EXISTING_ONEOF",
        ),
        (
            message("oneof o { int32 a = 1; int32 b = 2; }"),
            message("int32 a = 1; int32 b = 2;"),
            "MULTIPLE_FIELDS_MOVED_TO_ONEOF",
        ),
        (message(NESTED % ("", "")), message(NESTED % ("string str2 = 2;", "")), None),
        (message(NESTED % ("string str2 = 2;", "")), message(NESTED % ("", "")), None),
        (
            message(NESTED % ("int32 x = 2;", "")),
            message(NESTED % ("Enu x = 2;", "enum Enu { A = 0; B = 1; }")),
            None,
        ),
        (
            proto(
                'syntax = "proto3"; package tc4; '
                "message Fred { int32 f = 1; } message HodoCode { int32 h = 1; }"
            ),
            proto(
                'syntax = "proto3"; package tc4; '
                "message HodoCode { int32 h = 1; } message Fred { int32 f = 1; }"
            ),
            None,
        ),
        (
            proto(
                'syntax = "proto3"; package pkg; '
                "message Foo { string fieldA = 1; string fieldX = 4; }"
            ),
            proto(
                'syntax = "proto3"; package pkg; '
                "message Foo { string fieldA = 1; string fieldX = 5; }"
            ),
            "FIELD_NUMBER_CHANGED",
        ),
    ],
)
def test_compatibility_rules(
    reader: ProtobufSchema, writer: ProtobufSchema, kind: str | None
) -> None:
    found = reader.incompatibilities(writer)
    if kind is None:
        assert found == []
    else:
        assert any(f"errorType:'{kind}'" in change for change in found), found
    assert reader.incompatibilities(reader) == []


def test_a_recursive_message_compares_and_round_trips() -> None:
    tree = proto('syntax = "proto3"; message Tree { int32 v = 1; repeated Tree children = 2; }')
    value = {"v": 1, "children": [{"v": 2, "children": [{"v": 3}]}]}
    assert tree.decode(tree.encode(value)) == value
    assert tree.incompatibilities(tree) == []


def test_karapace_package_change_is_incompatible_as_confluent_rules_it() -> None:
    template = (
        'syntax = "proto3"; package %s; message TestMessage { message Value { string str = 1; } '
        "string test = 1; .%s.TestMessage.Value val = 2; }"
    )
    found = proto(template % ("a2", "a2")).incompatibilities(proto(template % ("a1", "a1")))
    assert [change.split(",")[0] for change in found] == ["{errorType:'PACKAGE_CHANGED'"]


def test_the_serialized_form_the_client_registers_is_the_same_schema() -> None:
    """confluent-kafka's ProtobufSerializer registers a base64 FileDescriptorProto (and asks
    for one back with format=serialized): it parses to the same schema as the .proto text,
    whatever file name the client gave, and its well-known imports resolve. Its text is the
    descriptor printed as .proto text, as Confluent's registry answers it."""
    order = proto(ORDER)
    file = order._class([0]).DESCRIPTOR.file
    registered = MockSchemaRegistryClient({"url": "mock://protobuf-serialized"})
    context = SerializationContext("orders", MessageField.VALUE)
    ProtobufSerializer(order._class([0]), registered, {"use.deprecated.format": False})(
        order._class([0])(), context
    )
    text = registered.get_latest_version("orders-value").schema.schema_str
    assert text == order.serialized()
    from_client = proto(text)
    assert from_client.canonical() == order.canonical()
    assert not is_serialized(from_client.text) and "message Order {" in from_client.text
    assert proto(from_client.text).canonical() == order.canonical()
    assert from_client.decode(order.encode(AN_ORDER)) == order.decode(order.encode(AN_ORDER))
    assert proto(from_client.serialized()).canonical() == order.canonical()
    assert file.name == "schema.proto"


def test_a_serialized_form_with_a_reference_and_bad_ones() -> None:
    common = proto('syntax = "proto3"; package c; message Money { int64 cents = 1; }')
    text = 'syntax = "proto3"; import "money.proto"; message Price { c.Money amount = 1; }'
    price = proto(text, {"money.proto": common})
    again = proto(price.serialized(), {"money.proto": common})
    assert again.canonical() == price.canonical()
    assert again.decode(price.encode({"amount": {"cents": "5"}})) == {"amount": {"cents": "5"}}
    with pytest.raises(SchemaError, match="names no reference") as refused:
        proto(price.serialized())
    assert refused.value.error_code == INVALID_SCHEMA
    with pytest.raises(SchemaError, match="FileDescriptorProto"):
        proto("bm90IGEgZGVzY3JpcHRvcg==")  # base64, but not a descriptor
