"""The checks the middlewares make, made by the fast routes on a real `sluice serve`: with
--auth, quotas or a named CORS origin, plain produces and fetches stay on the fast routes
(`sluice_lane_requests_total` counts them), and what they answer, refusals included, is what
the Application answers, byte for byte but the Date, over HTTP/1.1 and HTTP/2.

As in tests/e2e/test_fast_routes.py, a produce with `; charset=utf-8` after its media type, or
a fetch with `;q=1` in its Accept, goes through the Application, which stays the reference."""

from __future__ import annotations

import asyncio
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import DataReceived, ResponseReceived, StreamEnded

from tests.auth.support import binding, make_key
from tests.e2e.conftest import Server, start_server, until
from tests.e2e.test_fast_routes import FAST_METRIC

WAIT_S = 30.0
ORIGIN = "https://app.example"
FAST, GENERAL = "application/json", "application/json; charset=utf-8"
PRODUCE = "/v1/topics/t/records?acks=1"
FETCH = "/v1/topics/t/partitions/0/records?timeout_ms=0"
ONE = b'{"records":[{"value":1}]}'
Answer = tuple[bytes, bytes]  # the head without its Date line, the body


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for server in started:
        if server.process.poll() is None:
            assert server.stop() == 0


@pytest.fixture
def guarded(servers: list[Server], tmp_path: Path) -> tuple[Server, dict[str, str]]:
    """A gateway with --auth and a named CORS origin; keys of `admin` (a super user), `alice`
    (read and write on topic t) and `bob` (nothing); topic t."""
    data = tmp_path / "data"
    keys = {name: make_key(data, name) for name in ("admin", "alice", "bob")}
    server = start_server(
        data, "--auth", "--super-user", "admin", "--cors-origins", ORIGIN,
        "--cors-allow-credentials",
    )  # fmt: skip
    servers.append(server)
    admin = bearer(keys["admin"])
    created = httpx.post(f"{server.url}/v1/topics", json={"name": "t"}, headers=admin)
    assert created.status_code == 201, created.text
    for operation in ("read", "write"):
        added = httpx.post(
            f"{server.url}/v1/acls", json=binding("alice", "topic", "t", operation), headers=admin
        )
        assert added.status_code == 201, added.text
    return server, keys


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def fast_served(server: Server, key: str | None = None) -> int:
    """`sluice_lane_requests_total`: what the fast routes answered (`key`: whose /metrics)."""
    headers = {} if key is None else bearer(key)
    metrics = httpx.get(f"{server.url}/metrics", headers=headers, timeout=WAIT_S)
    found = FAST_METRIC.search(metrics.content)
    assert found is not None, metrics.text
    return int(float(found.group(1)))


