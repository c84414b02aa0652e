"""Values decoded for readers: written by confluent-kafka's AvroSerializer, JSONSerializer and
ProtobufSerializer (against its mock registry, the same schemas registered in our view under
the ids it gave), and every way a value can fail to decode, which never raises."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from confluent_kafka.schema_registry._sync.mock_schema_registry_client import (
    MockSchemaRegistryClient,
)
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from schemas import wire
from schemas.decoding import Decoded, Undecoded, ValueDecoder
from schemas.records import SchemaVersion
from schemas.state import RegistryState
from schemas.types import Reference, SchemaType, parse
from schemas.types.protobuf import ProtobufSchema

USER = {
    "type": "record",
    "name": "User",
    "namespace": "example",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "age", "type": "int"},
        {"name": "avatar", "type": ["null", "bytes"], "default": None},
    ],
}
PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name"],
}
ORDER = 'syntax = "proto3";\npackage shop;\nmessage Order { string id = 1; int64 cents = 2; }\n'
CONTEXT = SerializationContext("t", MessageField.VALUE)


def register(
    state: RegistryState,
    schema_id: int,
    schema_type: SchemaType,
    text: str,
    subject: str = "t-value",
    references: tuple[Reference, ...] = (),
) -> None:
    version = len(state.subjects.get(subject, {})) + 1
    state.apply(
        SchemaVersion(subject, version, schema_id, schema_type, text, references, deleted=False)
    )


def id_of(framed: bytes) -> int:
    return wire.unframe(framed)[0]


@pytest.fixture
def client() -> MockSchemaRegistryClient:
    return MockSchemaRegistryClient({"url": "mock://decoding"})


def test_values_of_the_three_serializers_decode(client: MockSchemaRegistryClient) -> None:
    state = RegistryState()
    avro_text, json_text = json.dumps(USER), json.dumps(PERSON)
    user = {"name": "Ada", "age": 36, "avatar": b"\x00\xff"}
    avro_value = AvroSerializer(client, avro_text)(user, CONTEXT)
    json_value = JSONSerializer(json_text, client)({"name": "Bo", "age": 7}, CONTEXT)
    order = parse("PROTOBUF", ORDER, {})
    assert isinstance(order, ProtobufSchema)
    native = order._class([0])(id="o1", cents=1250)
    proto_value = ProtobufSerializer(order._class([0]), client, {"use.deprecated.format": False})(
        native, CONTEXT
    )
    assert avro_value and json_value and proto_value
    register(state, id_of(avro_value), "AVRO", avro_text, "users-value")
    register(state, id_of(json_value), "JSON", json_text, "people-value")
    register(state, id_of(proto_value), "PROTOBUF", ORDER, "orders-value")
    decoder = ValueDecoder(lambda: state)
    assert decoded(decoder, avro_value) == (
        id_of(avro_value),
        {"name": "Ada", "age": 36, "avatar": "\x00\xff"},  # Avro's JSON: bytes as code points
    )
    assert decoded(decoder, json_value) == (id_of(json_value), {"name": "Bo", "age": 7})
    assert decoded(decoder, proto_value) == (
        id_of(proto_value),
        {"id": "o1", "cents": "1250"},  # protobuf's JSON mapping: an int64 as a string
    )


def decoded(decoder: ValueDecoder, value: bytes) -> tuple[int, Any]:
    got = decoder.decode(value)
    assert isinstance(got, Decoded), got
    return got.schema_id, orjson.loads(got.json)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"", "not in the wire format: 0 bytes is shorter"),
        (b"\x00\x00\x00", "not in the wire format: 3 bytes"),
        (b'{"name": "x"}', "not in the wire format: unknown magic byte 123"),
        (b"\x01\x00\x00\x00\x01\x02", "not in the wire format: unknown magic byte 1"),
        (wire.frame(99, b"\x02"), "schema id 99 is not registered"),
        (wire.frame(1, b""), "not a value of schema id 1"),  # truncated Avro
        (wire.frame(1, b"\x06Ada\x48\x00junk"), "not a value of schema id 1: 4 bytes left over"),
        (wire.frame(2, b"{not json"), "not a value of schema id 2: payload is not JSON"),
        (wire.frame(2, b'{"age": 3}'), "not a value of schema id 2"),  # name is required
        (wire.frame(3, b"\x05"), "not a value of schema id 3"),  # message indexes truncated
        (wire.frame(3, b"\x02\x08"), "not a value of schema id 3"),  # no message at index 4
        (wire.frame(3, b"\x00\x0a\xff"), "not a value of schema id 3"),  # a field cut short
        (wire.frame(4, b'{"n": 123456789012345678901234567890}'), "schema id 4's value is not"),
    ],
)
def test_bad_values_say_why_and_never_raise(value: bytes, reason: str) -> None:
    state = RegistryState()
    register(state, 1, "AVRO", json.dumps(USER))
    register(state, 2, "JSON", json.dumps(PERSON))
    register(state, 3, "PROTOBUF", ORDER)
    register(state, 4, "JSON", '{"type": "object"}')
    got = ValueDecoder(lambda: state).decode(value)
    assert isinstance(got, Undecoded)
    assert got.reason.startswith(reason), got.reason


def test_a_library_failing_undocumented_is_said_so() -> None:
    state = RegistryState()
    text = (
        'syntax = "proto3"; import "google/protobuf/any.proto"; '
        "message M { google.protobuf.Any a = 1; }"
    )
    register(state, 5, "PROTOBUF", text)
    parsed = parse("PROTOBUF", text, {})
    assert isinstance(parsed, ProtobufSchema)
    message = parsed._class([0])()
    message.a.type_url = "type.googleapis.com/nowhere.Thing"  # a type the schema does not hold
    message.a.value = b"\x08\x01"
    got = ValueDecoder(lambda: state).decode(wire.frame(5, b"\x00" + message.SerializeToString()))
    assert isinstance(got, Undecoded) and got.schema_id == 5
    assert got.reason.startswith("schema id 5 cannot decode this value: Can not find message")


def test_an_unreadable_schema_is_parsed_once_and_said_so() -> None:
    state = RegistryState()
    register(state, 1, "AVRO", '{"type": "nonsense"}')
    parses = 0
    parsed = state.parsed

    def counted(schema_id: int) -> Any:
        nonlocal parses
        parses += 1
        return parsed(schema_id)

    state.parsed = counted  # type: ignore[method-assign]
    decoder = ValueDecoder(lambda: state)
    for _ in range(3):
        got = decoder.decode(wire.frame(1, b"\x02"))
        assert isinstance(got, Undecoded) and got.reason.startswith("schema id 1 cannot be read")
    assert parses == 1
    register(state, 2, "AVRO", '"int"', "other")  # the view changed: tried again
    decoder.decode(wire.frame(1, b"\x02"))
    assert parses == 2


async def test_ids_newer_than_the_view_wait_for_it_once() -> None:
    stale, current = RegistryState(), RegistryState()
    register(stale, 1, "AVRO", '"int"')
    register(current, 1, "AVRO", '"int"')
    register(current, 2, "AVRO", '"string"')
    views = [stale]
    syncs = 0

    async def synced() -> RegistryState:
        nonlocal syncs
        syncs += 1
        views.append(current)
        return current

    decoder = ValueDecoder(lambda: views[-1], synced)
    got = await decoder.decode_all([wire.frame(1, b"\x02"), None, wire.frame(2, b"\x02a")])
    assert got == [Decoded(1, b"1"), None, Decoded(2, b'"a"')]
    assert syncs == 1
    # An id the view knows nothing of and that is not newer than it: no wait.
    missing = await decoder.decode_all([wire.frame(1, b"\x02"), b"plain"])
    assert missing[0] == Decoded(1, b"1") and isinstance(missing[1], Undecoded)
    assert syncs == 1
