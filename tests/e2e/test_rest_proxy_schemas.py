"""The REST Proxy's schema formats on a real `sluice serve`, beyond Karapace's cases: what v2
produces is what confluent-kafka's deserializers read (the raw bytes fetched through /v1),
instances decode each format, bad schema input gets its answer, and v3's schema-aware produce
(schema_id, schema_version, schema text, the subject's latest, name strategies)."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pool, message_factory
from google.protobuf.json_format import MessageToDict

from schemas.types.protobuf import ProtobufSchema
from tests.e2e.karapace_rest import (
    REGISTRY,
    REST_HEADERS,
    SCHEMA_AVRO_JSON,
    SCHEMA_DATA,
    SCHEMA_JSONSCHEMA_JSON,
    SCHEMA_PROTOBUF,
    TEST_OBJECTS_AVRO,
    assign_and_seek_to_beginning,
    new_consumer,
    new_topic,
    produce,
    read_records,
    register,
    rest_client,  # noqa: F401 (the rest fixture)
    send,
)

KEY_SCHEMA = '"string"'


def stored(rest: httpx.Client, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    """Each record's raw key and value in partition 0, through /v1."""
    answer = rest.get(f"/v1/topics/{topic}/partitions/0/records?offset=0")
    assert answer.status_code == 200, answer.text
    out: list[tuple[bytes | None, bytes | None]] = []
    for record in answer.json()["records"]:
        raw: list[bytes | None] = []
        for side in ("key", "value"):
            text = record[side]
            if text is None:
                raw.append(None)
            elif record.get(f"{side}_encoding") == "base64":
                raw.append(base64.b64decode(text))
            else:
                raw.append(text.encode() if isinstance(text, str) else orjson.dumps(text))
        out.append((raw[0], raw[1]))
    return out


def registry_client(rest: httpx.Client) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": str(rest.base_url).rstrip("/") + REGISTRY})


def protobuf_class(text: str, name: str) -> Any:
    """The generated-code class of a message of a .proto text, built at run time."""
    pool = descriptor_pool.DescriptorPool()
    parsed = ProtobufSchema(text, {})
    pool.Add(parsed.descriptor)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def reader(client: SchemaRegistryClient, fmt: str) -> Callable[[bytes, Any], Any]:
    """confluent-kafka's deserializer of a format, as a function of the bytes (Protobuf's
    message as its JSON, every field shown)."""
    if fmt == "avro":
        avro: Callable[[bytes, Any], Any] = AvroDeserializer(client)
        return avro
    if fmt == "jsonschema":
        json_schema: Callable[[bytes, Any], Any] = JSONDeserializer(
            None, schema_registry_client=client
        )
        return json_schema
    message = protobuf_class(SCHEMA_PROTOBUF, "Message")
    deserializer = ProtobufDeserializer(message, {"use.deprecated.format": False})

    def read(data: bytes, context: Any) -> Any:
        return MessageToDict(deserializer(data, context), always_print_fields_with_no_presence=True)

    return read


def test_confluents_deserializers_read_what_v2_produced(rest: httpx.Client) -> None:
    client = registry_client(rest)
    for fmt in ("avro", "jsonschema", "protobuf"):
        topic = new_topic(rest, prefix=f"{fmt}_wire")
        schema, objects = SCHEMA_DATA[fmt]
        body = {
            "key_schema": KEY_SCHEMA,
            "value_schema": schema,
            "records": [{"key": f"k{i}", "value": o} for i, o in enumerate(objects)],
        }
        if fmt == "jsonschema":  # a key schema of the format's own type
            body["key_schema"] = '{"type": "string"}'
        if fmt == "protobuf":
            body["key_schema"] = SCHEMA_PROTOBUF
            body["records"] = [{"key": o, "value": o} for o in objects]
        answer = produce(rest, topic, fmt, body)
        assert answer.status_code == 200, answer.text
        doc = answer.json()
        value_id = doc["value_schema_id"]
        assert isinstance(doc["key_schema_id"], int) and isinstance(value_id, int)
        context = SerializationContext(topic, MessageField.VALUE)
        read = reader(client, fmt)
        records = stored(rest, topic)
        assert len(records) == len(objects)
        for (key, value), expected in zip(records, objects, strict=True):
            assert key is not None and value is not None
            assert value[0] == 0 and int.from_bytes(value[1:5], "big") == value_id
            got = read(value, context)
            if fmt == "protobuf":
                got = {"query": int(got.get("query", 0)), "speed": got["speed"]}
            assert got == expected
        if fmt == "avro":
            key_read = AvroDeserializer(client)
            keys = [key_read(k, SerializationContext(topic, MessageField.KEY)) for k, _ in records]
            assert keys == [f"k{i}" for i in range(len(objects))]


