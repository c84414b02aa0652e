"""REST Proxy v2 consumer instances in process: the lifecycle a v2 client drives (create,
subscribe, records, commit, committed offsets, seek, delete), instances as members of the
Sluice group, read_committed instances, and v2 error bodies for bad input, never a 500."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest

from tests.api import support
from tests.api.support import Client, Start, gateway, wait_until
from tests.api.test_rest_proxy_v2 import JSON_V2, V2, produce, v2_error
from tests.api.test_transactions import begin, end, in_txn

BINARY_V2 = "application/vnd.kafka.binary.v2+json"
BASE = "/consumers/billing/instances"


async def call(client: Client, method: str, path: str, body: object = None, **headers: str) -> Any:
    data = None if body is None else orjson.dumps(body)
    return await client.request(method, path, data=data, headers={"Content-Type": V2, **headers})


async def create(client: Client, name: str, **config: object) -> dict[str, Any]:
    answer = await call(client, "POST", "/consumers/billing", {"name": name, **config})
    assert answer.status == 200, await answer.text()
    doc: dict[str, Any] = await answer.json(content_type=None)
    return doc


async def read(client: Client, name: str, media: str = JSON_V2) -> list[dict[str, Any]]:
    answer = await call(client, "GET", f"{BASE}/{name}/records?timeout=0", Accept=media)
    assert answer.status == 200, await answer.text()
    assert answer.headers["Content-Type"] == media
    records: list[dict[str, Any]] = await answer.json(content_type=None)
    return records


@pytest.fixture
async def orders(client: Client) -> str:
    assert (await client.post("/v1/topics", json={"name": "orders", "partitions": 2})).status == 201
    records = [{"key": "alice", "value": {"n": 1}}, {"value": "plain"}, {"key": "bob", "value": 3}]
    assert (await produce(client, "/topics/orders", {"records": records})).status == 200
    return "orders"


async def test_lifecycle(client: Client, orders: str) -> None:
    created = await create(client, "c1", format="json", **{"auto.offset.reset": "earliest"})
    assert created["instance_id"] == "c1"
    assert created["base_uri"].endswith("/consumers/billing/instances/c1")
    assert created["base_uri"].startswith(f"http://{client.host}:{client.port}")
    subscribed = await call(client, "POST", f"{BASE}/c1/subscription", {"topics": [orders]})
    assert subscribed.status == 204
    topics = await call(client, "GET", f"{BASE}/c1/subscription")
    assert await topics.json(content_type=None) == {"topics": [orders]}
    records = await read(client, "c1")
    assert sorted((r["key"], orjson.dumps(r["value"])) for r in records if r["key"]) == [
        ("alice", b'{"n":1}'),
        ("bob", b"3"),
    ]
    assert {r["topic"] for r in records} == {orders}
    assert await read(client, "c1") == []
    # Commit everything consumed; the committed offset is the next to read.
    assert (await call(client, "POST", f"{BASE}/c1/offsets")).status == 200
    asked = {"partitions": [{"topic": orders, "partition": p} for p in (0, 1)]}
    committed = await (await call(client, "GET", f"{BASE}/c1/offsets", asked)).json(
        content_type=None
    )
    ends = {
        p: (
            await (await client.get(f"/topics/{orders}/partitions/{p}/offsets")).json(
                content_type=None
            )
        )["end_offset"]
        for p in (0, 1)
    }
    assert {o["partition"]: o["offset"] for o in committed["offsets"]} == ends
    # The instance is a member of the Sluice group.
    group = await (await client.get("/v1/groups/billing")).json()
    assert [m["member_id"] for m in group["members"]] == ["c1"]
    assert (await call(client, "DELETE", f"{BASE}/c1")).status == 204
    await v2_error(await call(client, "GET", f"{BASE}/c1/records"), 404, 40403)


async def test_seek_and_explicit_commit(client: Client, orders: str) -> None:
    await create(client, "c1", format="json", **{"auto.offset.reset": "earliest"})
    await call(client, "POST", f"{BASE}/c1/subscription", {"topics": [orders]})
    first = await read(client, "c1")
    assert first
    p = first[0]["partition"]
    beginning = {"partitions": [{"topic": orders, "partition": p}]}
    assert (await call(client, "POST", f"{BASE}/c1/positions/beginning", beginning)).status == 204
    again = await read(client, "c1")
    assert next(r["offset"] for r in again if r["partition"] == p) == 0
    end = await call(client, "POST", f"{BASE}/c1/positions/end", beginning)
    assert end.status == 204
    assert await read(client, "c1") == []
    to = {"offsets": [{"topic": orders, "partition": p, "offset": 1}]}
    assert (await call(client, "POST", f"{BASE}/c1/positions", to)).status == 204
    assert all(r["offset"] >= 1 for r in await read(client, "c1") if r["partition"] == p)
    done = {"offsets": [{"topic": orders, "partition": p, "offset": 0}]}
    assert (await call(client, "POST", f"{BASE}/c1/offsets", done)).status == 200
    asked = {"partitions": [{"topic": orders, "partition": p}]}
    committed = await (await call(client, "GET", f"{BASE}/c1/offsets", asked)).json(
        content_type=None
    )
    assert committed["offsets"] == [{"topic": orders, "partition": p, "offset": 1, "metadata": ""}]


async def test_binary_format_and_topic_pattern(client: Client, orders: str) -> None:
    await create(client, "c1", format="binary", **{"auto.offset.reset": "earliest"})
    pattern = await call(client, "POST", f"{BASE}/c1/subscription", {"topic_pattern": "ord.*"})
    assert pattern.status == 204
    topics = await call(client, "GET", f"{BASE}/c1/subscription")
    assert await topics.json(content_type=None) == {"topics": [orders]}
    records = await read(client, "c1", BINARY_V2)
    decoded = {base64.b64decode(r["value"]) for r in records}
    assert decoded == {b'{"n":1}', b'"plain"', b"3"}
    assert {None if r["key"] is None else base64.b64decode(r["key"]) for r in records} == {
        b'"alice"',
        b'"bob"',
        None,
    }
    await v2_error(await call(client, "GET", f"{BASE}/c1/records", Accept=JSON_V2), 406, 40601)


async def test_instances_share_the_group(client: Client, orders: str) -> None:
    for name in ("c1", "c2"):
        await create(client, name, **{"auto.offset.reset": "earliest"})
        await call(client, "POST", f"{BASE}/{name}/subscription", {"topics": [orders]})
    group = await (await client.get("/v1/groups/billing")).json()
    owned = [m["assignment"] for m in group["members"]]
    assert owned == [
        [{"topic": orders, "partitions": [0]}],
        [{"topic": orders, "partitions": [1]}],
    ]
    assert (await call(client, "DELETE", f"{BASE}/c2/subscription")).status == 204
    group = await (await client.get("/v1/groups/billing")).json()
    assert [m["assignment"] for m in group["members"]] == [
        [{"topic": orders, "partitions": [0, 1]}],
        [],
    ]


async def test_idle_instances_expire(start: Start) -> None:
    """An instance's session is v2's instance timeout (clamped to the group session bounds):
    idle past it, the instance is removed from the group and answers 40403."""
    client = await start(group_min_session_timeout_ms=1, group_max_session_timeout_ms=50)
    await create(client, "c1")
    group = await (await client.get("/v1/groups/billing")).json()
    assert group["members"][0]["session_timeout_ms"] == 50
    members = gateway(client).groups.groups["billing"].members
    await wait_until(lambda: "c1" not in members)
    await v2_error(await call(client, "GET", f"{BASE}/c1/subscription"), 404, 40403)


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"name": "c9", "format": "xml"}, 422, 42204),
        ({"name": "c9", "auto.offset.reset": "soon"}, 422, 42204),
        ({"name": "c9", "auto.commit.enable": "maybe"}, 422, 42204),
        ({"name": "c9", "isolation.level": "serializable"}, 422, 42204),
        ({"name": "c9", "isolation.level": 1}, 422, 42204),
        ({"name": "c9", "fetch.min.bytes": "many"}, 422, 42204),
        ({"name": "c9", "consumer.request.timeout.ms": -1}, 422, 42204),
        ({"name": "a/b"}, 422, 42204),
        ([], 422, 42204),
    ],
)
async def test_bad_instance_settings(client: Client, body: object, status: int, code: int) -> None:
    await v2_error(await call(client, "POST", "/consumers/billing", body), status, code)


async def test_a_read_committed_instance_reads_only_committed_records(client: Client) -> None:
    assert (await client.post("/v1/topics", json={"name": "ledger"})).status == 201
    epoch = (await begin(client))["producer_epoch"]
    await support.produce(client, [{"value": "gone"}], topic="ledger", params=in_txn(epoch))
    await end(client, "abort", epoch)
    epoch = (await begin(client))["producer_epoch"]
    await support.produce(client, [{"value": "kept"}], topic="ledger", params=in_txn(epoch))
    await support.produce(client, [{"value": "plain"}], topic="ledger")
    earliest = {"auto.offset.reset": "earliest", "auto.commit.enable": "false"}
    await create(client, "rc", format="json", **earliest, **{"isolation.level": "read_committed"})
    await create(client, "ru", format="json", **earliest)  # read_uncommitted, as Kafka's default
    ledger = {"partitions": [{"topic": "ledger", "partition": 0}]}
    for name in ("rc", "ru"):
        assert (await call(client, "POST", f"{BASE}/{name}/assignments", ledger)).status == 204
    assert [r["value"] for r in await read(client, "ru")] == ["gone", "kept", "plain"]
    assert await read(client, "rc") == []  # held at the open transaction
    await end(client, "commit", epoch)
    got = await read(client, "rc")
    assert [(r["value"], r["offset"]) for r in got] == [("kept", 2), ("plain", 3)]


async def test_schema_format_instances_and_other_settings(client: Client, orders: str) -> None:
    """An instance in a schema format is created (as Karapace creates it) and reads through
    the node's registry: a value not in the wire format answers 422, naming the format;
    settings v2 does not use (Kafka consumer configs that Karapace passes on) are taken and
    ignored."""
    await create(client, "c9", format="avro", **{"topic.metadata.refresh.interval.ms": 100})
    subscribed = await call(client, "POST", f"{BASE}/c9/subscription", {"topics": [orders]})
    assert subscribed.status == 204
    await call(
        client,
        "POST",
        f"{BASE}/c9/positions/beginning",
        {"partitions": [{"topic": orders, "partition": 0}]},
    )
    answer = await call(client, "GET", f"{BASE}/c9/records?timeout=0")
    assert "deserialization error for format avro" in await v2_error(answer, 422, 422)


async def test_bad_requests_on_instances(client: Client, orders: str) -> None:
    await create(client, "c1")
    await v2_error(await call(client, "POST", "/consumers/billing", {"name": "c1"}), 409, 40902)
    for body in ({}, {"topic_pattern": "("}, {"topics": "orders"}, {"topics": [1]}):
        answer = await call(client, "POST", f"{BASE}/c1/subscription", body)
        await v2_error(answer, 422, 42204)
    both = {"topics": [orders], "topic_pattern": "o"}
    message = await v2_error(
        await call(client, "POST", f"{BASE}/c1/subscription", both), 409, 40903
    )
    assert message.startswith("IllegalStateError: You must choose only one way")
    missing = await call(client, "POST", f"{BASE}/c1/subscription", {"topics": ["nope"]})
    await v2_error(missing, 404, 40401)
    internal = {"topics": ["__consumer_offsets"]}
    await v2_error(await call(client, "POST", f"{BASE}/c1/subscription", internal), 403, 403)
    unassigned = {"offsets": [{"topic": orders, "partition": 0, "offset": 0}]}
    await v2_error(await call(client, "POST", f"{BASE}/c1/positions", unassigned), 409, 40903)
    positions: list[object] = [
        {"offsets": []},
        {"offsets": [{"topic": orders}]},
        {"offsets": "x"},
        {"offsets": [{"topic": orders, "partition": 0, "offset": -1}]},
    ]
    for position in positions:
        answer = await call(client, "POST", f"{BASE}/c1/positions", position)
        await v2_error(answer, 422, 42204)
    await v2_error(await call(client, "GET", f"{BASE}/c1/offsets", {"partitions": 1}), 422, 42204)
    bad_json = await client.post(f"{BASE}/c1/offsets", data=b"{", headers={"Content-Type": V2})
    await v2_error(bad_json, 400, 400)
    wrong_type = await client.post(
        f"{BASE}/c1/subscription", data=b"{}", headers={"Content-Type": "text/plain"}
    )
    await v2_error(wrong_type, 415, 415)
    for method, path in (("GET", "records"), ("POST", "offsets"), ("GET", "subscription"),
                         ("DELETE", "subscription")):  # fmt: skip
        await v2_error(await call(client, method, f"{BASE}/ghost/{path}"), 404, 40403)
    await v2_error(await call(client, "DELETE", f"{BASE}/ghost"), 404, 40403)
    await v2_error(await call(client, "GET", f"{BASE}/c1/records?timeout=x"), 400, 400)


async def test_manual_assignments(client: Client, orders: str) -> None:
    """Kafka's assign(): the instance reads exactly its partitions, outside the group's
    assignment; subscribing and assigning exclude each other (40903)."""
    await create(client, "c1", format="json", **{"auto.offset.reset": "earliest"})
    await create(client, "c2", format="json", **{"auto.offset.reset": "earliest"})
    await call(client, "POST", f"{BASE}/c2/subscription", {"topics": [orders]})
    sent = await produce(client, f"/topics/{orders}/partitions/1", {"records": [{"value": 1}]})
    assert sent.status == 200
    one = {"partitions": [{"topic": orders, "partition": 1}]}
    assert (await call(client, "POST", f"{BASE}/c1/assignments/", one)).status == 204
    listed = await call(client, "GET", f"{BASE}/c1/assignments")
    assert await listed.json(content_type=None) == one
    records = await read(client, "c1")
    assert records and {r["partition"] for r in records} == {1}
    # The subscribed member still owns both partitions: a manual assignment takes none away.
    group = await (await client.get("/v1/groups/billing")).json()
    by_member = {m["member_id"]: m["assignment"] for m in group["members"]}
    assert by_member["c2"] == [{"topic": orders, "partitions": [0, 1]}]
    assert by_member["c1"] == [{"topic": orders, "partitions": [1]}]
    # Commit and seek work on the assigned partition, not on the other.
    assert (await call(client, "POST", f"{BASE}/c1/offsets")).status == 200
    zero = {"offsets": [{"topic": orders, "partition": 0, "offset": 0}]}
    await v2_error(await call(client, "POST", f"{BASE}/c1/positions", zero), 409, 40903)
    # Subscribing an assigned instance, or assigning a subscribed one: 40903.
    subscribe = {"topics": [orders]}
    await v2_error(await call(client, "POST", f"{BASE}/c1/subscription", subscribe), 409, 40903)
    await v2_error(await call(client, "POST", f"{BASE}/c2/assignments", one), 409, 40903)
    # Unsubscribing clears the assignment too, as in Kafka; then it may subscribe.
    assert (await call(client, "DELETE", f"{BASE}/c1/subscription")).status == 204
    cleared = await call(client, "GET", f"{BASE}/c1/assignments")
    assert await cleared.json(content_type=None) == {"partitions": []}
    assert (await call(client, "POST", f"{BASE}/c1/subscription", subscribe)).status == 204
    # An empty list assigns nothing.
    await call(client, "DELETE", f"{BASE}/c1/subscription")
    none: dict[str, list[object]] = {"partitions": []}
    assert (await call(client, "POST", f"{BASE}/c1/assignments", none)).status == 204


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"partitions": [{"topic": "orders", "partition": 7}]}, 404, 40402),
        ({"partitions": [{"topic": "nope", "partition": 0}]}, 404, 40401),
        ({"partitions": [{"topic": "__consumer_offsets", "partition": 0}]}, 403, 403),
        ({"partitions": [{"topic": "orders"}]}, 422, 42204),
        ({"partitions": [{"topic": "orders", "partition": -1}]}, 422, 42204),
        ({"partitions": "orders"}, 422, 42204),
        ({}, 422, 42204),
        ([], 422, 42204),
    ],
)
async def test_bad_assignments(
    client: Client, orders: str, body: object, status: int, code: int
) -> None:
    await create(client, "c1")
    answer = await call(client, "POST", f"{BASE}/c1/assignments", body)
    await v2_error(answer, status, code)
    await v2_error(await call(client, "GET", f"{BASE}/ghost/assignments"), 404, 40403)


async def test_a_pattern_picks_up_topics_created_later(client: Client, orders: str) -> None:
    await create(client, "c1", format="json", **{"auto.offset.reset": "earliest"})
    subscribe = {"topic_pattern": "ord.*|late-.*"}
    assert (await call(client, "POST", f"{BASE}/c1/subscription", subscribe)).status == 204
    assert len(await read(client, "c1")) == 3
    assert (await client.post("/v1/topics", json={"name": "late-1", "partitions": 1})).status == 201
    assert (await client.post("/v1/topics", json={"name": "other", "partitions": 1})).status == 201
    for topic in ("late-1", "other"):
        sent = await produce(client, f"/topics/{topic}", {"records": [{"value": topic}]})
        assert sent.status == 200
    records = await read(client, "c1")
    assert [(r["topic"], r["value"]) for r in records] == [("late-1", "late-1")]
    topics = await call(client, "GET", f"{BASE}/c1/subscription")
    assert await topics.json(content_type=None) == {"topics": ["late-1", orders]}
    # Subscribing to a list ends the pattern: a topic created later is not added.
    assert (
        await call(client, "POST", f"{BASE}/c1/subscription", {"topics": [orders]})
    ).status == 204
    assert (await client.post("/v1/topics", json={"name": "late-2", "partitions": 1})).status == 201
    topics = await call(client, "GET", f"{BASE}/c1/subscription")
    assert await topics.json(content_type=None) == {"topics": [orders]}
    long_pattern = {"topic_pattern": "a" * 1001}
    answer = await call(client, "POST", f"{BASE}/c1/subscription", long_pattern)
    await v2_error(answer, 422, 42204)
