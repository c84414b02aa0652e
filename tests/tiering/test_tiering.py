"""Tiered storage through the gateway, in process, against moto_server: closed segments go to
S3 under their deterministic keys, local retention deletes only what S3 holds, the oldest
offsets are served back from S3, and an S3 outage delays uploads without losing anything."""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import Any

import msgspec
import orjson
from kafka.record.default_records import DefaultRecordBatch

from engine.tiered.manifest import Manifest, decode_manifest
from gateway.formats.codecs import RECORD_BATCH
from replication.partition import Partition
from tests.api.support import (
    JSON,
    Client,
    Start,
    create_topic,
    describe,
    fetch,
    gateway,
    metrics,
    parked,
    problem,
    produce,
    records_path,
    sample,
    wait_until,
)
from tests.api.test_events import data, read_events, stream
from tests.api.test_transactions import begin, end, in_txn
from tests.s3 import MotoServer, S3Proxy

PREFIX = "pre/fix"
# An hour ago: fixed timestamps age past the default retention.ms (7 days) as the calendar
# moves on, and retention then deletes what a test expects to read.
BASE_TS = int(time.time() * 1000) - 3_600_000
TIERED = {"remote.storage.enable": True, "segment.bytes": 2048, "local.retention.bytes": 0}
UPLOAD_WAIT_S = 30.0


async def tiered_gateway(start: Start, proxy: S3Proxy, bucket: str) -> Client:
    return await start(
        s3_endpoint=proxy.url, s3_bucket=bucket, s3_prefix=PREFIX, tiering_interval_s=0.05
    )


async def produce_numbered(client: Client, count: int, first: int = 0) -> None:
    for start in range(first, first + count, 10):
        batch = [
            {"key": f"k{n}", "value": {"n": n}, "timestamp": BASE_TS + n * 1000}
            for n in range(start, min(start + 10, first + count))
        ]
        await produce(client, batch)


def local(client: Client, topic: str = "t") -> Partition:
    partition = gateway(client).replicas.local(topic, 0)
    assert partition is not None
    return partition


def read_manifest(moto: MotoServer, bucket: str, topic: str = "t") -> Manifest:
    body = moto.client().get_object(Bucket=bucket, Key=f"{PREFIX}/{topic}/0/manifest.json")
    return decode_manifest(body["Body"].read())


def get(moto: MotoServer, bucket: str, key: str) -> bytes:
    data: bytes = moto.client().get_object(Bucket=bucket, Key=key)["Body"].read()
    return data


async def fetch_everything(client: Client, offset: int = 0) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    while True:
        answer = await fetch(client, offset=offset, max_records=7)
        records.extend(answer["records"])
        if answer["next_offset"] >= answer["high_watermark"]:
            return records
        offset = answer["next_offset"]


