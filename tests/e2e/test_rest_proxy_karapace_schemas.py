"""REST Proxy v2's schema formats on a real `sluice serve`: the cases from Karapace's
tests/integration/kafka_rest_apis/test_rest.py and test_rest_consumer.py (Apache-2.0) that
need a schema registry (avro, jsonschema and protobuf produce and reads, schema ids), with
their requests, statuses, error codes and bodies. The registry is the node's own, under
`/schema-registry`. Karapace's Kafka-side setup goes through Sluice's API (karapace_rest).

Karapace's `test_publish_with_schema_id_of_another_subject_novalidation` is not ported: it
needs Karapace's `name_strategy_validation = false`, and Sluice always checks that a schema id
is one of the topic's subject's (as Karapace does by default), so there is no setting to turn.

Karapace's JSON Schema case names its dialect `https://json.schema.org/draft/2020-12/schema`
(sic), which python-jsonschema reads as its latest draft; the registry refuses an unknown
meta-schema, so the case names draft 2020-12 by its real URL.

Karapace's debezium fixture schema (7.6 kB) is reduced here to what its case checks: a bytes
field inside a record inside a union, read back as base64."""

from __future__ import annotations

import base64
import io
import struct
from typing import Any

import fastavro
import httpx
import orjson
import pytest

from tests.e2e.karapace_rest import (
    AVRO_USER,
    REST_HEADERS,
    SCHEMA_AVRO_JSON,
    SCHEMA_DATA,
    TEST_OBJECTS_AVRO,
    assign,
    assign_and_seek_to_beginning,
    new_consumer,
    new_topic,
    produce,
    read_binary_value_as,
    read_records,
    register,
    rest_client,  # noqa: F401 (the rest fixture)
    send,
)

# Karapace's evolution of its User schema: one more field, with a default.
SCHEMA_AVRO_JSON_EVOLUTION = orjson.dumps(
    {
        **AVRO_USER,
        "fields": [
            *AVRO_USER["fields"],
            {"name": "favorite_quark", "type": "string", "default": "def"},
        ],
    }
).decode()
TEST_OBJECTS_AVRO_EVOLUTION = [
    {**o, "favorite_quark": quark}
    for o, quark in zip(TEST_OBJECTS_AVRO, ("up", "down", "charm"), strict=True)
]
SECOND_OBJ = [{"name": "doe"}, {"name": "john"}]
SCHEMA_1 = {"type": "record", "name": "Schema1", "fields": [{"name": "name", "type": "string"}]}
SCHEMA_2 = {
    "type": "record",
    "name": "Schema2",
    "fields": [{"name": "temperature", "type": "int"}],
}
COMPLEX_UNION_AVRO_SCHEMA_JSON = orjson.dumps(
    {
        "namespace": "io.aiven.minimal",
        "name": "MinimalUnionTest",
        "type": "record",
        "fields": [
            {"name": "id", "type": "string"},
            {
                "name": "attrs",
                "type": {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "Attr",
                        "fields": [
                            {"name": "k", "type": "string"},
                            {"name": "v", "type": ["null", "string", "long", "double", "boolean"]},
                        ],
                    },
                },
            },
            {"name": "props", "type": {"type": "map", "values": ["null", "string"]}},
        ],
    }
).decode()
COMPLEX_UNION_AVRO_RECORDS = [
    {
        "id": "one",
        "attrs": [
            {"k": "text", "v": "value"},
            {"k": "count", "v": 5},
            {"k": "ratio", "v": 1.5},
            {"k": "flag", "v": True},
            {"k": "empty", "v": None},
        ],
        "props": {"present": "yes", "missing": None},
    }
]
DEBEZIUM_BYTES_SCHEMA = {
    "type": "record",
    "name": "envelope",
    "namespace": "fixture_5f3a2c1d",
    "fields": [
        {
            "name": "after",
            "default": None,
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "value",
                    "fields": [
                        {"name": "id", "type": "long"},
                        {
                            "name": "probability",
                            "type": {
                                "type": "record",
                                "name": "VariableScaleDecimal",
                                "namespace": "io.debezium.data",
                                "fields": [
                                    {"name": "scale", "type": "int"},
                                    {"name": "value", "type": "bytes"},
                                ],
                            },
                        },
                    ],
                },
            ],
        },
        {"name": "op", "type": "string"},
    ],
}
DEBEZIUM_BYTES_RECORD = {
    "after": {"id": 1, "probability": {"scale": 2, "value": b"\x01\x02"}},
    "op": "c",
}


