"""Every produce route takes `acks` the same way (0, 1, all, and Kafka's -1 for all; all when
absent), on the partition's leader and through a node that forwards it. The acks applied show
on a topic whose min.insync.replicas (3) its two replicas never meet: acks=all is refused
(NOT_ENOUGH_REPLICAS, nothing appended), acks=1 is answered once the leader appended, acks=0
at once."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
import requests

from gateway.workers.local_cluster import LocalCluster
from replication.node_contract import append_path
from tests.e2e.conftest import until
from tests.e2e.test_cluster_groups import call

TOPIC = "acks"
JSON_V2 = "application/vnd.kafka.json.v2+json"
SPELLINGS = [None, "all", "-1", "1", "0"]
APPENDED = {None: False, "all": False, "-1": False, "1": True, "0": True}


@dataclass
class Nodes:
    cluster: LocalCluster
    leader: str  # the URL of the partition's leader
    forwarder: str  # ... and of a node that leads nothing of the topic

    def log_end(self) -> int:
        end = replica_end(self.leader)
        assert end is not None
        return end


def replica_end(url: str) -> int | None:
    """The log end of the node's replica of the partition (None: it holds none yet)."""
    answer = requests.get(f"{url}/v1/topics/{TOPIC}", timeout=10)
    if answer.status_code != 200:
        return None
    end = answer.json()["partitions"][0]["log_end_offset"]
    return end if isinstance(end, int) else None


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    cluster = LocalCluster(tmp_path_factory.mktemp("acks"), 3)
    cluster.start()
    try:
        urls = [node.url for node in cluster.nodes]
        created = call(
            "POST",
            f"{urls[0]}/v1/topics",
            json={
                "name": TOPIC,
                "partitions": 1,
                "replication_factor": 2,
                "configs": {"min.insync.replicas": 3},
            },
        )
        assert created.status_code == 201, created.text
        leader = created.json()["partitions"][0]["leader"]
        replicas = created.json()["partitions"][0]["replicas"]
        until(
            lambda: all(replica_end(urls[r]) is not None for r in replicas),
            "every replica taken up",
        )
        yield Nodes(cluster, urls[leader], urls[(leader + 1) % 3])
    finally:
        cluster.stop()


def query(acks: str | None) -> str:
    return "" if acks is None else f"?acks={acks}"


def v1_partition(url: str, acks: str | None) -> requests.Response:
    body = {"records": [{"value": 1}]}
    return requests.post(f"{url}/v1/topics/{TOPIC}/partitions/0/records{query(acks)}", json=body)


def v1_idempotent(url: str, acks: str | None) -> requests.Response:
    """The same produce with an Idempotency-Key: the Application's path, not the fast route."""
    body = {"records": [{"value": 1}]}
    headers = {"Idempotency-Key": uuid.uuid4().hex}
    path = f"/v1/topics/{TOPIC}/partitions/0/records{query(acks)}"
    return requests.post(url + path, json=body, headers=headers)


def v1_topic(url: str, acks: str | None) -> requests.Response:
    body = b'{"value": 1}\n'
    headers = {"Content-Type": "application/x-ndjson"}
    return requests.post(
        f"{url}/v1/topics/{TOPIC}/records{query(acks)}", data=body, headers=headers
    )


def v2(url: str, acks: str | None) -> requests.Response:
    body = b'{"records": [{"value": 1}]}'
    headers = {"Content-Type": JSON_V2}
    return requests.post(
        f"{url}/topics/{TOPIC}/partitions/0{query(acks)}", data=body, headers=headers
    )


def v3(url: str, acks: str | None) -> requests.Response:
    cluster_id = requests.get(f"{url}/v3/clusters", timeout=10).json()["data"][0]["cluster_id"]
    body = b'{"partition_id": 0, "value": {"type": "JSON", "data": 1}}'
    path = f"/v3/clusters/{cluster_id}/topics/{TOPIC}/records{query(acks)}"
    return requests.post(url + path, data=body, headers={"Content-Type": "application/json"})


Route = Callable[[str, str | None], requests.Response]
ROUTES: dict[str, Route] = {
    "v1 partition": v1_partition,
    "v1 idempotent": v1_idempotent,
    "v1 topic": v1_topic,
    "REST Proxy v2": v2,
    "REST Proxy v3": v3,
}


def outcome(route: str, answer: requests.Response) -> str:
    """What the answer says happened: refused, appended, or sent (acks=0: not awaited)."""
    doc = answer.json()
    if route == "REST Proxy v2":
        if answer.status_code == 503:
            assert doc["error_code"] == 50003, doc  # v2's code for a retriable Kafka error
            return "refused"
        assert doc["offsets"][0]["error_code"] is None, doc
    elif route == "REST Proxy v3":
        if doc["error_code"] != 200:
            assert (answer.status_code, doc["error_code"]) == (503, 503), doc
            return "refused"
    elif answer.status_code == 503:
        assert doc["code"] == "NOT_ENOUGH_REPLICAS", doc
        return "refused"
    assert answer.status_code in (200, 202), answer.text
    return "sent" if answer.status_code == 202 else "appended"


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("through", ["leader", "forwarder"])
def test_every_route_applies_every_spelling_of_acks(nodes: Nodes, route: str, through: str) -> None:
    url = nodes.leader if through == "leader" else nodes.forwarder
    for acks in SPELLINGS:
        before = nodes.log_end()
        said = outcome(route, ROUTES[route](url, acks))
        expected = {True: ("appended", "sent"), False: ("refused",)}[APPENDED[acks]]
        assert said in expected, (acks, said)
        if route not in ("REST Proxy v2", "REST Proxy v3"):
            assert (said == "sent") == (acks == "0"), (acks, said)
        if said == "appended":
            assert nodes.log_end() == before + 1, acks
        elif said == "refused":
            assert nodes.log_end() == before, acks
    refused = ROUTES[route](url, "2")
    assert refused.status_code == 400, refused.text


def test_the_internal_append_route_takes_every_spelling(nodes: Nodes) -> None:
    """Another node's front sends its batches to the leader's internal route with the acks
    it parsed; a batch it built is refused or appended there as the acks say."""
    forwarded = v1_partition(nodes.forwarder, "1")
    assert forwarded.status_code == 200, forwarded.text
    records = requests.get(
        f"{nodes.leader}/v1/topics/{TOPIC}/partitions/0/records?offset=0&timeout_ms=10000",
        headers={"Accept": "application/vnd.sluice.record-batch"},
        timeout=10,
    )
    assert records.status_code == 200 and records.content
    batch = records.content
    for acks in SPELLINGS:
        before = nodes.log_end()
        answer = requests.post(
            f"{nodes.leader}{append_path(TOPIC, 0)}{query(acks)}",
            data=batch,
            headers={"Content-Type": "application/vnd.sluice.record-batch"},
            timeout=10,
        )
        if APPENDED[acks]:
            assert answer.status_code == 200, (acks, answer.text)
            assert nodes.log_end() > before
        else:
            assert answer.status_code == 503, (acks, answer.text)
            assert answer.json()["code"] == "NOT_ENOUGH_REPLICAS"
            assert nodes.log_end() == before
