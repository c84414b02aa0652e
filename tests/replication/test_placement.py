"""The placement planners (replication.placement): new partitions, balance, decommission and
heal, as plain functions of a cluster's load; unit cases and hypothesis properties."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from replication.errors import InvalidReassignment, InvalidReplicationFactor
from replication.metadata import TopicPartition
from replication.placement import (
    ClusterLoad,
    PartitionLoad,
    Plan,
    assign_new,
    plan_balance,
    plan_decommission,
    plan_heal,
    rack_alternated,
)

GB = 10**9


def no_racks(n: int) -> dict[int, str | None]:
    return dict.fromkeys(range(n))


def racked(n: int, racks: int) -> dict[int, str | None]:
    return {node: f"rack-{node % racks}" for node in range(n)}


def created(
    racks: Mapping[int, str | None], partitions: int, rf: int, size: int = GB, topic: str = "t"
) -> dict[TopicPartition, PartitionLoad]:
    """A topic as the controller would create it on the nodes of `racks`."""
    return {
        (topic, p): PartitionLoad(replicas, size)
        for p, replicas in enumerate(assign_new(racks, 0, range(partitions), rf))
    }


def after(load: ClusterLoad, plan: Plan) -> dict[TopicPartition, tuple[int, ...]]:
    """Every partition's replicas once the plan is carried out."""
    return {
        key: plan.targets.get(key, partition.replicas) for key, partition in load.partitions.items()
    }


def figures(
    load: ClusterLoad, replicas: Mapping[TopicPartition, tuple[int, ...]]
) -> tuple[Counter[int], Counter[int], Counter[int]]:
    count: Counter[int] = Counter()
    leaders: Counter[int] = Counter()
    size: Counter[int] = Counter()
    for key, nodes in replicas.items():
        leaders[nodes[0]] += 1
        for node in nodes:
            count[node] += 1
            size[node] += load.partitions[key].size_bytes
    return count, leaders, size


def diversity(racks: Mapping[int, str | None], replicas: tuple[int, ...]) -> int:
    return len({racks.get(r, f"lost-{r}") for r in replicas})


def check_invariants(load: ClusterLoad, plan: Plan, gone: frozenset[int] = frozenset()) -> None:
    """What every plan keeps: replication factors, no repeated replica, known nodes, racks,
    and figures that add up."""
    final = after(load, plan)
    for key, replicas in plan.targets.items():
        old = load.partitions[key].replicas
        assert len(replicas) == len(old), key
        assert len(set(replicas)) == len(replicas), key
        assert replicas != old, key
        assert all(r in load.racks and r not in gone for r in replicas), key
        if not gone:
            assert diversity(load.racks, replicas) >= diversity(load.racks, old), key
    count, leaders, size = figures(load, final)
    for node, figs in plan.nodes.items():
        assert figs.replicas_after == count[node]
        assert figs.leaders_after == leaders[node]
        assert figs.bytes_after == size[node]
    added = {
        key: len(set(plan.targets[key]) - set(load.partitions[key].replicas))
        for key in plan.targets
    }
    assert plan.replica_moves == sum(added.values())
    assert plan.partitions_moved == sum(1 for n in added.values() if n)
    assert plan.leadership_changes == sum(1 for n in added.values() if not n)
    assert plan.bytes_to_move == sum(n * load.partitions[k].size_bytes for k, n in added.items())


# -- assign_new ---------------------------------------------------------------------------


def round_robin(nodes: list[int], start: int, partitions: range, rf: int) -> list[tuple[int, ...]]:
    """Partition p on nodes[(start + p + j) % n], j < rf: the placement before racks."""
    return [tuple(nodes[(start + p + j) % len(nodes)] for j in range(rf)) for p in partitions]


@given(
    nodes=st.lists(st.integers(0, 50), min_size=1, max_size=12, unique=True),
    start=st.integers(0, 100),
    first=st.integers(0, 30),
    count=st.integers(0, 40),
    data=st.data(),
)
def test_assign_new_without_racks_is_the_round_robin(
    nodes: list[int], start: int, first: int, count: int, data: st.DataObject
) -> None:
    rf = data.draw(st.integers(1, len(nodes)))
    partitions = range(first, first + count)
    expected = round_robin(sorted(nodes), start, partitions, rf)
    assert assign_new(dict.fromkeys(nodes), start, partitions, rf) == expected


