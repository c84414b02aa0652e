"""Transactions on the three-node cluster: any node serves a transaction's calls (forwarded to
its coordinator, the leader of its `__transaction_state` partition), a transaction writes to
partitions led by every node and its markers reach each of them, and a transaction outlives
its coordinator's death: the next coordinator commits what its producer commits, and nothing
of an aborted one is ever read committed."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from engine.offsets_topic import partition_for
from gateway.workers.local_cluster import LocalCluster
from tests.cluster.conftest import own_cluster
from tests.cluster.harness import SETTLE_S, Cluster, wait_for
from tests.cluster.test_cluster import leader_state, new_topic
from tests.cluster.test_share_groups import call

STATE_TOPIC = "__transaction_state"


def records(cluster: Cluster, node: int, topic: str, partition: int) -> list[Any]:
    """The values a read_committed reader sees now, read through `node`."""
    params = {"isolation": "read_committed", "timeout_ms": 0, "max_records": 1000}
    path = f"/v1/topics/{topic}/partitions/{partition}/records"
    doc = call(cluster, node, "GET", path, params=params)
    return [r["value"] for r in doc["records"]]


def begin(cluster: Cluster, node: int, tid: str) -> int:
    doc = call(cluster, node, "POST", f"/v1/transactions/{tid}", json={"timeout_ms": 60_000})
    assert doc["state"] == "Ongoing"
    epoch: int = doc["producer_epoch"]
    return epoch


def produce(
    cluster: Cluster, node: int, tid: str, epoch: int, topic: str, values: list[Any]
) -> None:
    body = {"records": [{"value": v, "partition": p} for p, v in enumerate(values)]}
    params = {"transactional_id": tid, "producer_epoch": epoch}
    call(cluster, node, "POST", f"/v1/topics/{topic}/records", params=params, json=body)


def end(cluster: Cluster, node: int, tid: str, how: str, epoch: int) -> dict[str, Any]:
    doc: dict[str, Any] = call(
        cluster, node, "POST", f"/v1/transactions/{tid}/{how}", json={"producer_epoch": epoch}
    )
    return doc


def coordinator_partition(cluster: Cluster, tid: str) -> int:
    """The `__transaction_state` partition of `tid` (the cluster's partition count of it)."""
    return partition_for(tid, len(cluster.describe(0, STATE_TOPIC)["partitions"]))


def spread_topic(cluster: Cluster) -> str:
    """A topic of three partitions led by more than one node."""
    topic = new_topic("txn")
    cluster.create_topic(topic, 3)
    cluster.wait_topic_everywhere(topic)
    leaders = {leader_state(cluster, topic, p).leader for p in range(3)}
    assert len(leaders) > 1, leaders
    return topic


def test_a_transaction_over_partitions_led_by_every_node_commits_together(
    healthy: Cluster,
) -> None:
    """Begun through one node, produced through another, committed through the third: every
    partition's records become read committed together, read through any node."""
    cluster = healthy
    topic = spread_topic(cluster)
    epoch = begin(cluster, 0, "everywhere")
    produce(cluster, 1, "everywhere", epoch, topic, ["a", "b", "c"])
    for p in range(3):
        assert records(cluster, 2, topic, p) == []
    done = end(cluster, 2, "everywhere", "commit", epoch)
    assert done["state"] == "CompleteCommit"
    for node in range(3):
        assert [records(cluster, node, topic, p) for p in range(3)] == [["a"], ["b"], ["c"]]
    epoch = begin(cluster, 1, "everywhere")
    produce(cluster, 0, "everywhere", epoch, topic, ["x", "y", "z"])
    assert end(cluster, 0, "everywhere", "abort", epoch)["state"] == "CompleteAbort"
    assert [records(cluster, 2, topic, p) for p in range(3)] == [["a"], ["b"], ["c"]]


def test_a_transaction_outlives_its_coordinators_death(healthy: Cluster) -> None:
    """The coordinator is SIGKILLed with a transaction open: the next coordinator knows it
    (its epoch, its partitions), the producer's commit through it makes every record read
    committed, and a zombie of the previous epoch stays fenced."""
    cluster = healthy
    topic = spread_topic(cluster)
    tid = "survivor"
    epoch = begin(cluster, 0, tid)
    partition = coordinator_partition(cluster, tid)
    state = leader_state(cluster, STATE_TOPIC, partition)
    others = [n for n in range(cluster.size) if n != state.leader]
    produce(cluster, others[1], tid, epoch, topic, ["p0", "p1", "p2"])
    cluster.kill(state.leader)
    moved = new_coordinator_of(cluster, partition, state)
    assert moved.leader in others
    described = call(cluster, others[1], "GET", f"/v1/transactions/{tid}")
    assert (described["state"], described["producer_epoch"]) == ("Ongoing", epoch)
    assert len(described["partitions"]) == 3
    assert end(cluster, others[0], tid, "commit", epoch)["state"] == "CompleteCommit"

    def all_read() -> bool | None:
        got = [records(cluster, others[1], topic, p) for p in range(3)]
        return got == [["p0"], ["p1"], ["p2"]] or None

    wait_for(all_read, SETTLE_S, "the committed records, read committed", 0.1)
    next_epoch = begin(cluster, others[1], tid)
    assert next_epoch > epoch

    def zombie() -> dict[str, Any] | None:
        response = cluster.post(
            others[0],
            f"/v1/topics/{topic}/records",
            params={"transactional_id": tid, "producer_epoch": epoch},
            json={"records": [{"value": "zombie", "partition": 0}]},
        )
        if response.status_code in (421, 503, 504):
            return None  # the cluster is still settling: ask again
        found: dict[str, Any] = response.json()
        return {"status": response.status_code, **found}

    refused = wait_for(zombie, SETTLE_S, "the zombie's produce answered", 0.1)
    assert (refused["status"], refused["code"]) == (409, "PRODUCER_FENCED")


def test_the_state_topic_answers_only_what_two_in_sync_replicas_hold(healthy: Cluster) -> None:
    """`__transaction_state` is made with min.insync.replicas 2 (Kafka's
    transaction.state.log.min.isr): with the id's state partition's leader alone in its ISR, a
    begin is refused (503) before anything is written, not answered from one copy that a
    failover could lose, and taken once the followers are back in sync."""
    cluster = healthy
    tid = "two-copies"
    begin(cluster, 0, tid)  # the state topic made
    assert cluster.describe(0, STATE_TOPIC)["overrides"]["min.insync.replicas"] == 2
    partition = coordinator_partition(cluster, tid)
    state = leader_state(cluster, STATE_TOPIC, partition)
    for node in range(cluster.size):
        if node != state.leader:
            cluster.pause(node)
    cluster.wait_state(STATE_TOPIC, partition, lambda s: s.isr == (state.leader,), "leader alone")

    def log_end() -> int:
        rows = cluster.describe(state.leader, STATE_TOPIC)["partitions"]
        end: int = next(r["log_end_offset"] for r in rows if r["partition"] == partition)
        return end

    end_before = log_end()
    path = f"{cluster.url(state.leader)}/v1/transactions/{tid}"
    refused = cluster.http.post(path, json={}, timeout=10)
    assert refused.status_code == 503, refused.text
    assert refused.json()["code"] == "NOT_ENOUGH_REPLICAS", refused.text
    assert log_end() == end_before  # refused before it was written, as Kafka refuses it
    cluster.heal()
    cluster.wait_state(STATE_TOPIC, partition, lambda s: len(s.isr) >= 2, "a follower in sync")
    assert begin(cluster, state.leader, tid) > 0


def new_coordinator_of(cluster: Cluster, partition: int, old: Any) -> Any:
    """The state partition `partition` led by a node other than `old`'s (its partition asked
    before the old one was stopped: node 0 may be the one)."""
    return cluster.wait_state(
        STATE_TOPIC,
        partition,
        lambda s: s.leader != old.leader and s.leader >= 0 and s.leader_epoch > old.leader_epoch,
        f"a coordinator of {STATE_TOPIC}-{partition} other than node {old.leader}",
    )


def test_a_call_run_again_after_its_coordinators_death_keeps_its_body(healthy: Cluster) -> None:
    """A node forwarding a call to a coordinator it then finds dead waits for the next one
    and runs the call again, with the body it was sent: the commit's epoch (not refused as
    lacking it), the begin's timeout (not the default one)."""
    cluster = healthy
    topic = spread_topic(cluster)
    tid = "run-again"
    epoch = begin(cluster, 0, tid)
    produce(cluster, 0, tid, epoch, topic, ["a", "b", "c"])
    partition = coordinator_partition(cluster, tid)
    for how in ("commit", "begin"):
        state = leader_state(cluster, STATE_TOPIC, partition)
        other = next(n for n in range(cluster.size) if n != state.leader)
        cluster.kill(state.leader)  # its lease still runs: the others' views route to it
        if how == "commit":
            assert end(cluster, other, tid, "commit", epoch)["state"] == "CompleteCommit"
        else:
            body = {"timeout_ms": 45_000}
            doc = call(cluster, other, "POST", f"/v1/transactions/{tid}", json=body)
            assert (doc["state"], doc["timeout_ms"]) == ("Ongoing", 45_000)
        cluster.heal()
        cluster.wait_state(
            STATE_TOPIC,
            partition,
            lambda s: len(s.isr) == cluster.size,
            "every replica back in the ISR",
        )


@pytest.fixture
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A cluster of its own on which no transaction was ever begun (no state topic yet), the
    topic's partitions led by every node."""
    with own_cluster(
        tmp_path_factory, 3, "--lease-ttl", "2", "--offsets-topic-partitions", "12"
    ) as cluster:
        yield cluster


def test_the_first_begins_through_a_node_that_is_not_the_controller(fresh: LocalCluster) -> None:
    """Only the controller makes `__transaction_state`: begins sent at once through another
    node go there, and while the topic's coordinators become known on every node the answer
    is 201, or 503 COORDINATOR_NOT_AVAILABLE with Retry-After (asked again), never a
    misdirected 421; asked again, each begins."""
    with httpx.Client(timeout=30.0) as http:
        controller = http.get(fresh.nodes[0].url + "/v1/cluster").json()["controller"]
        via = next(node for node in fresh.nodes if node.node_id != controller)
        ids = [f"first-{i}" for i in range(12)]

        def begin_through(tid: str) -> httpx.Response:
            return http.post(f"{via.url}/v1/transactions/{tid}", json={"timeout_ms": 60_000})

        with ThreadPoolExecutor(len(ids)) as pool:
            first = list(pool.map(begin_through, ids))
        for tid, answer in zip(ids, first, strict=True):
            if answer.status_code == 201:
                continue
            assert answer.status_code == 503, (tid, answer.status_code, answer.text)
            assert answer.headers["content-type"] == "application/problem+json"
            assert answer.headers["retry-after"] == "1"
            assert answer.json()["code"] == "COORDINATOR_NOT_AVAILABLE", answer.text

            def again(tid: str = tid) -> httpx.Response | None:
                answer = begin_through(tid)
                return None if answer.status_code == 503 else answer

            begun = wait_for(again, SETTLE_S, f"the begin of {tid}", 0.1)
            assert begun.status_code == 201, begun.text
