"""The controller over the in-memory metadata store: topic changes, leader elections on node
loss and on replicas reported offline (a failed disk), fencing, preferred-leader rebalancing,
and leadership invariants under random failures.

Several stores share one MemoryBackend, each acting as one node with its own Controller."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.config import TopicConfig
from engine.errors import (
    InvalidConfig,
    InvalidPartitions,
    InvalidTopicName,
    TopicAlreadyExists,
    UnknownTopic,
)
from replication import controller as controller_module
from replication.controller import Controller, elect_leader, elect_preferred
from replication.errors import (
    FencedController,
    InvalidReplicationFactor,
    MetadataUnavailable,
    NotController,
)
from replication.memory_store import MemoryBackend, MemoryMetadataStore
from replication.metadata import (
    MAX_PARTITIONS_PER_WRITE,
    NO_LEADER,
    ClusterView,
    Fence,
    LogEnd,
    NodeInfo,
    PartitionState,
    TopicPartition,
    TopicSpec,
    with_eligible_leaders,
)

NODES = (1, 2, 3)
TIMEOUT = 5.0


@dataclass
class Cluster:
    backend: MemoryBackend
    observer: MemoryMetadataStore  # attached but not started: sees every view, is no node
    stores: dict[int, MemoryMetadataStore]
    controllers: dict[int, Controller]

    @property
    def view(self) -> ClusterView:
        return self.observer.view

    def state(self, topic: str, partition: int) -> PartitionState:
        state = self.view.partition(topic, partition)
        assert state is not None
        return state

    async def until(self, predicate: Callable[[ClusterView], bool], what: str) -> None:
        assert await self.observer.wait_for(predicate, TIMEOUT), f"timed out waiting for {what}"


def out_of_isr(node: int, partition: int) -> Callable[[ClusterView], bool]:
    """Whether `node` has left the ISR of topic t's `partition`."""
    return lambda view: node not in view.partitions[("t", partition)].isr


@contextlib.asynccontextmanager
async def running_cluster(
    leader_imbalance_check_interval_s: float | None = None,
) -> AsyncIterator[Cluster]:
    """NODES registered and their controllers running; node 1 is the controller."""
    backend = MemoryBackend()
    cluster = Cluster(backend, MemoryMetadataStore(backend), {}, {})
    for node in NODES:
        store = cluster.stores[node] = MemoryMetadataStore(backend)
        await store.start(NodeInfo(node, f"http://node{node}:8080"))
        controller = cluster.controllers[node] = Controller(
            store,
            node,
            TopicConfig(),
            leader_imbalance_check_interval_s=leader_imbalance_check_interval_s,
        )
        controller.start()
        if node == 1:
            await cluster.until(lambda view: view.controller == 1, "node 1 to be controller")
    try:
        yield cluster
    finally:
        for controller in cluster.controllers.values():
            await controller.close()
        for store in [*cluster.stores.values(), cluster.observer]:
            await store.close()


def leader_is(topic: str, partition: int, leader: int) -> Callable[[ClusterView], bool]:
    def check(view: ClusterView) -> bool:
        state = view.partition(topic, partition)
        return state is not None and state.leader == leader

    return check


# -- topics ------------------------------------------------------------------------------------


async def test_create_assigns_replicas_round_robin_and_balances_leaders() -> None:
    async with running_cluster() as c:
        spec = await c.controllers[1].create_topic("orders", 6, 2)
        assert (spec.name, spec.partitions, spec.replication_factor) == ("orders", 6, 2)
        assert spec.version > 0 and c.view.topics["orders"] == spec
        replicas = [c.state("orders", p).replicas for p in range(6)]
        assert replicas == [(1, 2), (2, 3), (3, 1), (1, 2), (2, 3), (3, 1)]
        for p in range(6):
            state = c.state("orders", p)
            assert (state.leader, state.leader_epoch, state.isr) == (replicas[p][0], 0, replicas[p])
        assert Counter(c.state("orders", p).leader for p in range(6)) == {1: 2, 2: 2, 3: 2}

        # Each new topic starts where the cluster's partitions left off.
        for name in ("a", "b", "c"):
            await c.controllers[1].create_topic(name, 1, 3)
        assert [c.state(name, 0).replicas for name in ("a", "b", "c")] == [
            (1, 2, 3),
            (2, 3, 1),
            (3, 1, 2),
        ]


async def test_create_stores_normalised_overrides() -> None:
    async with running_cluster() as c:
        spec = await c.controllers[1].create_topic(
            "t", 1, 1, {"retention.ms": "1000", "unclean.leader.election.enable": "TRUE"}
        )
        assert spec.configs == {"retention.ms": 1000, "unclean.leader.election.enable": True}
        assert c.stores[3].view.topics["t"] == spec


@pytest.mark.parametrize(
    ("name", "partitions", "replication_factor", "configs", "error", "message"),
    [
        ("has space", 1, 1, {}, InvalidTopicName, "may contain only"),
        ("", 1, 1, {}, InvalidTopicName, "non-empty"),
        ("t", 0, 1, {}, InvalidPartitions, "between 1 and"),
        ("t", "3", 1, {}, InvalidPartitions, "must be an integer"),
        ("t", 1, 4, {}, InvalidReplicationFactor, r"larger than the number of live nodes \(3\)"),
        ("t", 1, 0, {}, InvalidReplicationFactor, "at least 1, got 0"),
        ("t", 1, True, {}, InvalidReplicationFactor, "at least 1, got True"),
        ("t", 1, 1, {"retention.msec": 1}, InvalidConfig, "unknown topic config 'retention.msec'"),
        ("t", 1, 1, {"unclean.leader.election.enable": "yes"}, InvalidConfig, "true or false"),
    ],
)
async def test_bad_input_is_refused(
    name: str,
    partitions: int,
    replication_factor: int,
    configs: dict[str, object],
    error: type[Exception],
    message: str,
) -> None:
    async with running_cluster() as c:
        with pytest.raises(error, match=message):
            await c.controllers[1].create_topic(name, partitions, replication_factor, configs)
        assert c.view.topics == {}


async def test_names_must_be_new_and_not_collide() -> None:
    async with running_cluster() as c:
        await c.controllers[1].create_topic("a.b", 1, 1)
        with pytest.raises(TopicAlreadyExists, match=r"'a\.b' already exists"):
            await c.controllers[1].create_topic("a.b", 1, 1)
        with pytest.raises(InvalidTopicName, match=r"collides with existing topic 'a\.b'"):
            await c.controllers[1].create_topic("a_b", 1, 1)