def test_a_node_without_a_rack_turns_racks_off() -> None:
    mixed: dict[int, str | None] = {0: "a", 1: None, 2: "b", 3: "a"}
    assert assign_new(mixed, 1, range(8), 2) == round_robin([0, 1, 2, 3], 1, range(8), 2)
    # a balance may then put a partition's replicas in one rack
    partitions = {("t", p): PartitionLoad((0, 1), GB) for p in range(20)}
    plan = plan_balance(ClusterLoad(mixed, partitions))
    assert plan.goal_met
    assert any(set(replicas) == {0, 3} for replicas in plan.targets.values())


def test_rack_alternated_order() -> None:
    racks: dict[int, str | None] = {1: "b", 2: "a", 3: "a", 4: "c", 5: "b", 6: "a"}
    assert rack_alternated(racks) == [2, 1, 4, 3, 5, 6]
    assert rack_alternated(no_racks(3)) == [0, 1, 2]


@given(
    sizes=st.lists(st.integers(1, 6), min_size=1, max_size=4),
    start=st.integers(0, 50),
    data=st.data(),
)
def test_assign_new_spreads_racks_and_nodes(
    sizes: list[int], start: int, data: st.DataObject
) -> None:
    racks: dict[int, str | None] = {}
    for r, size in enumerate(sizes):
        for _ in range(size):
            racks[len(racks)] = f"rack-{r}"
    rf = data.draw(st.integers(1, len(racks)))
    partitions = 12 * len(racks)
    assigned = assign_new(racks, start, range(partitions), rf)
    counts: Counter[int] = Counter()
    leaders: Counter[int] = Counter(replicas[0] for replicas in assigned)
    for replicas in assigned:
        assert len(set(replicas)) == rf
        assert diversity(racks, replicas) == min(rf, len(sizes))
        counts.update(replicas)
    assert set(leaders.values()) == {12}  # every node leads as many
    if rf <= len(sizes):
        for r in range(len(sizes)):
            members = [counts[n] for n in racks if racks[n] == f"rack-{r}"]
            assert max(members) - min(members) <= 1, (r, members)


def test_assign_new_refuses_bad_input() -> None:
    with pytest.raises(InvalidReplicationFactor):
        assign_new(no_racks(3), 0, range(3), 4)
    with pytest.raises(InvalidReplicationFactor):
        assign_new(no_racks(3), 0, range(3), 0)
    with pytest.raises(InvalidReplicationFactor):
        assign_new(no_racks(3), 0, range(3), True)
    with pytest.raises(InvalidReassignment, match="integers"):
        assign_new({"0": "a"}, 0, range(3), 1)  # type: ignore[dict-item]
    with pytest.raises(InvalidReassignment, match="no node"):
        assign_new({}, 0, range(3), 1)


# -- plan_balance --------------------------------------------------------------------------


def grown(before: int, now: int, partitions: int, rf: int, racks: int = 0) -> ClusterLoad:
    """A cluster that grew from `before` nodes to `now`: the new ones hold nothing."""
    layout = (lambda n: racked(n, racks)) if racks else no_racks
    rng = random.Random(7)
    placed = created(layout(before), partitions, rf)
    sized = {
        key: PartitionLoad(p.replicas, rng.randrange(1, 100) * 10**6) for key, p in placed.items()
    }
    return ClusterLoad(layout(now), sized)


@pytest.mark.parametrize("racks", [0, 3])
def test_balance_fills_new_nodes_within_tolerance(racks: int) -> None:
    load = grown(9, 12, 600, 3, racks)
    plan = plan_balance(load)
    check_invariants(load, plan)
    assert plan.goal_met, plan.notes
    assert plan.after.worst() <= 0.10 + 1e-9
    assert plan.before.worst() == 1.0  # the new nodes held nothing
    for node in (9, 10, 11):
        assert plan.nodes[node].replicas_before == 0
        assert plan.nodes[node].replicas_after >= 0.9 * 150
    # only what the new nodes needed moved: every added replica went to a new node
    for key, replicas in plan.targets.items():
        assert set(replicas) - set(load.partitions[key].replicas) <= {9, 10, 11}
    # no more bytes than 5% above what the new nodes lacked to reach the band
    mean = sum(p.size_bytes * 3 for p in load.partitions.values()) / 12
    assert plan.bytes_to_move <= 1.05 * 3 * 0.9 * mean


def test_balance_of_a_balanced_cluster_is_empty() -> None:
    load = ClusterLoad(racked(6, 3), created(racked(6, 3), 60, 3))
    plan = plan_balance(load)
    assert plan.targets == {}
    assert plan.goal_met
    assert plan.bytes_to_move == plan.replica_moves == plan.leadership_changes == 0


