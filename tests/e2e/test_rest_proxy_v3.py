"""REST Proxy v3 on a real `sluice serve`: the cluster and topic reads give the cluster id;
record produce stores what each type says and partitions keys as /v1 does; the streaming mode
answers each record as it is acknowledged, before the next is sent (chunked HTTP/1.1); bad
input gets v3's error body, never a 500; HTTP/2 through curl."""

from __future__ import annotations

import asyncio
import base64
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from gateway.produce.partitioner import partition_for_key
from tests.e2e.conftest import Server, start_server
from tests.e2e.test_fast_routes import create_topic

WAIT_S = 30.0


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Server]:
    running = start_server(tmp_path / "data")
    yield running
    if running.process.poll() is None:
        assert running.stop() == 0


def cluster_id(server: Server) -> str:
    listed = httpx.get(f"{server.url}/v3/clusters", timeout=WAIT_S)
    assert listed.status_code == 200
    doc = listed.json()
    assert doc["kind"] == "KafkaClusterList" and len(doc["data"]) == 1
    return str(doc["data"][0]["cluster_id"])


def records_url(server: Server, topic: str) -> str:
    return f"{server.url}/v3/clusters/{cluster_id(server)}/topics/{topic}/records"


def stored(server: Server, topic: str, partition: int) -> list[dict[str, Any]]:
    """The partition's records as /v1 reads them, keys and values base64 where not text."""
    answer = httpx.get(
        f"{server.url}/v1/topics/{topic}/partitions/{partition}/records?offset=0", timeout=WAIT_S
    )
    assert answer.status_code == 200, answer.text
    return list(answer.json()["records"])


def test_clusters_and_topics(gateway: Server) -> None:
    create_topic(gateway, "orders", partitions=3)
    cid = cluster_id(gateway)
    cluster = httpx.get(f"{gateway.url}/v3/clusters/{cid}").json()
    assert cluster["cluster_id"] == cid
    assert cluster["topics"]["related"] == f"{gateway.url}/v3/clusters/{cid}/topics"
    topics = httpx.get(f"{gateway.url}/v3/clusters/{cid}/topics/").json()
    assert [t["topic_name"] for t in topics["data"]] == ["orders"]
    topic = httpx.get(f"{gateway.url}/v3/clusters/{cid}/topics/orders").json()
    assert (topic["partitions_count"], topic["replication_factor"]) == (3, 1)
    for path in ("/v3/clusters/nope", "/v3/clusters/nope/topics", f"/v3/clusters/{cid}/topics/x"):
        missing = httpx.get(f"{gateway.url}{path}")
        assert missing.status_code == 404
        assert missing.headers["content-type"] == "application/json"
        assert missing.json()["error_code"] == 404


def test_one_record_of_each_type(gateway: Server) -> None:
    create_topic(gateway, "t", partitions=3)
    url = records_url(gateway, "t")
    record = {
        "key": {"type": "STRING", "data": "alice"},
        "value": {"type": "JSON", "data": {"item": "book", "qty": 1}},
        "headers": [{"name": "source", "value": base64.b64encode(b"web").decode()}],
        "timestamp": "2026-01-02T03:04:05.678Z",
    }
    answer = httpx.post(url, json=record, timeout=WAIT_S)
    assert answer.status_code == 200, answer.text
    report = answer.json()
    partition = partition_for_key(b"alice", 3)
    assert report == {
        "error_code": 200,
        "cluster_id": cluster_id(gateway),
        "topic_name": "t",
        "partition_id": partition,
        "offset": 0,
        "timestamp": "2026-01-02T03:04:05.678Z",
        "key": {"type": "STRING", "size": 5},
        "value": {"type": "JSON", "size": 23},
    }
    [read] = stored(gateway, "t", partition)
    assert (read["key"], read["value"], read["headers"]) == (
        "alice",
        {"item": "book", "qty": 1},
        {"source": "web"},
    )
    assert read["timestamp"] == 1767323045678
    binary = {
        "partition_id": 1,
        "key": {"type": "BINARY", "data": base64.b64encode(b"\xff\x01").decode()},
        "value": {"data": [1, 2]},  # no type: JSON
    }
    answer = httpx.post(url, json=binary, timeout=WAIT_S)
    assert answer.status_code == 200, answer.text
    assert answer.json()["partition_id"] == 1
    last = stored(gateway, "t", 1)[-1]
    assert (last["key"], last.get("key_encoding"), last["value"]) == ("/wE=", "base64", [1, 2])


