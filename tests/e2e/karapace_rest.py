"""What the ports of Karapace's REST Proxy tests share: one real gateway per module, the
clients' media types, consumer settings and schemas (cases from Karapace's tests/utils.py,
Apache-2.0), Karapace's Kafka-side setup done through Sluice's own API (topics through
`/v1/topics`, Kafka producer sends through `/v1` produces of raw bytes), and the registry and
consumer-instance steps the suites repeat."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.e2e.conftest import Server, start_server

WAIT_S = 30.0
# Karapace's REST Proxy takes bodies up to aiohttp's 1 MiB; its suite checks that bound.
MAX_REQUEST_BYTES = 1_048_576

REST_HEADERS = {
    fmt: {
        "Content-Type": f"application/vnd.kafka.{fmt}.v2+json",
        "Accept": f"application/vnd.kafka.{fmt}.v2+json, application/vnd.kafka.v2+json, "
        "application/json, */*",
    }
    for fmt in ("json", "jsonschema", "binary", "avro", "protobuf")
}
CONSUMER_VALID_PAYLOAD: dict[str, Any] = {
    "format": "avro",
    "auto.offset.reset": "earliest",
    "consumer.request.timeout.ms": 11000,
    "fetch.min.bytes": 100000,
    "auto.commit.enable": "true",
    "topic.metadata.refresh.interval.ms": 100,
}
REGISTRY = "/schema-registry"
AVRO_USER: dict[str, Any] = {
    "namespace": "example.avro",
    "type": "record",
    "name": "example.avro.User",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "favorite_number", "type": "int"},
        {"name": "favorite_color", "type": "string"},
    ],
}
SCHEMA_AVRO_JSON = orjson.dumps(AVRO_USER).decode()
TEST_OBJECTS_AVRO = [
    {"name": "First Foo", "favorite_number": 2, "favorite_color": "bar"},
    {"name": "Second Foo", "favorite_number": 3, "favorite_color": "baz"},
    {"name": "Third Foo", "favorite_number": 5, "favorite_color": "quux"},
]
SCHEMA_JSONSCHEMA_JSON = orjson.dumps(
    {"type": "object", "properties": {"foo": {"type": "integer"}}}
).decode()
TEST_OBJECTS_JSONSCHEMA = [{"foo": 100}, {"foo": 200}]
SCHEMA_PROTOBUF = """syntax = "proto3";

option java_package = "com.codingharbour.protobuf";
option java_outer_classname = "TestEnumOrder";

message Message {
  int32 query = 1;
  Enum speed = 2;
}
enum Enum {
  HIGH = 0;
  MIDDLE = 1;
  LOW = 2;
}
"""
TEST_OBJECTS_PROTOBUF = [
    {"query": 5, "speed": "HIGH"},
    {"query": 10, "speed": "MIDDLE"},
]
SCHEMA_DATA: dict[str, tuple[str, list[Any]]] = {
    "avro": (SCHEMA_AVRO_JSON, TEST_OBJECTS_AVRO),
    "jsonschema": (SCHEMA_JSONSCHEMA_JSON, TEST_OBJECTS_JSONSCHEMA),
    "protobuf": (SCHEMA_PROTOBUF, TEST_OBJECTS_PROTOBUF),
}


@pytest.fixture(scope="module", name="rest")
def rest_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """A client of one gateway shared by the module's tests (each uses its own topics)."""
    server: Server = start_server(
        tmp_path_factory.mktemp("rest") / "data", "--max-request-bytes", str(MAX_REQUEST_BYTES)
    )
    try:
        with httpx.Client(base_url=server.url, timeout=WAIT_S) as client:
            yield client
    finally:
        if server.process.poll() is None:
            assert server.stop() == 0


