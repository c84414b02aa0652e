"""The leader's side of replication, in process: the internal replica-fetch and epoch routes,
followers' progress moving the high watermark, ISR expansion and shrinking, and acks=all.

Node 1 is a follower on paper only (a partition state naming it, written to the metadata
store); the test plays it by calling the internal routes as its fetcher would.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import replace
from typing import Any, cast

import pytest
from aiohttp import web

from engine import batch as fmt
from engine.internal_topics import INTERNAL_TOPICS, SHARE_GROUP_STATE, TRANSACTION_STATE
from replication.acks import Acks
from replication.errors import InternalTopicWrite, MetadataUnavailable
from replication.memory_store import MemoryBackend, MemoryMetadataStore
from replication.metadata import NodeInfo, PartitionState
from replication.node_contract import (
    APPEND_ROUTE,
    HIGH_WATERMARK,
    LOG_START_OFFSET,
    RECORD_BATCH,
    replica_path,
)
from replication.partition import Partition
from replication.records_append import PartitionBatch
from tests.api.support import (
    Client,
    Start,
    create_topic,
    describe,
    fetch,
    gateway,
    metrics,
    problem,
    produce,
    records_path,
    sample,
    wait_until,
)

FOLLOWER = 1


async def add_follower(client: Client, topic: str = "t") -> PartitionState:
    """Make node 1 a live replica of topic-0 outside the ISR, in a new leader epoch (a node
    the store does not count as live leaves every ISR at once)."""
    broker = gateway(client).broker
    assert isinstance(broker.store, MemoryMetadataStore)
    broker.store.backend.revive(FOLLOWER)
    fence = await broker.store.campaign()
    state = broker.store.view.partition(topic, 0)
    assert state is not None
    new = replace(state, leader_epoch=state.leader_epoch + 1, replicas=(0, FOLLOWER), isr=(0,))
    stored = await broker.store.set_partition(topic, 0, new, fence)
    assert stored is not None
    await wait_until(lambda: leader_of(client, topic).leader_epoch == stored.leader_epoch)
    return stored


def leader_of(client: Client, topic: str = "t") -> Partition:
    partition = gateway(client).replicas.local(topic, 0)
    assert partition is not None
    return partition


async def lead_elsewhere(client: Client, url: str, partitions: tuple[int, ...]) -> MemoryBackend:
    """Make node 1, at `url`, the live leader of topic t's `partitions` (this node in their
    ISR), and wait until this node follows them; the store's backend, to change it further."""
    broker = gateway(client).broker
    assert isinstance(broker.store, MemoryMetadataStore)
    backend = broker.store.backend
    with backend.transaction() as revision:
        backend.nodes[FOLLOWER] = NodeInfo(FOLLOWER, url)
        backend.live.add(FOLLOWER)
        for partition in partitions:
            state = backend.partitions[("t", partition)]
            backend.partitions[("t", partition)] = replace(
                state,
                leader=FOLLOWER,
                leader_epoch=state.leader_epoch + 1,
                replicas=(FOLLOWER, 0),
                isr=(FOLLOWER, 0),
                version=revision,
            )
    replicas = gateway(client).replicas

    def following() -> bool:
        return all(not cast(Partition, replicas.local("t", p)).is_leader for p in partitions)

    await wait_until(following)
    return backend


async def replica_fetch(
    client: Client, offset: int, epoch: int, topic: str = "t", **extra: Any
) -> Any:
    params = {
        "replica": FOLLOWER,
        "leader_epoch": epoch,
        "offset": offset,
        "max_bytes": 1 << 20,
        "timeout_ms": 0,
        **extra,
    }
    return await client.get(
        replica_path(topic, 0, "records"), params={k: str(v) for k, v in params.items()}
    )