async def test_replication_factor_counts_live_nodes_only() -> None:
    async with running_cluster() as c:
        c.backend.expire(3)
        await c.until(lambda view: 3 not in view.live, "node 3 to leave")
        with pytest.raises(InvalidReplicationFactor, match=r"live nodes \(2\)"):
            await c.controllers[1].create_topic("t", 1, 3)
        spec = await c.controllers[1].create_topic("t", 2, 2)
        assert {c.state("t", p).replicas for p in range(spec.partitions)} == {(1, 2), (2, 1)}


async def test_only_the_controller_changes_topics() -> None:
    async with running_cluster() as c:
        await c.controllers[1].create_topic("t", 1, 1)
        with pytest.raises(NotController, match="node 2 is not the controller; node 1 is"):
            await c.controllers[2].create_topic("u", 1, 1)
        with pytest.raises(NotController):
            await c.controllers[3].alter_topic("t", partitions=2)
        with pytest.raises(NotController):
            await c.controllers[3].delete_topic("t")
        assert set(c.view.topics) == {"t"} and c.view.topics["t"].partitions == 1


async def test_alter_grows_partitions_like_kafka_and_changes_configs() -> None:
    async with running_cluster() as c:
        await c.controllers[1].create_topic("t", 2, 2)
        spec = await c.controllers[1].alter_topic("t", partitions=5)
        assert spec.partitions == 5
        # New partitions continue the round-robin from partition 0's preferred leader.
        assert [c.state("t", p).replicas for p in range(5)] == [
            (1, 2),
            (2, 3),
            (3, 1),
            (1, 2),
            (2, 3),
        ]
        assert all(c.state("t", p).isr == c.state("t", p).replicas for p in range(2, 5))

        spec = await c.controllers[1].alter_topic("t", configs={"retention.ms": "5"})
        assert spec.configs == {"retention.ms": 5}
        spec = await c.controllers[1].alter_topic(
            "t", configs={"retention.ms": None, "cleanup.policy": "compact"}
        )
        assert spec.configs == {"cleanup.policy": "compact"} and spec.partitions == 5
        assert c.view.topics["t"] == spec


async def test_alter_refuses_bad_changes() -> None:
    async with running_cluster() as c:
        await c.controllers[1].create_topic("t", 3, 3)
        with pytest.raises(InvalidPartitions, match="must be larger"):
            await c.controllers[1].alter_topic("t", partitions=3)
        with pytest.raises(InvalidPartitions, match="must be larger"):
            await c.controllers[1].alter_topic("t", partitions=2)
        with pytest.raises(UnknownTopic, match="'nope' does not exist"):
            await c.controllers[1].alter_topic("nope", partitions=4)
        with pytest.raises(InvalidConfig, match="unknown topic config 'nope'"):
            await c.controllers[1].alter_topic("t", configs={"nope": None})
        with pytest.raises(InvalidConfig, match=r"retention\.ms must be an integer"):
            await c.controllers[1].alter_topic("t", configs={"retention.ms": "soon"})
        c.backend.expire(3)
        await c.until(lambda view: 3 not in view.live, "node 3 to leave")
        with pytest.raises(InvalidReplicationFactor, match=r"live nodes \(2\)"):
            await c.controllers[1].alter_topic("t", partitions=4)
        assert c.view.topics["t"].partitions == 3 and c.view.topics["t"].configs == {}


async def test_delete_topic_removes_its_partitions() -> None:
    async with running_cluster() as c:
        await c.controllers[1].create_topic("t", 2, 2)
        await c.controllers[1].create_topic("u", 1, 1)
        await c.controllers[1].delete_topic("t")
        assert set(c.view.topics) == {"u"} and set(c.view.partitions) == {("u", 0)}
        with pytest.raises(UnknownTopic):
            await c.controllers[1].delete_topic("t")


# -- leader elections --------------------------------------------------------------------------


async def test_node_loss_elects_the_next_isr_member_in_the_next_epoch() -> None:
    async with running_cluster() as c:
        await c.controllers[1].create_topic("t", 3, 3)
        c.backend.expire(2)
        await c.until(leader_is("t", 1, 3), "partition 1 to move to node 3")
        state = c.state("t", 1)
        assert (state.replicas, state.leader_epoch, state.isr) == ((2, 3, 1), 1, (3, 1))
        # Partitions led elsewhere keep their leader, and lose the dead node from their ISR
        # at once (Kafka's controller on a session loss), in a new epoch.
        for p in (0, 2):
            await c.until(out_of_isr(2, p), f"node 2 out of {p}'s ISR")
            state = c.state("t", p)
            assert state.leader == state.replicas[0] and state.leader_epoch == 1
            assert state.isr == tuple(r for r in state.replicas if r != 2)


async def test_a_lost_leaders_partitions_are_written_before_isr_shrinks() -> None:
    """Partition 1 (led by node 2) comes after partition 0 in the view, yet its new leader
    is stored first: until then it has none, while the others only wait to drop node 2."""
    async with running_cluster() as c:
        await c.controllers[1].create_topic("t", 3, 3)
        assert c.state("t", 1).leader == 2 and c.state("t", 0).leader != 2
        c.backend.expire(2)
        for p in range(3):
            await c.until(out_of_isr(2, p), f"node 2 out of {p}'s ISR")
        led_anew = c.state("t", 1).version
        assert all(led_anew < c.state("t", p).version for p in (0, 2))


async def shrunk_to_leader(c: Cluster, topic: str, partition: int) -> PartitionState:
    """The leader drops its followers from the ISR (they fell behind), through its own store."""
    state = c.state(topic, partition)
    stored = await c.stores[state.leader].set_partition(
        topic, partition, replace(state, isr=(state.leader,))
    )
    assert stored is not None
    return stored


async def test_no_live_isr_member_takes_the_partition_offline_until_one_returns() -> None:
    async with running_cluster() as c:
        await c.controllers[1].create_topic("t", 2, 2)  # partition 1: replicas (2, 3)
        await shrunk_to_leader(c, "t", 1)
        c.backend.expire(2)
        await c.until(leader_is("t", 1, NO_LEADER), "partition 1 to go offline")
        state = c.state("t", 1)
        assert (state.leader_epoch, state.isr) == (1, (2,))  # node 3 is live but not in sync

        c.backend.revive(2)
        await c.until(leader_is("t", 1, 2), "partition 1 back on node 2")
        state = c.state("t", 1)
        assert (state.leader_epoch, state.isr) == (2, (2,))


async def test_unclean_election_elects_a_replica_outside_the_isr() -> None:
    async with running_cluster() as c:
        await c.controllers[1].create_topic("t", 2, 2, {"unclean.leader.election.enable": True})
        await shrunk_to_leader(c, "t", 1)
        c.backend.expire(2)
        await c.until(leader_is("t", 1, 3), "an unclean election of node 3")
        state = c.state("t", 1)
        assert (state.leader_epoch, state.isr) == (1, (3,))


