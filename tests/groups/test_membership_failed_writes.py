"""A membership change whose record the offsets partition refuses changes nothing: the
group keeps its members, generation, assignor, targets, owners, positions and committed
offsets, exactly as a new coordinator replaying the log would find them, and the same
change tried again once the partition takes appends succeeds. The refusal is a real one: a
full disk under the offsets partition (ENOSPC from its writes; the partition stays online).
Changes no client retries (a session running out, a topic growing) are retried by the
coordinator itself."""

from __future__ import annotations

import asyncio
import errno
from dataclasses import replace
from typing import Any

import pytest

from engine.errors import InsufficientStorage
from groups.coordinator import JoinRequest
from groups.model import Group
from replication.metadata import PartitionState
from tests.faults import Disk
from tests.groups.conftest import GROUP, NOW, PARKED, WAIT_S, Node, run_out, until

TOPIC = "u"
OTHER = "w"


def subscriber(
    auto_commit: bool = False, instance_id: str | None = None, session_timeout_ms: int = 30_000
) -> JoinRequest:
    return JoinRequest(
        (TOPIC,), session_timeout_ms, "earliest", auto_commit, instance_id=instance_id
    )


@pytest.fixture
def disk(node: Node, monkeypatch: pytest.MonkeyPatch) -> Disk:
    """The disk under the offsets partition's log (`disk.fail` makes it full)."""
    return Disk(monkeypatch, node.offsets.log.directory)


def state_of(node: Node, name: str = GROUP) -> Any:
    """Everything of the group a change may touch, comparable (None: no such group)."""
    group = node.groups.groups.get(name)
    if group is None:
        return None
    members = [
        (
            m.member_id,
            m.topics,
            m.session_timeout_ms,
            m.auto_offset_reset,
            m.auto_commit,
            set(m.target),
            set(m.owned),
            dict(m.positions),
            m.fetch_turn,
            dict(m.instance),
            m.manual,
        )
        for m in group.members.values()
    ]
    return (
        group.generation,
        group.assignor,
        dict(group.partition_counts),
        dict(group.owners),
        dict(group.offsets),
        dict(group.unwritten),
        members,
    )


def refused(node: Node, disk: Disk) -> tuple[Any, int]:
    """Make the offsets partition's disk full; what the group is and where the log ends."""
    disk.fail("write", errno.ENOSPC)
    return state_of(node), node.offsets.log_end_offset


def unchanged(node: Node, before: tuple[Any, int]) -> None:
    assert state_of(node) == before[0]
    assert node.offsets.log_end_offset == before[1]  # nothing was appended


async def delivered(node: Node, group: Group, member_id: str) -> None:
    """Records on every partition the member owns, delivered to it (positions it holds)."""
    member = group.members[member_id]
    for tp in member.owned:
        node.produce(2, tp)
    fetched = await node.groups.member_fetch.fetch(GROUP, member_id, NOW)
    assert len(fetched.records) == 2 * len(member.owned)


async def test_a_refused_join_leaves_the_group_as_it_was_and_a_retry_joins(
    node: Node, disk: Disk
) -> None:
    await node.create_topic(TOPIC, 2)
    membership = node.groups.membership
    group, a = membership.join(GROUP, subscriber())
    await delivered(node, group, a.member_id)
    before = refused(node, disk)
    with pytest.raises(InsufficientStorage):
        membership.join(GROUP, subscriber())
    unchanged(node, before)
    assert group.state == "Stable"
    disk.heal()
    _, b = membership.join(GROUP, subscriber())
    assert (group.generation, list(group.members)) == (2, [a.member_id, b.member_id])
    [(key, metadata)] = node.offsets_records(before[1])
    assert (key, metadata["generation"]) == (["group", GROUP], 2)