async def test_bad_internal_requests_are_problems(client: Client) -> None:
    await create_topic(client)
    path = replica_path("t", 0, "records")
    await problem(await client.get(path), 400, "INVALID_PARAMETER")
    await problem(await client.get(path, params={"replica": "x"}), 400, "INVALID_PARAMETER")
    # The leader itself is no follower.
    resp = await client.get(
        path, params={"replica": "0", "leader_epoch": "0", "offset": "0", "max_bytes": "10"}
    )
    await problem(resp, 400, "NOT_A_REPLICA")
    unknown = replica_path("nope", 0, "records")
    resp = await client.get(
        unknown, params={"replica": "1", "leader_epoch": "0", "offset": "0", "max_bytes": "10"}
    )
    await problem(resp, 404, "UNKNOWN_TOPIC")
    await problem(await client.get(replica_path("t", 0, "epoch-end")), 400, "INVALID_PARAMETER")


async def test_epochs_fence_stale_and_future_followers(client: Client) -> None:
    await create_topic(client)
    state = await add_follower(client)
    stale = await replica_fetch(client, 0, state.leader_epoch - 1)
    await problem(stale, 409, "FENCED_LEADER_EPOCH")
    future = await replica_fetch(client, 0, state.leader_epoch + 1)
    body = await problem(future, 503, "UNKNOWN_LEADER_EPOCH")
    assert future.headers["Retry-After"] == "1", body
    epoch_end = replica_path("t", 0, "epoch-end")
    resp = await client.get(
        epoch_end, params={"leader_epoch": str(state.leader_epoch - 1), "epoch": "0"}
    )
    await problem(resp, 409, "FENCED_LEADER_EPOCH")


async def test_follower_progress_moves_the_high_watermark_and_joins_the_isr(
    client: Client,
) -> None:
    await create_topic(client)
    await produce(client, [{"value": i} for i in range(3)], params={"acks": "1"})
    state = await add_follower(client)
    epoch = state.leader_epoch
    # The new epoch starts at the leader's log end: KIP-279's answer for any older epoch.
    resp = await client.get(
        replica_path("t", 0, "epoch-end"), params={"leader_epoch": str(epoch), "epoch": "0"}
    )
    assert await resp.json() == {"epoch": 0, "end_offset": 3}
    # An acks=1 produce in the new epoch: the follower is outside the ISR, the HW moves alone.
    await produce(client, [{"value": 3}], params={"acks": "1"})
    assert (await describe(client))["partitions"][0]["high_watermark"] == 4
    resp = await replica_fetch(client, 0, epoch)
    assert resp.status == 200
    data = await resp.read()
    headers = fmt.scan(data, check_crc=True).headers
    assert [h.base_offset for _, h in headers] == [0, 3]
    assert [h.partition_leader_epoch for _, h in headers] == [0, epoch]
    assert resp.headers[HIGH_WATERMARK] == "4" and resp.headers[LOG_START_OFFSET] == "0"
    # Caught up to the HW (and past the epoch start): the leader stores the larger ISR.
    assert (await replica_fetch(client, 4, epoch)).status == 200
    await wait_until(lambda: leader_of(client).isr == (0, FOLLOWER))
    assert (await describe(client))["partitions"][0]["isr"] == [0, FOLLOWER]
    scraped = await metrics(client)
    assert sample(scraped, "sluice_isr_expands_total") == 1
    assert sample(scraped, "sluice_under_replicated_partitions") == 0


async def test_acks_all_waits_for_the_follower(client: Client) -> None:
    await create_topic(client)
    state = await add_follower(client)
    epoch = state.leader_epoch
    assert (await replica_fetch(client, 0, epoch)).status == 200
    await wait_until(lambda: leader_of(client).isr == (0, FOLLOWER))
    task = asyncio.ensure_future(
        client.post(
            records_path("t", 0), json={"records": [{"value": "x"}]}, params={"acks": "all"}
        )
    )
    await wait_until(lambda: gateway(client).replicas.counters.acks_waiting == 1)
    assert not task.done()
    assert (await fetch(client))["records"] == []  # appended, not committed: not served
    # The follower's next fetch carries the record; the one after acknowledges it.
    first = await replica_fetch(client, 0, epoch)
    assert len(await first.read()) > 0
    assert not task.done()
    await replica_fetch(client, 1, epoch)
    resp = await asyncio.wait_for(task, 5)
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["results"] == [{"partition": 0, "base_offset": 0, "count": 1}]
    assert [r["value"] for r in (await fetch(client))["records"]] == ["x"]