def test_keys_are_partitioned_by_their_framed_bytes(rest: httpx.Client) -> None:
    """A keyed record goes to the partition of its wire-format key bytes, as a Kafka producer
    with Confluent's serializer sends it; the same key always lands in the same place."""
    topic = new_topic(rest, prefix="keyed", num_partitions=4)
    body = {
        "key_schema": KEY_SCHEMA,
        "value_schema": SCHEMA_AVRO_JSON,
        "records": [{"key": "same", "value": o} for o in TEST_OBJECTS_AVRO],
    }
    first = produce(rest, topic, "avro", body).json()["offsets"]
    again = produce(rest, topic, "avro", body).json()["offsets"]
    assert len({o["partition"] for o in first + again}) == 1


@pytest.mark.parametrize("fmt", ["jsonschema", "protobuf"])
def test_instances_decode_each_format(rest: httpx.Client, fmt: str) -> None:
    topic = new_topic(rest, prefix=f"{fmt}_read")
    schema, objects = SCHEMA_DATA[fmt]
    body = {"value_schema": schema, "records": [{"value": o} for o in objects]}
    assert produce(rest, topic, fmt, body).status_code == 200
    group = f"decode_{fmt}"
    instance = new_consumer(rest, group, fmt=fmt)
    assign_and_seek_to_beginning(rest, group, instance, topic, REST_HEADERS[fmt])
    answer = read_records(rest, group, instance, REST_HEADERS[fmt])
    assert answer.status_code == 200, answer.text
    assert answer.headers["Content-Type"].startswith(f"application/vnd.kafka.{fmt}.v2+json")
    assert [r["value"] for r in answer.json()] == objects


def test_an_instance_answers_422_for_an_unknown_schema_id(rest: httpx.Client) -> None:
    """A value in the wire format whose id the registry does not know: 422, as Karapace
    answers a value it cannot deserialize."""
    topic = new_topic(rest, prefix="unknown_id")
    send(rest, topic, [b"\x00\x00\x0f\x42\x40" + b"\x02"])
    group = "unknown_id_group"
    instance = new_consumer(rest, group, fmt="avro")
    assign_and_seek_to_beginning(rest, group, instance, topic, REST_HEADERS["avro"])
    answer = read_records(rest, group, instance, REST_HEADERS["avro"])
    assert answer.status_code == 422, answer.text
    assert answer.json()["error_code"] == 422
    assert "no schema with id 1000000" in answer.json()["message"]


def test_bad_schema_input(rest: httpx.Client) -> None:
    topic = new_topic(rest, prefix="bad_schema")
    records = [{"value": TEST_OBJECTS_AVRO[0]}]
    nonsense = produce(
        rest, topic, "avro", {"value_schema": '{"type": "nope"}', "records": records}
    )
    assert nonsense.status_code == 422
    assert nonsense.json()["error_code"] == 42205
    assert nonsense.json()["message"].startswith("Invalid schema. format = AVRO, schema = ")
    unknown = produce(rest, topic, "avro", {"value_schema_id": 987654, "records": records})
    assert (unknown.status_code, unknown.json()["error_code"]) == (422, 42205)
    misfit = produce(
        rest, topic, "avro", {"value_schema": SCHEMA_AVRO_JSON, "records": [{"value": {"x": 1}}]}
    )
    assert (misfit.status_code, misfit.json()["error_code"]) == (422, 42205)
    # Both the text and the id: the id is used (as Karapace does), the text ignored.
    schema_id = register(rest, f"{topic}-value", SCHEMA_AVRO_JSON)
    both = produce(
        rest,
        topic,
        "avro",
        {"value_schema": '"int"', "value_schema_id": schema_id, "records": records},
    )
    assert both.status_code == 200, both.text
    assert both.json()["value_schema_id"] == schema_id
    # Nothing of the refused requests was appended.
    assert len(stored(rest, topic)) == 1
    typed = produce(
        rest,
        topic,
        "jsonschema",
        {"value_schema": SCHEMA_JSONSCHEMA_JSON, "records": [{"value": {"foo": "x"}}]},
    )
    assert typed.status_code == 408  # another type under an AVRO subject: not compatible
    assert typed.json()["error_code"] == 40801


def test_a_repeated_schema_text_registers_once(rest: httpx.Client) -> None:
    topic = new_topic(rest, prefix="repeat")
    body = {"value_schema": SCHEMA_AVRO_JSON, "records": [{"value": TEST_OBJECTS_AVRO[0]}]}
    ids = {produce(rest, topic, "avro", body).json()["value_schema_id"] for _ in range(3)}
    assert len(ids) == 1
    assert rest.get(f"{REGISTRY}/subjects/{topic}-value/versions").json() == [1]


