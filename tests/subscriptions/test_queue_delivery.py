"""Push subscriptions in queue mode, through an in-process gateway and real receivers on
loopback: records acquired from the subscription's share group, one a request, many in flight
on one partition; 2xx accepts, a 4xx rejects, 5xx and timeouts release with backoff; what
exhausts its attempts is dead-lettered with why and how many deliveries, while the records
behind it go on; ordering by key keeps a key's records apart and in offset order."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp import web

from tests.api.support import Client, fetch_all, metrics, problem, produce
from tests.subscriptions.receiver import Receiver, verify

FAST = {"timeout_ms": 300, "max_attempts": 3, "min_backoff_ms": 50, "max_backoff_ms": 100}


async def subscribe(client: Client, url: str, **fields: Any) -> dict[str, Any]:
    doc = {
        "name": "q",
        "topic": "t",
        "endpoint": url,
        "start": "earliest",
        "mode": "queue",
        **fields,
    }
    resp = await client.post("/v1/subscriptions", json=doc)
    assert resp.status == 201, await resp.text()
    body: dict[str, Any] = await resp.json()
    return body


async def share_group(client: Client, sub: dict[str, Any]) -> dict[str, Any]:
    resp = await client.get(f"/v1/share-groups/{sub['group']}")
    assert resp.status == 200, await resp.text()
    doc: dict[str, Any] = await resp.json()
    return doc


async def until_done(client: Client, sub: dict[str, Any], timeout: float = 20.0) -> dict[str, Any]:
    """Wait until the share group has nothing left open (every record accepted or archived)."""
    async with asyncio.timeout(timeout):
        while True:
            doc = await share_group(client, sub)
            if doc["partitions"] and doc["lag"] == 0:
                return doc
            await asyncio.sleep(0.02)


class Gate:
    """A receiver behaviour that holds every request until opened, counting how many wait at
    once (and per key)."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.waiting = 0
        self.most = 0
        self.keys: dict[str, int] = {}
        self.keys_most = 0
        self.order: dict[str, list[int]] = {}

    async def handle(self, request: web.Request) -> web.Response:
        key = request.headers.get("ce-partitionkey", "")
        offset = int(request.headers["ce-id"].rsplit("/", 1)[1])
        self.waiting += 1
        self.keys[key] = self.keys.get(key, 0) + 1
        self.most = max(self.most, self.waiting)
        self.keys_most = max(self.keys_most, self.keys[key])
        try:
            await self.open.wait()
        finally:
            self.waiting -= 1
            self.keys[key] -= 1
        self.order.setdefault(key, []).append(offset)
        return web.Response(status=204)


