"""Racks on a real cluster (etcd and four node processes in two racks): new topics spread each
partition's replicas over the racks (KIP-36), and a fetch naming `client_rack` is served by an
in-sync replica of that rack, even a follower, up to the high watermark (KIP-392), which the
follower learns as soon as the leader moves it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gateway.workers.local_cluster import LocalCluster
from tests.cluster.conftest import WORKDIR_MARKER
from tests.cluster.harness import SETTLE_S, wait_for

RACKS = ("east", "east", "west", "west")  # node i's rack


@pytest.fixture(scope="module")
def racked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    workdir = tmp_path_factory.mktemp(f"{WORKDIR_MARKER}-{os.getpid()}-")  # reaped if orphaned
    options = ("--lease-ttl", "2", "--offsets-topic-partitions", "1")
    cluster = LocalCluster(workdir, len(RACKS), node_options=options)
    for node, rack in zip(cluster.nodes, RACKS, strict=True):
        node.extra += ["--rack", rack]
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def traffic_out(http: httpx.Client, url: str, topic: str) -> int:
    rows = http.get(url + "/v1/traffic").json()["topics"]
    return sum(int(row["bytes_out"]) for row in rows if row["topic"] == topic)


def test_nodes_show_their_racks_and_replicas_spread_over_racks(racked: LocalCluster) -> None:
    with httpx.Client(timeout=10.0) as http:
        base = racked.nodes[1].url
        nodes = http.get(base + "/v1/cluster").json()["nodes"]
        assert [n["rack"] for n in nodes] == list(RACKS)
        created = http.post(
            base + "/v1/topics", json={"name": "spread", "partitions": 8, "replication_factor": 2}
        )
        assert created.status_code == 201, created.text
        for row in created.json()["partitions"]:
            racks = {RACKS[r] for r in row["replicas"]}
            assert racks == {"east", "west"}, row
        leaders = [row["replicas"][0] for row in created.json()["partitions"]]
        assert sorted(leaders.count(n) for n in range(4)) == [2, 2, 2, 2]


def test_a_fetch_naming_its_rack_is_served_by_the_in_sync_replica_there(
    racked: LocalCluster,
) -> None:
    with httpx.Client(timeout=10.0) as http:
        base = racked.nodes[0].url
        created = http.post(
            base + "/v1/topics", json={"name": "nearby", "partitions": 1, "replication_factor": 2}
        )
        assert created.status_code == 201, created.text
        (row,) = created.json()["partitions"]
        leader = row["leader"]
        follower = next(r for r in row["replicas"] if r != leader)
        far_rack = RACKS[follower]
        assert RACKS[leader] != far_rack
        records = {"records": [{"value": i} for i in range(10)]}
        produced = http.post(base + "/v1/topics/nearby/partitions/0/records?acks=all", json=records)
        assert produced.status_code == 200, produced.text

        def caught_up() -> bool:
            mine = http.get(racked.nodes[follower].url + "/v1/topics/nearby").json()
            return bool(mine["partitions"][0]["high_watermark"] == 10)

        wait_for(caught_up, SETTLE_S, "the follower's high watermark at 10")
        before = traffic_out(http, racked.nodes[follower].url, "nearby")
        leader_before = traffic_out(http, racked.nodes[leader].url, "nearby")
        # asked through a node of the leader's rack, it is served in the consumer's rack
        asking = next(n for n in range(4) if RACKS[n] == RACKS[leader] and n != leader)
        fetched = http.get(
            racked.nodes[asking].url
            + f"/v1/topics/nearby/partitions/0/records?offset=0&client_rack={far_rack}"
        )
        assert fetched.status_code == 200, fetched.text
        values: list[Any] = [r["value"] for r in fetched.json()["records"]]
        assert values == list(range(10))
        assert fetched.headers["Sluice-High-Watermark"] == "10"
        assert traffic_out(http, racked.nodes[follower].url, "nearby") > before
        assert traffic_out(http, racked.nodes[leader].url, "nearby") == leader_before
        # a rack with no replica: the leader serves; a malformed rack: 400
        same = http.get(base + "/v1/topics/nearby/partitions/0/records?offset=0&client_rack=north")
        assert same.status_code == 200 and len(same.json()["records"]) == 10
        bad = http.get(base + "/v1/topics/nearby/partitions/0/records?client_rack=a%20b")
        assert bad.status_code == 400 and bad.json()["code"] == "INVALID_PARAMETER"
        unknown = http.get(base + "/v1/topics/nearby/partitions/5/records?client_rack=west")
        assert unknown.status_code == 404


def test_a_follower_serves_an_acks_all_produce_as_soon_as_it_is_answered(
    racked: LocalCluster,
) -> None:
    """After an acks=all produce, a fetch parked at the follower of the consumer's rack gets the
    records: the leader answers the follower's parked fetch 10 ms after the high watermark
    moves. Before, the follower learned it only when that fetch came back empty (its wait, 5 s),
    and this 4 s long-poll answered nothing."""
    with httpx.Client(timeout=10.0) as http:
        base = racked.nodes[0].url
        created = http.post(
            base + "/v1/topics", json={"name": "prompt", "partitions": 1, "replication_factor": 2}
        )
        assert created.status_code == 201, created.text
        (row,) = created.json()["partitions"]
        leader = row["leader"]
        follower = next(r for r in row["replicas"] if r != leader)
        far_rack = RACKS[follower]
        produce = racked.nodes[leader].url + "/v1/topics/prompt/partitions/0/records?acks=all"
        warm = http.post(produce, json={"records": [{"value": "warm"}]})
        assert warm.status_code == 200, warm.text

        def settled() -> bool:
            mine = http.get(racked.nodes[follower].url + "/v1/topics/prompt").json()
            (state,) = mine["partitions"]
            return bool(state["high_watermark"] == 1 and len(state["isr"]) == 2)

        wait_for(settled, SETTLE_S, "the follower in sync with the high watermark at 1")
        before = traffic_out(http, racked.nodes[follower].url, "prompt")
        leader_before = traffic_out(http, racked.nodes[leader].url, "prompt")
        produced = http.post(produce, json={"records": [{"value": i} for i in range(3)]})
        assert produced.status_code == 200, produced.text
        fetched = http.get(
            racked.nodes[follower].url + "/v1/topics/prompt/partitions/0/records",
            params={"offset": 1, "client_rack": far_rack, "timeout_ms": 4000},
        )
        assert fetched.status_code == 200, fetched.text
        assert [r["value"] for r in fetched.json()["records"]] == [0, 1, 2]
        assert fetched.headers["Sluice-High-Watermark"] == "4"
        assert traffic_out(http, racked.nodes[follower].url, "prompt") > before
        assert traffic_out(http, racked.nodes[leader].url, "prompt") == leader_before