def check_successful_publish_response(
    res: httpx.Response, objects: list[Any], partition_id: int | None = None
) -> None:
    assert res.is_success, res.text
    doc = res.json()
    assert "value_schema_id" in doc and "offsets" in doc
    assert len(doc["offsets"]) == len(objects)
    for o in doc["offsets"]:
        assert isinstance(o["offset"], int) and isinstance(o["partition"], int)
        if partition_id is not None:
            assert o["partition"] == partition_id


def test_content_types_avro(rest: httpx.Client) -> None:
    """test_content_types' avro case: v1's avro media type takes an avro body."""
    tn = new_topic(rest)
    payload = {
        "value_schema": SCHEMA_AVRO_JSON,
        "records": [{"value": o} for o in TEST_OBJECTS_AVRO],
    }
    res = rest.post(
        f"topics/{tn}", json=payload, headers={"Content-Type": "application/vnd.kafka.avro.v1+json"}
    )
    assert res.is_success, res.text


def test_avro_publish_primitive_schema(rest: httpx.Client) -> None:
    topic_str = new_topic(rest)
    topic_int = new_topic(rest)
    for topic, value_schema, records in [
        (topic_str, '"string"', [{"value": "foobar"}]),
        (topic_str, '{"type":"string"}', [{"value": "foobar2"}]),
        (topic_int, '"int"', [{"value": 1}]),
        (topic_int, '{"type":"int"}', [{"value": 2}]),
    ]:
        res = rest.post(
            f"/topics/{topic}",
            json={"value_schema": value_schema, "records": records},
            headers=REST_HEADERS["avro"],
        )
        assert res.is_success, res.text
        assert "offsets" in res.json()


def test_avro_publish(rest: httpx.Client) -> None:
    tn = new_topic(rest)
    other_tn = new_topic(rest)
    header = REST_HEADERS["avro"]
    new_schema_id = register(rest, other_tn, SCHEMA_AVRO_JSON_EVOLUTION)
    for pl_type in ["key", "value"]:
        assert register(rest, f"{tn}-{pl_type}", SCHEMA_AVRO_JSON_EVOLUTION) == new_schema_id
    for url in [f"/topics/{tn}", f"/topics/{tn}/partitions/0"]:
        partition_id = 0 if "partition" in url else None
        for pl_type in ["key", "value"]:
            correct_payload = {
                f"{pl_type}_schema": SCHEMA_AVRO_JSON,
                "records": [{pl_type: o} for o in TEST_OBJECTS_AVRO],
            }
            res = rest.post(url, json=correct_payload, headers=header)
            check_successful_publish_response(res, TEST_OBJECTS_AVRO, partition_id)
            pre_publish_payload = {
                f"{pl_type}_schema_id": new_schema_id,
                "records": [{pl_type: o} for o in TEST_OBJECTS_AVRO_EVOLUTION],
            }
            res = rest.post(f"/topics/{tn}", json=pre_publish_payload, headers=header)
            check_successful_publish_response(res, TEST_OBJECTS_AVRO_EVOLUTION, partition_id)
            unknown_payload = {
                f"{pl_type}_schema_id": 666,
                "records": [{pl_type: o} for o in SECOND_OBJ],
            }
            res = rest.post(url, json=unknown_payload, headers=header)
            assert res.status_code == 422


