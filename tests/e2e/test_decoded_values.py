"""Values decoded by the schema registry for readers (`decode_values=schema`), against a real
`sluice serve`: values written by confluent-kafka's AvroSerializer and JSONSerializer through
its SchemaRegistryClient come out of Server-Sent Events (a plain stream and a group's) and
fetches (JSON and NDJSON) as their JSON; an unknown id, a payload its schema does not read and
a binary value outside the wire format come as stored with the reason; JSON and null values
as they are."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from schemas import wire
from tests.e2e.conftest import Server, start_server
from tests.e2e.test_events import SSE, events_of

TOPIC = "people"
USER = {
    "type": "record",
    "name": "User",
    "namespace": "example",
    "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}],
}
PERSON = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = start_server(tmp_path_factory.mktemp("decoded") / "data")
    yield running
    assert running.stop() == 0


@pytest.fixture(scope="module")
def produced(server: Server) -> dict[str, Any]:
    """The topic's records, written once: [avro, json schema, unknown id, bad payload, JSON,
    binary outside the wire format, null]; what each should decode to."""
    registry = SchemaRegistryClient({"url": f"{server.url}/schema-registry"})
    context = SerializationContext(TOPIC, MessageField.VALUE)
    avro = AvroSerializer(registry, json.dumps(USER))({"name": "Ada", "age": 36}, context)
    people = SerializationContext("people-json", MessageField.VALUE)
    as_json = JSONSerializer(json.dumps(PERSON), registry)({"name": "Bo"}, people)
    assert avro is not None and as_json is not None
    avro_id, json_id = wire.unframe(avro)[0], wire.unframe(as_json)[0]
    bad = wire.frame(avro_id, b"\x06Ada")  # the age is missing
    binary: list[bytes] = [avro, as_json, wire.frame(987654, b"\x02"), bad]
    records: list[dict[str, Any]] = [
        {"value": base64.b64encode(v).decode(), "value_encoding": "base64"} for v in binary
    ]
    records += [
        {"value": {"plain": True}},
        {"value": base64.b64encode(b"\x01\x02").decode(), "value_encoding": "base64"},
        {"value": None},
    ]
    assert httpx.post(f"{server.url}/v1/topics", json={"name": TOPIC}).status_code == 201
    answer = httpx.post(f"{server.url}/v1/topics/{TOPIC}/records", json={"records": records})
    assert answer.status_code == 200, answer.text
    return {"avro_id": avro_id, "json_id": json_id, "stored": records}


def check_decoded(records: list[dict[str, Any]], produced: dict[str, Any]) -> None:
    avro, as_json, unknown, bad, plain, binary, null = records
    assert avro["value"] == {"name": "Ada", "age": 36}
    assert avro["value_schema_id"] == produced["avro_id"] and "value_encoding" not in avro
    assert as_json["value"] == {"name": "Bo"}
    assert as_json["value_schema_id"] == produced["json_id"]
    stored = produced["stored"]
    for record, was in ((unknown, stored[2]), (bad, stored[3]), (binary, stored[5])):
        assert (record["value"], record["value_encoding"]) == (was["value"], "base64")
        assert "value_schema_id" not in record
    assert unknown["value_schema_error"] == "schema id 987654 is not registered"
    assert bad["value_schema_error"].startswith(f"not a value of schema id {produced['avro_id']}")
    assert binary["value_schema_error"].startswith("not in the wire format: 2 bytes")
    assert plain["value"] == {"plain": True} and null["value"] is None
    for record in (plain, null):
        assert not {"value_schema_id", "value_schema_error"} & set(record)


def stream(url: str, **params: Any) -> list[dict[str, Any]]:
    query = {"offset": "earliest", "max_events": 7, "decode_values": "schema", **params}
    answer = httpx.get(f"{url}/v1/topics/{TOPIC}/events", params=query, headers=SSE, timeout=30)
    assert answer.status_code == 200, answer.text
    return [orjson.loads(e["data"]) for e in events_of(answer.text) if e["event"] == "record"]


def test_an_event_stream_decodes_values(server: Server, produced: dict[str, Any]) -> None:
    check_decoded(stream(server.url), produced)


def test_a_groups_event_stream_decodes_values(server: Server, produced: dict[str, Any]) -> None:
    check_decoded(stream(server.url, group="decoding-readers"), produced)


def test_without_the_option_values_are_as_stored(server: Server, produced: dict[str, Any]) -> None:
    got = stream(server.url, decode_values="none")
    assert [r["value"] for r in got] == [r["value"] for r in produced["stored"]]
    assert not any("value_schema_id" in r or "value_schema_error" in r for r in got)


def test_a_fetch_decodes_values_in_json_and_ndjson(
    server: Server, produced: dict[str, Any]
) -> None:
    url = f"{server.url}/v1/topics/{TOPIC}/partitions/0/records"
    params: dict[str, str | int] = {"offset": 0, "decode_values": "schema", "timeout_ms": 0}
    answer = httpx.get(url, params=params)
    assert answer.status_code == 200, answer.text
    assert answer.json()["next_offset"] == 7
    check_decoded(answer.json()["records"], produced)
    lines = httpx.get(url, params=params, headers={"Accept": "application/x-ndjson"})
    assert lines.status_code == 200
    check_decoded([orjson.loads(line) for line in lines.text.splitlines()], produced)
    plain = httpx.get(url, params={"offset": 0, "timeout_ms": 0}).json()["records"]
    assert [r["value"] for r in plain] == [r["value"] for r in produced["stored"]]


def test_bad_options_are_refused(server: Server, produced: dict[str, Any]) -> None:
    url = f"{server.url}/v1/topics/{TOPIC}"
    for route, headers in (("/events", SSE), ("/partitions/0/records", {})):
        answer = httpx.get(f"{url}{route}", params={"decode_values": "avro"}, headers=headers)
        assert answer.status_code == 400, answer.text
        assert answer.json()["code"] == "INVALID_PARAMETER"
    batches = httpx.get(
        f"{url}/partitions/0/records",
        params={"decode_values": "schema"},
        headers={"Accept": "application/vnd.sluice.record-batch"},
    )
    assert batches.status_code == 406, batches.text
