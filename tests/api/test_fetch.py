"""Fetch (JSON, NDJSON, binary), long-poll, offsets by time and delete-records."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from aiohttp import ClientResponse

from engine import batch as fmt
from tests.api.support import (
    JSON,
    NDJSON,
    RECORD_BATCH,
    Client,
    Start,
    create_topic,
    describe,
    fetch,
    fetch_all,
    metrics,
    parked,
    problem,
    produce,
    records_path,
    sample,
    wait_until,
)


async def fill(client: Client, *sizes: int, partition: int = 0) -> None:
    """One produce request (one batch) per size, values numbered from 0 across requests."""
    n = 0
    for size in sizes:
        await produce(
            client,
            [{"key": f"k{n + i}", "value": n + i} for i in range(size)],
            partition=partition,
        )
        n += size


def offsets_of(doc: dict[str, Any]) -> list[int]:
    return [r["offset"] for r in doc["records"]]


# -- formats ------------------------------------------------------------------------------------


async def test_json_fetch(client: Client) -> None:
    await create_topic(client)
    await produce(client, [{"key": "a", "value": {"n": 1}, "headers": {"h": "1"}, "timestamp": 9}])
    resp = await client.get(records_path("t", 0), headers={"Accept": JSON})
    assert resp.status == 200
    assert resp.content_type == JSON
    assert await resp.json() == {
        "records": [
            {"offset": 0, "timestamp": 9, "key": "a", "value": {"n": 1}, "headers": {"h": "1"}}
        ],
        "next_offset": 1,
        "high_watermark": 1,
    }


async def test_ndjson_fetch(client: Client) -> None:
    await create_topic(client)
    await fill(client, 2, 1)
    resp = await client.get(
        records_path("t", 0), params={"offset": "1"}, headers={"Accept": NDJSON}
    )
    assert resp.status == 200
    assert resp.content_type == NDJSON
    assert resp.headers["Sluice-Next-Offset"] == "3"
    assert resp.headers["Sluice-High-Watermark"] == "3"
    lines = (await resp.read()).split(b"\n")
    assert lines[-1] == b""
    got = [orjson.loads(line) for line in lines[:-1]]
    assert [(r["offset"], r["key"], r["value"]) for r in got] == [(1, "k1", 1), (2, "k2", 2)]


async def test_binary_fetch(client: Client) -> None:
    await create_topic(client)
    await fill(client, 2, 3)
    resp = await client.get(
        records_path("t", 0), params={"offset": "3"}, headers={"Accept": RECORD_BATCH}
    )
    assert resp.status == 200
    assert resp.content_type == RECORD_BATCH
    data = await resp.read()
    scanned = fmt.scan(data, check_crc=True)
    assert scanned.error is None
    # Whole batches: the one holding offset 3 starts at 2.
    assert [(h.base_offset, h.record_count) for _, h in scanned.headers] == [(2, 3)]
    assert resp.headers["Sluice-Next-Offset"] == "5"
    assert resp.headers["Sluice-High-Watermark"] == "5"
    assert [r.key for r in fmt.iter_records(data)] == [b"k2", b"k3", b"k4"]


async def test_binary_fetch_at_the_end(client: Client) -> None:
    await create_topic(client)
    await fill(client, 2)
    resp = await client.get(
        records_path("t", 0),
        params={"offset": "2", "timeout_ms": "0"},
        headers={"Accept": RECORD_BATCH},
    )
    assert resp.status == 200
    assert await resp.read() == b""
    assert resp.headers["Sluice-Next-Offset"] == "2"


@pytest.mark.parametrize(
    ("accept", "chosen"),
    [
        (None, JSON),
        ("", JSON),
        ("*/*", JSON),
        ("application/*", JSON),
        ("application/json", JSON),
        ("Application/JSON", JSON),
        ("application/x-ndjson", NDJSON),
        ("application/vnd.sluice.record-batch", RECORD_BATCH),
        ("text/html, application/x-ndjson", NDJSON),
        ("application/x-ndjson;q=0.5, application/json", JSON),
        ("application/json;q=0.1, application/vnd.sluice.record-batch;q=0.9", RECORD_BATCH),
        ("application/json;q=0, */*", NDJSON),  # q=0 refuses JSON even under */* (RFC 9110)
    ],
)
async def test_accept_negotiation(client: Client, accept: str | None, chosen: str) -> None:
    await create_topic(client)
    await fill(client, 1)
    headers = {} if accept is None else {"Accept": accept}
    resp = await client.get(records_path("t", 0), headers=headers)
    assert resp.status == 200
    assert resp.content_type == chosen


# -- positions and limits -----------------------------------------------------------------------


async def test_earliest_latest_and_explicit_offsets(client: Client) -> None:
    await create_topic(client)
    await fill(client, 4)
    assert offsets_of(await fetch(client, offset="earliest")) == [0, 1, 2, 3]
    assert offsets_of(await fetch(client)) == [0, 1, 2, 3]
    latest = await fetch(client, offset="latest")
    assert latest == {"records": [], "next_offset": 4, "high_watermark": 4}
    mid = await fetch(client, offset=2)
    assert offsets_of(mid) == [2, 3]
    assert mid["next_offset"] == 4
    assert await fetch(client, offset=4) == {"records": [], "next_offset": 4, "high_watermark": 4}


async def test_max_records(client: Client) -> None:
    await create_topic(client)
    await fill(client, 10)
    page = await fetch(client, max_records=3)
    assert (offsets_of(page), page["next_offset"]) == ([0, 1, 2], 3)
    page = await fetch(client, offset=page["next_offset"], max_records=3)
    assert (offsets_of(page), page["next_offset"]) == ([3, 4, 5], 6)
    page = await fetch(client, offset=8, max_records=100)
    assert (offsets_of(page), page["next_offset"]) == ([8, 9], 10)


async def test_max_bytes_returns_whole_batches_and_at_least_one(client: Client) -> None:
    await create_topic(client)
    await fill(client, 2, 2, 2)
    one = await fetch(client, max_bytes=1)
    assert (offsets_of(one), one["next_offset"]) == ([0, 1], 2)
    size = (await describe(client))["partitions"][0]["size_bytes"]
    two = await fetch(client, max_bytes=size * 2 // 3)
    assert offsets_of(two) == [0, 1, 2, 3]
    assert offsets_of(await fetch(client, max_bytes=size)) == [0, 1, 2, 3, 4, 5]


async def test_reading_a_partition_page_by_page(client: Client) -> None:
    """Following next_offset visits every record once, in order."""
    await create_topic(client)
    await fill(client, 3, 1, 5, 2)
    seen: list[int] = []
    offset = 0
    while True:
        page = await fetch(client, offset=offset, max_records=2, max_bytes=200)
        if not page["records"]:
            break
        seen += [r["value"] for r in page["records"]]
        offset = page["next_offset"]
    assert seen == list(range(11))


async def test_offset_outside_the_log_is_416(client: Client) -> None:
    await create_topic(client)
    await fill(client, 3)
    for offset in (4, 100, -1):
        resp = await client.get(records_path("t", 0), params={"offset": str(offset)})
        body = await problem(resp, 416, "OFFSET_OUT_OF_RANGE")
        assert (body["offset"], body["log_start_offset"], body["log_end_offset"]) == (offset, 0, 3)
    for accept in (NDJSON, RECORD_BATCH):
        resp = await client.get(
            records_path("t", 0), params={"offset": "4"}, headers={"Accept": accept}
        )
        await problem(resp, 416, "OFFSET_OUT_OF_RANGE")


# -- long-poll ----------------------------------------------------------------------------------


def start_fetch(client: Client, **params: str) -> asyncio.Task[ClientResponse]:
    """A fetch running in the background (the long-poll under test)."""
    return asyncio.create_task(
        client.get(records_path("t", 0), params=params, headers={"Accept": JSON})
    )


async def test_long_poll_is_woken_by_a_produce(client: Client) -> None:
    await create_topic(client)
    task = start_fetch(client, offset="0", timeout_ms="30000")
    await wait_until(lambda: parked(client) == 1)
    samples = await metrics(client)
    assert sample(samples, "sluice_parked_fetches") == 1.0
    assert not task.done()
    await produce(client, [{"key": "k", "value": "hello"}])
    resp = await asyncio.wait_for(task, 5)
    assert resp.status == 200
    body = await resp.json()
    assert [(r["offset"], r["value"]) for r in body["records"]] == [(0, "hello")]
    assert body["next_offset"] == 1
    assert parked(client) == 0


async def test_long_poll_at_latest_sees_only_new_records(client: Client) -> None:
    await create_topic(client)
    await fill(client, 3)
    task = start_fetch(client, offset="latest", timeout_ms="30000")
    await wait_until(lambda: parked(client) == 1)
    await produce(client, [{"value": "new"}])
    body = await (await asyncio.wait_for(task, 5)).json()
    assert [(r["offset"], r["value"]) for r in body["records"]] == [(3, "new")]


async def test_long_poll_times_out_with_an_empty_200(client: Client) -> None:
    await create_topic(client)
    resp = await client.get(records_path("t", 0), params={"timeout_ms": "30"})
    assert resp.status == 200
    assert await resp.json() == {"records": [], "next_offset": 0, "high_watermark": 0}
    assert parked(client) == 0


async def test_long_poll_for_min_bytes(client: Client) -> None:
    """With fewer than min_bytes it waits; once they are there it answers with everything."""
    await create_topic(client)
    await fill(client, 1)
    size = (await describe(client))["partitions"][0]["size_bytes"]
    task = start_fetch(client, offset="0", min_bytes=str(size + 1), timeout_ms="30000")
    await wait_until(lambda: parked(client) == 1)
    await produce(client, [{"value": "more"}])
    body = await (await asyncio.wait_for(task, 5)).json()
    assert [r["offset"] for r in body["records"]] == [0, 1]


async def test_min_bytes_not_reached_answers_what_there_is(client: Client) -> None:
    await create_topic(client)
    await fill(client, 2)
    body = await fetch(client, min_bytes=10**6, timeout_ms=30)
    assert offsets_of(body) == [0, 1]


async def test_min_bytes_zero_never_waits(client: Client) -> None:
    await create_topic(client)
    resp = await asyncio.wait_for(
        client.get(records_path("t", 0), params={"min_bytes": "0", "timeout_ms": "300000"}), 5
    )
    assert resp.status == 200
    assert await resp.json() == {"records": [], "next_offset": 0, "high_watermark": 0}


async def test_data_already_there_is_answered_without_waiting(client: Client) -> None:
    await create_topic(client)
    await fill(client, 1)
    resp = await asyncio.wait_for(
        client.get(records_path("t", 0), params={"timeout_ms": "300000"}), 5
    )
    assert offsets_of(await resp.json()) == [0]


async def test_a_disconnected_client_releases_its_fetch(client: Client) -> None:
    await create_topic(client)
    task = start_fetch(client, offset="0", timeout_ms="300000")
    await wait_until(lambda: parked(client) == 1)
    task.cancel()
    await wait_until(lambda: parked(client) == 0)
    samples = await metrics(client)
    assert sample(samples, "sluice_parked_fetches") == 0.0
    # The partition still works for the next consumer.
    await produce(client, [{"value": 1}])
    assert offsets_of(await fetch(client)) == [0]


async def test_a_produce_to_another_partition_does_not_answer_the_poll(client: Client) -> None:
    await create_topic(client, partitions=2)
    task = start_fetch(client, offset="0", timeout_ms="30000")
    await wait_until(lambda: parked(client) == 1)
    await produce(client, [{"value": "elsewhere"}], partition=1)
    await produce(client, [{"value": "here"}], partition=0)
    body = await (await asyncio.wait_for(task, 5)).json()
    assert [r["value"] for r in body["records"]] == ["here"]


async def test_too_many_parked_fetches_is_503(start: Start) -> None:
    client: Client = await start(max_parked_fetches=1)
    await create_topic(client)
    task = start_fetch(client, offset="0", timeout_ms="30000")
    await wait_until(lambda: parked(client) == 1)
    resp = await client.get(records_path("t", 0), params={"timeout_ms": "30000"})
    await problem(resp, 503, "TOO_MANY_WAITING_FETCHES")
    assert resp.headers["Retry-After"] == "1"
    await produce(client, [{"value": 1}])
    assert (await asyncio.wait_for(task, 5)).status == 200


async def test_shutdown_answers_parked_fetches(client: Client) -> None:
    """On shutdown, long-polls answer at once with what they have, and readiness drops."""
    await create_topic(client)
    task = start_fetch(client, offset="0", timeout_ms="300000")
    await wait_until(lambda: parked(client) == 1)
    app = client.app
    assert app is not None
    await app.shutdown()
    resp = await asyncio.wait_for(task, 5)
    assert resp.status == 200
    assert await resp.json() == {"records": [], "next_offset": 0, "high_watermark": 0}
    await problem(await client.get("/readyz"), 503, "NOT_READY")


async def test_deleting_a_topic_answers_its_parked_fetches(client: Client) -> None:
    await create_topic(client)
    task = start_fetch(client, offset="0", timeout_ms="2000")
    await wait_until(lambda: parked(client) == 1)
    assert (await client.delete("/v1/topics/t")).status == 204
    try:
        resp = await asyncio.wait_for(asyncio.shield(task), 1.0)
    finally:
        task.cancel()
    await problem(resp, 404, "UNKNOWN_TOPIC")


# -- offsets by timestamp -----------------------------------------------------------------------


async def offset_for(client: Client, timestamp: str, partition: int = 0) -> dict[str, Any]:
    resp = await client.get(
        f"/v1/topics/t/partitions/{partition}/offsets", params={"timestamp": timestamp}
    )
    assert resp.status == 200, await resp.text()
    body: dict[str, Any] = await resp.json()
    return body


async def test_offsets_by_timestamp(client: Client) -> None:
    await create_topic(client)
    assert await offset_for(client, "1000") == {"offset": 0, "timestamp": None}
    stamps = [1000, 2000, 2000, 3000]
    await produce(client, [{"value": i, "timestamp": ts} for i, ts in enumerate(stamps)])
    await produce(client, [{"value": 4, "timestamp": 5000}])
    assert await offset_for(client, "0") == {"offset": 0, "timestamp": 1000}
    assert await offset_for(client, "1000") == {"offset": 0, "timestamp": 1000}
    assert await offset_for(client, "1001") == {"offset": 1, "timestamp": 2000}
    assert await offset_for(client, "2500") == {"offset": 3, "timestamp": 3000}
    assert await offset_for(client, "3001") == {"offset": 4, "timestamp": 5000}
    assert await offset_for(client, "5001") == {"offset": 5, "timestamp": None}
    assert await offset_for(client, "earliest") == {"offset": 0, "timestamp": None}
    assert await offset_for(client, "latest") == {"offset": 5, "timestamp": None}
    resp = await client.get("/v1/topics/t/partitions/0/offsets")
    assert await resp.json() == {"offset": 5, "timestamp": None}


async def test_offsets_by_timestamp_after_delete_records(client: Client) -> None:
    await create_topic(client)
    await produce(client, [{"value": i, "timestamp": 1000 * (i + 1)} for i in range(4)])
    resp = await client.post("/v1/topics/t/partitions/0/delete-records", json={"before_offset": 2})
    assert resp.status == 200
    assert await offset_for(client, "earliest") == {"offset": 2, "timestamp": None}
    assert (await offset_for(client, "0"))["offset"] == 2
    assert await offset_for(client, "4000") == {"offset": 3, "timestamp": 4000}


# -- delete-records -----------------------------------------------------------------------------


async def test_delete_records_moves_the_log_start(client: Client) -> None:
    await create_topic(client)
    await fill(client, 3, 3)
    resp = await client.post("/v1/topics/t/partitions/0/delete-records", json={"before_offset": 4})
    assert resp.status == 200
    assert await resp.json() == {"log_start_offset": 4}
    partition = (await describe(client))["partitions"][0]
    assert (partition["log_start_offset"], partition["log_end_offset"]) == (4, 6)
    assert offsets_of(await fetch(client, offset="earliest")) == [4, 5]
    assert offsets_of(await fetch(client, offset=4)) == [4, 5]
    body = await problem(
        await client.get(records_path("t", 0), params={"offset": "3"}),
        416,
        "OFFSET_OUT_OF_RANGE",
    )
    assert (body["offset"], body["log_start_offset"], body["log_end_offset"]) == (3, 4, 6)
    # An earlier offset is a no-op answering the current start; the log end is allowed.
    resp = await client.post("/v1/topics/t/partitions/0/delete-records", json={"before_offset": 1})
    assert await resp.json() == {"log_start_offset": 4}
    resp = await client.post("/v1/topics/t/partitions/0/delete-records", json={"before_offset": 6})
    assert await resp.json() == {"log_start_offset": 6}
    assert await fetch(client, offset="earliest") == {
        "records": [],
        "next_offset": 6,
        "high_watermark": 6,
    }
    result = await produce(client, [{"value": "after"}])
    assert result["results"][0]["base_offset"] == 6
    assert [r["value"] for r in await fetch_all(client)] == ["after"]


async def test_delete_records_beyond_the_high_watermark_is_416(client: Client) -> None:
    await create_topic(client)
    await fill(client, 2)
    for before in (3, -1):
        resp = await client.post(
            "/v1/topics/t/partitions/0/delete-records", json={"before_offset": before}
        )
        await problem(resp, 416, "OFFSET_OUT_OF_RANGE")
    assert offsets_of(await fetch(client)) == [0, 1]


async def test_invalid_delete_records_bodies(client: Client, subtests: pytest.Subtests) -> None:
    await create_topic(client)
    await fill(client, 2)
    cases: list[tuple[bytes, str, int, str]] = [
        (b'{"before_offset": "1"}', JSON, 400, "INVALID_PARAMETER"),
        (b'{"before_offset": 1.0}', JSON, 400, "INVALID_PARAMETER"),
        (b'{"before_offset": true}', JSON, 400, "INVALID_PARAMETER"),
        (b'{"before_offset": null}', JSON, 400, "INVALID_PARAMETER"),
        (b"{}", JSON, 400, "INVALID_PARAMETER"),
        (b'{"before_offset": 1, "partition": 0}', JSON, 400, "INVALID_REQUEST"),
        (b"[1]", JSON, 400, "INVALID_JSON"),
        (b"{", JSON, 400, "INVALID_JSON"),
        (b"", JSON, 400, "INVALID_JSON"),
        (b'{"before_offset": 1}', "text/plain", 415, "UNSUPPORTED_MEDIA_TYPE"),
    ]
    for body, content_type, status, code in cases:
        with subtests.test(body=body, content_type=content_type):
            resp = await client.post(
                "/v1/topics/t/partitions/0/delete-records",
                data=body,
                headers={"Content-Type": content_type},
            )
            await problem(resp, status, code)
    assert offsets_of(await fetch(client)) == [0, 1]
