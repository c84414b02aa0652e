"""The roles a node takes up are one log line (each partition at DEBUG); a later change of a
partition's role, a failover, is a line of its own."""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from engine.manager import LogManager
from engine.notify import ChangeNotifier
from replication import replica_manager
from replication.memory_store import MemoryMetadataStore
from replication.metadata import NO_LEADER, NodeInfo, PartitionState, TopicSpec
from replication.partition import Partition
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


async def test_a_view_that_arrives_during_the_first_apply_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At start-up the first view is applied while the store's watch runs: a change arriving
    while the logs' idempotency markers are read (an election) must wait for it. Applied at the
    same time, it made a second replica of each partition, and the node could end up
    following with one that was never updated again (a restarted node that never took up the
    leadership it was given)."""
    manager = LogManager(tmp_path)
    store = MemoryMetadataStore()
    await store.start(NodeInfo(0, "http://node0:8080"))
    fence = await store.campaign()
    follower = PartitionState(1, 0, (1, 0), (1, 0))
    await store.create_topic(fence, TopicSpec("t", "a" * 32, 2, 2, {}), [follower] * 2)
    replicas = ReplicaManager(manager, store, 0, ChangeNotifier())
    reading, change_made, second = threading.Event(), threading.Event(), threading.Event()
    rebuild = replica_manager._rebuild_idempotency

    def slow_rebuild(partitions: list[Partition]) -> None:
        if not reading.is_set():  # the first apply: held until the election is stored
            reading.set()
            assert change_made.wait(10)
            # Give a concurrent apply (the bug) its chance to read the logs meanwhile; the
            # fixed node never starts one, so this waits out its bound.
            second.wait(1)
        else:
            second.set()
        rebuild(partitions)

    monkeypatch.setattr(replica_manager, "_rebuild_idempotency", slow_rebuild)
    loop = asyncio.get_running_loop()
    try:
        starting = asyncio.ensure_future(replicas.start())
        assert await loop.run_in_executor(None, reading.wait, 10)
        stored = store.backend.partitions[("t", 0)]
        assert await store.set_partition("t", 0, replace(stored, leader=0, leader_epoch=1))
        change_made.set()
        await starting
        assert not second.is_set(), "a second view was applied while the first still was"
        assert await replicas.applied(lambda: replicas.partitions[("t", 0)].is_leader, 5)
        taken = {key: id(p) for key, p in replicas.partitions.items()}
        assert await replicas.applied(lambda: replicas._pending is None, 5)
        assert {key: id(p) for key, p in replicas.partitions.items()} == taken
        assert all(p.log is manager.log("t", p.partition) for p in replicas.partitions.values())
        assert replicas.partitions[("t", 0)].leader_epoch == 1
    finally:
        await replicas.close()
        await store.close()
        manager.close()
