"""EtcdMetadataStore and EtcdClient against a real etcd: membership, leases, election, fenced
and compare-and-set writes, offline reports, the watch, failover between endpoints and etcd
restarts."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import aiohttp
import pytest

from engine.errors import TopicAlreadyExists, UnknownTopic
from replication.errors import FencedController, MetadataUnavailable
from replication.etcd_client import EtcdClient, Events, Put, Snapshot, TxnResult
from replication.etcd_store import EtcdMetadataStore
from replication.metadata import (
    MAX_PARTITIONS_PER_WRITE,
    NO_LEADER,
    ClusterView,
    LogEnd,
    NodeInfo,
    PartitionState,
    TopicSpec,
)
from tests.replication.conftest import EtcdProcess, FreezingProxy

WAIT_S = 10.0

StoreFactory = Callable[..., Awaitable[EtcdMetadataStore]]


@pytest.fixture
def prefix() -> str:
    return f"/test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def client(etcd_server: EtcdProcess) -> AsyncIterator[EtcdClient]:
    """An out-of-band client, to act on etcd behind the stores' backs."""
    etcd = EtcdClient([etcd_server.url])
    yield etcd
    await etcd.close()


@pytest.fixture
async def make_store(etcd_server: EtcdProcess, prefix: str) -> AsyncIterator[StoreFactory]:
    """Start stores under the test's prefix (on the module's etcd unless told otherwise)."""
    stores: list[EtcdMetadataStore] = []

    async def make(
        node_id: int, endpoints: Sequence[str] | None = None, cluster_id: str | None = None
    ) -> EtcdMetadataStore:
        store = EtcdMetadataStore(
            endpoints or [etcd_server.url], prefix=prefix, cluster_id=cluster_id
        )
        stores.append(store)
        await store.start(NodeInfo(node_id, f"http://127.0.0.1:{9000 + node_id}"))
        return store

    yield make
    for store in stores:
        await store.close()


