"""Operational routes: cluster, health, readiness, metrics, the OpenAPI document; restarts."""

from __future__ import annotations

import asyncio

import yaml

from engine.batch import RecordInput
from gateway.auth.route_operations import route_template
from tests.api.support import (
    JSON,
    NDJSON,
    RECORD_BATCH,
    Client,
    Start,
    batch_bytes,
    create_topic,
    describe,
    fetch,
    fetch_all,
    gateway,
    metrics,
    problem,
    produce,
    produce_raw,
    records_path,
    sample,
)


async def test_cluster(start: Start) -> None:
    client: Client = await start(node_id=3, host="10.1.2.3", port=9092)
    resp = await client.get("/v1/cluster")
    assert resp.status == 200
    assert resp.content_type == JSON
    doc = await resp.json()
    assert isinstance(doc.pop("cluster_id"), str)
    assert doc == {
        "controller": 3,
        "nodes": [{"node_id": 3, "url": "http://10.1.2.3:9092", "alive": True, "rack": None}],
    }


async def test_healthz(client: Client) -> None:
    resp = await client.get("/healthz")
    assert resp.status == 200
    assert await resp.json() == {"status": "ok"}


async def test_readyz(client: Client) -> None:
    resp = await client.get("/readyz")
    assert resp.status == 200
    doc = await resp.json()
    assert doc["status"] == "ready" and set(doc) == {"status", "storage"}
    assert doc["storage"]["full"] is False and doc["storage"]["free_bytes"] > 0
    gateway(client).ready = False  # as during startup or shutdown
    await problem(await client.get("/readyz"), 503, "NOT_READY")
    resp = await client.get("/healthz")
    assert resp.status == 200


async def test_openapi_document_lists_every_route(client: Client) -> None:
    resp = await client.get("/openapi.yaml")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("application/yaml")
    spec = yaml.load(await resp.read(), Loader=yaml.CSafeLoader)
    assert str(spec["openapi"]).startswith("3.")
    app = client.app
    assert app is not None
    for route in app.router.routes():
        resource = route.resource
        if resource is None or route.method == "HEAD":
            continue
        path = route_template(resource.canonical)
        assert path in spec["paths"], path
        assert route.method.lower() in spec["paths"][path], (route.method, path)


async def test_startup_metrics(client: Client) -> None:
    scraped = await metrics(client)
    assert sample(scraped, "sluice_startup_clean") == 0.0  # a new data directory
    assert sample(scraped, "sluice_startup_truncated_bytes") == 0.0
    assert (sample(scraped, "sluice_startup_seconds") or -1) >= 0


async def test_metrics_after_traffic(client: Client) -> None:
    """Request counts and latency by route template and status, traffic and log gauges."""
    await create_topic(client, partitions=2)
    await produce(client, [{"value": i} for i in range(3)], partition=0)
    await produce(client, [{"value": 3}], partition=0)
    status, _, _ = await produce_raw(client, b"1\n2\n", NDJSON, partition=1)
    assert status == 200
    missing = await client.post(records_path("nope"), json={"records": [{"value": 1}]})
    assert missing.status == 404
    assert (await client.get("/v1/topics/t")).status == 200
    assert (await client.get("/v1/topics/nope")).status == 404
    assert (await client.get("/no/such/route/123")).status == 404
    page = await fetch(client, partition=0, max_records=100)
    assert len(page["records"]) == 4
    binary = await client.get(records_path("t", 1), headers={"Accept": RECORD_BATCH})
    assert binary.status == 200
    p1_bytes = len(await binary.read())

    samples = await metrics(client)
    described = await describe(client)
    sizes = [p["size_bytes"] for p in described["partitions"]]

    def requests(route: str, method: str, code: str) -> float | None:
        return sample(
            samples, "sluice_http_requests_total", route=route, method=method, status=code
        )

    partition_records = "/v1/topics/{topic}/partitions/{partition}/records"
    assert requests("/v1/topics", "POST", "201") == 1
    assert requests(partition_records, "POST", "200") == 3
    assert requests(partition_records, "GET", "200") == 2
    assert requests("/v1/topics/{topic}/records", "POST", "404") == 1
    assert requests("/v1/topics/{topic}", "GET", "200") == 1
    assert requests("/v1/topics/{topic}", "GET", "404") == 1
    assert requests("unmatched", "GET", "404") == 1
    assert not any("/no/such" in dict(labels).get("route", "") for _, labels in samples)
    assert (
        sample(
            samples,
            "sluice_http_request_duration_seconds_count",
            route=partition_records,
            method="POST",
            status="200",
        )
        == 3
    )
    assert (
        sample(
            samples,
            "sluice_http_request_duration_seconds_bucket",
            route=partition_records,
            method="POST",
            status="200",
            le="+Inf",
        )
        == 3
    )
    latency_sum = sample(
        samples,
        "sluice_http_request_duration_seconds_sum",
        route=partition_records,
        method="POST",
        status="200",
    )
    assert latency_sum is not None and latency_sum > 0

    assert sample(samples, "sluice_records_in_total", topic="t") == 6
    assert sample(samples, "sluice_bytes_in_total", topic="t") == sum(sizes)
    assert sample(samples, "sluice_records_out_total", topic="t") == 4 + 2
    assert sample(samples, "sluice_bytes_out_total", topic="t") == sizes[0] + p1_bytes
    assert p1_bytes == sizes[1]
    for p, (end, size) in enumerate(((4, sizes[0]), (2, sizes[1]))):
        labels = {"topic": "t", "partition": str(p)}
        assert sample(samples, "sluice_partition_log_end_offset", **labels) == end
        assert sample(samples, "sluice_partition_high_watermark", **labels) == end
        assert sample(samples, "sluice_partition_log_start_offset", **labels) == 0
        assert sample(samples, "sluice_partition_size_bytes", **labels) == size
    assert sample(samples, "sluice_parked_fetches") == 0