async def test_closed_segments_go_to_s3_and_old_offsets_come_back(
    start: Start, s3_proxy: S3Proxy, moto: MotoServer, bucket: str
) -> None:
    client = await tiered_gateway(start, s3_proxy, bucket)
    await create_topic(client, configs=TIERED)
    await produce_numbered(client, 200)
    partition = local(client)
    await wait_until(lambda: partition.local_log_start_offset >= 100, UPLOAD_WAIT_S)

    manifest = read_manifest(moto, bucket)
    assert manifest.topic == "t" and manifest.partition == 0 and manifest.log_start_offset == 0
    expected = 0
    for segment in manifest.segments:
        assert segment.base_offset == expected
        expected = segment.next_offset
        key = f"{PREFIX}/t/0/{segment.base_offset:020d}-{segment.last_offset:020d}"
        log_object = get(moto, bucket, key + ".log")
        assert len(log_object) == segment.size
        assert hashlib.sha256(log_object).hexdigest() == segment.sha256
        # Any Kafka decoder reads the object: kafka-python's pure-Python one here.
        offsets, position = list[int](), 0
        while position < len(log_object):
            size = DefaultRecordBatch(log_object[position:]).size_in_bytes
            batch = DefaultRecordBatch(log_object[position : position + size])
            assert batch.validate_crc()
            offsets.extend(record.offset for record in batch)
            position += batch.size_in_bytes
        assert offsets == list(range(segment.base_offset, segment.next_offset))
        assert segment.records == len(offsets)
        assert get(moto, bucket, key + ".epochs") == b"0 %d\n" % segment.base_offset
        assert get(moto, bucket, key + ".index")[:8] == bytes(8)  # relative 0 at position 0
    assert partition.local_log_start_offset <= expected  # nothing deleted before S3 had it
    assert partition.log_start_offset == 0
    described = (await describe(client))["partitions"][0]  # both starts, as the console shows
    assert described["log_start_offset"] == 0
    assert described["local_log_start_offset"] == partition.local_log_start_offset >= 100

    # The oldest offsets come back from S3: the same bytes, the same records.
    first = manifest.segments[0]
    response = await client.get(
        records_path("t", 0), params={"offset": "0"}, headers={"Accept": RECORD_BATCH}
    )
    assert response.status == 200
    body = await response.read()
    first_object = get(moto, bucket, f"{PREFIX}/t/0/{first.name}.log")
    assert body and first_object.startswith(body)
    records = await fetch_everything(client)
    assert [r["offset"] for r in records] == list(range(200))
    assert [r["value"] for r in records] == [{"n": n} for n in range(200)]
    middle = await fetch(client, offset=first.base_offset + 3, max_records=2)
    assert [r["offset"] for r in middle["records"]] == [
        first.base_offset + 3,
        first.base_offset + 4,
    ]

    earliest = await client.get(
        records_path("t", 0).replace("/records", "/offsets"), params={"timestamp": "earliest"}
    )
    assert (await earliest.json())["offset"] == 0
    by_time = await client.get(
        records_path("t", 0).replace("/records", "/offsets"),
        params={"timestamp": str(BASE_TS + 5 * 1000)},
    )
    assert (await by_time.json()) == {"offset": 5, "timestamp": BASE_TS + 5 * 1000}

    scraped = await metrics(client)
    assert (sample(scraped, "sluice_tier_segments_uploaded_total") or 0) >= len(manifest.segments)
    assert (sample(scraped, "sluice_tier_remote_fetches_total") or 0) >= 1
    remote_bytes = sample(scraped, "sluice_tier_remote_bytes", topic="t")
    assert remote_bytes == sum(s.size for s in read_manifest(moto, bucket).segments)
    ready = await (await client.get("/readyz")).json()
    assert ready["tiering"]["last_error"] is None


async def test_an_s3_outage_delays_uploads_and_local_deletion_and_loses_nothing(
    start: Start, s3_proxy: S3Proxy, moto: MotoServer, bucket: str
) -> None:
    client = await tiered_gateway(start, s3_proxy, bucket)
    await create_topic(client, configs=TIERED)
    s3_proxy.down()
    await produce_numbered(client, 150)
    partition = local(client)
    tiering = gateway(client).broker.tiering
    assert tiering is not None
    await wait_until(lambda: tiering.counters.failures >= 2, UPLOAD_WAIT_S)
    assert partition.local_log_start_offset == 0  # local deletion waits for S3
    ready = await (await client.get("/readyz")).json()
    assert ready["status"] == "ready"
    assert ready["tiering"]["last_error"] and ready["tiering"]["upload_lag_records"] > 0
    scraped = await metrics(client)
    assert (sample(scraped, "sluice_tier_upload_lag_records", topic="t", partition="0") or 0) > 0
    assert (sample(scraped, "sluice_tier_failures_total") or 0) >= 2

    s3_proxy.up()
    await wait_until(lambda: partition.local_log_start_offset >= 100, UPLOAD_WAIT_S)
    s3_proxy.down()  # reads of what only S3 holds fail clearly, and may be retried
    body = await problem(
        await client.get(records_path("t", 0), params={"offset": "0"}),
        503,
        "REMOTE_STORAGE_UNAVAILABLE",
    )
    assert "s3://" in body["detail"]
    s3_proxy.up()
    records = await fetch_everything(client)
    assert [r["value"] for r in records] == [{"n": n} for n in range(150)]
    manifest = read_manifest(moto, bucket)
    assert manifest.segments[0].base_offset == 0


