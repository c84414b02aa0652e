"""A leader's ISR expansion, proposed by a follower's fetch and written a loop turn later: a
proposal the leader's next epoch made stale is dropped, and the partition's later ISR changes
still go through (a move that completes as its new replica catches up left one behind, and
every later expansion of the partition on that leader was refused). A follower whose node is
not live (its lease lapsed) does not rejoin until it registers again: the controller would
drop it at once, each time in a new leader epoch. A member a shrink drops below
min.insync.replicas stays an eligible leader replica (KIP-966)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from engine.manager import LogManager
from engine.notify import ChangeNotifier
from replication.memory_store import MemoryBackend, MemoryMetadataStore
from replication.metadata import Fence, NodeInfo, PartitionState, TopicSpec
from replication.partition import Partition
from replication.replica_manager import ReplicaManager

FOLLOWER = NodeInfo(2, "http://node2:8080")


@dataclass
class Leading:
    """Node 0 leading t-0 in epoch 3, replicas (0, 1, 2), ISR (0, 1); node 1 the controller;
    node 2 (`follower`, a store not started: not live) out of the ISR."""

    store: MemoryMetadataStore
    controller: MemoryMetadataStore
    fence: Fence
    follower: MemoryMetadataStore
    replicas: ReplicaManager

    @property
    def partition(self) -> Partition:
        return self.replicas.partitions[("t", 0)]


@pytest.fixture
async def leading(tmp_path: Path) -> AsyncIterator[Leading]:
    backend = MemoryBackend()
    store = MemoryMetadataStore(backend)
    await store.start(NodeInfo(0, "http://node0:8080"))
    controller = MemoryMetadataStore(backend)
    await controller.start(NodeInfo(1, "http://node1:8080"))
    fence = await controller.campaign()
    state = PartitionState(0, 3, (0, 1, 2), (0, 1))
    await controller.create_topic(fence, TopicSpec("t", "a" * 32, 1, 3, {}), [state])
    manager = LogManager(tmp_path)
    replicas = ReplicaManager(manager, store, 0, ChangeNotifier())
    follower = MemoryMetadataStore(backend)
    try:
        await replicas.start()
        assert await replicas.applied(lambda: replicas.leading("t", 0) is not None, 5)
        yield Leading(store, controller, fence, follower, replicas)
    finally:
        await replicas.close()
        await follower.close()
        await controller.close()
        await store.close()
        manager.close()


async def test_a_stale_expansion_is_dropped_and_later_ones_go_through(leading: Leading) -> None:
    store, replicas, partition = leading.store, leading.replicas, leading.partition
    await leading.follower.start(FOLLOWER)
    assert await store.wait_for(lambda v: 2 in v.live, 5)
    # Node 2's fetch at the log end proposes (0, 1, 2); before its write runs, the leader
    # moves to an epoch whose replicas no longer hold node 2 (the move was cancelled).
    await replicas.replica_fetch(
        "t", 0, replica=2, leader_epoch=3, offset=0, max_bytes=1024, timeout_ms=0
    )
    stored = store.view.partitions[("t", 0)]
    partition.make_leader(replace(stored, leader_epoch=4, replicas=(0, 1), isr=(0, 1)))
    await asyncio.sleep(0)  # the proposal's write task takes its turn
    assert partition.isr == (0, 1)
    # The next epoch adds node 2 again: its fetch at the log end brings it into the ISR.
    again = replace(stored, leader_epoch=4, replicas=(0, 1, 2), isr=(0, 1))
    assert await leading.controller.set_partition("t", 0, again, leading.fence) is not None
    assert await replicas.applied(
        lambda: (state := partition.leader_state) is not None and 2 in state.followers, 5
    )
    await replicas.replica_fetch(
        "t", 0, replica=2, leader_epoch=4, offset=0, max_bytes=1024, timeout_ms=0
    )
    assert await store.wait_for(lambda v: v.partitions[("t", 0)].isr == (0, 1, 2), 5)


async def test_a_member_the_controller_drops_in_the_epoch_rejoins_through_its_fetch(
    leading: Leading,
) -> None:
    """A move's start drops an ISR member restarted since (KIP-903) in the leader's epoch:
    the leader holds the stored ISR at once, and the member's next fetch at the log end brings
    it back (while the leader kept its old place, it never proposed it again and the move,
    waiting for it in the ISR, never completed)."""
    store, replicas, partition = leading.store, leading.replicas, leading.partition
    stored = store.view.partitions[("t", 0)]
    dropped = replace(stored, isr=(0,))
    assert await leading.controller.set_partition("t", 0, dropped, leading.fence) is not None
    assert await replicas.applied(lambda: partition.isr == (0,), 5)
    state = partition.leader_state
    assert state is not None and state.isr == (0,)
    await replicas.replica_fetch(
        "t", 0, replica=1, leader_epoch=3, offset=0, max_bytes=1024, timeout_ms=0
    )
    assert await store.wait_for(lambda v: v.partitions[("t", 0)].isr == (0, 1), 5)
    assert partition.leader_state is state and partition.isr == (0, 1)


async def test_a_follower_that_is_not_live_rejoins_once_registered(leading: Leading) -> None:
    store, replicas, partition = leading.store, leading.replicas, leading.partition
    assert not await replicas.change_isr(partition, (0, 1, 2))
    assert partition.isr == (0, 1) and store.view.partitions[("t", 0)].isr == (0, 1)
    await leading.follower.start(FOLLOWER)
    assert await store.wait_for(lambda v: 2 in v.live, 5)
    assert await replicas.change_isr(partition, (0, 1, 2))
    assert await store.wait_for(lambda v: v.partitions[("t", 0)].isr == (0, 1, 2), 5)


async def test_a_shrink_below_min_insync_keeps_the_dropped_member_eligible(
    leading: Leading,
) -> None:
    """KIP-966: while the ISR is below min.insync.replicas acks=all is refused, so a member the
    leader drops keeps every acknowledged acks=all record: it is stored as an eligible leader
    replica, until the ISR is back at min.insync.replicas."""
    store, replicas, partition = leading.store, leading.replicas, leading.partition
    partition.log.update_config(replace(partition.config, min_insync_replicas=2))
    assert await replicas.change_isr(partition, (0,))
    assert await store.wait_for(lambda v: v.partitions[("t", 0)].isr == (0,), 5)
    assert store.view.partitions[("t", 0)].elr == (1,)
    assert await replicas.change_isr(partition, (0, 1))
    assert await store.wait_for(lambda v: v.partitions[("t", 0)].isr == (0, 1), 5)
    assert not store.view.partitions[("t", 0)].elr
