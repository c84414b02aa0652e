"""Protobuf schemas to Arrow columns, and the reader of Protobuf payloads (upb, compiled).

A version's schema is compiled as the registry compiles it (schemas.types.protobuf: protoc in
process, its references under their import paths), and the fields of its *first* message
become columns: the message Confluent's serializers write with the index path [0]. A value
whose index path names another message is undecodable.

Scalars map to the Arrow type that holds all their values: int32, sint32, sfixed32 → int32;
uint32, fixed32, int64, sint64, sfixed64 → int64; uint64, fixed64 → decimal(20, 0); float,
double, bool, string, bytes → float, double, bool, string, binary. An enum → string, the
value's name (a number its enum does not declare: that number as text, as protobuf's JSON
mapping writes it). A message → struct, repeated → list, map<K, V> → map;
google.protobuf.Timestamp → timestamp (us, UTC) and the wrappers (google.protobuf.Int64Value
...) → their scalar. A field with presence (a message, a oneof member, proto3 `optional`,
proto2 `optional`) that is absent is null; a field without (a proto3 scalar) reads as its
default, as protobuf reads it; a repeated field or a map absent is empty. A recursive message,
or a message without fields, has no column: the version is refused, naming the field.

Values are parsed by the message class (upb) and converted by reading the fields the
descriptor lists, with one converter per message type built once (no generic walk, no JSON).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from schemas import wire
from schemas.errors import SchemaError
from schemas.types import InvalidValue
from schemas.types.protobuf import ProtobufSchema, imports
from spark_ingest.errors import IngestError

if TYPE_CHECKING:
    from spark_ingest.typed_values import Reader, Version

_FD = FieldDescriptor
UINT64 = pa.decimal128(20, 0)  # 0 .. 2**64 - 1: no signed 64-bit integer holds them all
_SCALARS: dict[int, pa.DataType] = {
    _FD.TYPE_BOOL: pa.bool_(),
    _FD.TYPE_INT32: pa.int32(),
    _FD.TYPE_SINT32: pa.int32(),
    _FD.TYPE_SFIXED32: pa.int32(),
    _FD.TYPE_UINT32: pa.int64(),
    _FD.TYPE_FIXED32: pa.int64(),
    _FD.TYPE_INT64: pa.int64(),
    _FD.TYPE_SINT64: pa.int64(),
    _FD.TYPE_SFIXED64: pa.int64(),
    _FD.TYPE_UINT64: UINT64,
    _FD.TYPE_FIXED64: UINT64,
    _FD.TYPE_FLOAT: pa.float32(),
    _FD.TYPE_DOUBLE: pa.float64(),
    _FD.TYPE_STRING: pa.string(),
    _FD.TYPE_BYTES: pa.binary(),
}
_MESSAGES = frozenset((_FD.TYPE_MESSAGE, _FD.TYPE_GROUP))
TIMESTAMP = "google.protobuf.Timestamp"
WRAPPERS = frozenset(
    f"google.protobuf.{name}Value"
    for name in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes")
)

Convert = Callable[[Any], Any]  # one value as protobuf gives it → as its Arrow column takes it


def _timestamp(value: Any) -> int:
    """Microseconds since the epoch (protobuf's nanoseconds truncated)."""
    return int(value.seconds) * 1_000_000 + int(value.nanos) // 1000


def _wrapped(value: Any) -> Any:
    return value.value


def _value(field: FieldDescriptor, where: str, seen: frozenset[str]) -> tuple[Any, Convert | None]:
    """The Arrow type of one value of the field's type (an element, if it is repeated), and
    its conversion (None: protobuf's value is the column's)."""
    if field.type in _MESSAGES:
        return _message(field.message_type, where, seen)
    if field.type == _FD.TYPE_ENUM:
        names = {v.number: v.name for v in field.enum_type.values}

        def enum_name(number: int) -> str:
            return names.get(number) or str(number)

        return pa.string(), enum_name
    return _SCALARS[field.type], None


def _message(descriptor: Descriptor, where: str, seen: frozenset[str]) -> tuple[Any, Convert]:
    """The Arrow type of a message-typed value, and its conversion."""
    name = descriptor.full_name
    if name == TIMESTAMP:
        return pa.timestamp("us", tz="UTC"), _timestamp
    if name in WRAPPERS:
        return _SCALARS[descriptor.fields_by_name["value"].type], _wrapped
    if name in seen:
        raise IngestError(f"{where}: recursive message {name} has no typed column")
    fields, convert = struct_of(descriptor, where, seen | {name})
    return pa.struct(fields), convert


def _present(name: str, convert: Convert | None) -> Convert:
    """A field with presence: null when the message lacks it."""
    if convert is None:
        return lambda m: getattr(m, name) if m.HasField(name) else None
    return lambda m: convert(getattr(m, name)) if m.HasField(name) else None


def _converted(name: str, convert: Convert) -> Convert:
    return lambda m: convert(getattr(m, name))


def _repeated(name: str, convert: Convert | None) -> Convert:
    if convert is None:
        return lambda m: list(getattr(m, name))
    return lambda m: [convert(v) for v in getattr(m, name)]


def _map(name: str, convert: Convert | None) -> Convert:
    if convert is None:
        return lambda m: dict(getattr(m, name))
    return lambda m: {k: convert(v) for k, v in getattr(m, name).items()}


def struct_of(
    descriptor: Descriptor, where: str, seen: frozenset[str]
) -> tuple[list[pa.Field], Convert]:
    """A message's fields as Arrow fields, and the conversion of a message to its row (a dict
    by field name). `seen`: the messages it is nested in, which it may not contain again."""
    fields: list[pa.Field] = []
    plain: list[str] = []  # read as protobuf gives them
    special: list[tuple[str, Convert]] = []
    for field in descriptor.fields:
        name = field.name
        at = f"{where}.{name}"
        entry = field.message_type if field.type == _FD.TYPE_MESSAGE else None
        if field.is_repeated and entry is not None and entry.GetOptions().map_entry:
            key_type, _ = _value(entry.fields_by_name["key"], f"{at}{{key}}", seen)
            item_type, convert = _value(entry.fields_by_name["value"], f"{at}{{}}", seen)
            fields.append(pa.field(name, pa.map_(key_type, item_type)))
            special.append((name, _map(name, convert)))
            continue
        kind, convert = _value(field, f"{at}[]" if field.is_repeated else at, seen)
        fields.append(pa.field(name, pa.list_(kind) if field.is_repeated else kind))
        if field.is_repeated:
            special.append((name, _repeated(name, convert)))
        elif field.has_presence:
            special.append((name, _present(name, convert)))
        elif convert is not None:
            special.append((name, _converted(name, convert)))
        else:
            plain.append(name)
    if not fields:
        raise IngestError(f"{where}: message {descriptor.full_name} has no fields, so no columns")

    def convert_message(message: Any) -> dict[str, Any]:
        row = {name: getattr(message, name) for name in plain}
        for name, convert in special:
            row[name] = convert(message)
        return row

    return fields, convert_message


def compiled(version: Version) -> ProtobufSchema:
    """The version's schema compiled with its references, each under its import path and
    compiled with the earlier ones it imports."""
    if len(version.reference_names) != len(version.references):
        raise IngestError(f"{version.where()}: its references come without their import paths")
    references: dict[str, ProtobufSchema] = {}
    try:
        for name, text in zip(version.reference_names, version.references, strict=True):
            if name not in references:  # a reference two others import is listed twice
                imported = {i: references[i] for i in imports(text) if i in references}
                references[name] = ProtobufSchema(text, imported)
        return ProtobufSchema(version.text, references)
    except SchemaError as exc:
        raise IngestError(f"{version.where()}: not a Protobuf schema ({exc.message})") from exc


def columns_of(version: Version) -> tuple[list[pa.Field], Reader]:
    """The fields of the version's first message as Arrow fields, and the reader of its
    payloads (message indexes, then the message)."""
    schema = compiled(version)
    try:
        message_class = schema.message_class([0])
    except InvalidValue as exc:
        raise IngestError(f"{version.where()} declares no message to make columns of") from exc
    descriptor = message_class.DESCRIPTOR
    where = f"{version.where()}: field"
    fields, convert = struct_of(descriptor, where, frozenset({descriptor.full_name}))
    parse = message_class.FromString

    def read(payload: bytes) -> Any:
        if payload[:1] == b"\x00":  # the first message, as the serializers write it
            return convert(parse(payload[1:]))
        indexes, body = wire.read_message_indexes(payload)
        if indexes != [0]:
            raise InvalidValue(f"message index {indexes}: the columns are the first message's")
        return convert(parse(body))

    return fields, read