async def test_enabling_unclean_election_brings_an_offline_partition_online() -> None:
    async with running_cluster() as c:
        await c.controllers[1].create_topic("t", 2, 2)
        await shrunk_to_leader(c, "t", 1)
        c.backend.expire(2)
        await c.until(leader_is("t", 1, NO_LEADER), "partition 1 to go offline")
        await c.controllers[1].alter_topic("t", configs={"unclean.leader.election.enable": "true"})
        await c.until(leader_is("t", 1, 3), "an unclean election of node 3")
        assert c.state("t", 1).leader_epoch == 2


async def test_a_new_controller_takes_over_and_handles_the_next_loss() -> None:
    async with running_cluster() as c:
        await c.controllers[1].create_topic("t", 3, 3)
        c.backend.expire(1)
        await c.until(lambda view: view.controller == 2, "node 2 to become controller")
        await c.until(leader_is("t", 0, 2), "partition 0 to move to node 2")
        assert (c.state("t", 0).leader_epoch, c.state("t", 0).isr) == (1, (2, 3))
        await c.until(
            lambda v: all(1 not in v.partitions[("t", p)].isr for p in range(3)),
            "node 1 out of every ISR",
        )

        c.backend.expire(3)
        await c.until(leader_is("t", 2, 2), "partition 2 to move to node 2")
        state = c.state("t", 2)
        assert (state.replicas, state.leader_epoch, state.isr) == ((3, 1, 2), 2, (2,))
        spec = await c.controllers[2].create_topic("u", 1, 1)
        assert c.state("u", 0).replicas == (2,) and spec.version > 0


async def test_a_stale_controller_is_fenced() -> None:
    async with running_cluster() as c:
        await c.controllers[1].create_topic("t", 1, 3)
        stale = await c.stores[1].campaign()  # node 1's fence: it holds the election now
        c.backend.expire(1)
        await c.until(
            lambda view: view.controller == 2 and leader_is("t", 0, 2)(view), "a new controller"
        )
        state = c.state("t", 0)
        takeover = replace(state, leader=1, leader_epoch=state.leader_epoch + 1)
        assert await c.stores[1].set_partition("t", 0, takeover, stale) is None
        spec = TopicSpec("u", "id", 1, 1, {})
        with pytest.raises(FencedController, match="node 1 is no longer the controller"):
            await c.stores[1].create_topic(stale, spec, [PartitionState(1, 0, (1,), (1,))])
        with pytest.raises(FencedController):
            await c.stores[1].update_topic(stale, c.view.topics["t"], {})
        with pytest.raises(FencedController):
            await c.stores[1].delete_topic(stale, "t")

        c.backend.revive(1)  # back, campaigning behind nodes 2 and 3: the old fence stays dead
        await c.until(lambda view: 1 in view.live, "node 1 to return")
        assert await c.stores[1].set_partition("t", 0, takeover, stale) is None
        with pytest.raises(NotController, match="node 2 is"):
            await c.controllers[1].create_topic("u", 1, 1)
        assert c.view.controller == 2 and c.state("t", 0) == state


async def test_a_concurrent_change_makes_the_controller_decide_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The dead leader's last ISR change lands just before the controller's batch: the batch
    fails whole, each change is written alone, partition 1's fails and is decided again,
    and the others' land."""
    async with running_cluster() as c:
        await c.controllers[1].create_topic("t", 3, 3)  # partition 1: replicas (2, 3, 1)
        raced = False
        set_partitions = c.stores[1].set_partitions

        async def racing(
            states: Sequence[tuple[TopicPartition, PartitionState]],
            fence: Fence | None = None,
            incarnations: Sequence[Mapping[int, int]] = (),
            recovered: Collection[TopicPartition] = (),
        ) -> list[PartitionState] | None:
            nonlocal raced
            if not raced and ("t", 1) in dict(states):
                raced = True  # node 3 is out of partition 1's ISR before the batch lands
                current = c.state("t", 1)
                assert await c.stores[2].set_partition("t", 1, replace(current, isr=(2, 1)))
            return await set_partitions(states, fence, incarnations, recovered)

        monkeypatch.setattr(c.stores[1], "set_partitions", racing)
        c.backend.expire(2)
        await c.until(leader_is("t", 1, 1), "partition 1 to move to node 1")
        state = c.state("t", 1)
        assert raced and (state.leader_epoch, state.isr) == (1, (1,))
        for p in (0, 2):
            await c.until(out_of_isr(2, p), f"node 2 out of {p}'s ISR")


async def preferred_replica_lost_and_back(c: Cluster) -> None:
    """Topic t's partition 2 (replicas 3, 1, 2) moves to node 1 when node 3 is lost; node 3
    comes back live, out of the ISR."""
    await c.controllers[1].create_topic("t", 3, 3)
    c.backend.expire(3)
    await c.until(leader_is("t", 2, 1), "partition 2 to move to node 1")
    c.backend.revive(3)
    await c.until(lambda view: 3 in view.live, "node 3 to return")


async def test_rebalance_moves_leadership_back_to_preferred_replicas() -> None:
    async with running_cluster() as c:
        await preferred_replica_lost_and_back(c)
        assert await c.controllers[1].rebalance_preferred_leaders() == 0  # 3 is not in sync

        state = c.state("t", 2)
        assert await c.stores[1].set_partition("t", 2, replace(state, isr=(1, 2, 3)))
        others = {p: c.state("t", p).leader_epoch for p in (0, 1)}
        assert await c.controllers[1].rebalance_preferred_leaders() == 1
        state = c.state("t", 2)
        assert (state.leader, state.leader_epoch, state.isr) == (3, 2, (1, 2, 3))
        assert {p: c.state("t", p).leader_epoch for p in (0, 1)} == others
        assert await c.controllers[1].rebalance_preferred_leaders() == 0


