"""Schema validation at produce, on a real gateway: a topic with `value.schema.validation` (or
Confluent Server's `confluent.value.schema.validation`, or the key's) accepts a JSON value its
subject's latest schema describes and a binary value in the wire format with an id registered
under the subject; any other record refuses the whole request with a 422 naming the record and
why, and nothing of it is appended. Over HTTP/1.1 and h2c, JSON, NDJSON and binary bodies."""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from engine.batch import RecordInput, encode_batch
from tests.e2e.conftest import Server, start_server

USER = {
    "type": "record",
    "name": "User",
    "namespace": "example",
    "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}],
}
ORDER = {
    "type": "object",
    "properties": {"id": {"type": "integer"}, "item": {"type": "string"}},
    "required": ["id"],
}
RECORD_BATCH = "application/vnd.sluice.record-batch"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(Path(tmp_path_factory.mktemp("validation")) / "data")
    yield running
    assert running.stop() == 0


@pytest.fixture(scope="module")
def registry(server: Server) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": f"{server.url}/schema-registry"})


@pytest.fixture(scope="module")
def http(server: Server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


def topic(http: httpx.Client, name: str, **configs: object) -> str:
    created = http.post("/v1/topics", json={"name": name, "partitions": 1, "configs": configs})
    assert created.status_code == 201, created.text
    return name


def end_offset(http: httpx.Client, name: str) -> int:
    answer = http.get(f"/v1/topics/{name}/partitions/0/offsets")
    assert answer.status_code == 200, answer.text
    latest: int = answer.json()["offset"]
    return latest


def refused(answer: httpx.Response, index: int, field: str = "value") -> dict[str, Any]:
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    problem: dict[str, Any] = answer.json()
    assert problem["code"] == "SCHEMA_VALIDATION_FAILED"
    assert problem["index"] == index and problem["field"] == field
    assert f"records[{index}].{field}" in problem["detail"]
    return problem


def framed(schema_id: int, payload: bytes) -> bytes:
    return struct.pack(">bI", 0, schema_id) + payload


def batch(*values: bytes | None, keys: list[bytes | None] | None = None) -> bytes:
    keyed = keys or [None] * len(values)
    return bytes(encode_batch([RecordInput(k, v) for k, v in zip(keyed, values, strict=True)]))


def test_json_values_are_checked_against_the_latest_schema(
    http: httpx.Client, registry: SchemaRegistryClient
) -> None:
    name = topic(http, "orders", **{"value.schema.validation": "true"})
    registry.register_schema("orders-value", Schema(json.dumps(ORDER), "JSON"))
    ok = http.post(
        f"/v1/topics/{name}/records", json={"records": [{"value": {"id": 1, "item": "pen"}}]}
    )
    assert ok.status_code == 200, ok.text
    bad = http.post(
        f"/v1/topics/{name}/records",
        json={"records": [{"value": {"id": 2}}, {"value": {"item": "no id"}}]},
    )
    problem = refused(bad, 1)
    assert problem["subject"] == "orders-value" and "id" in problem["detail"]
    wrong_type = http.post(
        f"/v1/topics/{name}/records", json={"records": [{"value": {"id": "one"}}]}
    )
    refused(wrong_type, 0)
    ndjson = http.post(
        f"/v1/topics/{name}/records",
        content=b'{"id": 3}\n{"id": 4, "item": 5}\n',
        headers={"Content-Type": "application/x-ndjson"},
    )
    refused(ndjson, 1)
    assert end_offset(http, name) == 1, "nothing of a refused request is appended"


def test_an_avro_subject_checks_json_values_and_the_wire_format_of_binary_ones(
    http: httpx.Client, registry: SchemaRegistryClient
) -> None:
    name = topic(http, "users", **{"confluent.value.schema.validation": True})
    schema_id = registry.register_schema("users-value", Schema(json.dumps(USER), "AVRO"))
    serialize = AvroSerializer(registry, json.dumps(USER))
    written = serialize({"name": "ann", "age": 30}, SerializationContext(name, MessageField.VALUE))
    assert written is not None and written[1:5] == struct.pack(">I", schema_id)
    ok = http.post(
        f"/v1/topics/{name}/partitions/0/records",
        content=batch(written),
        headers={"Content-Type": RECORD_BATCH},
    )
    assert ok.status_code == 200, ok.text
    as_json = http.post(
        f"/v1/topics/{name}/records", json={"records": [{"value": {"name": "bo", "age": 4}}]}
    )
    assert as_json.status_code == 200, as_json.text
    b64 = base64.b64encode(written).decode()
    in_json = http.post(
        f"/v1/topics/{name}/records",
        json={"records": [{"value": b64, "value_encoding": "base64"}]},
    )
    assert in_json.status_code == 200, in_json.text
    other_id = registry.register_schema("elsewhere-value", Schema(json.dumps(ORDER), "JSON"))
    for index, value, why in (
        (1, b"plain bytes", "wire format"),
        (1, b"\x01" + written[1:], "magic byte"),
        (1, framed(99_999, written[5:]), "99999 is not registered"),
        (1, framed(other_id, written[5:]), "not registered under it"),
        (1, written[:3], "header"),
        (1, None, "null"),
    ):
        answer = http.post(
            f"/v1/topics/{name}/partitions/0/records",
            content=batch(written, value),
            headers={"Content-Type": RECORD_BATCH},
        )
        assert why in refused(answer, index)["detail"]
    refused(
        http.post(
            f"/v1/topics/{name}/records", json={"records": [{"value": {"name": "cy", "age": "x"}}]}
        ),
        0,
    )
    assert end_offset(http, name) == 3


def test_keys_are_checked_when_the_topic_validates_them(
    http: httpx.Client, registry: SchemaRegistryClient
) -> None:
    name = topic(http, "keyed", **{"key.schema.validation": "true"})
    registry.register_schema(
        "keyed-key", Schema(json.dumps({"type": "string", "pattern": "^k-"}), "JSON")
    )
    ok = http.post(f"/v1/topics/{name}/records", json={"records": [{"key": "k-1", "value": 1}]})
    assert ok.status_code == 200, ok.text
    refused(
        http.post(f"/v1/topics/{name}/records", json={"records": [{"key": "x-1", "value": 1}]}),
        0,
        "key",
    )
    refused(http.post(f"/v1/topics/{name}/records", json={"records": [{"value": 1}]}), 0, "key")
    assert end_offset(http, name) == 1


def test_a_subject_without_a_schema_refuses_every_record(http: httpx.Client) -> None:
    name = topic(http, "unregistered", **{"value.schema.validation": "true"})
    problem = refused(http.post(f"/v1/topics/{name}/records", json={"records": [{"value": 1}]}), 0)
    assert "not found" in problem["detail"]
    assert end_offset(http, name) == 0


def test_record_name_strategy_takes_the_subject_from_the_schema(
    http: httpx.Client, registry: SchemaRegistryClient
) -> None:
    name = topic(
        http,
        "events",
        **{
            "value.schema.validation": "true",
            "value.subject.name.strategy": "io.confluent.kafka.serializers.subject."
            "RecordNameStrategy",
        },
    )
    schema_id = registry.register_schema("example.User", Schema(json.dumps(USER), "AVRO"))
    ok = http.post(
        f"/v1/topics/{name}/partitions/0/records",
        content=batch(framed(schema_id, b"\x06ann\x3c")),
        headers={"Content-Type": RECORD_BATCH},
    )
    assert ok.status_code == 200, ok.text
    as_json = http.post(f"/v1/topics/{name}/records", json={"records": [{"value": {"x": 1}}]})
    assert "RecordNameStrategy" in refused(as_json, 0)["detail"]


def test_validation_holds_over_h2c(server: Server, registry: SchemaRegistryClient) -> None:
    with httpx.Client(base_url=server.url, http1=False, http2=True, timeout=30) as h2:
        name = topic(h2, "over-h2", **{"value.schema.validation": "true"})
        registry.register_schema("over-h2-value", Schema(json.dumps(ORDER), "JSON"))
        ok = h2.post(f"/v1/topics/{name}/records", json={"records": [{"value": {"id": 1}}]})
        assert ok.http_version == "HTTP/2" and ok.status_code == 200, ok.text
        refused(h2.post(f"/v1/topics/{name}/records", json={"records": [{"value": {}}]}), 0)
        assert end_offset(h2, name) == 1


def test_bad_validation_settings_are_refused(http: httpx.Client) -> None:
    for configs in (
        {"value.schema.validation": "maybe"},
        {"value.subject.name.strategy": "NoSuchStrategy"},
        {"confluent.key.subject.name.strategy": 3},
    ):
        answer = http.post("/v1/topics", json={"name": "bad-config", "configs": configs})
        assert answer.status_code == 400, answer.text
        assert answer.json()["code"] == "INVALID_CONFIG"


def test_the_setting_can_be_turned_on_later(
    http: httpx.Client, registry: SchemaRegistryClient
) -> None:
    name = topic(http, "later")
    assert http.post(f"/v1/topics/{name}/records", json={"records": [{"value": 1}]}).is_success
    changed = http.patch(
        f"/v1/topics/{name}", json={"configs": {"confluent.value.schema.validation": "true"}}
    )
    assert changed.status_code == 200, changed.text
    shown = http.get(f"/v1/topics/{name}").json()
    assert shown["configs"]["value.schema.validation"] is True
    refused(http.post(f"/v1/topics/{name}/records", json={"records": [{"value": 1}]}), 0)
    registry.register_schema("later-value", Schema(json.dumps({"type": "integer"}), "JSON"))
    assert http.post(f"/v1/topics/{name}/records", json={"records": [{"value": 2}]}).is_success
    assert end_offset(http, name) == 2


def test_a_request_may_name_the_schema_its_json_values_are_checked_against(
    http: httpx.Client, registry: SchemaRegistryClient
) -> None:
    name = topic(http, "named", **{"value.schema.validation": "true"})
    first = registry.register_schema("named-value", Schema('{"type": "integer"}', "JSON"))
    registry.register_schema("named-value", Schema('{"type": ["integer", "string"]}', "JSON"))
    elsewhere = registry.register_schema("other-value", Schema('{"type": "boolean"}', "JSON"))
    records = f"/v1/topics/{name}/records"
    text = {"records": [{"value": "seven"}]}
    assert http.post(records, json=text).is_success, "the latest takes strings"
    refused(http.post(records, params={"value_schema_id": first}, json=text), 0)
    seven = {"records": [{"value": 7}]}
    assert http.post(records, params={"value_schema_id": first}, json=seven).is_success
    problem = refused(
        http.post(records, params={"value_schema_id": elsewhere}, json={"records": [{"value": 1}]}),
        0,
    )
    assert "not registered under it" in problem["detail"]
    for bad in ("0", "x", "-1", str(2**31)):
        answer = http.post(records, params={"value_schema_id": bad}, json=text)
        assert answer.status_code == 400 and answer.json()["code"] == "INVALID_PARAMETER"
    assert end_offset(http, name) == 2
