"""A member's fetch driven directly, without HTTP: a position retention took away (here:
the log emptied and started again at 9, then 3 records) restarts where auto_offset_reset
says, or is an error with `none`."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import replace

import orjson
import pytest

from engine.errors import IsolationUnavailable, OffsetOutOfRange
from engine.offsets_topic import TopicPartition
from engine.producer_state import Isolation
from groups.coordinator import JoinRequest, Member
from replication import session_wire
from replication.forward_client import Answer, ForwardClient
from replication.memory_store import MemoryMetadataStore
from replication.metadata import NodeInfo, PartitionState, TopicSpec
from tests.groups.conftest import GROUP, NOW, TOPIC, TP, Node


def committed_past_the_log(node: Node, auto_offset_reset: str) -> Member:
    """A member whose committed offset, 5, is before the log's start (9..12)."""
    node.produce(5)
    group, member = node.groups.membership.join(
        GROUP, JoinRequest((TOPIC,), 30_000, auto_offset_reset, False)
    )
    node.groups.offsets.commit(group, member, [(TP, 5, "")], None)
    node.replicas.partitions[TP].log.truncate_fully_and_start_at(9)
    node.produce(3)
    return member


@pytest.mark.parametrize(("reset", "delivered"), [("earliest", [9, 10, 11]), ("latest", [])])
async def test_a_position_outside_the_log_restarts_where_auto_offset_reset_says(
    node: Node, reset: str, delivered: list[int]
) -> None:
    member = committed_past_the_log(node, reset)
    fetched = await node.groups.member_fetch.fetch(GROUP, member.member_id, NOW)
    assert fetched.records == delivered
    assert member.positions[TP] == 12


async def test_a_position_outside_the_log_without_a_reset_is_an_error(node: Node) -> None:
    member = committed_past_the_log(node, "none")
    with pytest.raises(OffsetOutOfRange):
        await node.groups.member_fetch.fetch(GROUP, member.member_id, NOW)


class HeldForwarder(ForwardClient):
    """Node 1 as the member fetch meets it: an offset lookup waits until `answer` is set (the
    fetch is mid-flight), a records fetch fails; every records fetch's positions are kept."""

    def __init__(self) -> None:
        super().__init__(0)
        self.asked = asyncio.Event()
        self.answer = asyncio.Event()
        self.fetched: list[dict[TopicPartition, int]] = []

    async def forward(
        self,
        url: str,
        method: str,
        path_qs: str,
        headers: Mapping[str, str],
        body: bytes,
        waits_ms: int = 0,
    ) -> Answer:
        if "/offsets" in path_qs:
            self.asked.set()
            await self.answer.wait()
            return Answer(200, {}, orjson.dumps({"offset": 0}))
        request = session_wire.decode_request(body)
        self.fetched.append({key: p.fetch_offset for key, p in request.partitions.items()})
        return Answer(503, {}, b"")


async def led_by_node_1(node: Node) -> HeldForwarder:
    """Topic "r", its one partition led by node 1, reached through a HeldForwarder."""
    await MemoryMetadataStore(node.store.backend).start(NodeInfo(1, "http://node1:8080"))
    await node.store.create_topic(
        node.fence, TopicSpec("r", "c" * 32, 1, 1, {}), [PartitionState(1, 1, (1,), (1,))]
    )
    assert await node.store.wait_for(lambda view: ("r", 0) in view.partitions, 5)
    forwarder = HeldForwarder()
    node.groups.member_fetch.forwarder = forwarder
    return forwarder


async def test_a_partition_taken_back_starts_at_its_commit_not_at_a_position_found_meanwhile(
    node: Node,
) -> None:
    """A member whose fetch was looking up its start in a partition led elsewhere when a
    rebalance moved that partition away must not keep that start: when the partition comes
    back, after another member read and committed it, reading resumes at that commit."""
    forwarder = await led_by_node_1(node)
    groups = node.groups.membership
    later = JoinRequest(("r",), 30_000, "earliest", False, instance_id="z")
    first = JoinRequest(("r",), 30_000, "earliest", False, instance_id="a")
    groups.join(GROUP, later)
    fetching = asyncio.ensure_future(node.groups.member_fetch.fetch(GROUP, "z", NOW))
    await forwarder.asked.wait()
    group, taker = groups.join(GROUP, first)  # "a" sorts first: the partition moves to it
    assert taker.owned == {("r", 0)}
    forwarder.answer.set()
    await fetching
    node.groups.offsets.commit(group, taker, [(("r", 0), 10, "")], None)
    groups.leave(GROUP, "a")
    forwarder.fetched.clear()
    await node.groups.member_fetch.fetch(GROUP, "z", NOW)
    assert forwarder.fetched == [{("r", 0): 10}]


async def test_a_start_looked_up_while_the_partition_went_and_came_back_is_not_kept(
    node: Node,
) -> None:
    """The partition moves away and comes back while the member's first start lookup (no
    commit yet: asked of the leader) is still on its way: that lookup's answer belongs to the
    earlier ownership, and reading resumes at the commit made meanwhile."""
    forwarder = await led_by_node_1(node)
    groups = node.groups.membership
    groups.join(GROUP, JoinRequest(("r",), 30_000, "earliest", False, instance_id="z"))
    fetching = asyncio.ensure_future(node.groups.member_fetch.fetch(GROUP, "z", NOW))
    await forwarder.asked.wait()
    first = JoinRequest(("r",), 30_000, "earliest", False, instance_id="a")
    group, taker = groups.join(GROUP, first)
    node.groups.offsets.commit(group, taker, [(("r", 0), 10, "")], None)
    groups.leave(GROUP, "a")  # back to "z" before its lookup answers
    forwarder.answer.set()
    await fetching
    await node.groups.member_fetch.fetch(GROUP, "z", NOW)
    assert forwarder.fetched and all(asked == {("r", 0): 10} for asked in forwarder.fetched)


