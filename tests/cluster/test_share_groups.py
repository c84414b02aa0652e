"""Share groups on the three-node cluster: any node serves a share group's requests (forwarded
to its coordinator, the leader of its `__share_group_state` partition), and when the group
moves to another coordinator — its node SIGKILLed, its state partition reassigned away from
it, or its node stopped with SIGTERM (a controlled shutdown) — the next coordinator goes on
from what was answered: an accepted record never comes again, a held record stays its
member's until its lock lapses, then comes again with its delivery counted."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from gateway.workers.local_cluster import LocalCluster
from tests.cluster.conftest import own_cluster
from tests.cluster.harness import NO_LEADER, SETTLE_S, Cluster, PartitionState, wait_for
from tests.cluster.test_cluster import leader_state, new_topic, produce_until_ok
from tests.cluster.test_controlled_shutdown import terminate
from tests.cluster.test_reassignment import done, start_plan

STATE_TOPIC = "__share_group_state"
LOCK_MS = 15_000  # outlives the coordinator's move, so held records are still held after it
SKEW_MS = 5  # between the clocks of processes on one machine
Key = tuple[int, int]  # (partition, offset)


def call(cluster: Cluster, node: int, method: str, path: str, **kwargs: Any) -> Any:
    """A share-group request through `node`, retried while the cluster moves its coordinator
    (503, 421) or the node does not answer; the answer's JSON."""

    def attempt() -> Any:
        response = cluster.http.request(method, f"{cluster.url(node)}{path}", timeout=10, **kwargs)
        if response.status_code in (421, 503, 504):
            return None
        assert response.status_code < 300, (method, path, response.status_code, response.text)
        return response.json() if response.content else {}

    return wait_for(attempt, SETTLE_S, f"{method} {path} through node {node}", 0.1)


def acquire(
    cluster: Cluster, node: int, group: str, member: str, max_records: int = 20
) -> list[dict[str, Any]]:
    path = f"/v1/share-groups/{group}/members/{member}/acquire"
    params = {"max_records": max_records, "timeout_ms": 1000}
    records: list[dict[str, Any]] = call(cluster, node, "POST", path, params=params)["records"]
    return records


def acknowledge(
    cluster: Cluster,
    node: int,
    group: str,
    member: str,
    records: list[dict[str, Any]],
    kind: str = "accept",
) -> list[str]:
    body = {"acknowledgements": [{"token": r["token"], "type": kind} for r in records]}
    path = f"/v1/share-groups/{group}/members/{member}/acknowledge"
    doc = call(cluster, node, "POST", path, json=body)
    return [r["status"] for r in doc["results"]]


def keys(records: list[dict[str, Any]]) -> set[Key]:
    return {(r["partition"], r["offset"]) for r in records}


def share_topic(cluster: Cluster, records_per_partition: int) -> str:
    """A topic of two partitions, each on every node, holding `records_per_partition` records
    each."""
    topic = new_topic("queue")
    cluster.create_topic(topic, 2)
    cluster.wait_topic_everywhere(topic)
    for p in range(2):
        values = list(range(records_per_partition))
        produce_until_ok(cluster, [0, 1, 2], topic, p, values, f"{topic}-{p}")
    return topic


