"""Protobuf versions to Arrow columns, and Protobuf payloads read into them, without Spark.

Payloads are written by protobuf's own message classes, compiled from the same texts as the
registry compiles them (schemas.types.protobuf), behind Confluent's message indexes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from google.protobuf import message

from schemas import wire
from schemas.types.protobuf import ProtobufSchema
from spark_ingest import registry
from spark_ingest.errors import IngestError
from spark_ingest.typed_values import ValueColumns, Version

HEAD = (
    'syntax = "proto3";\npackage shop;\nimport "google/protobuf/timestamp.proto";\n'
    'import "google/protobuf/wrappers.proto";\n'
)


def proto(body: str, *after: str) -> str:
    """A .proto text whose first message is R with `body`, then the other declarations."""
    return HEAD + f"message R {{ {body} }}\n" + "\n".join(after)


def version(text: str, n: int = 1, refs: tuple[tuple[str, str], ...] = ()) -> Version:
    return Version(
        "t-value",
        n,
        300 + n,
        text,
        tuple(t for _, t in refs),
        "PROTOBUF",
        tuple(name for name, _ in refs),
    )


def columns(*texts: str) -> ValueColumns:
    return ValueColumns("t", [version(t, n) for n, t in enumerate(texts, 1)], frozenset({"offset"}))


def message_class(text: str, references: dict[str, ProtobufSchema] | None = None) -> Any:
    return ProtobufSchema(text, references or {}).message_class([0])


def framed(schema_id: int, value: message.Message, indexes: bytes = b"\x00") -> bytes:
    return wire.frame(schema_id, indexes + value.SerializeToString())


def rows(typed: ValueColumns, values: Sequence[bytes | None]) -> list[dict[str, Any]]:
    table = typed.add_to(pa.table({"value_bytes": pa.array(values, pa.binary())}))
    found: list[dict[str, Any]] = table.drop_columns(["value_bytes"]).to_pylist()
    return found


@pytest.mark.parametrize(
    ("declared", "arrow"),
    [
        ("bool f = 1;", pa.bool_()),
        ("int32 f = 1;", pa.int32()),
        ("sint32 f = 1;", pa.int32()),
        ("sfixed32 f = 1;", pa.int32()),
        ("uint32 f = 1;", pa.int64()),
        ("fixed32 f = 1;", pa.int64()),
        ("int64 f = 1;", pa.int64()),
        ("sint64 f = 1;", pa.int64()),
        ("sfixed64 f = 1;", pa.int64()),
        ("uint64 f = 1;", pa.decimal128(20, 0)),
        ("fixed64 f = 1;", pa.decimal128(20, 0)),
        ("float f = 1;", pa.float32()),
        ("double f = 1;", pa.float64()),
        ("string f = 1;", pa.string()),
        ("bytes f = 1;", pa.binary()),
        ("optional string f = 1;", pa.string()),
        ("E f = 1; enum E { A = 0; }", pa.string()),
        ("In f = 1; message In { int32 x = 1; }", pa.struct([("x", pa.int32())])),
        ("repeated sint64 f = 1;", pa.list_(pa.int64())),
        ("map<string, double> f = 1;", pa.map_(pa.string(), pa.float64())),
        ("map<uint32, bytes> f = 1;", pa.map_(pa.int64(), pa.binary())),
        ("google.protobuf.Timestamp f = 1;", pa.timestamp("us", tz="UTC")),
        ("repeated google.protobuf.Timestamp f = 1;", pa.list_(pa.timestamp("us", tz="UTC"))),
        ("google.protobuf.Int64Value f = 1;", pa.int64()),
        ("google.protobuf.UInt32Value f = 1;", pa.int64()),
        ("google.protobuf.StringValue f = 1;", pa.string()),
        ("google.protobuf.BytesValue f = 1;", pa.binary()),
        ("google.protobuf.BoolValue f = 1;", pa.bool_()),
        ("google.protobuf.FloatValue f = 1;", pa.float32()),
    ],
)
def test_each_protobuf_type_has_its_column_type(declared: str, arrow: pa.DataType) -> None:
    assert columns(proto(declared)).type == pa.struct([("f", arrow)])


def test_fields_become_columns_in_their_order_oneof_members_each_their_own() -> None:
    typed = columns(
        proto(
            "int64 id = 3; oneof pay { string card = 1; In iban = 4; } string offset = 2;",
            "message In { string n = 1; }",  # not first: a type, not the columns
        )
    )
    assert typed.type == pa.struct(
        [
            ("id", pa.int64()),
            ("card", pa.string()),
            ("iban", pa.struct([("n", pa.string())])),
            ("offset", pa.string()),
        ]
    )
    assert typed.names == ["id", "card", "iban", "value_offset"]


SHOP = proto(
    """
    int32 n = 1; uint64 big = 2; string name = 3; bool ok = 4; double d = 5; bytes raw = 6;
    Status status = 7; repeated Status history = 8; Line line = 9; repeated Line lines = 10;
    map<string, int64> counts = 11; map<int32, Line> by_no = 12;
    google.protobuf.Timestamp at = 13; google.protobuf.Int64Value limit = 14;
    optional int32 qty = 15; oneof pay { string card = 16; Line voucher = 17; }
    fixed32 small = 18; sint32 delta = 19;
    """,
    "enum Status { NEW = 0; PAID = 1; }",
    "message Line { string sku = 1; float kg = 2; }",
)


def test_values_read_into_their_columns() -> None:
    shop = message_class(SHOP)
    full = shop(
        n=-7, big=2**64 - 1, name="a", ok=True, d=0.5, raw=b"\x00\xff", status=1,
        history=[0, 1, 5], line={"sku": "s", "kg": 1.5}, lines=[{"sku": "x"}, {}],
        counts={"k": 2**40}, by_no={3: {"sku": "t"}}, limit={"value": 0}, qty=0, card="c",
        small=2**32 - 1, delta=-2,
    )  # fmt: skip
    full.at.FromDatetime(dt.datetime(2026, 11, 27, 10, 0, 0, 123456))
    assert rows(columns(SHOP), [framed(301, full)])[0] == {
        "value_schema_id": 301,
        "n": -7,
        "big": Decimal(2**64 - 1),
        "name": "a",
        "ok": True,
        "d": 0.5,
        "raw": b"\x00\xff",
        "status": "PAID",
        "history": ["NEW", "PAID", "5"],  # a number the enum does not declare: as text
        "line": {"sku": "s", "kg": 1.5},
        "lines": [{"sku": "x", "kg": 0.0}, {"sku": "", "kg": 0.0}],
        "counts": [("k", 2**40)],
        "by_no": [(3, {"sku": "t", "kg": 0.0})],
        "at": dt.datetime(2026, 11, 27, 10, 0, 0, 123456, tzinfo=dt.UTC),
        "limit": 0,  # a wrapper that is set, to its default: not null
        "qty": 0,  # proto3 optional, set to 0
        "card": "c",
        "voucher": None,  # the other member of its oneof
        "small": 2**32 - 1,
        "delta": -2,
    }


def test_absent_fields_read_as_protobuf_reads_them_or_null_where_presence_is_tracked() -> None:
    """Proto3 scalars (and enums) read as their defaults; messages, wrappers, optional fields
    and oneof members as null; repeated fields and maps as empty."""
    assert rows(columns(SHOP), [framed(301, message_class(SHOP)())])[0] == {
        "value_schema_id": 301,
        "n": 0, "big": Decimal(0), "name": "", "ok": False, "d": 0.0, "raw": b"",
        "status": "NEW", "history": [], "line": None, "lines": [], "counts": [], "by_no": [],
        "at": None, "limit": None, "qty": None, "card": None, "voucher": None, "small": 0,
        "delta": 0,
    }  # fmt: skip


def test_proto2_optional_fields_absent_are_null_and_groups_are_structs() -> None:
    text = (
        'syntax = "proto2";\nmessage R { optional int32 a = 1 [default = 5]; '
        "required string b = 2; optional group G = 3 { optional int32 c = 4; } }\n"
    )
    typed = columns(text)
    assert typed.type == pa.struct(
        [("a", pa.int32()), ("b", pa.string()), ("g", pa.struct([("c", pa.int32())]))]
    )
    cls = message_class(text)
    assert rows(typed, [framed(301, cls(b="x")), framed(301, cls(a=1, b="y", g={"c": 2}))]) == [
        {"value_schema_id": 301, "a": None, "b": "x", "g": None},
        {"value_schema_id": 301, "a": 1, "b": "y", "g": {"c": 2}},
    ]


def test_a_field_added_and_one_widened_across_versions() -> None:
    v1 = proto("int32 qty = 1; string sku = 2; map<int32, int32> m = 3;")
    v2 = proto("int64 qty = 1; string sku = 2; map<int64, int32> m = 3; string note = 4;")
    typed = columns(v1, v2)
    assert typed.type == pa.struct(
        [
            ("qty", pa.int64()),
            ("sku", pa.string()),
            ("m", pa.map_(pa.int64(), pa.int32())),
            ("note", pa.string()),
        ]
    )
    old, new = message_class(v1), message_class(v2)
    values = [framed(301, old(qty=2, sku="a")), framed(302, new(qty=2**40, m={2**40: 1}))]
    assert rows(typed, values) == [
        {"value_schema_id": 301, "qty": 2, "sku": "a", "m": [], "note": None},  # v1 has no note
        {"value_schema_id": 302, "qty": 2**40, "sku": "", "m": [(2**40, 1)], "note": ""},
    ]


def test_undecodable_values_are_null_and_the_others_kept() -> None:
    text = proto("int32 a = 1; string s = 2;", "message Other { string x = 1; }")
    typed = columns(text)
    good = framed(301, message_class(text)(a=5, s="ok"))
    other = ProtobufSchema(text, {}).message_class([1])(x="o")
    bad = [
        None,
        good[:-2],  # truncated inside a field
        wire.frame(301, b"\x00\x0a\xff"),  # a length past the end
        wire.frame(999, good[5:]),  # an id the subject does not have
        framed(301, other, wire.message_indexes([1])),  # message 1: not the columns' message
        wire.frame(301, b"\x05"),  # message indexes cut short
        wire.frame(301, b""),  # no message indexes at all
        b"\x00\x00\x00",  # shorter than the header
    ]
    assert rows(typed, [good, framed(301, message_class(text)(), b"\x02\x00"), *bad]) == [
        {"value_schema_id": 301, "a": 5, "s": "ok"},
        {"value_schema_id": 301, "a": 0, "s": ""},  # [0] written in full: the first message
        *[{"value_schema_id": None, "a": None, "s": None}] * len(bad),
    ]


def test_references_are_compiled_under_their_import_paths() -> None:
    """Dependencies first, as the registry lists them: a reference that imports another, as
    .proto texts and in the serialized form confluent-kafka's serializers register."""
    money = 'syntax = "proto3";\npackage common;\nmessage Money { int64 cents = 1; }\n'
    line = (
        'syntax = "proto3";\npackage shop;\nimport "common/money.proto";\n'
        "message Line { string sku = 1; common.Money price = 2; }\n"
    )
    order = (
        'syntax = "proto3";\npackage shop;\nimport "shop/line.proto";\n'
        "message Order { repeated Line lines = 1; }\n"
    )
    money_schema = ProtobufSchema(money, {})
    line_schema = ProtobufSchema(line, {"common/money.proto": money_schema})
    serialized = line_schema.serialized()
    refs = (("common/money.proto", money), ("shop/line.proto", line))
    as_text = version(order, 1, refs)
    as_serialized = version(
        ProtobufSchema(order, {"shop/line.proto": line_schema}).serialized(),
        2,
        (("common/money.proto", money_schema.serialized()), ("shop/line.proto", serialized)),
    )
    typed = ValueColumns("t", [as_text, as_serialized], frozenset())
    line_type = pa.struct([("sku", pa.string()), ("price", pa.struct([("cents", pa.int64())]))])
    assert typed.type == pa.struct([("lines", pa.list_(line_type))])
    cls = message_class(order, {"shop/line.proto": line_schema})
    value = cls(lines=[{"sku": "s", "price": {"cents": 250}}])
    assert rows(typed, [framed(301, value), framed(302, value)]) == [
        {"value_schema_id": n, "lines": [{"sku": "s", "price": {"cents": 250}}]} for n in (301, 302)
    ]
    with pytest.raises(IngestError, match="without their import paths"):
        ValueColumns("t", [Version("t-value", 1, 1, order, (line,), "PROTOBUF")], frozenset())
    with pytest.raises(IngestError, match=r"not a Protobuf schema.*shop/line\.proto"):
        ValueColumns("t", [version(order)], frozenset())


