"""The fast routes (gateway.api.fast_routes) on a real `sluice serve`: the plain produces they
take are answered exactly as the Application answers them, over HTTP/1.1 and HTTP/2; answers keep
the order of pipelined requests; keep-alive, idempotency, quotas and CORS behave as before.

The Application's answer to the same produce is obtained by sending it with `; charset=utf-8`
after its media type, which the fast routes leave to the Application and the produce ignores."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import DataReceived, InformationalResponseReceived, ResponseReceived, StreamEnded

from engine.batch import RecordInput, encode_batch
from tests.e2e.conftest import Server, start_server, until

WAIT_S = 30.0
FAST_TYPE = "application/json"
APP_TYPE = "application/json; charset=utf-8"  # the same produce, through the Application
NDJSON, RECORD_BATCH = "application/x-ndjson", "application/vnd.sluice.record-batch"
FAST_METRIC = re.compile(rb"^sluice_lane_requests_total (\S+)$", re.MULTILINE)


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for server in started:
        if server.process.poll() is None:
            assert server.stop() == 0


def launch(servers: list[Server], tmp_path: Path, *options: str) -> Server:
    base = tmp_path / f"gateway{len(servers)}"
    servers.append(start_server(base / "data", *options))
    return servers[-1]


def create_topic(server: Server, name: str = "t", partitions: int = 1, **configs: object) -> None:
    answer = httpx.post(
        f"{server.url}/v1/topics",
        json={"name": name, "partitions": partitions, "configs": configs},
        timeout=WAIT_S,
    )
    assert answer.status_code == 201, answer.text


def fast_served(server: Server) -> int:
    found = FAST_METRIC.search(httpx.get(f"{server.url}/metrics", timeout=WAIT_S).content)
    assert found is not None
    return int(float(found.group(1)))


def request(
    target: str, body: bytes, content_type: str = FAST_TYPE, headers: dict[str, str] | None = None
) -> bytes:
    """A POST; a Content-Type in `headers` replaces `content_type`'s media type (its
    parameters kept: `; charset=utf-8` sends it through the Application)."""
    extra = dict(headers or {})
    media = extra.pop("Content-Type", None)
    if media is not None:
        content_type = media + content_type[len(FAST_TYPE) :]
    lines = "".join(f"{name}: {value}\r\n" for name, value in extra.items())
    return (
        f"POST {target} HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\n{lines}"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


class Connection:
    """One keep-alive HTTP/1.1 connection that reads answers by their Content-Length."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, server: Server) -> Connection:
        return cls(*await asyncio.open_connection("127.0.0.1", server.port))

    async def answer(self) -> tuple[bytes, dict[str, str], bytes]:
        """The next answer: status line, headers (lower-case names), body."""
        head = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), WAIT_S)
        status, *lines = head[:-4].decode("latin-1").split("\r\n")
        headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        body = await self.reader.readexactly(int(headers["content-length"]))
        return status.encode(), headers, body

    async def exchange(self, data: bytes) -> tuple[bytes, dict[str, str], bytes]:
        self.writer.write(data)
        return await self.answer()

    def close(self) -> None:
        self.writer.close()


def comparable(answer: tuple[bytes, dict[str, str], bytes]) -> tuple[object, ...]:
    status, headers, body = answer
    return status, {k: v for k, v in headers.items() if k != "date"}, body


BINARY = bytes(encode_batch([RecordInput(b"k", b"v"), RecordInput(None, b"\xff")]))
# Requests the fast routes take (a produce media type, nothing a middleware acts on),
# good and bad: (target, body, extra headers).
TAKEN = [
    ("/v1/topics/t/records?acks=1", b'{"records":[{"value":"hello"}]}', {}),
    ("/v1/topics/t/records", b'{"records":[{"key":"k","value":{"a":1}},{"value":null}]}', {}),
    ("/v1/topics/t/records?acks=0", b'{"records":[{"value":"fire and forget"}]}', {}),
    ("/v1/topics/t/records?acks=all&timeout_ms=500", b'{"records":[{"value":1}]}', {}),
    ("/v1/topics/t/records?acks=-1", b'{"records":[{"value":"x","headers":{"h":"v"}}]}', {}),
    ("/v1/topics/t/partitions/1/records?acks=1", b'{"records":[{"value":"p1"}]}', {}),
    ("/v1/topics/t/records?key=k", b'{"records":[{"value":"k"}]}', {}),
    ("/v1/topics/t/records", b'{"records":[{"value":"once"}]}', {"Idempotency-Key": "k-1"}),
    ("/v1/topics/t/records", b'{"records":[{"value":"once"}]}', {"Idempotency-Key": "k-1"}),
    ("/v1/topics/t/records", b'{"records":[{"value":"twice"}]}', {"Idempotency-Key": "k-1"}),
    ("/v1/topics/t/records", b'{"records":[{"value":hello}]}', {}),  # malformed JSON
    ("/v1/topics/t/records", b'{"records":"x"}', {}),  # wrong type
    ("/v1/topics/t/records", b'{"records":[]}', {}),
    ("/v1/topics/t/records", b"", {}),
    ("/v1/topics/t/records", b'{"records":[{"value":"x","partition":7}]}', {}),
    ("/v1/topics/t/records", b'{"records":[{"value":"x","partition":-1}]}', {}),
    ("/v1/topics/t/records", b'{"records":[{"value":"x"}],"extra":1}', {}),
    ("/v1/topics/t/partitions/0/records", b'{"records":[{"value":"x","partition":1}]}', {}),
    ("/v1/topics/big/records", b'{"records":[{"value":"%s"}]}' % (b"x" * 2000), {}),
    ("/v1/topics/t/records?key=nd", b'{"a":1}\n"two"\n3\n', {"Content-Type": NDJSON}),
    ("/v1/topics/t/records", b'{"a":\n', {"Content-Type": NDJSON}),
    ("/v1/topics/t/records", BINARY, {"Content-Type": RECORD_BATCH}),
    ("/v1/topics/t/partitions/1/records?acks=0", BINARY, {"Content-Type": RECORD_BATCH}),
    ("/v1/topics/t/records", BINARY, {"Content-Type": RECORD_BATCH, "Idempotency-Key": "b"}),
    ("/v1/topics/t/records", BINARY[:-1] + b"\x00", {"Content-Type": RECORD_BATCH}),  # bad CRC
    ("/v1/topics/t/records", BINARY[:20], {"Content-Type": RECORD_BATCH}),  # truncated
]
# Requests the fast routes leave to the Application: the answers must be the Application's.
LEFT = [
    ("/v1/topics/t/records", b"text", {"Content-Type": "text/plain"}),  # 415
    ("/v1/topics/t/records?acks=2", b'{"records":[{"value":1}]}', {}),
    ("/v1/topics/t/records?timeout_ms=-1", b'{"records":[{"value":1}]}', {}),
    ("/v1/topics/t/records?other=1", b'{"records":[{"value":1}]}', {}),
    ("/v1/topics/t/records?acks=1&acks=0", b'{"records":[{"value":1}]}', {}),
    ("/v1/topics/t/partitions/9/records", b'{"records":[{"value":1}]}', {}),
    ("/v1/topics/t/partitions/x/records", b'{"records":[{"value":1}]}', {}),
    ("/v1/topics/__consumer_offsets/records", b'{"records":[{"value":1}]}', {}),
    ("/v1/topics/new-topic/records", b'{"records":[{"value":"auto-created"}]}', {}),
    ("/v1/topics/t/records", b'{"records":[{"value":1}]}', {"Idempotency-Key": ""}),
]


async def answered_alike(
    fast: Connection, app: Connection, requests: list[tuple[str, bytes, dict[str, str]]]
) -> None:
    """Each request through the fast routes (on `fast`) and through the Application (on `app`: the
    same media type with a parameter) gets the same answer, but for the Date header."""
    for target, body, headers in requests:
        through_fast = await fast.exchange(request(target, body, FAST_TYPE, headers))
        through_app = await app.exchange(request(target, body, APP_TYPE, headers))
        assert comparable(through_fast) == comparable(through_app), (target, body)


