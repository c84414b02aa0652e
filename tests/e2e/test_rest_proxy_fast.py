"""REST Proxy v2 on a real `sluice serve`: json-format produces served on the fast routes answer
exactly what the v2 route answers (the same request with `; charset=utf-8` after its media type
goes to the Application), over HTTP/1.1 and HTTP/2 (curl with prior knowledge); what the fast
routes leave (bodies the C path does not build, bad input) gets the route's v2 errors; and the
records read back through v2 instances, json and binary, are those produced."""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.e2e.conftest import Server, start_server
from tests.e2e.test_fast_route_checks import bearer, exchange, guarded, servers, status_of  # noqa: F401 (fixtures: --auth)
from tests.e2e.test_fast_route_checks import fast_served as served_to
from tests.e2e.test_fast_routes import Connection, comparable, create_topic, fast_served

WAIT_S = 30.0
V2 = "application/vnd.kafka.v2+json"
JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
RECORDS: list[dict[str, Any]] = [
    {"key": "user-1", "value": {"event": "click", "n": 1}},
    {"key": 42, "value": [1, 2]},
    {"key": "user-2", "value": "text", "partition": 2},
    {"key": True, "value": None},
]


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Server]:
    running = start_server(tmp_path / "data")
    yield running
    if running.process.poll() is None:
        assert running.stop() == 0