@contextlib.contextmanager
def dead_endpoint() -> Iterator[str]:
    """A loopback URL nothing listens on (the port stays bound, so nothing else takes it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def topic(name: str, partitions: int = 2, version: int = 0) -> TopicSpec:
    return TopicSpec(name, uuid.uuid4().hex, partitions, 2, {"retention.ms": 1000}, version)


def states(partitions: int = 2) -> list[PartitionState]:
    return [PartitionState(1, 0, (1, 2), (1, 2)) for _ in range(partitions)]


async def live_lease(client: EtcdClient, prefix: str, node_id: int) -> int:
    kv = await client.get(f"{prefix}/live/{node_id}".encode())
    assert kv is not None
    return kv.lease


async def test_start_registers_the_node_and_close_leaves_the_live_set(
    make_store: StoreFactory,
) -> None:
    one = await make_store(1)
    two = await make_store(2)
    assert await one.wait_for(lambda view: view.live == {1, 2}, WAIT_S)
    assert one.view.nodes[2] == NodeInfo(2, "http://127.0.0.1:9002")
    assert one.view.cluster_id and one.view.cluster_id == two.view.cluster_id
    await two.close()
    assert await one.wait_for(lambda view: view.live == {1}, WAIT_S)
    assert set(one.view.nodes) == {1, 2}  # a dead node's URL stays known
    await one.close()
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []


async def test_cluster_id_is_created_once_and_must_match(make_store: StoreFactory) -> None:
    first = await make_store(1)
    second = await make_store(2, cluster_id=first.view.cluster_id)
    assert second.view.cluster_id == first.view.cluster_id
    with pytest.raises(MetadataUnavailable, match="holds cluster"):
        await make_store(3, cluster_id="another-cluster")
    assert [t for t in asyncio.all_tasks() if t.get_name() == "etcd-watch-3"] == []


async def test_a_lost_lease_leaves_the_live_set_then_registers_again(
    make_store: StoreFactory, client: EtcdClient, prefix: str
) -> None:
    one = await make_store(1)
    two = await make_store(2)
    assert await two.wait_for(lambda view: view.live == {1, 2}, WAIT_S)
    seen: list[frozenset[int]] = []
    two.add_listener(lambda view: seen.append(view.live))
    old_lease = await live_lease(client, prefix, 1)
    await client.revoke(old_lease)
    assert await two.wait_for(lambda view: 1 not in view.live, WAIT_S)
    assert await two.wait_for(lambda view: view.live == {1, 2}, WAIT_S)
    assert frozenset({2}) in seen
    assert await live_lease(client, prefix, 1) != old_lease
    assert await one.wait_for(lambda view: view.live == {1, 2}, WAIT_S)


async def test_an_offline_report_lives_under_the_lease_and_is_written_again_under_the_next(
    make_store: StoreFactory, client: EtcdClient, prefix: str
) -> None:
    one = await make_store(1)
    two = await make_store(2)
    reported = frozenset({("t", 0), ("u", 3)})
    one.report_offline(reported)
    assert await two.wait_for(lambda view: view.offline == {1: reported}, WAIT_S)
    old_lease = await live_lease(client, prefix, 1)
    kv = await client.get(f"{prefix}/offline/1".encode())
    assert kv is not None and kv.lease == old_lease

    await client.revoke(old_lease)
    assert await two.wait_for(lambda view: 1 not in view.live and view.offline == {}, WAIT_S)
    assert await two.wait_for(lambda view: 1 in view.live and view.offline == {1: reported}, WAIT_S)
    kv = await client.get(f"{prefix}/offline/1".encode())
    assert kv is not None and kv.lease == await live_lease(client, prefix, 1) != old_lease

    one.report_offline([])
    assert await two.wait_for(lambda view: view.offline == {}, WAIT_S)


async def test_a_shutting_down_mark_lives_under_the_lease_and_a_new_process_drops_it(
    make_store: StoreFactory, client: EtcdClient, prefix: str
) -> None:
    one = await make_store(1)
    two = await make_store(2)
    await one.begin_shutdown()
    assert await two.wait_for(lambda view: view.shutting_down == {1}, WAIT_S)
    old_lease = await live_lease(client, prefix, 1)
    kv = await client.get(f"{prefix}/shutting_down/1".encode())
    assert kv is not None and kv.lease == old_lease
    await client.revoke(old_lease)  # the lease lost mid-shutdown: the mark comes back with it
    assert await two.wait_for(lambda view: 1 not in view.live, WAIT_S)
    assert await two.wait_for(lambda view: view.shutting_down == {1} and 1 in view.live, WAIT_S)
    again = await make_store(1)  # a new process of node 1, before the old lease runs out
    assert await two.wait_for(lambda view: view.shutting_down == frozenset(), WAIT_S)
    assert again.view.shutting_down == frozenset()


async def test_a_resigning_controller_hands_the_role_to_the_next_candidate(
    make_store: StoreFactory,
) -> None:
    one = await make_store(1)
    two = await make_store(2)
    await one.campaign()
    second = asyncio.create_task(two.campaign())
    assert await two.wait_for(lambda view: view.controller == 1, WAIT_S)
    await one.resign()
    fence = await asyncio.wait_for(second, WAIT_S)
    assert fence.node_id == 2
    assert await one.wait_for(lambda view: view.controller == 2 and 1 in view.live, WAIT_S)


async def test_an_offline_report_is_retried_while_etcd_is_unavailable(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    one = await make_store(1)
    txn = one._client.txn
    failures = 2

    async def down_at_first(*args: Any, **kwargs: Any) -> TxnResult:
        nonlocal failures
        if failures:
            failures -= 1
            raise MetadataUnavailable("etcd is down")
        return await txn(*args, **kwargs)

    monkeypatch.setattr(one._client, "txn", down_at_first)
    one.report_offline([("t", 0)])
    assert await one.wait_for(lambda view: view.offline == {1: {("t", 0)}}, WAIT_S)
    assert failures == 0


async def test_one_controller_and_the_next_takes_over_when_it_leaves(
    make_store: StoreFactory, client: EtcdClient, prefix: str
) -> None:
    one = await make_store(1)
    two = await make_store(2)
    fence = await one.campaign()
    assert fence.node_id == 1 and fence.key.startswith(f"{prefix}/controller/")
    _, revision = await client.get_prefix(prefix.encode())
    election = client.watch_prefix(f"{prefix}/controller/".encode(), revision + 1)
    second = asyncio.create_task(two.campaign())
    created = await anext(election)  # two's election key: two waits behind one
    await election.aclose()
    assert await two.wait_for(lambda view: view.revision >= created.revision, WAIT_S)
    assert one.view.controller == two.view.controller == 1
    assert not second.done()
    await one.close()
    fence_two = await asyncio.wait_for(second, WAIT_S)
    assert fence_two.node_id == 2 and fence_two.create_revision > fence.create_revision
    assert await two.wait_for(lambda view: view.controller == 2, WAIT_S)


async def test_a_write_after_losing_the_election_is_fenced(
    make_store: StoreFactory, client: EtcdClient, prefix: str
) -> None:
    one = await make_store(1)
    two = await make_store(2)
    stale = await one.campaign()
    second = asyncio.create_task(two.campaign())
    await client.revoke(await live_lease(client, prefix, 1))
    fence = await asyncio.wait_for(second, WAIT_S)
    with pytest.raises(FencedController):
        await one.create_topic(stale, topic("t"), states())
    with pytest.raises(FencedController):
        await one.update_topic(stale, topic("t"), {})
    with pytest.raises(FencedController):
        await one.delete_topic(stale, "t")
    await two.create_topic(fence, topic("t"), states())
    assert await two.wait_for(lambda view: view.partition("t", 0) is not None, WAIT_S)
    current = two.view.partition("t", 0)
    assert current is not None
    assert await one.set_partition("t", 0, current, stale) is None
    assert await two.set_partition("t", 0, current, fence) is not None
    # One campaigns again under its new lease, and waits behind two.
    assert await one.wait_for(lambda view: view.live == {1, 2}, WAIT_S)
    again = asyncio.create_task(one.campaign())
    await two.close()
    assert (await asyncio.wait_for(again, WAIT_S)).node_id == 1


async def test_create_topic_twice_raises_topic_already_exists(make_store: StoreFactory) -> None:
    one = await make_store(1)
    fence = await one.campaign()
    await one.create_topic(fence, topic("orders", 3), states(3))
    with pytest.raises(TopicAlreadyExists):
        await one.create_topic(fence, topic("orders", 1), states(1))
    assert await one.wait_for(lambda view: "orders" in view.topics, WAIT_S)
    spec = one.view.topics["orders"]
    assert (spec.partitions, spec.replication_factor) == (3, 2)
    assert spec.configs == {"retention.ms": 1000}
    assert spec.version == one.view.partitions[("orders", 2)].version > 0


async def test_set_partition_is_a_compare_and_set_on_the_version(
    make_store: StoreFactory,
) -> None:
    one = await make_store(1)
    fence = await one.campaign()
    await one.create_topic(fence, topic("t"), states())
    assert await one.wait_for(lambda view: view.partition("t", 1) is not None, WAIT_S)
    read = one.view.partition("t", 1)
    assert read is not None
    shrunk = PartitionState(1, 0, (1, 2), (1,), read.version)
    stored = await one.set_partition("t", 1, shrunk)
    assert stored is not None and stored.version > read.version and stored.isr == (1,)
    assert await one.set_partition("t", 1, PartitionState(2, 1, (1, 2), (2,), read.version)) is None
    assert await one.set_partition("t", 9, PartitionState(1, 0, (1,), (1,))) is None
    assert await one.wait_for(lambda view: view.partition("t", 1) == stored, WAIT_S)


async def test_set_partitions_writes_all_or_none(make_store: StoreFactory) -> None:
    one = await make_store(1)
    fence = await one.campaign()
    await one.create_topic(fence, topic("t", 3), states(3))
    assert await one.wait_for(lambda view: view.partition("t", 2) is not None, WAIT_S)
    read = {p: one.view.partitions[("t", p)] for p in range(3)}
    shrunk = {p: replace(read[p], isr=(read[p].leader,)) for p in range(3)}
    stale = replace(shrunk[2], version=read[2].version - 1)
    batch = [(("t", 0), shrunk[0]), (("t", 1), shrunk[1]), (("t", 2), stale)]
    assert await one.set_partitions(batch, fence) is None  # one stale version: nothing written
    assert await one.set_partitions(batch[:2], replace(fence, create_revision=1)) is None
    assert all(one.view.partitions[("t", p)] == read[p] for p in range(3))
    stored = await one.set_partitions([(("t", p), shrunk[p]) for p in range(3)], fence)
    assert stored is not None and len({s.version for s in stored}) == 1  # one transaction
    assert stored[0].version > max(r.version for r in read.values())
    assert all(s.isr == (1,) for s in stored)
    assert await one.wait_for(lambda view: view.partition("t", 2) == stored[2], WAIT_S)
    too_many = [(("t", 0), shrunk[0])] * (MAX_PARTITIONS_PER_WRITE + 1)
    with pytest.raises(ValueError, match="partitions per write"):
        await one.set_partitions(too_many, fence)


async def test_update_topic_is_a_compare_and_set_on_the_version(
    make_store: StoreFactory,
) -> None:
    one = await make_store(1)
    fence = await one.campaign()
    await one.create_topic(fence, topic("t"), states())
    assert await one.wait_for(lambda view: "t" in view.topics, WAIT_S)
    read = one.view.topics["t"]
    grown = TopicSpec("t", read.topic_id, 3, 2, {}, read.version)
    assert await one.update_topic(fence, grown, {2: PartitionState(2, 0, (2, 1), (2, 1))})
    assert not await one.update_topic(fence, grown, {})
    assert await one.wait_for(lambda view: view.topics["t"].partitions == 3, WAIT_S)
    assert one.view.partition("t", 2) == PartitionState(
        2, 0, (2, 1), (2, 1), one.view.topics["t"].version
    )
    with pytest.raises(UnknownTopic):
        await one.update_topic(fence, topic("missing", version=5), {})


async def test_the_watch_delivers_changes_made_by_another_store(
    make_store: StoreFactory,
) -> None:
    one = await make_store(1)
    two = await make_store(2)
    views: list[ClusterView] = []
    two.add_listener(views.append)
    fence = await one.campaign()
    spec = topic("t")
    await one.create_topic(fence, spec, states())
    assert await two.wait_for(lambda view: view.partition("t", 1) is not None, WAIT_S)
    assert two.view.topics["t"].topic_id == spec.topic_id
    assert views[-1] is two.view
    assert all(a.revision < b.revision for a, b in itertools.pairwise(views))


async def test_delete_topic_removes_the_topic_and_its_partitions(
    make_store: StoreFactory,
) -> None:
    one = await make_store(1)
    two = await make_store(2)
    fence = await one.campaign()
    await one.create_topic(fence, topic("gone"), states(2))
    await one.create_topic(fence, topic("gone2"), states(1))  # shares the name as a prefix
    assert await two.wait_for(lambda view: ("gone2", 0) in view.partitions, WAIT_S)
    await one.delete_topic(fence, "gone")
    assert await two.wait_for(lambda view: "gone" not in view.topics, WAIT_S)
    assert set(two.view.partitions) == {("gone2", 0)}
    with pytest.raises(UnknownTopic):
        await one.delete_topic(fence, "gone")


async def test_subscriptions_are_compare_and_set_and_reach_every_store(
    make_store: StoreFactory,
) -> None:
    """A subscription's document is created once, replaced only at its version, seen by the
    other nodes' watches, and deleted once (a name sharing the prefix stays)."""
    one = await make_store(1)
    two = await make_store(2)
    created = await one.put_subscription("hook", b'{"v": 1}', 0)
    assert created is not None
    assert await one.put_subscription("hook", b'{"v": 9}', 0) is None  # exists already
    assert await one.put_subscription("hook2", b'{"other": true}', 0) is not None
    assert await two.wait_for(lambda view: "hook2" in view.subscriptions, WAIT_S)
    seen = two.view.subscriptions["hook"]
    assert (seen.document, seen.version) == (b'{"v": 1}', created)
    assert await two.put_subscription("hook", b'{"v": 2}', created + 1000) is None  # stale
    replaced = await two.put_subscription("hook", b'{"v": 2}', created)
    assert replaced is not None and replaced > created
    assert await one.wait_for(
        lambda view: view.subscriptions["hook"].document == b'{"v": 2}', WAIT_S
    )
    assert await one.delete_subscription("hook")
    assert not await one.delete_subscription("hook")
    assert await two.wait_for(lambda view: "hook" not in view.subscriptions, WAIT_S)
    assert set(two.view.subscriptions) == {"hook2"}