def test_leadership_only_when_replicas_are_balanced() -> None:
    partitions = {("t", p): PartitionLoad((p % 3, (p + 1) % 3), GB) for p in range(30)}
    partitions = {
        key: PartitionLoad(tuple(sorted(p.replicas)), GB) for key, p in partitions.items()
    }
    load = ClusterLoad(no_racks(3), partitions)  # node 0 leads 20, node 1 leads 10, node 2 none
    plan = plan_balance(load)
    check_invariants(load, plan)
    assert plan.goal_met
    assert plan.replica_moves == plan.bytes_to_move == 0
    # node 0 hands over to node 2 (which leads none) until both are within the band: no more
    assert plan.leadership_changes == 9
    assert {n: f.leaders_after for n, f in plan.nodes.items()} == {0: 11, 1: 10, 2: 9}


def test_small_partitions_move_first_when_only_counts_are_off() -> None:
    # node 2 holds as many bytes as the others but in few big partitions: it takes small ones
    partitions: dict[TopicPartition, PartitionLoad] = {}
    for p in range(40):
        partitions[("small", p)] = PartitionLoad((p % 2,), 10**6)
    for p in range(2):
        partitions[("big", p)] = PartitionLoad((2,), 10 * 10**6)
    partitions[("mid", 0)] = PartitionLoad((0,), 50 * 10**6)
    partitions[("mid", 1)] = PartitionLoad((1,), 50 * 10**6)
    load = ClusterLoad(no_racks(3), partitions)
    plan = plan_balance(load, tolerance=0.25)
    check_invariants(load, plan)
    assert all(key[0] == "small" for key in plan.targets), plan.targets


def test_an_oversized_partition_gets_as_close_as_it_can_and_says_so() -> None:
    partitions = {("t", p): PartitionLoad((p % 4,), GB) for p in range(40)}
    partitions[("huge", 0)] = PartitionLoad((0,), 100 * GB)
    load = ClusterLoad(no_racks(4), partitions)
    plan = plan_balance(load)
    check_invariants(load, plan)
    assert not plan.goal_met
    assert any("huge-0" in note for note in plan.notes), plan.notes
    assert any(note.startswith("bytes:") for note in plan.notes)
    # the huge partition stays where it is (moving it helps nobody); node 0 sheds small ones
    assert ("huge", 0) not in plan.targets
    assert plan.nodes[0].bytes_after < plan.nodes[0].bytes_before


def test_excluded_nodes_neither_give_nor_take() -> None:
    load = grown(6, 8, 120, 2)
    plan = plan_balance(load, exclude={0, 7})
    check_invariants(load, plan)
    assert plan.goal_met, plan.notes
    for key, replicas in plan.targets.items():
        old = load.partitions[key].replicas
        assert (0 in replicas) == (0 in old) and 7 not in replicas
        if 0 in old:
            assert replicas.index(0) == old.index(0)
    assert plan.nodes[7].replicas_after == 0
    assert plan.nodes[0].replicas_after == plan.nodes[0].replicas_before


def test_plans_are_deterministic() -> None:
    load = grown(7, 9, 300, 3, racks=3)
    reordered = ClusterLoad(
        dict(reversed(list(load.racks.items()))), dict(reversed(list(load.partitions.items())))
    )
    assert plan_balance(load) == plan_balance(reordered)
    assert plan_decommission(load, 2) == plan_decommission(reordered, 2)
    assert plan_heal(load, {1, 4}) == plan_heal(reordered, {1, 4})


def test_bad_input_is_refused() -> None:
    racks = no_racks(3)
    with pytest.raises(InvalidReassignment, match="empty"):
        plan_balance(ClusterLoad(racks, {("t", 0): PartitionLoad(())}))
    with pytest.raises(InvalidReassignment, match="repeats a node"):
        plan_balance(ClusterLoad(racks, {("t", 0): PartitionLoad((1, 1))}))
    with pytest.raises(InvalidReassignment, match=r"nodes \[9\] are not in the cluster"):
        plan_balance(ClusterLoad(racks, {("t", 0): PartitionLoad((1, 9))}))
    with pytest.raises(InvalidReassignment, match="non-negative"):
        plan_balance(ClusterLoad(racks, {("t", 0): PartitionLoad((1,), -1)}))
    with pytest.raises(InvalidReassignment, match="not in the cluster"):
        plan_balance(ClusterLoad(racks, {}), exclude={5})
    with pytest.raises(InvalidReassignment, match="every node is excluded"):
        plan_balance(ClusterLoad(racks, {}), exclude={0, 1, 2})
    with pytest.raises(ValueError, match="tolerance"):
        plan_balance(ClusterLoad(racks, {}), tolerance=0)
    with pytest.raises(InvalidReassignment, match="no node"):
        plan_balance(ClusterLoad({}, {}))