def test_publish_with_incompatible_data(rest: httpx.Client) -> None:
    topic_name = new_topic(rest)
    schema_1_id = register(rest, f"{topic_name}-value", orjson.dumps(SCHEMA_1).decode())
    res = produce(
        rest,
        topic_name,
        "avro",
        {"value_schema_id": str(schema_1_id), "records": [{"value": {"name": "Foobar"}}]},
    )
    assert res.status_code == 200, res.text
    res = produce(
        rest,
        topic_name,
        "avro",
        {"value_schema_id": str(schema_1_id), "records": [{"value": {"temperature": 25}}]},
    )
    assert res.status_code == 422
    assert res.json()["error_code"] == 42205
    assert "Object does not fit to stored schema" in res.json()["message"]


def test_publish_with_incompatible_schema(rest: httpx.Client) -> None:
    """Karapace answers a schema the subject refuses (incompatible) with 408, 40801."""
    topic_name = new_topic(rest)
    schema_1 = orjson.dumps(SCHEMA_1).decode()
    res = produce(
        rest,
        topic_name,
        "avro",
        {"value_schema": schema_1, "records": [{"value": {"name": "Foobar"}}]},
    )
    assert res.status_code == 200, res.text
    schema_2 = orjson.dumps(SCHEMA_2).decode()
    res = produce(
        rest,
        topic_name,
        "avro",
        {"value_schema": schema_2, "records": [{"value": {"temperature": 25}}]},
    )
    assert res.status_code == 408
    assert res.json()["error_code"] == 40801
    assert "Error when registering schema" in res.json()["message"]


def test_publish_with_schema_id_of_another_subject(rest: httpx.Client) -> None:
    """A schema id registered under another subject than the topic's is refused."""
    topic_name = new_topic(rest)
    schema_1_id = register(rest, f"{topic_name}-value", orjson.dumps(SCHEMA_1).decode())
    schema_2_id = register(rest, "some-other-subject-value", orjson.dumps(SCHEMA_2).decode())
    res = produce(
        rest,
        topic_name,
        "avro",
        {"value_schema_id": schema_2_id, "records": [{"value": {"temperature": 25}}]},
    )
    assert res.status_code == 422
    assert res.json()["error_code"] == 42205
    assert f"Invalid schema. format = AVRO, schema_id = {schema_2_id}" in res.json()["message"]
    res = produce(
        rest,
        topic_name,
        "avro",
        {"value_schema_id": schema_1_id, "records": [{"value": {"name": "Mr. Mustache"}}]},
    )
    assert res.status_code == 200


@pytest.mark.parametrize(
    ("schema_type", "schema", "expected_error_message"),
    [
        (
            "AVRO",
            {
                "type": "record",
                "namespace": "karapace.test",
                "name": "IncompatibleDataTest",
                "fields": [
                    {"name": "validField", "type": "string"},
                    {"name": "invalidField", "type": "int"},
                ],
            },
            "Object does not fit to stored schema",
        ),
        (
            "JSON",
            {
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "$id": "https://example.com/json.schema.test",
                "title": "JSON Schema Test",
                "description": "a description",
                "type": "object",
                "properties": {
                    "validField": {"type": "string"},
                    "invalidField": {"type": "integer"},
                },
            },
            "'not an integer' is not of type 'integer'\n\n"
            "Failed validating 'type' in schema['properties']['invalidField']:\n"
            "    {'type': 'integer'}\n\nOn instance['invalidField']:\n    'not an integer'",
        ),
    ],
    ids=["Avro schema, incompatible data", "JSONSchema, incompatible data"],
)
def test_publish_invalid_data_for_schema(
    rest: httpx.Client, schema_type: str, schema: dict[str, Any], expected_error_message: str
) -> None:
    topic_name = new_topic(rest)
    schema_id = register(rest, f"{topic_name}-value", orjson.dumps(schema).decode(), schema_type)
    payload = {
        "value_schema_id": schema_id,
        "records": [{"value": {"validField": "valid value", "invalidField": "not an integer"}}],
    }
    fmt = "jsonschema" if schema_type == "JSON" else "avro"
    res = rest.post(f"/topics/{topic_name}", json=payload, headers=REST_HEADERS[fmt])
    assert res.status_code == 422
    assert res.json()["error_code"] == 42205
    assert res.json()["message"] == expected_error_message