class IsolationUnavailableLeader(ForwardClient):
    """Node 1 leading "r", whose records at the member's position only remote storage holds:
    its start is 0, a read_committed fetch of it is refused 416 ISOLATION_UNAVAILABLE, a
    read_uncommitted one finds nothing yet."""

    def __init__(self) -> None:
        super().__init__(0)

    async def forward(
        self,
        url: str,
        method: str,
        path_qs: str,
        headers: Mapping[str, str],
        body: bytes,
        waits_ms: int = 0,
    ) -> Answer:
        if "/offsets" in path_qs:
            return Answer(200, {}, orjson.dumps({"offset": 0}))
        request = session_wire.decode_request(body)
        problem = {"status": 416, "code": "ISOLATION_UNAVAILABLE", "detail": "on S3 only"}
        refused = session_wire.PartitionAnswer(9, 0, b"", 416, orjson.dumps(problem))
        empty = session_wire.PartitionAnswer(9, 0)
        committed = request.isolation is Isolation.READ_COMMITTED
        parts = {key: refused if committed else empty for key in request.partitions}
        answer = session_wire.SessionFetchAnswer(0, parts)
        return Answer(200, {}, b"".join(session_wire.encode_answer(answer)))


async def test_a_read_committed_fetch_the_leader_cannot_serve_is_the_members_answer(
    node: Node,
) -> None:
    """As a partition fetch answers it: not an empty answer that hides why nothing comes."""
    await led_by_node_1(node)
    node.groups.member_fetch.forwarder = IsolationUnavailableLeader()
    node.groups.membership.join(
        GROUP, JoinRequest(("r",), 30_000, "earliest", False, instance_id="z")
    )
    committed = replace(NOW, isolation=Isolation.READ_COMMITTED)
    with pytest.raises(IsolationUnavailable, match="on S3 only"):
        await node.groups.member_fetch.fetch(GROUP, "z", committed)
    assert (await node.groups.member_fetch.fetch(GROUP, "z", NOW)).records == []


async def test_a_read_committed_fetch_of_offsets_only_s3_holds_here_is_the_members_answer(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partition led here whose records at the member's position are on S3 only: what the
    read layer refuses at read_committed (IsolationUnavailable) is the member's answer."""
    configs = {"remote.storage.enable": True, "segment.bytes": 200, "local.retention.bytes": 0}
    await node.store.create_topic(
        node.fence, TopicSpec("s", "d" * 32, 1, 1, configs), [PartitionState(0, 1, (0,), (0,))]
    )
    assert await node.replicas.applied(lambda: ("s", 0) in node.replicas.partitions, 10)
    for _ in range(10):
        node.produce(3, ("s", 0))
    log = node.replicas.partitions[("s", 0)].log
    log.remote_end_offset = log.segments[-1].base_offset  # S3 holds every closed segment
    log.apply_retention()
    assert log.log_start_offset == 0 < log.local_log_start_offset

    async def refused(*args: object, **kwargs: object) -> None:
        raise IsolationUnavailable("offset 0 of s-0 is on remote storage only")

    monkeypatch.setattr(node.replicas, "fetch", refused)
    node.groups.membership.join(GROUP, JoinRequest(("s",), 30_000, "earliest", False))
    [member] = node.groups.groups[GROUP].members
    committed = replace(NOW, isolation=Isolation.READ_COMMITTED)
    with pytest.raises(IsolationUnavailable, match="remote storage only"):
        await node.groups.member_fetch.fetch(GROUP, member, committed)


class OffsetsAsked(ForwardClient):
    """Node 1 leading "r": keeps the offset lookups asked of it (answered 4), and answers
    every records fetch with nothing."""

    def __init__(self) -> None:
        super().__init__(0)
        self.asked: list[str] = []

    async def forward(
        self,
        url: str,
        method: str,
        path_qs: str,
        headers: Mapping[str, str],
        body: bytes,
        waits_ms: int = 0,
    ) -> Answer:
        if "/offsets" in path_qs:
            self.asked.append(path_qs.partition("?")[2])
            return Answer(200, {}, orjson.dumps({"offset": 4}))
        request = session_wire.decode_request(body)
        parts = {key: session_wire.PartitionAnswer(9, 0) for key in request.partitions}
        answer = session_wire.SessionFetchAnswer(0, parts)
        return Answer(200, {}, b"".join(session_wire.encode_answer(answer)))


@pytest.mark.parametrize(
    ("isolation", "query"),
    [
        (Isolation.READ_COMMITTED, "timestamp=latest&isolation=read_committed"),
        (Isolation.READ_UNCOMMITTED, "timestamp=latest"),
    ],
)
async def test_a_reset_to_latest_asks_the_leader_at_the_fetchs_isolation(
    node: Node, isolation: Isolation, query: str
) -> None:
    """The leader's latest for a read_committed member is its last stable offset."""
    await led_by_node_1(node)
    forwarder = node.groups.member_fetch.forwarder = OffsetsAsked()
    node.groups.membership.join(
        GROUP, JoinRequest(("r",), 30_000, "latest", False, instance_id="z")
    )
    await node.groups.member_fetch.fetch(GROUP, "z", replace(NOW, isolation=isolation))
    assert forwarder.asked == [query]
