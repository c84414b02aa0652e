"""Partition reassignment (Kafka's KIP-455) as plain functions of a partition's state: check a
plan, start a move, complete it once the new replicas are in sync, cancel it. The controller
stores each step as one guarded write; nothing here does I/O.

A move keeps `replicas` as the target followed by the replicas being removed (Kafka's order),
with `adding`, `removing` and the `original` list beside them, so that a controller taking over
mid-move knows both ends, and a cancellation restores the original order (its preferred
leader), which Kafka's `replicas - adding` does not."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from engine.errors import UnknownPartition, UnknownTopic
from replication.errors import (
    InvalidReassignment,
    NoReassignmentInProgress,
    ReassignmentInProgress,
)
from replication.metadata import NO_LEADER, ClusterView, PartitionState, TopicPartition


def check_plan(
    view: ClusterView, plan: Sequence[tuple[TopicPartition, Sequence[object]]]
) -> dict[TopicPartition, tuple[int, ...]]:
    """The plan's target replica lists, each checked against the view: an existing partition
    named once, not moving already, not waiting for the controller to elect past a restarted
    in-sync replica, a non-empty list of distinct live nodes. Raises on the first fault, naming
    it, so that nothing of a faulty plan starts."""
    targets: dict[TopicPartition, tuple[int, ...]] = {}
    for (topic, partition), replicas in plan:
        name = f"{topic}-{partition}"
        if topic not in view.topics:
            raise UnknownTopic(f"topic {topic!r} does not exist")
        state = view.partition(topic, partition)
        if state is None:
            raise UnknownPartition(f"partition {name} does not exist")
        if (topic, partition) in targets:
            raise InvalidReassignment(f"the plan names {name} twice")
        if not replicas:
            raise InvalidReassignment(f"{name}: the replica list is empty")
        if any(isinstance(r, bool) or not isinstance(r, int) for r in replicas):
            raise InvalidReassignment(f"{name}: replicas must be node ids (integers)")
        nodes = tuple(r for r in replicas if isinstance(r, int))
        if len(set(nodes)) != len(nodes):
            raise InvalidReassignment(f"{name}: the replica list {list(nodes)} repeats a node")
        unknown = sorted(set(nodes) - set(view.nodes))
        if unknown:
            raise InvalidReassignment(f"{name}: no node {unknown} is known to the cluster")
        dead = sorted(set(nodes) - view.live - set(state.replicas))
        if dead:
            raise InvalidReassignment(f"{name}: nodes {dead} are not live; they could not copy")
        if state.reassigning:
            raise ReassignmentInProgress(
                f"{name} is already moving to {list(state.target_replicas)}; cancel it first"
            )
        restarted = sorted(view.restarted(state))
        if restarted:
            # A write now would carry their in-sync places past their restart (KIP-903).
            raise ReassignmentInProgress(
                f"{name}: nodes {restarted} restarted since its in-sync replicas were stored; "
                "the controller elects past them first, try again"
            )
        targets[(topic, partition)] = nodes
    return targets


def start(
    state: PartitionState, target: tuple[int, ...], restarted: frozenset[int] = frozenset()
) -> PartitionState | None:
    """The state that starts moving the partition to `target`, or None if it is there already
    or its leader is `restarted` (started after the state was stored: the controller's election
    comes first). A new order of the same replicas needs no copy: it is stored as the new list
    at once. Restarted followers leave the ISR with the write (KIP-903)."""
    original = state.replicas
    if target == original or state.leader in restarted:
        return None
    isr = tuple(r for r in state.isr if r not in restarted)
    adding = tuple(r for r in target if r not in original)
    removing = tuple(r for r in original if r not in target)
    if not adding and not removing:
        return replace(state, replicas=target, isr=isr)
    return replace(
        state,
        replicas=target + removing,
        isr=isr,
        adding=adding,
        removing=removing,
        original=original,
    )


def complete(
    state: PartitionState, in_sync: frozenset[int], restarted: frozenset[int] = frozenset()
) -> PartitionState | None:
    """The state that ends the partition's move, once every target replica is in the ISR (the
    added ones caught up, and the ones that stay too: a shrink must not cut the ISR to fewer
    in-sync copies than it had, KIP-455's rule): the target replicas alone, led by the leader
    if it stays, else by the first target replica in `in_sync` (live, its log online, not
    restarted since), in a new leader epoch (the removed replicas are fenced). None while the
    move must wait, also while an ISR member is `restarted` (started after the state was
    stored): the controller's election drops it first, as the new state would carry its
    in-sync place past its restart (KIP-903)."""
    target = state.target_replicas
    if not state.reassigning or restarted or any(r not in state.isr for r in target):
        return None
    isr = tuple(r for r in state.isr if r in target)
    leader = state.leader
    if leader not in target or leader not in in_sync:
        candidate = next((r for r in target if r in isr and r in in_sync), None)
        if candidate is None:
            return None
        leader = candidate
    return replace(
        state,
        leader=leader,
        leader_epoch=state.leader_epoch + 1,
        replicas=target,
        isr=isr,
        adding=(),
        removing=(),
        original=(),
    )


def cancel(
    name: str,
    state: PartitionState,
    in_sync: frozenset[int],
    restarted: frozenset[int] = frozenset(),
) -> PartitionState:
    """The state that puts a moving partition back on its original replicas, in a new leader
    epoch; the added replicas drop out, and so do the ISR members `restarted` since the state
    was stored (KIP-903). Refused when no original replica is in the ISR (their records would
    be lost) or none could lead."""
    if not state.reassigning:
        raise NoReassignmentInProgress(f"{name} is not moving")
    original = state.original_replicas
    isr = tuple(r for r in state.isr if r in original and r not in restarted)
    leader = state.leader
    if leader not in original or (leader != NO_LEADER and leader not in in_sync):
        leader = next((r for r in original if r in isr and r in in_sync), NO_LEADER)
    if not isr or (leader == NO_LEADER and state.leader != NO_LEADER):
        raise ReassignmentInProgress(
            f"{name} cannot go back to {list(original)}: none of them is in sync to lead "
            f"(ISR {list(state.isr)}); let the move complete"
        )
    return replace(
        state,
        leader=leader,
        leader_epoch=state.leader_epoch + 1,
        replicas=original,
        isr=isr,
        adding=(),
        removing=(),
        original=(),
    )


def moving(view: ClusterView) -> Mapping[TopicPartition, PartitionState]:
    """The partitions with a move in progress."""
    return {key: state for key, state in view.partitions.items() if state.reassigning}
