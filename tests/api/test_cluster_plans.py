"""The cluster's shape on a single node (a cluster of one): a balance plans nothing, the only
node cannot be decommissioned nor removed, unknown nodes are 404, a reassignment naming the
node itself is a no-op and one naming another node is refused; all as problem+json, nothing
moved."""

from __future__ import annotations

from tests.api.support import Client

PROBLEM = "application/problem+json"


async def test_a_single_node_balances_to_nothing(client: Client) -> None:
    await client.post("/v1/topics", json={"name": "t", "partitions": 3})
    planned = await client.post("/v1/cluster/balance?dry_run=true")
    assert planned.status == 200
    plan = await planned.json()
    assert plan["dry_run"] and plan["moves"] == [] and plan["goal_met"]
    assert [n["node_id"] for n in plan["nodes"]] == [0]
    started = await client.post("/v1/cluster/balance")
    assert started.status == 202 and (await started.json())["moves"] == []


async def test_the_only_node_cannot_leave(client: Client) -> None:
    await client.post("/v1/topics", json={"name": "t", "partitions": 1})
    for action in ("decommission", "decommission?dry_run=true"):
        answer = await client.post(f"/v1/cluster/nodes/0/{action}")
        assert answer.status == 400 and answer.content_type == PROBLEM
        assert "only node" in (await answer.json())["detail"]
    live = await client.post("/v1/cluster/nodes/0/remove")
    assert live.status == 400 and "live" in (await live.json())["detail"]
    doc = await (await client.get("/v1/cluster")).json()
    assert "state" not in doc["nodes"][0]  # still in service


async def test_unknown_nodes_and_bad_parameters(client: Client) -> None:
    for path in ("/v1/cluster/nodes/7/decommission", "/v1/cluster/nodes/x/remove"):
        answer = await client.post(path)
        assert answer.status == 404 and (await answer.json())["code"] == "UNKNOWN_NODE"
    bad = await client.post("/v1/cluster/balance?dry_run=maybe")
    assert bad.status == 400 and bad.content_type == PROBLEM


async def test_a_single_node_reassignment(client: Client) -> None:
    await client.post("/v1/topics", json={"name": "t", "partitions": 1})
    same = {"partitions": [{"topic": "t", "partition": 0, "replicas": [0]}]}
    answer = await client.post("/v1/cluster/reassignments", json=same)
    assert answer.status == 202 and (await answer.json()) == {"reassignments": []}
    elsewhere = {"partitions": [{"topic": "t", "partition": 0, "replicas": [1]}]}
    refused = await client.post("/v1/cluster/reassignments", json=elsewhere)
    assert refused.status == 400 and (await refused.json())["code"] == "INVALID_REPLICA_ASSIGNMENT"
    listing = await (await client.get("/v1/cluster/reassignments")).json()
    assert listing == {"throttle_bytes_per_second": None, "reassignments": []}
    nothing = await client.delete("/v1/cluster/reassignments/t/0")
    assert nothing.status == 409
    assert (await nothing.json())["code"] == "NO_REASSIGNMENT_IN_PROGRESS"
    for body in ({"bytes_per_second": 0}, {"bytes_per_second": "1"}, {"rate": 1}):
        throttle = await client.put("/v1/cluster/reassignments/throttle", json=body)
        assert throttle.status == 400, body
    ok = await client.put("/v1/cluster/reassignments/throttle", json={"bytes_per_second": 5})
    assert ok.status == 200 and (await ok.json()) == {"throttle_bytes_per_second": 5}