# -- v3 --------------------------------------------------------------------------------------


def v3_produce(rest: httpx.Client, topic: str, record: dict[str, Any]) -> httpx.Response:
    cluster = rest.get("/v3/clusters").json()["data"][0]["cluster_id"]
    return rest.post(f"/v3/clusters/{cluster}/topics/{topic}/records", json=record)


def test_v3_schema_aware_produce(rest: httpx.Client) -> None:
    topic = new_topic(rest, prefix="v3_schemas")
    client = registry_client(rest)
    user = TEST_OBJECTS_AVRO[0]
    by_text = v3_produce(
        rest, topic, {"value": {"type": "AVRO", "schema": SCHEMA_AVRO_JSON, "data": user}}
    )
    assert by_text.status_code == 200, by_text.text
    report = by_text.json()["value"]
    schema_id = report["schema_id"]
    assert report["type"] == "AVRO" and report["subject"] == f"{topic}-value"
    assert report["schema_version"] == 1 and report["size"] > 5
    for value in (
        {"schema_id": schema_id, "data": user},
        {"schema_version": 1, "data": user},
        {"type": "AVRO", "data": user},
        {"subject": f"{topic}-value", "data": user},
    ):
        answer = v3_produce(rest, topic, {"value": value})
        assert answer.status_code == 200, (value, answer.text)
        assert answer.json()["value"]["schema_id"] == schema_id
    keyed = v3_produce(
        rest,
        topic,
        {"key": {"type": "JSONSCHEMA", "schema": '{"type": "string"}', "data": "k"}, "value": None},
    )
    assert keyed.status_code == 200, keyed.text
    assert keyed.json()["key"]["subject"] == f"{topic}-key"
    records = stored(rest, topic)
    read = AvroDeserializer(client)
    context = SerializationContext(topic, MessageField.VALUE)
    assert [read(v, context) for _, v in records[:5]] == 5 * [user]
    assert records[5][0] == b"\x00" + keyed.json()["key"]["schema_id"].to_bytes(4, "big") + b'"k"'


def test_v3_record_name_strategy(rest: httpx.Client) -> None:
    topic = new_topic(rest, prefix="v3_record_name")
    for strategy, subject in (
        ("RECORD_NAME", "example.avro.User"),
        ("TOPIC_RECORD_NAME", f"{topic}-example.avro.User"),
    ):
        answer = v3_produce(
            rest,
            topic,
            {
                "value": {
                    "type": "AVRO",
                    "subject_name_strategy": strategy,
                    "schema": SCHEMA_AVRO_JSON,
                    "data": TEST_OBJECTS_AVRO[1],
                }
            },
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["value"]["subject"] == subject


@pytest.mark.parametrize(
    ("value", "status", "says"),
    [
        ({"type": "AVRO", "schema_id": 1, "data": 1}, 400, "leave out type"),
        ({"schema_id": 1, "schema_version": 1, "data": 1}, 400, "give one of"),
        ({"schema": '"int"', "data": 1}, 400, "needs its type"),
        ({"type": "AVRO", "schema": '{"type": "nope"}', "data": 1}, 400, "value.schema"),
        ({"type": "AVRO", "schema": '"int"', "data": "x"}, 400, "does not fit"),
        ({"schema_version": 7, "data": 1}, 400, "not found"),
        ({"subject_name_strategy": "RECORD_NAME", "data": 1}, 400, "needs a schema_id"),
        ({"subject_name_strategy": "NOPE", "type": "AVRO", "data": 1}, 400, "one of"),
        ({"type": "BINARY", "schema_id": 1, "data": "AA=="}, 400, "takes no schema"),
        ({"type": "PROTOBUF", "schema": "nonsense", "data": {}}, 400, "value.schema"),
    ],
)
def test_v3_bad_schema_fields(
    rest: httpx.Client, value: dict[str, Any], status: int, says: str
) -> None:
    topic = new_topic(rest, prefix="v3_bad")
    register(rest, f"{topic}-value", '"int"')
    answer = v3_produce(rest, topic, {"value": value})
    assert answer.status_code == status, answer.text
    assert answer.json()["error_code"] == status
    assert says in answer.json()["message"]
    assert stored(rest, topic) == []


def test_v3_incompatible_schema_answers_the_registrys_status(rest: httpx.Client) -> None:
    topic = new_topic(rest, prefix="v3_incompatible")
    register(rest, f"{topic}-value", '"int"')
    answer = v3_produce(rest, topic, {"value": {"type": "AVRO", "schema": '"string"', "data": "x"}})
    assert answer.status_code == 409, answer.text
    assert "incompatible" in answer.json()["message"]
