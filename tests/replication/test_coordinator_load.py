"""A new coordinator replays its offsets partition in the background: the node's role
listeners must return at once, as the view that lets the partition's high watermark reach
its log end (an ISR shrunk to the live replicas) is applied only after they return."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from engine import batch as fmt
from engine import offsets_topic
from engine.manager import LogManager
from engine.notify import ChangeNotifier
from groups.coordinator import GroupCoordinator
from replication.errors import LeaderNotAvailable
from replication.forward_client import ForwardClient
from replication.memory_store import MemoryMetadataStore
from replication.metadata import NodeInfo, PartitionState, TopicSpec
from replication.replica_manager import ReplicaManager

TOPIC = offsets_topic.OFFSETS_TOPIC


async def test_a_replay_waiting_for_the_high_watermark_does_not_hold_up_the_views(
    tmp_path: Path,
) -> None:
    store = MemoryMetadataStore()
    await store.start(NodeInfo(0, "http://node0:8080"))
    fence = await store.campaign()
    spec = TopicSpec(TOPIC, "a" * 32, 1, 2, dict(offsets_topic.TOPIC_CONFIGS))
    # Led here in epoch 1 with node 1 in the ISR, which is gone: nothing it has not
    # fetched can commit until the controller drops it.
    await store.create_topic(fence, spec, [PartitionState(0, 1, (0, 1), (0, 1))])
    manager = LogManager(tmp_path)
    manager.create_topic(TOPIC, 1, dict(spec.configs), topic_id=spec.topic_id)
    record = fmt.RecordInput(b"k", b"v", [], 0)
    manager.log(TOPIC, 0).append_as_leader(fmt.encode_batch([record]), 1)
    replicas = ReplicaManager(manager, store, 0, ChangeNotifier())
    forwarder = ForwardClient(0)
    groups = GroupCoordinator(replicas, forwarder, 100, lambda *a: ([], 0))
    replicas.add_role_listener(groups.role_changed)
    try:
        async with asyncio.timeout(10):  # the replay waits up to 30 s
            await replicas.start()
        with pytest.raises(LeaderNotAvailable):
            groups.coordinator("g")
        state = store.view.partitions[(TOPIC, 0)]
        assert await store.set_partition(
            TOPIC, 0, PartitionState(0, 2, (0, 1), (0,), state.version), fence
        )
        assert await replicas.applied(lambda: replicas.partitions[(TOPIC, 0)].leader_epoch == 2, 10)
        async with asyncio.timeout(10):
            await groups.loaded()  # the replay of epoch 2, now that the log is all committed
        assert groups.coordinator("g").leader_epoch == 2
    finally:
        groups.close()
        await replicas.close()
        await forwarder.close()
        await store.close()
        manager.close()
