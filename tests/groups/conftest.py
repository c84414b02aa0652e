"""One node (0) leading `__consumer_offsets-0` with node 1 in its ISR, and a topic `t` of one
partition it leads alone, with a group coordinator on them and no HTTP server. Node 1 exists
only as the fetches the leader notes (`follower_fetched`), so the offsets partition's high
watermark moves when the test says."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from engine import batch as fmt
from engine import offsets_topic
from engine.manager import LogManager
from engine.notify import ChangeNotifier
from engine.offsets_topic import TopicPartition
from groups.coordinator import GroupCoordinator, JoinRequest, Member
from groups.model import Group
from replication.acks import Acks
from replication.fetch_limits import FetchLimits
from replication.forward_client import ForwardClient
from replication.memory_store import MemoryMetadataStore
from replication.metadata import Fence, NodeInfo, PartitionState, TopicSpec
from replication.partition import Partition
from replication.replica_manager import ReplicaManager

OFFSETS = offsets_topic.OFFSETS_TOPIC
TOPIC = "t"
TP = (TOPIC, 0)
GROUP = "g"
NOW = FetchLimits(max_records=100, max_bytes=1 << 20, min_bytes=1, timeout_ms=0)
PARKED = FetchLimits(max_records=100, max_bytes=1 << 20, min_bytes=1, timeout_ms=30_000)
WAIT_S = 10.0  # bound of every wait on a condition


def offsets_of(
    data: memoryview, position: int, limit: int, tp: TopicPartition
) -> tuple[list[Any], int]:
    """The records' offsets from `position` on, at most `limit`, and the offset after them."""
    out: list[Any] = []
    next_offset = position
    for record in fmt.iter_records(data):
        if record.offset < position:
            continue
        if len(out) == limit:
            break
        out.append(record.offset)
        next_offset = record.offset + 1
    return out, next_offset


@dataclass
class Node:
    store: MemoryMetadataStore
    fence: Fence
    replicas: ReplicaManager
    forwarder: ForwardClient
    groups: GroupCoordinator

    @property
    def offsets(self) -> Partition:
        return self.replicas.partitions[(OFFSETS, 0)]

    def produce(self, count: int, tp: TopicPartition = TP) -> None:
        records = [fmt.RecordInput(None, b"v", []) for _ in range(count)]
        self.replicas.partitions[tp].append(fmt.encode_batch(records), Acks.LEADER)

    async def create_topic(self, name: str, partitions: int) -> None:
        """A topic of `partitions` partitions, each led by this node alone."""
        spec = TopicSpec(name, name.encode().hex().ljust(32, "0")[:32], partitions, 1, {})
        states = [PartitionState(0, 1, (0,), (0,)) for _ in range(partitions)]
        await self.store.create_topic(self.fence, spec, states)
        wanted = {(name, p) for p in range(partitions)}
        assert await self.replicas.applied(lambda: wanted <= set(self.replicas.partitions), 10)

    def follower_fetched(self) -> None:
        """Node 1 fetched the offsets partition up to its log end, as its fetcher would."""
        partition = self.offsets
        partition.replica_fetch(1, partition.log_end_offset, partition.leader_epoch, 0)

    def offsets_records(self, since: int) -> list[tuple[Any, Any]]:
        """The offsets partition's records from `since` on, keys and values decoded (a
        tombstone's value is None); node 1 fetches them first, so they are committed."""
        self.follower_fetched()
        data = self.offsets.read(since, 1 << 20).data
        return [
            (_json(r.key), None if r.value is None else _json(r.value))
            for r in fmt.iter_records(data)
            if r.offset >= since
        ]

    async def offsets_state(self, leader: int, isr: tuple[int, ...]) -> None:
        """The controller's next epoch of the offsets partition: `leader`, with `isr`."""
        state = self.store.view.partitions[(OFFSETS, 0)]
        new = PartitionState(leader, state.leader_epoch + 1, state.replicas, isr, state.version)
        assert await self.store.set_partition(OFFSETS, 0, new, self.fence)


def _json(raw: bytes | memoryview | None) -> Any:
    return None if raw is None else orjson.loads(bytes(raw))


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    store = MemoryMetadataStore()
    await store.start(NodeInfo(0, "http://node0:8080"))
    fence = await store.campaign()
    offsets = TopicSpec(OFFSETS, "a" * 32, 1, 2, dict(offsets_topic.TOPIC_CONFIGS))
    await store.create_topic(fence, offsets, [PartitionState(0, 1, (0, 1), (0, 1))])
    await store.create_topic(
        fence, TopicSpec(TOPIC, "b" * 32, 1, 1, {}), [PartitionState(0, 1, (0,), (0,))]
    )
    manager = LogManager(tmp_path)
    replicas = ReplicaManager(manager, store, 0, ChangeNotifier())
    forwarder = ForwardClient(0)
    groups = GroupCoordinator(replicas, forwarder, 100, offsets_of)
    replicas.add_role_listener(groups.role_changed)
    try:
        await replicas.start()
        await groups.loaded()
        yield Node(store, fence, replicas, forwarder, groups)
    finally:
        groups.close()
        await replicas.close()
        await forwarder.close()
        await store.close()
        manager.close()


async def member_at(node: Node, committed: int) -> str:
    """A member of GROUP over TOPIC, delivered and committed up to `committed`."""
    node.produce(committed)
    _, member = node.groups.join(GROUP, JoinRequest((TOPIC,), 30_000, "earliest", False))
    node.follower_fetched()
    await node.groups.durable(GROUP, 1000)
    fetched = await node.groups.fetch(GROUP, member.member_id, NOW)
    assert fetched.records == list(range(committed))
    assert node.groups.commit(GROUP, member.member_id, None, None) == [(TP, committed)]
    node.follower_fetched()
    await node.groups.durable(GROUP, 1000)
    return member.member_id


def run_out(node: Node, group: Group, member: Member) -> None:
    """End the member's session at the loop's next turn, as if its `session_timeout_ms` had
    passed without a request from it: the coordinator's own timer removes it."""
    member.session_timeout_ms = 0
    node.groups.membership.schedule_expiry(group, member)


async def until(condition: Callable[[], bool], what: str) -> None:
    """Let the loop run (its timers too) until `condition` holds; fail after WAIT_S."""
    try:
        async with asyncio.timeout(WAIT_S):
            while not condition():
                await asyncio.sleep(0)
    except TimeoutError:
        raise AssertionError(f"timed out after {WAIT_S:.0f} s waiting for {what}") from None