async def test_remote_retention_deletes_objects_and_moves_the_log_start(
    start: Start, s3_proxy: S3Proxy, moto: MotoServer, bucket: str
) -> None:
    client = await tiered_gateway(start, s3_proxy, bucket)
    await create_topic(client, configs=TIERED)
    await produce_numbered(client, 300)
    partition = local(client)
    await wait_until(lambda: partition.local_log_start_offset >= 200, UPLOAD_WAIT_S)
    before = read_manifest(moto, bucket)
    assert len(before.segments) >= 3

    # Records older than a day before "now" expire (their timestamps are in 2026-11).
    response = await client.patch("/v1/topics/t", json={"configs": {"retention.ms": 1000}})
    assert response.status == 200, await response.text()
    await wait_until(lambda: partition.log_start_offset > 0, UPLOAD_WAIT_S)
    after = read_manifest(moto, bucket)
    assert after.log_start_offset == partition.log_start_offset
    assert len(after.segments) == 1  # the newest stays: it marks where S3 ends
    keys = {o["Key"] for o in moto.client().list_objects_v2(Bucket=bucket)["Contents"]}
    for dropped in before.segments[:-1]:
        assert f"{PREFIX}/t/0/{dropped.name}.log" not in keys
    await problem(
        await client.get(records_path("t", 0), params={"offset": "0"}), 416, "OFFSET_OUT_OF_RANGE"
    )


async def test_remote_storage_configs_are_checked(
    start: Start, s3_proxy: S3Proxy, bucket: str
) -> None:
    plain = await start()
    response = await plain.post(
        "/v1/topics", json={"name": "t", "configs": {"remote.storage.enable": True}}
    )
    body = await problem(response, 400, "INVALID_CONFIG")
    assert "--s3-bucket" in body["detail"]
    await plain.close()

    client = await tiered_gateway(start, s3_proxy, bucket)
    response = await client.post(
        "/v1/topics",
        json={"name": "c", "configs": {"remote.storage.enable": True, "cleanup.policy": "compact"}},
    )
    await problem(response, 400, "INVALID_CONFIG")
    await create_topic(client, configs=TIERED)
    response = await client.patch(
        "/v1/topics/t", json={"configs": {"remote.storage.enable": False}}
    )
    body = await problem(response, 400, "INVALID_CONFIG")
    assert "cannot be turned off" in body["detail"]


async def test_deleting_a_tiered_topic_deletes_its_objects(
    start: Start, s3_proxy: S3Proxy, moto: MotoServer, bucket: str
) -> None:
    client = await tiered_gateway(start, s3_proxy, bucket)
    await create_topic(client, configs=TIERED)
    await create_topic(client, "t2", configs=TIERED)  # a prefix of neither: must stay
    await produce_numbered(client, 100)
    for n in range(20):
        await produce(client, [{"value": n}] * 10, topic="t2")
    partition = local(client)
    await wait_until(lambda: partition.local_log_start_offset > 0, UPLOAD_WAIT_S)

    def keys() -> set[str]:
        listed = moto.client().list_objects_v2(Bucket=bucket).get("Contents", [])
        return {item["Key"] for item in listed}

    await wait_until(lambda: any(k.startswith(f"{PREFIX}/t2/") for k in keys()), UPLOAD_WAIT_S)
    assert (await client.delete("/v1/topics/t")).status == 204
    await wait_until(lambda: not any(k.startswith(f"{PREFIX}/t/") for k in keys()), UPLOAD_WAIT_S)
    assert any(k.startswith(f"{PREFIX}/t2/") for k in keys())


