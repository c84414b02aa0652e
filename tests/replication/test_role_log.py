"""The roles a node takes up are one log line (each partition at DEBUG); a later change of a
partition's role, a failover, is a line of its own."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest

from engine.manager import LogManager
from engine.notify import ChangeNotifier
from replication.memory_store import MemoryMetadataStore
from replication.metadata import NO_LEADER, NodeInfo, PartitionState, TopicSpec
from replication.replica_manager import ReplicaManager


async def test_roles_are_summarised_then_each_change_is_a_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    manager = LogManager(tmp_path)
    store = MemoryMetadataStore()
    await store.start(NodeInfo(0, "http://node0:8080"))
    fence = await store.campaign()
    states = [PartitionState(0, 0, (0, 1), (0, 1))] * 3 + [
        PartitionState(1, 0, (1, 0), (1, 0)),
        PartitionState(NO_LEADER, 2, (0, 1), ()),
        PartitionState(0, 0, (0, 1), (0, 1)),
    ]
    await store.create_topic(fence, TopicSpec("t", "a" * 32, 6, 2, {}), states)
    replicas = ReplicaManager(manager, store, 0, ChangeNotifier())
    caplog.set_level(logging.DEBUG, logger="replication.replica_manager")
    try:
        await replicas.start()
        info = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
        assert info == [
            "took up 6 partitions: leader of t[0-2,5]; follower of t[3]; no leader for t[4]"
        ]
        debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
        assert "t-3: follower of node 1 in epoch 0, ISR [1, 0]" in debug
        assert "t-4: no leader in epoch 2, ISR []" in debug
        caplog.clear()

        failover = replace(states[3], leader=0, leader_epoch=1, isr=(0,))
        stored = store.view.partition("t", 3)
        assert stored is not None
        assert await store.set_partition("t", 3, replace(failover, version=stored.version))
        assert await replicas.applied(lambda: replicas.partitions[("t", 3)].leader == 0, 5)
        assert [r.getMessage() for r in caplog.records] == ["t-3: leader in epoch 1, ISR [0]"]
    finally:
        await replicas.close()
        await store.close()
        manager.close()
