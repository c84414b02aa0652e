"""REST Proxy v2 consumer instances on a real `sluice serve`: the cases from Karapace's
tests/integration/kafka_rest_apis/test_rest_consumer.py (Apache-2.0) that need no schema
registry: lifecycle, assignments, subscriptions (topics and patterns), seeks, commits and
committed offsets, reads in both embedded formats, timeouts and how `max_bytes` bounds a read.
Where Sluice answers otherwise, the test says why; the avro and protobuf cases are in
test_rest_proxy_karapace_schemas.

Reads wait for an instance's fetch.min.bytes (see karapace_rest.new_consumer), and the
timeouts of test_consume_timeout are a fifth of Karapace's, to keep the suite fast."""

from __future__ import annotations

import base64
import random
import time
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest

from tests.e2e.karapace_rest import (
    CONSUMER_VALID_PAYLOAD,
    REST_HEADERS,
    assign,
    assign_and_seek_to_beginning,
    new_consumer,
    new_random_name,
    new_topic,
    read_binary_value_as,
    read_records,
    rest_client,  # noqa: F401 (the rest fixture)
    send,
)

TRAILS = pytest.mark.parametrize("trail", ["", "/"])


def simple_messages(num: int) -> list[bytes]:
    return [f"message_{i}".encode() for i in range(num)]


def sized_messages(num: int, size: int) -> list[bytes]:
    values = []
    for i in range(num):
        prefix = f"msg_{i}_".encode()
        values.append(prefix + b"x" * (size - len(prefix)))
    return values


def accepting_only(fmt: str) -> dict[str, str]:
    """The format's headers, accepting its embedded format alone (as Karapace's reads do)."""
    return {**REST_HEADERS[fmt], "Accept": f"application/vnd.kafka.{fmt}.v2+json"}


def at_beginning(
    rest: httpx.Client,
    group: str,
    fmt: str,
    values: list[bytes],
    trail: str = "",
    payload_override: dict[str, Any] | None = None,
) -> tuple[str, str]:
    """A new `fmt` instance of the group and a new topic holding `values`, the instance assigned
    the topic's partition and at its beginning: (instance, topic)."""
    instance = new_consumer(rest, group, fmt=fmt, trail=trail, payload_override=payload_override)
    topic = new_topic(rest)
    send(rest, topic, values)
    assign_and_seek_to_beginning(rest, group, instance, topic, REST_HEADERS[fmt], trail=trail)
    return instance, topic


def committed(rest: httpx.Client, path: str, topic: str, header: dict[str, str]) -> dict[str, Any]:
    """GET .../offsets with its body, as v2 clients send it; the one partition's entry."""
    body = {"partitions": [{"topic": topic, "partition": 0}]}
    res = rest.request("GET", path, headers=header, json=body)
    assert res.is_success, res.text
    data = res.json()
    assert "offsets" in data and len(data["offsets"]) == 1, data
    entry: dict[str, Any] = data["offsets"][0]
    assert entry["topic"] == topic and entry["partition"] == 0
    return entry


def commit(rest: httpx.Client, path: str, topic: str, offset: int, header: dict[str, str]) -> None:
    """Commit `offset` of partition 0; the committed offset then reads as the next one."""
    at = {"offsets": [{"topic": topic, "partition": 0, "offset": offset}]}
    res = rest.post(path, json=at, headers=header)
    assert res.is_success, res.text
    assert committed(rest, path, topic, header)["offset"] == offset + 1


@TRAILS
def test_create_and_delete(rest: httpx.Client, trail: str) -> None:
    header = REST_HEADERS["json"]
    group_name = "test_group"
    payload = {**CONSUMER_VALID_PAYLOAD, "format": "json"}
    resp = rest.post(f"/consumers/{group_name}{trail}", json=payload, headers=header)
    assert resp.is_success, resp.text
    body = resp.json()
    assert "base_uri" in body
    instance_id = body["instance_id"]
    with_name = {**payload, "name": instance_id}
    resp = rest.post(f"/consumers/{group_name}{trail}", json=with_name, headers=header)
    assert resp.status_code == 409
    invalid_fetch = {**payload, "fetch.min.bytes": -10}
    resp = rest.post(f"/consumers/{group_name}{trail}", json=invalid_fetch, headers=header)
    assert resp.status_code == 422
    resp = rest.delete(f"/consumers/{group_name}/instances/{instance_id}{trail}", headers=header)
    assert resp.is_success
    resp = rest.post(f"/consumers/{group_name}{trail}", json=with_name, headers=header)
    assert resp.is_success
    resp = rest.delete(f"/consumers/{group_name}/instances/random_name{trail}")
    assert resp.status_code == 404


