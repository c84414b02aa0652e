"""Membership driven directly, without HTTP: each join, leave or expired session is one
rebalance, a new generation in which every partition has one owner, and a partition a member
was delivered records of moves only once that member committed them, or once its session
ran out; a static member joining again while its session lives is the same member restarted."""

from __future__ import annotations

import asyncio

from groups.coordinator import JoinRequest
from replication.fetch_limits import FetchLimits
from tests.groups.conftest import GROUP, NOW, PARKED, Node, run_out, until

TOPIC = "u"
BOTH = {(TOPIC, 0), (TOPIC, 1)}


def subscriber(session_timeout_ms: int = 30_000, auto_commit: bool = False) -> JoinRequest:
    return JoinRequest((TOPIC,), session_timeout_ms, "earliest", auto_commit)


async def test_a_second_member_joining_makes_one_rebalance_to_disjoint_assignments(
    node: Node,
) -> None:
    await node.create_topic(TOPIC, 2)
    membership = node.groups.membership
    group, a = membership.join(GROUP, subscriber())
    assert (group.generation, a.owned) == (1, BOTH)
    end = node.offsets.log_end_offset
    _, b = membership.join(GROUP, subscriber())
    assert group.generation == 2  # one rebalance for the join
    assert a.target and b.target and not a.target & b.target
    assert a.target | b.target == BOTH
    # Nothing was delivered yet, so nothing is at stake: both own their targets at once.
    assert (a.owned, b.owned, group.state) == (a.target, b.target, "Stable")
    answers = [await node.groups.member_fetch.fetch(GROUP, m.member_id, NOW) for m in (a, b)]
    assert [answer.generation for answer in answers] == [2, 2]
    assert [answer.assignment for answer in answers] == [a.assignment(), b.assignment()]
    # The generation is written before it is answered: a new coordinator restores it.
    [(key, metadata)] = node.offsets_records(end)
    assert key == ["group", GROUP] and metadata["generation"] == 2
    assert {m["member_id"] for m in metadata["members"]} == {a.member_id, b.member_id}


async def test_a_member_leaving_rebalances_the_others_in_a_new_generation(node: Node) -> None:
    await node.create_topic(TOPIC, 2)
    membership = node.groups.membership
    group, a = membership.join(GROUP, subscriber())
    _, b = membership.join(GROUP, subscriber())
    membership.leave(GROUP, a.member_id)
    assert group.generation == 3
    assert list(group.members) == [b.member_id]
    assert b.target == b.owned == BOTH


async def test_a_member_whose_session_runs_out_is_removed_in_a_new_generation(
    node: Node,
) -> None:
    await node.create_topic(TOPIC, 2)
    membership = node.groups.membership
    group, b = membership.join(GROUP, subscriber())
    _, a = membership.join(GROUP, subscriber(session_timeout_ms=1))  # never renewed
    assert group.generation == 2
    [left] = a.owned
    node.produce(1, left)
    # b's fetch waits on its own, empty, partition: it reads a's only once a's session ran
    # out and a rebalance gave b that partition (the fetch, woken, is the event awaited).
    wait = FetchLimits(max_records=100, max_bytes=1 << 20, min_bytes=1, timeout_ms=10_000)
    fetched = await node.groups.member_fetch.fetch(GROUP, b.member_id, wait)
    assert (fetched.records, fetched.generation) == ([0], 3)
    assert list(group.members) == [b.member_id]


async def test_a_moved_partition_reaches_its_new_owner_after_the_old_one_committed_it(
    node: Node,
) -> None:
    await node.create_topic(TOPIC, 2)
    for p in (0, 1):
        node.produce(2, (TOPIC, p))
    membership, fetch = node.groups.membership, node.groups.member_fetch.fetch
    group, a = membership.join(GROUP, subscriber(auto_commit=True))
    assert (await fetch(GROUP, a.member_id, NOW)).records == [0, 1, 0, 1]
    _, b = membership.join(GROUP, subscriber(auto_commit=True))
    [moved] = b.target
    # a was delivered records of it that it has not committed: it keeps it for now.
    assert (b.owned, group.state) == (set(), "Rebalancing")
    # a's next fetch auto-commits what it was delivered, then gives the partition up.
    assert (await fetch(GROUP, a.member_id, NOW)).records == []
    assert group.offsets[moved].offset == 2
    assert (b.owned, group.state) == ({moved}, "Stable")
    # b starts from the committed offset: nothing is delivered twice.
    assert (await fetch(GROUP, b.member_id, NOW)).records == []