# -- plan_decommission ---------------------------------------------------------------------


@pytest.mark.parametrize(("nodes", "racks"), [(10, 0), (30, 3)])
def test_decommission_empties_the_node_and_keeps_the_rest_balanced(nodes: int, racks: int) -> None:
    # (with racks, the node's rack keeps its share on one node fewer: 10 nodes a rack keep
    # that within 10% of the mean)
    layout = racked(nodes, racks) if racks else no_racks(nodes)
    load = ClusterLoad(layout, created(layout, 30 * nodes, 3))
    plan = plan_decommission(load, 4)
    check_invariants(load, plan)
    assert plan.goal_met, plan.notes
    assert plan.nodes[4].replicas_after == plan.nodes[4].leaders_after == 0
    assert plan.nodes[4].bytes_after == 0
    assert plan.replica_moves == plan.nodes[4].replicas_before == 90
    assert plan.bytes_to_move == plan.nodes[4].bytes_before
    for key, replicas in plan.targets.items():
        old = load.partitions[key].replicas
        assert 4 in old and 4 not in replicas
        assert set(old) - {4} <= set(replicas)
        if racks:
            # the new replica is on the rack of the one it replaces
            (new,) = set(replicas) - set(old)
            assert layout[new] == layout[4]


def test_decommission_refuses_what_cannot_be_done() -> None:
    with pytest.raises(InvalidReassignment, match="only node"):
        plan_decommission(ClusterLoad(no_racks(1), {("t", 0): PartitionLoad((0,))}), 0)
    with pytest.raises(InvalidReassignment, match="not in the cluster"):
        plan_decommission(ClusterLoad(no_racks(3), {}), 7)
    load = ClusterLoad(
        no_racks(3), created(no_racks(3), 4, 3) | created(no_racks(3), 3, 2, topic="u")
    )
    with pytest.raises(
        InvalidReassignment, match=r"4 partitions need more nodes.*t-0, t-1"
    ) as info:
        plan_decommission(load, 1)
    assert "u-" not in str(info.value)
    # node 6 is the only node of rack-c: the partitions with a replica there would lose a rack
    layout: dict[int, str | None] = {0: "a", 1: "b", 2: "a", 3: "b", 4: "a", 5: "b", 6: "c"}
    load = ClusterLoad(layout, created(layout, 14, 3))
    with pytest.raises(InvalidReassignment, match=r"last of rack 'c'.*14 partitions"):
        plan_decommission(load, 6)
    # with replication factor 2 its partitions can go to the rack they lack
    load = ClusterLoad(layout, created(layout, 14, 2))
    plan = plan_decommission(load, 6)
    check_invariants(load, plan)
    assert plan.nodes[6].replicas_after == 0


def test_decommission_of_an_empty_node_is_empty() -> None:
    load = ClusterLoad(no_racks(4), created(no_racks(3), 30, 2))
    plan = plan_decommission(load, 3)
    assert plan.targets == {} and plan.goal_met


# -- plan_heal -----------------------------------------------------------------------------


@pytest.mark.parametrize("racks", [0, 3])
def test_heal_restores_the_replication_factor_on_live_nodes(racks: int) -> None:
    layout = racked(9, racks) if racks else no_racks(9)
    load = ClusterLoad(layout, created(layout, 270, 3))
    plan = plan_heal(load, {2, 7})
    check_invariants(load, plan, gone=frozenset({2, 7}))
    if not racks:
        assert plan.goal_met, plan.notes
    else:
        # each rack keeps its share: rack-1 and rack-2 now have two nodes each, rack-0 three
        for members in ((1, 4), (5, 8), (0, 3, 6)):
            counts = [plan.nodes[n].replicas_after for n in members]
            assert max(counts) - min(counts) <= 1, counts
    final = after(load, plan)
    for key, replicas in final.items():
        assert 2 not in replicas and 7 not in replicas
        assert len(replicas) == 3
        old = load.partitions[key].replicas
        assert set(old) - {2, 7} <= set(replicas)
        if old[0] not in (2, 7):
            assert replicas[0] == old[0]  # a live preferred leader stays
        if racks:
            assert diversity(layout, replicas) == 3


