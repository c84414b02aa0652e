"""A member's commits never go back within a generation across leadership changes: a commit
is answered only on a write the offsets partition's in-sync replicas took (never on a
coordinator's memory, which a node paused and deposed meanwhile still holds), a node that
keeps leading through a new epoch keeps its groups as they are, and a position past a new
leader's high watermark (which trails its log) waits there instead of starting over.

The node: see conftest.py."""

from __future__ import annotations

import pytest

from engine import batch as fmt
from engine.errors import EngineError
from groups.coordinator import JoinRequest
from replication.errors import RequestTimedOut
from replication.metadata import PartitionState, TopicSpec
from tests.groups.conftest import GROUP, NOW, TOPIC, TP, Node, member_at


async def test_a_deposed_coordinator_answers_no_commit_from_its_memory(node: Node) -> None:
    member = await member_at(node, 5)
    # Node 0 was paused; the controller gave the partition to node 1 (the member went on
    # there). Node 0 resumes and serves a commit queued meanwhile before it applies that view:
    # no await between the store's write and the commit, as on the paused node.
    await node.offsets_state(1, (1,))
    assert node.offsets.is_leader  # this node's view is the old one
    assert node.groups.commit(GROUP, member, None, None) == [(TP, 5)]
    # Its memory says 5 is committed, but it is no longer the coordinator: the answer must
    # wait for a write, which cannot commit (node 1 does not fetch from here) and fails once
    # the view is applied. Answered at once, 5 could go back past what node 1 answered.
    with pytest.raises(EngineError):
        await node.groups.durable(GROUP, 10_000)
    assert not node.offsets.is_leader


async def test_a_commit_is_answered_only_once_its_offsets_are_on_every_in_sync_replica(
    node: Node,
) -> None:
    member = await member_at(node, 5)
    node.produce(3)
    assert (await node.groups.fetch(GROUP, member, NOW)).records == [5, 6, 7]
    assert node.groups.commit(GROUP, member, None, None) == [(TP, 8)]
    with pytest.raises(RequestTimedOut):  # node 1 has not fetched it: not answered
        await node.groups.durable(GROUP, 0)
    # The same commit again: 8 is in this node's memory only, so it is written and waited
    # for again rather than answered from memory (a new leader would not know it).
    assert node.groups.commit(GROUP, member, None, None) == [(TP, 8)]
    with pytest.raises(RequestTimedOut):
        await node.groups.durable(GROUP, 0)
    node.follower_fetched()
    assert node.groups.commit(GROUP, member, None, None) == [(TP, 8)]
    node.follower_fetched()
    await node.groups.durable(GROUP, 0)


async def test_a_new_epoch_of_an_offsets_partition_led_here_keeps_its_groups(node: Node) -> None:
    member = await member_at(node, 5)
    node.produce(3)
    assert (await node.groups.fetch(GROUP, member, NOW)).records == [5, 6, 7]  # not committed
    group, epoch = node.groups.groups[GROUP], node.offsets.leader_epoch
    # Node 1 is lost: the controller drops it from the ISR with a new epoch, this node leading.
    await node.offsets_state(0, (0,))
    assert await node.replicas.applied(lambda: node.offsets.leader_epoch == epoch + 1, 10)
    await node.groups.loaded()
    assert node.groups.groups[GROUP] is group  # not replaced by a replay of the log
    node.produce(1)
    # The member goes on from where it was, not from its committed offset (5..7 again).
    assert (await node.groups.fetch(GROUP, member, NOW)).records == [8]
    assert node.groups.commit(GROUP, member, None, None) == [(TP, 9)]
    await node.groups.durable(GROUP, 1000)