async def test_rebalance_moves_many_partitions_in_few_writes() -> None:
    """A node back from a restart may be preferred by thousands of partitions: they move in
    transactions of MAX_PARTITIONS_PER_WRITE, one view each, not one write per partition."""
    async with running_cluster() as c:
        await c.controllers[1].create_topic("wide", 300, 3)
        c.backend.expire(3)
        led = [p for p in range(300) if c.state("wide", p).replicas[0] == 3]
        await c.until(
            lambda v: all(v.partitions[("wide", p)].leader != 3 for p in led), "node 3's loss"
        )
        c.backend.revive(3)
        with c.backend.transaction() as revision:
            for p in led:
                state = c.backend.partitions[("wide", p)]
                c.backend.partitions[("wide", p)] = replace(state, isr=(1, 2, 3), version=revision)
        store, writes = c.stores[1], list[int]()
        set_partitions, set_partition = store.set_partitions, store.set_partition

        async def batch(
            states: Sequence[tuple[TopicPartition, PartitionState]],
            fence: Fence | None = None,
            incarnations: Sequence[Mapping[int, int]] = (),
            recovered: Collection[TopicPartition] = (),
        ) -> list[PartitionState] | None:
            writes.append(len(states))
            return await set_partitions(states, fence, incarnations, recovered)

        async def one(
            topic: str,
            partition: int,
            state: PartitionState,
            fence: Fence | None = None,
            incarnations: Mapping[int, int] | None = None,
            recovered: bool = False,
        ) -> PartitionState | None:
            writes.append(1)
            return await set_partition(topic, partition, state, fence, incarnations, recovered)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(store, "set_partitions", batch)
            patch.setattr(store, "set_partition", one)
            assert await c.controllers[1].rebalance_preferred_leaders() == len(led) == 100
        assert writes[-2:] == [MAX_PARTITIONS_PER_WRITE, 100 - MAX_PARTITIONS_PER_WRITE]
        assert 1 not in writes
        assert all(c.state("wide", p).leader == 3 for p in led)


async def test_run_rebalances_on_its_interval() -> None:
    async with running_cluster(leader_imbalance_check_interval_s=0.05) as c:
        await c.controllers[1].create_topic("t", 3, 3)
        c.backend.expire(3)
        await c.until(leader_is("t", 2, 1), "partition 2 to move to node 1")
        c.backend.revive(3)
        state = c.state("t", 2)
        assert await c.stores[1].set_partition("t", 2, replace(state, isr=(1, 2, 3)))
        await c.until(leader_is("t", 2, 3), "partition 2 back on its preferred replica")
        assert c.state("t", 2).leader_epoch == 2


# -- replicas reported offline (KIP-112) ---------------------------------------------------------

LEADING = PartitionState(leader=1, leader_epoch=4, replicas=(1, 2, 3), isr=(1, 2, 3))
ALL = frozenset(NODES)


@pytest.mark.parametrize(
    ("state", "live", "offline", "unclean", "expected"),
    [
        # An offline leader: the first available ISR member leads; the offline leaves the ISR.
        (LEADING, ALL, {1}, False, (2, 5, (2, 3))),
        (LEADING, frozenset({1, 3}), {1}, False, (3, 5, (3,))),
        # An offline follower leaves the ISR, as a dead one does.
        (LEADING, ALL, {2}, False, (1, 5, (1, 3))),
        (replace(LEADING, isr=(1, 3)), ALL, {2}, False, None),
        # No available ISR member: offline with the last ISR kept...
        (replace(LEADING, isr=(1,)), ALL, {1}, False, (NO_LEADER, 5, (1,))),
        (replace(LEADING, leader=NO_LEADER, isr=(1,)), ALL, {1}, False, None),
        # ...or, unclean, the first replica that is live and not offline.
        (replace(LEADING, isr=(1,)), ALL, {1, 2}, True, (3, 5, (3,))),
        (replace(LEADING, isr=(1,)), frozenset({1, 2}), {1, 2}, True, (NO_LEADER, 5, (1,))),
    ],
)
def test_elect_leader_treats_a_replica_reported_offline_as_unavailable(
    state: PartitionState,
    live: frozenset[int],
    offline: set[int],
    unclean: bool,
    expected: tuple[int, int, tuple[int, ...]] | None,
) -> None:
    new = elect_leader(state, live, unclean, frozenset(offline))
    assert (None if new is None else (new.leader, new.leader_epoch, new.isr)) == expected


def test_elect_preferred_never_moves_leadership_to_a_replica_reported_offline() -> None:
    led_elsewhere = replace(LEADING, leader=2)
    assert elect_preferred(led_elsewhere, ALL, frozenset({1})) is None
    moved = elect_preferred(led_elsewhere, ALL, frozenset({2, 3}))
    assert moved is not None and (moved.leader, moved.leader_epoch) == (1, 5)


# -- a node restarted before its lease ran out (KIP-841/903, KIP-966) -------------------------


@pytest.mark.parametrize(
    ("state", "live", "restarted", "crashed", "expected"),
    [
        # A restarted leader hands over to an in-sync replica that did not restart...
        (LEADING, ALL, {1}, {1}, (2, 5, (2, 3))),
        # ...and a restarted follower leaves the ISR, the leader staying.
        (LEADING, ALL, {3}, {3}, (1, 5, (1, 2))),
        # Only restarted ISR members left: the first one that started cleanly leads alone...
        (LEADING, ALL, {1, 2, 3}, {1}, (2, 5, (2,))),
        # ...or, every one of them back after a crash, the longest log once each reported
        # (below); until then none leads...
        (LEADING, ALL, {1, 2, 3}, {1, 2, 3}, (NO_LEADER, 5, (1, 2, 3))),
        # ...but not while another ISR member may come back with what they lost (KIP-966).
        (replace(LEADING, leader=2), {1}, {1}, {1}, (NO_LEADER, 5, (1, 2, 3))),
        # A member recorded as recovering stays out of the running once no longer new...
        (replace(LEADING, leader=NO_LEADER, recovering=(1,)), {1, 2}, set(), {1}, (2, 5, (2,))),
    ],
)
def test_elect_leader_voids_the_isr_membership_of_a_restarted_replica(
    state: PartitionState,
    live: set[int],
    restarted: set[int],
    crashed: set[int],
    expected: tuple[int, int, tuple[int, ...]],
) -> None:
    new = elect_leader(
        state, frozenset(live), False, frozenset(), frozenset(restarted), frozenset(crashed)
    )
    assert new is not None and (new.leader, new.leader_epoch, new.isr) == expected
    assert new.recovering == (tuple(crashed) if new.leader == NO_LEADER else ())


def test_a_partition_waiting_for_an_isr_member_is_left_as_it_is() -> None:
    waiting = replace(LEADING, leader=NO_LEADER, recovering=(1,))
    assert elect_leader(waiting, frozenset({1}), False, crashed=frozenset({1})) is None


# Every ISR member back after a crash, waiting for their log ends (KIP-966's balanced recovery).
RECOVERING = replace(LEADING, leader=NO_LEADER, leader_epoch=5, recovering=(1, 2, 3))


def log_ends(**ends: tuple[int, int]) -> dict[int, LogEnd]:
    """Nodes' (last leader epoch, log end offset) by name: n1=(4, 10) is node 1's."""
    return {int(name[1:]): LogEnd(epoch, end, 0) for name, (epoch, end) in ends.items()}


