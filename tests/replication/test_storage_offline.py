"""A leader whose log goes offline (a storage failure) stops acknowledging: an acks=all produce
waiting for its followers answers KafkaStorageError at once, followers' fetches are refused
before their progress is noted (the high watermark no longer moves), and new produces append
nothing. The node reports its offline partitions to the metadata store, for the controller to
move their leadership (tests/replication/test_controller.py), and an offline log follows no
leader."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engine import batch as fmt
from engine.epoch_cache import UNDEFINED_EPOCH, UNDEFINED_OFFSET
from engine.errors import KafkaStorageError
from engine.manager import LogManager
from engine.notify import ChangeNotifier
from replication.acks import Acks
from replication.fetcher import ReplicaFetchers
from replication.idempotency import IdempotencyIndex
from replication.memory_store import MemoryBackend, MemoryMetadataStore
from replication.metadata import NodeInfo, PartitionState, TopicSpec
from replication.partition import Partition
from replication.replica_client import ReplicaClient
from replication.replica_manager import ReplicaManager
from tests.api.support import wait_until


def batch(value: bytes) -> bytearray:
    return fmt.encode_batch([fmt.RecordInput(None, value, [], None)])


@pytest.fixture
async def replicas(tmp_path: Path) -> AsyncIterator[ReplicaManager]:
    """Node 0 leads t-0, node 1 follows it (in the ISR)."""
    manager = LogManager(tmp_path)
    store = MemoryMetadataStore()
    await store.start(NodeInfo(0, "http://node0:8080"))
    fence = await store.campaign()
    await store.create_topic(
        fence, TopicSpec("t", "a" * 32, 1, 2, {}), [PartitionState(0, 0, (0, 1), (0, 1))]
    )
    replicas = ReplicaManager(manager, store, 0, ChangeNotifier())
    await replicas.start()
    try:
        yield replicas
    finally:
        await replicas.close()
        await store.close()
        manager.close()
        assert not manager.closed_cleanly  # an offline log: the next start checks the logs


async def test_an_offline_leader_stops_acknowledging(replicas: ReplicaManager) -> None:
    leader = replicas.partitions[("t", 0)]
    first = await replicas.append("t", 0, batch(b"a"), Acks.LEADER, 5_000)
    leader.replica_fetch(1, first.last_offset + 1, 0, 1 << 20)  # node 1 has it
    assert leader.high_watermark == 1

    waiting = asyncio.ensure_future(replicas.append("t", 0, batch(b"b"), Acks.ALL, 60_000))
    while leader.log_end_offset < 2:  # appended at the end of this loop turn
        await asyncio.sleep(0)
    assert not waiting.done()
    leader.log.go_offline("flushing the log to disk failed: [Errno 5] Input/output error")
    with pytest.raises(KafkaStorageError, match="appended before it and are not acknowledged"):
        await asyncio.wait_for(waiting, 10)  # woken, not timed out

    with pytest.raises(KafkaStorageError):
        leader.replica_fetch(1, 2, 0, 1 << 20)  # node 1 caught up: noted nowhere
    assert leader.high_watermark == 1
    with pytest.raises(KafkaStorageError, match="nothing was appended"):
        await replicas.append("t", 0, batch(b"c"), Acks.LEADER, 5_000)
    with pytest.raises(KafkaStorageError):
        await replicas.fetch("t", 0, 0, 1 << 20, 1, 0)
    assert replicas.offline_partitions() == [
        ("t", 0, "flushing the log to disk failed: [Errno 5] Input/output error")
    ]


async def test_a_log_going_offline_is_reported_to_the_store(
    replicas: ReplicaManager, caplog: pytest.LogCaptureFixture
) -> None:
    """From the thread that met the failure (a flush, say); the whole set each time."""
    caplog.set_level(logging.WARNING, "replication.replica_manager")
    store = replicas.store
    assert store.view.offline == {}
    log_ = replicas.partitions[("t", 0)].log
    await asyncio.to_thread(log_.go_offline, "flushing the log to disk failed: [Errno 5] EIO")
    assert await store.wait_for(lambda view: view.offline == {0: {("t", 0)}}, 10)
    [line] = [r.getMessage() for r in caplog.records if "reports" in r.getMessage()]
    assert line == (
        "node 0 reports its offline partitions to the controller (1 now); newly offline: t-0"
    )


async def test_a_deleted_topic_leaves_the_report(tmp_path: Path) -> None:
    manager = LogManager(tmp_path)
    store = MemoryMetadataStore()
    await store.start(NodeInfo(0, "http://node0:8080"))
    fence = await store.campaign()
    for name in ("t", "u"):
        spec = TopicSpec(name, name * 32, 1, 1, {})
        await store.create_topic(fence, spec, [PartitionState(0, 0, (0,), (0,))])
    replicas = ReplicaManager(manager, store, 0, ChangeNotifier())
    await replicas.start()
    try:
        for name in ("t", "u"):
            replicas.partitions[(name, 0)].log.go_offline("writing the log failed: EIO")
        assert await store.wait_for(lambda view: view.offline == {0: {("t", 0), ("u", 0)}}, 10)
        await store.delete_topic(fence, "t")
        assert await store.wait_for(lambda view: view.offline == {0: {("u", 0)}}, 10)
    finally:
        await replicas.close()
        await store.close()
        manager.close()


async def test_an_offline_log_that_stops_leading_follows_nobody(
    replicas: ReplicaManager,
) -> None:
    fetchers = ReplicaFetchers(replicas.store, LeaderAnswers(), 0)  # type: ignore[arg-type]
    replicas.add_role_listener(fetchers.role_changed)
    store = replicas.store
    try:
        leader = replicas.partitions[("t", 0)]
        leader.log.go_offline("writing the log failed: [Errno 5] Input/output error")
        state = store.view.partitions[("t", 0)]
        moved = PartitionState(1, 1, (0, 1), (1,), state.version)
        assert await store.set_partition("t", 0, moved) is not None
        assert await replicas.applied(lambda: leader.leader == 1, 10)
        assert not leader.is_leader and fetchers.following == {}
    finally:
        await fetchers.close()


class LeaderAnswers:
    """The leader's side of a follower's calls: where epochs end; records never come. `fail`:
    the follower's log goes offline as it asks (its truncation then meets the failure)."""

    def __init__(self, fail: Partition | None = None) -> None:
        self.fail = fail

    async def epoch_end(self, *args: object, **kwargs: object) -> tuple[int, int]:
        if self.fail is not None:
            self.fail.log.go_offline("writing the log failed: [Errno 30] Read-only file system")
        return UNDEFINED_EPOCH, UNDEFINED_OFFSET  # so the follower truncates (to 0)

    async def fetch(self, *args: object, **kwargs: object) -> object:
        raise AssertionError("an offline follower fetches nothing")


async def test_an_offline_follower_stops_following(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """It leaves its leader's session with one error line: no unhandled exception, no retry
    loop."""
    backend = MemoryBackend()
    stores = [MemoryMetadataStore(backend) for _ in range(2)]
    for node, store in enumerate(stores):
        await store.start(NodeInfo(node, f"http://node{node}:8080"))
    manager = LogManager(tmp_path)
    manager.create_topic("t")
    follower = Partition(manager.log("t", 0), 0, IdempotencyIndex(60, 100))
    follower.make_follower(PartitionState(1, 0, (1, 0), (1, 0)))
    client: ReplicaClient = LeaderAnswers(follower)  # type: ignore[assignment]
    fetchers = ReplicaFetchers(stores[0], client, 0)
    try:
        await fetchers.role_changed(follower)
        assert fetchers.following == {("t", 0): 1}
        await wait_until(lambda: fetchers.following == {})
        [line] = [r for r in caplog.records if r.name == "replication.fetcher"]
        assert line.levelno == logging.ERROR
        assert "t-0 stops following node 1" in line.getMessage()
        assert "Read-only file system" in line.getMessage()
    finally:
        await fetchers.close()
        manager.close()
        for store in stores:
            await store.close()
