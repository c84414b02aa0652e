"""Topic admin: create, list, describe, alter (configs, partitions) and delete."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.api.support import (
    Client,
    Start,
    create_topic,
    describe,
    end_offsets,
    fetch_all,
    problem,
    produce,
)
from tests.engine.test_config import KAFKA_DEFAULTS


def empty_partition(partition: int, node: int = 0) -> dict[str, object]:
    return {
        "partition": partition,
        "leader": node,
        "replicas": [node],
        "isr": [node],
        "eligible_leader_replicas": [],
        "offline_replicas": [],
        "log_start_offset": 0,
        "local_log_start_offset": 0,
        "high_watermark": 0,
        "log_end_offset": 0,
        "size_bytes": 0,
    }


async def list_names(client: Client) -> list[dict[str, Any]]:
    resp = await client.get("/v1/topics")
    assert resp.status == 200
    body: dict[str, list[dict[str, Any]]] = await resp.json()
    assert set(body) == {"topics"}
    return sorted(body["topics"], key=lambda t: str(t["name"]))


# -- create -------------------------------------------------------------------------------------


async def test_create_with_defaults_answers_201_with_the_description(client: Client) -> None:
    """POST {"name"} makes a one-partition topic with Kafka's default configs."""
    resp = await client.post("/v1/topics", json={"name": "orders"})
    assert resp.status == 201
    assert resp.content_type == "application/json"
    created = await resp.json()
    assert created["name"] == "orders"
    assert created["configs"] == KAFKA_DEFAULTS
    assert created["overrides"] == {}
    assert created["partitions"] == [empty_partition(0)]
    assert await describe(client, "orders") == created


async def test_create_with_partitions_and_configs(client: Client) -> None:
    """Partitions and Kafka-named config overrides are applied and normalised."""
    configs = {"retention.ms": "1000", "cleanup.policy": "compact", "max.message.bytes": 2048}
    created = await create_topic(client, "events", partitions=3, configs=configs)
    assert created["partitions"] == [empty_partition(p) for p in range(3)]
    assert created["configs"] == {
        **KAFKA_DEFAULTS,
        "retention.ms": 1000,
        "cleanup.policy": "compact",
        "max.message.bytes": 2048,
    }
    assert set(created["overrides"]) == set(configs)


async def test_create_with_replication_factor_one(client: Client) -> None:
    resp = await client.post("/v1/topics", json={"name": "t", "replication_factor": 1})
    assert resp.status == 201


async def test_the_leader_is_this_node(start: Start) -> None:
    client = await start(node_id=7)
    created = await create_topic(client, "t", partitions=2)
    assert created["partitions"] == [empty_partition(0, 7), empty_partition(1, 7)]


async def test_list_topics(client: Client) -> None:
    assert await list_names(client) == []
    await create_topic(client, "b", partitions=3)
    await create_topic(client, "a")
    assert await list_names(client) == [
        {"name": "a", "partitions": 1},
        {"name": "b", "partitions": 3},
    ]


async def test_create_existing_topic_is_409_and_changes_nothing(client: Client) -> None:
    before = await create_topic(client, "t", configs={"retention.ms": 5})
    resp = await client.post(
        "/v1/topics", json={"name": "t", "partitions": 4, "configs": {"retention.ms": 9}}
    )
    await problem(resp, 409, "TOPIC_ALREADY_EXISTS")
    assert await describe(client, "t") == before


async def test_names_that_collide_in_metrics_are_refused(client: Client) -> None:
    """Like Kafka, 'a.b' and 'a_b' cannot both exist."""
    await create_topic(client, "a.b")
    await problem(await client.post("/v1/topics", json={"name": "a_b"}), 400, "INVALID_TOPIC_NAME")
    assert await list_names(client) == [{"name": "a.b", "partitions": 1}]


async def test_create_topic_with_the_longest_legal_name(client: Client) -> None:
    name = "x" * 249
    resp = await client.post("/v1/topics", json={"name": name})
    assert resp.status == 201, await resp.text()
    assert [t["name"] for t in await list_names(client)] == [name]


