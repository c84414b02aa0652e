"""A node that crashes, loses what it had not fsynced and restarts before the controller noticed
(within its old lease) must not lead again with what is left: its new incarnation voids its old
leaderships and ISR memberships (Kafka's broker epoch, KIP-841/903; docs/cluster.md)."""

from __future__ import annotations

import os
from typing import Any

import httpx
import pytest

from gateway.workers.local_cluster import LocalCluster
from tests.cluster.conftest import WORKDIR_MARKER
from tests.cluster.harness import (
    NO_LEADER,
    SETTLE_S,
    Etcd,
    PartitionState,
    read_replica_log,
    wait_for,
)
from tests.cluster.powercut import lose_unsynced

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

            after = wait_for(moved, SETTLE_S, "the partition led again in a later epoch")
            assert after.leader != before.leader, (
                f"node {before.leader} lost its log and leads again in epoch {after.leader_epoch}"
            )
            assert before.leader not in after.isr
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