@pytest.mark.parametrize(
    ("state", "ends", "leader"),
    [
        # The longest log leads...
        (RECOVERING, log_ends(n1=(4, 10), n2=(4, 30), n3=(4, 20)), 2),
        # ...the latest leader epoch before the larger end offset...
        (RECOVERING, log_ends(n1=(3, 100), n2=(4, 10), n3=(4, 5)), 2),
        # ...and of equal logs, the first in replica order.
        (
            replace(RECOVERING, replicas=(3, 1, 2), isr=(3, 1, 2), recovering=(3, 1, 2)),
            log_ends(n1=(4, 30), n2=(4, 30), n3=(4, 10)),
            1,
        ),
    ],
)
def test_every_isr_member_back_after_a_crash_elects_the_longest_log(
    state: PartitionState, ends: dict[int, LogEnd], leader: int
) -> None:
    new = elect_leader(state, ALL, False, crashed=ALL, log_ends=ends)
    assert new == replace(state, leader=leader, leader_epoch=6, isr=(leader,), recovering=())


def test_the_longest_log_is_elected_once_each_crashed_isr_member_reported() -> None:
    partial = log_ends(n1=(4, 10), n2=(4, 30))
    # The leader among them, back within its lease: the partition waits, leaderless, for all.
    waiting = elect_leader(LEADING, ALL, False, restarted=ALL, crashed=ALL, log_ends=partial)
    assert waiting == RECOVERING
    assert elect_leader(RECOVERING, ALL, False, crashed=ALL, log_ends=partial) is None
    # One that dies before reporting is no longer back: the partition waits for its return.
    assert elect_leader(RECOVERING, frozenset({1, 2}), False, crashed=ALL, log_ends=partial) is None
    # An unclean election waits for nothing: the first of them, not a replica out of the ISR.
    narrow = replace(RECOVERING, isr=(2, 3), recovering=(2, 3))
    new = elect_leader(narrow, ALL, True, crashed=ALL, log_ends=partial)
    assert new is not None and (new.leader, new.isr) == (2, (2,))


def test_a_log_end_reported_by_an_earlier_incarnation_is_ignored() -> None:
    view = ClusterView(
        cluster_id="c",
        controller=1,
        nodes={},
        live=ALL,
        topics={},
        partitions={("t", 0): RECOVERING},
        registered={1: 10, 2: 11, 3: 12},
        # Node 3's report is from its process before the last restart, whose log was longer.
        log_ends={("t", 0): {1: LogEnd(4, 10, 10), 2: LogEnd(4, 20, 11), 3: LogEnd(4, 99, 7)}},
    )
    reported = view.reported_log_ends("t", 0)
    assert reported == {1: LogEnd(4, 10, 10), 2: LogEnd(4, 20, 11)}
    assert elect_leader(RECOVERING, ALL, False, crashed=ALL, log_ends=reported) is None
    reported[3] = LogEnd(4, 15, 12)
    new = elect_leader(RECOVERING, ALL, False, crashed=ALL, log_ends=reported)
    assert new is not None and new.leader == 2


def test_elect_preferred_waits_for_a_restarted_preferred_replica_to_rejoin() -> None:
    led_elsewhere = replace(LEADING, leader=2)
    assert elect_preferred(led_elsewhere, ALL, frozenset(), frozenset({1})) is None


async def restart(c: Cluster, node: int, clean_start: bool) -> MemoryMetadataStore:
    """A new process of `node` registers before its old lease ran out (no expiry seen)."""
    store = c.stores[node] = MemoryMetadataStore(c.backend)
    await store.start(NodeInfo(node, f"http://node{node}:8080"), clean_start=clean_start)
    return store


async def test_a_node_restarted_within_its_lease_loses_its_leaderships_and_isr_places() -> None:
    async with running_cluster() as c:
        await c.controllers[1].create_topic("t", 3, 3)  # node 2 leads partition 1
        before = c.state("t", 1)
        store = await restart(c, 2, clean_start=False)
        assert store.registration > before.version
        await c.until(leader_is("t", 1, 3), "partition 1 to move to node 3")
        assert c.state("t", 1).isr == (3, 1)
        for p in (0, 2):
            await c.until(out_of_isr(2, p), f"node 2 out of {p}'s ISR")
            assert c.state("t", p).leader == c.state("t", p).replicas[0]


