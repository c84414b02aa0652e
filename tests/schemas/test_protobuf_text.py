"""A Protobuf schema registered in its serialized form (a base64 FileDescriptorProto) is stored
and answered as .proto text: the printer's text compiles to the same descriptor, over the
.proto texts of the Protobuf suites and every feature it writes; a descriptor no text
expresses is refused at registration (and read as it was stored)."""

from __future__ import annotations

import ast
import base64
import importlib
import importlib.util
import pkgutil
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, text_format

from schemas import errors, registry
from schemas.errors import SchemaError
from schemas.records import SchemaVersion
from schemas.state import RegistryState
from schemas.types import Reference, parse
from schemas.types.protobuf import ProtobufSchema, is_serialized
from schemas.types.protobuf_text import comparable, proto_text

SUITES = Path(__file__).parent


def proto(text: str, references: dict[str, Any] | None = None) -> ProtobufSchema:
    parsed = parse("PROTOBUF", text, references or {})
    assert isinstance(parsed, ProtobufSchema)
    return parsed


def assert_round_trips(schema: ProtobufSchema, references: dict[str, Any] | None = None) -> None:
    """The printed text (types by short and by full names) compiles to the same descriptor,
    custom options included, and the serialized form parses to that text."""
    expected = comparable(schema.descriptor, schema.compiled[:-1])
    for qualified in (False, True):
        printed = proto_text(schema.descriptor, schema.compiled[:-1], qualified)
        again = proto(printed, references)
        assert again.canonical() == schema.canonical(), printed
        assert comparable(again.descriptor, again.compiled[:-1]) == expected, printed
    from_serialized = proto(schema.serialized(), references)
    assert from_serialized.unprintable is None
    assert not is_serialized(from_serialized.text)
    assert from_serialized.canonical() == schema.canonical()


def suite_texts() -> list[Any]:
    """Every string literal of the Protobuf suites that compiles alone (no references)."""
    found = []
    for name in ("test_protobuf.py", "test_registry_karapace_protobuf.py"):
        for node in ast.walk(ast.parse((SUITES / name).read_text())):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            if "message " not in node.value and "enum " not in node.value:
                continue
            try:
                proto(node.value)
            except SchemaError:
                continue  # a template, a fragment, an invalid case, or one with references
            found.append(pytest.param(node.value, id=f"{name}:{node.lineno}"))
    return found


SUITE_TEXTS = suite_texts()


def test_the_suites_give_enough_texts() -> None:
    assert len(SUITE_TEXTS) >= 40


@pytest.mark.parametrize("text", SUITE_TEXTS)
def test_the_suites_texts_round_trip(text: str) -> None:
    assert_round_trips(proto(text))


