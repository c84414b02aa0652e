"""Kafka's controlled shutdown, as plain functions of the metadata: what the controller decides
for a partition while one of its replicas' nodes shuts down, and what that node waits for.

A node about to stop marks itself shutting down in the store (`ClusterView.shutting_down`).
The controller then moves each leadership it holds to another in-sync replica and drops it from
the ISRs, as long as another in-sync replica remains; no leader lets it back into an ISR. The
node waits until its view shows nothing left to hand over, then drains and leaves: its
producers and consumers were already served elsewhere. A partition whose only in-sync replicas
are shutting down keeps them (with min.insync.replicas, as in Kafka): nothing else could lead it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from replication.metadata import NO_LEADER, ClusterView, PartitionState, TopicPartition


def move_off_shutting(
    state: PartitionState, shutting: frozenset[int], in_sync: frozenset[int]
) -> PartitionState | None:
    """The partition's state without the `shutting` nodes in its ISR, led by the first replica
    in `in_sync` (live, not shutting down, able to lead) if a shutting node led it, in the next
    leader epoch; None if no shutting node is in its ISR, or if no other in-sync replica could
    lead it (then the shutting leader keeps it, and its ISR stays)."""
    if state.leader == NO_LEADER or shutting.isdisjoint(state.isr):
        return None
    isr = tuple(r for r in state.isr if r not in shutting)
    leader = state.leader
    if leader in shutting:
        leader = next((r for r in state.replicas if r in isr and r in in_sync), NO_LEADER)
    if leader == NO_LEADER or leader not in in_sync:
        return None
    return replace(state, leader=leader, leader_epoch=state.leader_epoch + 1, isr=isr)


def shutting(view: ClusterView) -> frozenset[int]:
    """The live nodes shutting down (a key under a node's lease: it goes with the node)."""
    return view.shutting_down & view.live


def candidates(
    view: ClusterView, tp: TopicPartition, state: PartitionState, leaving: frozenset[int]
) -> frozenset[int]:
    """The replicas that may take the partition over from nodes `leaving`: live, its log online
    there, not restarted (or crashed) since its ISR was stored, not leaving."""
    offline = view.offline_replicas(*tp)
    return view.live - offline - view.restarted(state) - view.crashed(state) - leaving


def decide(
    view: ClusterView,
    tp: TopicPartition,
    state: PartitionState,
    decided: PartitionState | None,
) -> PartitionState | None:
    """The controller's decision for a partition, `decided` by its other rules (a lost leader,
    an ISR member gone; None: no change), with the shutting-down nodes moved off on top, in
    one new leader epoch."""
    leaving = shutting(view)
    if not leaving:
        return decided
    base = state if decided is None else decided
    moved = move_off_shutting(base, leaving, candidates(view, tp, state, leaving))
    if moved is None:
        return decided
    return moved if decided is None else replace(moved, leader_epoch=decided.leader_epoch)


@dataclass(frozen=True)
class Handover:
    """Where a shutting-down node stands: the partitions whose leadership or ISR membership it
    could still hand over (`pending`), and those it leads that no other in-sync replica can
    take (`kept`)."""

    pending: tuple[TopicPartition, ...]
    kept: tuple[TopicPartition, ...]

    @property
    def done(self) -> bool:
        return not self.pending


def handover(view: ClusterView, node_id: int) -> Handover:
    """What `node_id`, shutting down, still holds in `view` (by the controller's rule)."""
    leaving = shutting(view) | {node_id}
    pending = []
    kept = []
    for tp, state in view.partitions.items():
        if node_id not in state.isr:
            continue
        if move_off_shutting(state, leaving, candidates(view, tp, state, leaving)) is not None:
            pending.append(tp)
        elif state.leader == node_id:
            kept.append(tp)
    return Handover(tuple(sorted(pending)), tuple(sorted(kept)))
