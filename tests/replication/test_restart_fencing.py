"""A node's new process does not take up a leadership stored before it registered: that was
given to its previous incarnation, whose unsynced writes may be gone (KIP-841)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from engine.manager import LogManager
from engine.notify import ChangeNotifier
from replication.memory_store import MemoryBackend, MemoryMetadataStore
from replication.metadata import NO_LEADER, NodeInfo, PartitionState, TopicSpec
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