PROTO2 = r"""
syntax = "proto2";
package p.q;
import "google/protobuf/descriptor.proto";
import public "google/protobuf/timestamp.proto";
option java_package = "com.example";
option optimize_for = SPEED;
message Opt { optional int32 a = 1; repeated string b = 2; }
extend google.protobuf.FieldOptions {
  optional string tag = 50001; optional Opt o = 50002; repeated int32 r = 50003;
}
extend google.protobuf.MessageOptions { optional bool flag = 50010; }
message M {
  option (flag) = true;
  message X { optional int32 x = 1; }
  optional string foo_bar = 1 [json_name = "X", (tag) = "hi", (o) = {a: 3 b: "x" b: "y"},
                               (r) = 1, (r) = 2, default = "a\nb\"c"];
  optional group G = 2 { optional int32 a = 1; required string b = 2; }
  map<string, X> m = 3;
  message Y {}
  required int64 n = 4 [default = -5];
  optional double d = 5 [default = inf];
  optional float f = 6 [default = -1.5e10];
  optional bytes by = 7 [default = "\001\377x"];
  optional E e = 8 [default = B];
  repeated int32 packed = 9 [packed = true, deprecated = true];
  oneof choice { string s = 10; int32 i = 11; group H = 12 { optional int32 z = 1; } }
  optional google.protobuf.Timestamp at = 13;
  optional bool yes = 14 [default = true];
  optional string accented = 15 [default = "é"];
  optional double not_a_number = 16 [default = nan];
  extensions 100 to 199;
  extensions 1000 to max;
  reserved 20 to 25, 30;
  reserved "old", "older";
  extend M { optional int32 inner = 101; }
  enum E {
    option allow_alias = true;
    A = 0; B = 1; C = 1 [deprecated = true];
    reserved 5 to 7, 10 to max; reserved "Q";
  }
}
extend M {
  optional int32 e1 = 100;
  repeated string e2 = 102;
  optional group Eg = 150 { optional int32 w = 1; }
}
enum Top { T0 = 0; T_NEG = -1; }
message Set { option message_set_wire_format = true; extensions 4 to max; }
service S {
  option deprecated = true;
  rpc A(M) returns (M);
  rpc B(stream M) returns (stream .p.q.M) { option idempotency_level = NO_SIDE_EFFECTS; }
  rpc C(M) returns (stream M) {}
}
"""
PROTO3 = """
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/any.proto";
import "google/protobuf/struct.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/empty.proto";
import "google/type/money.proto";
import "google/type/datetime.proto";
option java_multiple_files = true;
option go_package = "example.com/shop;shop";
message Order {
  string id = 1;
  optional int64 cents = 2;
  repeated string items = 3;
  google.protobuf.Timestamp at = 4;
  map<string, int32> counts = 5;
  oneof paid { string card = 6; bool cash = 7; }
  Status status = 8;
  bytes note = 9 [json_name = "remark"];
  Line line = 10;
  message Line { string sku = 1; map<int64, Line> sub = 2; }
  repeated int32 nums = 11 [packed = false];
  google.type.Money price = 12;
  optional Status again = 13;
  google.protobuf.Any any = 14;
  map<string, google.protobuf.Value> values = 15;
  google.protobuf.StringValue wrapped = 16;
  google.type.DateTime when = 17;
  reserved 100, 200 to max;
  reserved "gone";
}
enum Status { option deprecated = true; NEW = 0; SHIPPED = 1 [deprecated = true]; }
message Other { int32 n = 1; Order.Line l = 2; }
service Shop { rpc Ping(google.protobuf.Empty) returns (google.protobuf.Empty); }
"""
SHADOWED = """
syntax = "proto3";
package shop;
message Order { message Line { string s = 1; } }
message Outer {
  message Order { int32 q = 1; }
  shop.Order.Line x = 1;
  Order y = 2;
  .shop.Order z = 3;
}
message Kind { Kind Kind = 1; }
message M {
  message Kind { int32 x = 1; }
  Kind k = 1;
  message N { Kind k = 1; M.Kind k2 = 2; message Kind { string s = 1; } }
}
"""
NESTING = """
syntax = "proto2";
package g;
message Outer {
  message A {}
  optional group One = 1 { optional int32 x = 1; }
  message B {}
  map<string, string> m = 2;
  message C {}
  oneof o { group Two = 3 { optional int32 y = 1; } string s = 4; }
  optional int32 trailing_ = 5;
  optional int32 _leading = 6;
  optional int32 camelCase = 7;
  optional Outer self = 8;
  repeated Outer kids = 9;
}
message Empty {}
"""


@pytest.mark.parametrize(
    "text", [PROTO2, PROTO3, SHADOWED, NESTING], ids=["proto2", "proto3", "names", "nesting"]
)
def test_every_feature_round_trips(text: str) -> None:
    assert_round_trips(proto(text))


def google_files() -> list[str]:
    """The .proto files whose generated modules protobuf and googleapis-common-protos ship."""
    found = []
    for package in ("google.protobuf", "google.type", "google.api", "google.rpc"):
        location = importlib.util.find_spec(package)
        assert location is not None and location.submodule_search_locations
        for module in pkgutil.iter_modules(location.submodule_search_locations):
            if module.name.endswith("_pb2"):
                path = package.replace(".", "/") + "/" + module.name.removesuffix("_pb2")
                found.append(f"{path}.proto")
    return sorted(found)