async def test_the_fast_routes_answer_exactly_as_the_application(
    servers: list[Server], tmp_path: Path
) -> None:
    """The same requests to two fresh gateways, one through the fast routes and one through the
    Application, get the same answers (but for the Date header), byte for byte."""
    fast, app = launch(servers, tmp_path), launch(servers, tmp_path)
    for server in (fast, app):
        create_topic(server, partitions=2)
        create_topic(server, "big", **{"max.message.bytes": 1000})
    before = fast_served(fast)
    # Again, each target now read before (the fast routes remember what a target says), on new
    # connections: a request right after one the Application answered may find aiohttp's loop
    # not yet waiting again, and go through it (docs/gateway.md, "The fast routes").
    for requests in (TAKEN + LEFT, TAKEN[:2] + LEFT):
        fast_conn, app_conn = await Connection.open(fast), await Connection.open(app)
        try:
            await answered_alike(fast_conn, app_conn, requests)
        finally:
            fast_conn.close()
            app_conn.close()
    assert fast_served(fast) - before == len(TAKEN) + 2
    assert fast_served(app) == 0


BULK_LIMIT = 256 * 1024  # --max-request-bytes of the bulk test's two gateways
BULK_BINARY = bytes(encode_batch([RecordInput(None, b'"%098d"' % i) for i in range(1000)]))
BULK_JSON = b'{"records":[%s]}' % b",".join([b'{"value":"%s"}' % (b"y" * 100)] * 1000)


async def test_bulk_produces_are_answered_exactly_as_the_application(
    servers: list[Server], tmp_path: Path
) -> None:
    """Bodies of 1000 records (over 100 KB) are the fast routes' as small ones are, answered alike;
    one over --max-request-bytes gets the Application's 413 through both."""
    fast, app = (launch(servers, tmp_path, "--max-request-bytes", str(BULK_LIMIT)) for _ in "ab")
    for server in (fast, app):
        create_topic(server, partitions=2)
    too_large = BULK_JSON[:-1] + b" " * (BULK_LIMIT - len(BULK_JSON) + 1) + b"}"
    batches = {"Content-Type": RECORD_BATCH}
    fast_conn, app_conn = await Connection.open(fast), await Connection.open(app)
    try:
        await answered_alike(fast_conn, app_conn, [
            ("/v1/topics/t/partitions/0/records?acks=1", BULK_BINARY, batches),
            ("/v1/topics/t/partitions/1/records", BULK_JSON, {}),
            ("/v1/topics/t/partitions/0/records", BULK_BINARY[:-1] + b"\x00", batches),  # CRC
            ("/v1/topics/t/partitions/1/records", too_large, {}),  # 413, and the connection closes
        ])  # fmt: skip
    finally:
        fast_conn.close()
        app_conn.close()
    fetch = "/v1/topics/t/partitions/0/records?offset=0&max_records=1000"
    fast_records, app_records = (
        httpx.get(server.url + fetch, timeout=WAIT_S).json()["records"] for server in (fast, app)
    )
    assert fast_records == app_records
    assert [record["value"] for record in fast_records] == [f"{i:098d}" for i in range(1000)]


def _in_txn(epoch: int, name: str = "tx") -> str:
    return f"/v1/topics/t/records?transactional_id={name}&producer_epoch={epoch}"


def _transaction_call(server: Server, action: str, epoch: int | None = None) -> int:
    """Begin (action ""), commit or abort transaction `tx`; the answer's producer epoch."""
    answer = httpx.post(
        f"{server.url}/v1/transactions/tx{action}",
        json={} if epoch is None else {"producer_epoch": epoch},
        timeout=WAIT_S,
    )
    assert answer.status_code in (200, 201), answer.text
    epoch_now: int = answer.json()["producer_epoch"]
    return epoch_now


async def test_transactional_produces_are_answered_exactly_as_the_application(
    servers: list[Server], tmp_path: Path
) -> None:
    """Produces inside a transaction this node coordinates are the fast routes', answered as
    the Application answers them: written, a zombie's epoch fenced, a transaction no longer
    open, an id never begun; one with an Idempotency-Key is left to the Application."""
    fast, app = launch(servers, tmp_path), launch(servers, tmp_path)
    for server in (fast, app):
        create_topic(server, partitions=2)
    records = b'{"records":[{"value":"a","partition":0},{"value":"b","partition":1}]}'
    keyed = {"Idempotency-Key": "k"}
    fast_conn, app_conn = await Connection.open(fast), await Connection.open(app)
    taken = 0  # by the fast routes, counted around the produces only (the begins and
    # commits between may be taken too)

    async def alike(requests: list[tuple[str, bytes, dict[str, str]]]) -> None:
        nonlocal taken
        before = fast_served(fast)
        await answered_alike(fast_conn, app_conn, requests)
        taken += fast_served(fast) - before

    try:
        old = {_transaction_call(server, "") for server in (fast, app)}.pop()
        await alike([(_in_txn(old), records, {})])
        new = {_transaction_call(server, "") for server in (fast, app)}.pop()
        await alike([
            (_in_txn(old), records, {}),  # fenced
            (_in_txn(new), records, {}),
            (_in_txn(new), records, keyed),  # left: the route refuses the key
        ])  # fmt: skip
        for server in (fast, app):
            _transaction_call(server, "/commit", new)
        await alike([
            (_in_txn(new), records, {}),  # not open
            (_in_txn(0, "nobody"), records, {}),
        ])  # fmt: skip
    finally:
        fast_conn.close()
        app_conn.close()
    assert taken == 5
    fetch = "/v1/topics/t/partitions/1/records?offset=0&isolation=read_committed"
    fast_records, app_records = (
        httpx.get(server.url + fetch, timeout=WAIT_S).json()["records"] for server in (fast, app)
    )
    assert [r["value"] for r in fast_records] == [r["value"] for r in app_records] == ["b"]


def _call(action: str, doc: object) -> tuple[str, bytes, dict[str, str]]:
    """A transaction call of `tx` (action "", "/commit" or "/abort") with a JSON body."""
    body = doc if isinstance(doc, bytes) else orjson.dumps(doc)
    return f"/v1/transactions/tx{action}", body, {}


def _without_times(answer: tuple[bytes, dict[str, str], bytes]) -> tuple[object, ...]:
    """An answer as `comparable` has it, a transaction's clock readings left out (each
    server's own)."""
    status, headers, body = comparable(answer)
    assert isinstance(headers, dict) and isinstance(body, bytes)
    doc = orjson.loads(body)
    for name in ("started_ms", "updated_ms", "expires_ms"):
        if name in doc:
            doc[name] = type(doc[name]).__name__
    return status, {k: v for k, v in headers.items() if k != "content-length"}, doc