@TRAILS
def test_assignment(rest: httpx.Client, trail: str) -> None:
    header = REST_HEADERS["json"]
    instance_id = new_consumer(rest, "assignment_group", fmt="json", trail=trail)
    assign_path = f"/consumers/assignment_group/instances/{instance_id}/assignments{trail}"
    res = rest.get(assign_path, headers=header)
    assert res.is_success
    assert res.json()["partitions"] == []
    topic_name = new_topic(rest)
    res = rest.post(
        assign_path, headers=header, json={"partitions": [{"topic": topic_name, "partition": 0}]}
    )
    assert res.is_success
    res = rest.get(assign_path, headers=header)
    assert res.is_success
    data = res.json()
    assert len(data["partitions"]) == 1
    assert data["partitions"][0] == {"topic": topic_name, "partition": 0}


@TRAILS
def test_subscription(rest: httpx.Client, trail: str) -> None:
    group_name = new_random_name("group")
    header = REST_HEADERS["binary"]
    topic_name = new_topic(rest)
    instance_id = new_consumer(rest, group_name, fmt="binary", trail=trail)
    sub_path = f"/consumers/{group_name}/instances/{instance_id}/subscription{trail}"
    res = rest.get(sub_path, headers=header)
    assert res.is_success
    assert res.json()["topics"] == []
    res = rest.post(sub_path, json={"topics": [topic_name]}, headers=header)
    assert res.is_success
    res = rest.get(sub_path, headers=header)
    assert res.is_success
    assert res.json()["topics"] == [topic_name]
    send(rest, topic_name, 3 * [b"foo"])
    resp = read_records(rest, group_name, instance_id, header, trail=trail)
    assert resp.is_success, resp.text
    assert len(resp.json()) == 3
    res = rest.delete(sub_path, headers=header)
    assert res.is_success
    res = rest.get(sub_path, headers=header)
    assert res.is_success
    assert res.json()["topics"] == []
    prefix = f"test_subscription_{bool(trail)}{random.getrandbits(32)}"
    pattern_topics = [new_topic(rest, prefix=f"{prefix}{i}") for i in range(3)]
    res = rest.post(sub_path, json={"topic_pattern": f"{prefix}.*"}, headers=REST_HEADERS["json"])
    assert res.is_success
    resp = read_records(rest, group_name, instance_id, header, trail=trail)
    assert resp.is_success
    res = rest.get(sub_path, headers=header)
    assert res.is_success
    assert set(res.json()["topics"]) == set(pattern_topics)
    for t in pattern_topics:
        send(rest, t, 3 * [b"bar"])
    resp = read_records(rest, group_name, instance_id, header, trail=trail)
    assert resp.is_success, resp.text
    assert len(resp.json()) == 9
    res = rest.post(
        sub_path,
        json={"topics": [topic_name], "topic_pattern": "baz"},
        headers=REST_HEADERS["json"],
    )
    assert res.status_code == 409
    assert res.json() == {
        "error_code": 40903,
        "message": "IllegalStateError: You must choose only one way to configure your "
        "consumer: (1) subscribe to specific topics by name, (2) subscribe to topics matching "
        "a regex pattern, (3) assign itself specific topic-partitions.",
    }
    assign_path = f"/consumers/{group_name}/instances/{instance_id}/assignments{trail}"
    assign_payload = {"partitions": [{"topic": topic_name, "partition": 0}]}
    res = rest.post(assign_path, headers=REST_HEADERS["json"], json=assign_payload)
    assert res.status_code == 409
    res = rest.post(sub_path, json={"topics": topic_name}, headers=REST_HEADERS["json"])
    assert res.status_code == 422
    res = rest.post(
        sub_path, json={"topic_pattern": ["not", "a", "string"]}, headers=REST_HEADERS["json"]
    )
    assert res.status_code == 422


