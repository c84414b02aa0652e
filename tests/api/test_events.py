"""Server-Sent Events (`GET /v1/topics/{topic}/events`): records as events, resumable cursors,
filters, heartbeats, gaps, a deleted topic, slow readers, read_committed streams, and bad
input."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import socket
from typing import Any

import orjson
import pytest
from aiohttp import ClientResponse

from engine.batch import RecordInput
from gateway.api import events
from gateway.http import sse
from tests.api.support import (
    RECORD_BATCH,
    Client,
    batch_bytes,
    create_topic,
    parked,
    problem,
    produce,
    produce_raw,
    wait_until,
)
from tests.api.test_transactions import begin, end, in_txn

SSE = {"Accept": "text/event-stream"}
Event = dict[str, str]


async def read_events(resp: ClientResponse, count: int, timeout: float = 10.0) -> list[Event]:
    """The next `count` events (comments and the retry line left out), as EventSource parses
    them: fields per event, `data` lines joined by newlines."""
    out: list[Event] = []
    async with asyncio.timeout(timeout):
        while len(out) < count:
            fields = await read_block(resp)
            if fields is None:
                break
            if "data" in fields:
                out.append(fields)
    return out


async def read_block(resp: ClientResponse) -> Event | None:
    """One block up to a blank line: its fields ({} for comments only); None at the end."""
    fields: dict[str, list[str]] = {}
    while True:
        line = await resp.content.readline()
        if not line:
            return None
        text = line.decode().rstrip("\n")
        if not text:
            return {name: "\n".join(values) for name, values in fields.items()}
        if text.startswith(":"):
            fields.setdefault("comment", []).append(text[1:].strip())
            continue
        name, _, value = text.partition(":")
        fields.setdefault(name, []).append(value.removeprefix(" "))


def data(event: Event) -> Any:
    return orjson.loads(event["data"])


async def stream(client: Client, topic: str = "t", **params: str | int) -> ClientResponse:
    resp = await client.get(
        f"/v1/topics/{topic}/events",
        params={k: str(v) for k, v in params.items()},
        headers=SSE,
    )
    assert resp.status == 200, await resp.text()
    assert resp.headers["Content-Type"] == "text/event-stream"
    assert resp.headers["Cache-Control"] == "no-cache"
    return resp


async def test_records_from_earliest_in_offset_order_per_partition(client: Client) -> None:
    await create_topic(client, partitions=2)
    for n in range(6):
        await produce(client, [{"key": f"k{n}", "value": {"n": n}}], partition=n % 2)
    resp = await stream(client, offset="earliest", max_events=6)
    got = await read_events(resp, 7)
    assert len(got) == 6  # the stream ended after max_events
    assert all(e["event"] == "record" for e in got)
    records = [data(e) for e in got]
    for p in (0, 1):
        mine = [r for r in records if r["partition"] == p]
        assert [r["offset"] for r in mine] == [0, 1, 2]
        assert [r["value"]["n"] for r in mine] == [p, p + 2, p + 4]
        assert all(r["topic"] == "t" and isinstance(r["timestamp"], int) for r in mine)
    last = {0: 0, 1: 0}
    for event, record in zip(got, records, strict=True):
        last[record["partition"]] = record["offset"] + 1
        assert event["id"] == f"0-{last[0]}.1-{last[1]}"


async def test_a_tail_gets_what_is_produced_after_it_opened(client: Client) -> None:
    await create_topic(client)
    await produce(client, [{"value": "old"}])
    before = parked(client)
    resp = await stream(client)  # offset=latest
    await wait_until(lambda: parked(client) > before)  # its partition reader waits for records
    await produce(client, [{"key": "a", "value": "new"}])
    [event] = await read_events(resp, 1)
    assert data(event)["value"] == "new" and data(event)["offset"] == 1
    assert event["id"] == "0-2"
    resp.close()


async def test_resume_from_the_last_event_id_or_a_cursor(client: Client) -> None:
    await create_topic(client, partitions=2)
    await produce(client, [{"key": f"k{n}", "value": n} for n in range(20)])
    first = await stream(client, offset="earliest", max_events=7)
    seen = await read_events(first, 7)
    cursor = seen[-1]["id"]
    rest = await client.get(
        "/v1/topics/t/events",
        params={"max_events": "13", "offset": "latest"},
        headers={**SSE, "Last-Event-ID": cursor},
    )
    resumed = await read_events(rest, 13)
    again = await stream(client, cursor=cursor, max_events=13)
    assert [e["data"] for e in await read_events(again, 13)] == [e["data"] for e in resumed]
    values = sorted(data(e)["value"] for e in seen + resumed)
    assert values == list(range(20))  # every record once: nothing skipped, nothing twice


async def test_filters_by_key_prefix_and_header_values(client: Client) -> None:
    await create_topic(client)
    await produce(
        client,
        [
            {"key": "eu-1", "value": 1, "headers": {"kind": "order"}},
            {"key": "us-2", "value": 2, "headers": {"kind": "order"}},
            {"key": "eu-3", "value": 3, "headers": {"kind": "refund"}},
            {"key": "eu-4", "value": 4, "headers": {"kind": "order", "v": "2"}},
            {"value": 5, "headers": {"kind": "order"}},
        ],
    )
    resp = await stream(client, offset="earliest", key_prefix="eu-", header="kind:order")
    got = await read_events(resp, 2)
    assert [data(e)["value"] for e in got] == [1, 4]
    assert got[-1]["id"] == "0-4"
    resp.close()
    both = await client.get(
        "/v1/topics/t/events",
        params=[("offset", "earliest"), ("header", "kind:order"), ("header", "v:2")],
        headers=SSE,
    )
    [only] = await read_events(both, 1)
    assert data(only)["value"] == 4
    both.close()


async def test_heartbeats_while_there_is_nothing_to_send(client: Client) -> None:
    await create_topic(client)
    resp = await stream(client, heartbeat_ms=100)
    assert await read_block(resp) == {"retry": str(sse.RETRY_MS)}
    assert await read_block(resp) == {"comment": "heartbeat"}
    assert await read_block(resp) == {"comment": "heartbeat"}
    resp.close()


async def test_a_position_below_the_log_start_is_a_gap_then_the_records(client: Client) -> None:
    await create_topic(client)
    await produce(client, [{"value": n} for n in range(5)])
    resp = await client.post("/v1/topics/t/partitions/0/delete-records", json={"before_offset": 3})
    assert resp.status == 200, await resp.text()
    got = await read_events(await stream(client, cursor="0-1", max_events=2), 3)
    assert got[0]["event"] == "gap"
    assert data(got[0]) == {"partition": 0, "from": 1, "to": 3}
    assert got[0]["id"] == "0-3"
    assert [data(e)["value"] for e in got[1:]] == [3, 4]


async def test_a_deleted_topic_ends_the_stream_with_a_problem_event(client: Client) -> None:
    await create_topic(client)
    before = parked(client)
    resp = await stream(client)
    await wait_until(lambda: parked(client) > before)
    assert (await client.delete("/v1/topics/t")).status == 204
    [event] = await read_events(resp, 1)
    assert event["event"] == "problem"
    assert data(event)["status"] == 404 and data(event)["code"] == "UNKNOWN_TOPIC"
    assert await read_block(resp) is None  # and the stream is over


async def test_json_with_line_breaks_and_binary_records_come_through(client: Client) -> None:
    await create_topic(client)
    body = b'{"records": [{"key": "k", "value": {\n"a":\r\n[1,\r2]}}]}'
    resp = await client.post(
        "/v1/topics/t/records", data=body, headers={"Content-Type": "application/json"}
    )
    assert resp.status == 200, await resp.text()
    raw = batch_bytes([RecordInput(b"\xff\x00", b"\x80bin", [("h", b"\xfe")])])
    status, _, _ = await produce_raw(client, raw, RECORD_BATCH, partition=0)
    assert status == 200
    got = await read_events(await stream(client, offset="earliest", max_events=2), 2)
    assert data(got[0])["value"] == {"a": [1, 2]}
    binary = data(got[1])
    assert base64.b64decode(binary["key"]) == b"\xff\x00"
    assert base64.b64decode(binary["value"]) == b"\x80bin"
    assert binary["key_encoding"] == binary["value_encoding"] == "base64"


async def test_idempotent_produce_headers_stay_internal(client: Client) -> None:
    await create_topic(client)
    await produce(client, [{"value": 1}], headers={"Idempotency-Key": "once"})
    [event] = await read_events(await stream(client, offset="earliest", max_events=1), 1)
    assert data(event)["headers"] == {}


async def test_a_client_that_takes_nothing_is_cut_off(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its stream holds one chunk at most, then ends, and the connection with it: the
    server's memory does not grow with what the client does not read."""
    monkeypatch.setattr(sse, "SLOW_READER_S", 0.5)
    await create_topic(client)
    for _ in range(4):  # more than the kernel's socket buffers hold
        await produce(client, [{"value": "x" * 60_000} for _ in range(50)])
    host, port = client.server.host, client.server.port
    others = set(client.server.handler.connections)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connecting: the window
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, port))
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(
        b"GET /v1/topics/t/events?offset=earliest HTTP/1.1\r\nHost: x\r\n"
        b"Accept: text/event-stream\r\n\r\n"
    )
    server = client.server.handler
    # The test client's own keep-alive connection may still be open (until its 15 s idle
    # timeout): follow this connection alone.
    await wait_until(lambda: len(set(server.connections) - others) == 1)
    [ours] = set(server.connections) - others
    await wait_until(lambda: ours not in server.connections, timeout=20)  # cut off, not read
    received = bytearray()
    with contextlib.suppress(ConnectionError):
        while chunk := await reader.read(1 << 20):
            received += chunk
    assert 0 < received.count(b"event: record\n") < 200
    writer.close()