async def test_a_refused_first_join_leaves_no_group(node: Node, disk: Disk) -> None:
    await node.create_topic(TOPIC, 2)
    before = refused(node, disk)
    assert before[0] is None
    with pytest.raises(InsufficientStorage):
        node.groups.join(GROUP, subscriber())
    unchanged(node, before)
    disk.heal()
    group, member = node.groups.join(GROUP, subscriber())
    assert (group.generation, list(group.members)) == (1, [member.member_id])


async def test_a_refused_static_rejoin_keeps_the_running_process_its_member(
    node: Node, disk: Disk
) -> None:
    """The restarted process's join failed: the member stays the running process's, with its
    settings and positions, and that process's parked fetch goes on (it is answered records,
    not the empty answer a replaced process gets)."""
    await node.create_topic(TOPIC, 1)
    membership, fetch = node.groups.membership, node.groups.member_fetch.fetch
    group, member = membership.join(GROUP, subscriber(instance_id="s"))
    await delivered(node, group, "s")
    parked = asyncio.ensure_future(fetch(GROUP, "s", PARKED))
    await until(lambda: member.wake is not None, "the running process's fetch to park")
    before = refused(node, disk)
    with pytest.raises(InsufficientStorage):
        membership.join(GROUP, subscriber(instance_id="s", session_timeout_ms=10_000))
    unchanged(node, before)
    node.produce(1, (TOPIC, 0))
    answered = await asyncio.wait_for(parked, WAIT_S)
    assert answered.records == [2]
    disk.heal()
    again, restarted = membership.join(
        GROUP, subscriber(instance_id="s", session_timeout_ms=10_000)
    )
    assert (again, restarted, restarted.session_timeout_ms) == (group, member, 10_000)
    assert (await fetch(GROUP, "s", NOW)).records == [0, 1, 2]  # nothing was committed


async def test_a_refused_leave_keeps_the_member_and_commits_nothing(node: Node, disk: Disk) -> None:
    """An auto-committing member leaving commits what it was delivered with the group's
    record, in one append: refused, neither happened; retried, both did."""
    await node.create_topic(TOPIC, 2)
    membership = node.groups.membership
    group, a = membership.join(GROUP, subscriber(auto_commit=True))
    _, b = membership.join(GROUP, subscriber(auto_commit=True))
    await delivered(node, group, a.member_id)
    owned = set(a.owned)
    before = refused(node, disk)
    with pytest.raises(InsufficientStorage):
        membership.leave(GROUP, a.member_id)
    unchanged(node, before)
    assert group.offsets == {}
    disk.heal()
    membership.leave(GROUP, a.member_id)
    assert (group.generation, list(group.members)) == (3, [b.member_id])
    assert {tp: c.offset for tp, c in group.offsets.items()} == {tp: 2 for tp in owned}
    written = node.offsets_records(before[1])
    assert [key[0] for key, _ in written] == ["offset", "group"]
    assert written[-1][1]["generation"] == 3


async def test_a_session_running_out_while_its_removal_is_refused_is_retried(
    node: Node, disk: Disk
) -> None:
    await node.create_topic(TOPIC, 2)
    membership = node.groups.membership
    group, a = membership.join(GROUP, subscriber())
    _, b = membership.join(GROUP, subscriber())
    run_out(node, group, a)  # its timer fires at the loop's next turn
    before = refused(node, disk)
    timer = a.expiry
    await until(lambda: a.expiry is not timer, "a's session timer to fire")
    unchanged(node, before)
    assert a.expiry is not None  # the removal is tried again
    disk.heal()
    await until(lambda: a.member_id not in group.members, "the removal tried again")
    assert (group.generation, b.owned) == (3, {(TOPIC, 0), (TOPIC, 1)})
    [(_, metadata)] = node.offsets_records(before[1])
    assert [m["member_id"] for m in metadata["members"]] == [b.member_id]


