"""Produce: JSON, NDJSON and binary bodies, partitioning, offsets, acks, timestamps."""

from __future__ import annotations

import asyncio
import base64
from collections import Counter
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from kafka.partitioner.default import DefaultPartitioner
from kafka.record import MemoryRecords

from engine import batch as fmt
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
    fetch,
    fetch_all,
    metrics,
    now_ms,
    problem,
    produce,
    produce_raw,
    records_path,
    sample,
    wait_until,
)


class _Cluster:
    """Just enough ClusterMetadata for kafka-python's DefaultPartitioner."""

    def __init__(self, topic: str, partitions: int) -> None:
        self.topic = topic
        self.partitions = set(range(partitions))

    def topics(self) -> set[str]:
        return {self.topic}

    def partitions_for_topic(self, topic: str) -> set[int]:
        return self.partitions

    def available_partitions_for_topic(self, topic: str) -> set[int]:
        return self.partitions


def kafka_partition(key: bytes, partitions: int) -> int:
    """The partition kafka-python's default partitioner picks for these key bytes."""
    chosen: int = DefaultPartitioner().partition(
        "t", key, key, None, None, _Cluster("t", partitions)
    )
    return chosen


def values(records: list[dict[str, Any]]) -> list[Any]:
    return [r["value"] for r in records]


# -- JSON bodies --------------------------------------------------------------------------------


async def test_json_records_round_trip_exactly(client: Client) -> None:
    """Keys, JSON values, headers and timestamps come back as they were sent."""
    await create_topic(client)
    sent: list[dict[str, Any]] = [
        {"key": "k1", "value": {"a": [1, 2, {"b": None}]}, "headers": {"h": "v"}, "timestamp": 5},
        {"key": None, "value": [1, "two", 3.5], "timestamp": 6},
        {"value": "text"},
        {"key": "", "value": 42},
        {"value": -1.25},
        {"value": True},
        {"value": False},
        {"value": 'ünïcödé ✓ \u0000 "quoted"'},
        {"value": ""},
        {"value": {}},
        {"key": "tomb", "value": None},
        {},
    ]
    before = now_ms()
    result = await produce(client, sent)
    after = now_ms()
    assert result == {"results": [{"partition": 0, "base_offset": 0, "count": len(sent)}]}
    got = await fetch_all(client)
    assert [r["offset"] for r in got] == list(range(len(sent)))
    for rec, out in zip(sent, got, strict=True):
        assert out["key"] == rec.get("key")
        assert out["value"] == rec.get("value")
        assert out["headers"] == rec.get("headers", {})
        assert "value_encoding" not in out
        assert "key_encoding" not in out
        if "timestamp" in rec:
            assert out["timestamp"] == rec["timestamp"]
        else:
            assert before <= out["timestamp"] <= after
    assert set(got[0]) == {"offset", "timestamp", "key", "value", "headers"}


async def test_defaulted_timestamps_are_one_per_request(client: Client) -> None:
    await create_topic(client)
    await produce(client, [{"value": 1}, {"value": 2}, {"value": 3, "timestamp": 7}])
    stamps = [r["timestamp"] for r in await fetch_all(client)]
    assert stamps[0] == stamps[1] != 7
    assert stamps[2] == 7


async def test_headers_round_trip(client: Client) -> None:
    await create_topic(client)
    headers = {"trace-id": "abc", "empty": "", "nothing": None, "ünï": "cödé ✓"}
    await produce(client, [{"value": 1, "headers": headers}, {"value": 2, "headers": {}}])
    got = await fetch_all(client)
    assert got[0]["headers"] == headers
    assert got[1]["headers"] == {}
    assert "headers_encoding" not in got[0]