def as_client_registers(name: str, schemas: dict[str, ProtobufSchema]) -> ProtobufSchema:
    """A generated module's descriptor registered as confluent-kafka's serializer registers
    it: serialized, its imports other than the well-known and common types as references."""
    found = schemas.get(name)
    if found is None:
        module = importlib.import_module(name.removesuffix(".proto").replace("/", ".") + "_pb2")
        serialized_pb = module.DESCRIPTOR.serialized_pb
        file = descriptor_pb2.FileDescriptorProto.FromString(serialized_pb)
        references = {
            dependency: as_client_registers(dependency, schemas)
            for dependency in file.dependency
            if not dependency.startswith(("google/protobuf/", "google/type/"))
        }
        found = proto(base64.b64encode(serialized_pb).decode("ascii"), references)
        schemas[name] = found
    return found


EDITIONS = {"google/protobuf/json_options.proto", "google/protobuf/json_enumvalue_options.proto"}


def test_googles_own_files_round_trip() -> None:
    """descriptor.proto (proto2: defaults, extension ranges, reserved, options with message
    values), the well-known types, google/type and google/api (custom options from
    references): each has a .proto text. Files in Protobuf editions are not printed."""
    names = google_files()
    assert len(names) >= 50 and "google/protobuf/descriptor.proto" in names
    schemas: dict[str, ProtobufSchema] = {}
    for name in names:
        schema = as_client_registers(name, schemas)
        if name in EDITIONS:
            assert schema.unprintable is not None and "editions" in schema.unprintable
            continue
        assert schema.unprintable is None, (name, schema.unprintable)
        assert not is_serialized(schema.text)
        module = importlib.import_module(name.removesuffix(".proto").replace("/", ".") + "_pb2")
        generated = descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)
        assert comparable(schema.descriptor, schema.compiled[:-1]) == comparable(
            generated, schema.compiled[:-1]
        ), name


def test_a_name_that_reads_as_a_keyword_is_printed_in_full() -> None:
    """A message named `optional` reads as the label where its short name stands; the text
    with every type by its full name is the one kept."""
    keyword = proto(
        'syntax = "proto3"; message optional { int32 a = 1; } message M { .optional o = 1; }'
    )
    short = proto_text(keyword.descriptor, keyword.compiled[:-1])
    with pytest.raises(SchemaError, match="Expected field name"):
        proto(short)
    stored = proto(keyword.serialized())
    assert "  .optional o = 1;" in stored.text
    assert proto(stored.text).canonical() == keyword.canonical()


def test_a_reference_round_trips_and_its_options_print_by_name() -> None:
    options = proto(
        'syntax = "proto3"; package opts; import "google/protobuf/descriptor.proto";'
        "extend google.protobuf.FieldOptions { string label = 50001; }"
    )
    common = proto(
        'syntax = "proto3"; package c; import "options.proto";'
        'message Money { int64 cents = 1 [(opts.label) = "cents"]; }',
        {"options.proto": options},
    )
    references = {"money.proto": common, "options.proto": options}
    price = proto(
        'syntax = "proto3"; import "money.proto"; import "options.proto";'
        'message Price { c.Money amount = 1 [(opts.label) = "amount"]; }',
        references,
    )
    assert_round_trips(common, {"options.proto": options})
    assert_round_trips(price, references)
    assert '[(opts.label) = "amount"]' in proto(price.serialized(), references).text


def test_the_text_is_laid_out_as_confluents_registry_answers_it() -> None:
    """Confluent's registry and Karapace answer Karapace's serialized `Key`/`Dog` file with
    exactly this text; the other lines show short type names, maps and proto3 optional."""
    order = proto(
        """syntax = "proto3"; package shop; import "google/protobuf/timestamp.proto";
        message Order { optional string id = 1; map<string, int32> counts = 2;
          oneof paid { string card = 3; bool cash = 4; } .shop.Order.Line line = 5;
          google.protobuf.Timestamp at = 6; message Line { string sku = 1; } }
        enum Status { NEW = 0; }"""
    )
    assert proto(order.serialized()).text == (
        'syntax = "proto3";\n'
        "package shop;\n"
        "\n"
        'import "google/protobuf/timestamp.proto";\n'
        "\n"
        "message Order {\n"
        "  optional string id = 1;\n"
        "  map<string, int32> counts = 2;\n"
        "  oneof paid {\n"
        "    string card = 3;\n"
        "    bool cash = 4;\n"
        "  }\n"
        "  Line line = 5;\n"
        "  google.protobuf.Timestamp at = 6;\n"
        "  message Line {\n"
        "    string sku = 1;\n"
        "  }\n"
        "}\n"
        "enum Status {\n"
        "  NEW = 0;\n"
        "}\n"
    )