def test_many_records_in_one_body(gateway: Server) -> None:
    create_topic(gateway, "t", partitions=1)
    body = b"".join(
        orjson.dumps({"value": {"type": "STRING", "data": f"v{i}"}}) + b"\n" for i in range(5)
    )
    body += b'{"value": {"type": "BINARY", "data": "@@"}} {"value": {"data": 5}}'
    answer = httpx.post(
        records_url(gateway, "t"), content=body, headers={"Content-Type": "application/json"}
    )
    assert answer.status_code == 200
    reports = [orjson.loads(line) for line in answer.content.splitlines()]
    assert [r["error_code"] for r in reports] == [200] * 5 + [400, 200]
    assert [r.get("offset") for r in reports] == [0, 1, 2, 3, 4, None, 5]
    assert "base64" in reports[5]["message"]


async def test_the_stream_answers_each_record_as_it_is_acknowledged(gateway: Server) -> None:
    create_topic(gateway, "t", partitions=2)
    path = records_url(gateway, "t").removeprefix(gateway.url)
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
    writer.write(
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n".encode()
    )
    try:
        head = b""
        for i in range(3):
            chunk = orjson.dumps({"partition_id": 1, "value": {"data": i}})
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            await writer.drain()
            if i == 0:  # the answer starts before the body ends
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT_S)
            report = orjson.loads(await _chunk(reader))
            assert (report["error_code"], report["offset"]) == (200, i)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        assert await _chunk(reader) == b""  # the end of the answer
    finally:
        writer.close()
    assert head.startswith(b"HTTP/1.1 200")
    assert b"Transfer-Encoding: chunked" in head


async def _chunk(reader: asyncio.StreamReader) -> bytes:
    """One chunk of a chunked answer, without its trailing line break."""
    size = int(await asyncio.wait_for(reader.readuntil(b"\r\n"), WAIT_S), 16)
    data = await asyncio.wait_for(reader.readexactly(size + 2), WAIT_S)
    if size == 0:
        return b""
    return data[:-2].rstrip(b"\n")


def test_keys_go_where_v1_puts_them(gateway: Server) -> None:
    create_topic(gateway, "t", partitions=4)
    url = records_url(gateway, "t")
    for key in ("a", "b", "user-42"):
        v3 = httpx.post(url, json={"key": {"type": "STRING", "data": key}, "value": {"data": 1}})
        v1 = httpx.post(
            f"{gateway.url}/v1/topics/t/records", json={"records": [{"key": key, "value": 1}]}
        )
        assert v3.json()["partition_id"] == v1.json()["results"][0]["partition"]


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        (b'{"value": {"type": "AVRO", "data": 1}}', 400, "Subject 't-value' not found"),
        (b'{"value": {"schema_id": 3, "data": 1}}', 400, "Schema 3 not found"),
        (b'{"value": {"type": "XML", "data": 1}}', 400, "BINARY, JSON or STRING"),
        (b'{"value": {"type": "STRING", "data": 1}}', 400, "must be a string"),
        (b'{"key": {"type": "BINARY", "data": "!"}}', 400, "base64"),
        (b'{"headers": [{"name": "h", "value": "!"}]}', 400, "base64"),
        (b'{"nope": 1}', 400, "invalid record"),
        (b'{"timestamp": "yesterday"}', 400, "invalid record"),
        (b'{"partition_id": 9}', 404, "partition"),
        (b'{"value": ', 400, "ends inside"),
        (b"[1]", 400, "JSON object"),
        (b"null", 400, "JSON object"),
        (b"null null", 400, "JSON object"),
        (b"", 422, "Request body is empty"),
        (b" \r\n\t ", 422, "Request body is empty"),
        (b'{"value": {"data": 1}', 400, "ends inside"),
    ],
)
def test_bad_records_get_v3_errors(gateway: Server, body: bytes, status: int, says: str) -> None:
    create_topic(gateway, "t", partitions=1)
    answer = httpx.post(
        records_url(gateway, "t"), content=body, headers={"Content-Type": "application/json"}
    )
    assert answer.status_code == status, answer.text
    assert answer.json()["error_code"] == status
    assert says in answer.json()["message"]