async def test_base64_keys_and_values_round_trip(client: Client) -> None:
    """Binary key/value bytes survive; valid JSON bytes come back as JSON, text keys as text."""
    await create_topic(client)

    def b64(raw: bytes) -> str:
        return base64.b64encode(raw).decode()

    sent = [
        {
            "key": b64(b"\x00\xff\xfe"),
            "key_encoding": "base64",
            "value": b64(b"\x89PNG\r\n\x1a\n\x00"),
            "value_encoding": "base64",
        },
        {
            "key": b64(b"plain"),
            "key_encoding": "base64",
            "value": b64(b'{"a": 1}'),
            "value_encoding": "base64",
        },
        {"value": b64(b"not json"), "value_encoding": "base64"},
        {"value": b64(b""), "value_encoding": "base64"},
    ]
    await produce(client, sent)
    got = await fetch_all(client)
    assert got[0]["key"] == b64(b"\x00\xff\xfe")
    assert got[0]["key_encoding"] == "base64"
    assert got[0]["value"] == b64(b"\x89PNG\r\n\x1a\n\x00")
    assert got[0]["value_encoding"] == "base64"
    assert got[1]["key"] == "plain"
    assert "key_encoding" not in got[1]
    assert got[1]["value"] == {"a": 1}
    assert "value_encoding" not in got[1]
    assert got[2]["value"] == b64(b"not json")
    assert got[2]["value_encoding"] == "base64"
    assert got[3]["value"] == ""
    assert got[3]["value_encoding"] == "base64"


async def test_offsets_are_consecutive_across_requests(client: Client) -> None:
    await create_topic(client)
    bases = []
    for n in (2, 3, 1):
        result = await produce(client, [{"value": i} for i in range(n)])
        bases.append((result["results"][0]["base_offset"], result["results"][0]["count"]))
    assert bases == [(0, 2), (2, 3), (5, 1)]
    assert [r["offset"] for r in await fetch_all(client)] == list(range(6))


async def test_a_request_split_into_several_batches_keeps_consecutive_offsets(
    client: Client,
) -> None:
    """max.message.bytes splits one request into batches; offsets stay in request order."""
    await create_topic(client, configs={"max.message.bytes": 400})
    sent = [{"key": f"k{i}", "value": f"{i:03d}" + "x" * 60} for i in range(20)]
    result = await produce(client, sent)
    assert result == {"results": [{"partition": 0, "base_offset": 0, "count": 20}]}
    got = await fetch_all(client)
    assert [(r["offset"], r["key"], r["value"]) for r in got] == [
        (i, s["key"], s["value"]) for i, s in enumerate(sent)
    ]
    resp = await client.get(records_path("t", 0), headers={"Accept": RECORD_BATCH})
    data = await resp.read()
    headers = [h for _, h in fmt.scan(data).headers]
    assert len(headers) > 1
    assert all(h.size <= 400 for h in headers)
    assert [h.base_offset for h in headers] == [0] + [h.next_offset for h in headers[:-1]]
    assert headers[-1].next_offset == 20


async def test_one_request_to_several_partitions(client: Client) -> None:
    """Results are per partition (sorted); each partition keeps request order."""
    await create_topic(client, partitions=3)
    await produce(client, [{"value": "first"}], partition=1)
    sent = [
        {"partition": 1, "value": "a"},
        {"partition": 0, "value": "b"},
        {"partition": 1, "value": "c"},
        {"partition": 2, "value": "d"},
        {"partition": 0, "value": "e"},
    ]
    result = await produce(client, sent)
    assert result == {
        "results": [
            {"partition": 0, "base_offset": 0, "count": 2},
            {"partition": 1, "base_offset": 1, "count": 2},
            {"partition": 2, "base_offset": 0, "count": 1},
        ]
    }
    assert values(await fetch_all(client, partition=0)) == ["b", "e"]
    assert values(await fetch_all(client, partition=1)) == ["first", "a", "c"]
    assert values(await fetch_all(client, partition=2)) == ["d"]


# -- partitioning -------------------------------------------------------------------------------

KEYS = ["", "a", "ab", "abc", "abcd", "abcde", "ключ", "🔑", "x" * 101] + [
    f"user-{i}" for i in range(60)
]