def serialized(descriptor: str) -> str:
    """A hand-made FileDescriptorProto (in text format), base64 as a client registers it."""
    file = text_format.Parse(descriptor, descriptor_pb2.FileDescriptorProto())
    return base64.b64encode(file.SerializeToString()).decode("ascii")


def field(name: str, number: int, extra: str = "") -> str:
    return f'field {{ name: "{name}" number: {number} label: LABEL_OPTIONAL {extra} }}'


def with_an_undeclared_option() -> str:
    """A field option 50001 = 1 that no file declares (an unknown field of FieldOptions)."""
    file = text_format.Parse(
        f'name: "x.proto" syntax: "proto3" message_type {{ name: "M" '
        f"{field('a', 1, 'type: TYPE_INT32')} }}",
        descriptor_pb2.FileDescriptorProto(),
    )
    file.message_type[0].field[0].options.MergeFromString(b"\x88\xb5\x18\x01")
    return base64.b64encode(file.SerializeToString()).decode("ascii")


UNPRINTABLE = {
    "editions": (
        serialized(
            'name: "x.proto" syntax: "editions" edition: EDITION_2023 message_type {'
            f' name: "M" {field("a", 1, "type: TYPE_INT32")} }}'
        ),
        "syntax 'editions' (Protobuf editions) is not supported",
    ),
    "undeclared custom option": (
        with_an_undeclared_option(),
        "a custom option of FieldOptions is declared by none of its imports",
    ),
    "oneof split": (
        serialized(
            'name: "x.proto" syntax: "proto3" message_type { name: "M"'
            f" {field('a', 1, 'type: TYPE_INT32 oneof_index: 0')}"
            f" {field('b', 2, 'type: TYPE_INT32')}"
            f" {field('c', 3, 'type: TYPE_INT32 oneof_index: 0')}"
            ' oneof_decl { name: "o" } }'
        ),
        "the fields of oneof 0 of M are not declared together",
    ),
    "map entry named otherwise": (
        serialized(
            'name: "x.proto" syntax: "proto3" message_type { name: "M"'
            ' field { name: "m" number: 1 label: LABEL_REPEATED type: TYPE_MESSAGE'
            ' type_name: ".M.Pairs" }'
            ' nested_type { name: "Pairs"'
            f" {field('key', 1, 'type: TYPE_STRING')} {field('value', 2, 'type: TYPE_STRING')}"
            " options { map_entry: true } } }"
        ),
        'it would read back as -    type_name: ".M.Pairs"',
    ),
    "field without a type": (
        serialized(
            f'name: "x.proto" syntax: "proto3" message_type {{ name: "M" {field("a", 1)} }}'
        ),
        "field 'a' has no type",
    ),
}


@pytest.mark.parametrize("case", list(UNPRINTABLE))
def test_a_descriptor_no_text_expresses_is_refused_at_registration(case: str) -> None:
    """Parsed (as a stored one is read) with the reason it has no text; registering it is
    42201 with that reason, never a server error."""
    text, why = UNPRINTABLE[case]
    parsed = proto(text)
    assert parsed.unprintable is not None and why in parsed.unprintable
    assert parsed.text == text, "kept as registered"
    with pytest.raises(SchemaError) as refused:
        registry.register(RegistryState(), "s", "PROTOBUF", text, ())
    assert refused.value.error_code == errors.INVALID_SCHEMA
    assert refused.value.message.startswith(
        "invalid Protobuf schema: the serialized descriptor has no .proto text"
    )
    assert why in refused.value.message


def test_a_descriptor_protobuf_cannot_load_is_invalid() -> None:
    bad_name = serialized(
        f'name: "x.proto" syntax: "proto3" message_type {{ name: "M" '
        f"{field('a b', 1, 'type: TYPE_INT32')} }}"
    )
    with pytest.raises(SchemaError, match="invalid name") as refused:
        proto(bad_name)
    assert refused.value.error_code == errors.INVALID_SCHEMA