def test_heal_leaves_partitions_with_every_replica_lost() -> None:
    partitions = created(no_racks(4), 8, 2)
    load = ClusterLoad(no_racks(4), partitions)
    plan = plan_heal(load, {0, 1})
    check_invariants(load, plan, gone=frozenset({0, 1}))
    assert plan.skipped == (("t", 0), ("t", 4))  # both on nodes 0 and 1
    assert not plan.goal_met
    assert ("t", 0) not in plan.targets and ("t", 4) not in plan.targets
    assert any("lost every replica" in note for note in plan.notes)


def test_heal_with_lost_nodes_the_rack_map_no_longer_names() -> None:
    layout = racked(6, 3)
    load = ClusterLoad(layout, created(layout, 60, 3))
    live = {n: r for n, r in layout.items() if n != 5}
    plan = plan_heal(ClusterLoad(live, load.partitions), {5})
    assert all(5 not in replicas for replicas in plan.targets.values())
    assert all(diversity(layout, r) == 3 for r in after(load, plan).values())
    assert plan.replica_moves == 30


def test_heal_and_decommission_leave_excluded_nodes_as_they_are() -> None:
    # node 3 is lost, node 5 down too but not given up (or shutting down): it keeps its
    # replicas and takes none
    layout = no_racks(8)
    load = ClusterLoad(layout, created(layout, 80, 3))
    for plan in (plan_heal(load, {3}, exclude={5}), plan_decommission(load, 3, exclude={5})):
        check_invariants(load, plan, gone=frozenset({3}))
        for key, replicas in plan.targets.items():
            old = load.partitions[key].replicas
            assert (5 in replicas) == (5 in old)
            if 5 in old:
                assert replicas.index(5) == old.index(5)  # not made the preferred leader
        assert plan.nodes[5].replicas_after == plan.nodes[5].replicas_before
        assert plan.nodes[3].replicas_after == 0
    # with 3 nodes, one lost and one excluded, node 2 is left: it can take node 0's replica of
    # (0, 1) but not of (2, 0)
    small = ClusterLoad(no_racks(3), created(no_racks(3), 6, 2))
    with pytest.raises(
        InvalidReassignment, match=r"replication factor of 2 partitions.*\(t-2, t-5\)"
    ):
        plan_heal(small, {0}, exclude={1})
    with pytest.raises(InvalidReassignment, match="not in the cluster"):
        plan_heal(small, {0}, exclude={9})


def test_heal_refuses_too_few_live_nodes() -> None:
    load = ClusterLoad(no_racks(3), created(no_racks(3), 6, 3))
    with pytest.raises(InvalidReassignment, match="replication factor of 6 partitions"):
        plan_heal(load, {0})
    with pytest.raises(InvalidReassignment, match="every node is lost"):
        plan_heal(load, {0, 1, 2})
    with pytest.raises(InvalidReassignment, match=r"nodes \[2\] are not in the cluster"):
        plan_heal(ClusterLoad(no_racks(2), load.partitions), {0})


# -- properties ----------------------------------------------------------------------------