@pytest.fixture
async def gate() -> AsyncIterator[tuple[Gate, str]]:
    held = Gate()
    app = web.Application()
    app.router.add_post("/hook", held.handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    (port,) = {address[1] for address in runner.addresses}
    yield held, f"http://127.0.0.1:{port}/hook"
    held.open.set()
    await runner.cleanup()


async def test_one_partition_is_delivered_many_records_at_once(
    client: Client, gate: tuple[Gate, str]
) -> None:
    held, url = gate
    await produce(client, [{"value": i} for i in range(40)], partition=0)
    sub = await subscribe(client, url, concurrency={"max_requests": 16, "adaptive": False})
    async with asyncio.timeout(20):
        while held.waiting < 16:
            await asyncio.sleep(0.01)
    assert held.most == 16  # sixteen at once from one partition, never more
    held.open.set()
    doc = await until_done(client, sub)
    part = doc["partitions"][0]
    assert (part["start_offset"], part["archived"]) == (40, 0)
    assert sorted(o for offsets in held.order.values() for o in offsets) == list(range(40))


async def test_requests_are_signed_and_carry_their_delivery_count(
    client: Client, receiver: Receiver
) -> None:
    attempts = {0: 0}

    def first_fails(n: int, _: str) -> tuple[int, dict[str, str]]:
        attempts[0] += 1
        return (500, {}) if n == 1 else (204, {})

    receiver.behaviour = first_fails
    await produce(client, [{"key": "a", "value": {"n": 1}}])
    sub = await subscribe(client, receiver.url, retry=FAST)
    await until_done(client, sub)
    assert [a.headers["sluice-delivery-count"] for a in receiver.attempts] == ["1", "2"]
    assert receiver.attempts[0].headers["ce-id"] == "t/0/0"
    for attempt in receiver.attempts:
        verify(sub["signing_secret"], attempt)


async def test_a_record_that_always_fails_is_dead_lettered_after_its_attempts_while_the_rest_go_on(
    client: Client, receiver: Receiver
) -> None:
    def poison(n: int, message_id: str) -> tuple[int, dict[str, str]]:
        return (503, {}) if message_id.endswith("/0") else (204, {})

    receiver.behaviour = poison
    await produce(client, [{"key": "k", "value": i} for i in range(5)], partition=0)
    sub = await subscribe(client, receiver.url, retry=FAST, dead_letter_topic="dlq")
    doc = await until_done(client, sub)
    assert doc["partitions"][0]["start_offset"] == 5
    assert receiver.tries["t/0/0"] == FAST["max_attempts"]
    assert {m: receiver.tries[m] for m in receiver.tries if m != "t/0/0"} == {
        f"t/0/{i}": 1 for i in range(1, 5)
    }
    dead = await fetch_all(client, "dlq")
    assert len(dead) == 1
    headers = dead[0]["headers"]
    assert headers["sluice-offset"] == "0"
    assert headers["sluice-attempts"] == str(FAST["max_attempts"])
    assert headers["sluice-reason"] == "delivery limit reached"
    assert headers["sluice-status"] == "503"


async def test_a_record_the_endpoint_refuses_is_rejected_at_once(
    client: Client, receiver: Receiver
) -> None:
    receiver.behaviour = lambda n, m: (422, {}) if m.endswith("/1") else (204, {})
    await produce(client, [{"value": i} for i in range(3)], partition=0)
    sub = await subscribe(client, receiver.url, retry=FAST, dead_letter_topic="dlq")
    await until_done(client, sub)
    assert receiver.tries["t/0/1"] == 1
    (dead,) = await fetch_all(client, "dlq")
    assert dead["headers"]["sluice-reason"] == "rejected"
    assert dead["headers"]["sluice-attempts"] == "1"


async def test_ordering_by_key_keeps_a_keys_records_apart_and_in_order(
    client: Client, gate: tuple[Gate, str]
) -> None:
    held, url = gate
    records = [{"key": f"k{i % 4}", "value": i} for i in range(40)]
    await produce(client, records, partition=0)
    sub = await subscribe(
        client, url, ordering="key", concurrency={"max_requests": 16, "adaptive": False}
    )
    async with asyncio.timeout(20):
        while held.waiting < 4:
            await asyncio.sleep(0.01)
    assert held.waiting == 4 and held.keys_most == 1  # one of each key, four keys at once
    held.open.set()
    await until_done(client, sub)
    assert held.keys_most == 1
    for key, offsets in held.order.items():
        assert offsets == sorted(offsets), key
        assert offsets == [i for i in range(40) if f"k{i % 4}" == key]


async def test_ordering_by_key_retries_a_failing_record_in_place(
    client: Client, receiver: Receiver
) -> None:
    receiver.behaviour = lambda n, m: (500, {}) if m == "t/0/0" and n < 3 else (204, {})
    records = [{"key": "same", "value": i} for i in range(3)]
    await produce(client, records, partition=0)
    sub = await subscribe(client, receiver.url, ordering="key", retry=FAST)
    await until_done(client, sub)
    sent = [a.offset for a in receiver.attempts]
    assert sent == [0, 0, 0, 1, 2]  # nothing of its key overtook the failing record


async def test_the_json_format_carries_each_record_with_its_delivery(
    client: Client, receiver: Receiver
) -> None:
    await produce(client, [{"key": "a", "value": {"n": 1}}])
    sub = await subscribe(client, receiver.url, format="json")
    await until_done(client, sub)
    body = orjson.loads(receiver.attempts[0].body)
    assert body["topic"] == "t" and body["partition"] == 0
    (record,) = body["records"]
    assert record["value"] == {"n": 1} and record["delivery_count"] == 1


async def test_the_description_and_metrics_show_the_queue(
    client: Client, receiver: Receiver
) -> None:
    await produce(client, [{"value": 1}])
    sub = await subscribe(client, receiver.url)
    await until_done(client, sub)
    resp = await client.get("/v1/subscriptions/q")
    doc = await resp.json()
    assert doc["mode"] == "queue" and doc["partitions"] == []
    assert doc["queue"]["share_group"] == sub["group"] and doc["delivered"] == 1
    scraped = await metrics(client)
    labels = frozenset({("subscription", "q")})
    assert scraped[("sluice_subscription_delivered_records_total", labels)] == 1
    assert scraped[("sluice_subscription_delivery_latency_seconds_count", labels)] == 1


@pytest.mark.parametrize(
    ("fields", "pointer"),
    [
        ({"dead_letter_topic": "__consumer_offsets"}, "/dead_letter_topic"),
        ({"ordering": "partition"}, "/ordering"),
        ({"batching": {"max_records": 2}}, "/batching/max_records"),
        ({"retry": {"max_attempts": 11}}, "/retry/max_attempts"),
        ({"mode": "stream"}, "/mode"),
    ],
)
async def test_queue_mode_refuses_what_a_queue_cannot_do(
    client: Client, fields: dict[str, Any], pointer: str
) -> None:
    doc = {"name": "q", "topic": "t", "endpoint": "http://127.0.0.1:9/x", "mode": "queue"}
    resp = await client.post("/v1/subscriptions", json=doc | fields)
    body = await problem(resp, 400, "INVALID_SUBSCRIPTION")
    assert body["pointer"] == pointer


async def test_the_mode_cannot_be_changed(client: Client, receiver: Receiver) -> None:
    await subscribe(client, receiver.url)
    resp = await client.patch("/v1/subscriptions/q", json={"mode": "log"})
    await problem(resp, 400, "INVALID_SUBSCRIPTION")
