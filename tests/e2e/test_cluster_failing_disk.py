"""A leader's disk fails in a cluster of three real nodes (etcd and `python -m gateway
--cluster` processes): the node reports its offline partition, the controller moves the
leadership to an in-sync replica, acks=all produces through another node succeed again, and
every record acknowledged before the failure is still there.

Only the failing node's data directory is on the loop-device ext4 (tests/e2e/conftest.py),
which is shut down under it as a dead device would be: every later call answers EIO.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from gateway.workers.local_cluster import LocalCluster
from tests.e2e.conftest import Ext4, read_values, until

FAILING = 1
TOPIC = "t"
ELECTION_S = 30.0


def produce(http: httpx.Client, url: str, partition: int, values: list[str]) -> httpx.Response:
    return http.post(
        f"{url}/v1/topics/{TOPIC}/partitions/{partition}/records",
        params={"acks": "all"},
        json={"records": [{"value": v} for v in values]},
    )


def describe(http: httpx.Client, url: str, partition: int) -> dict[str, Any]:
    answer = http.get(f"{url}/v1/topics/{TOPIC}")
    assert answer.status_code == 200, answer.text
    row: dict[str, Any] = answer.json()["partitions"][partition]
    return row


def test_a_leader_whose_disk_fails_hands_its_partition_to_an_in_sync_replica(
    ext4: Ext4, tmp_path: Path
) -> None:
    cluster = LocalCluster(tmp_path, 3, node_options=["--lease-ttl", "2"])
    # Its data on the loop device; its log beside the others' (the mount's parent).
    cluster.nodes[FAILING].data_dir = ext4.mount
    cluster.start()
    try:
        url = cluster.nodes[0].url
        with httpx.Client(timeout=30) as http:
            created = http.post(
                f"{url}/v1/topics",
                json={"name": TOPIC, "partitions": 3, "replication_factor": 3},
            )
            assert created.status_code == 201, created.text
            [partition] = [
                row["partition"] for row in created.json()["partitions"] if row["leader"] == FAILING
            ]
            acknowledged = [f"v{i}" for i in range(20)]
            for i in range(0, len(acknowledged), 5):
                answer = produce(http, url, partition, acknowledged[i : i + 5])
                assert answer.status_code == 200, answer.text

            ext4.die()
            # The leader meets the failure appending (unless a follower's fetch met it first
            # and the leadership has moved already).
            first = produce(http, url, partition, ["first"])
            if first.status_code == 200:
                acknowledged.append("first")
            else:
                assert first.status_code == 503, first.text
                assert first.json()["code"] == "KAFKA_STORAGE_ERROR"

            def moved() -> bool:
                row = describe(http, url, partition)
                return (
                    row["leader"] not in (None, FAILING)
                    and FAILING not in row["isr"]
                    and row["offline_replicas"] == [FAILING]
                )

            until(moved, f"the leadership of {TOPIC}-{partition} to leave node 1", ELECTION_S)
            after = produce(http, url, partition, ["after"])
            assert after.status_code == 200, after.text
            assert after.json()["results"][0]["base_offset"] == len(acknowledged)
            end = len(acknowledged) + 1
            assert read_values(http, url, TOPIC, end, partition) == [*acknowledged, "after"]
    finally:
        cluster.stop()
    failing_log = (tmp_path / f"node-{FAILING}.log").read_text()
    assert f"node {FAILING} reports its offline partitions to the controller" in failing_log
    logs = "".join(p.read_text() for p in tmp_path.glob("node-*.log"))
    assert f"(nodes [{FAILING}] report its log offline)" in logs
    assert "Traceback" not in logs