def test_a_descriptor_with_a_name_not_utf8_is_invalid() -> None:
    """protobuf reads a proto2 string that is not UTF-8 as bytes: an import named so was a
    server error (a TypeError where the import's name was looked at)."""
    file = b"\x0a\x07x.proto" + b"\x1a\x01\xff"  # name "x.proto", dependency b"\xff"
    with pytest.raises(SchemaError, match="dependency is not UTF-8") as refused:
        proto(base64.b64encode(file).decode("ascii"))
    assert refused.value.error_code == errors.INVALID_SCHEMA


def test_a_default_json_name_is_the_same_schema_as_none() -> None:
    default = 'type: TYPE_INT32 json_name: "aB"'
    explicit = serialized(
        f'name: "x.proto" syntax: "proto3" message_type {{ name: "M" {field("a_b", 1, default)} }}'
    )
    parsed = proto(explicit)
    assert "json_name" not in parsed.text
    plain = proto('syntax = "proto3"; message M { int32 a_b = 1; }')
    assert parsed.canonical() == plain.canonical()


def apply(state: RegistryState, decision: registry.Decision[Any]) -> Any:
    for record in decision.records:
        state.apply(record)
    return decision.answer


ORDER = 'syntax = "proto3";\npackage shop;\nmessage Order {\n  string id = 1; // the key\n}\n'


def test_registering_the_serialized_form_stores_its_text_and_keeps_the_id() -> None:
    state = RegistryState()
    text_id = apply(state, registry.register(state, "a", "PROTOBUF", ORDER, ())).schema_id
    descriptor = proto(ORDER).serialized()
    again = registry.register(state, "b", "PROTOBUF", descriptor, ())
    assert again.answer.schema_id == text_id
    stored = again.records[0]
    assert isinstance(stored, SchemaVersion) and not is_serialized(stored.text)
    assert proto(stored.text).canonical() == proto(ORDER).canonical()
    apply(state, again)
    assert state.text_as(text_id, None) == ORDER, "the id keeps the text it was first given"
    assert registry.register(state, "a", "PROTOBUF", descriptor, ()).records == []

    fresh = RegistryState()
    first = apply(fresh, registry.register(fresh, "c", "PROTOBUF", descriptor, ()))
    printed = fresh.text_as(first.schema_id, None)
    assert printed == fresh.schema(first.schema_id).text and "message Order" in printed
    answered = proto(fresh.text_as(first.schema_id, "serialized"))
    assert answered.canonical() == proto(ORDER).canonical()


def test_a_reference_stored_serialized_is_imported_as_its_text() -> None:
    """A reference registered in its serialized form is stored as .proto text, so a .proto
    text importing it compiles (protoc reads the reference's stored text)."""
    state = RegistryState()
    money = proto('syntax = "proto3"; package c; message Money { int64 cents = 1; }')
    apply(state, registry.register(state, "money", "PROTOBUF", money.serialized(), ()))
    references = (Reference("money.proto", "money", 1),)
    price = 'syntax = "proto3"; import "money.proto"; message Price { c.Money amount = 1; }'
    assert apply(state, registry.register(state, "price", "PROTOBUF", price, references))


def test_a_descriptor_stored_serialized_before_is_answered_as_text() -> None:
    """A version whose record holds the base64 (as stored before descriptors were stored as
    .proto text) reads as its .proto text; format=serialized as base64. One no text
    expresses reads as stored."""
    state = RegistryState()
    descriptor = proto(ORDER).serialized()
    old = SchemaVersion("old", 1, 7, "PROTOBUF", descriptor, (), deleted=False)
    state.apply(old)
    assert "message Order" in state.text_as(7, None)
    assert state.version_text(old) == state.text_as(7, None)
    assert is_serialized(state.text_as(7, "serialized"))
    text, _ = UNPRINTABLE["editions"]
    odd = SchemaVersion("odd", 1, 8, "PROTOBUF", text, (), deleted=False)
    state.apply(odd)
    assert state.text_as(8, None) == text and state.version_text(odd) == text