async def test_the_last_isr_member_restarted_leads_alone_in_a_new_epoch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Both followers are out of the ISR when the leader crashes and restarts: it leads again
    (Kafka's behaviour, as nobody else has the records), in a new epoch, and the controller
    says at WARNING that what it had not fsynced is lost."""
    async with running_cluster() as c:
        await c.controllers[1].create_topic("t", 3, 3)
        alone = await shrunk_to_leader(c, "t", 1)
        await restart(c, 2, clean_start=False)
        await c.until(
            lambda view: view.partitions[("t", 1)].leader_epoch > alone.leader_epoch,
            "partition 1 in a new epoch",
        )
        state = c.state("t", 1)
        assert (state.leader, state.isr) == (2, (2,))
        warned = [r for r in caplog.records if "unclean recovery" in r.getMessage()]
        assert warned and warned[0].levelname == "WARNING"


async def test_a_crashed_isr_member_back_alone_waits_for_one_that_kept_the_records() -> None:
    """Schedule 35 of campaign seed 548307873: node 1 crashes (losing its unsynced tail) and
    before anyone notices, nodes 2 and 3 go too; node 1 comes back first. It must not lead
    what it may have lost: the partition waits until node 2 returns with the records."""
    async with running_cluster() as c:
        await c.controllers[1].create_topic("t", 1, 3)  # led by node 1, ISR (1, 2, 3)
        before = c.state("t", 0)
        await c.controllers[1].close()
        for node in NODES:
            c.backend.expire(node)
        await restart(c, 1, clean_start=False)
        c.controllers[1] = controller = Controller(c.stores[1], 1, TopicConfig())
        controller.start()
        await c.until(lambda view: view.partitions[("t", 0)].leader == NO_LEADER, "no leader")
        waiting = c.state("t", 0)
        assert (waiting.isr, waiting.recovering) == (before.isr, (1,))
        c.backend.revive(2)
        await c.until(leader_is("t", 0, 2), "node 2 to lead")
        assert c.state("t", 0).isr == (2,)


async def test_a_power_cut_elects_the_isr_member_that_kept_the_longest_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every node loses power and comes back, each having lost a different part of its
    unsynced tail: the partition waits, leaderless, until each has reported its log end, then
    node 3, which kept the most, leads (the first in replica order, node 1, kept the least);
    the controller names every log end in a WARNING, and the reports go with the recovery."""
    async with running_cluster() as c:
        await c.controllers[1].create_topic("t", 1, 3)  # led by node 1, ISR (1, 2, 3)
        for node in NODES:
            await c.controllers[node].close()
            c.backend.expire(node)
        for node in NODES:
            await restart(c, node, clean_start=False)
        c.controllers[1] = controller = Controller(c.stores[1], 1, TopicConfig())
        controller.start()
        await c.until(
            lambda view: view.partitions[("t", 0)].recovering == NODES, "the partition to wait"
        )
        waiting = c.state("t", 0)
        assert waiting.leader == NO_LEADER
        for node, end in ((1, 10), (2, 20), (3, 30)):  # node 2 would lead without node 3's
            store = c.stores[node]
            end_of_log = LogEnd(0, end, store.registration)
            assert await store.report_log_ends([(("t", 0), waiting.version, end_of_log)])
        await c.until(lambda view: view.partitions[("t", 0)].leader != NO_LEADER, "a leader")
        state = c.state("t", 0)
        assert (state.leader, state.leader_epoch, state.isr) == (3, waiting.leader_epoch + 1, (3,))
        assert c.view.log_ends == {}
        warned = [r.getMessage() for r in caplog.records if "unclean recovery" in r.getMessage()]
        assert len(warned) == 1
        assert "node 3 leads (log ends: node 1 at 10 in epoch 0, node 2 at 20" in warned[0]


async def test_log_end_reports_are_guarded_by_the_state_and_go_with_the_recovery() -> None:
    """The memory store's reports: a report for a state that moved since fails; the write
    that ends the partition's recovery deletes them, and so does the topic's deletion."""
    backend = MemoryBackend()
    one, two = MemoryMetadataStore(backend), MemoryMetadataStore(backend)
    await one.start(NodeInfo(1, "http://node1:8080"))
    await two.start(NodeInfo(2, "http://node2:8080"), clean_start=False)
    fence = await one.campaign()
    led = PartitionState(1, 0, (1, 2), (1, 2))
    await one.create_topic(fence, TopicSpec("t", "id", 2, 2, {}), [led, led])
    read = [one.view.partitions[("t", p)] for p in (0, 1)]
    waiting = [replace(s, leader=NO_LEADER, leader_epoch=1, recovering=(1, 2)) for s in read]
    stored = await one.set_partitions([(("t", p), s) for p, s in enumerate(waiting)], fence)
    assert stored is not None
    end = LogEnd(0, 42, two.registration)
    assert not await two.report_log_ends([(("t", 0), read[0].version, end)])
    assert await two.report_log_ends([(("t", p), s.version, end) for p, s in enumerate(stored)])
    assert one.view.reported_log_ends("t", 1) == {2: end}
    recovered = replace(stored[0], leader=2, leader_epoch=2, isr=(2,), recovering=())
    assert await one.set_partition("t", 0, recovered, fence, recovered=True) is not None
    assert list(one.view.log_ends) == [("t", 1)]
    await one.delete_topic(fence, "t")
    assert one.view.log_ends == {}
    await two.close()
    await one.close()


async def test_a_leader_cannot_keep_a_restarted_member_in_the_isr() -> None:
    """KIP-903: the guard on a member's incarnation refuses a write decided before the
    member's restart, and lets through one that saw it."""
    async with running_cluster() as c:
        await c.controllers[1].create_topic("t", 3, 3)
        state = c.state("t", 0)  # led by node 1, ISR (1, 2, 3)
        seen = dict(c.view.registered)
        await c.controllers[1].close()  # no controller write in between
        await c.controllers[2].close()
        await c.controllers[3].close()
        await restart(c, 3, clean_start=True)
        shrunk = replace(state, isr=(1, 3))
        assert await c.stores[1].set_partition("t", 0, shrunk, incarnations={3: seen[3]}) is None
        now = c.view.registered[3]
        assert await c.stores[1].set_partition("t", 0, shrunk, incarnations={3: now}) is not None


async def test_a_leader_reporting_its_log_offline_hands_the_partition_to_the_isr() -> None:
    async with running_cluster() as c:
        await c.controllers[1].create_topic("t", 3, 3)  # node 1 leads 0, follows 1 and 2
        c.stores[1].report_offline([("t", 0)])
        await c.until(leader_is("t", 0, 2), "partition 0 to move to node 2")
        state = c.state("t", 0)
        assert (state.leader_epoch, state.isr) == (1, (2, 3))
        # Node 1 stays live, and a replica of the partitions it did not report.
        assert 1 in c.view.live and c.view.offline == {1: frozenset({("t", 0)})}
        assert [c.state("t", p).leader_epoch for p in (1, 2)] == [0, 0]
        assert 1 in c.state("t", 1).isr and 1 in c.state("t", 2).isr


async def test_a_follower_reporting_its_log_offline_leaves_the_isr() -> None:
    async with running_cluster() as c:
        await c.controllers[1].create_topic("t", 1, 3)  # replicas (1, 2, 3)
        c.stores[3].report_offline([("t", 0)])
        await c.until(lambda view: 3 not in view.partitions[("t", 0)].isr, "3 out of the ISR")
        state = c.state("t", 0)
        assert (state.leader, state.leader_epoch, state.isr) == (1, 1, (1, 2))

        # A lost lease takes the report with it; the node's next lease brings it back.
        c.backend.expire(3)
        await c.until(lambda view: 3 not in view.offline, "the report to go with the lease")
        c.backend.revive(3)
        await c.until(lambda view: 3 in view.offline, "the report under the new lease")
        assert c.view.offline[3] == {("t", 0)}


async def test_unclean_election_never_elects_a_replica_reported_offline() -> None:
    async with running_cluster() as c:
        await c.controllers[1].create_topic("t", 2, 2, {"unclean.leader.election.enable": True})
        await shrunk_to_leader(c, "t", 1)  # replicas (2, 3), ISR (2,)
        c.stores[3].report_offline([("t", 1)])
        await c.until(lambda view: 3 in view.offline, "node 3's report")
        c.backend.expire(2)
        await c.until(leader_is("t", 1, NO_LEADER), "partition 1 to go offline")
        assert c.state("t", 1).isr == (2,)

        c.stores[3].report_offline([])  # as after node 3's restart
        await c.until(leader_is("t", 1, 3), "an unclean election of node 3")


async def test_rebalance_skips_a_preferred_replica_reported_offline() -> None:
    async with running_cluster() as c:
        await preferred_replica_lost_and_back(c)
        state = c.state("t", 2)
        assert await c.stores[1].set_partition("t", 2, replace(state, isr=(1, 2, 3)))
        c.stores[3].report_offline([("t", 2)])
        await c.until(lambda view: 3 not in view.partitions[("t", 2)].isr, "3 out of the ISR")
        assert await c.controllers[1].rebalance_preferred_leaders() == 0
        assert c.state("t", 2).leader == 1


async def test_a_closed_controller_refuses_requests() -> None:
    async with running_cluster() as c:
        await c.controllers[1].close()
        with pytest.raises(NotController):
            await c.controllers[1].create_topic("t", 1, 1)


class FlakyStore(MemoryMetadataStore):
    """A store whose first campaign and first batch of partition writes fail, as etcd down
    would."""

    def __init__(self, backend: MemoryBackend) -> None:
        super().__init__(backend)
        self.outages = {"campaign", "set_partitions"}

    def _outage(self, call: str) -> None:
        if call in self.outages:
            self.outages.remove(call)
            raise MetadataUnavailable(f"etcd is down for {call}")

    async def campaign(self) -> Fence:
        self._outage("campaign")
        return await super().campaign()

    async def set_partitions(
        self,
        states: Sequence[tuple[TopicPartition, PartitionState]],
        fence: Fence | None = None,
        incarnations: Sequence[Mapping[int, int]] = (),
        recovered: Collection[TopicPartition] = (),
    ) -> list[PartitionState] | None:
        self._outage("set_partitions")
        return await super().set_partitions(states, fence, incarnations, recovered)


async def test_store_outages_are_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(controller_module, "STORE_RETRY_S", 0.01)
    backend = MemoryBackend()
    flaky = FlakyStore(backend)
    stores = {1: flaky, 2: MemoryMetadataStore(backend)}
    for node, store in stores.items():
        await store.start(NodeInfo(node, f"http://node{node}:8080"))
    controllers = {node: Controller(store, node, TopicConfig()) for node, store in stores.items()}
    controllers[1].start()
    try:
        assert await stores[2].wait_for(lambda view: view.controller == 1, TIMEOUT)
        await controllers[1].create_topic("t", 2, 2)  # partition 1: replicas (2, 1)
        backend.expire(2)
        assert await stores[1].wait_for(leader_is("t", 1, 1), TIMEOUT)
        assert flaky.outages == set() and stores[1].view.partitions[("t", 1)].leader_epoch == 1
    finally:
        for controller in controllers.values():
            await controller.close()
        for store in stores.values():
            await store.close()


# -- one node ----------------------------------------------------------------------------------


async def test_a_single_node_is_its_own_controller() -> None:
    store = MemoryMetadataStore()
    await store.start(NodeInfo(0, "http://localhost:8080"))
    fence = await store.campaign()
    assert store.view.controller == 0 and fence.node_id == 0
    controller = Controller(store, 0, TopicConfig())
    controller.start()
    try:
        assert await store.wait_for(lambda view: view.controller == 0, TIMEOUT)
        spec = await controller.create_topic("t", 3, 1)
        assert [store.view.partitions[("t", p)].replicas for p in range(3)] == [(0,)] * 3
        assert spec.version == store.view.revision
        with pytest.raises(InvalidReplicationFactor, match=r"\(1\)"):
            await controller.create_topic("u", 1, 2)
    finally:
        await controller.close()
        await store.close()


async def test_set_partition_is_a_compare_and_set_on_the_version() -> None:
    store = MemoryMetadataStore()
    await store.start(NodeInfo(0, "http://localhost:8080"))
    fence = await store.campaign()
    spec = TopicSpec("t", "id", 1, 1, {})
    await store.create_topic(fence, spec, [PartitionState(0, 0, (0,), (0,))])
    read = store.view.partitions[("t", 0)]
    stored = await store.set_partition("t", 0, replace(read, leader_epoch=1))
    assert stored is not None and stored.version > read.version
    assert store.view.partitions[("t", 0)] == stored
    assert await store.set_partition("t", 0, replace(read, leader_epoch=2)) is None
    assert not await store.update_topic(fence, spec, {})  # version 0: never the stored one
    await store.close()


# -- invariants under random failures ------------------------------------------------------------

Op = tuple[str, int, bool]  # (kill | revive | expand | fail, node, wait until settled)


def settled(unclean: bool) -> Callable[[ClusterView], bool]:
    """A controller is elected and no partition awaits a leader it could have."""

    def check(view: ClusterView) -> bool:
        if view.controller is None:
            return False
        for key, state in view.partitions.items():
            available = view.live - view.offline_replicas(*key)
            eligible = state.replicas if unclean else state.isr
            if state.leader not in available and any(r in available for r in eligible):
                return False
            if state.leader != NO_LEADER and state.leader not in available:
                return False
        return True

    return check


async def expand_isrs(c: Cluster, node: int) -> None:
    """Node's partitions take every live replica back into their ISR (they caught up), but
    those reported offline (they fetch nothing)."""
    view = c.stores[node].view
    for (topic, partition), state in view.partitions.items():
        if state.leader == node and node in view.live:
            offline = view.offline_replicas(topic, partition)
            isr = state.isr + tuple(
                r
                for r in state.replicas
                if r in view.live and r not in offline and r not in state.isr
            )
            await c.stores[node].set_partition(topic, partition, replace(state, isr=isr))


def check_history(history: list[ClusterView], unclean: bool) -> None:
    leaders: dict[tuple[TopicPartition, int], int] = {}
    last: dict[TopicPartition, PartitionState] = {}
    for view in history:
        for key, state in view.partitions.items():
            assert state.leader == NO_LEADER or state.leader in state.replicas
            assert state.isr and set(state.isr) <= set(state.replicas)
            assert leaders.setdefault((key, state.leader_epoch), state.leader) == state.leader
            before = last.get(key)
            if before is not None and before.version != state.version:
                assert state.leader_epoch >= before.leader_epoch
                if state.leader != before.leader:
                    assert state.leader_epoch > before.leader_epoch
                    if not unclean and state.leader != NO_LEADER:
                        assert state.leader in before.isr
            last[key] = state


async def random_failures(ops: list[Op], unclean: bool) -> None:
    async with running_cluster() as c:
        history: list[ClusterView] = []
        c.observer.add_listener(history.append)
        configs = {"unclean.leader.election.enable": unclean}
        await c.controllers[1].create_topic("t", 6, 2, configs)
        for op, node, settle in ops:
            if op == "kill":
                c.backend.expire(node)
            elif op == "revive":  # a restart: its logs reopened
                c.stores[node].report_offline([])
                c.backend.revive(node)
            elif op == "fail":  # its disk: every partition it holds goes offline
                c.stores[node].report_offline(
                    key for key, state in c.view.partitions.items() if node in state.replicas
                )
            else:
                await expand_isrs(c, node)
            if settle and c.view.live:
                await c.until(settled(unclean), f"elections after {op} {node}")
        for node in NODES:
            c.stores[node].report_offline([])
            c.backend.revive(node)
        await c.until(settled(unclean), "elections with every node back")
        assert all(state.leader in c.view.live for state in c.view.partitions.values())
        check_history(history, unclean)


@settings(max_examples=200, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(("kill", "revive", "expand", "fail")),
            st.sampled_from(NODES),
            st.booleans(),
        ),
        max_size=30,
    ),
    unclean=st.booleans(),
)
def test_leadership_invariants_hold_over_random_failures(ops: list[Op], unclean: bool) -> None:
    asyncio.run(random_failures(ops, unclean))