async def test_a_committed_offset_past_a_new_leaders_high_watermark_is_waited_for(
    node: Node,
) -> None:
    # Topic u: node 1 leads it, node 0 follows with 8 records of which it knows 5 committed
    # (a follower learns the high watermark a fetch late), node 2 follows too.
    spec = TopicSpec("u", "c" * 32, 1, 3, {})
    await node.store.create_topic(node.fence, spec, [PartitionState(1, 1, (1, 0, 2), (1, 0, 2))])
    assert await node.replicas.applied(lambda: ("u", 0) in node.replicas.partitions, 10)
    follower = node.replicas.partitions[("u", 0)]
    batch = fmt.encode_batch([fmt.RecordInput(None, b"v", []) for _ in range(8)])
    fmt.set_leader_epoch(batch, 0, 1)
    follower.append_from_leader(bytes(batch), 5, 0)
    _, joined = node.groups.join(GROUP, JoinRequest(("u",), 30_000, "earliest", False))
    member = joined.member_id
    node.follower_fetched()
    await node.groups.durable(GROUP, 1000)
    # The member read all 8 through node 1 (as another coordinator would have) and committed.
    assert node.groups.commit(GROUP, member, [(("u", 0), 8, "")], None) == [(("u", 0), 8)]
    node.follower_fetched()
    await node.groups.durable(GROUP, 1000)
    # Node 1 is lost: node 0 leads u, its high watermark at 5 until node 2 fetches from it.
    state = node.store.view.partitions[("u", 0)]
    moved = PartitionState(0, 2, state.replicas, (0, 2), state.version)
    assert await node.store.set_partition("u", 0, moved, node.fence)
    assert await node.replicas.applied(lambda: follower.is_leader, 10)
    assert (follower.high_watermark, follower.log_end_offset) == (5, 8)
    # The committed offset is in the log, past what this leader knows committed: wait there
    # (as a partition fetch does), not start over from auto_offset_reset (earliest: 0, where
    # the batch, past the high watermark, cannot be read yet) and commit 0.
    assert (await node.groups.fetch(GROUP, member, NOW)).records == []
    assert node.groups.commit(GROUP, member, None, None) == [(("u", 0), 8)]


async def test_a_position_outside_the_log_is_reset_and_said(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    """Retention (here: the log emptied, starting again at 9) took the member's position
    away: it restarts where auto_offset_reset says, and the node logs the move (a position
    going back means records delivered again)."""
    member = await member_at(node, 3)
    leader = node.replicas.partitions[TP]
    leader.log.truncate_fully_and_start_at(9)
    caplog.set_level("INFO", logger="groups.coordinator")
    assert (await node.groups.fetch(GROUP, member, NOW)).records == []
    assert node.groups.commit(GROUP, member, None, None) == [(TP, 9)]
    assert f"member {member}: t-0 position 3 is outside the log (9..9); earliest: 9" in caplog.text


async def test_a_topic_moved_off_the_coordinators_node_keeps_its_committed_offsets(
    node: Node,
) -> None:
    """Schedule 12 of CI's campaign seed: moves took every replica of a topic off the node
    that coordinates a group on it. The node deletes its files of the topic, but the topic
    lives on elsewhere: the node reports no deletion to its listeners (the gateway passes
    deletions on to the groups, which write tombstones for the topic's offsets), and the
    committed offsets stay, in memory and in the offsets log."""
    member = await member_at(node, 3)
    told: list[set[str]] = []  # what the node says was deleted (the gateway tells the groups)
    node.replicas.add_topics_listener(told.append)
    end = node.offsets.log_end_offset
    state = node.store.view.partitions[TP]
    moved = PartitionState(1, state.leader_epoch + 1, (1,), (1,), state.version)
    assert await node.store.set_partition(TOPIC, 0, moved, node.fence)
    assert await node.replicas.applied(lambda: TP not in node.replicas.partitions, 5)
    assert told and not set().union(*told)
    assert node.offsets.log_end_offset == end  # no tombstone written
    [(_, committed)] = node.groups.committed(GROUP, member, [TP])
    assert committed is not None and committed.offset == 3
