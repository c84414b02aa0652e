"""A partition whose disk fails, over HTTP: produce and fetch answer 503 KAFKA_STORAGE_ERROR
problem+json (never 500, never 200), parked long-polls wake to it, the other partitions keep
working, /readyz is not ready and lists it, /metrics counts it. The failures are injected at the
OS calls for that partition's files (tests.faults)."""

from __future__ import annotations

import asyncio
import errno

import pytest

from tests.api.support import (
    Client,
    create_topic,
    fetch_all,
    gateway,
    metrics,
    parked,
    problem,
    produce,
    records_path,
    sample,
    wait_until,
)
from tests.faults import Disk


def failing_disk(client: Client, monkeypatch: pytest.MonkeyPatch, partition: str) -> Disk:
    return Disk(monkeypatch, gateway(client).settings.data_dir / partition)


async def storage_error(resp: object, partition: int, os_error: str) -> None:
    body = await problem(resp, 503, "KAFKA_STORAGE_ERROR")
    assert (body["topic"], body["partition"]) == ("t", partition)
    assert f"t-{partition} is offline" in body["detail"] and os_error in body["detail"]
    assert "Retry-After" not in resp.headers  # type: ignore[attr-defined]


async def test_a_failed_write_takes_one_partition_offline(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    await create_topic(client, partitions=2)
    await produce(client, [{"value": "kept"}], partition=0)
    disk = failing_disk(client, monkeypatch, "t-0")
    disk.fail("write", errno.EROFS)
    refused = await client.post(records_path("t", 0), json={"records": [{"value": "lost"}]})
    await storage_error(refused, 0, "Read-only file system")
    disk.heal()  # offline until a restart, whatever the disk does now
    again = await client.post(records_path("t", 0), json={"records": [{"value": "lost"}]})
    await storage_error(again, 0, "Read-only file system")
    read = await client.get(records_path("t", 0), params={"timeout_ms": "0"})
    await storage_error(read, 0, "Read-only file system")

    # The other partition of the topic keeps working.
    await produce(client, [{"value": "other"}], partition=1)
    assert [r["value"] for r in await fetch_all(client, partition=1)] == ["other"]

    ready = await problem(await client.get("/readyz"), 503, "KAFKA_STORAGE_ERROR")
    assert ready["storage"]["full"] is False
    [offline] = ready["storage"]["offline_partitions"]
    assert (offline["topic"], offline["partition"]) == ("t", 0)
    assert "writing the log failed" in offline["error"] and "t-0" in ready["detail"]
    assert sample(await metrics(client), "sluice_storage_offline_partitions") == 1
    # A worker's own readiness (merged by /readyz under --workers) answers with the list.
    own = await client.get("/internal/v1/ready")
    assert own.status == 200
    assert (await own.json())["storage"]["offline_partitions"] == [offline]


async def test_a_healthy_node_lists_no_offline_partition(client: Client) -> None:
    ready = await client.get("/readyz")
    assert ready.status == 200
    assert (await ready.json())["storage"]["offline_partitions"] == []
    assert sample(await metrics(client), "sluice_storage_offline_partitions") == 0


async def test_a_parked_long_poll_wakes_to_the_failure(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    await create_topic(client)
    await produce(client, [{"value": "a"}])
    poll = asyncio.ensure_future(
        client.get(records_path("t", 0), params={"offset": "1", "timeout_ms": "60000"})
    )
    await wait_until(lambda: parked(client) == 1)
    failing_disk(client, monkeypatch, "t-0").fail("write", errno.EIO)
    refused = await client.post(records_path("t", 0), json={"records": [{"value": "b"}]})
    await storage_error(refused, 0, "Input/output error")
    await storage_error(await asyncio.wait_for(poll, 10), 0, "Input/output error")


async def test_a_failed_fsync_is_never_acknowledged(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """flush.messages=1: the answer waits for the fsync. A failed one answers 503, and the
    next produce too, although fsync would work again (fsyncgate: never retry and ack)."""
    await create_topic(client, configs={"flush.messages": 1})
    await produce(client, [{"value": "synced"}])
    disk = failing_disk(client, monkeypatch, "t-0")
    disk.fail("fsync", errno.EIO)
    refused = await client.post(records_path("t", 0), json={"records": [{"value": "maybe"}]})
    await storage_error(refused, 0, "Input/output error")
    assert "flushing the log to disk failed" in (await refused.json())["detail"]
    disk.heal()
    again = await client.post(records_path("t", 0), json={"records": [{"value": "maybe"}]})
    await storage_error(again, 0, "Input/output error")


async def test_a_full_disk_stays_ready(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """ENOSPC is 507 with Retry-After and heals by itself: not an offline partition."""
    await create_topic(client)
    disk = failing_disk(client, monkeypatch, "t-0")
    disk.fail("write", errno.ENOSPC)
    refused = await client.post(records_path("t", 0), json={"records": [{"value": "a"}]})
    await problem(refused, 507, "INSUFFICIENT_STORAGE")
    assert refused.headers["Retry-After"] == "1"
    assert (await client.get("/readyz")).status == 200
    disk.heal()
    await produce(client, [{"value": "a"}])
