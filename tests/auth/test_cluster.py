"""Auth on a real two-node cluster with etcd: nodes reach each other with the internal key
(replication, forwarding), keys and ACLs made through one node are enforced by the other."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from gateway.workers.local_cluster import LocalCluster
from tests.e2e.conftest import until

INTERNAL_KEY = "cluster-internal-key-0123456789abcdef"
RETRIABLE = (421, 502, 503, 504)
DEADLINE_S = 60.0


def call(method: str, url: str, key: str, **kwargs: Any) -> requests.Response:
    """One call as `key`, retried while the cluster settles (503, 421...) until a deadline."""
    deadline = time.monotonic() + DEADLINE_S
    headers = {"Authorization": f"Bearer {key}"}
    while True:
        try:
            answer = requests.request(method, url, headers=headers, timeout=30, **kwargs)
            if answer.status_code not in RETRIABLE:
                return answer
        except requests.ConnectionError:
            pass
        assert time.monotonic() < deadline, f"{method} {url} kept failing"
        time.sleep(0.1)  # a retry's back-off, not a synchronisation


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    key_file = tmp_path / "internal.key"
    key_file.write_text(INTERNAL_KEY + "\n")
    options = ["--auth", "--internal-key-file", str(key_file), "--super-user", "admin",
               "--lease-ttl", "2"]  # fmt: skip
    nodes = LocalCluster(tmp_path, 2, node_options=options)
    nodes.etcd.start()
    try:
        for node in nodes.nodes:
            node.start()

        def settled() -> bool:
            views = [call("GET", f"{n.url}/v1/cluster", INTERNAL_KEY).json() for n in nodes.nodes]
            return all(
                v["controller"] is not None and all(n["alive"] for n in v["nodes"])
                and len(v["nodes"]) == 2
                for v in views
            )  # fmt: skip

        until(settled, "both nodes alive with a controller")
        yield nodes
    finally:
        nodes.stop()


def test_acls_made_on_one_node_are_enforced_by_the_other(cluster: LocalCluster) -> None:
    first, second = (node.url for node in cluster.nodes)
    # bootstrap: the internal key is a super user; it makes the administrator's key
    made = call("POST", f"{first}/v1/auth/keys", INTERNAL_KEY, json={"principal": "admin"})
    assert made.status_code == 201, made.text
    admin = made.json()["secret"]
    alice = call("POST", f"{first}/v1/auth/keys", admin, json={"principal": "alice"}).json()
    until(
        lambda: call("GET", f"{second}/v1/cluster", alice["secret"]).status_code == 403,
        "alice's key known to the second node",
    )
    created = call("POST", f"{second}/v1/topics", admin,
                   json={"name": "t", "partitions": 4, "replication_factor": 2})  # fmt: skip
    assert created.status_code == 201, created.text
    records = {"records": [{"key": f"k{i}", "value": i} for i in range(20)]}
    produce = f"{second}/v1/topics/t/records?acks=all"
    refused = call("POST", produce, alice["secret"], json=records)
    assert refused.status_code == 403 and refused.json()["code"] == "ACL_DENIED"
    acl = {"principal": "alice", "resource_type": "topic", "resource_name": "t",
           "pattern_type": "literal", "operation": "write", "permission": "allow"}  # fmt: skip
    assert call("POST", f"{first}/v1/acls", admin, json=acl).status_code == 201
    answers: list[requests.Response] = []

    def produced() -> bool:
        answers.append(call("POST", produce, alice["secret"], json=records))
        return answers[-1].status_code == 200

    until(produced, "the second node enforcing the ACL added through the first")
    # acks=all on every partition, through whichever node leads it: forwarded appends and
    # follower fetches between the nodes carried the internal key
    assert {r["partition"] for r in answers[-1].json()["results"]} == {0, 1, 2, 3}
    described = call("GET", f"{first}/v1/topics/t", admin).json()
    assert {p["leader"] for p in described["partitions"]} == {0, 1}
    assert all(len(p["isr"]) == 2 for p in described["partitions"]), described
    assert call("DELETE", f"{second}/v1/acls", admin, json=acl).status_code == 204
    until(
        lambda: call("POST", produce, alice["secret"], json=records).status_code == 403,
        "the first node dropping the ACL removed through the second",
    )
    listed = call("GET", f"{first}/v1/auth/keys", admin).json()["keys"]
    assert {k["principal"] for k in listed} == {"admin", "alice"}
    revoked = call("DELETE", f"{second}/v1/auth/keys/{alice['key_id']}", admin)
    assert revoked.status_code == 204
    until(
        lambda: call("GET", f"{first}/v1/cluster", alice["secret"]).status_code == 401,
        "the first node forgetting the revoked key",
    )


def test_quotas_set_through_one_node_hold_on_both_charged_once(cluster: LocalCluster) -> None:
    """A quota lives in etcd beside the ACLs; a request forwarded to the partition's leader is
    charged only on the node it came in through."""
    first, second = cluster.nodes
    admin = call("POST", f"{first.url}/v1/auth/keys", INTERNAL_KEY,
                 json={"principal": "admin"}).json()["secret"]  # fmt: skip
    alice = call("POST", f"{first.url}/v1/auth/keys", admin,
                 json={"principal": "alice"}).json()["secret"]  # fmt: skip
    created = call("POST", f"{first.url}/v1/topics", admin,
                   json={"name": "q", "partitions": 2, "replication_factor": 1})  # fmt: skip
    assert created.status_code == 201, created.text
    acl = {"principal": "alice", "resource_type": "topic", "resource_name": "q",
           "pattern_type": "literal", "operation": "write", "permission": "allow"}  # fmt: skip
    assert call("POST", f"{first.url}/v1/acls", admin, json=acl).status_code == 201
    leaders = {p["partition"]: p["leader"] for p in
               call("GET", f"{first.url}/v1/topics/q", admin).json()["partitions"]}  # fmt: skip
    led_by_first = next(p for p, leader in leaders.items() if leader == first.node_id)
    produce = f"/v1/topics/q/partitions/{led_by_first}/records?acks=1"
    records = {"records": [{"value": 1}]}
    # every node allows alice (the ACL through etcd) before a quota makes retries costly
    for node in cluster.nodes:

        def allows(url: str = node.url + produce) -> bool:
            return call("POST", url, alice, json=records).status_code == 200

        until(allows, f"node {node.node_id} allowing alice")
    put = call("PUT", f"{first.url}/v1/quotas/alice", admin, json={"requests_per_second": 0.01})
    assert put.status_code == 200, put.text
    until(
        lambda: call("GET", f"{second.url}/v1/quotas/alice", admin).json()["quota"] is not None,
        "the second node knowing the quota set through the first",
    )
    # through the second node, forwarded to the first: charged on the second only
    assert call("POST", second.url + produce, alice, json=records).status_code == 200
    refused = call("POST", second.url + produce, alice, json=records)
    assert refused.status_code == 429 and refused.json()["code"] == "QUOTA_EXCEEDED"
    assert int(refused.headers["Retry-After"]) >= 90
    assert call("POST", first.url + produce, alice, json=records).status_code == 200
    assert call("POST", first.url + produce, alice, json=records).status_code == 429
    assert call("DELETE", f"{second.url}/v1/quotas/alice", admin).status_code == 204
    until(
        lambda: call("POST", first.url + produce, alice, json=records).status_code == 200,
        "the first node dropping the quota removed through the second",
    )