@pytest.mark.parametrize("chunks", [[], [b""], [b" ", b"\n"]])
def test_a_streamed_body_with_no_record_is_refused_whole(
    gateway: Server, chunks: list[bytes]
) -> None:
    """As kafka-rest's invalid payload: 422 for the request, not a 200 stream carrying it."""
    create_topic(gateway, "t", partitions=1)
    answer = httpx.post(
        records_url(gateway, "t"),
        content=iter(chunks),
        headers={"Content-Type": "application/json"},
    )
    assert answer.request.headers["transfer-encoding"] == "chunked"
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"] == "application/json"
    assert answer.json() == {
        "error_code": 422,
        "message": "Error: 42206 : Payload error. Request body is empty. Data is required.",
    }
    assert stored(gateway, "t", 0) == []


def test_an_empty_record_object_is_a_record(gateway: Server) -> None:
    """`{}`: every field is optional, so a record with no key, no value and no headers, as
    kafka-rest stores it."""
    create_topic(gateway, "t", partitions=1)
    answer = httpx.post(
        records_url(gateway, "t"), content=b"{}", headers={"Content-Type": "application/json"}
    )
    assert answer.status_code == 200, answer.text
    report = answer.json()
    assert (report["error_code"], report["offset"]) == (200, 0)
    assert "key" not in report and "value" not in report
    [record] = stored(gateway, "t", 0)
    assert (record["key"], record["value"]) == (None, None)


def test_bad_requests_get_v3_errors(gateway: Server) -> None:
    create_topic(gateway, "t", partitions=1)
    cid = cluster_id(gateway)
    cases = [
        ("/v3/clusters/other/topics/t/records", "application/json", 404),
        (f"/v3/clusters/{cid}/topics/missing/records", "application/json", 404),
        (f"/v3/clusters/{cid}/topics/__consumer_offsets/records", "application/json", 403),
        (f"/v3/clusters/{cid}/topics/t/records", "text/plain", 415),
        (f"/v3/clusters/{cid}/topics/t/records?acks=2", "application/json", 400),
    ]
    for path, media, status in cases:
        answer = httpx.post(
            f"{gateway.url}{path}", content=b'{"value":{"data":1}}', headers={"Content-Type": media}
        )
        assert (answer.status_code, answer.json()["error_code"]) == (status, status), path


def test_a_record_over_http2(gateway: Server) -> None:
    create_topic(gateway, "t", partitions=1)
    answer = subprocess.run(
        ["curl", "-sS", "--http2-prior-knowledge", "-w", "\n%{http_version} %{http_code}",
         "-H", "Content-Type: application/json", "--data-binary",
         '{"value": {"data": 1}} {"value": {"data": 2}}', records_url(gateway, "t")],
        capture_output=True, check=True, timeout=WAIT_S,
    )  # fmt: skip
    *reports, status = [line for line in answer.stdout.splitlines() if line]
    assert status == b"2 200"
    assert [orjson.loads(r)["offset"] for r in reports] == [0, 1]