# -- eligible leader replicas (KIP-966) --------------------------------------------------------


def state_of(
    isr: tuple[int, ...], elr: tuple[int, ...] = (), replicas: tuple[int, ...] = (1, 2, 3)
) -> PartitionState:
    return PartitionState(isr[0] if isr else NO_LEADER, 4, replicas, isr, elr=elr)


@pytest.mark.parametrize(
    ("old", "new", "min_insync", "elr"),
    [
        # The ISR still at min.insync.replicas: acks=all goes on without the member dropped.
        (state_of((1, 2, 3)), state_of((1, 2)), 2, ()),
        # Below it: acks=all is refused from now on, so the member dropped keeps all of it...
        (state_of((1, 2)), state_of((2,)), 2, (1,)),
        # ...as do the members dropped before, while the ISR stays below...
        (state_of((1, 2, 3)), state_of((3,)), 3, (1, 2)),
        (state_of((2,), elr=(1,)), state_of((3,)), 3, (1, 2)),
        # ...and a member back in the ISR is no longer listed...
        (state_of((3,), elr=(1, 2)), state_of((3, 1)), 3, (2,)),
        # ...nor any, once the ISR is back at min.insync.replicas.
        (state_of((2,), elr=(1,)), state_of((2, 3)), 2, ()),
        # A move that takes a replica away takes its eligibility with it.
        (state_of((2,), elr=(1,)), state_of((2,), replicas=(2, 3, 4)), 2, ()),
        # With min.insync.replicas=1 the ISR is never below it.
        (state_of((1, 2)), state_of((2,)), 1, ()),
    ],
)
def test_the_eligible_leader_replicas_follow_the_isr_and_min_insync(
    old: PartitionState, new: PartitionState, min_insync: int, elr: tuple[int, ...]
) -> None:
    assert with_eligible_leaders(old, new, min_insync).elr == elr