async def test_a_group_member_reads_what_only_s3_holds(
    start: Start, s3_proxy: S3Proxy, bucket: str
) -> None:
    client = await tiered_gateway(start, s3_proxy, bucket)
    await create_topic(client, configs=TIERED)
    await produce_numbered(client, 120)
    partition = local(client)
    await wait_until(lambda: partition.local_log_start_offset >= 60, UPLOAD_WAIT_S)
    joined = await client.post(
        "/v1/groups/g/members", json={"topics": ["t"], "auto_offset_reset": "earliest"}
    )
    assert joined.status == 201, await joined.text()
    member = (await joined.json())["member_id"]
    values: list[int] = []
    while len(values) < 120:
        response = await client.get(
            f"/v1/groups/g/members/{member}/records",
            params={"timeout_ms": "2000", "max_records": "25"},
        )
        assert response.status == 200, await response.text()
        records = (await response.json())["records"]
        assert records, f"no records after {len(values)}"
        values.extend(r["value"]["n"] for r in records)
    assert values == list(range(120))


async def produce_transactions(client: Client) -> int:
    """Plain records around an aborted transaction whose records and ABORT marker lie in
    different segments, a committed one and one aborted at once; the offset after the last
    marker. Plain records follow, so every marker ends up in a closed segment."""
    await produce_numbered(client, 20)
    aborted = (await begin(client))["producer_epoch"]
    await produce(client, [{"value": "a1"}], params=in_txn(aborted))
    await produce_numbered(client, 60, first=20)
    await produce(client, [{"value": "a2"}], params=in_txn(aborted))
    await end(client, "abort", aborted)
    committed = (await begin(client))["producer_epoch"]
    await produce(client, [{"value": "b1"}], params=in_txn(committed))
    await produce_numbered(client, 20, first=80)
    await produce(client, [{"value": "b2"}], params=in_txn(committed))
    await end(client, "commit", committed)
    at_once = (await begin(client))["producer_epoch"]
    await produce(client, [{"value": "c1"}], params=in_txn(at_once))
    await end(client, "abort", at_once)
    markers_end = local(client).log_end_offset
    await produce_numbered(client, 100, first=100)
    return markers_end


COMMITTED = [
    *({"n": n} for n in range(80)),
    "b1",
    *({"n": n} for n in range(80, 100)),
    "b2",
    *({"n": n} for n in range(100, 200)),
]


async def committed_walk(client: Client, accept: str) -> list[tuple[int, int, str, bytes]]:
    """A read_committed reader's answers from offset 0 to the end, each as it came: (offset,
    status, last stable offset, body)."""
    answers: list[tuple[int, int, str, bytes]] = []
    offset = 0
    while True:
        response = await client.get(
            records_path("t", 0),
            params={"offset": str(offset), "isolation": "read_committed", "timeout_ms": "0"},
            headers={"Accept": accept},
        )
        body = await response.read()
        assert response.status == 200, body
        lso = response.headers["Sluice-Last-Stable-Offset"]
        answers.append((offset, response.status, lso, body))
        next_offset = int(response.headers["Sluice-Next-Offset"])
        if next_offset >= int(lso):
            return answers
        assert next_offset > offset
        offset = next_offset


async def committed_values(client: Client) -> list[Any]:
    """Every value a read_committed reader reads from offset 0 (JSON answers)."""
    return [
        record["value"]
        for *_, body in await committed_walk(client, JSON)
        for record in orjson.loads(body)["records"]
    ]


def txn_index_keys(moto: MotoServer, bucket: str) -> set[str]:
    listed = moto.client().list_objects_v2(Bucket=bucket, Prefix=f"{PREFIX}/t/0/")
    return {o["Key"] for o in listed.get("Contents", ()) if o["Key"].endswith(".txnindex")}