def produce(content_type: str, headers: dict[str, str], body: bytes = ONE) -> bytes:
    lines = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return (
        f"POST {PRODUCE} HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\n{lines}"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def fetch(accept: str, headers: dict[str, str]) -> bytes:
    lines = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return f"GET {FETCH} HTTP/1.1\r\nHost: x\r\nAccept: {accept}\r\n{lines}\r\n".encode()


async def exchange(server: Server, *requests: bytes) -> list[Answer]:
    """Each request on one keep-alive connection, in turn: its answer's head, without the
    Date line (headers in the order sent), and its body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    answers = []
    try:
        for data in requests:
            writer.write(data)
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT_S)
            length = re.search(rb"\r\nContent-Length: (\d+)\r\n", head)
            assert length is not None, head
            body = await asyncio.wait_for(reader.readexactly(int(length.group(1))), WAIT_S)
            answers.append((re.sub(rb"\r\nDate: [^\r]*", b"", head), body))
    finally:
        writer.close()
    return answers


def status_of(answer: Answer) -> int:
    return int(answer[0].split(b" ", 2)[1])


async def h2_exchange(
    server: Server, requests: list[tuple[list[tuple[bytes, bytes]], bytes]]
) -> list[tuple[list[tuple[bytes, bytes]], bytes]]:
    """Each (header list, body) request on a stream of one h2c connection, one after
    another: the answer's header list in order (without its date) and body."""
    client = H2Connection(H2Configuration(client_side=True, header_encoding=None))
    client.initiate_connection()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    answers = []
    try:
        for headers, body in requests:
            stream = client.get_next_available_stream_id()
            client.send_headers(stream, headers, end_stream=not body)
            if body:
                client.send_data(stream, body, end_stream=True)
            writer.write(client.data_to_send())
            head: list[tuple[bytes, bytes]] = []
            got = b""
            ended = False
            while not ended:
                data = await asyncio.wait_for(reader.read(65536), WAIT_S)
                assert data, "the server closed the connection"
                for event in client.receive_data(data):
                    if isinstance(event, ResponseReceived) and event.stream_id == stream:
                        head = [(k, v) for k, v in event.headers if k != b"date"]
                    elif isinstance(event, DataReceived):
                        got += event.data
                        client.acknowledge_received_data(
                            event.flow_controlled_length, event.stream_id
                        )
                    elif isinstance(event, StreamEnded) and event.stream_id == stream:
                        ended = True
                writer.write(client.data_to_send())
            answers.append((head, got))
    finally:
        writer.close()
    return answers


def h2_produce(content_type: bytes, extra: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    return [
        (b":method", b"POST"), (b":scheme", b"http"), (b":authority", b"x"),
        (b":path", PRODUCE.encode()), (b"content-type", content_type),
        (b"content-length", b"%d" % len(ONE)), *extra,
    ]  # fmt: skip


async def test_authenticated_produces_and_fetches_take_the_fast_routes(
    guarded: tuple[Server, dict[str, str]],
) -> None:
    """Once its key has been seen (the Application checks it first and remembers it), alice's
    produces and fetches are the fast routes', over HTTP/1.1 and h2c, and answered as the
    Application answers them (the offsets aside)."""
    server, keys = guarded
    alice = bearer(keys["alice"])
    (first,) = await exchange(server, produce(FAST, alice))  # a key not seen before
    assert status_of(first) == 200
    before = fast_served(server, keys["admin"])
    fast = await exchange(server, produce(FAST, alice), fetch(FAST, alice))
    general = await exchange(server, fetch(f"{FAST};q=1", alice), produce(GENERAL, alice))
    assert [status_of(a) for a in fast + general] == [200] * 4
    assert fast[0][0] == general[1][0]  # the same head; the bodies name their offsets
    assert orjson.loads(fast[0][1])["results"][0]["base_offset"] == 1
    assert fast[1] == general[0]
    h2_alice = [(b"authorization", alice["Authorization"].encode())]
    (h2,) = await h2_exchange(server, [(h2_produce(FAST.encode(), h2_alice), ONE)])
    assert dict(h2[0])[b":status"] == b"200"
    assert (
        fast_served(server, keys["admin"]) - before == 3
    )  # the fast produce and fetch, and the h2c produce


async def test_refusals_are_answered_as_the_middlewares_answer_them(
    guarded: tuple[Server, dict[str, str]],
) -> None:
    """401 without credentials and 403 for a principal without the ACL: the fast routes'
    answers and the Application's are the same bytes, CORS headers included, with and without
    an allowed Origin, on HTTP/1.1 and h2c; and the fast routes gave them."""
    server, keys = guarded
    bob = bearer(keys["bob"])
    await exchange(server, produce(FAST, bob))  # bob's key seen once, by the Application
    before = fast_served(server, keys["admin"])
    cases = [
        ({**credentials, **extra}, status)
        for extra in ({}, {"Origin": ORIGIN}, {"Origin": "https://elsewhere.example"})
        for credentials, status in (({}, 401), (bob, 403))
    ]
    fast = await exchange(
        server, *(r for h, _ in cases for r in (produce(FAST, h), fetch(FAST, h)))
    )
    general = await exchange(
        server, *(r for h, _ in cases for r in (produce(GENERAL, h), fetch(f"{FAST};q=1", h)))
    )
    assert [status_of(a) for a in fast] == [status for _, status in cases for _ in "pf"]
    assert fast == general
    assert fast_served(server, keys["admin"]) - before == 12
    with_origin = [(b"origin", ORIGIN.encode())]
    h2_bob = [(b"authorization", bob["Authorization"].encode()), *with_origin]
    for fields, h2_status in ((with_origin, b"401"), (h2_bob, b"403")):
        fast_h2, general_h2 = await h2_exchange(
            server,
            [(h2_produce(FAST.encode(), fields), ONE), (h2_produce(GENERAL.encode(), fields), ONE)],
        )
        assert dict(fast_h2[0])[b":status"] == h2_status and fast_h2 == general_h2
    assert fast_served(server, keys["admin"]) - before == 14


async def test_cors_headers_are_added_by_the_fast_routes(
    guarded: tuple[Server, dict[str, str]],
) -> None:
    """With an origin named, every answer varies by Origin; an allowed origin may read it
    (credentials too): the fast routes add the Application's headers, in its order."""
    server, keys = guarded
    alice = bearer(keys["alice"])
    await exchange(server, produce(FAST, alice))
    before = fast_served(server, keys["admin"])
    origins: tuple[dict[str, str], ...] = (
        {},
        {"Origin": ORIGIN},
        {"Origin": "https://elsewhere.example"},
    )
    fast = await exchange(server, *(fetch(FAST, {**alice, **o}) for o in origins))
    general = await exchange(server, *(fetch(f"{FAST};q=1", {**alice, **o}) for o in origins))
    assert fast == general
    for answer, origin in zip(fast, origins, strict=True):
        assert b"\r\nVary: Origin" in answer[0]
        allowed = b"\r\nAccess-Control-Allow-Origin: " + ORIGIN.encode() in answer[0]
        assert allowed == (origin.get("Origin") == ORIGIN)
    assert fast_served(server, keys["admin"]) - before == 3


async def test_a_revoked_key_is_refused_on_its_next_request(
    guarded: tuple[Server, dict[str, str]],
) -> None:
    """A key the fast routes know is refused on the request after its revocation: through
    the admin route at once; made offline, once the node reads its files (SIGHUP)."""
    server, keys = guarded
    alice, admin = bearer(keys["alice"]), bearer(keys["admin"])
    listed = httpx.get(f"{server.url}/v1/auth/keys", headers=admin).json()["keys"]
    alice_id = next(k["key_id"] for k in listed if k["principal"] == "alice")
    answers = await exchange(server, produce(FAST, alice), fetch(FAST, alice))
    assert [status_of(a) for a in answers] == [200, 200]
    revoked = httpx.delete(f"{server.url}/v1/auth/keys/{alice_id}", headers=admin)
    assert revoked.status_code == 204, revoked.text
    before = fast_served(server, keys["admin"])
    (refused,) = await exchange(server, produce(FAST, alice))
    assert status_of(refused) == 401
    assert (
        fast_served(server, keys["admin"]) == before
    )  # not known any more: the Application refused it

    carol = make_key(server.data_dir, "carol")
    granted = httpx.post(
        f"{server.url}/v1/acls", json=binding("carol", "topic", "t", "write"), headers=admin
    )
    assert granted.status_code == 201
    answers = await exchange(server, *[produce(FAST, bearer(carol))] * 2)
    assert [status_of(a) for a in answers] == [200, 200]
    keys_file = server.data_dir / "auth" / "keys.json"
    held = orjson.loads(keys_file.read_bytes())
    held["credentials"] = [c for c in held["credentials"] if c["principal"] != "carol"]
    keys_file.write_bytes(orjson.dumps(held))  # as `sluice auth revoke-key --data-dir` does
    server.process.send_signal(signal.SIGHUP)

    def refused_carol() -> bool:
        return status_of(asyncio.run(exchange(server, produce(FAST, bearer(carol))))[0]) == 401

    await asyncio.to_thread(until, refused_carol, "carol's key refused")


async def test_quotas_are_enforced_by_the_fast_routes(
    servers: list[Server], tmp_path: Path
) -> None:
    """Without auth, every client is ANONYMOUS: over its request rate, the fast routes answer
    the Application's 429 (Retry-After and all), and charge the bytes they produce."""
    server = start_server(tmp_path / "data")
    servers.append(server)
    assert httpx.post(f"{server.url}/v1/topics", json={"name": "t"}).status_code == 201
    quota = {"requests_per_second": 0.001, "produce_bytes_per_second": 10**9}
    assert httpx.put(f"{server.url}/v1/quotas/ANONYMOUS", json=quota).status_code == 200
    before = fast_served(server)
    served, fast, general = await exchange(
        server, produce(FAST, {}), produce(FAST, {}), produce(GENERAL, {})
    )
    assert fast_served(server) - before == 2  # the 200 and the first 429
    assert status_of(served) == 200
    assert status_of(fast) == status_of(general) == 429
    assert fast[0] == general[0]  # Retry-After included: 999 s either way
    assert _without_wait(fast[1]) == _without_wait(general[1])
    metrics = httpx.get(f"{server.url}/metrics").text
    charged = re.search(r'^sluice_principal_produce_bytes_total\{principal="ANONYMOUS"\} (\S+)$',
                        metrics, re.MULTILINE)  # fmt: skip
    assert charged is not None and float(charged.group(1)) == len(ONE)


def _without_wait(body: bytes) -> dict[str, object]:
    """A 429's problem with its milliseconds to wait left out (they pass between requests)."""
    problem = orjson.loads(body)
    assert isinstance(problem.pop("retry_after_ms"), int)
    problem["detail"] = re.sub(r"\d+ ms", "N ms", problem["detail"])
    return dict(problem)
