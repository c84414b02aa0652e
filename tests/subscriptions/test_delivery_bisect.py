"""Bisecting a failing batch (retry.bisect_on_error) end to end: a real receiver on loopback
refusing any batch that holds a poison record, through an in-process gateway; only that
record reaches the dead-letter topic, every other is acknowledged once, in offset order, and
a throttling endpoint's batch is retried whole. Every attempt goes through tracing.check."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from tests.api.support import Client
from tests.subscriptions.test_delivery import subscribe, until_described
from tests.subscriptions.test_delivery_flow import produce_keyed
from tests.subscriptions.tracing import Answer, Traced, TracingReceiver, check, serving

RETRY = {
    "timeout_ms": 2000,
    "max_attempts": 3,
    "min_backoff_ms": 20,
    "max_backoff_ms": 50,
    "bisect_on_error": True,
}
BATCHING = {"max_records": 8, "max_wait_ms": 100}
POISON = 5


@pytest.fixture
async def receiver() -> AsyncIterator[TracingReceiver]:
    async with serving(TracingReceiver()) as got:
        yield got


def poisoned(status: int) -> Any:
    """Answer `status` to any request holding the poison record, else 204."""

    def decide(trace: Traced) -> Answer:
        return (status, {}, None) if POISON in trace.offsets else (204, {}, None)

    return decide


async def dead_letters(client: Client) -> list[dict[str, Any]]:
    resp = await client.get("/v1/topics/dlq/partitions/0/records?offset=0&timeout_ms=0")
    records: list[dict[str, Any]] = (await resp.json())["records"]
    return records


@pytest.mark.parametrize("status", [400, 500])
async def test_only_the_poison_record_is_dead_lettered(
    client: Client, receiver: TracingReceiver, status: int
) -> None:
    receiver.decide = poisoned(status)
    produced = await produce_keyed(client, [f"k{i % 3}" for i in range(16)])
    sub = await subscribe(
        client, receiver.url, batching=BATCHING, retry=RETRY, dead_letter_topic="dlq"
    )
    doc = await until_described(client, lambda d: d["partitions"][0]["committed_offset"] == 16)
    alone = 1 if status == 400 else RETRY["max_attempts"]
    assert [t.offsets for t in receiver.traces] == [
        tuple(range(8)), (0, 1, 2, 3), (4, 5, 6, 7), (4, 5), (4,), *[(5,)] * alone, (6, 7),
        tuple(range(8, 16)),
    ]  # fmt: skip
    check(receiver.traces, produced, "partition", 1, sub["signing_secret"], frozenset({(0, 5)}))
    acked = Counter(o for t in receiver.traces for o in t.acked)
    assert acked == Counter(o for o in range(16) if o != POISON)  # each exactly once, by 2xx
    for trace in receiver.traces:  # a half's webhook-id is its own; each event's id stays
        first, last = trace.offsets[0], trace.offsets[-1]
        span = f"{first}" if first == last else f"{first}-{last}"
        assert trace.headers["webhook-id"] == f"t/0/{span}"
        assert [e["id"] for e in orjson.loads(trace.body)] == [f"t/0/{o}" for o in trace.offsets]
    (dead,) = await dead_letters(client)
    assert dead["key"] == "k2" and dead["value"] == {"n": POISON}
    assert dead["headers"]["sluice-offset"] == "5"
    assert dead["headers"]["sluice-attempts"] == str(3 + alone)  # in 8, 4, 2, then alone
    assert dead["headers"]["sluice-status"] == str(status)
    assert doc["delivered"] == 15 and doc["dead_lettered"] == 1
    assert doc["retried"] == 8 + 4 + 2 + alone - 1
    assert doc["retry"]["bisect_on_error"] is True


async def test_a_throttling_endpoint_gets_the_batch_whole(
    client: Client, receiver: TracingReceiver
) -> None:
    """503 is backpressure, not the records' fault: the batch is retried whole, then
    dead-lettered whole."""
    receiver.decide = poisoned(503)
    produced = await produce_keyed(client, ["k"] * 16)
    dead = frozenset((0, o) for o in range(8))
    sub = await subscribe(
        client, receiver.url, batching=BATCHING, retry=RETRY, dead_letter_topic="dlq"
    )
    doc = await until_described(client, lambda d: d["partitions"][0]["committed_offset"] == 16)
    assert [t.offsets for t in receiver.traces] == [tuple(range(8))] * 3 + [tuple(range(8, 16))]
    check(receiver.traces, produced, "partition", 1, sub["signing_secret"], dead)
    letters = await dead_letters(client)
    assert [d["headers"]["sluice-offset"] for d in letters] == [str(o) for o in range(8)]
    assert {d["headers"]["sluice-attempts"] for d in letters} == {"3"}
    assert doc["delivered"] == 8 and doc["dead_lettered"] == 8