async def test_a_dead_first_endpoint_is_skipped(
    make_store: StoreFactory, etcd_server: EtcdProcess
) -> None:
    with dead_endpoint() as dead:
        one = await make_store(1, [dead, etcd_server.url])
        two = await make_store(2, [dead, etcd_server.url])
        fence = await one.campaign()
        await one.create_topic(fence, topic("t"), states())
        assert await two.wait_for(lambda view: "t" in view.topics and view.live == {1, 2}, WAIT_S)


async def test_no_reachable_endpoint_fails_start_with_metadata_unavailable(
    make_store: StoreFactory,
) -> None:
    with dead_endpoint() as dead, pytest.raises(MetadataUnavailable, match="reachable"):
        await make_store(1, [dead])


async def test_a_hung_endpoint_moves_the_watch_to_the_next(
    make_store: StoreFactory, etcd_server: EtcdProcess, freezing_proxy: FreezingProxy
) -> None:
    one = await make_store(1)
    two = await make_store(2, [freezing_proxy.url, etcd_server.url])
    freezing_proxy.freeze()
    fence = await one.campaign()
    await one.create_topic(fence, topic("t"), states())
    # two's next keepalive times out on the frozen endpoint, which also restarts its watch.
    assert await two.wait_for(lambda view: "t" in view.topics, WAIT_S)
    assert await one.wait_for(lambda view: view.live == {1, 2}, WAIT_S)