@TRAILS
def test_seek(rest: httpx.Client, trail: str) -> None:
    """A seek past the log's end is taken, as Kafka's seek() takes it: the next read finds
    the position out of range and starts where auto.offset.reset says. Karapace's suite
    asks `positions/` + `/beginning` (a `//` its aiohttp app merges); the slash goes last here."""
    group = "seek_group"
    instance_id = new_consumer(rest, group, trail=trail)
    positions = f"/consumers/{group}/instances/{instance_id}/positions"
    seek_path = f"{positions}{trail}"
    topic_name = new_topic(rest)
    assign(rest, group, instance_id, topic_name, REST_HEADERS["json"], trail)
    seek_payload = {"offsets": [{"topic": topic_name, "partition": 0, "offset": 10}]}
    res = rest.post(seek_path, json=seek_payload, headers=REST_HEADERS["json"])
    assert res.is_success, res.text
    extreme_payload = {"partitions": [{"topic": topic_name, "partition": 0}]}
    for pos in ["beginning", "end"]:
        url = f"{positions}/{pos}{trail}"
        res = rest.post(url, json=extreme_payload, headers=REST_HEADERS["json"])
        assert res.is_success, res.text
    invalid_payload = {"offsets": [{"topic": "faulty", "partition": 0, "offset": 10}]}
    res = rest.post(seek_path, json=invalid_payload, headers=REST_HEADERS["json"])
    assert res.status_code == 409


@TRAILS
def test_offsets(rest: httpx.Client, trail: str) -> None:
    group_name = "offset_group"
    header = REST_HEADERS["binary"]
    instance_id = new_consumer(rest, group_name, fmt="binary", trail=trail)
    topic_name = new_topic(rest)
    offsets_path = f"/consumers/{group_name}/instances/{instance_id}/offsets{trail}"
    assign(rest, group_name, instance_id, topic_name, header, trail)
    commit(rest, offsets_path, topic_name, 0, header)
    commit(rest, offsets_path, topic_name, 1, header)


@TRAILS
def test_offsets_no_payload(rest: httpx.Client, trail: str) -> None:
    """Karapace also checks its log for librdkafka's "No offset stored" warning: a commit with
    nothing consumed yet is not an error, which is what the answer shows here."""
    group_name = "offset_group_no_payload"
    header = REST_HEADERS["binary"]
    instance_id = new_consumer(
        rest,
        group_name,
        fmt="binary",
        trail=trail,
        payload_override={"auto.commit.enable": "false"},
    )
    topic_name = new_topic(rest)
    offsets_path = f"/consumers/{group_name}/instances/{instance_id}/offsets{trail}"
    assign(rest, group_name, instance_id, topic_name, header, trail)
    send(rest, topic_name, [b"message-value"])
    res = rest.post(offsets_path, headers=header, json={})
    assert res.is_success, res.text
    resp = read_records(rest, group_name, instance_id, header, trail=trail)
    assert resp.is_success, resp.text
    assert len(resp.json()) == 1
    res = rest.post(offsets_path, headers=header, json={})
    assert res.is_success, res.text
    assert committed(rest, offsets_path, topic_name, header)["offset"] == 1
    commit(rest, offsets_path, topic_name, 1, header)


VALUES = {
    "json": [orjson.dumps({"foo": f"bar{i}"}) for i in range(3)],
    "binary": [f"val{i}".encode() for i in range(3)],
}
DESERIALIZERS: dict[str, Callable[[Any], bytes]] = {
    "binary": base64.b64decode,
    "json": orjson.dumps,
}


@TRAILS
def test_consume(rest: httpx.Client, trail: str) -> None:
    group_name = "consume_group"
    for fmt in ["binary", "json"]:
        instance_id, topic_name = at_beginning(rest, group_name, fmt, VALUES[fmt], trail=trail)
        resp = read_records(rest, group_name, instance_id, accepting_only(fmt), trail=trail)
        assert resp.is_success, resp.text
        data = resp.json()
        assert len(data) == len(VALUES[fmt])
        for i in range(len(VALUES[fmt])):
            assert data[i]["topic"] == topic_name
            assert data[i]["partition"] == 0
            assert data[i]["offset"] >= 0
            assert data[i]["timestamp"] > 0
            assert DESERIALIZERS[fmt](data[i]["value"]) == VALUES[fmt][i]