async def test_event_loop_tasks_gauge(client: Client) -> None:
    """The gauge counts the tasks of the loop the gateway runs on (the test's own, here): five
    more while five wait, as many as before once they are done."""
    before = sample(await metrics(client), "sluice_event_loop_tasks")
    assert before is not None and before >= 1  # the scrape's own handler at least
    release = asyncio.Event()
    waiting = [asyncio.create_task(release.wait()) for _ in range(5)]
    assert sample(await metrics(client), "sluice_event_loop_tasks") == before + 5
    release.set()
    await asyncio.gather(*waiting)
    assert sample(await metrics(client), "sluice_event_loop_tasks") == before


async def test_metrics_follow_delete_records_and_topic_deletion(client: Client) -> None:
    await create_topic(client)
    await produce(client, [{"value": 1}])
    await produce(client, [{"value": 2}])
    resp = await client.post("/v1/topics/t/partitions/0/delete-records", json={"before_offset": 1})
    assert resp.status == 200
    samples = await metrics(client)
    assert sample(samples, "sluice_partition_log_start_offset", topic="t", partition="0") == 1
    assert (await client.delete("/v1/topics/t")).status == 204
    samples = await metrics(client)
    assert sample(samples, "sluice_partition_log_end_offset", topic="t", partition="0") is None


async def test_a_restart_keeps_topics_records_and_positions(client: Client, start: Start) -> None:
    """Everything acknowledged is there after the gateway restarts on the same data dir."""
    await create_topic(client, "t", partitions=2, configs={"max.message.bytes": 5000})
    await create_topic(client, "lat", configs={"message.timestamp.type": "LogAppendTime"})
    assert (await client.patch("/v1/topics/t", json={"partitions": 3})).status == 200
    await produce(
        client,
        [
            {"key": f"k{i}", "value": {"i": i}, "headers": {"n": str(i)}, "timestamp": 1000 + i}
            for i in range(5)
        ],
        partition=0,
    )
    await produce_raw(client, b'"a"\n"b"\n', NDJSON, partition=1)
    body = batch_bytes([RecordInput(b"bin", b"\x00\x01", [("h", b"v")], 77)])
    await produce_raw(client, body, RECORD_BATCH, partition=2)
    await produce(client, [{"value": "x"}], topic="lat")
    resp = await client.post("/v1/topics/t/partitions/0/delete-records", json={"before_offset": 2})
    assert resp.status == 200
    topics = sorted((await (await client.get("/v1/topics")).json())["topics"], key=str)
    described = {name: await describe(client, name) for name in ("t", "lat")}
    records = {
        (name, p): await fetch_all(client, name, p)
        for name, p in (("t", 0), ("t", 1), ("t", 2), ("lat", 0))
    }
    await client.close()

    again: Client = await start()
    assert sorted((await (await again.get("/v1/topics")).json())["topics"], key=str) == topics
    for name, description in described.items():
        assert await describe(again, name) == description
    for (name, p), stored in records.items():
        assert await fetch_all(again, name, p) == stored
    assert [r["offset"] for r in records[("t", 0)]] == [2, 3, 4]
    resp = await again.get("/v1/topics/t/partitions/0/offsets", params={"timestamp": "1003"})
    assert await resp.json() == {"offset": 3, "timestamp": 1003}
    result = await produce(again, [{"value": "after"}], partition=0)
    assert result == {"results": [{"partition": 0, "base_offset": 5, "count": 1}]}
