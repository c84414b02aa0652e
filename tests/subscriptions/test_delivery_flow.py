"""Delivery under orderings `key` and `none`, adaptive concurrency, a rate limit and partial
batch responses, to real receivers on loopback through an in-process gateway; every attempt
goes through the checker (tracing.check)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from tests.api.support import Client, create_topic, produce
from tests.subscriptions.test_delivery import subscribe, until_described
from tests.subscriptions.tracing import Answer, Traced, TracingReceiver, check, serving

JITTER_S = 0.25
QUICK = {"timeout_ms": 2000, "max_attempts": 100, "min_backoff_ms": 20, "max_backoff_ms": 50}


@pytest.fixture
async def receiver() -> AsyncIterator[TracingReceiver]:
    async with serving(TracingReceiver()) as got:
        yield got


async def produce_keyed(client: Client, keys: list[str], first: int = 0) -> dict[Any, Any]:
    await produce(client, [{"key": k, "value": {"n": i}} for i, k in enumerate(keys, first)])
    return {(0, first + i): k for i, k in enumerate(keys)}


async def test_key_ordering_in_order_per_key_and_keys_in_parallel(
    client: Client, receiver: TracingReceiver
) -> None:
    receiver.delay_s = 0.02
    receiver.decide = lambda t: (
        (500, {}, None) if t.offsets[0] % 7 == 3 and not _seen(receiver, t) else (204, {}, None)
    )
    keys = [f"k{i % 4}" for i in range(40)]
    produced = await produce_keyed(client, keys)
    sub = await subscribe(
        client, receiver.url, ordering="key", concurrency={"max_in_flight": 3}, retry=QUICK
    )
    await receiver.until(lambda _: len(receiver.acked()) == 40)
    check(receiver.traces, produced, "key", 3, sub["signing_secret"])
    assert max(t.concurrent for t in receiver.traces) > 1  # different keys in parallel
    assert any(t.status == 500 for t in receiver.traces)
    doc = await until_described(client, lambda d: d["partitions"][0]["committed_offset"] == 40)
    assert doc["delivered"] == 40 and doc["ordering"] == "key"


def _seen(receiver: TracingReceiver, trace: Traced) -> bool:
    """Whether the receiver already answered this record once."""
    return any(t.offsets == trace.offsets for t in receiver.traces)


async def test_key_ordering_batches(client: Client, receiver: TracingReceiver) -> None:
    keys = [f"k{i % 3}" for i in range(30)]
    produced = await produce_keyed(client, keys)
    sub = await subscribe(
        client, receiver.url, ordering="key", batching={"max_records": 4}, retry=QUICK,
        concurrency={"max_in_flight": 4},
    )  # fmt: skip
    await receiver.until(lambda _: len(receiver.acked()) == 30)
    check(receiver.traces, produced, "key", 4, sub["signing_secret"])


async def test_none_ordering_respects_its_window(client: Client, receiver: TracingReceiver) -> None:
    receiver.delay_s = 0.02
    produced = await produce_keyed(client, ["a"] * 24)
    await subscribe(
        client, receiver.url, ordering="none", retry=QUICK,
        concurrency={"max_in_flight": 3, "adaptive": False},
    )  # fmt: skip
    await receiver.until(lambda _: len(receiver.acked()) == 24)
    check(receiver.traces, produced, "none", 3)
    assert max(t.concurrent for t in receiver.traces) == 3
    await until_described(client, lambda d: d["partitions"][0]["committed_offset"] == 24)


async def test_the_position_stays_below_an_open_record(
    client: Client, receiver: TracingReceiver
) -> None:
    """Ordering none: records after a failing one are acknowledged, the position waits for
    it (nothing skipped if the node died now), and goes past once it is dead-lettered."""
    receiver.decide = lambda t: (500, {}, None) if t.offsets == (1,) else (204, {}, None)
    await produce_keyed(client, ["a"] * 6)
    retry = {**QUICK, "max_attempts": 3, "min_backoff_ms": 1000, "max_backoff_ms": 1000}
    await subscribe(client, receiver.url, ordering="none", retry=retry, dead_letter_topic="dlq")
    await receiver.until(lambda _: len(receiver.acked()) == 5)
    doc = await until_described(client, lambda d: d["partitions"][0]["committed_offset"] >= 1)
    assert doc["partitions"][0]["committed_offset"] == 1 and doc["dead_lettered"] == 0
    doc = await until_described(client, lambda d: d["partitions"][0]["committed_offset"] == 6)
    assert doc["dead_lettered"] == 1


async def test_a_recovering_endpoint_is_not_hit_by_a_storm(
    client: Client, receiver: TracingReceiver
) -> None:
    """Healthy: the limit grows past a few requests. Down (503): it falls to one. Back: the
    first requests come one or two at a time, not every partition's retry at once."""
    down = False
    receiver.delay_s = 0.01
    receiver.decide = lambda t: (503, {}, None) if down else (204, {}, None)
    await subscribe(
        client, receiver.url, ordering="none", retry=QUICK,
        concurrency={"max_in_flight": 16, "max_requests": 16},
    )  # fmt: skip
    await produce_keyed(client, ["a"] * 64)
    await receiver.until(lambda _: len(receiver.acked()) == 64)
    assert max(t.concurrent for t in receiver.traces) > 4  # it grew
    down = True
    await produce_keyed(client, ["a"] * 64, first=64)
    await until_described(
        client, lambda d: d["partitions"][0]["concurrency_limit"] == 1, timeout=20
    )
    exposition = await (await client.get("/metrics")).text()
    assert 'sluice_subscription_concurrency_limit{subscription="s"} 1.0' in exposition
    down = False
    mark = len(receiver.traces)
    await receiver.until(lambda _: len(receiver.acked()) == 128)
    after = sorted(receiver.traces[mark:], key=lambda t: t.arrived)
    assert all(t.concurrent <= 2 for t in after[:3]), [t.concurrent for t in after[:6]]


