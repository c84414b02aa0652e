"""Idempotency-Key: retries answer the first result and append nothing, even after a restart."""

from __future__ import annotations

import asyncio
from typing import Any

from engine.batch import RecordInput
from tests.api.support import (
    NDJSON,
    RECORD_BATCH,
    BlockedFlush,
    Client,
    Start,
    batch_bytes,
    create_topic,
    end_offsets,
    fetch_all,
    problem,
    produce,
    produce_raw,
    records_path,
    wait_until,
)


def key(k: str) -> dict[str, str]:
    return {"Idempotency-Key": k}


RECORDS: list[dict[str, Any]] = [{"key": "a", "value": 1}, {"value": 2}, {"value": 3}]


async def test_a_retry_answers_the_first_result_and_appends_nothing(client: Client) -> None:
    await create_topic(client, partitions=3)
    await produce(client, [{"value": "x"}], partition=0)
    first = await produce(client, RECORDS, headers=key("req-1"))
    offsets = await end_offsets(client)
    assert sum(offsets) == 1 + len(RECORDS)
    for _ in range(3):
        assert await produce(client, RECORDS, headers=key("req-1")) == first
    assert await end_offsets(client) == offsets


async def test_same_key_with_another_body_is_422(client: Client) -> None:
    await create_topic(client)
    first = await produce(client, RECORDS, headers=key("req-1"))
    resp = await client.post(
        records_path("t"), json={"records": [{"value": "other"}]}, headers=key("req-1")
    )
    await problem(resp, 422, "IDEMPOTENCY_KEY_REUSED")
    assert await end_offsets(client) == [3]
    assert await produce(client, RECORDS, headers=key("req-1")) == first


async def test_different_keys_are_different_requests(client: Client) -> None:
    await create_topic(client)
    a = await produce(client, RECORDS, headers=key("a"))
    b = await produce(client, RECORDS, headers=key("b"))
    assert a["results"][0]["base_offset"] == 0
    assert b["results"][0]["base_offset"] == 3
    assert await end_offsets(client) == [6]


async def test_keys_are_scoped_to_a_topic(client: Client) -> None:
    await create_topic(client, "t")
    await create_topic(client, "u")
    await produce(client, [{"value": 1}], topic="t", headers=key("k"))
    other = await produce(client, [{"value": 2}, {"value": 3}], topic="u", headers=key("k"))
    assert other == {"results": [{"partition": 0, "base_offset": 0, "count": 2}]}
    assert await end_offsets(client, "u") == [2]


async def test_a_failed_attempt_does_not_use_up_the_key(client: Client) -> None:
    await create_topic(client)
    resp = await client.post(
        records_path("t"), json={"records": [{"value": 1, "partition": "0"}]}, headers=key("k")
    )
    await problem(resp, 400, "INVALID_RECORD")
    first = await produce(client, [{"value": 1}], headers=key("k"))
    assert first == {"results": [{"partition": 0, "base_offset": 0, "count": 1}]}
    assert await produce(client, [{"value": 1}], headers=key("k")) == first


async def test_a_multi_partition_request_is_replayed_whole(client: Client) -> None:
    await create_topic(client, partitions=3)
    records = [{"partition": p, "value": p} for p in (2, 0, 2, 1)]
    first = await produce(client, records, headers=key("multi"))
    assert first == {
        "results": [
            {"partition": 0, "base_offset": 0, "count": 1},
            {"partition": 1, "base_offset": 0, "count": 1},
            {"partition": 2, "base_offset": 0, "count": 2},
        ]
    }
    assert await produce(client, records, headers=key("multi")) == first
    assert await end_offsets(client) == [1, 1, 2]


async def test_ndjson_and_binary_bodies_are_idempotent(client: Client) -> None:
    await create_topic(client, partitions=2)
    ndjson = (b"1\n2\n", NDJSON)
    binary = (batch_bytes([RecordInput(b"k", b"v"), RecordInput(b"j", b"w")]), RECORD_BATCH)
    for body, content_type in (ndjson, binary):
        status, first, _ = await produce_raw(client, body, content_type, headers=key(content_type))
        assert status == 200
        offsets = await end_offsets(client)
        status, again, _ = await produce_raw(client, body, content_type, headers=key(content_type))
        assert (status, again) == (200, first)
        assert await end_offsets(client) == offsets
    assert sum(await end_offsets(client)) == 4


