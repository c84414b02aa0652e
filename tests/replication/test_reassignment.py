"""Reassignment's decisions as plain functions (replication.reassignment), the leader's follower
set across a move (LeaderState.set_replicas) and the throttle's byte budget."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.errors import UnknownPartition, UnknownTopic
from replication import reassignment
from replication.errors import InvalidReassignment, NoReassignmentInProgress, ReassignmentInProgress
from replication.metadata import ClusterView, NodeInfo, PartitionState, TopicSpec
from replication.reassignment_throttle import ByteRate, ReassignmentThrottle
from replication.replica_state import LeaderState

ALL = frozenset({1, 2, 3, 4})


def view(state: PartitionState, live: frozenset[int] = ALL) -> ClusterView:
    return ClusterView(
        cluster_id="c",
        controller=1,
        nodes={n: NodeInfo(n, f"http://n{n}") for n in (1, 2, 3, 4, 5)},
        live=live,
        topics={"t": TopicSpec("t", "id", 1, 3, {})},
        partitions={("t", 0): state},
    )


STABLE = PartitionState(leader=1, leader_epoch=4, replicas=(1, 2, 3), isr=(1, 2, 3))


def test_start_keeps_the_target_first_then_the_replicas_leaving() -> None:
    moving = reassignment.start(STABLE, (4, 2, 3))
    assert moving is not None
    assert moving.replicas == (4, 2, 3, 1)
    assert (moving.adding, moving.removing) == ((4,), (1,))
    assert moving.target_replicas == (4, 2, 3)
    assert moving.original_replicas == (1, 2, 3)  # in its order: a cancel restores it
    assert (moving.leader, moving.leader_epoch, moving.isr) == (1, 4, (1, 2, 3))


def test_start_of_a_reorder_is_the_new_list_at_once_and_of_the_same_list_nothing() -> None:
    assert reassignment.start(STABLE, (1, 2, 3)) is None
    reordered = reassignment.start(STABLE, (3, 1, 2))
    assert reordered is not None and reordered.replicas == (3, 1, 2)
    assert not reordered.reassigning


def test_completion_waits_for_every_added_replica_in_the_isr() -> None:
    moving = reassignment.start(STABLE, (4, 5, 3))
    assert moving is not None
    assert reassignment.complete(moving, ALL | {5}) is None
    half = PartitionState(1, 4, moving.replicas, (1, 2, 3, 4), adding=(4, 5), removing=(1, 2))
    assert reassignment.complete(half, ALL | {5}) is None
    full = PartitionState(1, 4, moving.replicas, (1, 2, 3, 4, 5), adding=(4, 5), removing=(1, 2))
    done = reassignment.complete(full, ALL | {5})
    assert done is not None
    # the leader is removed: the first target replica in sync leads, in a new epoch
    assert (done.leader, done.leader_epoch) == (4, 5)
    assert (done.replicas, done.isr, done.adding, done.removing) == ((4, 5, 3), (3, 4, 5), (), ())


def test_a_shrink_waits_for_every_replica_it_keeps_to_be_in_sync() -> None:
    """Dropping an in-sync replica while a kept one is out of sync would leave the leader the
    only copy of what acks=all acknowledged: the move waits until the kept one is back."""
    shrink = reassignment.start(PartitionState(1, 2, (1, 2, 0), (1, 2)), (1, 0))
    assert shrink is not None and (shrink.adding, shrink.removing) == ((), (2,))
    assert reassignment.complete(shrink, ALL | {0}) is None
    back = replace(shrink, isr=(1, 2, 0))  # node 0 caught up and rejoined
    done = reassignment.complete(back, ALL | {0})
    assert done is not None and (done.replicas, done.isr) == ((1, 0), (1, 0))


def test_completion_keeps_a_leader_that_stays_and_skips_unavailable_candidates() -> None:
    state = PartitionState(2, 7, (2, 4, 1), (1, 2, 4), adding=(4,), removing=(1,))
    done = reassignment.complete(state, ALL)
    assert done is not None and (done.leader, done.isr) == (2, (2, 4))
    gone = PartitionState(1, 7, (4, 2, 1), (1, 2, 4), adding=(4,), removing=(1,))
    done = reassignment.complete(gone, frozenset({1, 2}))  # 4 not live: 2 leads
    assert done is not None and done.leader == 2
    assert reassignment.complete(gone, frozenset({1})) is None  # no target replica can lead


def test_cancel_goes_back_to_the_original_replicas_in_a_new_epoch() -> None:
    moving = PartitionState(1, 4, (4, 2, 3, 1), (1, 2, 3, 4), adding=(4,), removing=(1,))
    back = reassignment.cancel("t-0", moving, ALL)
    assert (back.replicas, back.isr, back.leader, back.leader_epoch) == ((2, 3, 1), (1, 2, 3), 1, 5)
    assert not back.reassigning
    led_by_new = PartitionState(4, 6, (4, 2, 3, 1), (2, 4), adding=(4,), removing=(1,))
    back = reassignment.cancel("t-0", led_by_new, ALL)
    assert (back.leader, back.isr) == (2, (2,))


def test_cancel_is_refused_when_it_would_lose_records_or_nothing_moves() -> None:
    only_new = PartitionState(4, 6, (4, 1), (4,), adding=(4,), removing=(1,))
    with pytest.raises(ReassignmentInProgress, match="let the move complete"):
        reassignment.cancel("t-0", only_new, ALL)
    with pytest.raises(NoReassignmentInProgress):
        reassignment.cancel("t-0", STABLE, ALL)


@pytest.mark.parametrize(
    ("replicas", "error", "words"),
    [
        ([], InvalidReassignment, "empty"),
        ([1, 1], InvalidReassignment, "repeats"),
        ([1, 9], InvalidReassignment, "no node"),
        ([1, "2"], InvalidReassignment, "integers"),
        ([1, True], InvalidReassignment, "integers"),
        ([1, 5], InvalidReassignment, "not live"),
    ],
)
def test_a_plan_is_checked_before_anything_starts(
    replicas: list[object], error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=words):
        reassignment.check_plan(view(STABLE), [(("t", 0), replicas)])


def test_a_plan_names_existing_partitions_once_that_are_not_moving() -> None:
    with pytest.raises(UnknownTopic):
        reassignment.check_plan(view(STABLE), [(("u", 0), [1])])
    with pytest.raises(UnknownPartition):
        reassignment.check_plan(view(STABLE), [(("t", 1), [1])])
    with pytest.raises(InvalidReassignment, match="twice"):
        reassignment.check_plan(view(STABLE), [(("t", 0), [1]), (("t", 0), [2])])
    moving = PartitionState(1, 4, (4, 2, 3, 1), (1, 2, 3), adding=(4,), removing=(1,))
    with pytest.raises(ReassignmentInProgress):
        reassignment.check_plan(view(moving), [(("t", 0), [1, 2, 3])])
    # a dead node may stay in the list (moving off it is what the plan is for)
    dead = view(STABLE, live=frozenset({1, 2, 4}))
    assert reassignment.check_plan(dead, [(("t", 0), [1, 2, 4])]) == {("t", 0): (1, 2, 4)}


@given(
    original=st.lists(st.integers(1, 6), min_size=1, max_size=4, unique=True),
    target=st.lists(st.integers(1, 6), min_size=1, max_size=4, unique=True),
)
def test_a_started_move_knows_both_ends_and_completes_onto_the_target(
    original: list[int], target: list[int]
) -> None:
    state = PartitionState(original[0], 0, tuple(original), tuple(original))
    moving = reassignment.start(state, tuple(target))
    if moving is None:
        assert tuple(target) == tuple(original)
        return
    assert moving.target_replicas == tuple(target)
    assert set(moving.original_replicas) == set(original)
    caught_up = PartitionState(
        moving.leader, 0, moving.replicas, moving.replicas, adding=moving.adding,
        removing=moving.removing, original=moving.original,
    )  # fmt: skip
    done = reassignment.complete(caught_up, frozenset(range(1, 7)))
    if moving.reassigning:
        assert done is not None
        assert done.replicas == tuple(target) and set(done.isr) == set(target)
        assert done.leader in target and done.leader_epoch == 1
        back = reassignment.cancel("t-0", caught_up, frozenset(range(1, 7)))
        assert back.replicas == tuple(original) and not back.reassigning
    else:
        assert done is None and moving.replicas == tuple(target)


def test_the_leader_tracks_followers_a_move_adds_and_forgets_those_it_drops() -> None:
    state = LeaderState(1, 3, (1, 2), (1, 2), epoch_start_offset=10, high_watermark=10, now_ms=0)
    state.on_follower_fetch(2, 10, 10, now_ms=5)
    state.set_replicas((1, 2, 4))
    assert set(state.followers) == {2, 4}
    assert state.followers[2].log_end_offset == 10  # kept
    state.on_follower_fetch(4, 10, 10, now_ms=6)
    assert state.expand_proposal(4, 10) == (1, 2, 4)
    with pytest.raises(ValueError, match="must hold the ISR"):
        state.set_replicas((1, 4))


def test_the_throttle_spends_bytes_at_its_rate_and_lets_a_batch_overdraw() -> None:
    bucket = ByteRate(1000, now=0.0)
    assert bucket.available(0.0) == 100  # a tenth of a second's worth
    bucket.spend(600)  # one batch may be larger than the budget
    assert bucket.available(0.0) == 0
    assert bucket.wait_s(0.0) == pytest.approx(0.501)
    assert bucket.available(0.55) == 50
    assert bucket.available(10.0) == 100  # the budget does not grow while idle


def test_the_throttle_follows_the_clusters_setting() -> None:
    throttle = ReassignmentThrottle()
    assert throttle.configure(None, 0.0) is None
    first = throttle.configure(1000, 0.0)
    assert first is not None and throttle.configure(1000, 1.0) is first
    slower = throttle.configure(10, 2.0)
    assert slower is first and slower.rate == 10 and slower.available(2.0) == 1
    assert throttle.configure(None, 3.0) is None


# -- a replica restarted since its in-sync place was stored (KIP-903) --------------------------


def test_no_move_carries_an_in_sync_place_past_a_restart() -> None:
    """A restarted process may have lost what it had not flushed: a move's write must not
    store its ISR place again under a newer version, which would make it look in sync."""
    stored = replace(STABLE, version=100)
    restarted = view(stored)
    restarted = replace(restarted, registered={1: 50, 2: 50, 3: 120})
    with pytest.raises(ReassignmentInProgress, match=r"nodes \[3\] restarted"):
        reassignment.check_plan(restarted, [(("t", 0), [1, 2, 4])])
    # decided on a view that saw the restart only after the plan was checked
    moving = reassignment.start(stored, (1, 2, 4), frozenset({3}))
    assert moving is not None and moving.isr == (1, 2)
    assert reassignment.start(stored, (2, 3, 4), frozenset({1})) is None  # its leader: elect
    caught_up = replace(moving, isr=(1, 2, 4, 3))
    assert reassignment.complete(caught_up, ALL, frozenset({3})) is None
    assert reassignment.complete(caught_up, ALL) is not None
    back = reassignment.cancel("t-0", caught_up, ALL, frozenset({2}))
    assert back.isr == (1, 3)