async def test_a_partition_whose_old_owner_never_fetches_again_moves_when_it_expires(
    node: Node,
) -> None:
    """Cooperative hand-over with an owner that never confirms: it was delivered records it
    did not commit, so the partition stays with it (the new owner waits, owning nothing)
    until its session runs out; then it moves, and the new owner starts from the committed
    offset, the uncommitted records delivered again."""
    await node.create_topic(TOPIC, 2)
    for p in (0, 1):
        node.produce(3, (TOPIC, p))
    membership, fetch = node.groups.membership, node.groups.member_fetch.fetch
    group, a = membership.join(GROUP, subscriber())
    assert (await fetch(GROUP, a.member_id, NOW)).records == [0, 1, 2, 0, 1, 2]
    ones = [((TOPIC, p), 1, "") for p in (0, 1)]
    assert node.groups.commit(GROUP, a.member_id, ones, None) == [(tp, 1) for tp, _, _ in ones]
    _, b = membership.join(GROUP, subscriber())
    [moved] = b.target
    assert (group.generation, a.owned, b.owned, group.state) == (2, BOTH, set(), "Rebalancing")
    assert group.owners[moved] == a.member_id
    # b fetches meanwhile: nothing, and the partition stays with a.
    assert (await fetch(GROUP, b.member_id, NOW)).records == []
    assert (b.owned, group.owners[moved]) == (set(), a.member_id)
    waiting = asyncio.ensure_future(fetch(GROUP, b.member_id, PARKED))
    await until(lambda: b.wake is not None, "b's fetch to park")
    assert not waiting.done()
    run_out(node, group, a)
    fetched = await waiting
    # a is gone (a new generation gives b both partitions), each read from its commit, 1.
    assert (fetched.records, fetched.generation) == ([1, 2, 1, 2], 3)
    assert list(group.members) == [b.member_id]
    assert (b.owned, group.state) == (BOTH, "Stable")
    assert {tp: c.offset for tp, c in group.offsets.items()} == dict.fromkeys(BOTH, 1)


async def test_a_static_member_joining_again_while_its_session_lives_replaces_itself(
    node: Node,
) -> None:
    """The same instance_id joining while the previous process's session still runs is that
    client restarted: no rebalance (same generation, same partitions, the other member
    untouched), the old process's parked fetch answers empty, and reading restarts from the
    committed offset."""
    await node.create_topic(TOPIC, 2)
    for p in (0, 1):
        node.produce(3, (TOPIC, p))
    membership, fetch = node.groups.membership, node.groups.member_fetch.fetch

    def static(instance_id: str) -> JoinRequest:
        return JoinRequest((TOPIC,), 30_000, "earliest", False, instance_id=instance_id)

    group, one = membership.join(GROUP, static("one"))
    _, two = membership.join(GROUP, static("two"))
    [mine] = one.owned
    assert (group.generation, one.target, two.owned) == (2, {mine}, BOTH - {mine})
    assert (await fetch(GROUP, "one", NOW)).records == [0, 1, 2]
    assert node.groups.commit(GROUP, "one", [(mine, 1, "")], None) == [(mine, 1)]
    old_process = asyncio.ensure_future(fetch(GROUP, "one", PARKED))
    await until(lambda: one.wake is not None, "the old process's fetch to park")
    end = node.offsets.log_end_offset
    again, restarted = membership.join(GROUP, static("one"))
    assert again is group and restarted is one  # the same member, not a second one
    answered = await old_process
    assert (answered.records, answered.generation) == ([], 2)
    assert (group.generation, list(group.members)) == (2, ["one", "two"])
    assert (one.owned, two.owned, group.state) == ({mine}, BOTH - {mine}, "Stable")
    # The rejoin is written as the group's record, in the same generation.
    [(key, metadata)] = node.offsets_records(end)
    assert (key, metadata["generation"]) == (["group", GROUP], 2)
    assert (await fetch(GROUP, "one", NOW)).records == [1, 2]  # from the commit, again
