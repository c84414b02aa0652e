"""A request forwarded to a node that took it and stopped answering (SIGSTOP: alive to the
cluster, silent to its peers) is answered 504 `NODE_TIMED_OUT` once `--forward-timeout-ms`
has passed, instead of holding its client until the node comes back; a long-poll forwarded
keeps its own `timeout_ms` on top of that bound."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from gateway.workers.local_cluster import LocalCluster
from tests.cluster.conftest import own_cluster
from tests.cluster.harness import SETTLE_S, wait_for

FORWARD_TIMEOUT_MS = 1_000


@pytest.fixture
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Two nodes whose leases outlive the test: a paused node stays in the cluster's view."""
    with own_cluster(
        tmp_path_factory,
        2,
        "--lease-ttl",
        "60",
        "--forward-timeout-ms",
        str(FORWARD_TIMEOUT_MS),
        "--offsets-topic-partitions",
        "1",
    ) as cluster:
        yield cluster


def test_a_request_forwarded_to_a_paused_node_times_out_and_may_have_been_served(
    cluster: LocalCluster,
) -> None:
    with httpx.Client(timeout=30.0) as http:
        controller = http.get(cluster.nodes[0].url + "/v1/cluster").json()["controller"]
        paused = next(n for n in cluster.nodes if n.node_id == controller)
        via = next(n for n in cluster.nodes if n.node_id != controller)
        paused.pause()
        try:
            started = time.monotonic()
            answer = http.post(f"{via.url}/v1/topics", json={"name": "late", "partitions": 1})
            waited = time.monotonic() - started
        finally:
            paused.resume()
        assert answer.status_code == 504, answer.text
        assert answer.headers["Content-Type"].startswith("application/problem+json")
        problem = answer.json()
        assert problem["code"] == "NODE_TIMED_OUT"
        assert "may have been served" in problem["detail"]
        assert waited >= FORWARD_TIMEOUT_MS / 1000

        # Once the node runs again, the client's retry is served: made now (201), or found
        # made by the call that timed out (409).
        def retried() -> httpx.Response | None:
            again = http.post(f"{via.url}/v1/topics", json={"name": "late", "partitions": 1})
            return again if again.status_code in (201, 409) else None

        wait_for(retried, SETTLE_S, "the retried create")
        assert http.get(f"{via.url}/v1/topics/late").status_code == 200


def test_a_forwarded_long_poll_waits_its_own_timeout_past_the_bound(
    cluster: LocalCluster,
) -> None:
    with httpx.Client(timeout=30.0) as http:
        created = http.post(
            f"{cluster.nodes[0].url}/v1/topics",
            json={"name": "polled", "partitions": 1, "replication_factor": 1},
        )
        assert created.status_code == 201, created.text

        def leader() -> int | None:
            doc = http.get(f"{cluster.nodes[1].url}/v1/topics/polled").json()
            found = doc["partitions"][0].get("leader")
            return found if isinstance(found, int) and found >= 0 else None

        led_by = wait_for(leader, SETTLE_S, "the topic's leader in the other node's view")
        via = next(n for n in cluster.nodes if n.node_id != led_by)
        timeout_ms = 3 * FORWARD_TIMEOUT_MS
        answer = http.get(
            f"{via.url}/v1/topics/polled/partitions/0/records",
            params={"offset": 0, "timeout_ms": timeout_ms},
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["records"] == []