async def test_acks_0_retries_are_deduplicated_too(client: Client) -> None:
    await create_topic(client)
    params = {"acks": "0"}
    first = await produce(client, RECORDS, params=params, headers=key("k"), status=202)
    again = await produce(client, RECORDS, params=params, headers=key("k"), status=202)
    assert again == first
    assert await end_offsets(client) == [3]


async def test_a_duplicate_in_flight_is_409(client: Client) -> None:
    """While the first attempt waits for its flush, a retry is told to come back later."""
    await create_topic(client, configs={"flush.messages": 1})
    with BlockedFlush(client) as blocked:
        first = asyncio.create_task(
            client.post(records_path("t"), json={"records": RECORDS}, headers=key("k"))
        )
        await wait_until(blocked.entered.is_set)
        resp = await client.post(records_path("t"), json={"records": RECORDS}, headers=key("k"))
        await problem(resp, 409, "IDEMPOTENCY_KEY_IN_FLIGHT")
        assert resp.headers["Retry-After"] == "1"
        other = await produce(
            client, [{"value": 9}], params={"acks": "0"}, headers=key("other"), status=202
        )
        assert other == {"results": [{"partition": 0, "base_offset": 3, "count": 1}]}
        blocked.release.set()
        first_resp = await asyncio.wait_for(first, 5)
        assert first_resp.status == 200
        answer = await first_resp.json()
    assert answer == {"results": [{"partition": 0, "base_offset": 0, "count": 3}]}
    assert await produce(client, RECORDS, headers=key("k")) == answer
    assert await end_offsets(client) == [4]


async def test_a_retry_after_a_timeout_does_not_append_again(client: Client) -> None:
    await create_topic(client, configs={"flush.messages": 1})
    with BlockedFlush(client):
        resp = await client.post(
            records_path("t"),
            params={"timeout_ms": "0"},
            json={"records": RECORDS},
            headers=key("k"),
        )
        await problem(resp, 504, "REQUEST_TIMED_OUT")
    answer = await produce(client, RECORDS, params={"timeout_ms": "0"}, headers=key("k"))
    assert answer == {"results": [{"partition": 0, "base_offset": 0, "count": 3}]}
    assert await end_offsets(client) == [3]


async def test_a_recreated_topic_forgets_its_keys(client: Client) -> None:
    await create_topic(client)
    await produce(client, RECORDS, headers=key("k"))
    assert (await client.delete("/v1/topics/t")).status == 204
    await create_topic(client)
    answer = await produce(client, [{"value": "new"}], headers=key("k"))
    assert answer == {"results": [{"partition": 0, "base_offset": 0, "count": 1}]}


async def test_keys_survive_a_restart(client: Client, start: Start) -> None:
    """The dedupe window is rebuilt from the log when the gateway starts again."""
    await create_topic(client, partitions=3)
    multi = [{"partition": p, "value": p} for p in (2, 0, 2, 1)]
    first_multi = await produce(client, multi, headers=key("multi"))
    first_keyless = await produce(client, RECORDS, headers=key("keyless"))
    status, first_nd, _ = await produce_raw(client, b"1\n2\n", NDJSON, headers=key("nd"))
    assert status == 200
    offsets = await end_offsets(client)
    await client.close()

    again: Client = await start()
    assert await produce(again, multi, headers=key("multi")) == first_multi
    assert await produce(again, RECORDS, headers=key("keyless")) == first_keyless
    assert (await produce_raw(again, b"1\n2\n", NDJSON, headers=key("nd")))[1] == first_nd
    resp = await again.post(
        records_path("t"), json={"records": [{"value": "different"}]}, headers=key("multi")
    )
    await problem(resp, 422, "IDEMPOTENCY_KEY_REUSED")
    assert await end_offsets(again) == offsets


async def test_keys_of_records_with_old_timestamps_survive_a_restart(
    client: Client, start: Start
) -> None:
    await create_topic(client)
    records = [{"value": 1, "timestamp": 1000}]
    first = await produce(client, records, headers=key("old"))
    await client.close()
    again: Client = await start()
    assert await produce(again, records, headers=key("old")) == first
    assert await end_offsets(again) == [1]


async def test_the_idempotency_marker_is_not_shown_to_consumers(client: Client) -> None:
    await create_topic(client)
    await produce(client, [{"value": 1, "headers": {"h": "v"}}, {"value": 2}], headers=key("k"))
    assert [r["headers"] for r in await fetch_all(client)] == [{"h": "v"}, {}]
