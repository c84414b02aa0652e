"""A node's new process does not take up a leadership stored before it registered: that was
given to its previous incarnation, whose unsynced writes may be gone (KIP-841). Where a
partition waits for its crashed ISR members, the node reports its replica's log end (KIP-966)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from engine import batch as fmt
from engine.manager import LogManager
from engine.notify import ChangeNotifier
from replication.memory_store import MemoryBackend, MemoryMetadataStore
from replication.metadata import NO_LEADER, LogEnd, NodeInfo, PartitionState, TopicSpec
from replication.replica_manager import ReplicaManager

NODE = NodeInfo(0, "http://node0:8080")


async def test_a_restarted_node_waits_for_the_controller_before_leading_again(
    tmp_path: Path,
) -> None:
    backend = MemoryBackend()
    previous = MemoryMetadataStore(backend)  # the node's process before the crash
    await previous.start(NODE)
    fence = await previous.campaign()
    state = PartitionState(0, 3, (0, 1), (0, 1))
    await previous.create_topic(fence, TopicSpec("t", "a" * 32, 1, 2, {}), [state])
    store = MemoryMetadataStore(backend)
    await store.start(NODE, clean_start=False)
    stored = store.view.partition("t", 0)
    assert stored is not None and stored.version < store.registration
    manager = LogManager(tmp_path)
    replicas = ReplicaManager(manager, store, 0, ChangeNotifier())
    try:
        await replicas.start()
        assert replicas.leading("t", 0) is None
        assert replicas.partitions[("t", 0)].leader == NO_LEADER
        # The controller decides again, in a new epoch: now the node leads.
        again = replace(stored, leader_epoch=4, isr=(0,))
        assert await store.set_partition("t", 0, again, fence) is not None
        assert await replicas.applied(lambda: replicas.leading("t", 0) is not None, 5)
    finally:
        await replicas.close()
        await store.close()
        await previous.close()
        manager.close()


async def test_a_crashed_node_reports_its_log_end_where_a_partition_waits_for_it(
    tmp_path: Path,
) -> None:
    """Partition 0 waits, leaderless, for its crashed ISR members: the node reports its
    replica's last leader epoch and log end offset, tied to its incarnation; partition 1,
    led, asks for nothing. The controller's write that ends the recovery takes the report."""
    backend = MemoryBackend()
    controller = MemoryMetadataStore(backend)  # node 1, the controller
    await controller.start(NodeInfo(1, "http://node1:8080"))
    fence = await controller.campaign()
    spec = TopicSpec("t", "a" * 32, 2, 2, {})
    await controller.create_topic(fence, spec, [PartitionState(1, 3, (0, 1), (0, 1))] * 2)
    manager = LogManager(tmp_path)
    manager.create_topic("t", 2, {}, topic_id=spec.topic_id)
    records = [fmt.RecordInput(b"k", b"v", [], 0)] * 5
    manager.log("t", 0).append_as_leader(fmt.encode_batch(records), 3)
    store = MemoryMetadataStore(backend)
    await store.start(NODE, clean_start=False)
    replicas = ReplicaManager(manager, store, 0, ChangeNotifier())
    try:
        await replicas.start()
        read = store.view.partitions[("t", 0)]
        waiting = replace(read, leader=NO_LEADER, leader_epoch=4, recovering=(0, 1))
        stored = await controller.set_partition("t", 0, waiting, fence)
        assert stored is not None
        reported = {0: LogEnd(3, 5, store.registration)}
        assert await store.wait_for(lambda v: v.reported_log_ends("t", 0) == reported, 5)
        assert list(store.view.log_ends) == [("t", 0)]
        led = replace(stored, leader=1, leader_epoch=5, isr=(1,), recovering=())
        assert await controller.set_partition("t", 0, led, fence, recovered=True) is not None
        assert store.view.log_ends == {}
    finally:
        await replicas.close()
        await store.close()
        await controller.close()
        manager.close()
