"""The cluster changes shape (real etcd and real node processes): a 4th node joins three and
`balance` spreads replicas, leaderships and bytes onto it; a down node is removed and its
replicas re-created; a node is decommissioned; a node gone longer than
replica.lost.timeout.ms is removed by itself and holds nothing when it comes back. Plans that
cannot be carried out are refused whole. Every wait polls a condition."""

from __future__ import annotations

import base64
import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gateway.workers.local_cluster import LocalCluster
from tests.cluster.conftest import WORKDIR_MARKER
from tests.cluster.harness import ETCD_PREFIX, SETTLE_S, Etcd, PartitionState, wait_for

TOPIC = "elastic"
PARTITIONS = 12


def states(etcd: Etcd, topic: str, partitions: int) -> list[PartitionState]:
    found = [etcd.partition(topic, p) for p in range(partitions)]
    assert all(s is not None for s in found)
    return [s for s in found if s is not None]


def settled(etcd: Etcd, topic: str, partitions: int) -> list[PartitionState] | None:
    """The states once nothing moves and every ISR is full."""
    now = states(etcd, topic, partitions)
    if any(s.adding or s.removing or set(s.isr) != set(s.replicas) for s in now):
        return None
    return now


def node_state(etcd: Etcd, node: int) -> str | None:
    kv = etcd.get(f"{ETCD_PREFIX}/node_states/{node}".encode())
    return None if kv is None else base64.b64decode(kv["value"]).decode()


def produce_everywhere(http: httpx.Client, url: str, records: int = 50) -> None:
    for p in range(PARTITIONS):
        body = {"records": [{"value": "x" * (100 * (p + 1))} for _ in range(records)]}
        answer = http.post(f"{url}/v1/topics/{TOPIC}/partitions/{p}/records?acks=all", json=body)
        assert answer.status_code == 200, answer.text


def fill(http: httpx.Client, cluster: LocalCluster, records: int = 50) -> list[int]:
    """The topic (replication factor 2) created, `records` produced to each partition: its
    high watermarks."""
    url = cluster.nodes[0].url
    created = http.post(
        url + "/v1/topics",
        json={"name": TOPIC, "partitions": PARTITIONS, "replication_factor": 2},
    )
    assert created.status_code == 201, created.text
    produce_everywhere(http, url, records)
    return end_offsets(http, cluster)


def end_offsets(http: httpx.Client, cluster: LocalCluster) -> list[int]:
    """Each partition's high watermark, from the running nodes that hold it (the highest)."""
    ends = [0] * PARTITIONS
    for node in cluster.nodes:
        if not node.running:
            continue
        for row in http.get(f"{node.url}/v1/topics/{TOPIC}").json()["partitions"]:
            if row["high_watermark"] is not None:
                ends[row["partition"]] = max(ends[row["partition"]], row["high_watermark"])
    return ends


@contextlib.contextmanager
def running(
    factory: pytest.TempPathFactory, size: int, started: int, *options: str
) -> Iterator[tuple[LocalCluster, Etcd]]:
    """etcd and `size` nodes with `options`, the first `started` of them running."""
    workdir = factory.mktemp(f"{WORKDIR_MARKER}-{os.getpid()}-")  # reaped if orphaned
    base = ("--lease-ttl", "2", "--offsets-topic-partitions", "1")
    cluster = LocalCluster(workdir, size, node_options=(*base, *options))
    cluster.etcd.start()
    etcd = Etcd(cluster.etcd.url)
    try:
        for node in cluster.nodes[:started]:
            node.start()
        cluster.wait_ready()
        yield cluster, etcd
    finally:
        cluster.stop()
        etcd.close()


@pytest.fixture(scope="module")
def growing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, Etcd]]:
    """Four nodes of which three start; the test starts the fourth."""
    with running(tmp_path_factory, 4, 3) as cluster:
        yield cluster


