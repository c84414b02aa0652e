"""REST Proxy v2 consumer instances on a three-node cluster and on `--workers 2`: an instance
created through one node is read, committed and deleted through the others (Confluent's and
Karapace's instances live in one proxy node's memory; Sluice's in the group's log)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.workers.local_cluster import LocalCluster
from tests.e2e.test_cluster_groups import call, wait_offsets_topic
from tests.e2e.test_workers import create_topic, on_worker, start_supervisor

V2 = "application/vnd.kafka.v2+json"
JSON_V2 = "application/vnd.kafka.json.v2+json"
GROUP = "v2-readers"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    nodes = LocalCluster(tmp_path, 3, node_options=["--lease-ttl", "2"])
    nodes.start()
    try:
        yield nodes
    finally:
        nodes.stop()


def v2(method: str, url: str, body: object = None, **headers: str) -> Any:
    data = None if body is None else orjson.dumps(body)
    return call(method, url, data=data, headers={"Content-Type": V2, **headers})


def read_all(urls: list[str], instance: str, want: int, group: str = GROUP) -> list[int]:
    """Read through every node in turn until `want` values arrived."""
    seen: list[int] = []
    turn = 0
    while len(seen) < want:
        assert turn < 200, f"only {len(seen)} of {want} records arrived"
        url = urls[turn % len(urls)]
        turn += 1
        resp = v2("GET", f"{url}/consumers/{group}/instances/{instance}/records?timeout=200",
                  Accept=JSON_V2)  # fmt: skip
        assert resp.status_code == 200, resp.text
        seen.extend(r["value"] for r in resp.json())
    return seen


def test_an_instance_is_served_by_every_node(cluster: LocalCluster) -> None:
    urls = [node.url for node in cluster.nodes]
    wait_offsets_topic(urls[0])
    created = call("POST", f"{urls[1]}/v1/topics", json={"name": "events", "partitions": 3})
    assert created.status_code == 201, created.text
    records = [{"key": f"k{i}", "value": i} for i in range(60)]
    produced = v2("POST", f"{urls[2]}/topics/events", {"records": records},
                  **{"Content-Type": JSON_V2})  # fmt: skip
    assert produced.status_code == 200, produced.text
    config = {"name": "i1", "format": "json", "auto.offset.reset": "earliest"}
    resp = v2("POST", f"{urls[0]}/consumers/{GROUP}", config)
    assert resp.status_code == 200, resp.text
    # The base URI names the node the client reached, whichever node coordinates the group.
    assert resp.json()["base_uri"] == f"{urls[0]}/consumers/{GROUP}/instances/i1"
    base = f"/consumers/{GROUP}/instances/i1"
    resp = v2("POST", f"{urls[1]}{base}/subscription", {"topics": ["events"]})
    assert resp.status_code == 204, resp.text
    assert v2("GET", f"{urls[2]}{base}/subscription").json() == {"topics": ["events"]}
    assert sorted(read_all(urls, "i1", 60)) == list(range(60))
    assert v2("POST", f"{urls[2]}{base}/offsets").status_code == 200
    asked = {"partitions": [{"topic": "events", "partition": p} for p in range(3)]}
    committed = v2("GET", f"{urls[0]}{base}/offsets", asked).json()["offsets"]
    assert sum(o["offset"] for o in committed) == 60
    described = call("GET", f"{urls[1]}/v1/groups/{GROUP}").json()
    assert [m["member_id"] for m in described["members"]] == ["i1"]
    assert v2("DELETE", f"{urls[1]}{base}").status_code == 204
    gone = v2("GET", f"{urls[2]}{base}/records")
    assert gone.status_code == 404 and gone.json()["error_code"] == 40403


def test_an_instance_is_served_by_either_worker(tmp_path: Path) -> None:
    supervisor = start_supervisor(tmp_path / "data")
    first, second = on_worker(supervisor.url, 0), on_worker(supervisor.url, 1)
    try:
        create_topic(first, "jobs")
        records = orjson.dumps({"records": [{"key": f"k{i}", "value": i} for i in range(20)]})
        produced = second.post("/topics/jobs", content=records, headers={"Content-Type": JSON_V2})
        assert produced.status_code == 200, produced.text
        headers = {"Content-Type": V2}
        config = {"name": "w1", "format": "json", "auto.offset.reset": "earliest"}
        created = first.post("/consumers/jobs-group", content=orjson.dumps(config), headers=headers)
        assert created.status_code == 200, created.text
        base = "/consumers/jobs-group/instances/w1"
        subscribed = second.post(
            f"{base}/subscription", content=orjson.dumps({"topics": ["jobs"]}), headers=headers
        )
        assert subscribed.status_code == 204, subscribed.text
        seen: list[int] = []
        for turn in range(100):
            if len(seen) >= 20:
                break
            client = (first, second)[turn % 2]
            answer = client.get(f"{base}/records?timeout=200", headers={"Accept": JSON_V2})
            assert answer.status_code == 200, answer.text
            seen.extend(r["value"] for r in answer.json())
        assert sorted(seen) == list(range(20))
        assert first.post(f"{base}/offsets", headers=headers).status_code == 200
        assert second.delete(base).status_code == 204
        assert first.get(f"{base}/subscription").json()["error_code"] == 40403
    finally:
        first.close()
        second.close()
        assert supervisor.stop() == 0


def test_v3_produce_and_manual_assignments_through_every_node(cluster: LocalCluster) -> None:
    """v3 record produce through each node reaches partitions led anywhere (the produce front
    forwards); an instance assigned partitions through one node reads them through another,
    and a pattern subscription made through a third picks up a topic created after it."""
    urls = [node.url for node in cluster.nodes]
    wait_offsets_topic(urls[0])
    created = call("POST", f"{urls[0]}/v1/topics", json={"name": "audit", "partitions": 3})
    assert created.status_code == 201, created.text
    cluster_id = call("GET", f"{urls[1]}/v3/clusters").json()["data"][0]["cluster_id"]
    assert {call("GET", f"{u}/v3/clusters").json()["data"][0]["cluster_id"] for u in urls} == {
        cluster_id
    }
    for i, url in enumerate(urls * 3):
        record = {"partition_id": i % 3, "value": {"type": "JSON", "data": i}}
        answer = call("POST", f"{url}/v3/clusters/{cluster_id}/topics/audit/records", json=record)
        assert answer.status_code == 200, answer.text
        assert answer.json()["partition_id"] == i % 3
    config = {"name": "a1", "format": "json", "auto.offset.reset": "earliest"}
    assert v2("POST", f"{urls[2]}/consumers/auditors", config).status_code == 200
    base = "/consumers/auditors/instances/a1"
    assigned = {"partitions": [{"topic": "audit", "partition": p} for p in (0, 2)]}
    assert v2("POST", f"{urls[0]}{base}/assignments", assigned).status_code == 204
    listed = v2("GET", f"{urls[1]}{base}/assignments").json()
    assert listed == assigned
    seen = read_all(urls, "a1", 6, "auditors")
    assert sorted(seen) == [i for i in range(9) if i % 3 != 1]
    assert v2("DELETE", f"{urls[1]}{base}/subscription").status_code == 204
    pattern = {"topic_pattern": "later-.*"}
    assert v2("POST", f"{urls[2]}{base}/subscription", pattern).status_code == 204
    created = call("POST", f"{urls[1]}/v1/topics", json={"name": "later-1", "partitions": 1})
    assert created.status_code == 201, created.text
    produced = v2("POST", f"{urls[0]}/topics/later-1", {"records": [{"value": 42}]},
                  **{"Content-Type": JSON_V2})  # fmt: skip
    assert produced.status_code == 200, produced.text
    assert read_all(urls, "a1", 1, "auditors") == [42]
