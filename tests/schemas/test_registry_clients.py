"""confluent-kafka's SchemaRegistryClient and its Avro, JSON and Protobuf serializers,
unchanged, against a real gateway: the registry under the gateway's prefix, and at the root
of its own port."""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.common.protobuf import _str_to_proto
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool
from google.protobuf.message_factory import GetMessageClass
from google.protobuf.timestamp_pb2 import Timestamp

from schemas.types import parse
from schemas.types.protobuf import ProtobufSchema
from tests.e2e.conftest import Server, start_server
from tests.tls import write_self_signed

USER = json.dumps(
    {
        "type": "record",
        "name": "User",
        "namespace": "example",
        "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}],
    }
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, int]]:
    port = free_port()
    data = Path(tmp_path_factory.mktemp("clients")) / "data"
    running = start_server(data, "--schema-registry-port", str(port))
    yield running, port
    assert running.stop() == 0


@pytest.fixture(params=["prefix", "own-port"])
def client(request: pytest.FixtureRequest, gateway: tuple[Server, int]) -> SchemaRegistryClient:
    server, port = gateway
    url = (
        f"{server.url}/schema-registry" if request.param == "prefix" else f"http://127.0.0.1:{port}"
    )
    return SchemaRegistryClient({"url": url})


def test_the_client_registers_reads_and_deletes(client: SchemaRegistryClient) -> None:
    subject = f"users-{id(client)}-value"
    schema_id = client.register_schema(subject, Schema(USER, "AVRO"))
    assert client.register_schema(subject, Schema(USER, "AVRO")) == schema_id
    assert json.loads(client.get_schema(schema_id).schema_str or "") == json.loads(USER)
    latest = client.get_latest_version(subject)
    assert (latest.schema_id, latest.version, latest.subject) == (schema_id, 1, subject)
    assert client.lookup_schema(subject, Schema(USER, "AVRO")).version == 1
    assert subject in client.get_subjects()
    assert client.get_versions(subject) == [1]
    client.set_compatibility(subject, "FULL")
    assert client.get_compatibility(subject) == "FULL"
    assert client.test_compatibility(subject, Schema(USER, "AVRO"))
    assert client.delete_subject(subject) == [1]
    assert client.delete_subject(subject, permanent=True) == [1]


def test_the_client_sees_confluents_error_codes(client: SchemaRegistryClient) -> None:
    with pytest.raises(SchemaRegistryError) as missing:
        client.get_latest_version("no-such-subject")
    assert (missing.value.http_status_code, missing.value.error_code) == (404, 40401)
    with pytest.raises(SchemaRegistryError) as unknown:
        client.get_schema(987654)
    assert unknown.value.error_code == 40403
    with pytest.raises(SchemaRegistryError) as invalid:
        client.register_schema(f"bad-{id(client)}", Schema('{"type": "nonsense"}', "AVRO"))
    assert (invalid.value.http_status_code, invalid.value.error_code) == (422, 42201)


def test_avro_serializer_round_trip(client: SchemaRegistryClient) -> None:
    topic = f"users-{id(client)}"
    serialize = AvroSerializer(client, USER)
    deserialize = AvroDeserializer(client)
    context = SerializationContext(topic, MessageField.VALUE)
    user = {"name": "Ada", "age": 36}
    payload = serialize(user, context)
    assert payload is not None and payload[0] == 0
    schema_id = int.from_bytes(payload[1:5], "big")
    assert client.get_latest_version(f"{topic}-value").schema_id == schema_id
    # A fresh client (no cache) reads the schema by its id to decode.
    fresh = SchemaRegistryClient({"url": client._rest_client.base_urls[0]})
    assert AvroDeserializer(fresh)(payload, context) == user
    assert deserialize(payload, context) == user


def test_json_serializer_round_trip(client: SchemaRegistryClient) -> None:
    topic = f"orders-{id(client)}"
    schema = json.dumps(
        {
            "type": "object",
            "properties": {"id": {"type": "integer"}, "item": {"type": "string"}},
            "required": ["id"],
        }
    )
    context = SerializationContext(topic, MessageField.VALUE)
    payload = JSONSerializer(schema, client)({"id": 7, "item": "tea"}, context)
    assert payload is not None and payload[0] == 0
    assert client.get_latest_version(f"{topic}-value").schema.schema_type == "JSON"
    fresh = SchemaRegistryClient({"url": client._rest_client.base_urls[0]})
    assert JSONDeserializer(None, schema_registry_client=fresh)(payload, context) == {
        "id": 7,
        "item": "tea",
    }


def test_protobuf_schema_through_the_client(client: SchemaRegistryClient) -> None:
    """A .proto text registered and read back through the client."""
    proto = 'syntax = "proto3";\npackage example;\nmessage Tick { int64 at = 1; }\n'
    subject = f"ticks-{id(client)}-value"
    schema_id = client.register_schema(subject, Schema(proto, "PROTOBUF"))
    assert client.get_schema(schema_id).schema_type == "PROTOBUF"
    assert client.lookup_schema(subject, Schema(proto, "PROTOBUF")).schema_id == schema_id


def test_the_registry_port_speaks_tls_when_the_gateway_does(tmp_path: Path) -> None:
    """With --tls-cert the registry's own port is HTTPS too, never plain beside it."""
    cert, key = write_self_signed(tmp_path)
    port = free_port()
    running = start_server(
        tmp_path / "data",
        "--tls-cert", str(cert), "--tls-key", str(key), "--schema-registry-port", str(port),
    )  # fmt: skip
    try:
        answer = httpx.get(
            f"https://localhost:{port}/schemas/types",
            verify=ssl.create_default_context(cafile=str(cert)),
        )
        assert answer.status_code == 200 and "AVRO" in answer.json()
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://localhost:{port}/schemas/types")
    finally:
        assert running.stop() == 0


