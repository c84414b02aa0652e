"""Request bodies as an attacker sends them: compression bombs, corrupt or unsupported codings,
foreign charsets, numbers no double holds, JSON nested past the parser, clients that leave
half-way. Every refusal is problem+json and appends nothing."""

from __future__ import annotations

import asyncio
import gzip
import json
import threading
import zlib
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from engine import batch as fmt
from gateway.api.backpressure import INFLIGHT, InflightBodies
from gateway.http import bodies
from gateway.http.problem import Problem
from replication.node_contract import APPEND_PREFIX
from tests.api.support import (
    JSON,
    NDJSON,
    PROBLEM,
    RECORD_BATCH,
    Client,
    Start,
    create_topic,
    end_offsets,
    fetch_all,
    metrics,
    problem,
    raw_request,
    records_path,
    sample,
    wait_until,
)

MIB = 1024 * 1024


def gzip_bomb(size: int) -> bytes:
    """`size` zero bytes, gzipped: about a thousandth of that on the wire."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = b"\0" * MIB
    return b"".join([*(packer.compress(zeros) for _ in range(size // MIB)), packer.flush()])


class Recording:
    """A decompressor that adds up what it produced; `gate` runs before each step (to hold it)."""

    def __init__(
        self, inner: bodies.Decompressor, produced: list[int], gate: Callable[[], None]
    ) -> None:
        self.inner = inner
        self.produced = produced
        self.gate = gate

    @property
    def eof(self) -> bool:
        return self.inner.eof

    @property
    def unconsumed_tail(self) -> bytes:
        return self.inner.unconsumed_tail

    @property
    def unused_data(self) -> bytes:
        return self.inner.unused_data

    def decompress(self, data: bytes, max_length: int = 0, /) -> bytes:
        self.gate()
        out = self.inner.decompress(data, max_length)
        self.produced[0] += len(out)
        return out


def record_gzip(
    monkeypatch: pytest.MonkeyPatch, gate: Callable[[], None] = lambda: None
) -> list[int]:
    """Route gzip bodies through Recording; returns the running total of inflated bytes."""
    produced = [0]
    real = bodies.DECODERS["gzip"]
    monkeypatch.setitem(
        bodies.DECODERS, "gzip", lambda first: Recording(real(first), produced, gate)
    )
    return produced


def inflight_of(client: Client) -> InflightBodies:
    app = client.app
    assert app is not None
    return app[INFLIGHT]


# -- inflating ------------------------------------------------------------------------------------


def test_inflation_stops_at_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bomb of 64 MiB is refused after at most limit + one step of output, not inflated."""
    produced = record_gzip(monkeypatch)
    with pytest.raises(Problem) as refused:
        bodies.inflate(gzip_bomb(64 * MIB), ["gzip"], MIB)
    assert refused.value.status == 413 and refused.value.code == "REQUEST_TOO_LARGE"
    assert MIB < produced[0] <= MIB + bodies.CHUNK


def test_inflate_undoes_every_supported_coding() -> None:
    data = b'{"records": [{"value": "%s"}]}' % (b"x" * 300_000)
    raw = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    raw_deflate = raw.compress(data) + raw.flush()
    cases = {
        "gzip": (gzip.compress(data), ["gzip"]),
        "x-gzip": (gzip.compress(data), ["x-gzip"]),
        "two gzip members": (gzip.compress(data[:7]) + gzip.compress(data[7:]), ["gzip"]),
        "deflate (zlib)": (zlib.compress(data), ["deflate"]),
        "deflate (raw)": (raw_deflate, ["deflate"]),
        "deflate then gzip": (gzip.compress(zlib.compress(data)), ["deflate", "gzip"]),
    }
    for name, (encoded, codings) in cases.items():
        assert bodies.inflate(encoded, codings, len(data)) == data, name


@pytest.mark.parametrize(
    ("encoded", "coding"),
    [
        (b"not gzip at all", "gzip"),
        (gzip.compress(b'{"records": []}')[:-9], "gzip"),  # cut before its end
        (zlib.compress(b"{}") + b"garbage", "deflate"),
        (gzip.compress(b"{}") + b"garbage", "gzip"),
    ],
    ids=["not-gzip", "truncated", "deflate-trailing-bytes", "gzip-trailing-bytes"],
)
def test_a_corrupt_encoding_is_invalid(encoded: bytes, coding: str) -> None:
    with pytest.raises(Problem) as refused:
        bodies.inflate(encoded, [coding], MIB)
    assert refused.value.status == 400 and refused.value.code == "INVALID_ENCODING"


