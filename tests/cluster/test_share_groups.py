"""Share groups on the three-node cluster: any node serves a share group's requests (forwarded
to its coordinator, the leader of its `__share_group_state` partition), and when that node is
killed the next coordinator goes on from what was answered: an accepted record never comes
again, a held record stays its member's until its lock lapses, then comes again with its
delivery counted."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gateway.workers.local_cluster import LocalCluster
from tests.cluster.conftest import WORKDIR_MARKER
from tests.cluster.harness import NO_LEADER, SETTLE_S, Cluster, wait_for
from tests.cluster.test_cluster import leader_state, new_topic, produce_until_ok

STATE_TOPIC = "__share_group_state"
LOCK_MS = 15_000  # outlives the coordinator's failover, so held records are still held after it


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


def acquire(cluster: Cluster, node: int, group: str, member: str) -> list[dict[str, Any]]:
    path = f"/v1/share-groups/{group}/members/{member}/acquire"
    doc = call(cluster, node, "POST", path, params={"max_records": 20, "timeout_ms": 1000})
    records: list[dict[str, Any]] = doc["records"]
    return records


def acknowledge(
    cluster: Cluster, node: int, group: str, member: str, records: list[dict[str, Any]]
) -> list[str]:
    body = {"acknowledgements": [{"token": r["token"], "type": "accept"} for r in records]}
    path = f"/v1/share-groups/{group}/members/{member}/acknowledge"
    doc = call(cluster, node, "POST", path, json=body)
    return [r["status"] for r in doc["results"]]


def test_a_share_group_survives_its_coordinators_death_with_nothing_accepted_delivered_again(
    healthy: Cluster,
) -> None:
    cluster = healthy
    topic = new_topic("queue")
    group = new_topic("workers")
    cluster.create_topic(topic, 2)
    cluster.wait_topic_everywhere(topic)
    for p in range(2):
        produce_until_ok(cluster, [0, 1, 2], topic, p, list(range(10)), f"{topic}-{p}")
    configs = {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": LOCK_MS}
    call(cluster, 0, "PUT", f"/v1/share-groups/{group}/configs", json={"configs": configs})
    state = leader_state(cluster, STATE_TOPIC)
    coordinator = state.leader
    others = [n for n in range(cluster.size) if n != coordinator]
    # Each member talks to a node that is not the coordinator: its requests are forwarded.
    members = {n: f"m{n}" for n in others}
    for node, member in members.items():
        joined = {"topics": [topic], "member_id": member}
        call(cluster, node, "POST", f"/v1/share-groups/{group}/members", json=joined)

    delivered: dict[tuple[int, int], list[int]] = {}  # (partition, offset) -> delivery counts
    accepted: set[tuple[int, int]] = set()

    def take(node: int) -> list[dict[str, Any]]:
        got = acquire(cluster, node, group, members[node])
        for r in got:
            delivered.setdefault((r["partition"], r["offset"]), []).append(r["delivery_count"])
        return got

    first = take(others[0])
    assert len(first) == 20 and len({(r["partition"], r["offset"]) for r in first}) == 20
    done, held = first[:8], first[8:]
    assert acknowledge(cluster, others[1], group, members[others[0]], done) == ["ok"] * 8
    accepted |= {(r["partition"], r["offset"]) for r in done}

    cluster.kill(coordinator)
    wait_for(
        lambda: (
            (s := cluster.etcd.partition(STATE_TOPIC, 0)) is not None
            and s.leader not in (NO_LEADER, coordinator)
        ),
        SETTLE_S,
        "a new coordinator",
    )
    # The held records are still the first member's: nobody else gets them while the locks
    # hold, and it can still accept some of them through the new coordinator.
    assert take(others[1]) == []
    assert acknowledge(cluster, others[1], group, members[others[0]], held[:4]) == ["ok"] * 4
    accepted |= {(r["partition"], r["offset"]) for r in held[:4]}

    # Once the locks lapse the rest comes again, its first delivery counted.
    deadline = time.monotonic() + SETTLE_S
    while len(accepted) < 20 and time.monotonic() < deadline:
        got = take(others[1])
        if not got:
            continue
        assert not {(r["partition"], r["offset"]) for r in got} & accepted, "accepted came again"
        assert acknowledge(cluster, others[0], group, members[others[1]], got) == ["ok"] * len(got)
        accepted |= {(r["partition"], r["offset"]) for r in got}
    assert len(accepted) == 20
    again = {key: counts for key, counts in delivered.items() if len(counts) > 1}
    assert set(again) == {(r["partition"], r["offset"]) for r in held[4:]}
    assert all(counts == [1, 2] for counts in again.values())
    described = call(cluster, others[0], "GET", f"/v1/share-groups/{group}")
    assert described["lag"] == 0
    assert sorted(p["start_offset"] for p in described["partitions"]) == [10, 10]
    cluster.restart(coordinator)


@pytest.fixture
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A cluster of its own, on which no share group was ever used (no state topic yet)."""
    workdir = tmp_path_factory.mktemp(f"{WORKDIR_MARKER}-{os.getpid()}-")  # reaped if orphaned
    options = ("--lease-ttl", "2", "--offsets-topic-partitions", "1")
    cluster = LocalCluster(workdir, 3, node_options=options)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def test_the_first_share_group_request_through_a_node_that_is_not_the_controller(
    fresh: LocalCluster,
) -> None:
    """Only the controller makes `__share_group_state`: the node the first request reaches
    sends it there (a 421 or 503 on the way is the cluster settling: asked again)."""
    with httpx.Client(timeout=30.0) as http:
        controller = http.get(fresh.nodes[0].url + "/v1/cluster").json()["controller"]
        via = next(node for node in fresh.nodes if node.node_id != controller)
        body = {"configs": {"share.auto.offset.reset": "earliest"}}

        def attempt() -> httpx.Response | None:
            response = http.put(f"{via.url}/v1/share-groups/first/configs", json=body)
            return None if response.status_code in (421, 503) else response

        answer = wait_for(attempt, SETTLE_S, "the first share-group request", 0.1)
        assert answer.status_code == 200, answer.text
        assert http.get(f"{via.url}/v1/topics/{STATE_TOPIC}").status_code == 200
