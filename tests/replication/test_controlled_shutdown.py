"""Controlled shutdown over the in-memory store: the controller moves a shutting-down node's
leaderships to other in-sync replicas and takes it out of the ISRs (in batched writes, the
moves first), keeps it where it is the only in-sync replica, never elects it, hands over its
own role last; a leader does not let such a node back into an ISR."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from engine.manager import LogManager
from engine.notify import ChangeNotifier
from replication.controlled_shutdown import decide, handover, move_off_shutting
from replication.memory_store import MemoryBackend, MemoryMetadataStore
from replication.metadata import (
    MAX_PARTITIONS_PER_WRITE,
    NO_LEADER,
    ClusterView,
    NodeInfo,
    PartitionState,
    TopicSpec,
)
from replication.replica_manager import ReplicaManager
from tests.replication.test_controller import running_cluster

ALL = frozenset({1, 2, 3})


def test_a_shutting_leader_hands_over_to_the_first_in_sync_replica() -> None:
    state = PartitionState(2, 4, (2, 3, 1), (2, 1, 3), version=9)
    moved = move_off_shutting(state, frozenset({2}), frozenset({1, 3}))
    assert moved == replace(state, leader=3, leader_epoch=5, isr=(1, 3))
    # A candidate that cannot lead (restarted since, its log offline...) is passed over.
    moved = move_off_shutting(state, frozenset({2}), frozenset({1}))
    assert moved is not None and (moved.leader, moved.isr) == (1, (1, 3))


def test_a_shutting_follower_leaves_the_isr_in_a_new_epoch() -> None:
    state = PartitionState(1, 4, (1, 2, 3), (1, 2, 3))
    moved = move_off_shutting(state, frozenset({2, 3}), frozenset({1}))
    assert moved == replace(state, leader_epoch=5, isr=(1,))
    assert move_off_shutting(state, frozenset(), frozenset({1, 2, 3})) is None


def test_the_only_in_sync_replicas_keep_the_partition() -> None:
    alone = PartitionState(2, 4, (2, 1), (2,))
    assert move_off_shutting(alone, frozenset({2}), frozenset({1})) is None
    both_leaving = PartitionState(2, 4, (2, 3, 1), (2, 3))
    assert move_off_shutting(both_leaving, frozenset({2, 3}), frozenset({1})) is None
    not_in_sync = PartitionState(2, 4, (2, 3), (2, 3))  # 3 restarted since: it cannot lead
    assert move_off_shutting(not_in_sync, frozenset({2}), frozenset()) is None
    offline = PartitionState(NO_LEADER, 4, (2, 3), (2,))
    assert move_off_shutting(offline, frozenset({2}), frozenset({3})) is None


def view_of(state: PartitionState, live: frozenset[int], shutting: frozenset[int]) -> ClusterView:
    return ClusterView(
        cluster_id="c",
        controller=1,
        nodes={},
        live=live,
        topics={},
        partitions={("t", 0): state},
        shutting_down=shutting,
    )


def test_an_election_never_picks_a_shutting_node_when_another_can_lead() -> None:
    """Leader 1 is lost while 2 shuts down: 3 leads, in one new epoch, not 2 and then 3."""
    state = PartitionState(1, 4, (1, 2, 3), (1, 2, 3))
    elected = replace(state, leader=2, leader_epoch=5, isr=(2, 3))  # elect_leader's choice
    view = view_of(state, frozenset({2, 3}), frozenset({2}))
    assert decide(view, ("t", 0), state, elected) == replace(
        state, leader=3, leader_epoch=5, isr=(3,)
    )
    assert decide(view, ("t", 0), state, None) is None  # a lost leader is elect_leader's
    all_live = view_of(state, ALL, frozenset({2}))
    assert decide(all_live, ("t", 0), state, None) == replace(state, leader_epoch=5, isr=(1, 3))
    # A mark left by a node whose lease is gone counts for nothing.
    gone = view_of(state, frozenset({1, 3}), frozenset({2}))
    assert decide(gone, ("t", 0), state, None) is None


async def test_the_controller_moves_leaderships_then_isr_memberships_off_a_leaving_node() -> None:
    async with running_cluster() as c:
        await c.controllers[1].create_topic("t", 6, 3)
        before = dict(c.view.partitions)
        led = {tp for tp, s in before.items() if s.leader == 2}
        assert len(led) == 2 and handover(c.view, 2).pending
        await c.stores[2].begin_shutdown()
        await c.until(lambda view: handover(view, 2).done, "node 2's handover")
        after = c.view.partitions
        assert c.view.shutting_down == {2}
        for tp, state in after.items():
            assert 2 not in state.isr and state.leader != 2
            assert state.leader_epoch == before[tp].leader_epoch + 1
            assert state.replicas == before[tp].replicas
            if tp not in led:
                assert state.leader == before[tp].leader
            else:  # the next replica in order
                old = before[tp]
                assert state.leader == old.replicas[(old.replicas.index(2) + 1) % 3]
        moves = {after[tp].version for tp in led}
        shrinks = {after[tp].version for tp in after if tp not in led}
        assert len(moves) == len(shrinks) == 1 and max(moves) < min(shrinks)  # a write each
        # Nothing moves back while it shuts down.
        assert await c.controllers[1].rebalance_preferred_leaders() == 0


async def test_many_partitions_move_in_few_writes() -> None:
    async with running_cluster() as c:
        await c.controllers[1].create_topic("t", 3 * MAX_PARTITIONS_PER_WRITE, 3)
        revision = c.view.revision
        await c.stores[3].begin_shutdown()
        await c.until(lambda view: handover(view, 3).done, "node 3's handover")
        # the mark, the moves (60 partitions: 1 write), the shrinks (120: 2 writes)
        assert c.view.revision - revision == 4


async def test_the_only_in_sync_replica_keeps_its_partition() -> None:
    async with running_cluster() as c:
        await c.controllers[1].create_topic("t", 3, 3)
        state = c.state("t", 1)  # led by node 2
        assert state.leader == 2
        alone = await c.stores[1].set_partition("t", 1, replace(state, isr=(2,)))
        assert alone is not None
        await c.stores[2].begin_shutdown()
        await c.until(lambda view: handover(view, 2).done, "node 2's handover")
        assert handover(c.view, 2).kept == (("t", 1),)
        assert c.state("t", 1) == alone
        assert all(2 not in c.state("t", p).isr for p in (0, 2))


async def test_a_controller_hands_over_its_partitions_then_its_role() -> None:
    async with running_cluster() as c:
        await c.controllers[1].create_topic("t", 3, 3)
        await c.stores[1].begin_shutdown()
        await c.until(lambda view: handover(view, 1).done, "node 1's handover")
        assert c.view.controller == 1 and all(s.leader != 1 for s in c.view.partitions.values())
        await c.controllers[1].close()
        await c.stores[1].resign()
        await c.until(lambda view: view.controller == 2, "node 2 to be controller")
        assert 1 in c.view.live and 1 in c.view.shutting_down
        await c.controllers[2].create_topic("u", 3, 2)  # the new controller works


async def test_a_new_process_is_not_shutting_down(tmp_path: Path) -> None:
    backend = MemoryBackend()
    store = MemoryMetadataStore(backend)
    await store.start(NodeInfo(1, "http://node1:8080"))
    await store.begin_shutdown()
    assert store.view.shutting_down == {1}
    again = MemoryMetadataStore(backend)  # restarted within its lease
    await again.start(NodeInfo(1, "http://node1:8080"))
    assert again.view.shutting_down == frozenset()
    await again.begin_shutdown()
    backend.expire(1)
    assert again.view.shutting_down == frozenset()
    await again.close()
    await store.close()


async def test_a_leader_does_not_let_a_shutting_node_back_into_the_isr(tmp_path: Path) -> None:
    backend = MemoryBackend()
    store = MemoryMetadataStore(backend)
    await store.start(NodeInfo(0, "http://node0:8080"))
    other = MemoryMetadataStore(backend)
    await other.start(NodeInfo(1, "http://node1:8080"))
    fence = await store.campaign()
    spec = TopicSpec("t", "a" * 32, 1, 2, {})
    await store.create_topic(fence, spec, [PartitionState(0, 0, (0, 1), (0,))])
    manager = LogManager(tmp_path)
    replicas = ReplicaManager(manager, store, 0, ChangeNotifier())
    try:
        await replicas.start()
        leader = replicas.leading("t", 0)
        assert leader is not None
        await other.begin_shutdown()
        assert not await replicas.change_isr(leader, (0, 1))
        assert store.view.partitions[("t", 0)].isr == (0,)
        await other.close()
        again = MemoryMetadataStore(backend)  # node 1's next process
        await again.start(NodeInfo(1, "http://node1:8080"))
        assert await replicas.change_isr(leader, (0, 1))
        assert list(store.view.partitions[("t", 0)].isr) == [0, 1]
        await again.close()
    finally:
        await replicas.close()
        await store.close()
        manager.close()