async def test_keyed_records_go_where_kafkas_default_partitioner_puts_them(
    client: Client,
) -> None:
    await create_topic(client, partitions=7)
    result = await produce(client, [{"key": k, "value": i} for i, k in enumerate(KEYS)])
    expected = {k: kafka_partition(k.encode(), 7) for k in KEYS}
    counts = Counter(expected.values())
    assert result["results"] == [
        {"partition": p, "base_offset": 0, "count": counts[p]} for p in sorted(counts)
    ]
    placed: dict[str, int] = {}
    for p in range(7):
        got = await fetch_all(client, partition=p)
        placed.update({r["key"]: p for r in got})
        assert values(got) == sorted(values(got))  # request order within the partition
    assert placed == expected


async def test_base64_keys_are_partitioned_on_their_bytes(client: Client) -> None:
    await create_topic(client, partitions=5)
    keys = [bytes([i, 255 - i, 0, i]) for i in range(30)]
    records = [
        {"key": base64.b64encode(k).decode(), "key_encoding": "base64", "value": i}
        for i, k in enumerate(keys)
    ]
    await produce(client, records)
    for p in range(5):
        got = await fetch_all(client, partition=p)
        assert [r["value"] for r in got] == [
            i for i, k in enumerate(keys) if kafka_partition(k, 5) == p
        ]


async def test_keyless_records_of_one_request_stay_together(client: Client) -> None:
    await create_topic(client, partitions=4)
    result = await produce(client, [{"value": i} for i in range(10)])
    assert len(result["results"]) == 1
    assert result["results"][0]["count"] == 10
    p = result["results"][0]["partition"]
    assert values(await fetch_all(client, partition=p)) == list(range(10))


async def test_keyless_requests_spread_over_the_partitions(client: Client) -> None:
    await create_topic(client, partitions=4)
    chosen = []
    for i in range(4):
        result = await produce(client, [{"value": i}, {"value": i}])
        chosen.append(result["results"][0]["partition"])
    assert sorted(chosen) == [0, 1, 2, 3]
    for _ in range(4):
        _, body, _ = await produce_raw(client, b"1\n2\n", NDJSON)
        chosen.append(body["results"][0]["partition"])
    assert sorted(chosen[4:]) == [0, 1, 2, 3]


async def test_keyless_records_stay_together_beside_keyed_ones(client: Client) -> None:
    await create_topic(client, partitions=5)
    sent: list[dict[str, Any]] = []
    for i in range(12):
        sent.append({"key": f"k{i}", "value": f"keyed-{i}"})
        sent.append({"value": f"free-{i}"})
    await produce(client, sent)
    free_partitions = set()
    for p in range(5):
        for rec in await fetch_all(client, partition=p):
            if rec["key"] is None:
                free_partitions.add(p)
            else:
                assert p == kafka_partition(rec["key"].encode(), 5)
    assert len(free_partitions) == 1
    (p,) = free_partitions
    free = [r["value"] for r in await fetch_all(client, partition=p) if r["key"] is None]
    assert free == [f"free-{i}" for i in range(12)]


async def test_the_partition_in_the_url_wins_over_keys(client: Client) -> None:
    await create_topic(client, partitions=3)
    result = await produce(client, [{"key": k, "value": k} for k in KEYS[:10]], partition=2)
    assert result == {"results": [{"partition": 2, "base_offset": 0, "count": 10}]}
    assert await end_offsets(client) == [0, 0, 10]


async def test_a_record_partition_equal_to_the_url_partition(client: Client) -> None:
    await create_topic(client, partitions=2)
    result = await produce(client, [{"partition": 1, "value": 1}, {"value": 2}], partition=1)
    assert result == {"results": [{"partition": 1, "base_offset": 0, "count": 2}]}


async def test_a_record_partition_different_from_the_url(client: Client) -> None:
    await create_topic(client, partitions=2)
    resp = await client.post(
        records_path("t", 1), json={"records": [{"value": 1}, {"partition": 0, "value": 2}]}
    )
    body = await problem(resp, 400, "INVALID_RECORD")
    assert body["index"] == 1
    assert body["pointer"] == "/records/1/partition"
    assert await end_offsets(client) == [0, 0]


