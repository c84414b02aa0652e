"""Typed helpers shared by the HTTP API tests: requests, problem checks, metrics, raw sockets."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from functools import partial
from http import HTTPStatus
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient
from prometheus_client.parser import text_string_to_metric_families

from engine import batch as fmt
from engine.batch import RecordInput
from gateway.app import build_app
from gateway.http.connections import Http1Connection
from gateway.http.http2 import Http2Site, start_server
from gateway.settings import Settings
from gateway.state import GATEWAY, Gateway

Client = TestClient[web.Request, web.Application]
Start = Callable[..., Awaitable[Client]]  # the `start` fixture: Settings overrides -> client
JSON = "application/json"
NDJSON = "application/x-ndjson"
RECORD_BATCH = "application/vnd.sluice.record-batch"
PROBLEM = "application/problem+json"
PROBLEM_MEMBERS = {"type", "title", "status", "detail", "code"}


def gateway(client: Client) -> Gateway:
    """The running gateway's shared state (engine, notifier, metrics)."""
    app = client.app
    assert app is not None
    state: Gateway = app[GATEWAY]
    return state


def now_ms() -> int:
    return int(time.time() * 1000)


async def create_topic(
    client: Client,
    name: str = "t",
    partitions: int = 1,
    configs: Mapping[str, object] | None = None,
) -> dict[str, Any]:
    """Create a topic and return its description (asserts 201)."""
    doc: dict[str, object] = {"name": name, "partitions": partitions}
    if configs is not None:
        doc["configs"] = dict(configs)
    resp = await client.post("/v1/topics", json=doc)
    assert resp.status == 201, await resp.text()
    body: dict[str, Any] = await resp.json()
    return body


async def describe(client: Client, name: str = "t") -> dict[str, Any]:
    resp = await client.get(f"/v1/topics/{name}")
    assert resp.status == 200, await resp.text()
    body: dict[str, Any] = await resp.json()
    return body


async def end_offsets(client: Client, name: str = "t") -> list[int]:
    """Each partition's log end offset, in partition order."""
    return [p["log_end_offset"] for p in (await describe(client, name))["partitions"]]


def records_path(topic: str, partition: int | str | None = None) -> str:
    if partition is None:
        return f"/v1/topics/{topic}/records"
    return f"/v1/topics/{topic}/partitions/{partition}/records"


async def produce(
    client: Client,
    records: Sequence[Mapping[str, object]],
    *,
    topic: str = "t",
    partition: int | None = None,
    params: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
    status: int = 200,
) -> dict[str, Any]:
    """POST a JSON produce body; asserts the status and returns the JSON answer."""
    resp = await client.post(
        records_path(topic, partition),
        json={"records": list(records)},
        params=params,
        headers=headers,
    )
    assert resp.status == status, await resp.text()
    body: dict[str, Any] = await resp.json()
    return body


async def produce_raw(
    client: Client,
    body: bytes,
    content_type: str,
    *,
    topic: str = "t",
    partition: int | None = None,
    params: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, dict[str, Any], Mapping[str, str]]:
    """POST raw bytes with a Content-Type; returns status, JSON body and headers."""
    resp = await client.post(
        records_path(topic, partition),
        data=body,
        params=params,
        headers={"Content-Type": content_type, **(headers or {})},
    )
    doc: dict[str, Any] = await resp.json(content_type=None)
    return resp.status, doc, resp.headers


async def fetch(
    client: Client, topic: str = "t", partition: int = 0, **params: str | int
) -> dict[str, Any]:
    """A JSON fetch that must answer 200; `timeout_ms` defaults to 0 (no long-poll)."""
    query = {"timeout_ms": 0, **params}
    resp = await client.get(
        records_path(topic, partition),
        params={k: str(v) for k, v in query.items()},
        headers={"Accept": JSON},
    )
    assert resp.status == 200, await resp.text()
    assert resp.content_type == JSON
    body: dict[str, Any] = await resp.json()
    return body


async def fetch_all(client: Client, topic: str = "t", partition: int = 0) -> list[dict[str, Any]]:
    """Every committed record of a partition, from the log start."""
    return list((await fetch(client, topic, partition, max_records=100_000))["records"])