async def test_read_committed_reads_of_offsets_only_s3_holds_answer_as_the_local_log_did(
    start: Start, s3_proxy: S3Proxy, moto: MotoServer, bucket: str
) -> None:
    """Each segment's aborted-transaction index goes to S3 beside it: once only S3 holds the
    transactions, a read_committed reader gets the answers the local log gave, byte for byte
    (committed records, no aborted one, control batches emptied as locally)."""
    client = await tiered_gateway(start, s3_proxy, bucket)
    await create_topic(client, configs={**TIERED, "local.retention.bytes": -1})
    markers_end = await produce_transactions(client)
    partition = local(client)
    local_walks = [await committed_walk(client, accept) for accept in (RECORD_BATCH, JSON)]
    assert await committed_values(client) == COMMITTED
    local_indexes = {
        path.name[:20]: path.read_bytes() for path in partition.log.directory.glob("*.txnindex")
    }
    assert len(local_indexes) >= 1

    response = await client.patch("/v1/topics/t", json={"configs": {"local.retention.bytes": 0}})
    assert response.status == 200, await response.text()
    directory = partition.log.directory
    await wait_until(  # only S3's indexes are left to read
        lambda: (
            partition.local_log_start_offset >= markers_end
            and not any(directory.glob("*.txnindex"))
        ),
        UPLOAD_WAIT_S,
    )
    manifest = read_manifest(moto, bucket)
    remote_indexes = {
        f"{s.base_offset:020d}": get(moto, bucket, f"{PREFIX}/t/0/{s.name}.txnindex")
        for s in manifest.segments
        if s.aborted_transactions
    }
    assert remote_indexes == local_indexes  # Kafka's format, as the segment's file held it
    assert len(txn_index_keys(moto, bucket)) == len(local_indexes)  # none without entries
    assert sum(s.aborted_transactions or 0 for s in manifest.segments) == 2

    assert [await committed_walk(client, accept) for accept in (RECORD_BATCH, JSON)] == local_walks
    assert await committed_values(client) == COMMITTED
    uncommitted = [r["value"] for r in await fetch_everything(client)]
    assert [v for v in uncommitted if isinstance(v, str)] == ["a1", "a2", "b1", "b2", "c1"]


async def test_remote_retention_deletes_a_segments_aborted_transaction_index(
    start: Start, s3_proxy: S3Proxy, moto: MotoServer, bucket: str
) -> None:
    client = await tiered_gateway(start, s3_proxy, bucket)
    await create_topic(client, configs=TIERED)
    markers_end = await produce_transactions(client)
    await produce_numbered(client, 100, first=200)  # the newest remote segment stays
    partition = local(client)
    await wait_until(lambda: partition.local_log_start_offset >= markers_end, UPLOAD_WAIT_S)
    indexes = txn_index_keys(moto, bucket)
    assert indexes

    response = await client.patch("/v1/topics/t", json={"configs": {"retention.ms": 1000}})
    assert response.status == 200, await response.text()
    await wait_until(lambda: partition.log_start_offset > markers_end, UPLOAD_WAIT_S)
    assert not txn_index_keys(moto, bucket)
    kept = read_manifest(moto, bucket).segments
    assert kept and all(s.base_offset >= markers_end for s in kept)


async def test_segments_closed_before_a_restart_go_up_with_their_index_and_are_read_back(
    start: Start, s3_proxy: S3Proxy, moto: MotoServer, bucket: str
) -> None:
    """Segments S3 did not take before a restart go up after it with the index the restarted
    log rebuilt; a node started again reads the indexes back from S3."""
    client = await tiered_gateway(start, s3_proxy, bucket)
    await create_topic(client, configs=TIERED)
    s3_proxy.down()
    markers_end = await produce_transactions(client)
    assert local(client).local_log_start_offset == 0  # nothing went up
    local_walk = await committed_walk(client, JSON)
    await client.close()

    s3_proxy.up()
    client = await tiered_gateway(start, s3_proxy, bucket)
    partition = local(client)
    await wait_until(lambda: partition.local_log_start_offset >= markers_end, UPLOAD_WAIT_S)
    assert sum(s.aborted_transactions or 0 for s in read_manifest(moto, bucket).segments) == 2
    assert await committed_walk(client, JSON) == local_walk
    await client.close()

    client = await tiered_gateway(start, s3_proxy, bucket)
    assert local(client).local_log_start_offset >= markers_end
    assert await committed_walk(client, JSON) == local_walk
    assert await committed_values(client) == COMMITTED


