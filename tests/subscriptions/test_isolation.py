"""A subscription's `isolation`: at read_committed a log-mode or queue-mode subscription never
delivers a record of an aborted transaction, nor one past an open transaction until it ends;
at read_uncommitted (the default, as Kafka's) it delivers every record. The partition reader
reads at the level asked for from a partition led elsewhere too."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from engine import batch as fmt
from engine.producer_state import Isolation
from groups.partition_reader import PartitionReader
from replication.forward_client import ForwardClient
from tests.api.support import Client, end_offsets, gateway, produce
from tests.subscriptions.receiver import Receiver, serve

ABORTED, HELD, COMMITTED, LAST = "aborted", "held", "committed", "last"


async def transaction(client: Client, name: str) -> int:
    resp = await client.post(f"/v1/transactions/{name}", json={})
    assert resp.status == 201, await resp.text()
    epoch: int = (await resp.json())["producer_epoch"]
    return epoch


async def end(client: Client, name: str, how: str, epoch: int) -> None:
    resp = await client.post(f"/v1/transactions/{name}/{how}", json={"producer_epoch": epoch})
    assert resp.status == 200, await resp.text()


async def open_transaction(client: Client) -> int:
    """A transaction holding ABORTED at offset 0, and HELD produced plainly behind it."""
    epoch = await transaction(client, "a")
    params = {"transactional_id": "a", "producer_epoch": str(epoch)}
    await produce(client, [{"value": ABORTED}], params=params)
    await produce(client, [{"value": HELD}])
    return epoch


async def close_transactions(client: Client, epoch: int) -> None:
    """Abort the open one; commit another holding COMMITTED; LAST plainly."""
    await end(client, "a", "abort", epoch)
    committed = await transaction(client, "c")
    params = {"transactional_id": "c", "producer_epoch": str(committed)}
    await produce(client, [{"value": COMMITTED}], params=params)
    await end(client, "c", "commit", committed)
    await produce(client, [{"value": LAST}])


def delivered(receiver: Receiver) -> list[Any]:
    """The values acknowledged, in the order they came (the `json` format, one a request)."""
    return [
        record["value"]
        for attempt in receiver.acked()
        for record in orjson.loads(attempt.body)["records"]
    ]


async def subscribe(client: Client, url: str, **fields: Any) -> dict[str, Any]:
    doc = {"name": "s", "topic": "t", "endpoint": url, "start": "earliest", "format": "json"}
    resp = await client.post("/v1/subscriptions", json=doc | fields)
    assert resp.status == 201, await resp.text()
    body: dict[str, Any] = await resp.json()
    return body


async def until_committed(client: Client, offset: int) -> None:
    async with asyncio.timeout(10):
        while True:
            doc = await (await client.get("/v1/subscriptions/s")).json()
            if doc["partitions"] and doc["partitions"][0]["committed_offset"] == offset:
                return
            await asyncio.sleep(0.02)


@pytest.mark.parametrize(
    ("isolation", "expected"),
    [
        ("read_committed", [HELD, COMMITTED, LAST]),
        ("read_uncommitted", [ABORTED, HELD, COMMITTED, LAST]),
    ],
)
async def test_log_mode_reads_at_its_isolation(
    client: Client, receiver: Receiver, isolation: str, expected: list[str]
) -> None:
    sub = await subscribe(client, receiver.url, isolation=isolation)
    assert sub["isolation"] == isolation
    epoch = await open_transaction(client)
    if isolation == "read_committed":
        # Nothing passes the open transaction: the uncommitted level shows what was there.
        assert await delivered_before(client, receiver, [ABORTED, HELD]) == []
    else:
        await receiver.until(lambda _: delivered(receiver) == [ABORTED, HELD])
    await close_transactions(client, epoch)
    (end_offset,) = await end_offsets(client)
    await until_committed(client, end_offset)
    assert delivered(receiver) == expected


async def delivered_before(client: Client, receiver: Receiver, shown: list[str]) -> list[Any]:
    """What the subscription delivered by the time a read_uncommitted subscription of the same
    topic, made after it, delivered `shown`."""
    other = Receiver()
    runner = await serve(other)
    try:
        await subscribe(client, other.url, name="u")
        await other.until(lambda _: delivered(other) == shown)
        resp = await client.delete("/v1/subscriptions/u")
        assert resp.status == 204, await resp.text()
    finally:
        await runner.cleanup()
    return delivered(receiver)


@pytest.mark.parametrize(
    ("isolation", "expected"),
    [
        ("read_committed", {HELD, COMMITTED, LAST}),
        ("read_uncommitted", {ABORTED, HELD, COMMITTED, LAST}),
    ],
)
async def test_queue_mode_reads_at_its_isolation(
    client: Client, receiver: Receiver, isolation: str, expected: set[str]
) -> None:
    epoch = await open_transaction(client)
    await close_transactions(client, epoch)
    sub = await subscribe(client, receiver.url, mode="queue", isolation=isolation)
    await receiver.until(lambda _: LAST in delivered(receiver))
    assert sorted(delivered(receiver)) == sorted(expected)
    resp = await client.get(f"/v1/share-groups/{sub['group']}")
    assert (await resp.json())["configs"]["share.isolation.level"] == isolation


async def test_the_reader_reads_a_partition_led_elsewhere_at_the_level_asked(
    client: Client,
) -> None:
    epoch = await open_transaction(client)
    await close_transactions(client, epoch)
    replicas = gateway(client).replicas
    forwarder = ForwardClient(99)
    reader = PartitionReader(replicas, forwarder)
    url = str(client.make_url("")).rstrip("/")
    reader._leader_url = lambda topic, partition: url  # type: ignore[method-assign]
    try:
        for isolation, expected in [
            (Isolation.READ_COMMITTED, [HELD, COMMITTED, LAST]),
            (Isolation.READ_UNCOMMITTED, [ABORTED, HELD, COMMITTED, LAST]),
        ]:
            got = await reader.read("t", 0, 0, 1 << 20, 0, isolation=isolation)
            values = [orjson.loads(r.value or b"null") for r in fmt.iter_records(got.data)]
            assert values == expected, isolation
    finally:
        await forwarder.close()


async def test_a_share_group_takes_an_isolation_level_and_refuses_others(client: Client) -> None:
    path = "/v1/share-groups/g/configs"
    resp = await client.put(path, json={"configs": {"share.isolation.level": "read_committed"}})
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["configs"] == {"share.isolation.level": "read_committed"}
    resp = await client.put(path, json={"configs": {"share.isolation.level": "dirty"}})
    assert resp.status == 400 and (await resp.json())["code"] == "INVALID_CONFIG"


async def test_a_read_committed_share_group_at_latest_starts_at_the_last_stable_offset(
    client: Client,
) -> None:
    """share.auto.offset.reset=latest at read_committed starts where such a reader's latest
    is, the last stable offset, not the high watermark: the open transaction's record and
    the one behind it are acquired once it commits, not passed over."""
    epoch = await open_transaction(client)  # ABORTED at 0 (open), HELD at 1
    configs = {"share.isolation.level": "read_committed"}
    resp = await client.put("/v1/share-groups/g/configs", json={"configs": configs})
    assert resp.status == 200, await resp.text()
    resp = await client.post("/v1/share-groups/g/members", json={"topics": ["t"]})
    assert resp.status == 201, await resp.text()
    acquire = f"/v1/share-groups/g/members/{(await resp.json())['member_id']}/acquire"
    resp = await client.post(acquire, params={"timeout_ms": "0"})
    assert resp.status == 200 and (await resp.json())["records"] == []
    described = await (await client.get("/v1/share-groups/g")).json()
    assert described["partitions"][0]["start_offset"] == 0
    await end(client, "a", "commit", epoch)
    values: list[Any] = []
    while HELD not in values:  # an acquire may end at a batch: each long-polls for the next
        resp = await client.post(acquire, params={"timeout_ms": "10000"})
        records = (await resp.json())["records"]
        assert records, values
        values += [r["value"] for r in records]
    assert values == [ABORTED, HELD]