async def test_a_stopping_store_asks_nothing_past_the_stops_deadline(
    make_store: StoreFactory, client: EtcdClient, prefix: str
) -> None:
    store = await make_store(1)
    lease = await live_lease(client, prefix, 1)
    store.stopping(asyncio.get_running_loop().time())
    with pytest.raises(MetadataUnavailable, match="past the stop's deadline"):
        await store.begin_shutdown()
    await store.close()  # the lease is not revoked: it runs out
    assert await client.get(f"{prefix}/shutting_down/1".encode()) is None
    assert await live_lease(client, prefix, 1) == lease


async def test_a_stopping_store_whose_etcd_hangs_waits_for_it_once(
    etcd_server: EtcdProcess, freezing_proxy: FreezingProxy, client: EtcdClient, prefix: str
) -> None:
    """The first of the stop's requests waits (at most the lease's TTL) and fails; etcd then
    counts as unreachable: the mark and the lease's revocation are not even sent."""
    store = EtcdMetadataStore([freezing_proxy.url], prefix=prefix, lease_ttl_s=1.0)
    await store.start(NodeInfo(1, "http://127.0.0.1:9001"))
    lease = await live_lease(client, prefix, 1)
    store.stopping(asyncio.get_running_loop().time() + 60.0)
    freezing_proxy.freeze()
    with pytest.raises(MetadataUnavailable, match="TimeoutError"):
        await store.resign()
    with pytest.raises(MetadataUnavailable, match="did not answer earlier in this stop"):
        await store.begin_shutdown()
    await store.close()
    assert await client.get(f"{prefix}/shutting_down/1".encode()) is None
    kv = await client.get(f"{prefix}/live/1".encode())
    assert kv is None or kv.lease == lease  # expired by now, or about to: never revoked


