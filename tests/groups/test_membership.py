"""Membership driven directly, without HTTP: each join, leave or expired session is one
rebalance, a new generation in which every partition has one owner, and a partition a member
was delivered records of moves only once that member committed them."""

from __future__ import annotations

from groups.coordinator import JoinRequest
from replication.fetch_limits import FetchLimits
from tests.groups.conftest import GROUP, NOW, Node

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