async def test_a_record_partition_that_does_not_exist(client: Client) -> None:
    await create_topic(client, partitions=2)
    for partition in (2, 2**40):
        resp = await client.post(
            records_path("t"), json={"records": [{"value": 1}, {"partition": partition}]}
        )
        body = await problem(resp, 404, "UNKNOWN_PARTITION")
        assert body["index"] == 1
    assert await end_offsets(client) == [0, 0]


# -- NDJSON -------------------------------------------------------------------------------------


async def test_ndjson_one_value_per_line(client: Client) -> None:
    await create_topic(client)
    body = b'{"a": 1}\n\n[1, 2]\r\n"text"\n  42  \nnull\ntrue\n'
    status, answer, _ = await produce_raw(client, body, NDJSON)
    assert status == 200
    assert answer == {"results": [{"partition": 0, "base_offset": 0, "count": 6}]}
    got = await fetch_all(client)
    assert values(got) == [{"a": 1}, [1, 2], "text", 42, None, True]
    assert [r["key"] for r in got] == [None] * 6


async def test_ndjson_key_parameter_applies_to_every_line(client: Client) -> None:
    await create_topic(client, partitions=6)
    for key in ("user-1", "user-2", "ключ"):
        status, answer, _ = await produce_raw(client, b"1\n2\n3", NDJSON, params={"key": key})
        assert status == 200
        p = kafka_partition(key.encode(), 6)
        assert answer["results"][0]["partition"] == p
        assert answer["results"][0]["count"] == 3
        got = await fetch(client, partition=p, offset=answer["results"][0]["base_offset"])
        assert [(r["key"], r["value"]) for r in got["records"]] == [(key, 1), (key, 2), (key, 3)]


async def test_ndjson_to_a_partition(client: Client) -> None:
    await create_topic(client, partitions=3)
    status, answer, _ = await produce_raw(
        client, b"1\n2\n", NDJSON, partition=2, params={"key": "k"}
    )
    assert (status, answer) == (200, {"results": [{"partition": 2, "base_offset": 0, "count": 2}]})


# -- binary record batches ----------------------------------------------------------------------


def decode_with_kafka_python(
    data: bytes,
) -> Iterator[tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes]]]]:
    """Records of raw batches, read by an independent decoder (kafka-python)."""
    records = MemoryRecords(data)
    while records.has_next():
        batch = records.next_batch()
        for r in batch:
            yield r.offset, r.timestamp, r.key, r.value, list(r.headers)


@pytest.mark.parametrize("compression", [0, 1], ids=["none", "gzip"])
async def test_binary_batches_round_trip(client: Client, compression: int) -> None:
    await create_topic(client)
    await produce(client, [{"value": "before"}])
    records = [
        RecordInput(b"k1", b'{"json": true}', [("h", b"v")], 1000),
        RecordInput(None, b"not json", [], 1001),
        RecordInput(b"\xff", b"\x00\x01", [("bin", b"\xfe")], 1002),
    ]
    more = [RecordInput(b"k4", b"4", [], 1003)]
    body = batch_bytes(records, compression=compression) + batch_bytes(more)
    status, answer, _ = await produce_raw(client, body, RECORD_BATCH)
    assert (status, answer) == (200, {"results": [{"partition": 0, "base_offset": 1, "count": 4}]})

    resp = await client.get(
        records_path("t", 0), params={"offset": "1"}, headers={"Accept": RECORD_BATCH}
    )
    raw = await resp.read()
    assert list(decode_with_kafka_python(raw)) == [
        (1, 1000, b"k1", b'{"json": true}', [("h", b"v")]),
        (2, 1001, None, b"not json", []),
        (3, 1002, b"\xff", b"\x00\x01", [("bin", b"\xfe")]),
        (4, 1003, b"k4", b"4", []),
    ]
    got = (await fetch(client, offset=1))["records"]
    assert got[0] == {
        "offset": 1,
        "timestamp": 1000,
        "key": "k1",
        "value": {"json": True},
        "headers": {"h": "v"},
    }
    assert got[1] == {
        "offset": 2,
        "timestamp": 1001,
        "key": None,
        "value": base64.b64encode(b"not json").decode(),
        "value_encoding": "base64",
        "headers": {},
    }
    assert got[2] == {
        "offset": 3,
        "timestamp": 1002,
        "key": "/w==",
        "key_encoding": "base64",
        "value": "AAE=",
        "value_encoding": "base64",
        "headers": {"bin": "/g=="},
        "headers_encoding": "base64",
    }
    assert got[3]["value"] == 4