@pytest.mark.parametrize(
    ("params", "headers", "status", "code"),
    [
        ({"cursor": "0-x"}, {}, 400, "INVALID_CURSOR"),
        ({"cursor": "0-1.0-2"}, {}, 400, "INVALID_CURSOR"),
        ({"cursor": "1-0"}, {}, 400, "INVALID_CURSOR"),
        ({"cursor": "0-" + "9" * 5000}, {}, 400, "INVALID_CURSOR"),
        ({"cursor": "0-9223372036854775808"}, {}, 400, "INVALID_CURSOR"),
        ({}, {"Last-Event-ID": "garbage"}, 400, "INVALID_CURSOR"),
        ({"partitions": "1"}, {}, 404, "UNKNOWN_PARTITION"),
        ({"partitions": "-1"}, {}, 404, "UNKNOWN_PARTITION"),
        ({"partitions": "a,b"}, {}, 400, "INVALID_PARAMETER"),
        ({"offset": "5"}, {}, 400, "INVALID_PARAMETER"),
        ({"timestamp": "soon"}, {}, 400, "INVALID_PARAMETER"),
        ({"heartbeat_ms": "0"}, {}, 400, "INVALID_PARAMETER"),
        ({"max_events": "-1"}, {}, 400, "INVALID_PARAMETER"),
        ({"header": "no-colon"}, {}, 400, "INVALID_PARAMETER"),
        ({"isolation": "serializable"}, {}, 400, "INVALID_PARAMETER"),
        ({}, {"Accept": "application/json"}, 406, "NOT_ACCEPTABLE"),
    ],
)
async def test_bad_requests_are_problems(
    client: Client, params: dict[str, str], headers: dict[str, str], status: int, code: str
) -> None:
    await create_topic(client)
    resp = await client.get("/v1/topics/t/events", params=params, headers={**SSE, **headers})
    await problem(resp, status, code)


