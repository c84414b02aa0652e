"""Committed offsets driven directly, without HTTP: a commit is refused outside the group's
generation and on a partition its member no longer owns (one being moved away is still its
own until its next fetch), is where a member starts, survives a new coordinator's replay of
the offsets partition and its members' expiry, and goes with tombstones when the group is
deleted or its offsets expire."""

from __future__ import annotations

import pytest

from engine import offsets_topic
from groups.coordinator import GroupCoordinator, JoinRequest
from groups.errors import GroupError
from tests.groups.conftest import (
    GROUP,
    NOW,
    TOPIC,
    TP,
    Node,
    member_at,
    offsets_of,
    run_out,
    until,
)

TOMBSTONES = [(["offset", GROUP, TOPIC, 0], None), (["group", GROUP], None)]


async def test_a_commit_from_a_stale_generation_is_refused(node: Node) -> None:
    await node.create_topic("u", 2)
    node.produce(3, ("u", 0))
    node.produce(3, ("u", 1))
    membership, offsets = node.groups.membership, node.groups.offsets
    group, a = membership.join(GROUP, JoinRequest(("u",), 30_000, "earliest", False))
    membership.join(GROUP, JoinRequest(("u",), 30_000, "earliest", False))
    [tp] = a.owned
    with pytest.raises(GroupError) as refused:
        offsets.commit(group, a, [(tp, 2, "")], group.generation - 1)
    assert refused.value.code == "STALE_GENERATION"
    assert tp not in group.offsets
    assert offsets.commit(group, a, [(tp, 2, "")], group.generation) == [(tp, 2)]
    assert group.offsets[tp].offset == 2


async def test_a_committed_offset_is_fetched_back_and_is_where_the_member_starts(
    node: Node,
) -> None:
    node.produce(5)
    group, member = node.groups.membership.join(
        GROUP, JoinRequest((TOPIC,), 30_000, "earliest", False)
    )
    assert node.groups.offsets.commit(group, member, [(TP, 3, "m")], None) == [(TP, 3)]
    [(_, committed)] = node.groups.committed(GROUP, member.member_id, [TP])
    assert committed is not None and (committed.offset, committed.metadata) == (3, "m")
    fetched = await node.groups.member_fetch.fetch(GROUP, member.member_id, NOW)
    assert fetched.records == [3, 4]  # not from the earliest offset


async def test_committed_offsets_survive_a_reload_from_the_offsets_partition(node: Node) -> None:
    member = await member_at(node, 5)
    generation = node.groups.groups[GROUP].generation
    # A new coordinator on this node (as after a restart) knows the group only from the log.
    fresh = GroupCoordinator(node.replicas, node.forwarder, 100, offsets_of)
    try:
        await fresh.role_changed(node.offsets)
        await fresh.loaded()
        [(_, committed)] = fresh.committed(GROUP, member, [TP])
        assert committed is not None and committed.offset == 5
        restored = fresh.groups[GROUP]
        assert restored.generation == generation
        assert restored.members[member].owned == {TP}
        node.produce(2)
        assert (await fresh.fetch(GROUP, member, NOW)).records == [5, 6]
    finally:
        fresh.close()


async def test_deleting_a_group_writes_tombstones_a_replay_obeys(node: Node) -> None:
    member = await member_at(node, 3)
    offsets = node.groups.offsets
    with pytest.raises(GroupError) as refused:
        offsets.delete(node.groups.groups[GROUP])
    assert refused.value.code == "GROUP_NOT_EMPTY"
    node.groups.membership.leave(GROUP, member)
    end = node.offsets.log_end_offset
    offsets.delete(node.groups.groups[GROUP])
    assert node.offsets_records(end) == TOMBSTONES
    assert GROUP not in node.groups.groups
    assert GROUP not in offsets_topic.replay([node.offsets])