async def test_transaction_calls_are_answered_exactly_as_the_application(
    servers: list[Server], tmp_path: Path
) -> None:
    """A producer's begin, commit and abort of a transaction this node coordinates are the
    fast routes', answered as the Application answers them: begun, committed, a commit
    retried, an abort after the commit, a fenced epoch, an id never begun. A bad body, an
    operator's abort and a query are left to the Application, which says why."""
    fast, app = launch(servers, tmp_path), launch(servers, tmp_path)
    for server in (fast, app):
        create_topic(server)
        _transaction_call(server, "")  # the state topic made: the id is coordinated here
    fast_conn, app_conn = await Connection.open(fast), await Connection.open(app)

    async def alike(calls: list[tuple[str, bytes, dict[str, str]]]) -> list[Any]:
        docs = []
        for target, body, headers in calls:
            through_fast = await fast_conn.exchange(request(target, body, FAST_TYPE, headers))
            through_app = await app_conn.exchange(request(target, body, APP_TYPE, headers))
            assert _without_times(through_fast) == _without_times(through_app), (target, body)
            docs.append(_without_times(through_fast)[2])
        return docs

    try:
        before = fast_served(fast)
        begun = await alike([_call("", {"timeout_ms": 5000})])
        epoch = begun[0]["producer_epoch"]
        assert (begun[0]["state"], begun[0]["timeout_ms"]) == ("Ongoing", 5000)
        ended = await alike([
            _call("/commit", {"producer_epoch": epoch}),
            _call("/commit", {"producer_epoch": epoch}),  # a retry answers as the first
            _call("/abort", {"producer_epoch": epoch}),  # after the commit: refused
            _call("", {}),
            _call("/commit", {"producer_epoch": epoch}),  # fenced by the begin
            _call("/abort", {"producer_epoch": epoch + 1}),
            ("/v1/transactions/nobody/commit", b'{"producer_epoch":0}', {}),
        ])  # fmt: skip
        assert fast_served(fast) - before == 8
        assert [doc.get("state", doc.get("code")) for doc in ended] == [
            "CompleteCommit",
            "CompleteCommit",
            "INVALID_TXN_STATE",
            "Ongoing",
            "PRODUCER_FENCED",
            "CompleteAbort",
            "UNKNOWN_TRANSACTIONAL_ID",
        ]
        left = fast_served(fast)
        refused = await alike([
            _call("", b'{"timeout_ms":'),  # malformed JSON
            _call("", {"timeout_ms": "soon"}),
            _call("", {"timeout_ms": 0}),
            _call("", {"timeout_ms": 1, "other": 1}),
            _call("", []),
            _call("/commit", {}),
            _call("/commit", {"producer_epoch": 2**15}),
            ("/v1/transactions/tx/commit?x=1", b'{"producer_epoch":0}', {}),
            ("/v1/transactions/" + "x" * 250, b"{}", {}),
        ])  # fmt: skip
        assert [doc["code"] for doc in refused] == [
            "INVALID_JSON",
            "INVALID_PARAMETER",
            "INVALID_PARAMETER",
            "INVALID_REQUEST",
            "INVALID_JSON",
            "INVALID_PARAMETER",
            "INVALID_PARAMETER",
            "PRODUCER_FENCED",  # the route reads no query: as without it
            "INVALID_TRANSACTIONAL_ID",
        ]
        assert fast_served(fast) == left
    finally:
        fast_conn.close()
        app_conn.close()


FORWARDED = {"Content-Type": RECORD_BATCH, "Sluice-Forwarded-By": "7"}
APPEND = "/internal/v1/partitions/t/{}/append"
# Internal appends (another node's front forwarding batches it built) the fast routes take.
TAKEN_APPENDS = [
    (APPEND.format(0) + "?acks=1&timeout_ms=500", BINARY, FORWARDED),
    (APPEND.format(1), BINARY, FORWARDED),
    (APPEND.format(0) + "?acks=0", BINARY, FORWARDED),
    (APPEND.format(0) + "?acks=all", BINARY + BINARY, FORWARDED),
    (APPEND.format(0) + "?acks=-1", BINARY, FORWARDED),  # Kafka's spelling of all
    (APPEND.format(0), BINARY[:-1] + b"\x00", FORWARDED),  # bad CRC
    (APPEND.format(0), BINARY[:20], FORWARDED),  # truncated
    (APPEND.format(0), b"", FORWARDED),
]
# ... and those it leaves to the Application.
LEFT_APPENDS = [
    (APPEND.format(0), BINARY, {"Content-Type": RECORD_BATCH}),  # not forwarded: the route may
    (APPEND.format(0) + "?acks=2", BINARY, FORWARDED),
    (APPEND.format(0) + "?timeout_ms=-1", BINARY, FORWARDED),
    (APPEND.format(0) + "?key=k", BINARY, FORWARDED),
    (APPEND.format(9), BINARY, FORWARDED),
    (APPEND.format("x"), BINARY, FORWARDED),
    ("/internal/v1/partitions/nope/0/append", BINARY, FORWARDED),
    ("/internal/v1/partitions/__consumer_offsets/0/append", BINARY, FORWARDED),
    (APPEND.format(0), BINARY, {**FORWARDED, "Content-Type": "application/json"}),  # 415
    # (partition 1: its records carry each server's clock; partition 0 is compared below)
    (
        "/v1/topics/t/partitions/1/records",
        b'{"records":[{"value":1}]}',
        {"Sluice-Forwarded-By": "7"},
    ),
]


async def test_the_fast_routes_append_for_other_nodes_exactly_as_the_application(
    servers: list[Server], tmp_path: Path
) -> None:
    """The internal append, which a front node sends a partition's leader (and one worker its
    sibling), answers alike through the fast routes and through the Application, byte for byte but
    for the Date header, and the records land alike."""
    fast, app = launch(servers, tmp_path), launch(servers, tmp_path)
    for server in (fast, app):
        create_topic(server, partitions=2)
    before = fast_served(fast)
    fast_conn, app_conn = await Connection.open(fast), await Connection.open(app)
    try:
        await answered_alike(fast_conn, app_conn, TAKEN_APPENDS + LEFT_APPENDS)
    finally:
        fast_conn.close()
        app_conn.close()
    fetch = b"GET /v1/topics/t/partitions/0/records?offset=0 HTTP/1.1\r\nHost: x\r\n\r\n"
    fast_conn, app_conn = await Connection.open(fast), await Connection.open(app)  # as above
    try:
        assert (await fast_conn.exchange(fetch))[2] == (await app_conn.exchange(fetch))[2]
    finally:
        fast_conn.close()
        app_conn.close()
    assert fast_served(fast) - before == len(TAKEN_APPENDS) + 1
    assert fast_served(app) == 1  # the fetch


async def test_an_idempotent_retry_is_recognised_across_the_fast_routes_and_the_application(
    servers: list[Server], tmp_path: Path
) -> None:
    server = launch(servers, tmp_path)
    create_topic(server)
    body = b'{"records":[{"value":"a"},{"value":"b"}]}'
    conn = await Connection.open(server)
    try:
        first = await conn.exchange(
            request("/v1/topics/t/records", body, FAST_TYPE, {"Idempotency-Key": "x"})
        )
        retry = await conn.exchange(
            request("/v1/topics/t/records", body, APP_TYPE, {"Idempotency-Key": "x"})
        )
        other = await conn.exchange(
            request("/v1/topics/t/records", body, APP_TYPE, {"Idempotency-Key": "y"})
        )
        again = await conn.exchange(
            request("/v1/topics/t/records", body, FAST_TYPE, {"Idempotency-Key": "y"})
        )
    finally:
        conn.close()
    assert first[2] == retry[2] == b'{"results":[{"partition":0,"base_offset":0,"count":2}]}'
    assert other[2] == again[2] == b'{"results":[{"partition":0,"base_offset":2,"count":2}]}'


async def test_pipelined_requests_are_answered_in_their_order(
    servers: list[Server], tmp_path: Path
) -> None:
    """Fast-route produces, Application produces and other requests sent in one write: each answer
    comes in its request's place, and the records in the order of the requests."""
    server = launch(servers, tmp_path)
    create_topic(server)

    def produce(value: str, content_type: str) -> bytes:
        return request(
            "/v1/topics/t/records?acks=1",
            b'{"records":[{"value":"%s"}]}' % value.encode(),
            content_type,
        )

    health = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    fetch = b"GET /v1/topics/t/partitions/0/records?offset=0 HTTP/1.1\r\nHost: x\r\n\r\n"
    sent = [
        produce("a", FAST_TYPE),
        health,
        produce("b", FAST_TYPE),
        produce("c", APP_TYPE),
        produce("d", FAST_TYPE),
        produce("e", FAST_TYPE),
        fetch,
    ]
    conn = await Connection.open(server)
    try:
        conn.writer.write(b"".join(sent))
        answers = [await conn.answer() for _ in sent]
    finally:
        conn.close()
    bases = [
        orjson.loads(body)["results"][0]["base_offset"]
        for _, _, body in answers
        if b"results" in body
    ]
    assert bases == [0, 1, 2, 3, 4]
    assert answers[1][2] == b'{"status":"ok"}'
    records = orjson.loads(answers[-1][2])["records"]
    assert [r["value"] for r in records] == ["a", "b", "c", "d", "e"]