# Node 2 led alone after node 1 left the ISR below min.insync.replicas; then node 2 crashed.
ALONE = PartitionState(NO_LEADER, 6, (1, 2, 3), (2,), elr=(1,))


def test_a_crashed_isr_waits_for_its_eligible_leader_replicas_and_weighs_their_logs() -> None:
    # Node 2 back after the crash, node 1 not yet: it does not lead what it may have lost.
    waiting = elect_leader(ALONE, frozenset({2, 3}), False, crashed=frozenset({2}))
    assert waiting == replace(ALONE, leader_epoch=7, recovering=(2,))
    # Node 1 back: the longest of their logs leads, once both reported.
    back = frozenset(NODES)
    partial = log_ends(n2=(5, 10))
    assert elect_leader(waiting, back, False, crashed=frozenset({2}), log_ends=partial) is None
    kept = log_ends(n1=(4, 20), n2=(4, 10))  # node 2 lost records node 1 has
    new = elect_leader(waiting, back, False, crashed=frozenset({2}), log_ends=kept)
    assert new is not None and (new.leader, new.leader_epoch, new.isr) == (1, 8, (1,))
    wrote = log_ends(n1=(4, 20), n2=(6, 12))  # node 2 kept what it led in epoch 6
    new = elect_leader(waiting, back, False, crashed=frozenset({2}), log_ends=wrote)
    assert new is not None and (new.leader, new.isr) == (2, (2,))


def test_an_unclean_election_prefers_an_eligible_leader_replica() -> None:
    state = replace(ALONE, replicas=(3, 2, 1))
    # No ISR member back: an eligible leader replica before the first replica in order.
    new = elect_leader(state, frozenset({1, 3}), True)
    assert new is not None and (new.leader, new.isr) == (1, (1,))
    # The crashed ISR member back: an unclean election waits for no one.
    new = elect_leader(state, frozenset({2, 3}), True, crashed=frozenset({2}))
    assert new is not None and new.leader == 2


async def test_a_crashed_last_isr_member_waits_for_the_replica_that_left_below_min_insync(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Schedule 170 of campaign seed 488242866: with min.insync.replicas=2, node 1 loses its
    lease and leaves the ISR (1, 2), node 2 leads alone (acks=all refused); node 2 crashes,
    losing its unsynced tail, and comes back before node 1. It must not lead alone: node 1 has
    every record acks=all acknowledged. The partition waits for node 1, then the longer log
    leads."""
    async with running_cluster() as c:
        await c.controllers[1].create_topic("t", 1, 3, {"min.insync.replicas": 2})
        c.backend.expire(3)
        await c.until(out_of_isr(3, 0), "node 3 out of the ISR")
        assert c.state("t", 0).elr == ()  # (1, 2) is at min.insync.replicas
        c.backend.expire(1)
        await c.until(leader_is("t", 0, 2), "node 2 to lead")
        assert (c.state("t", 0).isr, c.state("t", 0).elr) == ((2,), (1,))
        await c.controllers[2].close()
        c.backend.expire(2)
        await restart(c, 2, clean_start=False)
        c.controllers[2] = controller = Controller(c.stores[2], 2, TopicConfig())
        controller.start()
        await c.until(
            lambda view: view.partitions[("t", 0)].recovering == (2,), "the partition to wait"
        )
        c.backend.revive(1)
        waiting = c.state("t", 0)
        assert (waiting.leader, waiting.elr) == (NO_LEADER, (1,))
        for node, end in ((2, 10), (1, 20)):
            store = c.stores[node]
            end_of_log = LogEnd(0, end, store.registration)
            assert await store.report_log_ends([(("t", 0), waiting.version, end_of_log)])
        await c.until(leader_is("t", 0, 1), "node 1 to lead")
        assert c.state("t", 0).isr == (1,)
        warned = [r.getMessage() for r in caplog.records if "unclean recovery" in r.getMessage()]
        assert len(warned) == 1
        ends = "node 2 at 10 in epoch 0, node 1 at 20 in epoch 0"
        assert f"node 1 leads (log ends: {ends})" in warned[0]