def new_group(cluster: Cluster, via: int, lock_ms: int) -> str:
    group = new_topic("workers")
    configs = {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": lock_ms}
    call(cluster, via, "PUT", f"/v1/share-groups/{group}/configs", json={"configs": configs})
    return group


def join(cluster: Cluster, node: int, group: str, topic: str, member: str) -> None:
    body = {"topics": [topic], "member_id": member}
    call(cluster, node, "POST", f"/v1/share-groups/{group}/members", json=body)


def test_members_on_every_node_share_the_records_each_accepted_once(healthy: Cluster) -> None:
    """Three members, each calling another node (one of them the coordinator's), take the
    records in small acquires: none is handed to two of them, a record one member releases
    goes to another with its second delivery, and acknowledgements sent through a node other
    than the acquire's take effect; every node then describes the group as done."""
    cluster = healthy
    topic = share_topic(cluster, 15)
    group = new_group(cluster, 1, 30_000)
    members = {node: f"m{node}" for node in range(cluster.size)}
    for node, member in members.items():
        join(cluster, node, group, topic, member)

    delivered: dict[Key, list[tuple[int, int]]] = {}  # -> (node, delivery count), in order
    accepted: set[Key] = set()
    released = False
    deadline = time.monotonic() + SETTLE_S
    while len(accepted) < 30 and time.monotonic() < deadline:
        for node, member in members.items():
            got = acquire(cluster, node, group, member, max_records=3)
            for r in got:
                delivered.setdefault((r["partition"], r["offset"]), []).append(
                    (node, r["delivery_count"])
                )
            assert not keys(got) & accepted, "an accepted record came again"
            other = (node + 1) % cluster.size
            if got and not released:
                # Given back through another node: the next member may take it at once.
                assert acknowledge(cluster, other, group, member, got[:1], "release") == ["ok"]
                released, got = True, got[1:]
            statuses = acknowledge(cluster, other, group, member, got) if got else []
            assert statuses == ["ok"] * len(got)
            accepted |= keys(got)
    assert accepted == {(p, o) for p in range(2) for o in range(15)}
    again = {key: seen for key, seen in delivered.items() if len(seen) > 1}
    assert len(again) == 1, again
    ((first, second),) = again.values()
    assert first[1] == 1 and second[1] == 2
    assert {node for seen in delivered.values() for node, _ in seen} == set(members)
    for node in range(cluster.size):
        described = call(cluster, node, "GET", f"/v1/share-groups/{group}")
        assert described["lag"] == 0
        assert sorted(p["start_offset"] for p in described["partitions"]) == [15, 15]
        assert sorted(m["member_id"] for m in described["members"]) == sorted(members.values())


def new_coordinator(cluster: Cluster, old: PartitionState) -> PartitionState:
    return cluster.wait_state(
        STATE_TOPIC,
        0,
        lambda s: s.leader not in (NO_LEADER, old.leader) and s.leader_epoch > old.leader_epoch,
        f"a coordinator other than node {old.leader}",
    )


def held_across_a_move(cluster: Cluster, move: Callable[[PartitionState], None]) -> None:
    """A member holds records while `move` takes the group to another coordinator: what it
    accepted before never comes again; what it holds stays its own (nobody else acquires it,
    and it accepts some of it through the new coordinator) until each lock's deadline, then
    comes again with its second delivery."""
    topic = share_topic(cluster, 10)
    # The cluster's first share-group call creates the state topic: the group comes first.
    group = new_group(cluster, 0, LOCK_MS)
    state = leader_state(cluster, STATE_TOPIC)
    others = [n for n in range(cluster.size) if n != state.leader]
    # Each member talks to a node that is not the coordinator: its requests are forwarded.
    members = {n: f"m{n}" for n in others}
    for node, member in members.items():
        join(cluster, node, group, topic, member)

    delivered: dict[Key, list[dict[str, Any]]] = {}
    accepted: set[Key] = set()

    def take(node: int) -> list[dict[str, Any]]:
        got = acquire(cluster, node, group, members[node])
        for r in got:
            delivered.setdefault((r["partition"], r["offset"]), []).append(r)
        return got

    first = take(others[0])
    assert len(first) == 20 and len(keys(first)) == 20
    done_before, held = first[:8], first[8:]
    assert acknowledge(cluster, others[1], group, members[others[0]], done_before) == ["ok"] * 8
    accepted |= keys(done_before)

    move(state)
    assert leader_state(cluster, STATE_TOPIC).leader != state.leader
    # The held records are still the first member's: nobody else gets them while the locks
    # hold, and it can still accept some of them through the new coordinator.
    assert take(others[1]) == []
    assert acknowledge(cluster, others[1], group, members[others[0]], held[:4]) == ["ok"] * 4
    accepted |= keys(held[:4])

    # Once the locks lapse the rest comes again, its first delivery counted.
    deadline = time.monotonic() + SETTLE_S
    while len(accepted) < 20 and time.monotonic() < deadline:
        got = take(others[1])
        if not got:
            continue
        assert not keys(got) & accepted, "an accepted record came again"
        assert acknowledge(cluster, others[0], group, members[others[1]], got) == ["ok"] * len(got)
        accepted |= keys(got)
    assert len(accepted) == 20
    again = {key: seen for key, seen in delivered.items() if len(seen) > 1}
    assert set(again) == keys(held[4:])
    for before, after in again.values():
        assert (before["delivery_count"], after["delivery_count"]) == (1, 2)
        # Delivered again no sooner than the first lock's deadline (the second lock began at
        # the acquire that took it).
        taken_at = after["lock_expires_at"] - LOCK_MS
        assert taken_at >= before["lock_expires_at"] - SKEW_MS, (before, after)
    described = call(cluster, others[0], "GET", f"/v1/share-groups/{group}")
    assert described["lag"] == 0
    assert sorted(p["start_offset"] for p in described["partitions"]) == [10, 10]


def test_a_share_group_survives_its_coordinators_death_with_nothing_accepted_delivered_again(
    healthy: Cluster,
) -> None:
    def kill(state: PartitionState) -> None:
        healthy.kill(state.leader)
        new_coordinator(healthy, state)

    held_across_a_move(healthy, kill)


def test_a_share_group_moves_with_its_reassigned_state_partition(healthy: Cluster) -> None:
    """The state partition reassigned off its leader's node (a shrink to the two others: the
    move's completion elects one of them); then grown back onto all three."""
    cluster = healthy
    staying: tuple[int, ...] = ()

    def reassign(state: PartitionState) -> None:
        nonlocal staying
        staying = tuple(r for r in state.replicas if r != state.leader)
        via = staying[0]
        plan = [{"topic": STATE_TOPIC, "partition": 0, "replicas": list(staying)}]
        response = start_plan(cluster, via, plan)
        assert response.status_code == 202, response.text
        done(cluster, STATE_TOPIC, staying)
        new_coordinator(cluster, state)

    try:
        held_across_a_move(cluster, reassign)
    finally:
        if staying:
            back = (*staying, next(n for n in range(cluster.size) if n not in staying))
            plan = [{"topic": STATE_TOPIC, "partition": 0, "replicas": list(back)}]
            wait_for(
                lambda: start_plan(cluster, staying[0], plan).status_code == 202,
                SETTLE_S,
                "the state partition put back on every node",
            )
            done(cluster, STATE_TOPIC, back)


def test_a_share_group_moves_with_its_coordinators_controlled_shutdown(
    healthy: Cluster,
) -> None:
    """SIGTERM: the node hands its leadership of the state partition over before it exits."""

    def shut_down(state: PartitionState) -> None:
        terminate(healthy, state.leader)
        new_coordinator(healthy, state)

    held_across_a_move(healthy, shut_down)


@pytest.fixture
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A cluster of its own, on which no share group was ever used (no state topic yet)."""
    with own_cluster(
        tmp_path_factory, 3, "--lease-ttl", "2", "--offsets-topic-partitions", "1"
    ) as cluster:
        yield cluster


def test_the_first_share_group_request_through_a_node_that_is_not_the_controller(
    fresh: LocalCluster,
) -> None:
    """Only the controller makes `__share_group_state`: the node the first request reaches
    sends it there, and routes it again if the group's coordinator is another node (a 503 on
    the way is the cluster settling: asked again)."""
    with httpx.Client(timeout=30.0) as http:
        controller = http.get(fresh.nodes[0].url + "/v1/cluster").json()["controller"]
        via = next(node for node in fresh.nodes if node.node_id != controller)
        body = {"configs": {"share.auto.offset.reset": "earliest"}}

        def attempt() -> httpx.Response | None:
            response = http.put(f"{via.url}/v1/share-groups/first/configs", json=body)
            return None if response.status_code == 503 else response

        answer = wait_for(attempt, SETTLE_S, "the first share-group request", 0.1)
        assert answer.status_code == 200, answer.text
        assert http.get(f"{via.url}/v1/topics/{STATE_TOPIC}").status_code == 200


def test_the_state_topic_answers_only_what_two_in_sync_replicas_hold(healthy: Cluster) -> None:
    """`__share_group_state` is made with min.insync.replicas 2 (Kafka's
    share.coordinator.state.topic.min.isr), where `__consumer_offsets` keeps the default: with
    the state partition's leader alone in its ISR, a share-group change is refused (503), not
    answered from one copy, and taken once the followers are back in sync."""
    cluster = healthy
    topic = share_topic(cluster, 1)
    group = new_group(cluster, 0, LOCK_MS)
    assert cluster.describe(0, STATE_TOPIC)["overrides"]["min.insync.replicas"] == 2
    assert "min.insync.replicas" not in cluster.describe(0, "__consumer_offsets")["overrides"]
    state = leader_state(cluster, STATE_TOPIC)
    # The leader has replayed the partition (a leadership a test before moved is replayed once
    # its followers caught up): the refusal below is for the missing replicas alone.
    call(cluster, state.leader, "GET", f"/v1/share-groups/{group}")
    for node in range(cluster.size):
        if node != state.leader:
            cluster.pause(node)
    cluster.wait_state(STATE_TOPIC, 0, lambda s: s.isr == (state.leader,), "the leader alone")
    end_before = cluster.describe(state.leader, STATE_TOPIC)["partitions"][0]["log_end_offset"]
    path = f"{cluster.url(state.leader)}/v1/share-groups/{group}/members"
    refused = cluster.http.post(path, json={"topics": [topic], "member_id": "alone"}, timeout=10)
    assert refused.status_code == 503, refused.text
    assert refused.json()["code"] == "NOT_ENOUGH_REPLICAS", refused.text
    ended = cluster.describe(state.leader, STATE_TOPIC)["partitions"][0]["log_end_offset"]
    assert ended == end_before  # refused before it was written, as Kafka refuses it
    cluster.heal()
    cluster.wait_state(STATE_TOPIC, 0, lambda s: len(s.isr) >= 2, "a follower back in sync")
    join(cluster, state.leader, group, topic, "back")
