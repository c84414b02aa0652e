"""Focused, deterministic tests of the real cluster: three node processes and etcd, driven
through HTTP like any client, faulted with SIGKILL and SIGSTOP/SIGCONT, checked through the
nodes' answers, the partition states in etcd and the replicas' logs on disk.

Every wait polls a condition against a deadline; nothing asserts on timing."""

from __future__ import annotations

import itertools
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from gateway.workers.local_cluster import LocalCluster
from tests.cluster.conftest import WORKDIR_MARKER
from tests.cluster.harness import (
    NO_LEADER,
    SETTLE_S,
    Cluster,
    PartitionState,
    wait_for,
)
from tests.cluster.netfaults import LinkFault, ProxyTopology

_names = itertools.count()


def new_topic(prefix: str) -> str:
    return f"{prefix}-{int(time.time() * 1000) % 10**8}-{next(_names)}"


def produce(
    cluster: Cluster,
    node: int,
    topic: str,
    partition: int | None,
    values: list[Any],
    *,
    acks: str = "all",
    key: str | None = None,
    timeout_ms: int = 10_000,
    records: list[dict[str, Any]] | None = None,
) -> httpx.Response:
    """POST records through `node` (to one partition, or by the records' own fields)."""
    path = f"/v1/topics/{topic}" + ("" if partition is None else f"/partitions/{partition}")
    body = records if records is not None else [{"key": None, "value": v} for v in values]
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key
    return cluster.post(
        node,
        f"{path}/records?acks={acks}&timeout_ms={timeout_ms}",
        content=json.dumps({"records": body}).encode(),
        headers=headers,
        timeout=timeout_ms / 1000 + 10,
    )


def produce_until_ok(
    cluster: Cluster, nodes: list[int], topic: str, partition: int, values: list[Any], key: str
) -> dict[str, Any]:
    """acks=all through `nodes` in turn, retried with the same Idempotency-Key until a 200."""
    attempts = itertools.cycle(nodes)

    def attempt() -> dict[str, Any] | None:
        response = produce(
            cluster, next(attempts), topic, partition, values, key=key, timeout_ms=3000
        )
        if response.status_code == 200:
            doc: dict[str, Any] = response.json()
            return doc
        return None

    return wait_for(
        attempt, SETTLE_S, f"an acks=all produce to {topic}-{partition} to succeed", 0.1
    )


def fetch_all(cluster: Cluster, node: int, topic: str, partition: int) -> list[dict[str, Any]]:
    """Every committed record of the partition, read through `node`."""
    out: list[dict[str, Any]] = []
    offset = 0
    while True:
        response = cluster.get(
            node,
            f"/v1/topics/{topic}/partitions/{partition}/records",
            params={"offset": offset, "timeout_ms": 0},
        )
        assert response.status_code == 200, response.text
        doc = response.json()
        out += doc["records"]
        if doc["next_offset"] >= doc["high_watermark"] or not doc["records"]:
            return out
        offset = doc["next_offset"]


def values_at(records: list[dict[str, Any]]) -> dict[int, Any]:
    return {r["offset"]: r["value"] for r in records}


def leader_state(cluster: Cluster, topic: str, partition: int = 0) -> PartitionState:
    return cluster.wait_state(topic, partition, lambda s: s.leader != NO_LEADER, "a leader")


def new_leader(
    cluster: Cluster, topic: str, old: PartitionState, partition: int = 0
) -> PartitionState:
    """Wait for a leader other than `old`'s, elected in a higher epoch."""
    return cluster.wait_state(
        topic,
        partition,
        lambda s: s.leader not in (NO_LEADER, old.leader) and s.leader_epoch > old.leader_epoch,
        f"a new leader after node {old.leader} (epoch {old.leader_epoch})",
    )


# -- topics, produce and fetch through any node ---------------------------------------------------