def test_a_node_added_balanced_in_a_lost_node_healed_and_a_node_decommissioned(
    growing: tuple[LocalCluster, Etcd],
) -> None:
    cluster, etcd = growing
    url = cluster.nodes[0].url
    with httpx.Client(timeout=30.0) as http:
        offsets = fill(http, cluster)

        # -- add a node, plan, balance --------------------------------------------------------
        cluster.nodes[3].start()
        cluster.wait_ready()
        before = states(etcd, TOPIC, PARTITIONS)
        assert not any(3 in s.replicas for s in before)
        planned = http.post(cluster.nodes[1].url + "/v1/cluster/balance?dry_run=true")
        assert planned.status_code == 200, planned.text
        plan = planned.json()
        assert plan["dry_run"] and plan["moves"] and plan["bytes_to_move"] > 0
        assert any(3 in m["replicas"] for m in plan["moves"])
        assert states(etcd, TOPIC, PARTITIONS) == before  # a dry run moves nothing
        printed = subprocess.run(
            [sys.executable, "-c", "from gateway.cli.main import main; main()", "cluster",
             "balance", "--dry-run", "--output", "table", "--url", cluster.nodes[3].url],
            capture_output=True, text=True, timeout=SETTLE_S, check=False,
        )  # fmt: skip
        assert printed.returncode == 0, printed.stderr
        assert "goal met" in printed.stdout and "REPLICAS" in printed.stdout, printed.stdout
        assert states(etcd, TOPIC, PARTITIONS) == before
        started = http.post(cluster.nodes[2].url + "/v1/cluster/balance")
        assert started.status_code == 202, started.text
        plan = started.json()
        assert plan["goal_met"], plan["notes"]
        after = wait_for(
            lambda: settled(etcd, TOPIC, PARTITIONS), SETTLE_S, "the balance to complete"
        )
        counts = {n: sum(n in s.replicas for s in after) for n in range(4)}
        assert min(counts.values()) >= 5 and max(counts.values()) <= 7, counts  # 24 / 4
        targets = {(m["topic"], m["partition"]): tuple(m["replicas"]) for m in plan["moves"]}
        for p, state in enumerate(after):
            if (TOPIC, p) in targets:
                assert state.replicas == targets[(TOPIC, p)]
        assert end_offsets(http, cluster) == offsets  # nothing lost on the way

        # -- a node lost for good: remove it, its replicas are re-created ----------------------
        refused = http.post(url + "/v1/cluster/nodes/2/remove")
        assert refused.status_code == 400 and "live" in refused.json()["detail"]
        cluster.nodes[2].kill()
        wait_for(
            lambda: (
                not next(
                    n for n in http.get(url + "/v1/cluster").json()["nodes"] if n["node_id"] == 2
                )["alive"]
            ),
            SETTLE_S,
            "node 2 to be seen gone",
        )
        down = http.post(url + "/v1/cluster/balance")
        assert down.status_code == 400 and "down" in down.json()["detail"]
        removed = http.post(url + "/v1/cluster/nodes/2/remove")
        assert removed.status_code == 202, removed.text
        healed = wait_for(
            lambda: settled(etcd, TOPIC, PARTITIONS), SETTLE_S, "the heal to complete"
        )
        assert all(len(s.replicas) == 2 and 2 not in s.replicas for s in healed)
        assert node_state(etcd, 2) == "removed"
        offsets_topic = etcd.partition("__consumer_offsets", 0)
        assert offsets_topic is not None and 2 not in offsets_topic.replicas
        assert len(offsets_topic.replicas) == 3
        assert end_offsets(http, cluster) == offsets

        # -- decommission: refused while it would leave too few nodes --------------------------
        too_few = http.post(url + "/v1/cluster/nodes/3/decommission")
        assert too_few.status_code == 400, too_few.text  # __consumer_offsets needs 3 nodes
        assert "replication factor" in too_few.json()["detail"]
        unknown = http.post(url + "/v1/cluster/nodes/9/decommission")
        assert unknown.status_code == 404 and unknown.json()["code"] == "UNKNOWN_NODE"
        nothing = states(etcd, TOPIC, PARTITIONS)
        assert nothing == healed