async def test_binary_batch_to_a_partition(client: Client) -> None:
    await create_topic(client, partitions=3)
    body = batch_bytes([RecordInput(b"k", b"1"), RecordInput(b"j", b"2")])
    status, answer, _ = await produce_raw(client, body, RECORD_BATCH, partition=1)
    assert (status, answer) == (200, {"results": [{"partition": 1, "base_offset": 0, "count": 2}]})


async def test_a_client_batch_cannot_claim_its_values_are_json(client: Client) -> None:
    await create_topic(client)
    batch = bytearray(batch_bytes([RecordInput(None, b"\xff not json")]))
    header = fmt.read_header(batch)
    fmt.set_attributes(batch, 0, header, header.attributes | fmt.VALUES_JSON_MASK)
    status, _, _ = await produce_raw(client, bytes(batch), RECORD_BATCH)
    assert status in (200, 400)
    resp = await client.get(records_path("t", 0), params={"timeout_ms": "0"})
    doc = orjson.loads(await resp.read())
    if status == 200:
        assert doc["records"][0]["value"] == base64.b64encode(b"\xff not json").decode()
        assert doc["records"][0]["value_encoding"] == "base64"


# -- acks ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("acks", "status"), [(None, 200), ("all", 200), ("-1", 200), ("1", 200), ("0", 202)]
)
async def test_acks(client: Client, acks: str | None, status: int) -> None:
    await create_topic(client)
    params = None if acks is None else {"acks": acks}
    result = await produce(client, [{"value": 1}, {"value": 2}], params=params, status=status)
    assert result == {"results": [{"partition": 0, "base_offset": 0, "count": 2}]}
    assert values(await fetch_all(client)) == [1, 2]


async def test_acks_all_waits_for_the_flush_policy(client: Client) -> None:
    """With flush.messages=1 the answer waits for the fsync; acks=0 does not wait."""
    await create_topic(client, configs={"flush.messages": 1})
    with BlockedFlush(client) as blocked:
        task = asyncio.create_task(client.post(records_path("t"), json={"records": [{"value": 1}]}))
        await wait_until(blocked.entered.is_set)
        assert not task.done()
        assert await end_offsets(client) == [1]
        quick = await produce(client, [{"value": 2}], params={"acks": "0"}, status=202)
        assert quick == {"results": [{"partition": 0, "base_offset": 1, "count": 1}]}
        assert not task.done()
        blocked.release.set()
        resp = await task
        assert resp.status == 200
        assert await resp.json() == {"results": [{"partition": 0, "base_offset": 0, "count": 1}]}


async def test_produces_waiting_for_an_fsync_share_the_next_one(client: Client) -> None:
    """Group commit: requests appended while a flush is under way wait for it, or share the
    next one, instead of each starting its own."""
    await create_topic(client, configs={"flush.messages": 1})
    flushes: list[int | None] = []
    with BlockedFlush(client) as blocked:
        flush = blocked._flush

        def counted(up_to: int | None = None) -> None:
            flushes.append(up_to)
            flush(up_to)

        blocked._flush = counted
        first = asyncio.create_task(
            client.post(records_path("t"), json={"records": [{"value": 0}]})
        )
        await wait_until(blocked.entered.is_set)
        later = [
            asyncio.create_task(client.post(records_path("t"), json={"records": [{"value": v}]}))
            for v in range(1, 6)
        ]
        await wait_until(lambda: blocked.log.log_end_offset == 6)
        assert not any(task.done() for task in [first, *later])
        blocked.release.set()
        answers = [await (await task).json() for task in [first, *later]]
    assert sorted(a["results"][0]["base_offset"] for a in answers) == list(range(6))
    # The held flush had not yet begun when the five were appended, so it covered them all;
    # without group commit each request would have started its own.
    assert len(flushes) == 1