@pytest.mark.parametrize("trail", ["", "/"])
def test_publish_consume_avro(rest: httpx.Client, trail: str) -> None:
    header = REST_HEADERS["avro"]
    group_name = "e2e_group"
    instance_id = new_consumer(rest, group_name, fmt="avro", trail=trail)
    tn = new_topic(rest)
    assign(rest, group_name, instance_id, tn, header, trail)
    schema, objects = SCHEMA_DATA["avro"]
    res = rest.post(
        f"topics/{tn}{trail}",
        json={"value_schema": schema, "records": [{"value": o} for o in objects]},
        headers=header,
    )
    assert res.is_success, res.text
    resp = read_records(rest, group_name, instance_id, header, trail=trail)
    assert resp.is_success, resp.text
    assert [x["value"] for x in resp.json()] == objects


def test_consume_complex_union_avro_schema_does_not_500(rest: httpx.Client) -> None:
    header = REST_HEADERS["avro"]
    group_name = "complex_union_group"
    topic_name = new_topic(rest, prefix="complex_union")
    res = rest.post(
        f"topics/{topic_name}",
        json={
            "value_schema": COMPLEX_UNION_AVRO_SCHEMA_JSON,
            "records": [{"value": o} for o in COMPLEX_UNION_AVRO_RECORDS],
        },
        headers=header,
    )
    assert res.is_success, res.text
    instance_id = new_consumer(rest, group_name, fmt="avro")
    assign_and_seek_to_beginning(rest, group_name, instance_id, topic_name, header)
    resp = read_records(rest, group_name, instance_id, header)
    assert resp.is_success, resp.text
    assert [item["value"] for item in resp.json()] == COMPLEX_UNION_AVRO_RECORDS


def test_consume_debezium_bytes_schema_does_not_500(rest: httpx.Client) -> None:
    header = REST_HEADERS["avro"]
    group_name = "debezium_bytes_group"
    topic_name = new_topic(rest, prefix="debezium_bytes")
    schema_id = register(rest, f"{topic_name}-value", orjson.dumps(DEBEZIUM_BYTES_SCHEMA).decode())
    out = io.BytesIO()
    out.write(struct.pack(">bI", 0, schema_id))
    fastavro.schemaless_writer(
        out, fastavro.parse_schema(DEBEZIUM_BYTES_SCHEMA), DEBEZIUM_BYTES_RECORD
    )
    send(rest, topic_name, [out.getvalue()])
    instance_id = new_consumer(rest, group_name, fmt="avro")
    assign_and_seek_to_beginning(rest, group_name, instance_id, topic_name, header)
    resp = read_records(rest, group_name, instance_id, header)
    assert resp.is_success, resp.text
    [message] = resp.json()
    assert (
        message["value"]["after"]["probability"]["value"] == base64.b64encode(b"\x01\x02").decode()
    )


def test_consume_avro_key_deserialization_error_fallback(rest: httpx.Client) -> None:
    """A key that is not Avro's wire format comes back as binary (base64) to an avro instance."""
    topic_name = new_topic(rest, prefix="avro_")
    publish_payload = base64.b64encode(b"testkey").decode()
    res = rest.post(
        f"topics/{topic_name}",
        json={"records": [{"key": publish_payload}]},
        headers=REST_HEADERS["binary"],
    )
    assert res.is_success, res.text
    headers = REST_HEADERS["avro"]
    group_name = "e2e_group_avro"
    instance_id = new_consumer(rest, group_name, fmt="avro")
    assign(rest, group_name, instance_id, topic_name, headers)
    res = read_records(rest, group_name, instance_id, headers, "timeout=1000")
    assert res.is_success, res.text
    for record in res.json():
        assert record["key"] == publish_payload


@pytest.mark.parametrize("fmt", ["avro", "protobuf"])
def test_consume_graceful_deserialization_error_handling(rest: httpx.Client, fmt: str) -> None:
    """A binary record read by a schema-format instance: 422 naming the format."""
    resp = read_binary_value_as(rest, fmt)
    assert resp.status_code == 422, resp.text
    assert f"value deserialization error for format {fmt}" in resp.json()["message"]