async def problem(resp: Any, status: int, code: str) -> dict[str, Any]:
    """Assert an RFC 9457 problem response with this status and code; return its body."""
    text = await resp.text()
    assert resp.status == status, text
    assert resp.content_type == PROBLEM, text
    body: dict[str, Any] = await resp.json(content_type=PROBLEM)
    assert set(body) >= PROBLEM_MEMBERS, body
    assert body["status"] == status
    assert body["code"] == code, body
    assert body["title"] == HTTPStatus(status).phrase
    assert body["type"] == "https://sluice.dev/problems/" + code.lower().replace("_", "-")
    assert isinstance(body["detail"], str) and body["detail"]
    return body


async def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Yield to the event loop until `condition()` holds (a barrier, not a delay)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.001)


def parked(client: Client) -> int:
    """Long-poll fetches parked in the gateway now."""
    return gateway(client).notifier.parked


async def metrics(client: Client) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Scrape /metrics: {(sample name, labels): value}."""
    resp = await client.get("/metrics")
    assert resp.status == 200
    assert resp.content_type == "text/plain"
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(await resp.text()):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def sample(
    samples: Mapping[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def batch_bytes(
    records: Sequence[RecordInput], *, compression: int = 0, timestamp: int | None = None
) -> bytes:
    """One Kafka RecordBatch v2 holding `records` (what a Kafka-speaking client sends)."""
    return bytes(fmt.encode_batch(records, compression=compression, default_timestamp=timestamp))


def set_attribute_bits(batch: bytes, bits: int) -> bytes:
    """A copy of a single batch with extra attribute bits set and its CRC recomputed."""
    buf = bytearray(batch)
    header = fmt.read_header(buf)
    fmt.set_attributes(buf, 0, header, header.attributes | bits)
    return bytes(buf)


async def raw_request(
    client: Client,
    head: bytes,
    body: bytes = b"",
    *,
    timeout: float = 5.0,
    closed_within: float | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """Send bytes on a fresh TCP connection and read one response (status, headers, body).

    Lets a test send a Content-Length it never honours, or a body that stops half-way. With
    `closed_within`, also assert that the server closes the connection that soon after.
    """
    host, port = client.server.host, client.server.port
    assert port is not None
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(head + body)
        await writer.drain()
        async with asyncio.timeout(timeout):
            header_block = await reader.readuntil(b"\r\n\r\n")
            lines = header_block.decode("latin-1").split("\r\n")
            headers = {}
            for line in lines[1:]:
                if line:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
            payload = await reader.readexactly(int(headers.get("content-length", "0")))
        if closed_within is not None:
            try:
                rest = await asyncio.wait_for(reader.read(), closed_within)
            except TimeoutError:
                raise AssertionError(
                    f"the server kept the connection open over {closed_within} s"
                ) from None
            assert rest == b""
    finally:
        writer.close()
    return int(lines[0].split()[1]), headers, payload


class BlockedFlush:
    """Makes a partition's fsync block until released, to hold acks=all requests open."""

    def __init__(self, client: Client, topic: str = "t", partition: int = 0) -> None:
        self.log = gateway(client).broker.manager.log(topic, partition)
        self.entered = threading.Event()
        self.release = threading.Event()
        self._flush: Callable[..., None] = self.log.flush

    def _blocking(self, up_to: int | None = None) -> None:
        self.entered.set()
        self.release.wait(10)
        self._flush(up_to)

    def __enter__(self) -> BlockedFlush:
        self.log.flush = self._blocking  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.log.flush = self._flush  # type: ignore[method-assign]


def kept_connections() -> tuple[type[Http1Connection], list[Http1Connection]]:
    """A connection class for `own_connections` that keeps each connection it is made for, in
    the list returned with it (to look inside a connection a test's client opened)."""
    accepted: list[Http1Connection] = []

    class Kept(Http1Connection):
        __slots__ = ()

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            accepted.append(self)
            super().connection_made(transport)

    return Kept, accepted


@contextlib.asynccontextmanager
async def own_connections(
    settings: Settings, connection: type[Http1Connection] = Http1Connection
) -> AsyncIterator[Http2Site]:
    """A gateway in this process on the server's own HTTP/1.1 connections (`connection`, the
    fast path's), not aiohttp's test client; topic `t`, created over a socket."""
    app = build_app(settings)
    served = await start_server(
        app, "127.0.0.1", 0, http1=partial(connection, header_timeout=5.0, app=app)
    )
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        writer.write(
            b"POST /v1/topics HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\n"
            b'Content-Length: 13\r\nConnection: close\r\n\r\n{"name": "t"}'
        )
        assert (await reader.read()).startswith(b"HTTP/1.1 201")
        writer.close()
        yield served
    finally:
        await served.runner.cleanup()