def test_protobuf_serializer_round_trip(client: SchemaRegistryClient) -> None:
    """The serializer registers Timestamp's descriptor in base64: it reads back as the .proto
    text Confluent's registry answers, and as the descriptor the deserializer asks for."""
    topic = f"times-{id(client)}"
    context = SerializationContext(topic, MessageField.VALUE)
    serialize = ProtobufSerializer(Timestamp, client, {"use.deprecated.format": False})
    payload = serialize(Timestamp(seconds=1_700_000_000, nanos=5), context)
    assert payload is not None and payload[0] == 0
    registered = client.get_latest_version(f"{topic}-value")
    assert registered.schema.schema_type == "PROTOBUF"
    assert registered.schema.schema_str == (
        'syntax = "proto3";\n'
        "package google.protobuf;\n"
        "\n"
        'option java_package = "com.google.protobuf";\n'
        'option java_outer_classname = "TimestampProto";\n'
        "option java_multiple_files = true;\n"
        'option go_package = "google.golang.org/protobuf/types/known/timestamppb";\n'
        "option cc_enable_arenas = true;\n"
        'option objc_class_prefix = "GPB";\n'
        'option csharp_namespace = "Google.Protobuf.WellKnownTypes";\n'
        "\n"
        "message Timestamp {\n"
        "  int64 seconds = 1;\n"
        "  int32 nanos = 2;\n"
        "}\n"
    )
    assert registered.schema_id is not None
    served = client.get_schema(registered.schema_id, fmt="serialized").schema_str
    assert served is not None
    assert _str_to_proto("timestamp.proto", served).message_type[0].name == "Timestamp"
    deserialize = ProtobufDeserializer(Timestamp, {"use.deprecated.format": False})
    assert deserialize(payload, context) == Timestamp(seconds=1_700_000_000, nanos=5)


def test_protobuf_serializer_with_a_reference_reads_back_as_proto_text(
    client: SchemaRegistryClient,
) -> None:
    """The serializer registers a message's file and the file it imports, both serialized
    (the import as a reference): each reads back as .proto text, the import's as the text
    its importer compiles against, and the deserializer, asking for both serialized through
    the client, reads the value."""
    suffix = id(client)
    money = parse(
        "PROTOBUF",
        f'syntax = "proto3"; package m{suffix}; message Money {{ int64 cents = 1; }}',
        {},
    )
    price = parse(
        "PROTOBUF",
        f'syntax = "proto3"; package p{suffix}; import "money{suffix}.proto";'
        f" message Price {{ m{suffix}.Money amount = 1; string currency = 2; }}",
        {f"money{suffix}.proto": money},
    )
    assert isinstance(price, ProtobufSchema)
    pool = descriptor_pool.DescriptorPool()
    for file in price.compiled[:-1]:
        pool.Add(file)
    main = descriptor_pb2.FileDescriptorProto()
    main.CopyFrom(price.descriptor)
    main.name = f"price{suffix}.proto"
    pool.Add(main)
    price_class = GetMessageClass(pool.FindMessageTypeByName(f"p{suffix}.Price"))
    topic = f"prices-{suffix}"
    context = SerializationContext(topic, MessageField.VALUE)
    serialize = ProtobufSerializer(price_class, client, {"use.deprecated.format": False})
    value = price_class(amount={"cents": 250}, currency="EUR")
    payload = serialize(value, context)
    fresh = SchemaRegistryClient({"url": client._rest_client.base_urls[0]})  # no cached reads
    registered = fresh.get_latest_version(f"{topic}-value")
    assert registered.schema.schema_str is not None
    assert f'import "money{suffix}.proto";' in registered.schema.schema_str
    assert f"m{suffix}.Money amount = 1;" in registered.schema.schema_str
    [reference] = registered.schema.references or []
    assert reference.subject is not None and reference.version is not None
    imported = fresh.get_version(reference.subject, reference.version).schema.schema_str
    assert imported is not None and "message Money {" in imported
    # A client of its own: the client caches a version whatever format it was read in.
    reader = SchemaRegistryClient({"url": client._rest_client.base_urls[0]})
    deserialize = ProtobufDeserializer(
        price_class, {"use.deprecated.format": False}, schema_registry_client=reader
    )
    assert deserialize(payload, context) == value


def test_a_proto_text_is_served_serialized_as_the_protobuf_clients_ask(
    client: SchemaRegistryClient,
) -> None:
    """confluent-kafka's Protobuf serializers read schemas with format=serialized and decode
    them as a base64 FileDescriptorProto, whichever form the schema was registered in."""
    proto = 'syntax = "proto3";\npackage example;\nmessage Click { string page = 1; }\n'
    subject = f"clicks-{id(client)}-value"
    schema_id = client.register_schema(subject, Schema(proto, "PROTOBUF"))
    served = client.get_schema(schema_id, fmt="serialized").schema_str
    assert served is not None
    file = _str_to_proto("click.proto", served)
    assert file.package == "example" and [m.name for m in file.message_type] == ["Click"]
    latest = client.get_latest_version(subject, fmt="serialized").schema.schema_str
    assert latest == served