async def test_a_gzip_bomb_is_413_and_appends_nothing(start: Start) -> None:
    client = await start(max_request_bytes=MIB)
    await create_topic(client)
    resp = await client.post(
        records_path("t"),
        data=gzip_bomb(64 * MIB),
        headers={"Content-Type": JSON, "Content-Encoding": "gzip"},
    )
    doc = await problem(resp, 413, "REQUEST_TOO_LARGE")
    assert str(MIB) in doc["detail"]
    assert await end_offsets(client) == [0]


async def test_healthz_is_answered_while_a_bomb_is_inflated(
    start: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The inflation runs in a worker thread: held there, it leaves the event loop serving."""
    started, release = threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        assert release.wait(10)

    record_gzip(monkeypatch, hold)
    client = await start(max_request_bytes=MIB)
    await create_topic(client)
    bomb = asyncio.ensure_future(
        client.post(
            records_path("t"),
            data=gzip_bomb(16 * MIB),
            headers={"Content-Type": JSON, "Content-Encoding": "gzip"},
        )
    )
    try:
        assert await asyncio.to_thread(started.wait, 10), "the bomb never reached its inflation"
        health = await client.get("/healthz")
        assert health.status == 200
        assert not bomb.done()
    finally:
        release.set()
    await problem(await bomb, 413, "REQUEST_TOO_LARGE")
    assert await end_offsets(client) == [0]


async def test_an_encoded_body_reserves_the_most_it_may_inflate_to(start: Start) -> None:
    """A gzip body counts as --max-request-bytes against the bodies in progress, whatever its
    Content-Length: only then does the in-flight limit bound memory."""
    client = await start(max_request_bytes=4096, max_inflight_request_bytes=6000)
    await create_topic(client)
    release = asyncio.Event()
    inflight = inflight_of(client)

    async def slow_body() -> Any:
        yield b'{"records": [{"value": '
        await release.wait()
        yield b"1}]}"

    slow = asyncio.ensure_future(
        client.post(records_path("t"), data=slow_body(), headers={"Content-Type": JSON})
    )
    await wait_until(lambda: inflight.reserved >= 4096)
    small = gzip.compress(b'{"records": [{"value": 2}]}')
    busy = await client.post(
        records_path("t"),
        data=small,
        headers={"Content-Type": JSON, "Content-Encoding": "gzip"},
    )
    await problem(busy, 503, "SERVER_BUSY")
    release.set()
    assert (await slow).status == 200
    assert inflight.reserved == 0 and inflight.by_connection == {}


async def test_encoded_bodies_are_decoded_on_every_route(client: Client) -> None:
    await create_topic(client)
    produced = await client.post(
        records_path("t"),
        data=gzip.compress(b'{"records": [{"value": {"a": 1}}]}'),
        headers={"Content-Type": JSON, "Content-Encoding": "gzip"},
    )
    assert produced.status == 200, await produced.text()
    lines = await client.post(
        records_path("t"),
        data=zlib.compress(b'"x"\n2\n'),
        headers={"Content-Type": NDJSON, "Content-Encoding": "deflate"},
    )
    assert lines.status == 200, await lines.text()
    created = await client.post(
        "/v1/topics",
        data=gzip.compress(b'{"name": "other", "partitions": 2}'),
        headers={"Content-Type": JSON, "Content-Encoding": "gzip"},
    )
    assert created.status == 201, await created.text()
    assert [r["value"] for r in await fetch_all(client)] == [{"a": 1}, "x", 2]


BODY_ROUTES = [
    ("POST", "/v1/topics", JSON),
    ("PATCH", "/v1/topics/t", JSON),
    ("POST", "/v1/topics/t/records", JSON),
    ("POST", "/v1/topics/t/partitions/0/records", NDJSON),
    ("POST", "/v1/topics/t/partitions/0/delete-records", JSON),
    ("PUT", "/v1/groups/g/offsets", JSON),
    ("POST", "/v1/groups/g/members", JSON),
    ("POST", "/v1/groups/g/members/m/commit", JSON),
    ("POST", f"{APPEND_PREFIX}/t/0/append", RECORD_BATCH),
]


@pytest.mark.parametrize(("method", "path", "content_type"), BODY_ROUTES)
async def test_a_corrupt_encoding_is_400_on_every_body_route(
    client: Client, method: str, path: str, content_type: str
) -> None:
    await create_topic(client)
    resp = await client.request(
        method,
        path,
        data=b"\x1f\x8b this is no gzip",
        headers={"Content-Type": content_type, "Content-Encoding": "gzip"},
    )
    await problem(resp, 400, "INVALID_ENCODING")
    assert await end_offsets(client) == [0]


@pytest.mark.parametrize(("method", "path", "content_type"), BODY_ROUTES)
async def test_an_unsupported_encoding_is_415_on_every_body_route(
    client: Client, method: str, path: str, content_type: str
) -> None:
    await create_topic(client)
    resp = await client.request(
        method,
        path,
        data=b"\x0b\x03\x80{}\x03",
        headers={"Content-Type": content_type, "Content-Encoding": "br"},
    )
    await problem(resp, 415, "UNSUPPORTED_ENCODING")
    assert resp.headers["Accept-Encoding"] == "gzip, deflate"
    assert await end_offsets(client) == [0]


async def test_unsupported_content_codings(client: Client, subtests: pytest.Subtests) -> None:
    await create_topic(client)
    body = b'{"records": [{"value": 1}]}'
    for coding in ("br", "zstd", "compress", "gzip, br", "x-unknown"):
        with subtests.test(coding=coding):
            resp = await client.post(
                records_path("t"),
                data=body,
                headers={"Content-Type": JSON, "Content-Encoding": coding},
            )
            await problem(resp, 415, "UNSUPPORTED_ENCODING")
    identity = await client.post(
        records_path("t"), data=body, headers={"Content-Type": JSON, "Content-Encoding": "identity"}
    )
    assert identity.status == 200
    assert await end_offsets(client) == [1]


async def test_a_transfer_coding_other_than_chunked_is_415(client: Client) -> None:
    """aiohttp ignores the gzip in `gzip, chunked`: the body would be appended as it is."""
    await create_topic(client)
    body = b'{"records": [{"value": 1}]}'
    head = (
        b"POST /v1/topics/t/records HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: gzip, chunked\r\n\r\n"
    )
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    status, headers, payload = await raw_request(client, head, chunked)
    assert status == 415 and headers["content-type"] == PROBLEM
    assert orjson.loads(payload)["code"] == "UNSUPPORTED_ENCODING"
    assert await end_offsets(client) == [0]


async def test_a_charset_other_than_utf8_is_415(client: Client, subtests: pytest.Subtests) -> None:
    await create_topic(client)
    body = '{"records": [{"value": "caf\u00e9"}]}'
    for charset in ("latin-1", "iso-8859-1", "utf-16", "windows-1252"):
        with subtests.test(charset=charset):
            resp = await client.post(
                records_path("t"),
                data=body.encode(charset) if charset != "utf-16" else body.encode("utf-16"),
                headers={"Content-Type": f"{JSON}; charset={charset}"},
            )
            await problem(resp, 415, "UNSUPPORTED_MEDIA_TYPE")
    assert await end_offsets(client) == [0]
    for charset in ("utf-8", "UTF-8", "utf8"):
        resp = await client.post(
            records_path("t"),
            data=body.encode(),
            headers={"Content-Type": f"{JSON}; charset={charset}"},
        )
        assert resp.status == 200, await resp.text()
    assert [r["value"] for r in await fetch_all(client)] == ["caf\u00e9"] * 3


# -- JSON no decoder reads back -------------------------------------------------------------------

NON_FINITE = [b"1e309", b"-1e309", b"1E+400", b"0.5e99999", b"1" + b"0" * 309, b'[1, {"a": 2e308}]']


@pytest.mark.parametrize("value", NON_FINITE)
async def test_a_json_number_no_double_holds_is_400(client: Client, value: bytes) -> None:
    await create_topic(client)
    body = b'{"records": [{"value": 1}, {"key": "k", "value": %s}]}' % value
    resp = await client.post(records_path("t"), data=body, headers={"Content-Type": JSON})
    doc = await problem(resp, 400, "INVALID_RECORD")
    assert doc["index"] == 1 and doc["pointer"] == "/records/1/value"
    assert "infinity" in doc["detail"]
    assert await end_offsets(client) == [0]


@pytest.mark.parametrize("value", NON_FINITE)
async def test_an_ndjson_number_no_double_holds_is_400(client: Client, value: bytes) -> None:
    await create_topic(client)
    resp = await client.post(
        records_path("t"), data=b"1\n" + value + b"\n", headers={"Content-Type": NDJSON}
    )
    doc = await problem(resp, 400, "INVALID_JSON")
    assert doc["line"] == 2
    assert await end_offsets(client) == [0]


@pytest.mark.parametrize("value", [b"NaN", b"Infinity", b"-Infinity"])
async def test_nan_and_infinity_literals_are_400(client: Client, value: bytes) -> None:
    await create_topic(client)
    json_body = b'{"records": [{"value": %s}]}' % value
    resp = await client.post(records_path("t"), data=json_body, headers={"Content-Type": JSON})
    await problem(resp, 400, "INVALID_JSON")
    resp = await client.post(records_path("t"), data=value, headers={"Content-Type": NDJSON})
    await problem(resp, 400, "INVALID_JSON")
    assert await end_offsets(client) == [0]


async def test_large_finite_numbers_and_lookalike_strings_are_kept(client: Client) -> None:
    await create_topic(client)
    values = [b"1.7976931348623157e308", b"-1e308", b"1e-400", b'"1e309"', b"1" + b"0" * 308]
    body = b'{"records": [%s]}' % b", ".join(b'{"key": "1e999", "value": %s}' % v for v in values)
    resp = await client.post(records_path("t"), data=body, headers={"Content-Type": JSON})
    assert resp.status == 200, await resp.text()
    resp = await client.post(
        records_path("t"), data=b"\n".join(values), headers={"Content-Type": NDJSON}
    )
    assert resp.status == 200, await resp.text()
    fetched = [r["value"] for r in await fetch_all(client)]
    assert fetched == [json.loads(v) for v in values] * 2  # as the test client decodes


DEEP = b"[" * 1000 + b"]" * 1000


async def test_json_nested_1000_deep_is_400(client: Client) -> None:
    await create_topic(client)
    body = b'{"records": [{"value": %s}]}' % DEEP
    await problem(
        await client.post(records_path("t"), data=body, headers={"Content-Type": JSON}),
        400,
        "INVALID_JSON",
    )
    await problem(
        await client.post(records_path("t"), data=DEEP, headers={"Content-Type": NDJSON}),
        400,
        "INVALID_JSON",
    )
    assert await end_offsets(client) == [0]


@pytest.mark.parametrize(("method", "path", "content_type"), BODY_ROUTES[:-1])
@pytest.mark.parametrize("depth", [1000, 5000])
async def test_deep_json_is_4xx_on_every_json_route(
    client: Client, method: str, path: str, content_type: str, depth: int
) -> None:
    await create_topic(client)
    deep = b"[" * depth + b"]" * depth
    field = b"records" if path.endswith("/records") else b"topics"
    body = deep if content_type == NDJSON else b'{"%s": %s}' % (field, deep)
    resp = await client.request(method, path, data=body, headers={"Content-Type": content_type})
    assert 400 <= resp.status < 500, await resp.text()
    assert resp.content_type == PROBLEM
    assert await end_offsets(client) == [0]


# -- clients that leave ----------------------------------------------------------------------------


async def test_a_client_leaving_mid_body_counts_as_499(client: Client) -> None:
    await create_topic(client)
    inflight = inflight_of(client)
    host, port = client.server.host, client.server.port
    _, writer = await asyncio.open_connection(host, port)
    writer.write(
        b"POST /v1/topics/t/records HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100\r\n\r\n" + b'{"records": ['
    )
    await writer.drain()
    await wait_until(lambda: inflight.reserved > 0)  # the handler is reading the body
    writer.close()
    await wait_until(lambda: inflight.reserved == 0)  # ... and has given up
    samples = await metrics(client)
    labels = {"route": "/v1/topics/{topic}/records", "method": "POST"}
    assert sample(samples, "sluice_http_requests_total", status="499", **labels) == 1
    assert sample(samples, "sluice_http_requests_total", status="500", **labels) is None
    assert await end_offsets(client) == [0]


async def test_an_internal_append_of_json_batches_still_works(client: Client) -> None:
    """Nodes forward JSON batches (VALUES_JSON set) to leaders: their bodies are not refused."""
    await create_topic(client)
    batch = fmt.encode_batches(
        [(None, b"1", [], None)], max_batch_bytes=MIB, values_json=True, default_timestamp=1
    )
    resp = await client.post(
        f"{APPEND_PREFIX}/t/0/append",
        data=gzip.compress(bytes(batch)),
        headers={"Content-Type": RECORD_BATCH, "Content-Encoding": "gzip"},
    )
    assert resp.status == 200, await resp.text()
    assert [r["value"] for r in await fetch_all(client)] == [1]
