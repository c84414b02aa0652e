"""Transactions at the partition layer, without HTTP: a produce inside a transaction on the
partitions led here, markers written once (a coordinator's retry is a no-op), reads at both
isolation levels through the replica manager, and the refusals that keep zombies out."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engine import batch as fmt
from engine.errors import ProducerFenced, TransactionNotOngoing
from engine.manager import LogManager
from engine.notify import ChangeNotifier
from engine.producer_state import Isolation, ProducerIdentity
from engine.segment import LogSegment
from replication.acks import Acks
from replication.errors import InternalTopicWrite, LeaderNotAvailable
from replication.forward_client import ForwardClient
from replication.markers import MarkerWriter
from replication.memory_store import MemoryMetadataStore
from replication.metadata import NodeInfo, PartitionState, TopicSpec
from replication.records_append import Landed, PartitionBatch, RecordsAppender
from replication.replica_manager import ReplicaManager

TOPIC = "orders"
PRODUCER = ProducerIdentity(77, 0)


def batch(partition: int, *values: bytes) -> PartitionBatch:
    records: list[fmt.RecordTuple] = [(None, value, [], None) for value in values]
    return PartitionBatch(
        partition, fmt.encode_batches(records, max_batch_bytes=1 << 20), len(values)
    )


class Node:
    def __init__(self, replicas: ReplicaManager, forwarder: ForwardClient) -> None:
        self.replicas = replicas
        self.appender = RecordsAppender(replicas, forwarder)
        self.markers = MarkerWriter(replicas, forwarder)

    async def produce(
        self, producer: ProducerIdentity, *items: PartitionBatch, acks: Acks = Acks.ALL
    ) -> Landed:
        landed: Landed = {}
        await self.appender.append_transactional(TOPIC, list(items), acks, 5_000, landed, producer)
        return landed

    async def values(self, partition: int, isolation: Isolation) -> list[bytes | None]:
        result = await self.replicas.fetch(TOPIC, partition, 0, 1 << 20, 0, 0, isolation=isolation)
        return [r.value for r in fmt.iter_records(result.data)]


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    """A node leading both partitions of `orders` alone."""
    store = MemoryMetadataStore()
    await store.start(NodeInfo(0, "http://node0:8080"))
    fence = await store.campaign()
    spec = TopicSpec(TOPIC, "b" * 32, 2, 1, {})
    await store.create_topic(fence, spec, [PartitionState(0, 1, (0,), (0,))] * 2)
    replicas = ReplicaManager(LogManager(tmp_path), store, 0, ChangeNotifier())
    forwarder = ForwardClient(0)
    await replicas.start()
    try:
        yield Node(replicas, forwarder)
    finally:
        await replicas.close()
        await forwarder.close()
        await store.close()


async def test_a_transaction_over_two_partitions_shows_once_committed(node: Node) -> None:
    landed = await node.produce(PRODUCER, batch(0, b"a"), batch(1, b"b", b"c"))
    assert landed == {0: (0, 1), 1: (0, 2)}
    assert await node.values(0, Isolation.READ_COMMITTED) == []
    assert await node.values(1, Isolation.READ_UNCOMMITTED) == [b"b", b"c"]
    for p in (0, 1):
        await node.markers.write(TOPIC, p, PRODUCER, True, 0)
    assert await node.values(0, Isolation.READ_COMMITTED) == [b"a"]
    assert await node.values(1, Isolation.READ_COMMITTED) == [b"b", b"c"]
    # the markers reach no reader
    assert await node.values(1, Isolation.READ_UNCOMMITTED) == [b"b", b"c"]
    leader = node.replicas.leading(TOPIC, 1)
    assert leader is not None and leader.last_stable_offset == leader.high_watermark == 3


async def test_an_aborted_transaction_is_never_read_committed(node: Node) -> None:
    await node.produce(PRODUCER, batch(0, b"gone"))
    await node.markers.write(TOPIC, 0, PRODUCER, False, 0)
    await node.markers.write(TOPIC, 0, PRODUCER, False, 0)  # a retry writes nothing
    leader = node.replicas.leading(TOPIC, 0)
    assert leader is not None and leader.log_end_offset == 2
    assert await node.values(0, Isolation.READ_COMMITTED) == []
    assert await node.values(0, Isolation.READ_UNCOMMITTED) == [b"gone"]


async def test_markers_written_together_name_the_partitions_they_missed(node: Node) -> None:
    """`write_all` writes the markers of the partitions led here in one pass, and answers the
    partition it could not reach with why, so that only it is retried."""
    fence = await node.replicas.store.campaign()
    spec = TopicSpec("elsewhere", "c" * 32, 1, 1, {})
    await node.replicas.store.create_topic(fence, spec, [PartitionState(1, 1, (1,), (1,))])
    assert await node.replicas.applied(lambda: "elsewhere" in node.replicas.store.view.topics, 5)
    await node.produce(PRODUCER, batch(0, b"a"), batch(1, b"b"))
    partitions = [(TOPIC, 0), (TOPIC, 1), ("elsewhere", 0)]
    failed = await node.markers.write_all(partitions, PRODUCER, True, 0)
    assert list(failed) == [("elsewhere", 0)]
    assert isinstance(failed["elsewhere", 0], LeaderNotAvailable)
    assert await node.values(0, Isolation.READ_COMMITTED) == [b"a"]
    assert await node.values(1, Isolation.READ_COMMITTED) == [b"b"]
    # a retry of the whole writes nothing twice
    assert list(await node.markers.write_all(partitions[:2], PRODUCER, True, 0)) == []
    for p in (0, 1):
        leader = node.replicas.leading(TOPIC, p)
        assert leader is not None and leader.log_end_offset == 2


async def test_a_fenced_or_finished_epoch_appends_nothing(node: Node) -> None:
    newer = ProducerIdentity(PRODUCER.producer_id, 1)
    await node.produce(newer, batch(0, b"new"))
    with pytest.raises(ProducerFenced):
        await node.produce(PRODUCER, batch(0, b"zombie"))
    await node.markers.write(TOPIC, 0, newer, True, 0)
    with pytest.raises(TransactionNotOngoing):
        await node.produce(newer, batch(0, b"late"))
    assert await node.values(0, Isolation.READ_UNCOMMITTED) == [b"new"]


async def test_a_turns_transactional_produces_share_each_partitions_write(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Produces of several transactions in one loop turn write each partition once, as plain
    produces do (group commit), each producer's batches its own; a zombie among them is
    refused and the others land."""
    newer = ProducerIdentity(PRODUCER.producer_id, 1)
    await node.produce(newer, batch(0, b"first"))
    writes: list[int] = []
    original = LogSegment.append

    def counted(self: LogSegment, data: bytes | bytearray | memoryview, *args: object) -> None:
        writes.append(len(data))
        original(self, data, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(LogSegment, "append", counted)
    other = ProducerIdentity(88, 0)
    outcomes = await asyncio.gather(
        node.produce(newer, batch(0, b"a"), batch(1, b"b")),
        node.produce(other, batch(0, b"c"), batch(1, b"d")),
        node.produce(PRODUCER, batch(0, b"zombie"), batch(1, b"zombie")),
        return_exceptions=True,
    )
    assert list(outcomes[:2]) == [{0: (1, 1), 1: (0, 1)}, {0: (2, 1), 1: (1, 1)}]
    assert isinstance(outcomes[2], ProducerFenced)
    assert len(writes) == 2  # one a partition
    for p in (0, 1):
        for producer in (newer, other):
            await node.markers.write(TOPIC, p, producer, True, 0)
    assert await node.values(0, Isolation.READ_COMMITTED) == [b"first", b"a", b"c"]
    assert await node.values(1, Isolation.READ_COMMITTED) == [b"b", b"d"]


async def test_clients_may_not_write_internal_topics_in_a_transaction(node: Node) -> None:
    with pytest.raises(InternalTopicWrite):
        await node.appender.append_transactional(
            "__consumer_offsets", [batch(0, b"x")], Acks.ALL, 1_000, {}, PRODUCER
        )