async def test_the_rate_limit_bounds_requests_per_second(
    client: Client, receiver: TracingReceiver
) -> None:
    produced = await produce_keyed(client, ["a"] * 30)
    await subscribe(
        client, receiver.url, ordering="none", retry=QUICK, rate_limit_per_s=20,
        concurrency={"max_in_flight": 16, "adaptive": False},
    )  # fmt: skip
    await receiver.until(lambda _: len(receiver.acked()) == 30)
    check(receiver.traces, produced, "none", 16)
    arrivals = sorted(t.at for t in receiver.traces)
    # 0.1 s worth of tokens; arrivals may bunch by as much as a request's delay varies (the
    # loop is shared and the machine loaded), allowed for up to JITTER_S.
    burst = 2
    for i, j in itertools.combinations(range(len(arrivals)), 2):
        assert j - i + 1 <= burst + 20 * (arrivals[j] - arrivals[i] + JITTER_S), (i, j)


def _partial(fail: set[int]) -> Answer:
    items = [{"itemIdentifier": f"t/0/{o}"} for o in sorted(fail)]
    return 200, {}, {"batchItemFailures": items}


async def test_partial_batch_responses_retry_only_the_failed_records(
    client: Client, receiver: TracingReceiver
) -> None:
    def decide(trace: Traced) -> Answer:
        if len(receiver.traces) == 0:
            return _partial({2, 5})  # the first batch: 2 and 5 failed
        if trace.offsets == (2, 5):
            return _partial({5})  # then 5 again
        return 204, {}, None

    receiver.decide = decide
    produced = await produce_keyed(client, ["a"] * 8)
    retry = {**QUICK, "max_attempts": 2}
    sub = await subscribe(
        client, receiver.url, batching={"max_records": 10, "max_wait_ms": 100}, retry=retry,
        dead_letter_topic="dlq",
    )  # fmt: skip
    doc = await until_described(client, lambda d: d["partitions"][0]["committed_offset"] == 8)
    assert [t.offsets for t in receiver.traces] == [tuple(range(8)), (2, 5)]
    check(receiver.traces, produced, "partition", 1, sub["signing_secret"], frozenset({(0, 5)}))
    assert doc["delivered"] == 7 and doc["dead_lettered"] == 1 and doc["retried"] == 2
    resp = await client.get("/v1/topics/dlq/partitions/0/records?offset=0&timeout_ms=0")
    (dead,) = (await resp.json())["records"]
    assert dead["headers"]["sluice-offset"] == "5" and dead["headers"]["sluice-attempts"] == "2"


async def test_a_partial_response_naming_a_stranger_fails_the_whole_batch(
    client: Client, receiver: TracingReceiver
) -> None:
    receiver.decide = lambda t: _partial({99}) if len(receiver.traces) == 0 else (204, {}, None)
    produced = await produce_keyed(client, ["a"] * 3)
    await subscribe(
        client, receiver.url, batching={"max_records": 10, "max_wait_ms": 100}, retry=QUICK
    )
    await receiver.until(lambda traces: len(traces) == 2)
    assert [t.offsets for t in receiver.traces] == [(0, 1, 2), (0, 1, 2)]
    await until_described(client, lambda d: d["partitions"][0]["committed_offset"] == 3)
    body = orjson.loads(receiver.traces[1].body)
    assert [e["id"] for e in body] == ["t/0/0", "t/0/1", "t/0/2"]
    check(receiver.traces[1:], produced, "partition", 1)


async def test_a_long_partial_response_is_read_whole(
    client: Client, receiver: TracingReceiver
) -> None:
    """Some 300 KB of batchItemFailures, which arrive in several reads."""

    def decide(trace: Traced) -> Answer:
        if len(receiver.traces) == 0:
            odd = [{"itemIdentifier": f"t/0/{o}", "why": "x" * 400} for o in trace.offsets[1::2]]
            return 200, {}, {"batchItemFailures": odd}
        return 204, {}, None

    receiver.decide = decide
    await produce_keyed(client, ["a"] * 1500)
    await subscribe(
        client, receiver.url, batching={"max_records": 1500, "max_wait_ms": 200}, retry=QUICK
    )
    await until_described(client, lambda d: d["partitions"][0]["committed_offset"] == 1500)
    first, second = receiver.traces
    assert first.offsets == tuple(range(1500)) and second.offsets == tuple(range(1, 1500, 2))


async def test_partition_ordering_over_partitions_sharing_the_flow_control(
    client: Client, receiver: TracingReceiver
) -> None:
    await create_topic(client, "m", partitions=3)
    produced: dict[tuple[int, int], str | None] = {}
    for p in range(3):
        await produce(client, [{"key": f"k{i % 3}", "value": i} for i in range(20)], topic="m",
                      partition=p)  # fmt: skip
        produced |= {(p, i): f"k{i % 3}" for i in range(20)}
    receiver.delay_s = 0.005
    receiver.decide = lambda t: (
        (500, {}, None)
        if t.offsets[0] % 5 == 2
        and not any(x.partition == t.partition and x.offsets == t.offsets for x in receiver.traces)
        else (204, {}, None)
    )
    sub = await subscribe(client, receiver.url, topic="m", retry=QUICK)
    await receiver.until(lambda _: len(receiver.acked()) == 60)
    check(receiver.traces, produced, "partition", 1, sub["signing_secret"])
    assert sum(t.status == 500 for t in receiver.traces) == 12