def post(target: str, body: bytes, content_type: str, *extra: str) -> bytes:
    lines = "".join(f"{line}\r\n" for line in extra)
    return (
        f"POST {target} HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\n{lines}"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def test_a_v2_produce_on_the_fast_routes_answers_as_its_route(gateway: Server) -> None:
    for name in ("fast", "routed"):
        create_topic(gateway, name, partitions=3)
    body = orjson.dumps({"records": RECORDS})
    connection = await Connection.open(gateway)
    try:
        for target in ("/topics/{}?acks=1", "/topics/{}/", "/topics/{}/partitions/2"):
            records = RECORDS if "partitions" not in target else [RECORDS[2]]
            body = orjson.dumps({"records": records})
            before = fast_served(gateway)
            fast = await connection.exchange(post(target.format("fast"), body, JSON_V2))
            assert fast_served(gateway) == before + 1
            routed = await connection.exchange(
                post(target.format("routed"), body, JSON_V2 + "; charset=utf-8")
            )
            assert fast_served(gateway) == before + 1
            assert comparable(fast) == comparable(routed)
            assert fast[0] == b"HTTP/1.1 200 OK" and fast[1]["content-type"] == V2
    finally:
        connection.close()
    assert _read(gateway, "fast", "json") == _read(gateway, "routed", "json")
    assert _read(gateway, "fast", "binary") == _read(gateway, "routed", "binary")


def _read(server: Server, topic: str, embedded: str) -> list[dict[str, Any]]:
    """Every record of the topic through a new v2 instance, in (partition, offset) order."""
    group = f"{topic}-{embedded}"
    headers = {"Content-Type": V2}
    with httpx.Client(base_url=server.url, timeout=WAIT_S) as client:
        config = {"name": "r", "format": embedded, "auto.offset.reset": "earliest"}
        assert client.post(f"/consumers/{group}", json=config, headers=headers).is_success
        base = f"/consumers/{group}/instances/r"
        subscribed = client.post(f"{base}/subscription", json={"topics": [topic]}, headers=headers)
        assert subscribed.status_code == 204
        accept = {"Accept": JSON_V2 if embedded == "json" else BINARY_V2}
        got: list[dict[str, Any]] = []
        while len(got) < 5:
            answer = client.get(f"{base}/records?timeout=1000", headers=accept)
            assert answer.status_code == 200, answer.text
            got += answer.json()
    for record in got:
        assert isinstance(record.pop("timestamp"), int)  # the produce's time: not comparable
        del record["topic"]
    return sorted(got, key=lambda r: (r["partition"], r["offset"]))


def test_records_read_back_in_both_formats(gateway: Server) -> None:
    create_topic(gateway, "t", partitions=1)
    records = [{"key": r["key"], "value": r["value"]} for r in RECORDS]
    records.append({"key": "k\n", "value": 1})
    produced = httpx.post(
        f"{gateway.url}/topics/t",
        content=orjson.dumps({"records": records}),
        headers={"Content-Type": JSON_V2},
    )
    assert produced.status_code == 200, produced.text
    as_json = _read(gateway, "t", "json")
    assert [(r["key"], r["value"]) for r in as_json] == [(r["key"], r["value"]) for r in records]
    as_binary = _read(gateway, "t", "binary")
    # Keys are stored as their JSON text (the key "user-1" is the 8 bytes "user-1" quoted).
    assert [base64.b64decode(r["key"]) for r in as_binary] == [
        b'"user-1"',
        b"42",
        b'"user-2"',
        b"true",
        b'"k\\n"',
    ]
    assert base64.b64decode(as_binary[0]["value"]) == b'{"event":"click","n":1}'


def test_a_v2_produce_over_http2(gateway: Server) -> None:
    create_topic(gateway, "h2", partitions=3)
    before = fast_served(gateway)
    answer = subprocess.run(
        ["curl", "-sS", "--http2-prior-knowledge", "-w", "\n%{http_version} %{http_code}",
         "-H", f"Content-Type: {JSON_V2}", "--data-binary", orjson.dumps({"records": RECORDS}),
         f"{gateway.url}/topics/h2?acks=all"],
        capture_output=True, check=True, timeout=WAIT_S,
    )  # fmt: skip
    body, _, status = answer.stdout.rpartition(b"\n")
    assert status == b"2 200"
    offsets = orjson.loads(body)["offsets"]
    assert [o["error_code"] for o in offsets] == [None] * 4
    assert offsets[2]["partition"] == 2
    # Served on the fast routes when the body came with the headers; a DATA frame read apart
    # from them sends it to the route (the same answer): at most this one was counted.
    assert fast_served(gateway) - before in (0, 1)
    bad = subprocess.run(
        ["curl", "-sS", "--http2-prior-knowledge", "-w", "\n%{http_code}",
         "-H", f"Content-Type: {JSON_V2}", "--data-binary", '{"records":[{"value":1,"x":2}]}',
         f"{gateway.url}/topics/h2"],
        capture_output=True, check=True, timeout=WAIT_S,
    )  # fmt: skip
    body, _, status = bad.stdout.rpartition(b"\n")
    assert status == b"422"
    assert orjson.loads(body)["error_code"] == 422


@pytest.mark.parametrize(
    ("target", "body", "content_type", "status", "code"),
    [
        ("/topics/t", b'{"records":[{"value":1', JSON_V2, 400, 400),
        ("/topics/t", b'{"records":[]}', JSON_V2, 422, 422),
        ("/topics/t", b'{"records":[{"value":1,"headers":{}}]}', JSON_V2, 422, 422),
        ("/topics/t", b'{"records":[{"value":1,"partition":7}]}', JSON_V2, 404, 40402),
        ("/topics/t/partitions/9", b'{"records":[{"value":1}]}', JSON_V2, 404, 40402),
        ("/topics/nope", b'{"records":[{"value":1}]}', JSON_V2, 404, 40401),
        (
            "/topics/t",
            b'{"value_schema_id":1,"records":[{"value":1}]}',
            "application/vnd.kafka.avro.v2+json",
            422,
            42205,
        ),
        (
            "/topics/t",
            b'{"records":[{"value":1}]}',
            "application/vnd.kafka.avro.v2+json",
            422,
            42202,
        ),
        ("/topics/t", b'{"records":[{"value":1}]}', "text/plain", 415, 415),
        ("/topics/t", b'{"records":[{"value":"@@"}]}', BINARY_V2, 400, 400),
        ("/topics/t", b'{"records":[{"value":"YQ==","partition":-1}]}', BINARY_V2, 422, 42205),
        ("/topics/t?acks=2", b'{"records":[{"value":1}]}', JSON_V2, 400, 400),
    ],
)
def test_bad_v2_produces_get_v2_errors(
    gateway: Server, target: str, body: bytes, content_type: str, status: int, code: int
) -> None:
    create_topic(gateway, "t", partitions=3)
    answer = httpx.post(
        f"{gateway.url}{target}", content=body, headers={"Content-Type": content_type}
    )
    assert (answer.status_code, answer.json()["error_code"]) == (status, code), answer.text
    assert answer.headers["content-type"] == V2


async def test_checks_on_the_fast_routes_answer_v2_errors(request: pytest.FixtureRequest) -> None:
    """With --auth, a v2 produce on the fast routes is refused as the route refuses it (401
    40101, 403 40301 in v2's body, the same bytes), and alice's is served there."""
    server, keys = request.getfixturevalue("guarded")
    body = orjson.dumps({"records": RECORDS[:2]})
    alice, bob = bearer(keys["alice"]), bearer(keys["bob"])
    lines = {
        name: [f"Authorization: {h['Authorization']}"] for name, h in (("a", alice), ("b", bob))
    }
    await exchange(server, post("/topics/t", body, JSON_V2, *lines["a"]))  # keys seen once
    await exchange(server, post("/topics/t", body, JSON_V2, *lines["b"]))
    before = served_to(server, keys["admin"])
    fast = await exchange(
        server, *(post("/topics/t", body, JSON_V2, *lines.get(who, [])) for who in ("", "b", "a"))
    )
    routed = await exchange(
        server,
        *(
            post("/topics/t", body, JSON_V2 + "; charset=utf-8", *lines.get(w, []))
            for w in ("", "b")
        ),
    )
    assert [status_of(a) for a in fast] == [401, 403, 200]
    assert fast[:2] == routed
    assert [orjson.loads(a[1])["error_code"] for a in fast[:2]] == [40101, 40301]
    assert served_to(server, keys["admin"]) - before == 3