async def test_acks_all_times_out_saying_the_records_may_commit(client: Client) -> None:
    await create_topic(client)
    state = await add_follower(client)
    assert (await replica_fetch(client, 0, state.leader_epoch)).status == 200
    await wait_until(lambda: leader_of(client).isr == (0, FOLLOWER))
    resp = await client.post(
        records_path("t", 0),
        json={"records": [{"value": "x"}]},
        params={"acks": "all", "timeout_ms": "50"},
    )
    body = await problem(resp, 504, "REQUEST_TIMED_OUT")
    assert "may still be committed" in body["detail"]


async def test_min_insync_replicas_refuses_acks_all_and_appends_nothing(client: Client) -> None:
    await create_topic(client, configs={"min.insync.replicas": 2})
    await add_follower(client)
    resp = await client.post(
        records_path("t", 0), json={"records": [{"value": "x"}]}, params={"acks": "all"}
    )
    body = await problem(resp, 503, "NOT_ENOUGH_REPLICAS")
    assert resp.headers["Retry-After"] == "1", body
    assert (await describe(client))["partitions"][0]["log_end_offset"] == 0
    # acks=1 does not need the ISR.
    ok = await client.post(
        records_path("t", 0), json={"records": [{"value": "y"}]}, params={"acks": "1"}
    )
    assert ok.status == 200


async def test_a_follower_that_stops_fetching_leaves_the_isr(start: Start) -> None:
    client = await start(replica_lag_time_max_ms=200)
    await create_topic(client)
    state = await add_follower(client)
    assert (await replica_fetch(client, 0, state.leader_epoch)).status == 200
    leader = leader_of(client)
    await wait_until(lambda: leader.isr == (0, FOLLOWER))
    await produce(client, [{"value": 1}], params={"acks": "1"})
    # The follower never fetches the record: after replica.lag.time.max.ms it is dropped,
    # and the HW moves on without it.
    await wait_until(lambda: leader.isr == (0,), timeout=5)
    await wait_until(lambda: leader.high_watermark == 1)
    scraped = await metrics(client)
    assert sample(scraped, "sluice_isr_shrinks_total") == 1
    assert sample(scraped, "sluice_under_replicated_partitions") == 1


async def test_an_isr_that_shrinks_after_the_append_says_the_records_may_commit(
    start: Start,
) -> None:
    """Kafka's NOT_ENOUGH_REPLICAS_AFTER_APPEND: the follower stops after the append, the ISR
    shrinks to the leader alone, the high watermark passes the records, and min.insync=2 is
    no longer met: 503, and the records are there."""
    client = await start(replica_lag_time_max_ms=200)
    await create_topic(client, configs={"min.insync.replicas": 2})
    state = await add_follower(client)
    assert (await replica_fetch(client, 0, state.leader_epoch)).status == 200
    leader = leader_of(client)
    await wait_until(lambda: leader.isr == (0, FOLLOWER))
    resp = await client.post(
        records_path("t", 0), json={"records": [{"value": "x"}]}, params={"acks": "all"}
    )
    body = await problem(resp, 503, "NOT_ENOUGH_REPLICAS_AFTER_APPEND")
    assert "may be kept" in body["detail"]
    assert leader.isr == (0,)
    assert [r["value"] for r in (await fetch(client))["records"]] == ["x"]