async def test_the_store_recovers_when_etcd_restarts_mid_watch(
    own_etcd: EtcdProcess, make_store: StoreFactory
) -> None:
    one = await make_store(1, [own_etcd.url])
    two = await make_store(2, [own_etcd.url])
    fence = await one.campaign()
    await one.create_topic(fence, topic("before"), states())
    assert await two.wait_for(lambda view: "before" in view.topics, WAIT_S)
    own_etcd.stop()
    own_etcd.start()
    await one.create_topic(fence, topic("after"), states())
    assert await two.wait_for(lambda view: "after" in view.topics, WAIT_S)
    assert two.view.live == {1, 2} and two.view.controller == 1


async def test_a_watch_from_a_compacted_revision_reloads_a_snapshot(
    client: EtcdClient, etcd_server: EtcdProcess, prefix: str
) -> None:
    key = f"{prefix}/k".encode()
    first = await client.txn([], [Put(key, b"1")])
    latest = await client.txn([], [Put(key, b"2")])
    async with aiohttp.ClientSession() as http:
        compact = {"revision": latest.revision, "physical": True}
        async with http.post(f"{etcd_server.url}/v3/kv/compaction", json=compact) as response:
            assert response.status == 200
    watch = client.watch_prefix(f"{prefix}/".encode(), first.revision)
    update = await anext(watch)
    assert isinstance(update, Snapshot) and update.revision >= latest.revision
    assert [(kv.key, kv.value) for kv in update.kvs] == [(key, b"2")]
    await client.txn([], [Put(key, b"3")])
    update = await anext(watch)
    assert isinstance(update, Events) and update.events[0].kv.value == b"3"
    await watch.aclose()


