"""Consumer groups on a three-node cluster: members joined and fetching through any node read
partitions led by every node, and a group survives the loss of its coordinator."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from engine.offsets_topic import OFFSETS_TOPIC, partition_for
from gateway.workers.local_cluster import LocalCluster

TOPIC = "events"
GROUP = "readers"
DEADLINE_S = 60.0
RETRIABLE = (421, 502, 503, 504)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    nodes = LocalCluster(tmp_path, 3, node_options=["--lease-ttl", "2"])
    nodes.start()
    try:
        yield nodes
    finally:
        nodes.stop()


def call(method: str, url: str, **kwargs: Any) -> requests.Response:
    """One call, retried while the cluster moves leaders (503, 502, 421...) until a deadline."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            resp = requests.request(method, url, timeout=30, **kwargs)
            if resp.status_code not in RETRIABLE:
                return resp
        except requests.ConnectionError:
            pass
        assert time.monotonic() < deadline, f"{method} {url} kept failing"
        time.sleep(0.1)  # a retry's back-off, not a synchronisation


def produce(url: str, values: range) -> None:
    records = [{"key": f"k{v}", "value": v} for v in values]
    resp = call("POST", f"{url}/v1/topics/{TOPIC}/records?acks=all", json={"records": records})
    assert resp.status_code == 200, resp.text


def drain(urls: list[str], members: list[str], want: set[int]) -> list[int]:
    """Fetch as the members, round-robin over nodes, until every value in `want` arrived;
    returns everything delivered, duplicates included."""
    seen: list[int] = []
    cursors: dict[str, int] = {}
    deadline = time.monotonic() + DEADLINE_S
    turn = 0
    while not want <= set(seen):
        missing = sorted(want - set(seen))
        assert time.monotonic() < deadline, f"{len(missing)} records never arrived: {missing}"
        member = members[turn % len(members)]
        url = urls[turn % len(urls)]
        turn += 1
        params = {"max_records": "50", "timeout_ms": "200"}
        if member in cursors:
            params["cursor"] = str(cursors[member])
        resp = call("GET", f"{url}/v1/groups/{GROUP}/members/{member}/records", params=params)
        assert resp.status_code == 200, resp.text
        answer = resp.json()
        cursors[member] = answer["cursor"]
        seen.extend(r["value"] for r in answer["records"])
    return seen


def join(url: str, member: str) -> None:
    body = {"topics": [TOPIC], "instance_id": member, "auto_offset_reset": "earliest"}
    resp = call("POST", f"{url}/v1/groups/{GROUP}/members", json=body)
    assert resp.status_code == 201, resp.text


def coordinator(url: str) -> int:
    """The node leading the group's offsets partition."""
    doc = call("GET", f"{url}/v1/topics/{OFFSETS_TOPIC}").json()
    leader: int = doc["partitions"][partition_for(GROUP, len(doc["partitions"]))]["leader"]
    return leader


def wait_offsets_topic(url: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while requests.get(f"{url}/v1/topics/{OFFSETS_TOPIC}", timeout=10).status_code != 200:
        assert time.monotonic() < deadline, "the controller never created the offsets topic"
        time.sleep(0.1)


def test_members_read_every_node_and_survive_the_coordinator(cluster: LocalCluster) -> None:
    urls = [node.url for node in cluster.nodes]
    wait_offsets_topic(urls[0])
    resp = call("POST", f"{urls[1]}/v1/topics", json={"name": TOPIC, "partitions": 3})
    assert resp.status_code == 201, resp.text
    leaders = {p["leader"] for p in resp.json()["partitions"]}
    assert leaders == {0, 1, 2}  # every node leads one partition
    produce(urls[2], range(0, 150))
    join(urls[0], "m1")
    join(urls[2], "m2")
    first = drain(urls, ["m1", "m2"], set(range(150)))
    assert sorted(first) == list(range(150))  # once each: the members commit as they fetch
    # An explicit commit of everything delivered, then the coordinator dies.
    for member, url in (("m1", urls[1]), ("m2", urls[0])):
        resp = call("POST", f"{url}/v1/groups/{GROUP}/members/{member}/commit")
        assert resp.status_code == 200, resp.text
    dead = coordinator(urls[0])
    cluster.nodes[dead].kill()
    alive = [node.url for node in cluster.nodes if node.running]
    produce(alive[0], range(150, 250))
    # The new coordinator replays the group from the replicated offsets topic: the members
    # keep their ids and start from what they committed, so nothing committed comes again.
    deadline = time.monotonic() + DEADLINE_S
    while coordinator(alive[0]) == dead:
        assert time.monotonic() < deadline, "no new coordinator was elected"
        time.sleep(0.1)
    later = drain(alive, ["m1", "m2"], set(range(150, 250)))
    assert not set(later) & set(range(150)), "committed records were delivered again"
