"""The partition layer's one entry for a produce (`RecordsAppender.append_records`), driven
without HTTP: every partition's ISR is judged before any append, each partition's landing is
reported as it happens, and a partition led elsewhere is refused when forwarding is not
allowed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engine import batch as fmt
from engine.log import AppendInfo
from engine.manager import LogManager
from engine.notify import ChangeNotifier
from replication.acks import Acks
from replication.errors import NotEnoughReplicas, NotLeader
from replication.forward_client import ForwardClient
from replication.memory_store import MemoryMetadataStore
from replication.metadata import NodeInfo, PartitionState, TopicSpec
from replication.partition import Partition
from replication.records_append import Landed, PartitionBatch, RecordsAppender
from replication.replica_manager import ReplicaManager

TOPIC = "t"


def batch(partition: int, *values: bytes) -> PartitionBatch:
    records: list[fmt.RecordTuple] = [(None, value, [], None) for value in values]
    return PartitionBatch(
        partition, fmt.encode_batches(records, max_batch_bytes=1 << 20), len(values)
    )


@pytest.fixture
async def appender(tmp_path: Path) -> AsyncIterator[RecordsAppender]:
    """Node 0 of a topic with min.insync.replicas=2: partition 0 led here with node 1 in its
    ISR, partition 1 led here alone (below min ISR), partition 2 led by node 1."""
    store = MemoryMetadataStore()
    await store.start(NodeInfo(0, "http://node0:8080"))
    fence = await store.campaign()
    spec = TopicSpec(TOPIC, "a" * 32, 3, 2, {"min.insync.replicas": 2})
    states = [
        PartitionState(0, 1, (0, 1), (0, 1)),
        PartitionState(0, 1, (0, 1), (0,)),
        PartitionState(1, 1, (1, 0), (1, 0)),
    ]
    await store.create_topic(fence, spec, states)
    manager = LogManager(tmp_path)
    replicas = ReplicaManager(manager, store, 0, ChangeNotifier())
    forwarder = ForwardClient(0)
    await replicas.start()
    try:
        yield RecordsAppender(replicas, forwarder)
    finally:
        await replicas.close()
        await forwarder.close()
        await store.close()
        manager.close()


def log_end(appender: RecordsAppender, partition: int) -> int:
    local = appender.replicas.local(TOPIC, partition)
    assert local is not None
    return local.log.log_end_offset


async def test_one_call_appends_every_partitions_batches_and_reports_each(
    appender: RecordsAppender,
) -> None:
    landed: Landed = {}
    batches = [batch(0, b"a", b"b"), batch(1, b"c")]
    await appender.append_records(TOPIC, batches, Acks.LEADER, 1000, landed)
    assert landed == {0: (0, 2), 1: (0, 1)}
    assert (log_end(appender, 0), log_end(appender, 1)) == (2, 1)


async def test_acks_all_below_min_isr_on_one_partition_appends_on_none(
    appender: RecordsAppender,
) -> None:
    landed: Landed = {}
    with pytest.raises(NotEnoughReplicas):
        await appender.append_records(
            TOPIC, [batch(0, b"a"), batch(1, b"b")], Acks.ALL, 1000, landed
        )
    assert landed == {}
    assert (log_end(appender, 0), log_end(appender, 1)) == (0, 0)


async def test_a_partition_led_elsewhere_is_refused_when_it_may_not_be_forwarded(
    appender: RecordsAppender,
) -> None:
    landed: Landed = {}
    with pytest.raises(NotLeader):
        await appender.append_records(
            TOPIC, [batch(0, b"a"), batch(2, b"b")], Acks.LEADER, 1000, landed, may_forward=False
        )
    assert landed == {}
    assert log_end(appender, 0) == 0


async def test_append_now_takes_what_is_led_here_and_leaves_the_rest(
    appender: RecordsAppender,
) -> None:
    """Any acks on a partition led here: acks=all below min.insync.replicas is refused as its
    write is checked, nothing appended; with a follower in sync it lands, not yet committed
    (the answer waits for the follower). A partition led elsewhere is left to append_records.
    `then` gets the leader and the landing, settled, in the write's pass."""
    handed: list[tuple[Partition, asyncio.Future[AppendInfo]]] = []

    def then(leader: Partition, landing: asyncio.Future[AppendInfo]) -> None:
        assert landing.done()
        handed.append((leader, landing))

    refused = appender.append_now(TOPIC, batch(1, b"a"), Acks.ALL, then)
    assert refused is not None
    with pytest.raises(NotEnoughReplicas):
        await refused
    assert log_end(appender, 1) == 0
    replicated = appender.append_now(TOPIC, batch(0, b"a"), Acks.ALL, then)
    assert replicated is not None
    info = await replicated
    assert not appender.replicas.committed(handed[-1][0], info.last_offset)
    assert appender.append_now(TOPIC, batch(2, b"a"), Acks.LEADER, then) is None
    landing = appender.append_now(TOPIC, batch(1, b"a"), Acks.LEADER, then)
    assert landing is not None
    assert (await landing).first_offset == 0
    assert [(leader.partition, handed_landing) for leader, handed_landing in handed] == [
        (1, refused),
        (0, replicated),
        (1, landing),
    ]