@pytest.fixture(scope="module")
def forgetful(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, Etcd]]:
    """Five nodes whose controller removes a node gone 3 s."""
    with running(tmp_path_factory, 5, 5, "--replica-lost-timeout-ms", "3000") as cluster:
        yield cluster


def test_decommission_then_a_lost_node_removed_by_itself_comes_back_empty(
    forgetful: tuple[LocalCluster, Etcd],
) -> None:
    cluster, etcd = forgetful
    url = cluster.nodes[0].url
    with httpx.Client(timeout=30.0) as http:
        offsets = fill(http, cluster, 20)

        # decommission node 3: it serves until it holds nothing, then it is removed
        answer = http.post(url + "/v1/cluster/nodes/3/decommission")
        assert answer.status_code == 202, answer.text
        again = http.post(url + "/v1/cluster/nodes/3/decommission")
        assert again.status_code == 409, again.text
        wait_for(lambda: node_state(etcd, 3) == "removed", SETTLE_S, "node 3 decommissioned")
        final = wait_for(lambda: settled(etcd, TOPIC, PARTITIONS), SETTLE_S, "moves done")
        assert not any(3 in s.replicas for s in final)
        cluster.nodes[3].stop()  # nothing is under-replicated
        assert all(set(s.isr) == set(s.replicas) and len(s.replicas) == 2 for s in final)

        # node 2 dies: after replica.lost.timeout.ms it is removed and its replicas re-created
        cluster.nodes[2].kill()

        def without_2() -> list[PartitionState] | None:
            rows = settled(etcd, TOPIC, PARTITIONS)
            return rows if rows is not None and all(2 not in r.replicas for r in rows) else None

        healed = wait_for(without_2, SETTLE_S, "node 2's replicas re-created after the timeout")
        assert node_state(etcd, 2) == "removed"
        assert all(len(s.replicas) == 2 for s in healed)
        assert end_offsets(http, cluster) == offsets

        # it comes back: it holds no replica, rejoins no ISR, and its copies are deleted
        cluster.nodes[2].start()

        def emptied() -> bool:
            rows: list[dict[str, Any]] = http.get(
                cluster.nodes[2].url + f"/v1/topics/{TOPIC}"
            ).json()["partitions"]
            return all(row["size_bytes"] in (None, 0) for row in rows)

        wait_for(emptied, SETTLE_S, "the removed node's copies deleted")
        assert all(2 not in s.isr for s in states(etcd, TOPIC, PARTITIONS))
        created = http.post(url + "/v1/topics", json={"name": "after", "partitions": 6})
        assert created.status_code == 201, created.text
        assert all(
            not {2, 3} & set(row["replicas"]) for row in created.json()["partitions"]
        )  # removed nodes are given nothing


@pytest.fixture(scope="module")
def self_balancing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, Etcd]]:
    """Four nodes with the continuous balancer on, of which three start."""
    with running(tmp_path_factory, 4, 3, "--balance", "auto") as cluster:
        yield cluster


def test_the_continuous_balancer_moves_replicas_onto_a_node_that_joins(
    self_balancing: tuple[LocalCluster, Etcd],
) -> None:
    cluster, etcd = self_balancing
    with httpx.Client(timeout=30.0) as http:
        offsets = fill(http, cluster, 10)
        cluster.nodes[3].start()  # nobody asks for a balance

        def on_node_3() -> list[PartitionState] | None:
            rows = settled(etcd, TOPIC, PARTITIONS)
            return rows if rows is not None and sum(3 in r.replicas for r in rows) >= 5 else None

        balanced = wait_for(on_node_3, SETTLE_S, "the controller to balance onto node 3")
        counts = [sum(n in s.replicas for s in balanced) for n in range(4)]
        assert min(counts) >= 5 and max(counts) <= 7, counts
        assert end_offsets(http, cluster) == offsets
