"""Confluent REST Proxy v2 compatibility in process: metadata and produce, as v2 clients send
them (v2 media types, raw JSON), and the v2 error body for every refusal, never a 500."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.produce.partitioner import partition_for_key
from tests.api.support import Client, Start
from tests.auth.support import bearer, binding, grant, make_key

V2 = "application/vnd.kafka.v2+json"
JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"


async def v2_error(answer: Any, status: int, error_code: int) -> str:
    """Check a v2 error answer; its message."""
    assert answer.status == status, await answer.text()
    assert answer.headers["Content-Type"] == V2
    doc = await answer.json(content_type=None)
    assert set(doc) == {"error_code", "message"}
    assert doc["error_code"] == error_code, doc
    message: str = doc["message"]
    return message


async def produce(
    client: Client, path: str, doc: object, media: str = JSON_V2, **headers: str
) -> Any:
    return await client.post(
        path, data=orjson.dumps(doc), headers={"Content-Type": media, **headers}
    )


async def v1_records(client: Client, topic: str, partition: int) -> list[dict[str, Any]]:
    answer = await client.get(f"/v1/topics/{topic}/partitions/{partition}/records")
    records: list[dict[str, Any]] = (await answer.json())["records"]
    return records


@pytest.fixture
async def topic(client: Client) -> str:
    created = await client.post("/v1/topics", json={"name": "orders", "partitions": 3})
    assert created.status == 201
    return "orders"


async def test_metadata_shapes(client: Client, topic: str) -> None:
    answer = await client.get("/topics")
    assert answer.headers["Content-Type"] == V2
    assert await answer.json(content_type=None) == [topic]
    doc = await (await client.get(f"/topics/{topic}")).json(content_type=None)
    assert doc["name"] == topic
    assert doc["configs"]["cleanup.policy"] == "delete"
    assert all(isinstance(v, str) for v in doc["configs"].values())
    replica = {"broker": 0, "leader": True, "in_sync": True}
    partitions = [{"partition": p, "leader": 0, "replicas": [replica]} for p in range(3)]
    assert doc["partitions"] == partitions
    listed = await client.get(f"/topics/{topic}/partitions")
    assert await listed.json(content_type=None) == partitions
    one = await client.get(f"/topics/{topic}/partitions/2")
    assert await one.json(content_type=None) == partitions[2]
    brokers = await client.get("/brokers")
    assert await brokers.json(content_type=None) == {"brokers": [0]}


async def test_paths_answer_alike_with_a_trailing_slash(client: Client, topic: str) -> None:
    for path in ("/topics", f"/topics/{topic}", f"/topics/{topic}/partitions/1", "/brokers"):
        plain = await client.get(path)
        slashed = await client.get(path + "/")
        assert slashed.status == plain.status == 200
        assert await slashed.read() == await plain.read()
    produced = await produce(client, f"/topics/{topic}/", {"records": [{"value": 1}]})
    assert produced.status == 200


async def test_partition_offsets_follow_the_log(client: Client, topic: str) -> None:
    path = f"/topics/{topic}/partitions/1/offsets"
    assert await (await client.get(path)).json(content_type=None) == {
        "beginning_offset": 0,
        "end_offset": 0,
    }
    await produce(
        client, f"/topics/{topic}/partitions/1", {"records": [{"value": i} for i in range(5)]}
    )
    await client.post(f"/v1/topics/{topic}/partitions/1/delete-records", json={"before_offset": 2})
    assert await (await client.get(path)).json(content_type=None) == {
        "beginning_offset": 2,
        "end_offset": 5,
    }


async def test_unknown_topic_and_partition(client: Client, topic: str) -> None:
    await v2_error(await client.get("/topics/missing"), 404, 40401)
    await v2_error(await client.get("/topics/missing/partitions"), 404, 40401)
    await v2_error(await client.get(f"/topics/{topic}/partitions/3"), 404, 40402)
    await v2_error(await client.get(f"/topics/{topic}/partitions/x/offsets"), 404, 404)
    await v2_error(
        await produce(client, "/topics/missing", {"records": [{"value": 1}]}), 404, 40401
    )
    await v2_error(
        await produce(client, f"/topics/{topic}/partitions/9", {"records": [{"value": 1}]}),
        404,
        40402,
    )


async def test_content_negotiation(client: Client, topic: str) -> None:
    plain = await client.get("/topics", headers={"Accept": "application/json"})
    assert plain.headers["Content-Type"] == "application/json"
    for accept in (V2, "application/vnd.kafka+json", "*/*", "application/*"):
        answer = await client.get("/topics", headers={"Accept": accept})
        assert answer.status == 200, accept
    await v2_error(await client.get("/topics", headers={"Accept": "text/csv"}), 406, 406)


async def test_json_produce_partitions_keys_as_confluent_does(client: Client, topic: str) -> None:
    """A json-format key is its compact JSON text: partitioned by murmur2 of those bytes, and
    stored as them; values are stored as their JSON text."""
    records = [
        {"key": "user-1", "value": {"n": 1}},
        {"value": "no key"},
        {"key": {"id": 7}, "value": [1, 2]},
        {"key": "user-1", "value": None},
    ]
    answer = await produce(client, f"/topics/{topic}", {"records": records})
    assert answer.status == 200
    assert answer.headers["Content-Type"] == V2
    doc = await answer.json(content_type=None)
    assert doc["key_schema_id"] is None and doc["value_schema_id"] is None
    offsets = doc["offsets"]
    assert all(o["error_code"] is None and o["error"] is None for o in offsets)
    user = partition_for_key(b'"user-1"', 3)
    assert offsets[0]["partition"] == offsets[3]["partition"] == user
    assert offsets[2]["partition"] == partition_for_key(b'{"id":7}', 3)
    stored = {(p, r["offset"]): r for p in range(3) for r in await v1_records(client, topic, p)}
    first = stored[(user, offsets[0]["offset"])]
    assert first["key"] == '"user-1"' and first["value"] == {"n": 1}
    assert stored[(offsets[1]["partition"], offsets[1]["offset"])]["value"] == "no key"
    assert stored[(user, offsets[3]["offset"])]["value"] is None


async def test_offsets_follow_request_order_per_partition(client: Client, topic: str) -> None:
    records = [{"key": f"k{i % 4}", "value": i} for i in range(40)] + [{"value": "x"}] * 5
    doc = await (await produce(client, f"/topics/{topic}", {"records": records})).json(
        content_type=None
    )
    stored = {
        (p, r["offset"]): r["value"] for p in range(3) for r in await v1_records(client, topic, p)
    }
    values = [stored[(o["partition"], o["offset"])] for o in doc["offsets"]]
    assert values == [r["value"] for r in records]


async def test_binary_produce_round_trips(client: Client, topic: str) -> None:
    key, value = b"\x00\xffkey", b"\x01binary\xfe"
    body = {
        "records": [
            {"key": base64.b64encode(key).decode(), "value": base64.b64encode(value).decode()},
            {"value": None},
        ]
    }
    answer = await produce(client, f"/topics/{topic}", body, BINARY_V2)
    offsets = (await answer.json(content_type=None))["offsets"]
    assert offsets[0]["partition"] == partition_for_key(key, 3)
    stored = await v1_records(client, topic, offsets[0]["partition"])
    record = next(r for r in stored if r["offset"] == offsets[0]["offset"])
    assert base64.b64decode(record["key"]) == key
    assert base64.b64decode(record["value"]) == value


@pytest.mark.parametrize("media", [V2, "application/json", "application/vnd.kafka+json"])
async def test_no_embedded_format_means_binary(client: Client, topic: str, media: str) -> None:
    body = {"records": [{"value": base64.b64encode(b"raw").decode()}]}
    answer = await produce(client, f"/topics/{topic}/partitions/0", body, media)
    assert answer.status == 200
    assert base64.b64decode((await v1_records(client, topic, 0))[0]["value"]) == b"raw"


async def test_produce_to_a_partition(client: Client, topic: str) -> None:
    body = {"records": [{"key": "a", "value": 1}, {"value": 2}]}
    doc = await (await produce(client, f"/topics/{topic}/partitions/2", body)).json(
        content_type=None
    )
    assert [(o["partition"], o["offset"]) for o in doc["offsets"]] == [(2, 0), (2, 1)]
    mismatch = {"records": [{"value": 1, "partition": 1}]}
    await v2_error(await produce(client, f"/topics/{topic}/partitions/2", mismatch), 422, 42205)


@pytest.mark.parametrize(
    ("body", "media", "status", "code"),
    [
        (b'{"records": [{"key": "!!", "value": "eHl6"}]}', BINARY_V2, 400, 400),
        (b'{"records": [{"value": "not base64!"}]}', BINARY_V2, 400, 400),
        (b'{"records": [{"value": {"x": 1}}]}', BINARY_V2, 400, 400),
        (b'{"records": ["x"]}', BINARY_V2, 400, 400),
        (b'{"records": {"value": 1}}', JSON_V2, 400, 400),
        (b'{"records": []}', JSON_V2, 422, 422),
        (b"{}", JSON_V2, 422, 422),
        (b'{"records": [{"valeu": 1}]}', JSON_V2, 422, 422),
        (b'{"records": [{"value": 1}], "extra": true}', JSON_V2, 422, 422),
        (b"[]", JSON_V2, 422, 422),
        (b'{"records": [{"value": 1, "partition": -1}]}', JSON_V2, 422, 42205),
        (b'{"records": [{"value": 1}], "value_schema_id": "x"}', JSON_V2, 422, 42205),
    ],
)
async def test_bad_produce_bodies(
    client: Client, topic: str, body: bytes, media: str, status: int, code: int
) -> None:
    """Karapace's checks, in its order: the body's shape (422; 400 for `records` or a record
    that is not what it must be, and for binary's base64), then each field (42205)."""
    answer = await client.post(f"/topics/{topic}", data=body, headers={"Content-Type": media})
    await v2_error(answer, status, code)
    assert await (await client.get(f"/topics/{topic}/partitions/0/offsets")).json(
        content_type=None
    ) == {"beginning_offset": 0, "end_offset": 0}


async def test_malformed_json_is_400(client: Client, topic: str) -> None:
    for body in (b'{"records": [', b"", b"\xff"):
        answer = await client.post(f"/topics/{topic}", data=body, headers={"Content-Type": JSON_V2})
        await v2_error(answer, 400, 400)


@pytest.mark.parametrize("name", ["avro", "jsonschema", "protobuf"])
async def test_schema_format_bodies_are_checked_first(
    client: Client, topic: str, name: str
) -> None:
    """A schema format's body is checked first: keys (values) without a key (value) schema
    are 42201 (42202), Confluent's codes; then the schema it names: an unknown id is 42205
    "Invalid schema" (Karapace's answer); a missing topic is 40401 before all of these."""
    media = f"application/vnd.kafka.{name}.v2+json"
    body = {"value_schema_id": 1, "records": [{"value": {"a": 1}}]}
    message = await v2_error(await produce(client, f"/topics/{topic}", body, media), 422, 42205)
    assert message.startswith("Invalid schema.") and "schema_id = 1" in message
    keyed = {"value_schema": "{}", "records": [{"key": 1, "value": {"a": 1}}]}
    await v2_error(await produce(client, f"/topics/{topic}", keyed, media), 422, 42201)
    for unnamed in (
        {"records": [{"value": 1}]},
        {"value_schema_id": "x", "records": [{"value": 1}]},
    ):
        await v2_error(await produce(client, f"/topics/{topic}", unnamed, media), 422, 42202)
    missing = await produce(client, "/topics/missing", body, media)
    await v2_error(missing, 404, 40401)


async def test_v1_and_versionless_media_types(client: Client, topic: str) -> None:
    """v1's media types and those without a version are v2's, as Karapace takes them; a body
    without a type (`application/octet-stream`) is binary."""
    for media, value in (
        ("application/vnd.kafka.v1+json", "eA=="),
        ("application/vnd.kafka.binary.v1+json", "eA=="),
        ("application/vnd.kafka.json+json", {"x": 1}),
        ("application/octet-stream", "eA=="),
    ):
        answer = await produce(
            client, f"/topics/{topic}/partitions/0", {"records": [{"value": value}]}, media
        )
        assert answer.status == 200, (media, await answer.text())
    values = [r["value"] for r in await v1_records(client, topic, 0)]
    assert values == [base64.b64encode(b"x").decode()] * 2 + [
        {"x": 1},
        base64.b64encode(b"x").decode(),
    ]


async def test_other_media_types_are_415(client: Client, topic: str) -> None:
    for media in (
        "text/plain",
        "application/x-ndjson",
        "application/vnd.kafka.v3+json",
        "application/vnd.kafka.avro.v0+json",
        "application/vnd.kafka+binary",
    ):
        await v2_error(await produce(client, f"/topics/{topic}", {"records": []}, media), 415, 415)


async def test_internal_topic_refused(client: Client, topic: str) -> None:
    answer = await produce(client, "/topics/__consumer_offsets", {"records": [{"value": 1}]})
    await v2_error(answer, 403, 403)
    assert "__consumer_offsets" not in await (await client.get("/topics")).json(content_type=None)


async def test_acks_zero_and_idempotency_key_extensions(client: Client, topic: str) -> None:
    path = f"/topics/{topic}/partitions/0"
    quick = await produce(client, path + "?acks=0", {"records": [{"value": 1}]})
    assert quick.status == 202
    body = {"records": [{"value": "once"}, {"value": "twice"}]}
    first = await produce(client, path, body, **{"Idempotency-Key": "order-1"})
    again = await produce(client, path, body, **{"Idempotency-Key": "order-1"})
    assert await first.json(content_type=None) == await again.json(content_type=None)
    assert [r["value"] for r in await v1_records(client, topic, 0)] == [1, "once", "twice"]
    await v2_error(await produce(client, path + "?acks=2", body), 400, 400)


async def test_auto_created_topic(start: Start) -> None:
    client = await start(auto_create_topics=True, default_partitions=2)
    answer = await produce(client, "/topics/fresh", {"records": [{"value": 1}]})
    assert answer.status == 200
    assert (
        len((await (await client.get("/topics/fresh")).json(content_type=None))["partitions"]) == 2
    )


async def test_auth_refusals_are_v2_errors(start: Start, data_dir: Path) -> None:
    keys = {name: make_key(data_dir, name) for name in ("admin", "alice")}
    client = await start(auth=True, super_users=("admin",))
    admin, alice = bearer(keys["admin"]), bearer(keys["alice"])
    assert (await client.post("/v1/topics", json={"name": "orders"}, headers=admin)).status == 201
    message = await v2_error(await client.get("/topics/orders"), 401, 40101)
    assert "credentials" in message
    await v2_error(await client.get("/topics/orders", headers=alice), 403, 40301)
    denied = await produce(client, "/topics/orders", {"records": [{"value": 1}]}, **alice)
    await v2_error(denied, 403, 40301)
    assert await (await client.get("/topics", headers=alice)).json(content_type=None) == []
    await v2_error(await client.get("/brokers", headers=alice), 403, 40301)
    await grant(client, keys["admin"], binding("alice", "topic", "orders", "write"))
    allowed = await produce(client, "/topics/orders", {"records": [{"value": 1}]}, **alice)
    assert allowed.status == 200
    assert await (await client.get("/topics", headers=alice)).json(content_type=None) == ["orders"]


@pytest.mark.parametrize("path", ["/topics/metered", "/topics/metered/partitions/0/"])
async def test_produce_bytes_quotas_charge_v2_and_v3(start: Start, path: str) -> None:
    """The REST Proxy's produce routes are charged to the produce byte quota as /v1's are:
    a body over the rate is served, the next produce refused (v2's body, v3's), nothing
    appended by it."""
    client = await start()
    assert (await client.post("/v1/topics", json={"name": "metered"})).status == 201
    await client.put("/v1/quotas/%3Cdefault%3E", json={"produce_bytes_per_second": 1000})
    big = {"records": [{"value": "x" * 5000}]}
    assert (await produce(client, path, big)).status == 200
    message = await v2_error(await produce(client, path, big), 429, 429)
    assert "produce_bytes_per_second" in message
    cluster = (await (await client.get("/v3/clusters")).json())["data"][0]["cluster_id"]
    v3 = await client.post(
        f"/v3/clusters/{cluster}/topics/metered/records", json={"value": {"data": 1}}
    )
    assert v3.status == 429
    assert (await v3.json())["error_code"] == 429
    end = await (await client.get("/topics/metered/partitions/0/offsets")).json(content_type=None)
    assert end["end_offset"] == 1


async def test_a_streamed_v3_produce_is_charged_what_it_sent(start: Start) -> None:
    """A chunked v3 body has no Content-Length: it is charged the bytes read once it ends, so
    the next produce is refused."""
    client = await start()
    assert (await client.post("/v1/topics", json={"name": "metered"})).status == 201
    await client.put("/v1/quotas/%3Cdefault%3E", json={"produce_bytes_per_second": 1000})
    cluster = (await (await client.get("/v3/clusters")).json())["data"][0]["cluster_id"]
    path = f"/v3/clusters/{cluster}/topics/metered/records"

    async def chunks() -> AsyncIterator[bytes]:
        for n in range(5):
            yield orjson.dumps({"value": {"type": "JSON", "data": "x" * 1000 + str(n)}})

    streamed = await client.post(path, data=chunks(), headers={"Content-Type": "application/json"})
    assert streamed.status == 200
    assert (await streamed.text()).count("\n") == 5
    refused = await client.post(path, json={"value": {"data": 1}})
    assert refused.status == 429
    assert (await refused.json())["error_code"] == 429