def test_topic_created_through_a_non_controller_node(healthy: Cluster) -> None:
    cluster = healthy
    controller = wait_for(cluster.controller, SETTLE_S, "one controller")
    via = next(i for i in range(cluster.size) if i != controller)
    topic = new_topic("created")
    doc = cluster.create_topic(topic, 3, via=via)
    assert doc["name"] == topic
    assert [row["partition"] for row in doc["partitions"]] == [0, 1, 2]
    for row in doc["partitions"]:
        assert sorted(row["replicas"]) == [0, 1, 2]
    cluster.wait_topic_everywhere(topic)
    states = cluster.states(topic, 3)
    assert all(set(s.isr) == {0, 1, 2} and s.leader == s.replicas[0] for s in states)
    # Preferred leaders are spread over the nodes.
    assert {s.leader for s in states} == {0, 1, 2}


def test_a_node_does_not_deny_a_topic_its_view_has_not_caught_up_with(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A 201 means the topic exists: no node may then answer 404 UNKNOWN_TOPIC (a definite "no
    such topic" to a client that cannot know better) just because its copy of the metadata is
    behind; it can check with etcd, or say 503 if it cannot. The view is made to lag on
    purpose: node 2's link to etcd stalls (its lease has seconds left, so it is a live member)
    while clients still reach it. Without any fault, a node that has just started lags up to
    100 ms (etcd brings a watch that starts behind its head up to date on a 100 ms loop)."""
    workdir = tmp_path_factory.mktemp(f"{WORKDIR_MARKER}-{os.getpid()}-")  # reaped if orphaned
    topology = ProxyTopology(3)  # etcd can be cut off from a node alone, on loopback
    own = Cluster(workdir, topology)
    own.start()
    try:
        controller = wait_for(own.controller, SETTLE_S, "one controller")
        lagging = next(i for i in (2, 1) if i != controller)
        via = next(i for i in range(3) if i not in (lagging, controller))
        topology.apply(LinkFault("etcd", lagging))
        created = own.post(via, "/v1/topics", json={"name": "fresh", "partitions": 1})
        produced = own.post(lagging, "/v1/topics/fresh/records", json={"records": [{"value": 1}]})
        described = own.get(lagging, "/v1/topics/fresh")
    finally:
        own.stop()
    assert created.status_code == 201, created.text
    statuses = (produced.status_code, described.status_code)
    assert 404 not in statuses, f"node {lagging} answered {statuses} after the 201: {produced.text}"


def test_acks_all_through_a_non_leader_and_fetch_through_any_node(healthy: Cluster) -> None:
    cluster = healthy
    topic = new_topic("any-node")
    cluster.create_topic(topic, 1)
    cluster.wait_topic_everywhere(topic)
    leader = leader_state(cluster, topic).leader
    front = next(i for i in range(cluster.size) if i != leader)
    response = produce(cluster, front, topic, 0, [{"n": 1}, {"n": 2}], key="through-front")
    assert response.status_code == 200, response.text
    assert response.json() == {"results": [{"partition": 0, "base_offset": 0, "count": 2}]}
    # acks=all: committed, so every in-sync replica has both records.
    for node in range(cluster.size):
        assert values_at(fetch_all(cluster, node, topic, 0)) == {0: {"n": 1}, 1: {"n": 2}}
    rows = cluster.wait_in_sync(topic, 1)
    assert rows[0]["end"] == 2
    for node in range(cluster.size):
        assert [r.offset for r in cluster.replica_log(node, topic, 0)] == [0, 1]


def test_concurrent_produces_through_a_non_leader_each_get_their_own_offsets(
    healthy: Cluster,
) -> None:
    """The front node joins one loop turn's forwarded appends into one internal request
    (replication.forwarded_appends); each produce still answers where its own records are."""
    cluster = healthy
    topic = new_topic("joined")
    cluster.create_topic(topic, 1)
    cluster.wait_topic_everywhere(topic)
    leader = leader_state(cluster, topic).leader
    front = next(i for i in range(cluster.size) if i != leader)

    def send(n: int) -> tuple[int, dict[str, Any]]:
        acks = "all" if n % 2 else "1"
        response = produce(cluster, front, topic, 0, [[n, i] for i in range(n % 3 + 1)], acks=acks)
        assert response.status_code == 200, response.text
        return n, response.json()["results"][0]

    with ThreadPoolExecutor(24) as pool:
        answers = list(pool.map(send, range(96)))
    cluster.wait_in_sync(topic, 1)
    stored = values_at(fetch_all(cluster, leader, topic, 0))
    assert len(stored) == sum(n % 3 + 1 for n in range(96))
    for n, result in answers:
        assert result["count"] == n % 3 + 1
        at = [stored[result["base_offset"] + i] for i in range(result["count"])]
        assert at == [[n, i] for i in range(n % 3 + 1)], (n, result)


# -- leader loss -----------------------------------------------------------------------------------


def test_sigkill_leader_elects_from_the_isr_and_the_old_leader_truncates_and_rejoins(
    healthy: Cluster,
) -> None:
    cluster = healthy
    topic = new_topic("kill-leader")
    cluster.create_topic(topic, 1)
    cluster.wait_topic_everywhere(topic)
    before = leader_state(cluster, topic)
    old = before.leader
    followers = [r for r in before.replicas if r != old]
    acked: dict[int, Any] = {}
    for n in range(5):
        doc = produce_until_ok(cluster, [followers[n % 2]], topic, 0, [f"acked-{n}"], f"a{n}")
        acked[doc["results"][0]["base_offset"]] = f"acked-{n}"
    cluster.wait_in_sync(topic, 1)

    # A tail only the leader has: followers stopped, three acks=1 appends one after the other.
    # A stopped follower's one outstanding long-poll may still carry the first of them; it
    # cannot ask for more, so the last is on the leader alone.
    for f in followers:
        cluster.pause(f)
    tail = []
    for n in range(3):
        response = produce(cluster, old, topic, 0, [f"leader-only-{n}"], acks="1")
        assert response.status_code == 200, response.text
        tail.append(response.json()["results"][0]["base_offset"])
    cluster.kill(old)
    for f in followers:
        cluster.resume(f)
    assert [r.value for r in cluster.replica_log(old, topic, 0)][-1] == b'"leader-only-2"'

    after = new_leader(cluster, topic, before)
    assert after.leader in before.isr
    assert set(after.isr) <= set(before.isr) and old not in after.isr
    new = after.leader
    assert b'"leader-only-2"' not in [r.value for r in cluster.replica_log(new, topic, 0)]

    # Produce goes on (through the surviving nodes), and nothing acknowledged is lost.
    for n in range(5, 10):
        doc = produce_until_ok(cluster, followers, topic, 0, [f"acked-{n}"], f"a{n}")
        acked[doc["results"][0]["base_offset"]] = f"acked-{n}"
    for node in followers:
        committed = values_at(fetch_all(cluster, node, topic, 0))
        assert {o: committed.get(o) for o in acked} == acked

    # The old leader comes back: it cuts its divergent tail, catches up and rejoins the ISR.
    cluster.restart(old)
    cluster.wait_state(topic, 0, lambda s: len(s.isr) == 3, "the ISR back to 3 replicas")
    rows = cluster.wait_in_sync(topic, 1)
    logs = {node: cluster.replica_log(node, topic, 0) for node in range(cluster.size)}
    assert len(logs[old]) == rows[0]["end"]
    assert logs[old] == logs[new] == logs[followers[0]] == logs[followers[1]]
    assert b'"leader-only-2"' not in [r.value for r in logs[old]]
    assert all(logs[old][o].value == json.dumps(v).encode() for o, v in acked.items()), (
        "an acknowledged record is missing from the old leader's log after it rejoined"
    )
    assert tail[-1] < rows[0]["end"]  # its offset was reused by the new leader's records


# -- the ISR ---------------------------------------------------------------------------------------


def test_stopped_followers_leave_the_isr_and_acks_all_is_refused_until_they_return(
    healthy: Cluster,
) -> None:
    cluster = healthy
    topic = new_topic("isr")
    cluster.create_topic(topic, 1, min_insync=2)
    cluster.wait_topic_everywhere(topic)
    state = leader_state(cluster, topic)
    leader = state.leader
    first, second = [r for r in state.replicas if r != leader]

    # One follower stopped past its lease and replica.lag.time.max.ms: the controller (lease
    # lost, in a new epoch) or the leader (lag) drops it from the ISR, whichever comes first,
    # and acks=all goes on with two in-sync replicas.
    cluster.pause(first)
    response = produce(cluster, leader, topic, 0, ["while one follower is stopped"])
    assert response.status_code == 200, response.text
    shrunk = cluster.wait_state(
        topic, 0, lambda s: first not in s.isr, f"node {first} out of the ISR"
    )
    assert set(shrunk.isr) == {leader, second}
    assert shrunk.leader == leader and shrunk.leader_epoch >= state.leader_epoch

    # Both followers stopped: once the second lags too the ISR is the leader alone, below
    # min.insync.replicas=2, and acks=all is refused with nothing appended.
    cluster.pause(second)
    response = produce(cluster, leader, topic, 0, ["acks=1 while both are stopped"], acks="1")
    assert response.status_code == 200, response.text
    cluster.wait_state(topic, 0, lambda s: s.isr == (leader,), "the ISR down to the leader")
    end_before = cluster.describe(leader, topic)["partitions"][0]["log_end_offset"]
    refused = produce(cluster, leader, topic, 0, ["refused"], key="refused-key")
    assert refused.status_code == 503, refused.text
    assert refused.json()["code"] == "NOT_ENOUGH_REPLICAS"
    assert "Retry-After" in refused.headers
    assert cluster.describe(leader, topic)["partitions"][0]["log_end_offset"] == end_before

    # SIGCONT: both catch up and the ISR expands back to every replica.
    cluster.resume(first)
    cluster.resume(second)
    cluster.wait_state(topic, 0, lambda s: set(s.isr) == {0, 1, 2}, "the ISR back to 3 replicas")
    rows = cluster.wait_in_sync(topic, 1)
    assert rows[0]["end"] == end_before
    values = [r.value for r in cluster.replica_log(first, topic, 0)]
    assert b'"refused"' not in values
    ok = produce(cluster, second, topic, 0, ["after the ISR expanded"])
    assert ok.status_code == 200, ok.text


# -- the controller --------------------------------------------------------------------------------


def test_controller_loss_elects_another_controller_which_handles_a_node_loss(
    healthy: Cluster,
) -> None:
    cluster = healthy
    topic = new_topic("controller")
    cluster.create_topic(topic, 3)
    cluster.wait_topic_everywhere(topic)
    controller = wait_for(cluster.controller, SETTLE_S, "one controller")
    cluster.kill(controller)
    successor = wait_for(
        lambda: (c := cluster.controller()) not in (None, controller) and c,
        SETTLE_S,
        f"a controller other than node {controller}",
    )
    assert isinstance(successor, int)
    cluster.wait_ready()
    # The partitions node `controller` led move to live ISR members.
    for p in range(3):
        cluster.wait_state(
            topic, p, lambda s: s.leader not in (NO_LEADER, controller), "a live leader"
        )

    # The new controller handles the loss of another node: its partitions move too.
    other = next(i for i in range(cluster.size) if i not in (controller, successor))
    led = [p for p, s in enumerate(cluster.states(topic, 3)) if s.leader == other]
    assert led, f"node {other} leads none of {cluster.states(topic, 3)}"
    before = {p: cluster.states(topic, 3)[p] for p in led}
    cluster.kill(other)
    for p in led:
        after = new_leader(cluster, topic, before[p], p)
        assert after.leader == successor
        assert successor in before[p].isr
    # And it still creates topics, asked through no matter which node.
    created = cluster.create_topic(
        new_topic("after-controller-loss"), 1, via=successor, replication_factor=1, min_insync=1
    )
    assert created["partitions"][0]["leader"] == successor


def test_a_controller_restarted_within_its_lease_still_answers_topic_creates(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The controller is killed and at once restarted (a crash loop, a fast supervisor), while
    its old lease still has seconds to run. Topic creates, through it or through another node,
    must get an answer (201, or a 503 to retry), not hang. Its own cluster, with a 5 s lease so
    that the restart surely falls within it."""
    workdir = tmp_path_factory.mktemp(f"{WORKDIR_MARKER}-{os.getpid()}-")  # reaped if orphaned
    options = ("--lease-ttl", "5", "--offsets-topic-partitions", "1")
    own = LocalCluster(workdir, 3, node_options=options)
    own.start()
    answers: dict[str, int | str] = {}
    try:
        with httpx.Client(timeout=15.0) as http:  # three lease TTLs
            controller = http.get(own.nodes[0].url + "/v1/cluster").json()["controller"]
            other = (controller + 1) % 3
            own.nodes[controller].kill()
            own.nodes[controller].start()
            for name, via in (("through-restarted", controller), ("through-other", other)):
                try:
                    response = http.post(
                        own.nodes[via].url + "/v1/topics", json={"name": name, "partitions": 1}
                    )
                    answers[name] = response.status_code
                except httpx.TimeoutException:
                    answers[name] = "no answer within 15 s"
    finally:
        own.stop()
    assert all(a in (201, 503) for a in answers.values()), (
        f"node {controller} was the controller and restarted within its lease: {answers}"
    )


# -- idempotency -----------------------------------------------------------------------------------


def test_idempotency_key_retry_through_another_node_after_a_leader_change(
    healthy: Cluster,
) -> None:
    cluster = healthy
    topic = new_topic("idempotent")
    cluster.create_topic(topic, 1)
    cluster.wait_topic_everywhere(topic)
    before = leader_state(cluster, topic)
    others = [r for r in before.replicas if r != before.leader]
    first = produce(cluster, others[0], topic, 0, [{"order": 42}], key="order-42")
    assert first.status_code == 200, first.text
    # Through another node while the leader is the same: the first answer, nothing appended.
    again = produce(cluster, others[1], topic, 0, [{"order": 42}], key="order-42")
    assert (again.status_code, again.json()) == (200, first.json())
    cluster.wait_in_sync(topic, 1)

    cluster.kill(before.leader)
    new_leader(cluster, topic, before)
    retry = produce(cluster, others[1], topic, 0, [{"order": 42}], key="order-42")
    log = fetch_all(cluster, others[0], topic, 0)
    copies = [r["offset"] for r in log if r["value"] == {"order": 42}]
    assert (retry.status_code, retry.json(), copies) == (200, first.json(), [0]), (
        f"retry after the leader change answered {retry.status_code} {retry.text}; "
        f"the record is in the log at offsets {copies}"
    )


# -- produce contracts under faults ----------------------------------------------------------------


def test_not_enough_replicas_on_one_partition_of_a_request_appends_nothing(
    healthy: Cluster,
) -> None:
    """A request to two partitions, one of them below min.insync.replicas: the answer is 503
    NOT_ENOUGH_REPLICAS, documented as "nothing was appended", so no partition may get them."""
    cluster = healthy
    topic = new_topic("min-isr-two-partitions")
    cluster.create_topic(topic, 2, replication_factor=2, min_insync=2)
    cluster.wait_topic_everywhere(topic)
    p0, p1 = cluster.states(topic, 2)
    # A node that holds only partition 1 (as its follower): stopping it shrinks only p1's ISR.
    (lagging,) = set(p1.replicas) - set(p0.replicas)
    assert lagging != p1.leader
    cluster.pause(lagging)
    response = produce(cluster, p1.leader, topic, 1, ["p1 moves on without its follower"], acks="1")
    assert response.status_code == 200, response.text
    cluster.wait_state(topic, 1, lambda s: s.isr == (p1.leader,), f"node {lagging} out of p1's ISR")
    assert set(cluster.states(topic, 2)[0].isr) == set(p0.replicas)

    # Through p0's leader: p0 is local there, p1 goes to its leader.
    end0 = cluster.describe(p0.leader, topic)["partitions"][0]["log_end_offset"]
    records = [
        {"key": "a", "value": "to p0", "partition": 0},
        {"key": "b", "value": "to p1", "partition": 1},
    ]
    answer = produce(cluster, p0.leader, topic, None, [], records=records)
    assert (answer.status_code, answer.json()["code"]) == (503, "NOT_ENOUGH_REPLICAS"), answer.text
    cluster.resume(lagging)
    cluster.wait_in_sync(topic, 2)
    p0_values = [r["value"] for r in fetch_all(cluster, p0.leader, topic, 0)]
    assert cluster.describe(p0.leader, topic)["partitions"][0]["log_end_offset"] == end0, (
        f"503 NOT_ENOUGH_REPLICAS ('nothing was appended'), yet partition 0 holds {p0_values}"
    )


def test_a_produce_sent_once_is_appended_once_when_the_leader_changes_before_it_commits(
    healthy: Cluster,
) -> None:
    """acks=all without an Idempotency-Key, sent once, straight to the leader. One follower has
    the record, the other (still in the ISR) is stopped, so it does not commit; the leader is
    stopped too, the first follower is elected (min.insync.replicas=1, so it takes writes
    alone) and the old leader resumes. The record must be in the log once, whatever the
    client is answered: the node must not send the request on to the new leader by itself."""
    cluster = healthy
    topic = new_topic("once")
    cluster.create_topic(topic, 1, min_insync=1)
    cluster.wait_topic_everywhere(topic)
    before = leader_state(cluster, topic)
    old = before.leader
    # The controller elects the first live ISR replica in replica order.
    successor, other = [r for r in before.replicas if r != old]
    cluster.pause(other)
    with ThreadPoolExecutor(1) as pool:
        sent = pool.submit(produce, cluster, old, topic, 0, [{"sent": "once"}], timeout_ms=60_000)
        wait_for(
            lambda: cluster.describe(successor, topic)["partitions"][0]["log_end_offset"] == 1,
            SETTLE_S,
            f"node {successor} to have the record",
        )
        cluster.pause(old)
        after = new_leader(cluster, topic, before)
        assert after.leader == successor
        # `other` stays stopped until the request is over: no fetch of its can reach the old
        # leader and commit the record there.
        cluster.resume(old)
        answer = sent.result(timeout=120)
    cluster.resume(other)
    cluster.wait_in_sync(topic, 1)
    log = fetch_all(cluster, successor, topic, 0)
    offsets = [r["offset"] for r in log if r["value"] == {"sent": "once"}]
    assert offsets == [0], (
        f"one request (answered {answer.status_code} {answer.text}) left the record at "
        f"offsets {offsets}"
    )


def test_a_forwarded_produce_is_not_run_again_when_the_leader_dies_after_appending_it(
    healthy: Cluster,
) -> None:
    """acks=all without an Idempotency-Key, sent once through a follower, which forwards it to
    the leader. The leader appends it, the follower copies it, and the leader is killed before
    the high watermark passes it (the other follower, in the ISR, is stopped). Whatever the
    client is answered must be true of the log: 200 names the one offset the record has, 503
    NOT_ENOUGH_REPLICAS promises it was not appended, and no answer allows two copies."""
    cluster = healthy
    topic = new_topic("forwarded-once")
    cluster.create_topic(topic, 1, min_insync=2)
    cluster.wait_topic_everywhere(topic)
    before = leader_state(cluster, topic)
    old = before.leader
    front, other = [r for r in before.replicas if r != old]  # `front` is elected next
    cluster.pause(other)
    with ThreadPoolExecutor(1) as pool:
        sent = pool.submit(produce, cluster, front, topic, 0, [{"sent": "once"}], timeout_ms=60_000)
        wait_for(
            lambda: cluster.describe(front, topic)["partitions"][0]["log_end_offset"] == 1,
            SETTLE_S,
            f"node {front} to have copied the record",
        )
        cluster.kill(old)
        answer = sent.result(timeout=120)
    cluster.resume(other)
    cluster.restart(old)
    cluster.wait_in_sync(topic, 1)
    log = fetch_all(cluster, front, topic, 0)
    offsets = [r["offset"] for r in log if r["value"] == {"sent": "once"}]
    doc = answer.json()
    told = f"answered {answer.status_code} {answer.text}, the record is at offsets {offsets}"
    if answer.status_code == 200:
        assert offsets == [doc["results"][0]["base_offset"]], told
    elif doc.get("code") == "NOT_ENOUGH_REPLICAS":
        assert offsets == [], told
    else:
        assert len(offsets) <= 1, told


# -- network partitions ----------------------------------------------------------------------------


def test_a_leader_cut_off_from_its_followers_keeps_its_lease_but_cannot_commit(
    healthy: Cluster,
) -> None:
    """Links from the leader to both followers cut: it still holds its etcd lease, so it stays
    leader, drops them from the ISR, and acks=all is refused (min.insync.replicas=2); once the
    links heal they catch up and the ISR fills again, with no leader change."""
    cluster = healthy
    topic = new_topic("isolated")
    cluster.create_topic(topic, 1)
    cluster.wait_topic_everywhere(topic)
    before = leader_state(cluster, topic)
    leader = before.leader
    cluster.topology.apply(LinkFault("isolate", leader))
    response = produce(cluster, leader, topic, 0, ["appended, never committed"], acks="1")
    assert response.status_code == 200, response.text
    cluster.wait_state(topic, 0, lambda s: s.isr == (leader,), "the ISR down to the leader")
    refused = produce(cluster, leader, topic, 0, ["refused"])
    assert (refused.status_code, refused.json()["code"]) == (503, "NOT_ENOUGH_REPLICAS")
    cluster.topology.heal()
    after = cluster.wait_state(topic, 0, lambda s: len(s.isr) == 3, "the ISR back to 3 replicas")
    assert (after.leader, after.leader_epoch) == (leader, before.leader_epoch)
    rows = cluster.wait_in_sync(topic, 1)
    assert rows[0]["end"] == 1
    logs = [cluster.replica_log(node, topic, 0) for node in range(cluster.size)]
    assert logs[0] == logs[1] == logs[2] and [r.value for r in logs[0]] == [
        b'"appended, never committed"'
    ]


def test_a_leader_cut_off_from_etcd_is_replaced_and_rejoins_as_a_follower(
    healthy: Cluster,
) -> None:
    cluster = healthy
    topic = new_topic("no-etcd")
    cluster.create_topic(topic, 1)
    cluster.wait_topic_everywhere(topic)
    before = leader_state(cluster, topic)
    old = before.leader
    others = [r for r in before.replicas if r != old]
    acked = produce_until_ok(cluster, others, topic, 0, ["before the cut"], "before")
    cluster.topology.apply(LinkFault("etcd", old))
    # Its lease runs out: the controller moves leadership to a follower in the ISR.
    after = new_leader(cluster, topic, before)
    assert after.leader in others
    doc = produce_until_ok(cluster, others, topic, 0, ["after the cut"], "after")
    cluster.topology.heal()
    cluster.wait_ready()
    cluster.wait_state(topic, 0, lambda s: len(s.isr) == 3, "the ISR back to 3 replicas")
    cluster.wait_in_sync(topic, 1)
    committed = values_at(fetch_all(cluster, old, topic, 0))
    assert committed[acked["results"][0]["base_offset"]] == "before the cut"
    assert committed[doc["results"][0]["base_offset"]] == "after the cut"
    logs = [cluster.replica_log(node, topic, 0) for node in range(cluster.size)]
    assert logs[0] == logs[1] == logs[2]
