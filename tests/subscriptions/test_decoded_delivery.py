"""Push subscriptions with `decode_values: schema`, to a real receiver on loopback through an
in-process gateway: values written by confluent-kafka's AvroSerializer (registered through its
SchemaRegistryClient against the gateway's registry) arrive as their JSON in binary and
structured CloudEvents, CloudEvents batches and the JSON format; an unknown id arrives as
stored with the reason; a dead letter keeps the bytes as stored; the field is checked, shown
and patched like the others."""

from __future__ import annotations

import asyncio
import base64
import json

import orjson
from cloudevents.core.bindings.http import HTTPMessage, from_http
from cloudevents.core.formats.json import JSONFormat
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from schemas import wire
from tests.api.support import Client, produce
from tests.subscriptions.receiver import Receiver
from tests.subscriptions.test_delivery import FAST, describe, subscribe

USER = {
    "type": "record",
    "name": "User",
    "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}],
}
UNKNOWN = wire.frame(424242, b"\x02")


async def written(client: Client) -> tuple[int, bytes]:
    """An Avro value as confluent-kafka's serializer writes it (registering its schema with the
    gateway's registry, from a thread: the gateway answers in this loop)."""
    registry = SchemaRegistryClient({"url": str(client.make_url("/schema-registry"))})
    serialize = AvroSerializer(registry, json.dumps(USER))
    context = SerializationContext("t", MessageField.VALUE)
    value = await asyncio.to_thread(serialize, {"name": "Ada", "age": 36}, context)
    assert value is not None
    return wire.unframe(value)[0], value


async def produce_values(client: Client, avro: bytes) -> None:
    """Offsets 0: the Avro value, 1: an unknown id, 2: a JSON value."""
    binary = [{"value": base64.b64encode(v).decode(), "value_encoding": "base64"}
              for v in (avro, UNKNOWN)]  # fmt: skip
    await produce(client, [*binary, {"value": {"plain": 1}}])


async def test_binary_mode_carries_the_decoded_json_and_dead_letters_keep_the_bytes(
    client: Client, receiver: Receiver
) -> None:
    schema_id, avro = await written(client)
    receiver.behaviour = lambda n, message_id: (400, {}) if message_id == "t/0/1" else (204, {})
    await subscribe(
        client, receiver.url, decode_values="schema", retry=FAST, dead_letter_topic="dlq"
    )
    await produce_values(client, avro)
    await receiver.until(lambda a: len(a) == 3)
    decoded, unknown, plain = receiver.attempts
    assert orjson.loads(decoded.body) == {"name": "Ada", "age": 36}
    assert decoded.headers["content-type"] == "application/json"
    event = from_http(HTTPMessage(decoded.headers, decoded.body), JSONFormat())
    assert event.get_extension("schemaid") == str(schema_id)
    assert unknown.body == UNKNOWN
    assert unknown.headers["content-type"] == "application/octet-stream"
    assert "424242%20is%20not%20registered" in unknown.headers["ce-schemaerror"]
    assert orjson.loads(plain.body) == {"plain": 1}
    assert not {"ce-schemaid", "ce-schemaerror"} & set(plain.headers)
    dead = await client.get("/v1/topics/dlq/partitions/0/records?offset=0&timeout_ms=0")
    (record,) = (await dead.json())["records"]
    assert base64.b64decode(record["value"]) == UNKNOWN


async def test_cloudevents_batches_and_structured_events_carry_the_json(
    client: Client, receiver: Receiver
) -> None:
    schema_id, avro = await written(client)
    await subscribe(client, receiver.url, decode_values="schema", batching={"max_records": 3})
    await produce_values(client, avro)
    await receiver.until(lambda a: sum(len(orjson.loads(x.body)) for x in a) == 3)
    events = [e for a in receiver.attempts for e in orjson.loads(a.body)]
    decoded, unknown, plain = events
    assert decoded["data"] == {"name": "Ada", "age": 36} and decoded["schemaid"] == schema_id
    assert decoded["datacontenttype"] == "application/json"
    assert base64.b64decode(unknown["data_base64"]) == UNKNOWN
    assert unknown["schemaerror"] == "schema id 424242 is not registered"
    assert plain["data"] == {"plain": 1} and "schemaid" not in plain


async def test_the_json_format_decodes_as_a_fetch_does(client: Client, receiver: Receiver) -> None:
    schema_id, avro = await written(client)
    await subscribe(
        client,
        receiver.url,
        decode_values="schema",
        format="json",
        batching={"max_records": 4},
    )
    await produce_values(client, avro)
    big = 2**70  # JSON text past 64 bits goes through as written
    await produce(client, [{"value": {"big": big}}])
    await receiver.until(lambda a: sum(len(json.loads(x.body)["records"]) for x in a) == 4)
    records = [r for a in receiver.attempts for r in json.loads(a.body)["records"]]
    decoded, unknown, plain, large = records
    assert large["value"] == {"big": big}
    assert decoded["value"] == {"name": "Ada", "age": 36}
    assert decoded["value_schema_id"] == schema_id
    assert base64.b64decode(unknown["value"]) == UNKNOWN
    assert unknown["value_schema_error"] == "schema id 424242 is not registered"
    assert plain["value"] == {"plain": 1} and "value_schema_error" not in plain


async def test_without_the_field_values_go_as_stored(client: Client, receiver: Receiver) -> None:
    _, avro = await written(client)
    await subscribe(client, receiver.url)
    await produce_values(client, avro)
    await receiver.until(lambda a: len(a) == 3)
    assert receiver.attempts[0].body == avro
    assert "ce-schemaid" not in receiver.attempts[0].headers


async def test_the_field_is_checked_shown_and_patched(client: Client, receiver: Receiver) -> None:
    doc = {"name": "s", "topic": "t", "endpoint": receiver.url, "decode_values": "avro"}
    refused = await client.post("/v1/subscriptions", json=doc)
    assert refused.status == 400
    assert (await refused.json())["pointer"] == "/decode_values"
    await subscribe(client, receiver.url)
    assert (await describe(client))["decode_values"] == "none"
    patched = await client.patch("/v1/subscriptions/s", json={"decode_values": "schema"})
    assert patched.status == 200, await patched.text()
    assert (await describe(client))["decode_values"] == "schema"
    reset = await client.patch("/v1/subscriptions/s", json={"decode_values": None})
    assert reset.status == 200
    assert (await describe(client))["decode_values"] == "none"