async def test_a_too_large_transaction_names_the_etcd_limit(
    client: EtcdClient, prefix: str
) -> None:
    puts = [Put(f"{prefix}/wide/{i}".encode(), b"x") for i in range(200)]
    with pytest.raises(MetadataUnavailable, match="max-txn-ops"):
        await client.txn([], puts)


async def test_each_process_start_is_an_incarnation_that_guards_isr_writes(
    make_store: StoreFactory, etcd_server: EtcdProcess, prefix: str
) -> None:
    """A store's first registration records the process's incarnation (its revision is the
    broker epoch; whether it started cleanly rides with it); a second process of the same
    node gets a later one, and a write that assumed the earlier incarnation fails."""
    one = await make_store(1)
    fence = await one.campaign()
    await one.create_topic(fence, topic("t"), states())
    assert await one.wait_for(lambda view: view.partition("t", 0) is not None, WAIT_S)
    first = one.registration
    assert first > 0 and one.view.registered[1] == first and not one.view.unclean_starts
    read = one.view.partitions[("t", 0)]
    restarted = EtcdMetadataStore([etcd_server.url], prefix=prefix)
    try:
        await restarted.start(NodeInfo(2, "http://127.0.0.1:9002"), clean_start=False)
        assert await one.wait_for(lambda view: 2 in view.unclean_starts, WAIT_S)
        assert one.view.registered[2] == restarted.registration > read.version
        assert one.view.restarted(read) == frozenset({2})
        shrunk = replace(read, isr=(1, 2))
        assert await one.set_partition("t", 0, shrunk, incarnations={2: 0}) is None
        assert await one.set_partition("t", 0, shrunk, incarnations={2: restarted.registration})
    finally:
        await restarted.close()
    assert one.registration == first  # a store's incarnation is its process's


async def test_a_full_batch_guarded_by_every_members_incarnation_fits_the_default_txn_ops(
    make_store: StoreFactory,
) -> None:
    """MAX_PARTITIONS_PER_WRITE partitions, each write assuming three nodes' incarnations (the
    batched ISR writes): one guard per node for the whole write, within this etcd's default
    --max-txn-ops of 128; a guard that no longer holds still fails all of it."""
    one = await make_store(1)
    fence = await one.campaign()
    count = MAX_PARTITIONS_PER_WRITE
    await one.create_topic(fence, topic("t", count), states(count))
    assert await one.wait_for(lambda view: view.partition("t", count - 1) is not None, WAIT_S)
    read = [(("t", p), one.view.partitions[("t", p)]) for p in range(count)]
    assumed = [{1: one.registration, 5: 0, 6: 0}] * count  # 5, 6: never registered
    stale = [{1: one.registration, 5: 1}, *assumed[1:]]
    assert await one.set_partitions(read, fence, stale) is None
    assert await one.set_partitions(read, fence, assumed) is not None


async def test_a_partitions_recovering_members_are_stored(make_store: StoreFactory) -> None:
    """Its recovering members and eligible leader replicas (a recovery waits for both)."""
    one = await make_store(1)
    fence = await one.campaign()
    await one.create_topic(fence, topic("t"), states())
    assert await one.wait_for(lambda view: view.partition("t", 0) is not None, WAIT_S)
    read = one.view.partitions[("t", 0)]
    assert (read.recovering, read.elr) == ((), ())
    waiting = replace(read, leader=-1, leader_epoch=1, recovering=(1,), elr=(2,))
    stored = await one.set_partition("t", 0, waiting, fence)
    assert stored is not None
    assert await one.wait_for(lambda view: view.partition("t", 0) == stored, WAIT_S)
    assert one.view.crashed(stored) == frozenset({1})