async def test_a_fetch_past_the_log_end_confirms_leadership_with_the_store(
    client: Client,
) -> None:
    """A node cut off from the store leads in its own view only: a newer leader may have
    committed past this log's end, so a fetch there is no 416 until the store confirms it."""
    await create_topic(client)
    await produce(client, [{"value": 1}])
    broker = gateway(client).broker
    assert isinstance(broker.store, MemoryMetadataStore)
    backend = broker.store.backend
    past_end = {"offset": "5", "timeout_ms": "0"}

    await problem(
        await client.get(records_path("t", 0), params=past_end), 416, "OFFSET_OUT_OF_RANGE"
    )

    async def unreachable(topic: str, partition: int, timeout_s: float) -> PartitionState | None:
        raise MetadataUnavailable("etcd range at http://etcd: connection timed out")

    real_read = broker.store.read_partition
    broker.store.read_partition = unreachable  # type: ignore[method-assign]
    await problem(
        await client.get(records_path("t", 0), params=past_end), 503, "LEADER_NOT_AVAILABLE"
    )
    broker.store.read_partition = real_read  # type: ignore[method-assign]

    # The cluster moves on without this node: its view no longer follows the store.
    backend.stores.remove(broker.store)
    with backend.transaction() as revision:
        state = backend.partitions[("t", 0)]
        backend.partitions[("t", 0)] = replace(
            state,
            leader=FOLLOWER,
            leader_epoch=state.leader_epoch + 1,
            isr=(FOLLOWER,),
            version=revision,
        )
    body = await problem(
        await client.get(records_path("t", 0), params=past_end), 421, "NOT_LEADER_OR_FOLLOWER"
    )
    assert body["leader"] == FOLLOWER
    # Below the log end this node still answers what it has committed.
    assert [r["offset"] for r in (await fetch(client))["records"]] == [0]


async def test_a_refusal_for_one_partition_does_not_hide_another_one_appended(
    client: Client, aiohttp_raw_server: Any
) -> None:
    """Partition 1 is led by another node, which refuses (its ISR shrank after this node's
    view last saw it); partition 0, led here, has appended: the answer must say so."""

    async def refuse(request: web.BaseRequest) -> web.Response:
        body = {
            "type": "https://sluice.dev/problems/not-enough-replicas",
            "title": "Service Unavailable",
            "status": 503,
            "detail": "t-1 has 1 in-sync replicas [1]; min.insync.replicas is 2",
            "code": "NOT_ENOUGH_REPLICAS",
        }
        return web.json_response(body, status=503, content_type="application/problem+json")

    other = await aiohttp_raw_server(refuse)
    await create_topic(client, partitions=2)
    await lead_elsewhere(client, str(other.make_url("")).rstrip("/"), (1,))

    response = await client.post(
        records_path("t"),
        params={"acks": "all"},
        json={"records": [{"value": 0, "partition": 0}, {"value": 1, "partition": 1}]},
    )
    body = await problem(response, 503, "PARTIALLY_APPENDED")
    assert body["results"] == [{"partition": 0, "base_offset": 0, "count": 1}]
    assert body["refused_partitions"] == [1]
    assert body["cause"] == "NOT_ENOUGH_REPLICAS"
    assert response.headers["Retry-After"] == "1"
    assert [r["value"] for r in (await fetch(client, "t", 0))["records"]] == [0]


