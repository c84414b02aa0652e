"""Partition reassignment on the real cluster (three node processes and etcd): moves under
acks=all produce, the throttle holding a move, cancellation, a controller and a receiving node
killed mid-move, and plans refused whole. Checked through the partition states in etcd, the
nodes' answers and the replicas' logs on disk. Every wait polls a condition."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.cluster.harness import SETTLE_S, Cluster, PartitionState, wait_for
from tests.cluster.test_cluster import new_topic, produce

ROUTE = "/v1/cluster/reassignments"
VALUE = "v" * 1000  # ~1 KB a record: a few hundred records are enough for the throttle to hold


def start_plan(cluster: Cluster, via: int, moves: list[dict[str, Any]]) -> httpx.Response:
    return cluster.post(via, ROUTE, json={"version": 1, "partitions": moves})


def set_throttle(cluster: Cluster, via: int, rate: int | None) -> httpx.Response:
    return cluster.http.put(cluster.url(via) + ROUTE + "/throttle", json={"bytes_per_second": rate})


def acknowledged(response: httpx.Response) -> list[int]:
    (result,) = response.json()["results"]
    return list(range(result["base_offset"], result["base_offset"] + result["count"]))


def fill(cluster: Cluster, topic: str, records: int) -> list[int]:
    """acks=all batches of 100 records to partition 0; the offsets acknowledged."""
    offsets: list[int] = []
    for _ in range(records // 100):
        response = produce(cluster, 0, topic, 0, [VALUE] * 100)
        assert response.status_code == 200, response.text
        offsets.extend(acknowledged(response))
    return offsets


def done(cluster: Cluster, topic: str, target: tuple[int, ...]) -> PartitionState:
    return cluster.wait_state(
        topic,
        0,
        lambda s: (
            s.replicas == target and not s.adding and not s.removing and set(s.isr) == set(target)
        ),
        f"moved to {list(target)} with a full ISR",
    )


def values_on(cluster: Cluster, node: int, topic: str) -> list[Any]:
    return [r.offset for r in cluster.replica_log(node, topic, 0)]


def test_a_partition_moves_to_another_node_under_acks_all_produce(healthy: Cluster) -> None:
    cluster = healthy
    topic = new_topic("move")
    cluster.create_topic(topic, 1, replication_factor=2, min_insync=1)
    cluster.wait_topic_everywhere(topic)
    before = cluster.etcd.partition(topic, 0)
    assert before is not None
    leaving = before.replicas[1]
    joining = next(n for n in range(3) if n not in before.replicas)
    target = (before.replicas[0], joining)
    acked = fill(cluster, topic, 300)

    stop = threading.Event()
    during: list[int] = []
    failures: list[str] = []

    def producer() -> None:
        while not stop.is_set():
            response = produce(cluster, leaving, topic, 0, [VALUE] * 10)
            if response.status_code == 200:
                during.extend(acknowledged(response))
            elif response.status_code not in (421, 503):
                failures.append(f"{response.status_code}: {response.text}")

    thread = threading.Thread(target=producer)
    thread.start()
    try:
        response = start_plan(
            cluster, leaving, [{"topic": topic, "partition": 0, "replicas": list(target)}]
        )
        assert response.status_code == 202, response.text
        (move,) = response.json()["reassignments"]
        assert move["adding"] == [joining] and move["removing"] == [leaving]
        after = done(cluster, topic, target)
    finally:
        stop.set()
        thread.join()
    assert not failures, failures
    assert after.leader_epoch > before.leader_epoch  # the removed replica is fenced
    cluster.wait_in_sync(topic, 1)
    stored = set(values_on(cluster, joining, topic))
    assert set(acked + during) <= stored
    # the removed replica's records are deleted, and the listing is empty again
    wait_for(lambda: not values_on(cluster, leaving, topic), SETTLE_S, "the old replica emptied")
    listing = cluster.get(0, ROUTE).json()
    assert all(m["topic"] != topic for m in listing["reassignments"])


def test_a_throttled_move_is_listed_with_progress_and_can_be_cancelled(healthy: Cluster) -> None:
    cluster = healthy
    topic = new_topic("cancel")
    cluster.create_topic(topic, 1, replication_factor=2, min_insync=1)
    cluster.wait_topic_everywhere(topic)
    before = cluster.etcd.partition(topic, 0)
    assert before is not None
    joining = next(n for n in range(3) if n not in before.replicas)
    fill(cluster, topic, 500)
    assert set_throttle(cluster, 1, 20_000).status_code == 200
    try:
        target = [joining, before.replicas[0]]
        response = start_plan(cluster, 2, [{"topic": topic, "partition": 0, "replicas": target}])
        assert response.status_code == 202, response.text

        def copying() -> dict[str, Any] | None:
            listing = cluster.get(joining, ROUTE).json()
            moves = [m for m in listing["reassignments"] if m["topic"] == topic]
            if not moves or not (moves[0]["progress"][0]["size_bytes"] or 0) > 0:
                return None
            return {"listing": listing, "move": moves[0]}

        seen = wait_for(copying, SETTLE_S, "the new replica to have copied some bytes")
        assert seen["listing"]["throttle_bytes_per_second"] == 20_000
        move = seen["move"]
        assert move["replicas"] == target and move["adding"] == [joining]
        assert move["progress"][0]["size_bytes"] < move["leader_size_bytes"]
        # a second plan on the same partition is refused while it moves
        again = start_plan(cluster, 0, [{"topic": topic, "partition": 0, "replicas": [joining]}])
        assert again.status_code == 409, again.text
        assert again.json()["code"] == "REASSIGNMENT_IN_PROGRESS"

        cancelled = cluster.http.delete(cluster.url(1) + f"{ROUTE}/{topic}/0")
        assert cancelled.status_code == 200, cancelled.text
        state = cluster.wait_state(
            topic, 0, lambda s: not s.adding and not s.removing, "the move cancelled"
        )
        assert state.replicas == before.replicas
        assert joining not in state.isr
        wait_for(lambda: not values_on(cluster, joining, topic), SETTLE_S, "the copy deleted")
        again = cluster.http.delete(cluster.url(1) + f"{ROUTE}/{topic}/0")
        assert again.status_code == 409 and again.json()["code"] == "NO_REASSIGNMENT_IN_PROGRESS"
    finally:
        assert set_throttle(cluster, 0, None).status_code == 200


def test_a_move_survives_the_controller_and_the_receiving_node_killed(healthy: Cluster) -> None:
    cluster = healthy
    topic = new_topic("failover")
    cluster.create_topic(topic, 1, replication_factor=2, min_insync=1)
    cluster.wait_topic_everywhere(topic)
    before = cluster.etcd.partition(topic, 0)
    assert before is not None
    joining = next(n for n in range(3) if n not in before.replicas)
    # 1.2 MB at 20 KB/s: a copy of a minute, past any two restarts on a loaded machine, so the
    # move is still under way when the nodes are back (300 records finished first once).
    acked = fill(cluster, topic, 1_200)
    assert set_throttle(cluster, 0, 20_000).status_code == 200
    try:
        target = [before.replicas[1], joining]
        response = start_plan(cluster, 0, [{"topic": topic, "partition": 0, "replicas": target}])
        assert response.status_code == 202, response.text
        wait_for(lambda: values_on(cluster, joining, topic), SETTLE_S, "the copy to begin")
        controller = cluster.controller()
        assert controller is not None
        cluster.kill(controller)
        if joining != controller:
            cluster.kill(joining)
            cluster.restart(joining)
        cluster.restart(controller)
        cluster.wait_ready()
        state = cluster.etcd.partition(topic, 0)
        assert state is not None and state.adding == (joining,)  # still moving
    finally:
        wait_for(
            lambda: set_throttle(cluster, 0, None).status_code == 200,
            SETTLE_S,
            "the throttle lifted",
        )
    done(cluster, topic, tuple(target))
    cluster.wait_in_sync(topic, 1)
    assert set(acked) <= set(values_on(cluster, joining, topic))


@pytest.mark.parametrize(
    ("move", "status", "code"),
    [
        ({"replicas": [0, 0]}, 400, "INVALID_REPLICA_ASSIGNMENT"),
        ({"replicas": []}, 400, "INVALID_REPLICA_ASSIGNMENT"),
        ({"replicas": [0, 99]}, 400, "INVALID_REPLICA_ASSIGNMENT"),
        ({"replicas": [0, "1"]}, 400, "INVALID_REPLICA_ASSIGNMENT"),
        ({"replicas": [0, 1], "partition": 7}, 404, "UNKNOWN_PARTITION"),
        ({"replicas": [0, 1], "topic": "no-such-topic"}, 404, "UNKNOWN_TOPIC"),
        ({"replicas": "0,1"}, 400, "INVALID_REQUEST"),
        ({"replicas": [0, 1], "partition": -1}, 400, "INVALID_REQUEST"),
        ({"replicas": [0, 1], "brokers": [1]}, 400, "INVALID_REQUEST"),
    ],
)
def test_a_faulty_plan_is_refused_whole(
    healthy: Cluster, move: dict[str, Any], status: int, code: str
) -> None:
    cluster = healthy
    topic = new_topic("bad")
    cluster.create_topic(topic, 2, replication_factor=2, min_insync=1)
    cluster.wait_topic_everywhere(topic)
    before = cluster.states(topic, 2)
    good = {"topic": topic, "partition": 1, "replicas": [2, 1, 0]}
    response = start_plan(cluster, 1, [good, {"topic": topic, "partition": 0, **move}])
    assert response.status_code == status, response.text
    assert response.headers["Content-Type"].startswith("application/problem+json")
    assert response.json()["code"] == code
    assert cluster.states(topic, 2) == before  # nothing moved, not even the good move


def test_a_partition_named_twice_and_malformed_plans_are_refused(healthy: Cluster) -> None:
    cluster = healthy
    topic = new_topic("twice")
    cluster.create_topic(topic, 1, replication_factor=1, min_insync=1)
    cluster.wait_topic_everywhere(topic)
    move = {"topic": topic, "partition": 0, "replicas": [1]}
    twice = start_plan(cluster, 0, [move, move])
    assert twice.status_code == 400 and "twice" in twice.json()["detail"]
    for body in (b"{", b"[]", b'{"partitions": []}', b'{"version": 2, "partitions": [{}]}'):
        response = cluster.post(
            0, ROUTE, content=body, headers={"Content-Type": "application/json"}
        )
        assert response.status_code == 400, (body, response.text)
    for rate in (0, -5, "fast", 1.5, True):
        response = set_throttle(cluster, 2, rate)  # type: ignore[arg-type]
        assert response.status_code == 400, (rate, response.text)
    assert cluster.get(0, ROUTE).json()["throttle_bytes_per_second"] is None


def sluice(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from gateway.cli.main import main; main()", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=SETTLE_S,
        check=False,
    )


def test_the_cli_runs_a_plan_to_the_end_lists_and_cancels(healthy: Cluster, tmp_path: Path) -> None:
    cluster = healthy
    topic = new_topic("cli")
    cluster.create_topic(topic, 1, replication_factor=2, min_insync=1)
    cluster.wait_topic_everywhere(topic)
    before = cluster.etcd.partition(topic, 0)
    assert before is not None
    joining = next(n for n in range(3) if n not in before.replicas)
    fill(cluster, topic, 200)
    plan = tmp_path / "plan.json"
    target = [joining, before.replicas[0]]
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": target}]}))  # fmt: skip
    url = cluster.url(1)
    done_ = sluice("cluster", "reassign", "--url", url, "--plan", str(plan))
    assert done_.returncode == 0, done_.stderr
    assert "1 partitions moved" in done_.stdout
    assert "copied" in done_.stderr  # the progress, on stderr when piped
    state = done(cluster, topic, tuple(target))
    assert state.replicas == tuple(target)

    back = [before.replicas[0], before.replicas[1]]
    plan.write_text(
        json.dumps({"partitions": [{"topic": topic, "partition": 0, "replicas": back}]})
    )
    throttled = sluice(
        "cluster", "reassign", "--url", url, "--plan", str(plan), "--throttle", "1000",
        "--no-wait", "--output", "json",
    )  # fmt: skip
    assert throttled.returncode == 0, throttled.stderr
    assert json.loads(throttled.stdout)["reassignments"][0]["adding"] == [before.replicas[1]]
    status = sluice("cluster", "reassign", "--url", url, "--status", "--output", "table")
    assert status.returncode == 0 and topic in status.stdout, status.stdout
    assert "throttle: 1000 bytes/s per node" in status.stdout
    cancelled = sluice("cluster", "reassign", "--url", url, "--cancel", str(plan))
    assert cancelled.returncode == 0, cancelled.stderr
    assert cluster.etcd.partition(topic, 0) is not None
    cluster.wait_state(topic, 0, lambda s: s.replicas == tuple(target), "back on the target")
    lifted = sluice("cluster", "throttle", "off", "--url", url)
    assert lifted.returncode == 0 and "lifted" in lifted.stdout
    bad = sluice("cluster", "reassign", "--url", url, "--plan", str(tmp_path / "missing.json"))
    assert bad.returncode != 0 and "cannot read the plan" in bad.stderr
    refused = sluice("cluster", "throttle", "0", "--url", url)
    assert refused.returncode != 0 and "at least 1" in refused.stderr