async def test_log_ends_are_reported_for_a_recovering_state_and_go_with_its_recovery(
    make_store: StoreFactory, etcd_server: EtcdProcess, prefix: str
) -> None:
    """A node's log end report is guarded by the state that asked for it, reaches every view
    (tied to the reporting process's incarnation), and is deleted by the write that ends the
    partition's recovery or by the topic's deletion. A full batch each way fits etcd's default
    --max-txn-ops (this etcd's)."""
    one = await make_store(1)
    fence = await one.campaign()
    count = MAX_PARTITIONS_PER_WRITE
    await one.create_topic(fence, topic("t", count), states(count))
    assert await one.wait_for(lambda view: view.partition("t", count - 1) is not None, WAIT_S)
    read = [one.view.partitions[("t", p)] for p in range(count)]
    waiting = [replace(s, leader=NO_LEADER, leader_epoch=1, recovering=(1, 2)) for s in read]
    stored = await one.set_partitions([(("t", p), s) for p, s in enumerate(waiting)], fence)
    assert stored is not None
    two = EtcdMetadataStore([etcd_server.url], prefix=prefix)
    try:
        await two.start(NodeInfo(2, "http://127.0.0.1:9002"), clean_start=False)
        ends = {p: LogEnd(0, 100 + p, two.registration) for p in range(count)}
        reports = [(("t", p), s.version, ends[p]) for p, s in enumerate(stored)]
        assert not await two.report_log_ends([(("t", 0), read[0].version, ends[0])])
        assert await two.report_log_ends(reports)
        assert await one.wait_for(lambda view: len(view.log_ends) == count, WAIT_S)
        assert one.view.reported_log_ends("t", 7) == {2: ends[7]}

        recovered = [
            (("t", p), replace(s, leader=2, leader_epoch=2, isr=(2,), recovering=()))
            for p, s in enumerate(stored)
        ]
        keys = [key for key, _ in recovered]
        assert await one.set_partitions(recovered[1:], fence, (), keys[1:]) is not None
        assert await one.wait_for(lambda view: list(view.log_ends) == [("t", 0)], WAIT_S)
        await one.delete_topic(fence, "t")
        assert await one.wait_for(lambda view: view.log_ends == {}, WAIT_S)
        await one.create_topic(fence, topic("t", 1), states(1))
        assert await one.wait_for(lambda view: "t" in view.topics, WAIT_S)
        created = one.view.revision  # two's view may still hold the topic before its deletion
        assert await two.wait_for(lambda view: view.revision >= created, WAIT_S)
        assert "t" in two.view.topics
        assert two.view.log_ends == {}  # a topic created again starts with none
    finally:
        await two.close()


async def test_a_topic_wider_than_a_transaction_is_created_in_batches(
    make_store: StoreFactory, client: EtcdClient, prefix: str
) -> None:
    """1,000 partitions on an etcd with the default --max-txn-ops (128): the partitions are
    written in batches, the topic record last; nobody sees a partition before its topic."""
    one = await make_store(1)
    two = await make_store(2)
    fence = await one.campaign()
    await client.txn([], [Put(f"{prefix}/partitions/cut/{p}".encode(), b"{}") for p in range(3)])
    await one.create_topic(fence, topic("wide", 1000), states(1000))
    for store in (one, two):
        assert await store.wait_for(lambda v: "wide" in v.topics, 10)
        view = store.view
        assert sorted(p for t, p in view.partitions if t == "wide") == list(range(1000))
        assert not any(t == "cut" for t, _ in view.partitions)  # a creation cut short
    with pytest.raises(TopicAlreadyExists):
        await one.create_topic(fence, topic("wide", 1000), states(1000))
    grown = one.view.topics["wide"]
    more = {p: PartitionState(1, 0, (1, 2), (1, 2)) for p in range(1000, 1300)}
    assert await one.update_topic(fence, replace(grown, partitions=1300), more)
    assert await two.wait_for(lambda v: v.topics["wide"].partitions == 1300, 10)
    assert sum(1 for t, _ in two.view.partitions if t == "wide") == 1300
