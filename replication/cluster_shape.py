"""The cluster's shape as the planners see it (replication.placement): which nodes take part
in a balance, a decommission or a heal, the load they start from, and the checks that refuse
an operation before anything moves. Plain functions of the view and the partitions' sizes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from replication.errors import InvalidReassignment, ReassignmentInProgress
from replication.metadata import DECOMMISSIONING, REMOVED, ClusterView, TopicPartition
from replication.placement import ClusterLoad, PartitionLoad

# Bytes of each partition (one replica's, as its leader reports it); what a node cannot tell
# in time counts as 0.
SizesProvider = Callable[[], Awaitable[Mapping[TopicPartition, int]]]


def racks_of(view: ClusterView, nodes: set[int] | frozenset[int]) -> dict[int, str | None]:
    """The nodes' racks: none at all unless every one of them has a rack (a cluster being
    given racks node by node places as before until the last has one)."""
    racks = {n: (info.rack if (info := view.nodes.get(n)) is not None else None) for n in nodes}
    if any(rack is None for rack in racks.values()):
        return dict.fromkeys(sorted(nodes))
    return {n: racks[n] for n in sorted(nodes)}


def load(
    view: ClusterView, sizes: Mapping[TopicPartition, int], nodes: set[int] | frozenset[int]
) -> ClusterLoad:
    """The partitions as they stand (moving ones at their target) over `nodes`."""
    return ClusterLoad(
        racks_of(view, nodes),
        {
            key: PartitionLoad(state.target_replicas, sizes.get(key, 0))
            for key, state in view.partitions.items()
        },
    )


def holding(view: ClusterView, node: int) -> int:
    """How many partitions list `node` among their replicas (moving ones included)."""
    return sum(1 for state in view.partitions.values() if node in state.replicas)


def check_all_up(view: ClusterView, operation: str) -> None:
    """A balance or a decommission plans over live nodes only: refused while a node that is
    not removed is down (its replicas could be planned onto nothing), or while moves run."""
    down = sorted(
        n for n in view.nodes if n not in view.live and view.node_states.get(n) != REMOVED
    )
    if down:
        raise InvalidReassignment(
            f"cannot {operation} while nodes {down} are down: bring them back, or remove "
            f"them (remove-node) so that their replicas are re-created elsewhere"
        )
    moving = sum(1 for state in view.partitions.values() if state.reassigning)
    if moving:
        raise ReassignmentInProgress(
            f"cannot {operation} while {moving} partitions are moving: wait, or cancel them"
        )


def check_decommission(view: ClusterView, node: int) -> None:
    """A node to decommission: known, not removed nor leaving already."""
    if node not in view.nodes:
        raise InvalidReassignment(f"no node {node} is known to the cluster")
    state = view.node_states.get(node)
    if state == REMOVED:
        raise InvalidReassignment(f"node {node} was removed already")
    if state == DECOMMISSIONING:
        raise ReassignmentInProgress(f"node {node} is being decommissioned already")


def check_remove(view: ClusterView, node: int) -> None:
    """A node to remove (its replicas re-created elsewhere): known, not removed, and down: a
    live node is decommissioned instead, which copies from it rather than lose a replica."""
    if node not in view.nodes:
        raise InvalidReassignment(f"no node {node} is known to the cluster")
    if view.node_states.get(node) == REMOVED:
        raise InvalidReassignment(f"node {node} was removed already")
    if node in view.live:
        raise InvalidReassignment(
            f"node {node} is live: decommission it (its replicas are copied off it first)"
        )
