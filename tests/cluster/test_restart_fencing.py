"""A node that crashes, loses what it had not fsynced and restarts before the controller noticed
(within its old lease) must not lead again with what is left: its new incarnation voids its old
leaderships and ISR memberships (Kafka's broker epoch, KIP-841/903; docs/cluster.md). When every
replica lost its unsynced tail, the one that kept the most leads (KIP-966's balanced recovery)."""

from __future__ import annotations

import os
from typing import Any

import httpx
import pytest

from gateway.workers.local_cluster import LocalCluster
from tests.cluster.conftest import WORKDIR_MARKER
from tests.cluster.harness import (
    ETCD_PREFIX,
    NO_LEADER,
    SETTLE_S,
    Etcd,
    PartitionState,
    read_replica_log,
    wait_for,
)
from tests.cluster.powercut import cut_at, lose_unsynced, recovery_point

TOPIC = "fenced"
LEASE_TTL_S = 30  # the restart surely falls within the killed node's lease


def produce(http: httpx.Client, url: str, values: list[int]) -> httpx.Response:
    body = {"records": [{"value": v} for v in values]}
    return http.post(f"{url}/v1/topics/{TOPIC}/partitions/0/records?acks=all", json=body)


def produced(http: httpx.Client, url: str, values: list[int], what: str) -> int:
    """Produce `values` through `url` until acknowledged; their first offset."""

    def attempt() -> int | None:
        response = produce(http, url, values)
        return response.json()["results"][0]["base_offset"] if response.status_code == 200 else None

    return wait_for(attempt, SETTLE_S, what, 0.1)