async def test_concurrent_one_record_produces_get_distinct_consecutive_offsets(
    client: Client,
) -> None:
    await create_topic(client)
    answers = await asyncio.gather(*(produce(client, [{"value": v}]) for v in range(50)))
    offsets = {a["results"][0]["base_offset"]: v for v, a in enumerate(answers)}
    assert sorted(offsets) == list(range(50))
    assert values(await fetch_all(client)) == [offsets[o] for o in range(50)]
    samples = await metrics(client)
    assert sample(samples, "sluice_produce_requests_written_total") == 50
    writes = sample(samples, "sluice_produce_writes_total")
    assert writes is not None and 1 <= writes <= 50


async def test_acks_all_times_out_with_504_and_says_the_record_may_commit(client: Client) -> None:
    await create_topic(client, configs={"flush.messages": 1})
    with BlockedFlush(client):
        resp = await client.post(
            records_path("t"), params={"timeout_ms": "0"}, json={"records": [{"value": 1}]}
        )
        body = await problem(resp, 504, "REQUEST_TIMED_OUT")
        assert "may still" in body["detail"]
    assert values(await fetch_all(client)) == [1]


# -- timestamps ---------------------------------------------------------------------------------


async def test_log_append_time_replaces_producer_timestamps(client: Client) -> None:
    await create_topic(client, configs={"message.timestamp.type": "LogAppendTime"})
    before = now_ms()
    await produce(client, [{"value": 1, "timestamp": 1000}, {"value": 2}])
    after = now_ms()
    stamps = [r["timestamp"] for r in await fetch_all(client)]
    assert stamps[0] == stamps[1]
    assert before <= stamps[0] <= after
    body = batch_bytes([RecordInput(None, b"3", [], 5)])
    assert (await produce_raw(client, body, RECORD_BATCH))[0] == 200
    last = (await fetch(client, offset=2))["records"][0]
    assert last["timestamp"] >= stamps[0]
    assert last["timestamp"] != 5


async def test_extreme_timestamps_are_kept(client: Client) -> None:
    await create_topic(client)
    await produce(client, [{"value": 1, "timestamp": 0}, {"value": 2, "timestamp": 2**63 - 1}])
    assert [r["timestamp"] for r in await fetch_all(client)] == [0, 2**63 - 1]


# -- compacted topics ---------------------------------------------------------------------------


async def test_a_compacted_topic_needs_a_key_on_every_record(client: Client) -> None:
    await create_topic(client, configs={"cleanup.policy": "compact"})
    resp = await client.post(
        records_path("t"), json={"records": [{"key": "a", "value": 1}, {"value": 2}]}
    )
    await problem(resp, 400, "INVALID_RECORD")
    status, body, _ = await produce_raw(client, b"1\n", NDJSON)
    assert (status, body["code"]) == (400, "INVALID_RECORD")
    keyless = batch_bytes([RecordInput(b"a", b"1"), RecordInput(None, b"2")])
    status, body, _ = await produce_raw(client, keyless, RECORD_BATCH)
    assert (status, body["code"]) == (400, "INVALID_RECORD")
    assert await end_offsets(client) == [0]

    await produce(client, [{"key": "a", "value": 1}, {"key": "b", "value": None}])
    status, _, _ = await produce_raw(client, b"1\n", NDJSON, params={"key": "c"})
    assert status == 200
    status, _, _ = await produce_raw(client, batch_bytes([RecordInput(b"d", b"1")]), RECORD_BATCH)
    assert status == 200
    assert [r["key"] for r in await fetch_all(client)] == ["a", "b", "c", "d"]


# -- auto-creation ------------------------------------------------------------------------------


async def test_unknown_topics_are_not_created_by_default(client: Client) -> None:
    resp = await client.post(records_path("fresh"), json={"records": [{"value": 1}]})
    await problem(resp, 404, "UNKNOWN_TOPIC")
    assert (await (await client.get("/v1/topics")).json()) == {"topics": []}