async def test_offsets_past_their_retention_expire_with_tombstones(node: Node) -> None:
    member = await member_at(node, 3)
    offsets = node.groups.offsets
    committed_at = node.groups.groups[GROUP].offsets[TP].commit_timestamp
    assert offsets.expire(committed_at + 60_000, 5) == 0  # a group with members keeps them
    node.groups.membership.leave(GROUP, member)
    assert offsets.expire(committed_at + 5, 5) == 0  # not older than the retention yet
    end = node.offsets.log_end_offset
    assert offsets.expire(committed_at + 6, 5) == 1
    assert node.offsets_records(end) == TOMBSTONES
    assert GROUP not in node.groups.groups
    assert GROUP not in offsets_topic.replay([node.offsets])


async def test_a_commit_on_a_partition_being_moved_away_counts_until_its_owners_next_fetch(
    node: Node,
) -> None:
    """A commit racing a rebalance: the old owner of a partition moving away may still commit
    it (the usual commit-then-fetch loop loses no commit); its next fetch hands the partition
    over, the new owner starts at that commit, and a later commit of it by the old owner is
    refused."""
    await node.create_topic("u", 2)
    for p in (0, 1):
        node.produce(3, ("u", p))
    membership, fetch = node.groups.membership, node.groups.member_fetch.fetch
    subscriber = JoinRequest(("u",), 30_000, "earliest", False)
    group, a = membership.join(GROUP, subscriber)
    assert (await fetch(GROUP, a.member_id, NOW)).records == [0, 1, 2, 0, 1, 2]
    _, b = membership.join(GROUP, subscriber)
    [moved] = b.target
    [kept] = a.target
    assert (a.owned, b.owned, group.generation) == ({moved, kept}, set(), 2)
    # Being moved away, but a has not fetched since: its commit is accepted, in generation 2.
    assert node.groups.commit(GROUP, a.member_id, [(moved, 2, "")], 2) == [(moved, 2)]
    assert group.offsets[moved].offset == 2
    # a's next fetch gives the partition up; b starts at the commit.
    assert (await fetch(GROUP, a.member_id, NOW)).records == []
    assert (a.owned, b.owned, group.owners[moved]) == ({kept}, {moved}, b.member_id)
    assert (await fetch(GROUP, b.member_id, NOW)).records == [2]
    with pytest.raises(GroupError) as refused:
        node.groups.commit(GROUP, a.member_id, [(moved, 3, "")], 2)
    assert (refused.value.code, refused.value.extra) == (
        "PARTITION_NOT_ASSIGNED",
        {"topic": "u", "partition": moved[1], "generation": 2},
    )
    assert group.offsets[moved].offset == 2
    # Committing everything delivered now covers only what a owns.
    assert node.groups.commit(GROUP, a.member_id, None, None) == [(kept, 3)]
    assert group.offsets[moved].offset == 2


async def test_a_group_whose_members_expired_keeps_its_offsets_until_their_retention(
    node: Node,
) -> None:
    """Members whose sessions run out leave an empty group that still has its committed
    offsets (in the log too: a new coordinator restores them); offsets retention then expires
    them with tombstones and the group is forgotten."""
    first = await member_at(node, 3)
    group = node.groups.groups[GROUP]
    _, second = node.groups.membership.join(GROUP, JoinRequest((TOPIC,), 30_000, "earliest", False))
    committed_at = group.offsets[TP].commit_timestamp
    assert node.groups.expire_offsets(committed_at + 60_000, 5) == 0  # it has members
    for member in (group.members[first], second):
        run_out(node, group, member)
    await until(lambda: not group.members, "both sessions to run out")
    assert (group.state, group.offsets[TP].offset) == ("Empty", 3)
    assert node.groups.describe(GROUP)["state"] == "Empty"
    node.follower_fetched()
    [(name, stored)] = offsets_topic.replay([node.offsets]).items()
    assert name == GROUP and stored.offsets[TP].offset == 3
    assert stored.metadata is not None and stored.metadata["members"] == []
    assert node.groups.expire_offsets(committed_at + 5, 5) == 0  # not older than 5 ms yet
    end = node.offsets.log_end_offset
    assert node.groups.expire_offsets(committed_at + 6, 5) == 1
    assert node.offsets_records(end) == TOMBSTONES
    assert GROUP not in node.groups.groups
    with pytest.raises(GroupError) as unknown:
        node.groups.group(GROUP)
    assert unknown.value.code == "UNKNOWN_GROUP"
    assert GROUP not in offsets_topic.replay([node.offsets])
