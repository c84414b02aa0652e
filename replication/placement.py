"""Where replicas go: placement of new partitions, and target replica lists that balance the
cluster, decommission a node or heal lost ones, as pure functions (no I/O, no clock, no
randomness: the same input gives the same plan). The controller stores the targets and drives
each move (replication.reassignment); nothing here knows how.

The figures balanced, per node: replicas held, preferred leaderships (first replicas: the
controller moves leadership back to preferred replicas, so that is where leaders end up) and
bytes held. Each should sit within ±tolerance of its mean over the nodes taking part, the
counts rounded outwards to whole replicas. The rack rule (Kafka's KIP-36) is never broken: a
partition's replicas go on as many distinct racks as min(replication factor, racks) allows,
and no move lowers a partition's count of distinct racks.

The balancer is greedy and bounded (docs/cluster.md "Balancing, decommission and heal: the
planners"): it takes the node furthest out of its bands, moves one replica off it (or onto
it) to the least (most) loaded node that may take (give) it, choosing by size the replica
that closes both the count and the byte gap with the fewest bytes, accepts a move only when
it lowers the cluster's total distance to the bands without worsening the other node, and
stops when every node is within its bands or none can improve. Leader counts are then evened
by reordering replica lists only (no data moves).
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, insort
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass

from replication.errors import InvalidReassignment, InvalidReplicationFactor
from replication.metadata import TopicPartition

DEFAULT_TOLERANCE = 0.10
# Candidate replicas examined on each side of the ideal size, per node, for one move.
_CANDIDATES = 24
# Receivers tried for one candidate replica before the next candidate.
_RECEIVERS = 3
# A swap's partners tried, and the node's own replicas offered to each.
_SWAP_PARTNERS = 16
_SWAP_OURS = 8
# Rounds over the nodes that could not improve, retried after others moved.
_ROUNDS = 8
_EPS = 1e-12
_SHOWN = 10  # partitions named in an error message


@dataclass(frozen=True)
class PartitionLoad:
    """A partition as the planners see it: its replicas (the first is the preferred leader)
    and its size (one replica's bytes on disk)."""

    replicas: tuple[int, ...]
    size_bytes: int = 0


@dataclass(frozen=True)
class ClusterLoad:
    """What a plan starts from. `racks`: every node that may hold replicas -> its rack (None
    when not configured; racks count only when every node has one, as in Kafka)."""

    racks: Mapping[int, str | None]
    partitions: Mapping[TopicPartition, PartitionLoad]


@dataclass(frozen=True)
class NodeFigures:
    """One node's figures before and after a plan."""

    replicas_before: int
    replicas_after: int
    leaders_before: int
    leaders_after: int
    bytes_before: int
    bytes_after: int


@dataclass(frozen=True)
class Spread:
    """The lowest and highest of each figure over the nodes counted, as a ratio to their
    mean (1.0 is the mean; a figure whose mean is 0 reads 1.0 everywhere)."""

    replicas: tuple[float, float]
    leaders: tuple[float, float]
    bytes: tuple[float, float]

    def worst(self) -> float:
        """The largest deviation from the mean, of any figure (0.10: ±10%)."""
        return max(
            max(1.0 - low, high - 1.0) for low, high in (self.replicas, self.leaders, self.bytes)
        )


@dataclass(frozen=True)
class Plan:
    """Target replica lists (the partitions that change only) and what they cost.

    `replica_moves`: replicas added (as many are removed); `partitions_moved`: partitions that
    copy data; `leadership_changes`: partitions whose replicas stay but whose order (so their
    preferred leader) changes; `bytes_to_move`: the bytes the added replicas copy. `goal_met`:
    every node counted ends within ±tolerance on every figure (and, for heal and decommission,
    nothing is left on the nodes that go); `notes` say what is not met and why. `skipped`:
    partitions the plan had to leave as they are (heal: every replica lost)."""

    targets: Mapping[TopicPartition, tuple[int, ...]]
    bytes_to_move: int
    replica_moves: int
    partitions_moved: int
    leadership_changes: int
    goal_met: bool
    nodes: Mapping[int, NodeFigures]
    before: Spread
    after: Spread
    tolerance: float
    notes: tuple[str, ...] = ()
    skipped: tuple[TopicPartition, ...] = ()


# -- placement of new partitions -------------------------------------------------------------


def rack_alternated(racks: Mapping[int, str | None]) -> list[int]:
    """The nodes in KIP-36's rack-alternating order: the first node of each rack (racks in
    name order), then the second of each, and so on; plain node order without racks."""
    racks = _checked_racks(racks)
    by_rack: dict[str | None, list[int]] = {}
    for node in sorted(racks):
        by_rack.setdefault(racks[node], []).append(node)
    if None in by_rack:
        return by_rack[None]
    columns = [by_rack[rack] for rack in sorted(r for r in by_rack if r is not None)]
    deepest = max(len(c) for c in columns)
    return [c[i] for i in range(deepest) for c in columns if i < len(c)]


def assign_new(
    racks: Mapping[int, str | None], start: int, partitions: range, replication_factor: int
) -> list[tuple[int, ...]]:
    """Replicas for new partitions (a new topic, or partitions added to one).

    Partition p's preferred leader is the node at i = (start + p) in the rack-alternating
    list (KIP-36), its j-th other replica on the j-th rack after the leader's (in name order,
    so a partition has as many racks as it can), taking that rack's nodes in turn, shifted by
    one each lap of the list; where the rack has no node left for it, the next node along the
    list. Each rack's share is so spread evenly over its nodes, racks of unequal size too
    (KIP-36's walk along the list, skipping racks in use, loads the node after a skipped one).
    Without racks (or with a node that has none) it is exactly the round-robin over the
    sorted node ids: nodes[(start + p + j) % n] for j < replication_factor."""
    racks = _checked_racks(racks)
    nodes = rack_alternated(racks)
    n = len(nodes)
    replication_factor = checked_replication_factor(replication_factor, n, "nodes")
    if all(racks[node] is None for node in nodes):
        return [
            tuple(nodes[(start + p + j) % n] for j in range(replication_factor)) for p in partitions
        ]
    by_rack: dict[str | None, list[int]] = {}
    for node in sorted(racks):
        by_rack.setdefault(racks[node], []).append(node)
    order = sorted(by_rack, key=str)
    rack_count = len(order)
    position = {rack: i for i, rack in enumerate(order)}
    # Each rack's follower turns in one lap of the list, rounded up to whole rounds of its
    # nodes: every such block of turns shifts the rack's order by one (Kafka's replica
    # shift), so that a node's partitions do not have the same followers lap after lap,
    # while each block still gives each of the rack's nodes as many turns.
    per_lap = dict.fromkeys(order, 0)
    for node in nodes:
        first = position[racks[node]]
        for j in range(1, replication_factor):
            per_lap[order[(first + j) % rack_count]] += 1
    block = {
        rack: len(by_rack[rack]) * max(1, -(-per_lap[rack] // len(by_rack[rack]))) for rack in order
    }
    turns = {rack: start * block[rack] for rack in order}  # from a block's first turn
    assigned = []
    for p in partitions:
        i = (start + p) % n
        leader = nodes[i]
        chosen = [leader]
        first = position[racks[leader]]
        for j in range(1, replication_factor):
            # the j-th rack after the leader's, and that rack's nodes in turn
            rack = order[(first + j) % rack_count]
            members = by_rack[rack]
            turn = turns[rack]
            turns[rack] = turn + 1
            turn += turn // block[rack]
            pick = next(
                (
                    members[(turn + k) % len(members)]
                    for k in range(len(members))
                    if members[(turn + k) % len(members)] not in chosen
                ),
                None,
            )
            if pick is None:  # the rack is used up: the next node along the list
                pick = next(
                    nodes[(i + j + k) % n] for k in range(n) if nodes[(i + j + k) % n] not in chosen
                )
            chosen.append(pick)
        assigned.append(tuple(chosen))
    return assigned


# -- the working state -------------------------------------------------------------------------


class _Bands:
    """A figure's band around its mean: whole counts rounded outwards, bytes as they are."""

    def __init__(self, total: float, nodes: int, tolerance: float, whole: bool) -> None:
        self.mean = total / nodes if nodes else 0.0
        low, high = self.mean * (1 - tolerance), self.mean * (1 + tolerance)
        if whole:
            low, high = math.floor(low + _EPS), math.ceil(high - _EPS)
        self.low = low
        self.high = high
        # one unit of distance: a mean's worth of the figure
        self.weight = 1.0 / self.mean if self.mean > 0 else 0.0

    def distance(self, value: float) -> float:
        if value > self.high:
            return (value - self.high) * self.weight
        if value < self.low:
            return (self.low - value) * self.weight
        return 0.0

    def holds(self, value: float) -> bool:
        return self.low - _EPS <= value <= self.high + _EPS


class _State:
    """The cluster being planned: replica lists by partition index, figures by node."""

    def __init__(self, load: ClusterLoad, also: Collection[int] = ()) -> None:
        racks = _checked_racks(load.racks)
        self.rack = racks
        configured = any(rack is not None for rack in racks.values())
        for node in also:
            # a lost node no rack map names: a rack of its own, which no live node is on
            self.rack.setdefault(node, _LOST_RACK if configured else None)
        self.keys: list[TopicPartition] = sorted(load.partitions)
        self.size: list[int] = []
        self.reps: list[list[int]] = []
        self.original: list[tuple[int, ...]] = []
        for key in self.keys:
            partition = load.partitions[key]
            replicas = tuple(partition.replicas)
            _check_partition(key, partition, self.rack)
            self.size.append(partition.size_bytes)
            self.reps.append(list(replicas))
            self.original.append(replicas)
        self.count = dict.fromkeys(self.rack, 0)
        self.bytes = dict.fromkeys(self.rack, 0)
        self.leaders = dict.fromkeys(self.rack, 0)
        for p, held_by in enumerate(self.reps):
            size = self.size[p]
            for node in held_by:
                self.count[node] += 1
                self.bytes[node] += size
            self.leaders[held_by[0]] += 1
        self.before = (dict(self.count), dict(self.leaders), dict(self.bytes))

    def name(self, p: int) -> str:
        topic, partition = self.keys[p]
        return f"{topic}-{partition}"

    def diversity(self, replicas: Sequence[int]) -> int:
        rack = self.rack
        return len({rack[r] for r in replicas})

    def rack_ok(self, p: int, source: int, dest: int) -> bool:
        """Whether moving p's replica from `source` to `dest` keeps its count of racks."""
        rack = self.rack
        to = rack[dest]
        frm = rack[source]
        if to == frm:
            return True
        others = [rack[r] for r in self.reps[p] if r != source]
        return to not in others or frm in others

    def move(self, p: int, source: int, dest: int) -> None:
        replicas = self.reps[p]
        i = replicas.index(source)
        replicas[i] = dest
        size = self.size[p]
        self.count[source] -= 1
        self.count[dest] += 1
        self.bytes[source] -= size
        self.bytes[dest] += size
        if i == 0:
            self.leaders[source] -= 1
            self.leaders[dest] += 1

    def lead(self, p: int, node: int) -> None:
        """Make `node` (a replica of p) its first replica, swapping places with the first."""
        replicas = self.reps[p]
        i = replicas.index(node)
        old = replicas[0]
        replicas[0], replicas[i] = node, old
        self.leaders[old] -= 1
        self.leaders[node] += 1


_LOST_RACK = "\x00lost"  # the rack of a lost node no rack map names: matches no live node


def checked_replication_factor(replication_factor: object, nodes: int, which: str) -> int:
    """A replication factor: an integer from 1 to the number of `which` nodes there are
    (InvalidReplicationFactor says why not)."""
    if (
        isinstance(replication_factor, bool)
        or not isinstance(replication_factor, int)
        or replication_factor < 1
    ):
        raise InvalidReplicationFactor(
            f"replication factor must be an integer of at least 1, got {replication_factor!r}"
        )
    if replication_factor > nodes:
        raise InvalidReplicationFactor(
            f"replication factor {replication_factor} is larger than the number of {which} "
            f"({nodes})"
        )
    return replication_factor


def _checked_racks(racks: Mapping[int, str | None]) -> dict[int, str | None]:
    """The rack map the planners go by: racks count only when every node has one (a node
    without turns rack placement off for all, until it has one too)."""
    if not racks:
        raise InvalidReassignment("the cluster has no node to place replicas on")
    for node in racks:
        if isinstance(node, bool) or not isinstance(node, int):
            raise InvalidReassignment(f"node ids must be integers, got {node!r}")
    if any(rack is None for rack in racks.values()):
        return dict.fromkeys(racks)
    return dict(racks)


def _check_partition(
    key: TopicPartition, partition: PartitionLoad, rack: Mapping[int, object]
) -> None:
    replicas = partition.replicas
    name = f"{key[0]}-{key[1]}"
    if not replicas:
        raise InvalidReassignment(f"{name}: the replica list is empty")
    if len(set(replicas)) != len(replicas):
        raise InvalidReassignment(f"{name}: the replica list {list(replicas)} repeats a node")
    unknown = sorted(r for r in replicas if r not in rack)
    if unknown:
        raise InvalidReassignment(f"{name}: nodes {unknown} are not in the cluster")
    size = partition.size_bytes
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise InvalidReassignment(f"{name}: size_bytes must be a non-negative integer")


def _check_tolerance(tolerance: float) -> None:
    if not 0 < tolerance < 1:
        raise ValueError(f"tolerance must be between 0 and 1, got {tolerance!r}")


def _excluded(state: _State, exclude: Collection[int]) -> frozenset[int]:
    excluded = frozenset(exclude)
    unknown = sorted(excluded - set(state.rack))
    if unknown:
        raise InvalidReassignment(f"nodes {unknown} are not in the cluster")
    return excluded


def _named(state: _State, partitions: Sequence[int]) -> str:
    names = ", ".join(state.name(p) for p in partitions[:_SHOWN])
    more = len(partitions) - _SHOWN
    return names + (f" and {more} more" if more > 0 else "")


# -- balance ------------------------------------------------------------------------------------


def plan_balance(
    load: ClusterLoad,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    exclude: Collection[int] = frozenset(),
) -> Plan:
    """Target replica lists that bring every node's replica count, preferred-leader count and
    bytes within ±`tolerance` of their means, moving as few bytes as that allows.

    `exclude`: nodes left out (being drained, say): they neither give nor take replicas or
    leaderships, and their figures count in no mean. When the goal cannot be reached (one
    partition larger than a node's share, racks of unequal size), the plan gets as close as
    it can and says so in `notes`."""
    _check_tolerance(tolerance)
    state = _State(load)
    excluded = _excluded(state, exclude)
    nodes = [node for node in sorted(state.rack) if node not in excluded]
    if not nodes:
        raise InvalidReassignment("every node is excluded: there is nowhere to balance")
    _Balancer(state, nodes, tolerance).run()
    _balance_leaders(state, nodes, tolerance)
    return _plan(state, tolerance, sorted(set(state.rack) - excluded), nodes, gone=())


class _Balancer:
    """Replica moves that bring replica counts and bytes within their bands."""

    def __init__(self, state: _State, nodes: list[int], tolerance: float) -> None:
        self.state = state
        self.nodes = nodes
        self.counts = _Bands(sum(state.count[n] for n in nodes), len(nodes), tolerance, True)
        self.sizes = _Bands(sum(state.bytes[n] for n in nodes), len(nodes), tolerance, False)
        self.taking = set(nodes)
        # partitions this plan moves already (a decommission's evacuated ones too)
        self.moved = {
            p for p, replicas in enumerate(state.reps) if set(replicas) != set(state.original[p])
        }
        # Each node's replicas by size: of partitions not moved yet (tried first: a partition's
        # replicas had better not all move at once, copying them all with twice as many
        # replicas meanwhile), and of moved ones.
        self.fresh: dict[int, list[tuple[int, int]]] = {n: [] for n in nodes}
        self.stale: dict[int, list[tuple[int, int]]] = {n: [] for n in nodes}
        for p, replicas in enumerate(state.reps):
            held = self.stale if p in self.moved else self.fresh
            size = state.size[p]
            for r in replicas:
                if r in self.taking:
                    held[r].append((size, p))
        for side in (self.fresh, self.stale):
            for replicas_held in side.values():
                replicas_held.sort()
        self.pen = {n: self.penalty(state.count[n], state.bytes[n]) for n in nodes}
        # Whether any partition may move between racks at all: with one replica on each rack,
        # a replica can only move within its rack, and only those nodes are worth a look.
        rack = state.rack
        rack_count = len(set(rack.values()))

        def may_cross(replicas: list[int]) -> bool:
            spread = len({rack[r] for r in replicas})
            return spread < rack_count or spread < len(replicas)

        self.cross_rack = rack_count > 1 and any(may_cross(r) for r in state.reps)
        self.by_rack: dict[str | None, list[int]] = {}
        for n in nodes:
            self.by_rack.setdefault(rack[n], []).append(n)

    def penalty(self, count: int, size: int) -> float:
        return self.counts.distance(count) + self.sizes.distance(size)

    def load(self, node: int, by_count: bool, by_bytes: bool) -> float:
        """How loaded a node is in the figures a move is for (both when neither is named)."""
        if not by_count and not by_bytes:
            by_count = by_bytes = True
        load = 0.0
        if by_count:
            load += self.state.count[node] * self.counts.weight
        if by_bytes:
            load += self.state.bytes[node] * self.sizes.weight
        return load

    def run(self) -> None:
        state = self.state
        limit = sum(state.count[n] for n in self.nodes) + len(self.nodes)
        stuck: set[int] = set()
        moved_since = False
        rounds = 0
        moves = 0
        pen = self.pen
        while moves < limit:
            worst = max(((pen[n], -n) for n in self.nodes if n not in stuck), default=(0.0, 0))
            if worst[0] <= _EPS:
                if stuck and moved_since and rounds < _ROUNDS:
                    stuck.clear()
                    moved_since = False
                    rounds += 1
                    continue
                return
            node = -worst[1]
            if self.fix(node):
                moves += 1
                moved_since = True
            else:
                stuck.add(node)

    def fix(self, node: int) -> bool:
        state, counts, sizes = self.state, self.counts, self.sizes
        count, size = state.count[node], state.bytes[node]
        over = count > counts.high or size > sizes.high + _EPS
        under = count < counts.low or size < sizes.low - _EPS
        if over and not under:
            if self.push(node):
                return True
            # Short of nodes that can take a small replica (each at the top of a band), take a
            # big one from a node with bytes to spare: that node may take small ones then.
            room = sizes.high - size
            if count > counts.high and room > 0 and self.pull(node, room):
                return True
        elif under and not over:
            if self.pull(node):
                return True
            # Short of nodes that can give a small replica, give a big one to a node that lacks
            # bytes: that node may give small ones then.
            room = size - sizes.low
            if count < counts.low and room > 0 and self.push(node, room):
                return True
        elif self.push(node) or self.pull(node):
            return True
        # Bytes off while the count may not move (at a band's edge): swap replicas.
        return self.swap(node)

    def peers(self, node: int) -> list[int]:
        if self.cross_rack:
            return [n for n in self.nodes if n != node]
        return [n for n in self.by_rack[self.state.rack[node]] if n != node]

    def push(self, node: int, ideal: float | None = None) -> bool:
        """Move one replica off `node` to the least loaded node that may take it, of about
        the `ideal` size (by default, the one that closes the node's gaps)."""
        state, counts, sizes = self.state, self.counts, self.sizes
        by_count = ideal is None and state.count[node] > counts.high
        by_bytes = ideal is not None or state.bytes[node] > sizes.high
        if ideal is None:
            ideal = _ideal(state.count[node] - counts.high, state.bytes[node] - sizes.high)
        receivers = sorted(
            (
                n
                for n in self.peers(node)
                if not (state.count[n] >= counts.high and state.bytes[n] >= sizes.low)
                and not (state.bytes[n] >= sizes.high and state.count[n] >= counts.low)
            ),
            key=lambda n: (self.load(n, by_count, by_bytes), n),
        )
        if not receivers:
            return False
        for held in (self.fresh[node], self.stale[node]):
            for _, p in _around(held, ideal):
                replicas = state.reps[p]
                tried = 0
                for dest in receivers:
                    if dest in replicas or not state.rack_ok(p, node, dest):
                        continue
                    if self.better(p, node, dest, keep=dest):
                        self.apply(p, node, dest)
                        return True
                    tried += 1
                    if tried >= _RECEIVERS:
                        break
        return False

    def pull(self, node: int, ideal: float | None = None) -> bool:
        """Move one replica onto `node` from the most loaded node that may give it, of about
        the `ideal` size (by default, the one that closes the node's gaps)."""
        state, counts, sizes = self.state, self.counts, self.sizes
        by_count = ideal is None and state.count[node] < counts.low
        by_bytes = ideal is not None or state.bytes[node] < sizes.low
        if ideal is None:
            ideal = _ideal(counts.low - state.count[node], sizes.low - state.bytes[node])
        givers = sorted(
            (
                n
                for n in self.peers(node)
                if not (state.count[n] <= counts.low and state.bytes[n] <= sizes.high)
                and not (state.bytes[n] <= sizes.low and state.count[n] <= counts.high)
            ),
            key=lambda n: (-self.load(n, by_count, by_bytes), n),
        )
        for lists in (self.fresh, self.stale):  # partitions not moved yet first
            for giver in givers:
                for _, p in _around(lists[giver], ideal):
                    if node in state.reps[p] or not state.rack_ok(p, giver, node):
                        continue
                    if self.better(p, giver, node, keep=giver):
                        self.apply(p, giver, node)
                        return True
        return False

    def swap(self, node: int) -> bool:
        """Exchange a small replica of `node` for a bigger one of another node (or a big one
        for a smaller), when only its bytes are off: the counts stay as they are."""
        state, sizes = self.state, self.sizes
        need = sizes.low - state.bytes[node]  # bytes to gain (> 0), or to shed (< 0)
        if need <= 0:
            need = sizes.high - state.bytes[node]
            if need >= 0:
                return False
        gaining = need > 0
        partners = sorted(
            (
                n
                for n in self.peers(node)
                if (state.bytes[n] > sizes.low if gaining else state.bytes[n] < sizes.high)
            ),
            key=lambda n: (-state.bytes[n] if gaining else state.bytes[n], n),
        )[:_SWAP_PARTNERS]
        mine = self.fresh[node]
        for partner in partners:
            theirs = self.fresh[partner]
            # ours: the smallest (gaining) or the biggest (shedding) of this node's replicas
            ours = mine[:_SWAP_OURS] if gaining else mine[: -_SWAP_OURS - 1 : -1]
            for small_or_big, q in ours:
                if partner in state.reps[q]:
                    continue
                if not state.rack_ok(q, node, partner):
                    continue
                # theirs: the replica whose size makes up the gap, give or take
                for size, p in _around(theirs, small_or_big + need):
                    if p == q or node in state.reps[p] or not state.rack_ok(p, partner, node):
                        continue
                    delta = size - small_or_big  # bytes the node gains
                    if (delta > 0) != gaining:
                        continue
                    after_n = self.penalty(state.count[node], state.bytes[node] + delta)
                    after_p = self.penalty(state.count[partner], state.bytes[partner] - delta)
                    if after_p > self.pen[partner] + _EPS:
                        continue
                    if after_n + after_p < self.pen[node] + self.pen[partner] - _EPS:
                        self.apply(q, node, partner)
                        self.apply(p, partner, node)
                        return True
        return False

    def better(self, p: int, source: int, dest: int, keep: int) -> bool:
        """Whether the move lowers the total distance to the bands without taking `keep` (the
        other node than the one being fixed) further from its own."""
        state = self.state
        size = state.size[p]
        before_s, before_d = self.pen[source], self.pen[dest]
        after_s = self.penalty(state.count[source] - 1, state.bytes[source] - size)
        after_d = self.penalty(state.count[dest] + 1, state.bytes[dest] + size)
        if keep == dest and after_d > before_d + _EPS:
            return False
        if keep == source and after_s > before_s + _EPS:
            return False
        return after_s + after_d < before_s + before_d - _EPS

    def apply(self, p: int, source: int, dest: int) -> None:
        state = self.state
        entry = (state.size[p], p)
        if p in self.moved:
            held = self.stale[source]
            del held[bisect_left(held, entry)]
        else:  # each of its replicas moves to the moved side
            self.moved.add(p)
            for r in state.reps[p]:
                if r in self.taking:
                    held = self.fresh[r]
                    del held[bisect_left(held, entry)]
                    if r != source:
                        insort(self.stale[r], entry)
        insort(self.stale[dest], entry)
        state.move(p, source, dest)
        self.pen[source] = self.penalty(state.count[source], state.bytes[source])
        self.pen[dest] = self.penalty(state.count[dest], state.bytes[dest])


def _ideal(count_gap: float, byte_gap: float) -> float:
    """The size of the replica to move next: the bytes still to move spread over the replicas
    still to move; the smallest when only the count is off; all the bytes at once when only
    the bytes are."""
    if count_gap > 0 and byte_gap > 0:
        return byte_gap / count_gap
    if count_gap > 0:
        return 0.0
    return max(byte_gap, 0.0)


def _around(held: list[tuple[int, int]], ideal: float) -> Iterator[tuple[int, int]]:
    """A node's replicas from the smallest at least `ideal` upwards, then below it downwards,
    a bounded number each way."""
    start = bisect_left(held, (math.ceil(ideal), -1))
    yield from held[start : start + _CANDIDATES]
    yield from reversed(held[max(0, start - _CANDIDATES) : start])


def _balance_leaders(state: _State, nodes: list[int], tolerance: float) -> None:
    """Even the preferred-leader counts by reordering replica lists (no data moves): a node
    over its band hands leaderships to its followers with the fewest, one under it takes
    them from the leaders with the most."""
    taking = set(nodes)
    leaders = state.leaders
    bands = _Bands(sum(leaders[n] for n in nodes), len(nodes), tolerance, True)
    led: dict[int, dict[int, None]] = {n: {} for n in nodes}
    follows: dict[int, dict[int, None]] = {n: {} for n in nodes}
    for p, replicas in enumerate(state.reps):
        if replicas[0] not in taking:
            continue  # an excluded node's leadership stays
        led[replicas[0]][p] = None
        for r in replicas[1:]:
            if r in taking:
                follows[r][p] = None

    def hand_over(p: int, old: int, new: int) -> None:
        state.lead(p, new)
        del led[old][p]
        led[new][p] = None
        del follows[new][p]
        follows[old][p] = None

    stuck: set[int] = set()
    limit = sum(len(v) for v in led.values()) + len(nodes)
    moves = 0
    while moves < limit:
        worst = max(
            ((bands.distance(leaders[n]), -n) for n in nodes if n not in stuck),
            default=(0.0, 0),
        )
        if worst[0] <= _EPS:
            return
        node = -worst[1]
        moved = 0
        if leaders[node] > bands.high:
            by_follower: dict[int, list[int]] = {}
            for p in led[node]:
                for r in state.reps[p][1:]:
                    if r in taking:
                        by_follower.setdefault(r, []).append(p)
            while leaders[node] > bands.high and by_follower:
                new = min(by_follower, key=lambda r: (leaders[r], r))
                before = bands.distance(leaders[node]) + bands.distance(leaders[new])
                after = bands.distance(leaders[node] - 1) + bands.distance(leaders[new] + 1)
                if after >= before - _EPS or bands.distance(leaders[new] + 1) > bands.distance(
                    leaders[new]
                ):
                    break
                candidates = by_follower[new]
                p = candidates.pop()
                if not candidates:
                    del by_follower[new]
                if state.reps[p][0] != node or new not in state.reps[p]:
                    continue
                hand_over(p, node, new)
                moved += 1
        else:
            by_leader: dict[int, list[int]] = {}
            for p in follows[node]:
                by_leader.setdefault(state.reps[p][0], []).append(p)
            while leaders[node] < bands.low and by_leader:
                old = max(by_leader, key=lambda r: (leaders[r], -r))
                before = bands.distance(leaders[node]) + bands.distance(leaders[old])
                after = bands.distance(leaders[node] + 1) + bands.distance(leaders[old] - 1)
                if after >= before - _EPS or bands.distance(leaders[old] - 1) > bands.distance(
                    leaders[old]
                ):
                    break
                candidates = by_leader[old]
                p = candidates.pop()
                if not candidates:
                    del by_leader[old]
                if state.reps[p][0] != old or node not in state.reps[p]:
                    continue
                hand_over(p, old, node)
                moved += 1
        moves += moved
        if not moved:
            stuck.add(node)
        else:
            stuck.clear()


# -- decommission and heal ------------------------------------------------------------------


def plan_decommission(
    load: ClusterLoad,
    node: int,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    rebalance: bool = True,
    exclude: Collection[int] = frozenset(),
) -> Plan:
    """Target replica lists that move every replica off `node`, each to the least loaded node
    that keeps the partition's racks, its leadership (where `node` was preferred) to the
    replica (old or new) with the fewest. Raises InvalidReassignment, naming the partitions,
    when that is impossible: `node` is the only node, too few nodes remain for a partition's
    replication factor, or `node` is the last of its rack and a partition would lose a rack.

    `rebalance`: then balance the nodes left as `plan_balance` would (a node left at the edge
    of a band falls out of it when the mean rises, or its rack cannot take the node's
    replicas), in the same plan; else `goal_met` only says whether they end balanced.
    `exclude`: nodes that keep what they hold but take nothing, as in `plan_balance` (another
    node being decommissioned, one in a controlled shutdown)."""
    _check_tolerance(tolerance)
    state = _State(load)
    if node not in state.rack:
        raise InvalidReassignment(f"node {node} is not in the cluster")
    gone = frozenset({node})
    excluded = _excluded(state, exclude) - gone
    remaining = [n for n in sorted(state.rack) if n != node and n not in excluded]
    if not remaining:
        raise InvalidReassignment(
            f"node {node} is the only node that could hold replicas: they have nowhere to go"
        )
    short, lowered, _ = _evacuate(state, gone, remaining, keep_racks=True)
    if short:
        raise InvalidReassignment(
            f"cannot decommission node {node}: {len(short)} partitions need more nodes than the "
            f"{len(remaining)} left for their replication factor ({_named(state, short)})"
        )
    if lowered:
        raise InvalidReassignment(
            f"cannot decommission node {node}, the last of rack {state.rack[node]!r} a "
            f"partition needs: {len(lowered)} partitions would have their replicas on fewer "
            f"racks ({_named(state, lowered)})"
        )
    if rebalance:
        _Balancer(state, remaining, tolerance).run()
        _balance_leaders(state, remaining, tolerance)
    counted_before = [n for n in sorted(state.rack) if n not in excluded]
    return _plan(state, tolerance, counted_before, remaining, gone=gone)


def plan_heal(
    load: ClusterLoad,
    lost: Collection[int],
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    rebalance: bool = False,
    exclude: Collection[int] = frozenset(),
) -> Plan:
    """Target replica lists that replace every replica on a `lost` node with one on a live
    node (the nodes of `load.racks` not lost), restoring each partition's replication factor:
    on a rack the partition lacks where one is left, else on the least loaded node; a lost
    preferred leader is replaced by the replica (surviving or new) with the fewest
    leaderships: the new one takes up leadership once it is in sync. A partition with every
    replica lost is left as it is (`skipped`: no replica holds its data). Raises
    InvalidReassignment when too few live nodes remain for a partition's replication factor.
    Lost nodes need not be in `load.racks`.

    `rebalance`: then balance the live nodes as `plan_balance` would, in the same plan. Off by
    default: a heal restores what was lost and copies nothing else while the cluster is short
    of a node; the balancer's turn comes after. `exclude`: nodes that keep what they hold but
    take nothing, as in `plan_balance` (another node down but not given up, one being
    decommissioned or in a controlled shutdown)."""
    _check_tolerance(tolerance)
    gone = frozenset(lost)
    state = _State(load, also=sorted(gone))
    excluded = _excluded(state, exclude) - gone
    live = [n for n in sorted(state.rack) if n not in gone and n not in excluded]
    if not live:
        raise InvalidReassignment("every node is lost or excluded: there is nowhere to heal to")
    short, lowered, skipped = _evacuate(state, gone, live, keep_racks=False)
    if short:
        raise InvalidReassignment(
            f"cannot restore the replication factor of {len(short)} partitions with "
            f"{len(live)} live nodes ({_named(state, short)})"
        )
    notes = []
    if lowered:
        notes.append(
            f"{len(lowered)} partitions end on fewer racks than they had: their lost replicas' "
            f"racks have no live node left that could take them ({_named(state, lowered)})"
        )
    if rebalance:
        _Balancer(state, live, tolerance).run()
        _balance_leaders(state, live, tolerance)
    counted_before = [n for n in sorted(state.rack) if n not in gone and n not in excluded]
    return _plan(
        state,
        tolerance,
        counted_before,
        live,
        gone=gone,
        notes=notes,
        skipped=[state.keys[p] for p in skipped],
    )


def _evacuate(
    state: _State, gone: frozenset[int], targets: list[int], keep_racks: bool
) -> tuple[list[int], list[int], list[int]]:
    """Replace each replica on a `gone` node with one on a target node, biggest partitions
    first: on a rack the partition lacks where there is one, else any, the least loaded. A
    gone preferred leader gives way to the replica with the fewest leaderships. Returns the
    partitions short of nodes, those whose count of racks fell (`keep_racks`: left as they
    were), and those with no survivor (left as they were)."""
    rack = state.rack
    reps = state.reps
    affected = [p for p, replicas in enumerate(reps) if any(r in gone for r in replicas)]
    affected.sort(key=lambda p: (-state.size[p], p))
    count, size_of, leaders = state.count, state.bytes, state.leaders
    n = len(targets)
    moving = sum(sum(1 for r in reps[p] if r in gone) for p in affected)
    count_mean = (sum(count[t] for t in targets) + moving) / n
    moving_bytes = sum(state.size[p] * sum(1 for r in reps[p] if r in gone) for p in affected)
    bytes_mean = (sum(size_of[t] for t in targets) + moving_bytes) / n
    count_weight = 1.0 / count_mean if count_mean else 0.0
    bytes_weight = 1.0 / bytes_mean if bytes_mean else 0.0

    def key(node: int) -> float:
        return count[node] * count_weight + size_of[node] * bytes_weight

    heaps: dict[str | None, list[tuple[float, int]]] = {}
    current: dict[int, float] = {}
    for t in targets:
        current[t] = key(t)
        heaps.setdefault(rack[t], []).append((current[t], t))
    for heap in heaps.values():
        heapq.heapify(heap)

    def least(rack_name: str | None, replicas: list[int]) -> tuple[float, int] | None:
        """The least loaded node of the rack that does not hold the partition."""
        heap = heaps[rack_name]
        aside = []
        found = None
        while heap:
            entry = heap[0]
            if current[entry[1]] != entry[0]:
                heapq.heappop(heap)  # stale
                continue
            if entry[1] in replicas:
                aside.append(heapq.heappop(heap))
                continue
            found = entry
            break
        for entry in aside:
            heapq.heappush(heap, entry)
        return found

    live_racks = len(heaps)
    short: list[int] = []
    lowered: list[int] = []
    skipped: list[int] = []
    for p in affected:
        replicas = reps[p]
        survivors = [r for r in replicas if r not in gone]
        if not survivors and not keep_racks:
            skipped.append(p)
            continue
        taken = sum(1 for r in survivors if r in current)  # targets holding it already
        if len(replicas) - len(survivors) > n - taken:
            short.append(p)
            continue
        racks_before = state.diversity(replicas)
        original = list(replicas)
        placed: dict[int, int] = {}
        for i, r in enumerate(original):
            if r not in gone:
                continue
            holding = [x for x in original if x not in gone] + list(placed.values())
            present = {rack[x] for x in holding}
            best: tuple[float, int] | None = None
            for rack_name in heaps:
                if rack_name in present:
                    continue
                found = least(rack_name, holding)
                if found is not None and (best is None or found < best):
                    best = found
            if best is None:
                for rack_name in heaps:
                    found = least(rack_name, holding)
                    if found is not None and (best is None or found < best):
                        best = found
            if best is None:  # cannot happen: the partition has no more replicas than targets
                break
            placed[i] = best[1]
        if len(placed) < len(original) - len(survivors):
            short.append(p)
            continue
        new = [placed.get(i, r) for i, r in enumerate(original)]
        racks_after = state.diversity(new)
        if keep_racks and racks_after < racks_before:
            lowered.append(p)
            continue
        if not keep_racks and racks_after < min(racks_before, live_racks):
            lowered.append(p)
        for i, dest in placed.items():
            state.move(p, original[i], dest)
            current[dest] = key(dest)
            heapq.heappush(heaps[rack[dest]], (current[dest], dest))
        if original[0] in gone:
            # the preferred leader went: the replica with the fewest leaderships leads (one
            # that may take leaderships, where there is one)
            heirs = [r for r in state.reps[p] if r in current] or state.reps[p]
            state.lead(p, min(heirs, key=lambda r: (leaders[r], r)))
    return short, lowered, skipped


# -- the plan -----------------------------------------------------------------------------------


def _spread(figures: Mapping[int, int], nodes: Sequence[int]) -> tuple[float, float]:
    if not nodes:
        return (1.0, 1.0)
    mean = sum(figures[n] for n in nodes) / len(nodes)
    if mean == 0:
        return (1.0, 1.0)
    values = [figures[n] / mean for n in nodes]
    return (min(values), max(values))


def _plan(
    state: _State,
    tolerance: float,
    counted_before: Sequence[int],
    counted_after: Sequence[int],
    gone: Collection[int],
    notes: Sequence[str] = (),
    skipped: Sequence[TopicPartition] = (),
) -> Plan:
    targets: dict[TopicPartition, tuple[int, ...]] = {}
    bytes_to_move = replica_moves = partitions_moved = leadership_changes = 0
    for p, replicas in enumerate(state.reps):
        new = tuple(replicas)
        old = state.original[p]
        if new == old:
            continue
        targets[state.keys[p]] = new
        added = len(set(new) - set(old))
        if added:
            replica_moves += added
            partitions_moved += 1
            bytes_to_move += added * state.size[p]
        else:
            leadership_changes += 1
    count0, leaders0, bytes0 = state.before
    figures = {
        n: NodeFigures(
            replicas_before=count0[n],
            replicas_after=state.count[n],
            leaders_before=leaders0[n],
            leaders_after=state.leaders[n],
            bytes_before=bytes0[n],
            bytes_after=state.bytes[n],
        )
        for n in sorted(state.rack)
    }
    before = Spread(
        _spread(count0, counted_before),
        _spread(leaders0, counted_before),
        _spread(bytes0, counted_before),
    )
    after = Spread(
        _spread(state.count, counted_after),
        _spread(state.leaders, counted_after),
        _spread(state.bytes, counted_after),
    )
    all_notes = list(notes)
    n = len(counted_after)
    met = not skipped and not any(state.count[g] for g in gone)
    for label, values, whole in (
        ("replicas", state.count, True),
        ("leaders", state.leaders, True),
        ("bytes", state.bytes, False),
    ):
        bands = _Bands(sum(values[x] for x in counted_after), n, tolerance, whole)
        outside = [x for x in counted_after if not bands.holds(values[x])]
        if outside:
            met = False
            worst = max(outside, key=lambda x: (abs(values[x] - bands.mean), -x))
            ratio = values[worst] / bands.mean if bands.mean else 0.0
            mean = f"{bands.mean / 1e9:,.1f} GB" if label == "bytes" else f"{bands.mean:,.1f}"
            all_notes.append(
                f"{label}: {len(outside)} of {n} nodes end outside ±{tolerance:.0%} of the mean "
                f"{mean} (node {worst} at {ratio:.2f}x)"
            )
        if label == "bytes" and outside and state.size:
            biggest = max(range(len(state.size)), key=lambda p: (state.size[p], -p))
            if state.size[biggest] > bands.high - bands.low:
                all_notes.append(
                    f"the largest partition, {state.name(biggest)}, is "
                    f"{state.size[biggest] / bands.mean:.2f}x a node's mean bytes, more than "
                    "the band is wide: the bytes goal may be out of reach"
                )
    if skipped:
        all_notes.append(f"{len(skipped)} partitions lost every replica and are left as they are")
    return Plan(
        targets=targets,
        bytes_to_move=bytes_to_move,
        replica_moves=replica_moves,
        partitions_moved=partitions_moved,
        leadership_changes=leadership_changes,
        goal_met=met,
        nodes=figures,
        before=before,
        after=after,
        tolerance=tolerance,
        notes=tuple(all_notes),
        skipped=tuple(skipped),
    )