def test_a_leader_restarted_within_its_lease_after_losing_unsynced_writes_does_not_lead_them_away(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """RF=3, min.insync.replicas=2: 50 records acknowledged with acks=all. The leader is killed,
    its log cut to what it had fsynced (nothing: flush settings are off) and restarted at once,
    within its lease. The controller must hand the partition to a follower that has the
    records, and every replica must end with the same log, every acknowledged record in it at
    its offset, after more produces through the restarted node."""
    workdir = tmp_path_factory.mktemp(f"{WORKDIR_MARKER}-{os.getpid()}-")  # reaped if orphaned
    options = ("--lease-ttl", str(LEASE_TTL_S), "--offsets-topic-partitions", "1")
    cluster = LocalCluster(workdir, 3, node_options=options)
    cluster.start()
    etcd = Etcd(cluster.etcd.url)
    try:
        with httpx.Client(timeout=15.0) as http:
            urls = [node.url for node in cluster.nodes]
            created = http.post(
                f"{urls[0]}/v1/topics",
                json={
                    "name": TOPIC,
                    "partitions": 1,
                    "replication_factor": 3,
                    "configs": {"min.insync.replicas": 2},
                },
            )
            assert created.status_code == 201, created.text
            before = wait_for(lambda: etcd.partition(TOPIC, 0), SETTLE_S, "the partition")
            assert produced(http, urls[before.leader], list(range(50)), "50 records") == 0
            acknowledged = {i: i for i in range(50)}

            node = cluster.nodes[before.leader]
            node.kill()
            cut = lose_unsynced(node.data_dir, TOPIC, 1)
            assert cut[0][1] > 0, f"the cut dropped nothing ({cut}): the test proves nothing"
            node.start()

            def moved() -> PartitionState | None:
                state = etcd.partition(TOPIC, 0)
                if state is None or state.leader_epoch <= before.leader_epoch:
                    return None
                return state if state.leader != NO_LEADER else None

            wait_for(moved, SETTLE_S, "the partition led again in a later epoch")
            # The election itself, from etcd's history: by now the restarted node may have
            # caught up from the new leader and be back in the ISR, as it should.
            key = f"{ETCD_PREFIX}/partitions/{TOPIC}/0".encode()
            elected = next(
                state
                for _, value, revision in etcd.history(key, before.revision + 1)
                if value is not None
                and (state := PartitionState.parse(value, revision)).leader_epoch
                > before.leader_epoch
            )
            assert elected.leader != before.leader, (
                f"node {before.leader} lost its log and leads again in epoch {elected.leader_epoch}"
            )
            assert before.leader not in elected.isr
            offset = produced(http, urls[before.leader], [100, 101], "a produce after the fault")
            acknowledged |= {offset: 100, offset + 1: 101}
            wait_for(
                lambda: ((s := etcd.partition(TOPIC, 0)) is not None and len(s.isr) == 3) or None,
                SETTLE_S,
                f"node {before.leader} back in the ISR",
            )
            for i, url in enumerate(urls):
                stored = dict(read_all(http, url))
                lost = {o: v for o, v in acknowledged.items() if stored.get(o) != v}
                assert not lost, f"read through node {i}: acknowledged records lost: {lost}"
            logs = {
                i: [(r.offset, r.value) for r in read_replica_log(n.data_dir, TOPIC, 0)]
                for i, n in enumerate(cluster.nodes)
            }
            shortest = min(len(log) for log in logs.values())
            assert shortest >= len(acknowledged)
            assert len({tuple(log[:shortest]) for log in logs.values()}) == 1, (
                f"the replicas diverge: {logs}"
            )
    finally:
        etcd.close()
        cluster.stop()


def test_when_every_replica_lost_its_unsynced_tail_the_one_that_kept_the_most_leads(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """RF=3: 50 records acknowledged with acks=all, in batches of 10. A power cut takes all
    three nodes, each keeping a different part of what it had not fsynced: the preferred
    leader the first 10 records, the next replica 20, the last 40. All three restart after
    the crash; the partition waits for each one's log end, and the last replica leads (the
    first in replica order would lose 30 more records): every replica ends with its 40 records
    and what is produced after them, and no log end report is left in etcd."""
    workdir = tmp_path_factory.mktemp(f"{WORKDIR_MARKER}-{os.getpid()}-")  # reaped if orphaned
    cluster = LocalCluster(workdir, 3, node_options=("--offsets-topic-partitions", "1"))
    cluster.start()
    etcd = Etcd(cluster.etcd.url)
    try:
        with httpx.Client(timeout=15.0) as http:
            urls = [node.url for node in cluster.nodes]
            created = http.post(
                f"{urls[0]}/v1/topics",
                json={"name": TOPIC, "partitions": 1, "replication_factor": 3},
            )
            assert created.status_code == 201, created.text
            before = wait_for(lambda: etcd.partition(TOPIC, 0), SETTLE_S, "the partition")
            for first in range(0, 50, 10):
                values = list(range(first, first + 10))
                assert produced(http, urls[before.leader], values, f"records {first}+") == first
            wait_for(
                lambda: (
                    all(len(read_replica_log(n.data_dir, TOPIC, 0)) == 50 for n in cluster.nodes)
                    or None
                ),
                SETTLE_S,
                "every replica to hold the 50 records",
            )

            kept = dict(zip(before.replicas, (10, 20, 40), strict=True))
            for node in cluster.nodes:
                node.kill()
            for node in cluster.nodes:
                synced = recovery_point(node.data_dir, TOPIC, 0)
                assert synced <= kept[node.node_id], f"node {node.node_id} fsynced to {synced}"
                cut_at(node.data_dir / f"{TOPIC}-0", kept[node.node_id])
                assert len(read_replica_log(node.data_dir, TOPIC, 0)) == kept[node.node_id]
            cut_revision = etcd.revision() + 1  # the first write after the power cut
            for node in cluster.nodes:
                node.start()

            def led() -> PartitionState | None:
                state = etcd.partition(TOPIC, 0)
                if state is None or state.leader_epoch <= before.leader_epoch:
                    return None
                return state if state.leader != NO_LEADER else None

            longest = before.replicas[2]
            after = wait_for(led, SETTLE_S, "the partition led again in a later epoch")
            assert after.leader == longest, f"node {after.leader} leads, not node {longest}"
            history = etcd.history(f"{ETCD_PREFIX}/partitions/{TOPIC}/0".encode(), cut_revision)
            leaders = {PartitionState.parse(v, r).leader for _, v, r in history if v is not None}
            assert leaders <= {NO_LEADER, longest}, f"leaders after the power cut: {leaders}"
            assert etcd.range(f"{ETCD_PREFIX}/log_ends/{TOPIC}/".encode())[0] == []

            offset = produced(http, urls[longest], [100, 101], "a produce after the recovery")
            assert offset == 40
            acknowledged = {i: i for i in range(40)} | {40: 100, 41: 101}
            wait_for(
                lambda: ((s := etcd.partition(TOPIC, 0)) is not None and len(s.isr) == 3) or None,
                SETTLE_S,
                "every replica back in the ISR",
            )
            for i, url in enumerate(urls):
                stored = dict(read_all(http, url))
                lost = {o: v for o, v in acknowledged.items() if stored.get(o) != v}
                assert not lost, f"read through node {i}: records lost: {lost}"
            for node in cluster.nodes:
                log = [(r.offset, r.value) for r in read_replica_log(node.data_dir, TOPIC, 0)]
                assert log[:42] == [(o, str(v).encode()) for o, v in acknowledged.items()], (
                    f"node {node.node_id}'s log: {log}"
                )
            node_logs = [workdir / f"node-{i}.log" for i in range(3)]
            wait_for(
                lambda: (
                    any(f"node {longest} leads (log ends: " in p.read_text() for p in node_logs)
                    or None
                ),
                SETTLE_S,
                "the controller's warning naming the log ends",
            )
    finally:
        etcd.close()
        cluster.stop()


def read_all(http: httpx.Client, url: str) -> list[tuple[int, Any]]:
    """Every committed record of the partition, as (offset, value), read through `url`."""
    out: list[tuple[int, Any]] = []
    offset = 0
    while True:
        response = http.get(
            f"{url}/v1/topics/{TOPIC}/partitions/0/records",
            params={"offset": offset, "timeout_ms": 0},
        )
        assert response.status_code == 200, response.text
        doc = response.json()
        out += [(r["offset"], r["value"]) for r in doc["records"]]
        if doc["next_offset"] >= doc["high_watermark"] or not doc["records"]:
            return out
        offset = doc["next_offset"]