async def test_too_many_header_filters_and_an_unknown_topic(client: Client) -> None:
    await create_topic(client)
    many = [("header", f"h{i}:v") for i in range(events.MAX_FILTER_HEADERS + 1)]
    await problem(
        await client.get("/v1/topics/t/events", params=many, headers=SSE), 400, "INVALID_PARAMETER"
    )
    await problem(await client.get("/v1/topics/nope/events", headers=SSE), 404, "UNKNOWN_TOPIC")


async def test_a_stream_from_a_timestamp(client: Client) -> None:
    await create_topic(client)
    await produce(client, [{"value": n, "timestamp": 1000 * (n + 1)} for n in range(4)])
    got = await read_events(await stream(client, timestamp=2500, max_events=2), 2)
    assert [data(e)["value"] for e in got] == [2, 3]


async def test_read_committed_waits_for_the_open_transaction_and_skips_aborted_ones(
    client: Client,
) -> None:
    await create_topic(client)
    epoch = (await begin(client))["producer_epoch"]
    await produce(client, [{"value": "gone"}], params=in_txn(epoch))  # offset 0, marker 1
    await end(client, "abort", epoch)
    epoch = (await begin(client))["producer_epoch"]
    await produce(client, [{"value": "kept"}], params=in_txn(epoch))  # offset 2
    await produce(client, [{"value": "plain"}])  # offset 3, past the last stable offset
    before = parked(client)
    resp = await stream(client, offset="earliest", isolation="read_committed", max_events=2)
    await wait_until(lambda: parked(client) > before)  # held at the open transaction
    await end(client, "commit", epoch)  # its marker at 4
    got = await read_events(resp, 2)
    assert [(data(e)["value"], data(e)["offset"], e["id"]) for e in got] == [
        ("kept", 2, "0-3"),
        ("plain", 3, "0-4"),
    ]
    uncommitted = await read_events(await stream(client, offset="earliest", max_events=3), 3)
    assert [data(e)["value"] for e in uncommitted] == ["gone", "kept", "plain"]  # the default