async def test_auto_create_topics(start: Start) -> None:
    client: Client = await start(auto_create_topics=True, default_partitions=3)
    result = await produce(client, [{"value": 1}], topic="fresh", partition=2)
    assert result == {"results": [{"partition": 2, "base_offset": 0, "count": 1}]}
    assert await end_offsets(client, "fresh") == [0, 0, 1]
    resp = await client.post(records_path("bad name!"), json={"records": [{"value": 1}]})
    await problem(resp, 400, "INVALID_TOPIC_NAME")
    resp = await client.get(records_path("other", 0))
    await problem(resp, 404, "UNKNOWN_TOPIC")
    topics = (await (await client.get("/v1/topics")).json())["topics"]
    assert topics == [{"name": "fresh", "partitions": 3}]


# -- record size --------------------------------------------------------------------------------


async def test_a_record_over_max_message_bytes_is_413_naming_it(client: Client) -> None:
    await create_topic(client, configs={"max.message.bytes": 500})
    sent = [{"value": "small"}, {"value": "x" * 300}, {"value": "y" * 600}, {"value": 1}]
    body = await problem(
        await client.post(records_path("t"), json={"records": sent}), 413, "RECORD_TOO_LARGE"
    )
    assert body["index"] == 2
    status, body, _ = await produce_raw(client, b'"small"\n"' + b"z" * 600 + b'"\n', NDJSON)
    assert (status, body["code"], body["index"]) == (413, "RECORD_TOO_LARGE", 1)
    big = batch_bytes([RecordInput(None, b"w" * 600)])
    status, body, _ = await produce_raw(client, big, RECORD_BATCH)
    assert (status, body["code"]) == (413, "RECORD_TOO_LARGE")
    assert await end_offsets(client) == [0]


async def test_record_too_large_names_the_request_index_across_partitions(
    client: Client,
) -> None:
    await create_topic(client, partitions=2, configs={"max.message.bytes": 500})
    sent = [{"partition": 0, "value": "a"}, {"partition": 1, "value": "x" * 600}]
    body = await problem(
        await client.post(records_path("t"), json={"records": sent}), 413, "RECORD_TOO_LARGE"
    )
    assert body["index"] == 1
    assert await end_offsets(client) == [0, 0]


async def test_a_batch_whose_record_offsets_skip_is_refused(client: Client) -> None:
    """Offsets are assigned by stamping the base offset, so the records' deltas must run
    0..count-1: a batch claiming deltas 0..1 that holds records at 0 and 5 would be served out
    of order and twice."""
    await create_topic(client)
    data = fmt.encode_batch(
        [fmt.RecordInput(None, b"a"), fmt.RecordInput(None, b"b")], offsets=[0, 5]
    )
    last_offset_delta_at = 23  # after attributes (int16 at 21)
    data[last_offset_delta_at : last_offset_delta_at + 4] = (1).to_bytes(4, "big")
    header = fmt.read_header(data)
    fmt.set_attributes(data, 0, header, header.attributes)  # a valid CRC again
    status, body, _ = await produce_raw(client, bytes(data), RECORD_BATCH)
    assert (status, body["code"]) == (400, "INVALID_RECORD"), body
    assert "offset deltas" in body["detail"]
    assert await end_offsets(client) == [0]


@pytest.mark.parametrize(
    ("body", "media", "said"),
    [
        (b'{"records": [{"value": "\xff"}]}', "application/json", "not UTF-8"),
        (b'{"records": [{"key": "\xff", "value": 1}]}', "application/json", "not UTF-8"),
        (b'1\n"\xfe"\n', NDJSON, "line 2"),
    ],
)
async def test_a_body_that_is_not_utf8_is_refused(
    client: Client, body: bytes, media: str, said: str
) -> None:
    """Stored as sent, such a value would make every later JSON fetch of the partition
    unreadable."""
    await create_topic(client)
    status, answer, _ = await produce_raw(client, body, media)
    assert (status, answer["code"]) == (400, "INVALID_JSON"), answer
    assert said in answer["detail"]
    assert await end_offsets(client) == [0]