def test_consume_timeout(rest: httpx.Client) -> None:
    group_name = "consume_group"
    for fmt in ["binary", "json"]:
        instance_id, _ = at_beginning(
            rest,
            group_name,
            fmt,
            VALUES[fmt],
            payload_override={"consumer.request.timeout.ms": 2200},
        )
        header = accepting_only(fmt)
        resp = read_records(rest, group_name, instance_id, header, "timeout=1000")
        assert resp.is_success, resp.text
        data = resp.json()
        assert [DESERIALIZERS[fmt](r["value"]) for r in data] == VALUES[fmt]
        # An empty read lasts the read's timeout, else the instance's request timeout.
        for query, low, high in [("timeout=1000", 1.0, 2.0), ("", 2.2, 3.2)]:
            start_time = time.monotonic()
            resp = read_records(rest, group_name, instance_id, header, query)
            duration = time.monotonic() - start_time
            assert resp.is_success
            assert resp.json() == []
            assert low <= duration < high


@pytest.mark.parametrize("fmt", ["binary", "json"])
def test_consume_graceful_deserialization_error_handling(rest: httpx.Client, fmt: str) -> None:
    """A binary record read by a json instance: Karapace answers 422 ("value deserialization
    error for format json"), Confluent's proxy fails the read; Sluice gives the value as a
    JSON string (documented), so one undecodable record does not stop the instance."""
    resp = read_binary_value_as(rest, fmt)
    assert resp.status_code == 200, resp.text
    [record] = resp.json()
    assert record["value"] == ("dGVzdA==" if fmt == "binary" else "test")


def test_consume_bulk_messages(rest: httpx.Client) -> None:
    group_name = "bulk_consume_group"
    num_messages = 100
    instance_id, topic_name = at_beginning(
        rest, group_name, "binary", simple_messages(num_messages)
    )
    resp = read_records(rest, group_name, instance_id, accepting_only("binary"), "timeout=10000")
    assert resp.is_success, resp.text
    data = resp.json()
    assert len(data) >= num_messages * 0.9
    for i, msg in enumerate(data[:10]):
        assert msg["topic"] == topic_name
        assert msg["partition"] == 0
        assert msg["offset"] == i
        assert base64.b64decode(msg["value"]) == f"message_{i}".encode()


def test_consume_with_max_bytes(rest: httpx.Client) -> None:
    """Records are counted by their key and value bytes, as Confluent's proxy and Karapace
    count them, not by the batches they are stored in (one batch here)."""
    group_name = "max_bytes_group"
    message_size = 1000
    num_messages = 50
    values = sized_messages(num_messages, message_size)
    instance_id, _ = at_beginning(rest, group_name, "binary", values)
    max_bytes = 10000
    resp = read_records(
        rest,
        group_name,
        instance_id,
        accepting_only("binary"),
        f"timeout=10000&max_bytes={max_bytes}",
    )
    assert resp.is_success, resp.text
    data = resp.json()
    assert len(data) > 0
    assert len(data) < num_messages
    total_bytes = sum(len(base64.b64decode(msg["value"])) for msg in data)
    assert total_bytes <= max_bytes * 1.5
    for i, msg in enumerate(data):
        assert msg["offset"] == i


def test_consume_with_small_max_bytes(rest: httpx.Client) -> None:
    group_name = "small_max_bytes_group"
    instance_id, _ = at_beginning(rest, group_name, "binary", simple_messages(5))
    header = accepting_only("binary")
    resp = read_records(rest, group_name, instance_id, header, "timeout=5000&max_bytes=10")
    assert resp.is_success, resp.text
    data = resp.json()
    assert 1 <= len(data) <= 2


def test_consume_estimated_messages_calculation(rest: httpx.Client) -> None:
    group_name = "estimated_messages_group"
    num_messages = 200
    values = [orjson.dumps({"id": i, "data": f"item{i}"}) for i in range(num_messages)]
    instance_id, _ = at_beginning(rest, group_name, "json", values)
    header = accepting_only("json")
    start_time = time.monotonic()
    resp = read_records(rest, group_name, instance_id, header, "timeout=10000&max_bytes=1000000")
    duration = time.monotonic() - start_time
    assert resp.is_success, resp.text
    data = resp.json()
    assert len(data) >= num_messages * 0.9
    assert duration < 15.0
    assert data[0]["offset"] == 0
    assert data[0]["value"]["id"] == 0