async def test_a_partition_appended_here_after_its_leader_died_is_reported_when_its_acks_fail(
    start: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Partition 1's leader is down; once the cluster moves it here, its batch is appended
    here and its acks=all wait times out. The answer must say partition 1 has the records
    (REQUEST_TIMED_OUT: they may commit), never that it refused them (a definite refusal
    promises nothing was appended)."""
    client = await start()
    await create_topic(client, partitions=2)
    with socket.socket() as closed:  # a port nothing listens on: the leader is down
        closed.bind(("127.0.0.1", 0))
        dead_url = f"http://127.0.0.1:{closed.getsockname()[1]}"
    backend = await lead_elsewhere(client, dead_url, (1,))
    replica = gateway(client).replicas.local("t", 1)
    assert replica is not None

    producer = gateway(client).producer
    waiting = asyncio.Event()
    next_leader = producer.appender._next_leader

    async def noted(topic: str, partition: int, url: str) -> Partition | str:
        waiting.set()
        return await next_leader(topic, partition, url)

    monkeypatch.setattr(producer.appender, "_next_leader", noted)
    answering = asyncio.ensure_future(
        client.post(
            records_path("t"),
            params={"acks": "all", "timeout_ms": "200"},
            json={"records": [{"value": 0, "partition": 0}, {"value": 1, "partition": 1}]},
        )
    )
    await asyncio.wait_for(waiting.wait(), 10)
    # The cluster moves partition 1 here; node 1 stays in its ISR and never fetches.
    with backend.transaction() as revision:
        state = backend.partitions[("t", 1)]
        backend.partitions[("t", 1)] = replace(
            state, leader=0, leader_epoch=state.leader_epoch + 1, version=revision
        )
    await problem(await answering, 504, "REQUEST_TIMED_OUT")
    assert [r["value"] for r in (await fetch(client, "t", 0))["records"]] == [0]
    assert replica.log.log_end_offset == 1  # appended, uncommitted while node 1 lags


async def test_a_refusal_elsewhere_does_not_hide_a_partition_that_may_have_appended(
    client: Client, aiohttp_raw_server: Any
) -> None:
    """Partitions 1 and 2 are led by another node: it refuses partition 1 (NOT_ENOUGH_REPLICAS,
    nothing appended) and times out on partition 2's acks (its records may commit). The
    answer is that timeout, never the refusal, which would promise nothing was appended."""

    async def answer(request: web.BaseRequest) -> web.Response:
        status, code = (503, "NOT_ENOUGH_REPLICAS") if "/1/append" in request.path else (
            504, "REQUEST_TIMED_OUT")  # fmt: skip
        body = {"title": "refused", "status": status, "detail": code, "code": code}
        return web.json_response(body, status=status, content_type="application/problem+json")

    other = await aiohttp_raw_server(answer)
    await create_topic(client, partitions=3)
    await lead_elsewhere(client, str(other.make_url("")).rstrip("/"), (1, 2))
    response = await client.post(
        records_path("t"),
        params={"acks": "all"},
        json={"records": [{"value": 1, "partition": 1}, {"value": 2, "partition": 2}]},
    )
    await problem(response, 504, "REQUEST_TIMED_OUT")


@pytest.mark.parametrize("topic", sorted(INTERNAL_TOPICS))
async def test_a_clients_batches_never_reach_an_internal_topic_below_http(
    client: Client, topic: str
) -> None:
    """The rule holds below the routes: the produce front's two ways into an append and the
    forwarded batches' route refuse an internal topic whichever route sent the batches, and
    nothing is appended; the coordinators append to their own partitions directly."""
    if topic == SHARE_GROUP_STATE:
        await gateway(client).share_groups_ready()
    if topic == TRANSACTION_STATE:
        await gateway(client).transactions_ready()
    before = gateway(client).replicas.local(topic, 0)
    assert before is not None
    end = before.log_end_offset
    appender = gateway(client).producer.appender
    batch = PartitionBatch(0, fmt.encode_batch([fmt.RecordInput(b"k", b"1", [], None)]), 1)
    with pytest.raises(InternalTopicWrite):
        appender.append_now(topic, batch, Acks.LEADER, lambda leader, landing: None)
    with pytest.raises(InternalTopicWrite):
        await appender.append_records(topic, [batch], Acks.LEADER, 1_000, {})
    forwarded = await client.post(
        APPEND_ROUTE.format(topic=topic, partition=0),
        data=bytes(batch.data),
        headers={"Content-Type": RECORD_BATCH},
    )
    await problem(forwarded, 403, "INTERNAL_TOPIC")
    assert before.log_end_offset == end