async def test_a_refused_rebalance_for_a_grown_topic_is_retried(node: Node, disk: Disk) -> None:
    await node.create_topic(TOPIC, 1)
    group, member = node.groups.join(GROUP, subscriber())
    spec = node.store.view.topics[TOPIC]
    grown = replace(spec, partitions=2)
    assert await node.store.update_topic(node.fence, grown, {1: PartitionState(0, 1, (0,), (0,))})
    assert await node.replicas.applied(lambda: (TOPIC, 1) in node.replicas.partitions, WAIT_S)
    before = refused(node, disk)
    node.groups.topics_changed()
    unchanged(node, before)
    disk.heal()
    await until(lambda: group.generation == 2, "the rebalance tried again")
    assert member.owned == {(TOPIC, 0), (TOPIC, 1)}
    assert group.partition_counts == {TOPIC: 2}


async def test_a_refused_subscribe_keeps_the_topics_and_commits_nothing(
    node: Node, disk: Disk
) -> None:
    await node.create_topic(TOPIC, 1)
    await node.create_topic(OTHER, 1)
    group, member = node.groups.join(GROUP, subscriber(auto_commit=True, instance_id="s"))
    await delivered(node, group, "s")
    before = refused(node, disk)
    with pytest.raises(InsufficientStorage):
        node.groups.subscribe(GROUP, "s", (OTHER,), {"format": "json"})
    unchanged(node, before)
    disk.heal()
    node.groups.subscribe(GROUP, "s", (OTHER,), {"format": "json"})
    assert (member.topics, member.owned, member.instance) == (
        (OTHER,),
        {(OTHER, 0)},
        {"format": "json"},
    )
    assert group.offsets[(TOPIC, 0)].offset == 2


async def test_a_refused_assign_keeps_the_partitions(node: Node, disk: Disk) -> None:
    await node.create_topic(TOPIC, 2)
    _, member = node.groups.join(GROUP, JoinRequest((), 30_000, "earliest", False))
    node.groups.assign(GROUP, member.member_id, ((TOPIC, 0),))
    before = refused(node, disk)
    with pytest.raises(InsufficientStorage):
        node.groups.assign(GROUP, member.member_id, ((TOPIC, 1),))
    unchanged(node, before)
    disk.heal()
    node.groups.assign(GROUP, member.member_id, ((TOPIC, 1),))
    assert (member.owned, member.manual) == ({(TOPIC, 1)}, True)


async def test_a_consumer_instance_is_created_with_one_record_or_not_at_all(
    node: Node, disk: Disk
) -> None:
    await node.create_topic(TOPIC, 1)
    request = JoinRequest((), 30_000, "earliest", True, instance_id="i")
    before = refused(node, disk)
    with pytest.raises(InsufficientStorage):
        node.groups.create_instance(GROUP, request, {"format": "binary"})
    unchanged(node, before)
    disk.heal()
    _, member = node.groups.create_instance(GROUP, request, {"format": "binary"})
    assert member.instance == {"format": "binary"}
    [(_, metadata)] = node.offsets_records(before[1])
    assert metadata["members"][0]["instance"] == {"format": "binary"}


async def test_auto_commits_whose_write_is_refused_stay_held_and_are_written_later(
    node: Node, disk: Disk
) -> None:
    await node.create_topic(TOPIC, 1)
    group, member = node.groups.join(GROUP, subscriber(auto_commit=True))
    await delivered(node, group, member.member_id)
    end = node.offsets.log_end_offset
    disk.fail("write", errno.ENOSPC)
    await node.groups.member_fetch.fetch(GROUP, member.member_id, NOW)  # commits the 2
    timer = group.write_timer
    assert timer is not None and set(group.unwritten) == {(TOPIC, 0)}
    await until(lambda: group.write_timer is not timer, "the auto-commits' write")
    assert set(group.unwritten) == {(TOPIC, 0)}  # held, and tried again
    disk.heal()
    await until(lambda: not group.unwritten, "the auto-commits' write tried again")
    [(key, value)] = node.offsets_records(end)
    assert (key, value["offset"]) == (["offset", GROUP, TOPIC, 0], 2)