async def test_thousands_of_pipelined_produces_are_all_answered_in_order(
    servers: list[Server], tmp_path: Path
) -> None:
    """More pipelined requests than aiohttp queues: its parser stops, reading pauses, and as
    the fast routes drain the queue both resume; every request is answered once, in order."""
    server = launch(servers, tmp_path)
    create_topic(server)
    one = request("/v1/topics/t/records?acks=1", b'{"records":[{"value":"x"}]}')
    conn = await Connection.open(server)
    try:
        conn.writer.write(one * 3000)
        answers = [await conn.answer() for _ in range(3000)]
    finally:
        conn.close()
    offsets = [orjson.loads(body)["results"][0]["base_offset"] for _, _, body in answers]
    assert offsets == list(range(3000))
    assert fast_served(server) == 3000


def one_record(value: str, content_type: str = FAST_TYPE) -> bytes:
    """A one-record produce; its head is the same for every value of one length."""
    body = b'{"records":[{"value":"%s"}]}' % value.encode()
    return request("/v1/topics/t/records?acks=1", body, content_type)


def offsets_of(answers: list[tuple[bytes, dict[str, str], bytes]]) -> list[int]:
    return [orjson.loads(body)["results"][0]["base_offset"] for _, _, body in answers]


async def test_a_head_the_fast_routes_took_is_served_again_without_the_parser(
    servers: list[Server], tmp_path: Path
) -> None:
    """A produce whose head (request line and headers, byte for byte) the fast routes took before is
    served from that head's parse: again on its connection, on another one, pipelined, split
    over several reads, with a body the produce refuses; the Application answers a request
    after it that the fast routes leave, and a known head the fast routes no longer take, in
    its place."""
    fast, app = launch(servers, tmp_path), launch(servers, tmp_path)
    for server in (fast, app):
        create_topic(server)
    target = "/v1/topics/t/records?acks=1"
    good, refused = b'{"records":[{"value":"a"}]}', b'{"records":[{"value":"b"]]}'
    assert len(good) == len(refused)  # one head for both
    fast_conn, app_conn = await Connection.open(fast), await Connection.open(app)
    try:
        await answered_alike(fast_conn, app_conn, [(target, good, {})] * 3)
        await answered_alike(fast_conn, app_conn, [(target, refused, {}), (target, good, {})])
        served = fast_served(fast)
        health = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        sent = [one_record(v) for v in "cd"] + [health] + [one_record(v) for v in "ef"]
        fast_conn.writer.write(b"".join(sent))
        answers = [await fast_conn.answer() for _ in sent]
        assert answers[2][2] == b'{"status":"ok"}'
        assert offsets_of(answers[:2] + answers[3:]) == [4, 5, 6, 7]
    finally:
        fast_conn.close()
        app_conn.close()
    assert fast_served(fast) - served == 2  # e and f queue behind /healthz in aiohttp's loop
    burst = await Connection.open(fast)  # a known head on its first request, then 1,000 more
    try:
        assert offsets_of([await burst.exchange(one_record("i"))]) == [8]
        burst.writer.write(one_record("j") * 1000)
        assert offsets_of([await burst.answer() for _ in range(1000)]) == list(range(9, 1009))
    finally:
        burst.close()
    split = await Connection.open(fast)
    before_split = fast_served(fast)
    try:
        # Cut in the request line's first bytes (which may yet begin a produce), in the head or
        # in the body, the fast routes serve it once it is whole.
        for n, at in enumerate((3, 20, len(one_record("g")) - 5)):
            whole = one_record("g")
            split.writer.write(whole[:at])
            await split.writer.drain()
            await asyncio.sleep(0.05)  # the client's pace: the rest in a later segment
            split.writer.write(whole[at:])
            assert offsets_of([await split.answer()]) == [1009 + n]
    finally:
        split.close()
    assert fast_served(fast) - before_split == 3
    served = fast_served(fast)
    for server in (fast, app):  # gone: the known head's produce is the Application's again
        assert httpx.delete(f"{server.url}/v1/topics/t", timeout=WAIT_S).status_code == 204
    fast_conn, app_conn = await Connection.open(fast), await Connection.open(app)
    try:
        await answered_alike(fast_conn, app_conn, [(target, good, {})] * 2)
        status, _, body = await fast_conn.exchange(one_record("h"))
    finally:
        fast_conn.close()
        app_conn.close()
    assert status.split()[1] == b"404" and orjson.loads(body)["code"] == "UNKNOWN_TOPIC"
    assert fast_served(fast) == served