def new_random_name(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


def new_topic(
    rest: httpx.Client,
    prefix: str = "topic",
    *,
    num_partitions: int = 1,
    configs: dict[str, object] | None = None,
) -> str:
    """Karapace's admin-client topic creation, through `/v1/topics`; listed by v2 at once."""
    name = new_random_name(prefix)
    created = rest.post(
        "/v1/topics", json={"name": name, "partitions": num_partitions, "configs": configs or {}}
    )
    assert created.status_code == 201, created.text
    assert name in rest.get("/topics").json()
    return name


def send(rest: httpx.Client, topic: str, values: list[bytes]) -> None:
    """Karapace's Kafka producer sends: records of these raw values, key-less, in one batch."""
    records = [{"value": base64.b64encode(v).decode(), "value_encoding": "base64"} for v in values]
    answer = rest.post(f"/v1/topics/{topic}/records", json={"records": records})
    assert answer.status_code == 200, answer.text


def new_consumer(
    rest: httpx.Client,
    group: str,
    fmt: str = "avro",
    trail: str = "",
    payload_override: dict[str, Any] | None = None,
) -> str:
    """A consumer instance with Karapace's settings, but `fetch.min.bytes` 1: Sluice waits
    for an instance's fetch.min.bytes up to the read's timeout, as Confluent's proxy does,
    where Karapace answers once any record is there; with Karapace's 100000 every read of
    the suite would last its whole timeout."""
    payload = {**CONSUMER_VALID_PAYLOAD, "format": fmt, "fetch.min.bytes": 1}
    payload.update(payload_override or {})
    answer = rest.post(f"/consumers/{group}{trail}", json=payload, headers=REST_HEADERS[fmt])
    assert answer.status_code == 200, answer.text
    instance: str = answer.json()["instance_id"]
    return instance


def produce(rest: httpx.Client, topic: str, fmt: str, body: dict[str, Any]) -> httpx.Response:
    """A v2 produce of the body to the topic, in the format's media type."""
    return rest.post(f"/topics/{topic}", json=body, headers=REST_HEADERS[fmt])


def register(rest: httpx.Client, subject: str, schema: str, schema_type: str | None = None) -> int:
    """Register a schema under the subject in the node's registry; its id."""
    body: dict[str, Any] = {"schema": schema}
    if schema_type is not None:
        body["schemaType"] = schema_type
    res = rest.post(
        f"{REGISTRY}/subjects/{subject}/versions",
        json=body,
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
    )
    assert res.status_code == 200, res.text
    schema_id: int = res.json()["id"]
    return schema_id


def assign(
    rest: httpx.Client,
    group: str,
    instance: str,
    topic: str,
    header: dict[str, str],
    trail: str = "",
) -> None:
    """Assign the instance partition 0 of the topic, the one partition Karapace's cases read."""
    partitions = {"partitions": [{"topic": topic, "partition": 0}]}
    path = f"/consumers/{group}/instances/{instance}/assignments{trail}"
    res = rest.post(path, json=partitions, headers=header)
    assert res.is_success, res.text


def assign_and_seek_to_beginning(
    rest: httpx.Client,
    group: str,
    instance: str,
    topic: str,
    header: dict[str, str],
    trail: str = "",
) -> None:
    """Karapace sleeps half a second between the two; Sluice's assignment holds once answered."""
    assign(rest, group, instance, topic, header, trail)
    partitions = {"partitions": [{"topic": topic, "partition": 0}]}
    path = f"/consumers/{group}/instances/{instance}/positions/beginning{trail}"
    res = rest.post(path, json=partitions, headers=header)
    assert res.is_success, res.text


def read_records(
    rest: httpx.Client,
    group: str,
    instance: str,
    header: dict[str, str],
    query: str = "timeout=5000",
    trail: str = "",
) -> httpx.Response:
    """One read of the instance's records; `query` holds the read's timeout and max_bytes."""
    path = f"/consumers/{group}/instances/{instance}/records{trail}"
    return rest.get(f"{path}?{query}" if query else path, headers=header)


def read_binary_value_as(rest: httpx.Client, fmt: str) -> httpx.Response:
    """A `fmt` instance's read of one binary record (b"test"): how each format answers a value
    it cannot decode."""
    topic = new_topic(rest, prefix=f"{fmt}_")
    res = rest.post(
        f"topics/{topic}", json={"records": [{"value": "dGVzdA=="}]}, headers=REST_HEADERS["binary"]
    )
    assert res.is_success, res.text
    group = f"e2e_group_{fmt}"
    instance = new_consumer(rest, group, fmt=fmt)
    assign(rest, group, instance, topic, REST_HEADERS[fmt])
    return read_records(rest, group, instance, REST_HEADERS[fmt])