@st.composite
def clusters(draw: st.DrawFn, equal: bool = False) -> ClusterLoad:
    """Random clusters: nodes with or without racks, partitions placed at random (rack rule
    or not), random sizes; `equal`: skew-free (equal sizes, racks of equal size, placement
    on distinct racks) and big enough that ±10% spans whole replicas."""
    rack_count = draw(st.sampled_from([0, 2, 3] if equal else [0, 1, 2, 3, 4]))
    if equal and rack_count:
        nodes = rack_count * draw(st.integers(1, 4))
    else:
        nodes = draw(st.integers(1, 10))
    layout = racked(nodes, rack_count) if rack_count else no_racks(nodes)
    rf = draw(st.integers(1, min(3, nodes, rack_count or 3) if equal else min(3, nodes)))
    if equal:
        count = draw(st.integers(10 * nodes // rf + 1, 12 * nodes))
        count = max(count, 10 * nodes + 1)
    else:
        count = draw(st.integers(0, 40))
    seed = draw(st.integers(0, 2**32))
    rng = random.Random(seed)
    by_rack: dict[str | None, list[int]] = {}
    for node, rack in layout.items():
        by_rack.setdefault(rack, []).append(node)
    partitions = {}
    for p in range(count):
        if equal and rack_count:
            chosen_racks = rng.sample(sorted(by_rack, key=str), rf)
            replicas = tuple(rng.choice(by_rack[r]) for r in chosen_racks)
        else:
            replicas = tuple(rng.sample(range(nodes), rf))
        size = GB if equal else rng.choice([0, 1, 10, 100, 1000]) * 10**6
        partitions[("t", p)] = PartitionLoad(replicas, size)
    return ClusterLoad(layout, partitions)


@settings(max_examples=100, deadline=None)
@given(load=clusters(), data=st.data())
def test_balance_keeps_the_invariants(load: ClusterLoad, data: st.DataObject) -> None:
    exclude = data.draw(st.sets(st.sampled_from(sorted(load.racks)), max_size=len(load.racks) - 1))
    plan = plan_balance(load, exclude=exclude)
    check_invariants(load, plan)
    for key, replicas in plan.targets.items():
        old = load.partitions[key].replicas
        for node in exclude:
            assert (node in replicas) == (node in old)
    assert plan_balance(load, exclude=exclude) == plan


@settings(max_examples=100, deadline=None)
@given(load=clusters(equal=True))
def test_balance_reaches_the_goal_on_skew_free_clusters(load: ClusterLoad) -> None:
    plan = plan_balance(load)
    check_invariants(load, plan)
    assert plan.goal_met, plan.notes
    final_count, final_leaders, _ = figures(load, after(load, plan))
    mean = sum(final_count.values()) / len(load.racks)
    assert all(0.9 * mean - 1 <= final_count[n] <= 1.1 * mean + 1 for n in load.racks)
    leaders_mean = len(load.partitions) / len(load.racks)
    assert all(
        0.9 * leaders_mean - 1 <= final_leaders[n] <= 1.1 * leaders_mean + 1 for n in load.racks
    )


@settings(max_examples=100, deadline=None)
@given(load=clusters(), data=st.data())
def test_decommission_leaves_nothing_on_the_node(load: ClusterLoad, data: st.DataObject) -> None:
    node = data.draw(st.sampled_from(sorted(load.racks)))
    try:
        plan = plan_decommission(load, node)
    except InvalidReassignment as refused:
        # refused only for the reasons it gives
        remaining = len(load.racks) - 1
        message = str(refused)
        rf_short = any(
            node in p.replicas and len(p.replicas) > remaining for p in load.partitions.values()
        )
        assert remaining == 0 or rf_short or "last of rack" in message, message
        return
    check_invariants(load, plan)
    assert plan.nodes[node].replicas_after == 0
    assert all(node not in replicas for replicas in after(load, plan).values())


@settings(max_examples=100, deadline=None)
@given(load=clusters(), data=st.data())
def test_heal_restores_every_replication_factor(load: ClusterLoad, data: st.DataObject) -> None:
    lost = data.draw(st.sets(st.sampled_from(sorted(load.racks)), max_size=len(load.racks)))
    live = len(load.racks) - len(lost)
    assume(all(len(p.replicas) <= live for p in load.partitions.values()))
    assume(live > 0)
    plan = plan_heal(load, lost)
    check_invariants(load, plan, gone=frozenset(lost))
    final = after(load, plan)
    for key, replicas in final.items():
        old = load.partitions[key].replicas
        if key in plan.skipped:
            assert set(old) <= lost and replicas == old
            continue
        assert not set(replicas) & lost
        assert len(replicas) == len(old)
        assert set(old) - lost <= set(replicas)


@settings(max_examples=100, deadline=None)
@given(load=clusters(), data=st.data())
def test_heal_keeps_excluded_nodes_as_they_are(load: ClusterLoad, data: st.DataObject) -> None:
    nodes = sorted(load.racks)
    lost = data.draw(st.sets(st.sampled_from(nodes), max_size=len(nodes)))
    exclude = data.draw(st.sets(st.sampled_from(nodes), max_size=len(nodes)))
    exclude -= lost
    targets = set(nodes) - lost - exclude
    try:
        plan = plan_heal(load, lost, exclude=exclude)
    except InvalidReassignment as refused:
        # refused only when some partition has fewer free nodes than replicas to replace
        assert not targets or any(
            set(p.replicas) & lost
            and set(p.replicas) - lost
            and len(set(p.replicas) & lost) > len(targets - set(p.replicas))
            for p in load.partitions.values()
        ), str(refused)
        return
    check_invariants(load, plan, gone=frozenset(lost))
    for key, replicas in after(load, plan).items():
        old = load.partitions[key].replicas
        assert set(old) & exclude == set(replicas) & exclude
        assert set(replicas) - set(old) <= targets