async def test_bodies_arriving_in_pieces_are_served_whole_by_the_fast_routes(
    servers: list[Server], tmp_path: Path
) -> None:
    """A produce whose body comes in several reads is served by the fast routes once it is
    whole, on a new head and on a known one; a body slower than the header timeout, or one
    larger than a body's reader buffers (it pauses reading), is left to the Application, which
    reads the rest; the connection goes on either way."""
    server = launch(servers, tmp_path, "--header-read-timeout", "1")
    create_topic(server)
    body = orjson.dumps({"records": [{"value": "v" * 100} for _ in range(1000)]})
    bulk = request("/v1/topics/t/records", body)
    conn = await Connection.open(server)
    try:
        offset = 0
        before = fast_served(server)
        for cut in (len(bulk) - len(body) // 2, len(bulk) - 1):
            for piece in (bulk[:cut], bulk[cut:]):
                conn.writer.write(piece)
                await conn.writer.drain()
                await asyncio.sleep(0.05)  # the client's pace: the rest in a later segment
            assert offsets_of([await conn.answer()]) == [offset]
            offset += 1000
        assert fast_served(server) - before == 2
        before = fast_served(server)
        conn.writer.write(bulk[:-10])
        await asyncio.sleep(3)  # a client slower than the header timeout (1 s)
        conn.writer.write(bulk[-10:])
        assert offsets_of([await conn.answer()]) == [offset]
        offset += 1000
        assert fast_served(server) == before
        large = request(
            "/v1/topics/t/records",
            orjson.dumps({"records": [{"value": "w" * 100} for _ in range(1800)]}),
        )
        assert 128 * 1024 < len(large) < 256 * 1024
        for piece in (large[:1000], large[1000:]):
            conn.writer.write(piece)
            await conn.writer.drain()
            await asyncio.sleep(0.05)
        assert offsets_of([await conn.answer()]) == [offset]
        assert offsets_of([await conn.exchange(bulk)]) == [offset + 1800]
    finally:
        conn.close()


async def test_a_client_that_expects_100_continue_is_asked_for_its_body_at_once(
    servers: list[Server], tmp_path: Path
) -> None:
    """A produce head with `Expect: 100-continue` and no body yet is not waited on by the fast
    routes (its client would wait for them in turn until the header timeout): aiohttp's loop
    answers 100 Continue at once, then the produce."""
    server = launch(servers, tmp_path, "--header-read-timeout", "120")
    create_topic(server)
    body = b'{"records":[{"value":1}]}'
    head, _, _ = request(
        "/v1/topics/t/records", body, headers={"Expect": "100-continue"}
    ).partition(b"\r\n\r\n")
    conn = await Connection.open(server)
    try:
        conn.writer.write(head + b"\r\n\r\n")
        interim = await asyncio.wait_for(conn.reader.readuntil(b"\r\n\r\n"), WAIT_S)
        assert interim.startswith(b"HTTP/1.1 100 Continue"), interim
        conn.writer.write(body)
        assert offsets_of([await conn.answer()]) == [0]
    finally:
        conn.close()


async def test_requests_held_back_behind_a_long_poll_are_all_answered_in_order(
    servers: list[Server], tmp_path: Path
) -> None:
    """Produces pipelined behind a parked long-poll wait for it, past the bytes a connection
    holds back from aiohttp's parser (which then takes them and pauses reading): once a produce
    on another connection ends the long-poll, each is answered, in order."""
    server = launch(servers, tmp_path)
    create_topic(server)
    conn, waking = await Connection.open(server), await Connection.open(server)
    try:
        assert offsets_of([await conn.exchange(one_record("a"))]) == [0]
        conn.writer.write(LONG_POLL)
        until(lambda: b"sluice_parked_fetches 1.0" in httpx.get(f"{server.url}/metrics").content,
              "the long-poll to park")  # fmt: skip
        held = [one_record("x")] * (2 * 256 * 1024 // len(one_record("x")))
        conn.writer.write(b"".join(held))
        assert offsets_of([await waking.exchange(one_record("w"))]) == [1]
        status, _, body = await conn.answer()
        assert status.split()[1] == b"200"
        assert [r["value"] for r in orjson.loads(body)["records"]] == ["w"]
        answers = [await conn.answer() for _ in held]
    finally:
        conn.close()
        waking.close()
    assert offsets_of(answers) == list(range(2, 2 + len(held)))


async def test_a_connection_idle_after_a_known_head_is_kept_alive(
    servers: list[Server], tmp_path: Path
) -> None:
    """No header deadline runs while nothing of a next request has come: a keep-alive
    connection idle past --header-read-timeout after a known head's answer gets no 408."""
    server = launch(servers, tmp_path, "--header-read-timeout", "0.5", "--keepalive-timeout", "30")
    create_topic(server)
    conn = await Connection.open(server)
    try:
        for offset in range(2):  # the second is the known head's
            assert offsets_of([await conn.exchange(one_record("a"))]) == [offset]
        await asyncio.sleep(1.0)  # the client's pace: idle past the header deadline
        assert offsets_of([await conn.exchange(one_record("b"))]) == [2]
    finally:
        conn.close()


async def test_a_head_completed_behind_a_long_poll_is_not_timed_out(
    servers: list[Server], tmp_path: Path
) -> None:
    """A produce pipelined behind a long-poll that outlasts --header-read-timeout, its head
    in two segments: the head came whole in time, so it is answered after the long-poll."""
    server = launch(servers, tmp_path, "--header-read-timeout", "1")
    create_topic(server)
    conn = await Connection.open(server)
    try:
        assert offsets_of([await conn.exchange(one_record("a"))]) == [0]
        conn.writer.write(LONG_POLL.replace(b"timeout_ms=30000", b"timeout_ms=2500"))
        until(lambda: b"sluice_parked_fetches 1.0" in httpx.get(f"{server.url}/metrics").content,
              "the long-poll to park")  # fmt: skip
        pipelined = one_record("b")
        conn.writer.write(pipelined[:30])
        await conn.writer.drain()
        await asyncio.sleep(0.2)  # the client's pace: the rest of the head in a later segment
        conn.writer.write(pipelined[30:])
        status, _, body = await conn.answer()  # the long-poll, empty at its timeout
        assert status.split()[1] == b"200" and orjson.loads(body)["records"] == []
        assert offsets_of([await conn.answer()]) == [1]
    finally:
        conn.close()


async def test_bytes_that_begin_no_fast_request_get_aiohttps_answer_at_once(
    servers: list[Server], tmp_path: Path
) -> None:
    """Only what may begin a produce or a fetch is held back: a malformed request line gets
    aiohttp's 400 at once, not the header deadline's 408, on a fresh connection as after a
    fast answer."""
    server = launch(servers, tmp_path, "--header-read-timeout", "20")
    create_topic(server)
    for served_first in (False, True):
        conn = await Connection.open(server)
        try:
            if served_first:
                assert offsets_of([await conn.exchange(one_record("a"))]) == [0]
            conn.writer.write(b"G\x01T / HTTP/1.1\r\nHost: x\r\n")
            status, headers, body = await conn.answer()
        finally:
            conn.close()
        assert status.split()[1] == b"400", body
        assert headers["content-type"] == "application/problem+json"


async def test_turn_answers_a_client_does_not_read_all_arrive_in_order(
    servers: list[Server], tmp_path: Path
) -> None:
    """Large fetch answers pipelined by a client that reads none of them for a while: the fast
    routes wait for the socket to drain before the next request (as aiohttp's writer does), and
    every answer arrives, in order, once the client reads."""
    server = launch(servers, tmp_path)
    create_topic(server)
    value = "v" * 1000
    for _ in range(16):
        answer = httpx.post(
            f"{server.url}/v1/topics/t/partitions/0/records",
            json={"records": [{"value": value}] * 50},
            timeout=WAIT_S,
        )
        assert answer.status_code == 200, answer.text
    fetch = (
        b"GET /v1/topics/t/partitions/0/records?offset=0&max_records=800&timeout_ms=0 "
        b"HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    conn = await Connection.open(server)
    try:
        conn.writer.write(fetch * 40)
        await conn.writer.drain()
        answers = [await conn.answer() for _ in range(40)]
    finally:
        conn.close()
    assert {status.split()[1] for status, _, _ in answers} == {b"200"}
    assert {headers["sluice-next-offset"] for _, headers, _ in answers} == {"800"}
    assert len({body for _, _, body in answers}) == 1 and len(answers[0][2]) > 800_000


async def test_a_head_left_unfinished_after_a_fast_answer_times_out(
    servers: list[Server], tmp_path: Path
) -> None:
    """The header deadline holds on a connection the fast routes have served: a head that stops
    arriving gets 408 and the connection closes."""
    server = launch(servers, tmp_path, "--header-read-timeout", "1")
    create_topic(server)
    conn = await Connection.open(server)
    try:
        assert offsets_of([await conn.exchange(one_record("a"))]) == [0]
        conn.writer.write(one_record("b")[:30])
        status, _, body = await conn.answer()
        assert status.split()[1] == b"408", body
        assert await asyncio.wait_for(conn.reader.read(), WAIT_S) == b""
    finally:
        conn.close()


async def produce_one_by_one(conn: Connection, count: int) -> None:
    """`count` one-record produces the fast routes take, each awaited; offsets from 0."""
    for offset in range(count):
        _, _, body = await conn.exchange(
            request("/v1/topics/t/records", b'{"records":[{"value":1}]}')
        )
        assert orjson.loads(body)["results"][0]["base_offset"] == offset


async def test_a_connection_the_fast_routes_serve_stays_alive_until_idle(
    servers: list[Server], tmp_path: Path
) -> None:
    server = launch(servers, tmp_path, "--keepalive-timeout", "0.5")
    create_topic(server)
    conn = await Connection.open(server)
    try:
        await produce_one_by_one(conn, 5)
        assert await asyncio.wait_for(conn.reader.read(), WAIT_S) == b""  # idle: closed
    finally:
        conn.close()
    assert fast_served(server) == 5


async def test_the_application_serves_a_connection_after_the_fast_served_it_alone(
    servers: list[Server], tmp_path: Path
) -> None:
    """aiohttp's request loop waits while the fast routes serve a connection's first requests, one
    after another; the first request the fast routes leave must still find that loop running."""
    server = launch(servers, tmp_path)
    create_topic(server)
    conn = await Connection.open(server)
    try:
        await produce_one_by_one(conn, 3)
        for _ in range(2):
            status, _, body = await conn.exchange(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert (status, body) == (b"HTTP/1.1 200 OK", b'{"status":"ok"}')
        _, _, body = await conn.exchange(
            request("/v1/topics/t/records", b'{"records":[{"value":1}]}', APP_TYPE)
        )
        assert orjson.loads(body)["results"][0]["base_offset"] == 3
    finally:
        conn.close()
    assert fast_served(server) == 3


async def h2_exchange(
    server: Server, requests: list[tuple[bytes, bytes, bytes]]
) -> list[tuple[dict[bytes, bytes], bytes]]:
    """(method, path, body) requests on as many streams of one h2c connection, sent in one
    write; each stream's answer headers and body, in the requests' order."""
    client = H2Connection(H2Configuration(client_side=True, header_encoding=None))
    client.initiate_connection()
    streams = []
    for method, path, body in requests:
        stream_id = client.get_next_available_stream_id()
        headers = [(b":method", method), (b":scheme", b"http"), (b":authority", b"x"),
                   (b":path", path)]  # fmt: skip
        if body:
            headers += [(b"content-type", b"application/json"),
                        (b"content-length", b"%d" % len(body))]  # fmt: skip
        client.send_headers(stream_id, headers, end_stream=not body)
        if body:
            client.send_data(stream_id, body, end_stream=True)
        streams.append(stream_id)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(client.data_to_send())
        heads, bodies = await h2_answers(client, reader, writer, set(streams))
    finally:
        writer.close()
    return [(heads[s][-1], bodies[s]) for s in streams]


async def h2_answers(
    client: H2Connection,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    streams: set[int],
    on_informational: Callable[[int], None] | None = None,
) -> tuple[dict[int, list[dict[bytes, bytes]]], dict[int, bytes]]:
    """Read until each of `streams` has ended: every header block each got (an informational
    one first, `on_informational` called for it) and its body, acknowledged as it comes."""
    heads: dict[int, list[dict[bytes, bytes]]] = {s: [] for s in streams}
    bodies = {s: b"" for s in streams}
    ended: set[int] = set()
    while ended != streams:
        data = await asyncio.wait_for(reader.read(65536), WAIT_S)
        assert data, "the server closed the connection"
        for event in client.receive_data(data):
            if isinstance(event, InformationalResponseReceived | ResponseReceived):
                heads[event.stream_id].append(dict(event.headers))
                if isinstance(event, InformationalResponseReceived) and on_informational:
                    on_informational(event.stream_id)
            elif isinstance(event, DataReceived):
                bodies[event.stream_id] += event.data
                client.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, StreamEnded):
                ended.add(event.stream_id)
        writer.write(client.data_to_send())
    return heads, bodies


async def test_http2_streams_take_the_fast_routes(servers: list[Server], tmp_path: Path) -> None:
    """Twenty produces on twenty streams of one h2c connection, sent in one write, each
    answered with its own offset; then a fetch of them on another stream."""
    server = launch(servers, tmp_path)
    create_topic(server)
    produces = [(b"POST", b"/v1/topics/t/records?acks=1", b'{"records":[{"value":"h2"}]}')] * 20
    answers = await h2_exchange(server, produces)
    assert {headers[b":status"] for headers, _ in answers} == {b"200"}
    assert {headers[b"content-type"] for headers, _ in answers} == {b"application/json"}
    offsets = sorted(orjson.loads(body)["results"][0]["base_offset"] for _, body in answers)
    assert offsets == list(range(20))
    ((headers, body),) = await h2_exchange(
        server, [(b"GET", b"/v1/topics/t/partitions/0/records?timeout_ms=0", b"")]
    )
    assert headers[b":status"] == b"200" and headers[b"sluice-next-offset"] == b"20"
    assert len(orjson.loads(body)["records"]) == 20
    assert fast_served(server) == 21


async def test_http2_bulk_produces_are_answered(servers: list[Server], tmp_path: Path) -> None:
    """Two 1000-record produces (over 100 KB each, beyond HTTP/2's default window: sent once
    the server's SETTINGS open it) on two streams of one connection, each with its offsets."""
    server = launch(servers, tmp_path)
    create_topic(server)
    client = H2Connection(H2Configuration(client_side=True, header_encoding=None))
    client.initiate_connection()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(client.data_to_send())
        size = len(BULK_JSON)
        while (
            client.remote_settings.initial_window_size < size
            or client.outbound_flow_control_window < 2 * size
        ):
            data = await asyncio.wait_for(reader.read(65536), WAIT_S)
            assert data, "the server closed the connection"
            client.receive_data(data)
        head = [(b":method", b"POST"), (b":scheme", b"http"), (b":authority", b"x"),
                (b":path", b"/v1/topics/t/records?acks=1"), (b"content-type", b"application/json"),
                (b"content-length", b"%d" % size)]  # fmt: skip
        step = client.max_outbound_frame_size
        for stream_id in (1, 3):
            client.send_headers(stream_id, head)
            for at in range(0, size, step):
                end = at + step >= size
                client.send_data(stream_id, BULK_JSON[at : at + step], end_stream=end)
        writer.write(client.data_to_send())
        heads, bodies = await h2_answers(client, reader, writer, {1, 3})
    finally:
        writer.close()
    assert [heads[s][-1][b":status"] for s in (1, 3)] == [b"200", b"200"]
    offsets = sorted(orjson.loads(bodies[s])["results"][0]["base_offset"] for s in (1, 3))
    assert offsets == [0, 1000]


async def test_http2_bodies_still_arriving_are_read_by_the_application(
    servers: list[Server], tmp_path: Path
) -> None:
    """A produce stream's body is held without a reader until the stream's handler first
    runs; a body not whole by then is the Application's to read (the held part first), and a
    request that expects 100-continue gets it before sending its body (and goes there too)."""
    server = launch(servers, tmp_path)
    create_topic(server)
    body = b'{"records":[{"value":"%s"}]}' % (b"z" * 3000)
    client = H2Connection(H2Configuration(client_side=True, header_encoding=None))
    client.initiate_connection()
    target = [(b":method", b"POST"), (b":scheme", b"http"), (b":authority", b"x"),
              (b":path", b"/v1/topics/t/records?acks=1"), (b"content-type", b"application/json"),
              (b"content-length", b"%d" % len(body))]  # fmt: skip
    client.send_headers(1, target)
    client.send_data(1, body[:1000])
    client.send_headers(3, [*target, (b"expect", b"100-continue")])
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)

    def continued(stream_id: int) -> None:
        # Flushed after stream 1's handler first ran (both were queued by the same read, the
        # handler first): stream 1's rest comes after it.
        client.send_data(1, body[1000:], end_stream=True)
        client.send_data(stream_id, body, end_stream=True)

    try:
        writer.write(client.data_to_send())
        heads, bodies = await h2_answers(client, reader, writer, {1, 3}, continued)
    finally:
        writer.close()
    statuses = {s: [head[b":status"] for head in heads[s]] for s in heads}
    assert statuses == {1: [b"200"], 3: [b"100", b"200"]}
    offsets = sorted(orjson.loads(bodies[s])["results"][0]["base_offset"] for s in (1, 3))
    assert offsets == [0, 1]
    records = httpx.get(f"{server.url}/v1/topics/t/partitions/0/records", timeout=WAIT_S)
    assert [r["value"] for r in records.json()["records"]] == ["z" * 3000] * 2
    assert fast_served(server) == 1  # the fetch just made: both produces were the Application's


async def test_http2_requests_without_a_body_have_none_for_the_application(
    servers: list[Server], tmp_path: Path
) -> None:
    """A bodiless request the fast routes might have answered but leaves (an Accept it does not
    take) reaches the Application with no body, so the in-flight limits reserve nothing for
    it: four such long-polls on one connection are all served."""
    server = launch(servers, tmp_path)
    create_topic(server)
    client = H2Connection(H2Configuration(client_side=True, header_encoding=None))
    client.initiate_connection()
    path = b"/v1/topics/t/partitions/0/records?offset=latest&timeout_ms=300"
    streams = set()
    for _ in range(4):
        stream_id = client.get_next_available_stream_id()
        client.send_headers(
            stream_id,
            [(b":method", b"GET"), (b":scheme", b"http"), (b":authority", b"x"), (b":path", path),
             (b"accept", b"application/json, */*")],
            end_stream=True,
        )  # fmt: skip
        streams.add(stream_id)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(client.data_to_send())
        heads, bodies = await h2_answers(client, reader, writer, streams)
    finally:
        writer.close()
    assert [heads[s][-1][b":status"] for s in sorted(streams)] == [b"200"] * 4
    assert {orjson.loads(bodies[s])["records"] == [] for s in streams} == {True}
    assert fast_served(server) == 0


# Fetches of partition 0 of a topic filled by `fill` (log start 2, end 9): (query, Accept).
FETCHES: list[tuple[str, str | None]] = [
    ("", None),
    ("?offset=earliest&timeout_ms=0", "application/json"),
    ("?offset=latest&timeout_ms=50", "application/json"),  # a long-poll that times out empty
    ("?offset=3&timeout_ms=0", "*/*"),  # inside a batch: the records before it skipped
    ("?offset=4&max_records=2&timeout_ms=0", None),
    ("?offset=2&max_records=7&timeout_ms=0", None),  # across batches
    ("?offset=2&max_bytes=1&timeout_ms=0", None),
    ("?offset=2&min_bytes=1000000&timeout_ms=50", None),  # waits, then what is there
    ("?offset=9&timeout_ms=0", None),
    ("?offset=0", None),  # below the log start: 416
    ("?offset=10", None),  # past the end: 416
    ("?offset=-1", None),
    ("?offset=earliest&timeout_ms=0", NDJSON),
    ("?offset=5&max_records=2&timeout_ms=0", NDJSON),
    ("?offset=2&timeout_ms=0", RECORD_BATCH),
    ("?offset=6&timeout_ms=0", RECORD_BATCH),
]
# Fetches the fast routes leave to the Application (bad or unusual parameters, other partitions).
LEFT_FETCHES: list[tuple[str, str | None]] = [
    ("?offset=next", None),
    ("?max_records=0", None),
    ("?timeout_ms=-1", None),
    ("?offset=2&offset=3", None),
    ("?offset=2&other=1", None),
    ("?offset=2&timeout_ms=0", "text/csv"),  # 406
]


def fill(server: Server) -> None:
    """Partition 0 of `t`: JSON, NDJSON and binary batches, then the first two deleted."""
    path = f"{server.url}/v1/topics/t/partitions/0/records"
    answers = [
        httpx.post(path, json={"records": [{"key": "k0", "value": {"n": 0}}, {"value": [1]},
                                           {"value": "two", "headers": {"h": "v"}}]}),
        httpx.post(path, content=b'{"line": 1}\n"two"\n', headers={"Content-Type": NDJSON}),
        httpx.post(path, content=BINARY, headers={"Content-Type": RECORD_BATCH}),
        httpx.post(path, json={"records": [{"value": None}, {"key": "é", "value": 4.5}]}),
        httpx.post(f"{server.url}/v1/topics/t/partitions/0/delete-records",
                   json={"before_offset": 2}),
    ]  # fmt: skip
    for answer in answers:
        assert answer.status_code == 200, answer.text


async def test_the_fast_routes_fetch_exactly_as_the_application(
    servers: list[Server], tmp_path: Path
) -> None:
    """Each fetch through the fast routes and through the Application (the same Accept with a q
    parameter, which the fast routes leave to the Application's negotiation): the same answers."""
    server = launch(servers, tmp_path)
    create_topic(server, partitions=2)
    fill(server)
    before = fast_served(server)
    fast, app = await Connection.open(server), await Connection.open(server)

    def get(query: str, accept: str | None) -> bytes:
        line = "" if accept is None else f"Accept: {accept}\r\n"
        target = f"/v1/topics/t/partitions/0/records{query}"
        return f"GET {target} HTTP/1.1\r\nHost: x\r\n{line}\r\n".encode()

    statuses = set()
    try:
        for query, accept in FETCHES + LEFT_FETCHES:
            through_fast = await fast.exchange(get(query, accept))
            through_app = await app.exchange(get(query, f"{accept or FAST_TYPE};q=1"))
            assert comparable(through_fast) == comparable(through_app), (query, accept)
            statuses.add(through_fast[0].split()[1])
    finally:
        fast.close()
        app.close()
    assert statuses == {b"200", b"400", b"406", b"416"}
    assert fast_served(server) - before == len(FETCHES)


async def test_a_group_members_fetch_takes_the_fast_routes(
    servers: list[Server], tmp_path: Path
) -> None:
    """Two groups read one topic, one through the fast routes and one through the Application (the
    same Accept with a q parameter): the same records, assignment and generation. An answer
    lost on the way (the cursor of the one before sent again) is delivered again by the fast
    routes."""
    server = launch(servers, tmp_path)
    create_topic(server, partitions=2)
    for n in range(6):
        path = f"{server.url}/v1/topics/t/partitions/{n % 2}/records"
        assert httpx.post(path, json={"records": [{"value": n}]}).status_code == 200
    joined = {
        group: httpx.post(
            f"{server.url}/v1/groups/{group}/members",
            json={"topics": ["t"], "auto_offset_reset": "earliest"},
        ).json()
        for group in ("fast", "app")
    }
    before = fast_served(server)

    def get(group: str, cursor: int, accept: str) -> bytes:
        member = joined[group]["member_id"]
        target = f"/v1/groups/{group}/members/{member}/records?timeout_ms=0&cursor={cursor}"
        return f"GET {target} HTTP/1.1\r\nHost: x\r\nAccept: {accept}\r\n\r\n".encode()

    conn = await Connection.open(server)
    try:
        # The Application's last: a request right after one the Application served may find
        # aiohttp's loop not yet idle, and go through it too (docs/gateway.md, "The fast routes").
        answers = {"fast": await conn.exchange(get("fast", joined["fast"]["cursor"], FAST_TYPE))}
        again = await conn.exchange(get("fast", joined["fast"]["cursor"], FAST_TYPE))
        answers["app"] = await conn.exchange(
            get("app", joined["app"]["cursor"], f"{FAST_TYPE};q=1")
        )
    finally:
        conn.close()
    docs = {group: orjson.loads(body) for group, (_, _, body) in answers.items()}
    for doc in docs.values():
        doc.pop("cursor")
    assert docs["fast"] == docs["app"]
    assert sorted(r["value"] for r in docs["fast"]["records"]) == list(range(6))

    def by_place(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return sorted(records, key=lambda r: (r["partition"], r["offset"]))

    assert by_place(orjson.loads(again[2])["records"]) == by_place(docs["fast"]["records"])
    assert fast_served(server) - before == 2


async def test_a_share_groups_acquire_and_acknowledge_take_the_fast_routes(
    servers: list[Server], tmp_path: Path
) -> None:
    """Two share groups read one topic, one through the fast routes and one through the
    Application (the same Accept with a q parameter, the same body type with a charset): the
    same records with the same tokens, and the same acknowledgement results, refusals too."""
    server = launch(servers, tmp_path)
    create_topic(server, partitions=2)
    for n in range(6):
        path = f"{server.url}/v1/topics/t/partitions/{n % 2}/records"
        assert httpx.post(path, json={"records": [{"value": n}]}).status_code == 200
    members = {}
    for group in ("fast", "app"):
        base = f"{server.url}/v1/share-groups/{group}"
        configs = {"configs": {"share.auto.offset.reset": "earliest"}}
        assert httpx.put(f"{base}/configs", json=configs).status_code == 200
        joined = httpx.post(f"{base}/members", json={"topics": ["t"]})
        assert joined.status_code == 201, joined.text
        members[group] = joined.json()["member_id"]
    before = fast_served(server)

    def acquire(group: str, accept: str, query: str = "max_records=4") -> bytes:
        target = f"/v1/share-groups/{group}/members/{members[group]}/acquire?{query}"
        return (
            f"POST {target} HTTP/1.1\r\nHost: x\r\nAccept: {accept}\r\nContent-Length: 0\r\n\r\n"
        ).encode()

    def acknowledge(group: str, content_type: str, body: bytes) -> bytes:
        target = f"/v1/share-groups/{group}/members/{members[group]}/acknowledge"
        return request(target, body, content_type)

    conn = await Connection.open(server)
    try:
        # The Application's last: a request right after one the Application served may find
        # aiohttp's loop not yet idle, and go through it too (docs/gateway.md, "The fast routes").
        fast = await conn.exchange(acquire("fast", FAST_TYPE))
        fast_nd = await conn.exchange(acquire("fast", NDJSON, "max_records=2"))
        tokens = [r["token"] for r in orjson.loads(fast[2])["records"]]
        tokens += [orjson.loads(line)["token"] for line in fast_nd[2].splitlines()]
        acks = [{"token": token, "type": "accept"} for token in tokens[:5]]
        acks += [{"token": tokens[5], "type": "renew"}, {"token": "t:0:0:9", "type": "accept"}]
        acks += [{"topic": "t", "partition": 0, "first_offset": 90, "last_offset": 99}]
        body = orjson.dumps({"acknowledgements": acks})
        fast_acked = await conn.exchange(acknowledge("fast", FAST_TYPE, body))
        app = await conn.exchange(acquire("app", f"{FAST_TYPE};q=1"))
        app_nd = await conn.exchange(acquire("app", f"{NDJSON};q=1", "max_records=2"))
        app_acked = await conn.exchange(acknowledge("app", APP_TYPE, body))
    finally:
        conn.close()
    assert fast_served(server) - before == 3

    def records(answer: tuple[bytes, dict[str, str], bytes], ndjson: bool) -> list[Any]:
        docs = (
            [orjson.loads(line) for line in answer[2].splitlines()]
            if ndjson
            else orjson.loads(answer[2])["records"]
        )
        for doc in docs:
            assert doc.pop("lock_expires_at") > 0
        return docs

    assert fast[0] == app[0] == b"HTTP/1.1 200 OK"
    assert fast[1]["content-type"] == app[1]["content-type"] == FAST_TYPE
    assert fast_nd[1]["content-type"] == app_nd[1]["content-type"] == NDJSON
    assert records(fast, False) == records(app, False)
    assert records(fast_nd, True) == records(app_nd, True)
    assert len(tokens) == 6
    answers = {"fast": fast_acked, "app": app_acked}
    results = {name: orjson.loads(a[2])["results"] for name, a in answers.items()}
    for answered in results.values():
        assert answered[5].pop("lock_expires_at") > 0
    assert results["fast"] == results["app"]
    assert [r["status"] for r in results["fast"]] == ["ok"] * 6 + ["refused"] * 2
    assert comparable(fast_acked)[0] == comparable(app_acked)[0]


LONG_POLL = (
    b"GET /v1/topics/t/partitions/0/records?offset=latest&timeout_ms=30000 HTTP/1.1\r\n"
    b"Host: x\r\n\r\n"
)


async def parked_long_poll(server: Server) -> Connection:
    """A connection whose long-poll at the end of `t`'s partition 0 the server has parked
    (its gauge says so)."""
    polling = await Connection.open(server)
    polling.writer.write(LONG_POLL)
    until(lambda: b"sluice_parked_fetches 1.0" in httpx.get(f"{server.url}/metrics").content,
          "the long-poll to park")  # fmt: skip
    return polling


async def test_a_client_that_hangs_up_takes_its_fast_requests_with_it(
    servers: list[Server], tmp_path: Path
) -> None:
    """A long-poll the fast routes parked lets go when its client hangs up (as the Application's
    handler is cancelled then), and a produce pipelined behind it is dropped, never served."""
    server = launch(servers, tmp_path)
    create_topic(server)
    ghost = request("/v1/topics/t/records?acks=1", b'{"records":[{"value":"ghost"}]}')
    with socket.create_connection(("127.0.0.1", server.port)) as hanging_up:
        # Longer than `until` waits: only the hang-up can end it in time.
        hanging_up.sendall(LONG_POLL.replace(b"timeout_ms=30000", b"timeout_ms=300000") + ghost)
        until(lambda: b"sluice_parked_fetches 1.0" in httpx.get(f"{server.url}/metrics").content,
              "the long-poll to park")  # fmt: skip
    until(lambda: b"sluice_parked_fetches 0.0" in httpx.get(f"{server.url}/metrics").content,
          "the long-poll to let go")  # fmt: skip
    producing = await Connection.open(server)
    try:
        _, _, body = await producing.exchange(
            request("/v1/topics/t/records", b'{"records":[{"value":"real"}]}')
        )
    finally:
        producing.close()
    assert orjson.loads(body)["results"][0]["base_offset"] == 0


async def test_an_http2_client_that_hangs_up_releases_its_long_poll(
    servers: list[Server], tmp_path: Path
) -> None:
    """The same over HTTP/2: the connection's streams, the fast routes' long-poll among them, are
    cancelled when the client goes."""
    server = launch(servers, tmp_path)
    create_topic(server)
    client = H2Connection(H2Configuration(client_side=True, header_encoding=None))
    client.initiate_connection()
    path = b"/v1/topics/t/partitions/0/records?offset=latest&timeout_ms=300000"
    client.send_headers(
        1,
        [(b":method", b"GET"), (b":scheme", b"http"), (b":authority", b"x"), (b":path", path)],
        end_stream=True,
    )
    with socket.create_connection(("127.0.0.1", server.port)) as hanging_up:
        hanging_up.sendall(client.data_to_send())
        until(lambda: b"sluice_parked_fetches 1.0" in httpx.get(f"{server.url}/metrics").content,
              "the long-poll to park")  # fmt: skip
    until(lambda: b"sluice_parked_fetches 0.0" in httpx.get(f"{server.url}/metrics").content,
          "the long-poll to let go")  # fmt: skip


async def test_a_long_poll_the_fast_routes_park_wakes_for_a_produce(
    servers: list[Server], tmp_path: Path
) -> None:
    server = launch(servers, tmp_path)
    create_topic(server)
    polling, producing = await parked_long_poll(server), await Connection.open(server)
    try:
        await producing.exchange(request("/v1/topics/t/records", b'{"records":[{"value":"w"}]}'))
        status, headers, body = await polling.answer()
    finally:
        polling.close()
        producing.close()
    assert status.split()[1] == b"200" and headers["sluice-next-offset"] == "1"
    assert [r["value"] for r in orjson.loads(body)["records"]] == ["w"]
    assert fast_served(server) == 2


async def test_a_graceful_shutdown_answers_a_parked_plain_long_poll(
    servers: list[Server], tmp_path: Path
) -> None:
    """The plain long-poll `parked_long_poll` sends is the fast routes' (the test above counts it):
    SIGTERM wakes it, its answer goes out, and the server exits cleanly."""
    server = launch(servers, tmp_path)
    create_topic(server)
    polling = await parked_long_poll(server)
    try:
        server.process.send_signal(signal.SIGTERM)
        status, _, body = await polling.answer()
    finally:
        polling.close()
    assert status.split()[1] == b"200" and orjson.loads(body)["records"] == []
    assert server.process.wait(timeout=WAIT_S) == 0


async def test_a_request_from_a_browser_origin_gets_its_cors_headers(
    servers: list[Server], tmp_path: Path
) -> None:
    """Any origin (`*`): a browser's produce is the fast routes' too, readable by its origin
    (tests/e2e/test_fast_route_checks.py: named origins, and the Application's headers)."""
    server = launch(servers, tmp_path, "--cors-origins", "*")
    create_topic(server)
    conn = await Connection.open(server)
    try:
        plain = await conn.exchange(request("/v1/topics/t/records", b'{"records":[{"value":1}]}'))
        browser = await conn.exchange(
            request(
                "/v1/topics/t/records",
                b'{"records":[{"value":1}]}',
                headers={"Origin": "https://a.example"},
            )
        )
    finally:
        conn.close()
    assert "access-control-allow-origin" not in plain[1]
    assert browser[1]["access-control-allow-origin"] == "*"
    assert fast_served(server) == 2