@pytest.mark.parametrize(
    ("texts", "message"),
    [
        ([proto("R next = 1;")], r"field\.next: recursive message shop\.R"),
        (
            [proto("A a = 1;", "message A { repeated B b = 1; }", "message B { A a = 1; }")],
            r"field\.a\.b\[\]\.a: recursive message shop\.A",
        ),
        ([proto("map<string, R> children = 1;")], r"field\.children\{\}: recursive message"),
        ([proto("", "")], "message shop.R has no fields"),
        ([proto("In in = 1; message In {}")], r"field\.in: message shop\.R\.In has no fields"),
        ([HEAD + "enum E { A = 0; }"], "declares no message"),
        ([proto("int32 a = 1")], "not a Protobuf schema"),
        ([proto("int64 a = 1;"), proto("uint64 a = 1;")], "field.a is int64 in one version and"),
        (
            [proto("int32 a = 1;"), proto("E a = 1;", "enum E { Z = 0; }")],
            "field.a is int32 in one version and string in another",
        ),
    ],
)
def test_schemas_that_give_no_columns_are_refused(texts: list[str], message: str) -> None:
    with pytest.raises(IngestError, match=message):
        columns(*texts)


def test_the_plan_keeps_the_import_paths_and_reads_plans_stored_without_them() -> None:
    found = {"t": [version(SHOP, 1, (("a.proto", 'syntax = "proto3";'),))]}
    stored = registry.to_json(found)
    assert registry.from_json(stored) == found
    older = stored.replace(', "reference_names": ["a.proto"]', "")
    assert "reference_names" not in older
    assert registry.from_json(older)["t"][0].reference_names == ()