INVALID_CREATES: list[tuple[dict[str, Any], str]] = [
    ({}, "INVALID_TOPIC_NAME"),
    ({"name": ""}, "INVALID_TOPIC_NAME"),
    ({"name": None}, "INVALID_TOPIC_NAME"),
    ({"name": 5}, "INVALID_TOPIC_NAME"),
    ({"name": ["t"]}, "INVALID_TOPIC_NAME"),
    ({"name": "a b"}, "INVALID_TOPIC_NAME"),
    ({"name": "a/b"}, "INVALID_TOPIC_NAME"),
    ({"name": "ünï"}, "INVALID_TOPIC_NAME"),
    ({"name": "."}, "INVALID_TOPIC_NAME"),
    ({"name": ".."}, "INVALID_TOPIC_NAME"),
    ({"name": "x" * 250}, "INVALID_TOPIC_NAME"),
    ({"name": "t", "partitions": 0}, "INVALID_PARTITIONS"),
    ({"name": "t", "partitions": -1}, "INVALID_PARTITIONS"),
    ({"name": "t", "partitions": 10_001}, "INVALID_PARTITIONS"),
    ({"name": "t", "partitions": 2**70 // 2**10}, "INVALID_PARTITIONS"),
    ({"name": "t", "partitions": "3"}, "INVALID_PARTITIONS"),
    ({"name": "t", "partitions": 1.5}, "INVALID_PARTITIONS"),
    ({"name": "t", "partitions": 2.0}, "INVALID_PARTITIONS"),
    ({"name": "t", "partitions": True}, "INVALID_PARTITIONS"),
    ({"name": "t", "partitions": None}, "INVALID_PARTITIONS"),
    ({"name": "t", "replication_factor": 2}, "INVALID_REPLICATION_FACTOR"),
    ({"name": "t", "replication_factor": 0}, "INVALID_REQUEST"),
    ({"name": "t", "replication_factor": -1}, "INVALID_REQUEST"),
    ({"name": "t", "replication_factor": "1"}, "INVALID_REQUEST"),
    ({"name": "t", "replication_factor": True}, "INVALID_REQUEST"),
    ({"name": "t", "replication_factor": 1.0}, "INVALID_REQUEST"),
    ({"name": "t", "replication_factor": None}, "INVALID_REQUEST"),
    ({"name": "t", "configs": []}, "INVALID_CONFIG"),
    ({"name": "t", "configs": "retention.ms=1"}, "INVALID_CONFIG"),
    ({"name": "t", "configs": None}, "INVALID_CONFIG"),
    ({"name": "t", "configs": {"no.such.config": 1}}, "INVALID_CONFIG"),
    ({"name": "t", "configs": {"retention.ms": "soon"}}, "INVALID_CONFIG"),
    ({"name": "t", "configs": {"retention.ms": -2}}, "INVALID_CONFIG"),
    ({"name": "t", "configs": {"retention.ms": 1.5}}, "INVALID_CONFIG"),
    ({"name": "t", "configs": {"retention.ms": None}}, "INVALID_CONFIG"),
    ({"name": "t", "configs": {"segment.bytes": 13}}, "INVALID_CONFIG"),
    ({"name": "t", "configs": {"max.message.bytes": True}}, "INVALID_CONFIG"),
    ({"name": "t", "configs": {"cleanup.policy": "archive"}}, "INVALID_CONFIG"),
    ({"name": "t", "configs": {"cleanup.policy": 1}}, "INVALID_CONFIG"),
    ({"name": "t", "configs": {"min.cleanable.dirty.ratio": 1.5}}, "INVALID_CONFIG"),
    ({"name": "t", "configs": {"message.timestamp.type": "WallClock"}}, "INVALID_CONFIG"),
    ({"name": "t", "colour": "red"}, "INVALID_REQUEST"),
    ({"name": "t", "replicas": [0]}, "INVALID_REQUEST"),
]


async def test_invalid_create_is_400_and_creates_nothing(
    client: Client, subtests: pytest.Subtests
) -> None:
    for doc, code in INVALID_CREATES:
        with subtests.test(doc=doc):
            await problem(await client.post("/v1/topics", json=doc), 400, code)
    assert await list_names(client) == []


async def test_create_with_a_body_that_is_not_an_object(
    client: Client, subtests: pytest.Subtests
) -> None:
    for body in (b"", b"{", b"\xff\xfe", b'["t"]', b"null", b'"t"', b'{"name": "t"} x'):
        with subtests.test(body=body):
            resp = await client.post(
                "/v1/topics", data=body, headers={"Content-Type": "application/json"}
            )
            await problem(resp, 400, "INVALID_JSON")
    for content_type in ("text/plain", "application/x-www-form-urlencoded"):
        with subtests.test(content_type=content_type):
            resp = await client.post(
                "/v1/topics", data=b'{"name": "t"}', headers={"Content-Type": content_type}
            )
            await problem(resp, 415, "UNSUPPORTED_MEDIA_TYPE")
    assert await list_names(client) == []


# -- describe -----------------------------------------------------------------------------------


async def test_describe_reflects_appends(client: Client) -> None:
    await create_topic(client, "t", partitions=2)
    await produce(client, [{"value": i} for i in range(3)], partition=1)
    partitions = (await describe(client))["partitions"]
    assert partitions[0] == empty_partition(0)
    assert {
        k: partitions[1][k] for k in ("log_start_offset", "high_watermark", "log_end_offset")
    } == {"log_start_offset": 0, "high_watermark": 3, "log_end_offset": 3}
    assert partitions[1]["size_bytes"] > 61


async def test_describe_unknown_topic(client: Client) -> None:
    body = await problem(await client.get("/v1/topics/nope"), 404, "UNKNOWN_TOPIC")
    assert "nope" in body["detail"]


# -- alter --------------------------------------------------------------------------------------


async def test_alter_sets_and_removes_config_overrides(client: Client) -> None:
    await create_topic(client, "t", configs={"segment.ms": 60_000})
    resp = await client.patch("/v1/topics/t", json={"configs": {"retention.ms": 1000}})
    assert resp.status == 200
    altered = await resp.json()
    assert altered["configs"] == {**KAFKA_DEFAULTS, "segment.ms": 60_000, "retention.ms": 1000}
    assert altered["overrides"] == {"segment.ms": 60_000, "retention.ms": 1000}
    assert await describe(client) == altered

    resp = await client.patch("/v1/topics/t", json={"configs": {"retention.ms": None}})
    assert resp.status == 200
    assert (await resp.json())["configs"] == {**KAFKA_DEFAULTS, "segment.ms": 60_000}
    assert (await describe(client))["overrides"] == {"segment.ms": 60_000}


async def test_altered_configs_apply_to_the_next_append(client: Client) -> None:
    await create_topic(client, "t")
    await produce(client, [{"value": "x" * 200}])
    resp = await client.patch("/v1/topics/t", json={"configs": {"max.message.bytes": 150}})
    assert resp.status == 200
    resp = await client.post("/v1/topics/t/records", json={"records": [{"value": "x" * 200}]})
    await problem(resp, 413, "RECORD_TOO_LARGE")
    assert await end_offsets(client) == [1]


async def test_alter_grows_partitions(client: Client) -> None:
    await create_topic(client, "t")
    await produce(client, [{"value": 1}])
    resp = await client.patch("/v1/topics/t", json={"partitions": 3})
    assert resp.status == 200
    altered = await resp.json()
    assert [p["partition"] for p in altered["partitions"]] == [0, 1, 2]
    assert altered["partitions"][1:] == [empty_partition(1), empty_partition(2)]
    assert altered["partitions"][0]["log_end_offset"] == 1
    assert await list_names(client) == [{"name": "t", "partitions": 3}]
    result = await produce(client, [{"value": 2}], partition=2)
    assert result == {"results": [{"partition": 2, "base_offset": 0, "count": 1}]}


async def test_alter_to_the_same_partition_count_is_a_no_op(client: Client) -> None:
    before = await create_topic(client, "t", partitions=2)
    resp = await client.patch("/v1/topics/t", json={"partitions": 2})
    assert resp.status == 200
    assert await resp.json() == before


async def test_alter_with_an_empty_object_changes_nothing(client: Client) -> None:
    before = await create_topic(client, "t", configs={"retention.ms": 5})
    resp = await client.patch("/v1/topics/t", json={})
    assert resp.status == 200
    assert await resp.json() == before


INVALID_ALTERS: list[tuple[dict[str, Any], str]] = [
    ({"partitions": 1}, "INVALID_PARTITIONS"),
    ({"partitions": 0}, "INVALID_PARTITIONS"),
    ({"partitions": -3}, "INVALID_PARTITIONS"),
    ({"partitions": 10_001}, "INVALID_PARTITIONS"),
    ({"partitions": "3"}, "INVALID_PARTITIONS"),
    ({"partitions": 3.5}, "INVALID_PARTITIONS"),
    ({"partitions": None}, "INVALID_PARTITIONS"),
    ({"partitions": [3]}, "INVALID_PARTITIONS"),
    ({"configs": []}, "INVALID_CONFIG"),
    ({"configs": None}, "INVALID_CONFIG"),
    ({"configs": "retention.ms=1"}, "INVALID_CONFIG"),
    ({"configs": {"retention.ms": "soon"}}, "INVALID_CONFIG"),
    ({"configs": {"no.such.config": 1}}, "INVALID_CONFIG"),
    ({"configs": {"retention.ms": 1}, "partitions": 1}, "INVALID_PARTITIONS"),
    ({"configs": {"retention.ms": "soon"}, "partitions": 3}, "INVALID_CONFIG"),
    ({"name": "u"}, "INVALID_REQUEST"),
    ({"replication_factor": 1}, "INVALID_REQUEST"),
]


async def test_invalid_alter_is_400_and_changes_nothing(
    client: Client, subtests: pytest.Subtests
) -> None:
    before = await create_topic(client, "t", partitions=2, configs={"retention.ms": 5})
    for doc, code in INVALID_ALTERS:
        with subtests.test(doc=doc):
            await problem(await client.patch("/v1/topics/t", json=doc), 400, code)
            assert await describe(client) == before


@pytest.mark.parametrize("value", [True, 1.0])
async def test_alter_rejects_a_non_integer_equal_to_the_count(
    client: Client, value: object
) -> None:
    before = await create_topic(client, "t")
    await problem(
        await client.patch("/v1/topics/t", json={"partitions": value}), 400, "INVALID_PARTITIONS"
    )
    assert await describe(client) == before


async def test_alter_rejects_removing_an_unknown_config(client: Client) -> None:
    before = await create_topic(client, "t")
    resp = await client.patch("/v1/topics/t", json={"configs": {"no.such.config": None}})
    await problem(resp, 400, "INVALID_CONFIG")
    assert await describe(client) == before


async def test_alter_with_a_bad_body(client: Client, subtests: pytest.Subtests) -> None:
    before = await create_topic(client, "t")
    for body, content_type, status, code in [
        (b"{", "application/json", 400, "INVALID_JSON"),
        (b"[]", "application/json", 400, "INVALID_JSON"),
        (b"", "application/json", 400, "INVALID_JSON"),
        (b'{"partitions": 3}', "text/plain", 415, "UNSUPPORTED_MEDIA_TYPE"),
    ]:
        with subtests.test(body=body, content_type=content_type):
            resp = await client.patch(
                "/v1/topics/t", data=body, headers={"Content-Type": content_type}
            )
            await problem(resp, status, code)
            assert await describe(client) == before


async def test_alter_unknown_topic(client: Client) -> None:
    resp = await client.patch("/v1/topics/nope", json={"partitions": 2})
    await problem(resp, 404, "UNKNOWN_TOPIC")
    assert await list_names(client) == []


# -- delete -------------------------------------------------------------------------------------


async def test_delete_topic(client: Client) -> None:
    await create_topic(client, "t", partitions=2)
    await create_topic(client, "keep")
    await produce(client, [{"value": i} for i in range(5)], partition=0)
    resp = await client.delete("/v1/topics/t")
    assert resp.status == 204
    assert await resp.read() == b""
    await problem(await client.get("/v1/topics/t"), 404, "UNKNOWN_TOPIC")
    assert await list_names(client) == [{"name": "keep", "partitions": 1}]
    await problem(await client.delete("/v1/topics/t"), 404, "UNKNOWN_TOPIC")
    resp = await client.get("/v1/topics/t/partitions/0/records")
    await problem(resp, 404, "UNKNOWN_TOPIC")


async def test_a_recreated_topic_starts_empty(client: Client) -> None:
    await create_topic(client, "t")
    await produce(client, [{"value": i} for i in range(5)])
    assert (await client.delete("/v1/topics/t")).status == 204
    await create_topic(client, "t")
    assert await fetch_all(client) == []
    result = await produce(client, [{"value": "new"}])
    assert result == {"results": [{"partition": 0, "base_offset": 0, "count": 1}]}
    assert [r["value"] for r in await fetch_all(client)] == ["new"]


async def test_concurrent_creates_of_one_topic_make_it_once(client: Client) -> None:
    """Six creates of one name at once: one 201, five 409s, and the topic works."""
    answers = await asyncio.gather(
        *(client.post("/v1/topics", json={"name": "race", "partitions": 2}) for _ in range(6))
    )
    statuses = sorted(resp.status for resp in answers)
    assert statuses == [201, 409, 409, 409, 409, 409]
    for resp in answers:
        if resp.status == 409:
            await problem(resp, 409, "TOPIC_ALREADY_EXISTS")
    await produce(client, [{"value": 1}], topic="race", partition=1)
    assert await end_offsets(client, "race") == [0, 1]
