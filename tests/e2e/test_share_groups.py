"""Share groups against a real server process: curl as the outside client, a SIGKILL between
an accept and the next acquire (nothing accepted comes again; a held record comes again after
its lock with its delivery counted), a graceful shutdown answering a parked acquire, and a
cluster too small for the share-group state topic answering 503."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import httpx

from gateway.workers.local_cluster import LocalCluster
from tests.e2e.conftest import Server, start_server, until

WAIT_S = 30


def curl(server: Server, method: str, path: str, body: object | None = None) -> Any:
    command = ["curl", "-s", "-X", method, f"{server.url}{path}"]
    if body is not None:
        command += ["-H", "Content-Type: application/json", "-d", json.dumps(body)]
    out = subprocess.run(command, capture_output=True, text=True, timeout=WAIT_S, check=True)
    return json.loads(out.stdout) if out.stdout else None


def setup(server: Server, records: int, lock_ms: int = 30_000) -> str:
    curl(server, "POST", "/v1/topics", {"name": "jobs", "partitions": 1})
    configs = {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": lock_ms}
    curl(server, "PUT", "/v1/share-groups/workers/configs", {"configs": configs})
    produced = {"records": [{"value": {"job": i}} for i in range(records)]}
    curl(server, "POST", "/v1/topics/jobs/records", produced)
    member: str = curl(server, "POST", "/v1/share-groups/workers/members", {"topics": ["jobs"]})[
        "member_id"
    ]
    return member


def acquire(server: Server, member: str, **params: int) -> list[dict[str, Any]]:
    query = "&".join(f"{k}={v}" for k, v in {"max_records": 10, **params}.items())
    path = f"/v1/share-groups/workers/members/{member}/acquire?{query}"
    records: list[dict[str, Any]] = curl(server, "POST", path)["records"]
    return records


def acknowledge(server: Server, member: str, *acks: tuple[str, str]) -> list[str]:
    body = {"acknowledgements": [{"token": t, "type": k} for t, k in acks]}
    path = f"/v1/share-groups/workers/members/{member}/acknowledge"
    return [r["status"] for r in curl(server, "POST", path, body)["results"]]


def test_curl_acquires_and_accepts_and_nothing_accepted_comes_again_after_a_sigkill(
    tmp_path: Path,
) -> None:
    server = start_server(tmp_path / "data")
    try:
        member = setup(server, 3, lock_ms=1_000)
        got = acquire(server, member)
        assert [r["value"] for r in got] == [{"job": 0}, {"job": 1}, {"job": 2}]
        assert acknowledge(server, member, (got[0]["token"], "accept")) == ["ok"]
        server.kill()
        server = start_server(tmp_path / "data")
        # Offsets 1 and 2 were held under a 1 s lock: they come back once it lapses, their
        # first delivery counted; offset 0, accepted, never comes back.
        again: list[dict[str, Any]] = []
        while len(again) < 2:
            again += acquire(server, member, timeout_ms=5_000)
        assert sorted((r["offset"], r["delivery_count"]) for r in again) == [(1, 2), (2, 2)]
        assert acknowledge(server, member, *[(r["token"], "accept") for r in again]) == ["ok"] * 2
        described = curl(server, "GET", "/v1/share-groups/workers")
        assert described["lag"] == 0 and described["partitions"][0]["start_offset"] == 3
    finally:
        if server.process.poll() is None:
            assert server.stop() == 0


def test_a_graceful_shutdown_answers_a_parked_acquire(tmp_path: Path) -> None:
    server = start_server(tmp_path / "data")
    member = setup(server, 0)
    answers: list[httpx.Response] = []
    path = f"/v1/share-groups/workers/members/{member}/acquire?timeout_ms=60000"

    def park() -> None:
        answers.append(httpx.post(f"{server.url}{path}", timeout=WAIT_S))

    parked = threading.Thread(target=park)
    parked.start()
    with httpx.Client(base_url=server.url) as http:
        # The parked acquire counts as a parked fetch (its partition's watch does not).
        until(lambda: "sluice_parked_fetches 1.0" in http.get("/metrics").text, "a parked acquire")
    server.process.send_signal(signal.SIGTERM)
    parked.join(WAIT_S)
    assert answers and answers[0].status_code == 200 and answers[0].json() == {"records": []}
    assert server.process.wait(timeout=WAIT_S) == 0


def test_a_cluster_with_fewer_nodes_than_the_state_topics_replicas_answers_503(
    tmp_path: Path,
) -> None:
    """One live node of a cluster whose state topics take three replicas: the share-group
    state topic cannot be made, and a share-group call says so at once, 503 problem+json with
    Retry-After (not a gateway timeout once the leader wait is over)."""
    options = ["--offsets-topic-replication-factor", "3", "--leader-wait-ms", "20000"]
    cluster = LocalCluster(tmp_path, 1, node_options=options)
    cluster.start()
    try:
        url = cluster.nodes[0].url
        created = httpx.post(f"{url}/v1/topics", json={"name": "jobs"}, timeout=WAIT_S)
        assert created.status_code == 201, created.text
        answer = httpx.post(
            f"{url}/v1/share-groups/workers/members", json={"topics": ["jobs"]}, timeout=WAIT_S
        )
        assert answer.status_code == 503, answer.text
        assert answer.headers["content-type"] == "application/problem+json"
        assert answer.headers["retry-after"] == "1"
        problem = answer.json()
        assert problem["code"] == "COORDINATOR_NOT_AVAILABLE"
        assert "__share_group_state" in problem["detail"]
        assert "1 nodes are alive, fewer than its replication factor (3" in problem["detail"]
    finally:
        cluster.stop()
