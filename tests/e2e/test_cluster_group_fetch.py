"""A group member's fetch on a three-node cluster reads the partitions the other nodes lead with
one request per leader node, not one per partition: at once, and parked (woken by records on
any one of them). Counted by the coordinator's `sluice_group_remote_fetches_total`."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from engine.offsets_topic import OFFSETS_TOPIC, partition_for
from gateway.workers.local_cluster import LocalCluster
from tests.e2e.conftest import until
from tests.e2e.test_cluster_groups import DEADLINE_S, call, wait_offsets_topic

PARTITIONS = 6  # two led by each node
PARKED_MS = 60_000  # a parked member fetch's timeout: an answer before it was woken
CLIENT_TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    nodes = LocalCluster(tmp_path_factory.mktemp("cluster"), 3, node_options=["--lease-ttl", "2"])
    nodes.start()
    try:
        wait_offsets_topic(nodes.nodes[0].url)
        yield nodes
    finally:
        nodes.stop()


def remote_fetches(url: str) -> dict[str, float]:
    """The node's `sluice_group_remote_fetches_total`, by kind (read, poll)."""
    text = requests.get(f"{url}/metrics", timeout=10).text
    return {
        sample.labels["kind"]: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "sluice_group_remote_fetches_total"
    }


def spread_topic(url: str, topic: str) -> dict[int, int]:
    """Create `topic` with a partition's leader for each partition; asserts every node leads
    two."""
    created = call("POST", f"{url}/v1/topics", json={"name": topic, "partitions": PARTITIONS})
    assert created.status_code == 201, created.text
    leaders = {p["partition"]: p["leader"] for p in created.json()["partitions"]}
    assert Counter(leaders.values()) == {0: 2, 1: 2, 2: 2}, leaders
    return leaders


def produce(url: str, topic: str, partition: int, values: list[int]) -> None:
    records = [{"value": v} for v in values]
    resp = call(
        "POST",
        f"{url}/v1/topics/{topic}/partitions/{partition}/records?acks=all",
        json={"records": records},
    )
    assert resp.status_code == 200, resp.text


def coordinator(cluster: LocalCluster, group: str) -> str:
    """The URL of the node coordinating `group` (its offsets partition's leader)."""
    urls = [node.url for node in cluster.nodes]
    doc = call("GET", f"{urls[0]}/v1/topics/{OFFSETS_TOPIC}").json()
    leader: int = doc["partitions"][partition_for(group, len(doc["partitions"]))]["leader"]
    return urls[leader]


def join(url: str, group: str, topic: str) -> None:
    body = {"topics": [topic], "instance_id": "m", "auto_offset_reset": "earliest"}
    resp = call("POST", f"{url}/v1/groups/{group}/members", json=body)
    assert resp.status_code == 201, resp.text


def member_fetch(url: str, group: str, timeout_ms: int, min_bytes: int = 1) -> list[Any]:
    """One fetch as member m of `group`: the values it delivered."""
    params = {"max_records": "500", "timeout_ms": str(timeout_ms), "min_bytes": str(min_bytes)}
    resp = requests.get(
        f"{url}/v1/groups/{group}/members/m/records", params=params, timeout=CLIENT_TIMEOUT_S
    )
    assert resp.status_code == 200, resp.text
    return [r["value"] for r in resp.json()["records"]]


def remote_leaders(cluster: LocalCluster, leaders: dict[int, int], here: str) -> dict[int, int]:
    """The partitions another node than the coordinator at `here` leads, with that node."""
    urls = [node.url for node in cluster.nodes]
    return {p: node for p, node in leaders.items() if urls[node] != here}


def test_a_member_reads_two_leaders_with_one_request_each(cluster: LocalCluster) -> None:
    group, topic = "one-request-per-leader", "spread"
    here = coordinator(cluster, group)
    leaders = spread_topic(here, topic)
    elsewhere = remote_leaders(cluster, leaders, here)
    assert len(elsewhere) == 4 and len(set(elsewhere.values())) == 2
    for p in range(PARTITIONS):
        produce(here, topic, p, [100 * p + i for i in range(5)])
    join(here, group, topic)
    before = remote_fetches(here)
    # Everything is committed: one pass reads it all, answered at once (no park).
    first = member_fetch(here, group, 0)
    after = remote_fetches(here)
    assert after["read"] - before["read"] == 2  # one per leader node, not one per partition
    assert after["poll"] == before["poll"]
    want = sorted(100 * p + i for p in range(PARTITIONS) for i in range(5))
    seen = list(first)
    deadline = time.monotonic() + DEADLINE_S
    while len(seen) < len(want):  # a leader moving under the first pass: read on
        assert time.monotonic() < deadline, f"only {len(seen)} records arrived"
        seen.extend(member_fetch(here, group, 200))
    assert sorted(seen) == want


def test_a_parked_member_is_woken_by_any_remote_partition(cluster: LocalCluster) -> None:
    group, topic = "woken-by-any", "parked"
    here = coordinator(cluster, group)
    leaders = spread_topic(here, topic)
    join(here, group, topic)
    assert member_fetch(here, group, 0) == []  # positions at the (empty) log ends
    with ThreadPoolExecutor(1) as pool:
        for value, partition in enumerate(sorted(remote_leaders(cluster, leaders, here))):
            woken_by(pool, here, group, topic, partition, value)


def woken_by(
    pool: ThreadPoolExecutor, here: str, group: str, topic: str, partition: int, value: int
) -> None:
    """Park member m's fetch, one long-poll at each of the two other leaders, then produce
    `value` to `partition`: the fetch answers with it. Only a wake answers before PARKED_MS,
    long after the client gave up (CLIENT_TIMEOUT_S)."""
    before = remote_fetches(here)
    parked = pool.submit(member_fetch, here, group, PARKED_MS)
    until(lambda: remote_fetches(here)["poll"] - before["poll"] == 2, "a poll at each leader")
    produce(here, topic, partition, [value])
    assert parked.result() == [value]
    after = remote_fetches(here)
    assert after["poll"] - before["poll"] == 2
    # The pass before the park and the pass after the wake: each one request per leader.
    assert after["read"] - before["read"] == 4


def test_a_member_short_of_min_bytes_parks_once_at_each_leader(cluster: LocalCluster) -> None:
    """Records there but fewer bytes than min_bytes: the fetch parks at each other leader past
    what it read (not at its position, which would answer at once, wake it, and poll again in
    a loop until the timeout), and answers with them when the timeout passes."""
    group, topic = "short-of-min-bytes", "short"
    here = coordinator(cluster, group)
    leaders = spread_topic(here, topic)
    elsewhere = sorted(remote_leaders(cluster, leaders, here))
    for value, partition in enumerate(elsewhere):
        produce(here, topic, partition, [value])
    join(here, group, topic)
    before = remote_fetches(here)
    delivered = member_fetch(here, group, 1500, min_bytes=1 << 20)
    after = remote_fetches(here)
    assert sorted(delivered) == list(range(len(elsewhere)))
    assert after["poll"] - before["poll"] == 2  # one park at each of the two other leaders
    assert after["read"] - before["read"] == 4  # the passes before the park and after it