async def test_segments_uploaded_without_an_index_serve_read_committed_up_to_a_transaction(
    start: Start, s3_proxy: S3Proxy, moto: MotoServer, bucket: str
) -> None:
    """A manifest written before indexes were shipped lists no count: read_committed reads its
    segments up to their first transactional batch, and is refused there (416
    ISOLATION_UNAVAILABLE), where read_uncommitted reads on."""
    client = await tiered_gateway(start, s3_proxy, bucket)
    await create_topic(client, configs=TIERED)
    markers_end = await produce_transactions(client)
    partition = local(client)
    await wait_until(lambda: partition.local_log_start_offset >= markers_end, UPLOAD_WAIT_S)
    await client.close()
    manifest = read_manifest(moto, bucket)
    older = msgspec.structs.replace(
        manifest,
        segments=[msgspec.structs.replace(s, aborted_transactions=None) for s in manifest.segments],
    )
    s3 = moto.client()
    s3.put_object(Bucket=bucket, Key=f"{PREFIX}/t/0/manifest.json", Body=older.encode())
    s3.delete_objects(
        Bucket=bucket, Delete={"Objects": [{"Key": k} for k in txn_index_keys(moto, bucket)]}
    )

    client = await tiered_gateway(start, s3_proxy, bucket)
    plain = await fetch(client, offset=0, isolation="read_committed")
    assert [r["value"] for r in plain["records"]] == [{"n": n} for n in range(20)]
    assert plain["next_offset"] == 20
    body = await problem(
        await client.get(
            records_path("t", 0),
            params={"offset": "20", "isolation": "read_committed", "timeout_ms": "0"},
        ),
        416,
        "ISOLATION_UNAVAILABLE",
    )
    assert "read_uncommitted" in body["detail"]
    assert (await fetch(client, offset=20, max_records=1))["records"][0]["value"] == "a1"


async def test_read_committed_reads_of_s3_stop_at_the_last_stable_offset_and_wait_there(
    start: Start, s3_proxy: S3Proxy, bucket: str
) -> None:
    """Records of a transaction still open may go to S3 (closed segments below the high
    watermark do): a read_committed reader of what only S3 holds stops before them, is told
    the last stable offset, and a fetch parked there is answered once the commit moves it."""
    client = await tiered_gateway(start, s3_proxy, bucket)
    await create_topic(client, configs=TIERED)
    await produce_numbered(client, 20)
    epoch = (await begin(client))["producer_epoch"]
    await produce(client, [{"value": "open"}], params=in_txn(epoch))
    await produce_numbered(client, 100, first=20)
    partition = local(client)
    await wait_until(lambda: partition.local_log_start_offset > 21, UPLOAD_WAIT_S)

    response = await client.get(
        records_path("t", 0),
        params={"offset": "0", "isolation": "read_committed", "timeout_ms": "0"},
    )
    assert response.status == 200, await response.text()
    assert response.headers["Sluice-Last-Stable-Offset"] == "20"
    assert [r["value"] for r in (await response.json())["records"]] == [{"n": n} for n in range(20)]

    before = parked(client)
    waiting = asyncio.create_task(
        client.get(
            records_path("t", 0),
            params={"offset": "20", "isolation": "read_committed", "timeout_ms": "20000"},
        )
    )
    await wait_until(lambda: parked(client) > before)
    await end(client, "commit", epoch)
    response = await waiting
    assert response.status == 200, await response.text()
    assert (await response.json())["records"][0]["value"] == "open"


async def test_a_read_committed_event_stream_reads_what_only_s3_holds(
    start: Start, s3_proxy: S3Proxy, bucket: str
) -> None:
    client = await tiered_gateway(start, s3_proxy, bucket)
    await create_topic(client, configs=TIERED)
    markers_end = await produce_transactions(client)
    partition = local(client)
    await wait_until(lambda: partition.local_log_start_offset >= markers_end, UPLOAD_WAIT_S)
    resp = await stream(
        client, offset="earliest", isolation="read_committed", max_events=len(COMMITTED)
    )
    events = await read_events(resp, len(COMMITTED) + 1)
    assert [data(e)["value"] for e in events] == COMMITTED
