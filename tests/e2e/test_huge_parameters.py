"""A real `sluice serve` asked for absurd amounts. Every numeric query parameter of a fetch (a
partition's or a group member's) and of a produce has a maximum, the one openapi.yaml states
(the default of a server setting): a value past it, or no plain decimal integer at all
(10**18, 2**63, 2**64, NaN, inf, 1e9, 23 digits), is refused with 400 INVALID_PARAMETER naming
the parameter and its bounds, never clamped, and never parks a long-poll. Long-polls at the
longest wait allowed are held by the hundred while other clients are served, and end when data
arrives or the server shuts down. Waits are on answers and the parked-fetch gauge."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import orjson
import yaml

from loadtests.common import rss_bytes
from openapi import SPEC
from tests.e2e.test_hostile_clients import (
    PROBLEM,
    WAIT_S,
    client_of,
    exchange,
    parse_answer,
    start_logged,
)
from tests.e2e.test_http2_longpoll import parked

PARTITION = "/v1/topics/t/partitions/0/records"
PRODUCE = "/v1/topics/t/records"
HUGE = [
    str(10**18),
    str(2**63 - 1),
    str(2**63),
    str(2**64),
    "9" * 23,
    "-1",
    "1e9",
    "1.0",
    "NaN",
    "inf",
    "-inf",
    "Infinity",
    "+1",
    "0x10",
    "\uff11",  # a fullwidth 1
]
IN_THE_LOG_RANGE = {str(10**18), str(2**63 - 1), "-1"}  # 64-bit offsets: 416, not 400
POLLS_H1 = 400  # each on a connection of its own
POLLS_H2 = 100  # on one connection: the streams httpx opens on one at most
MAX_RSS = 1 << 30


def documented_bounds(path: str, method: str) -> dict[str, tuple[int, int]]:
    """Each integer query parameter of an operation: (minimum, maximum) in openapi.yaml."""
    spec = yaml.safe_load(SPEC.read_text())

    def resolve(node: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in node:
            target = spec
            for part in node["$ref"].removeprefix("#/").split("/"):
                target = target[part]
            node = target
        return node

    bounds = {}
    for raw in spec["paths"][path][method]["parameters"]:
        param = resolve(raw)
        schema = resolve(param["schema"])
        integers = [
            s for s in map(resolve, schema.get("anyOf", [schema])) if s["type"] == "integer"
        ]
        if param["in"] == "query" and integers and "maximum" in integers[0]:
            bounds[param["name"]] = (integers[0]["minimum"], integers[0]["maximum"])
    return bounds


def bad_values(name: str) -> list[tuple[str, int]]:
    """The values to try for a parameter and the status each must get."""
    if name == "offset":
        return [(v, 416 if v in IN_THE_LOG_RANGE else 400) for v in HUGE]
    if name == "acks":
        return [(v, 200 if v == "-1" else 400) for v in HUGE]  # -1: Kafka's name for all
    return [(v, 400) for v in HUGE]


def what_is_wrong(answer: httpx.Response, name: str, value: str, status: int) -> list[str]:
    """What is wrong with the answer to `name=value`: nothing, [], if it has `status` and, if
    it is a problem, the right code and a detail naming the parameter."""
    where = f"{answer.request.method} {answer.request.url.path} {name}={value!r}"
    if answer.status_code != status:
        return [f"{where}: {answer.status_code} {answer.text}, expected {status}"]
    if status < 400:
        return []
    doc = answer.json()
    code = "OFFSET_OUT_OF_RANGE" if status == 416 else "INVALID_PARAMETER"
    if answer.headers["content-type"] != PROBLEM or doc["code"] != code:
        return [f"{where}: {answer.headers['content-type']} {doc}, expected {code}"]
    if status == 400 and name not in doc["detail"]:
        return [f"{where}: the detail does not name the parameter: {doc['detail']}"]
    return []


async def try_parameters(
    http: httpx.AsyncClient, method: str, path: str, documented: str, base: dict[str, str]
) -> list[str]:
    """Each numeric parameter at its documented maximum (served at once), one past either
    bound (400 stating them) and at each hostile value, the others as in `base`."""
    bounds = documented_bounds(documented, method.lower())
    body = {"records": [{"value": 1}]} if method == "POST" else None
    wrong: list[str] = []
    for name in [*bounds, "acks"] if method == "POST" else bounds:
        tries, past, stated = bad_values(name), [], ""
        if name in bounds:
            low, high = bounds[name]
            past = [str(low - 1), str(high + 1)]
            stated = "a 64-bit integer" if name == "offset" else f"between {low} and {high}"
            # The largest offset is past the log; a producer epoch goes with a transaction.
            at_most = {"offset": 416, "producer_epoch": 400}.get(name, 200)
            tries = [(str(high), at_most), *[(value, 400) for value in past], *tries]
        for value, status in tries:
            answer = await http.request(method, path, params={**base, name: value}, json=body)
            found = what_is_wrong(answer, name, value, status)
            if not found and value in past and stated not in answer.json()["detail"]:
                found = [f"{name}={value}: the answer does not say {stated!r}: {answer.text}"]
            wrong += found
    return wrong


async def join(http: httpx.AsyncClient, group: str, reset: str) -> str:
    joined = await http.post(
        f"/v1/groups/{group}/members", json={"topics": ["t"], "auto_offset_reset": reset}
    )
    assert joined.status_code == 201, joined.text
    member: str = joined.json()["member_id"]
    return member


async def test_huge_and_malformed_numbers_are_refused(tmp_path: Path) -> None:
    gateway = start_logged(tmp_path)
    try:
        async with client_of(gateway) as http:
            assert (await http.post("/v1/topics", json={"name": "t"})).status_code == 201
            produced = await http.post(PRODUCE, json={"records": [{"value": "first"}]})
            assert produced.status_code == 200, produced.text
            member = await join(http, "g", "earliest")
            group_path = f"/v1/groups/g/members/{member}/records"
            wrong = [
                # min_bytes=0: a fetch at the longest timeout_ms answers at once.
                *await try_parameters(
                    http, "GET", PARTITION, "/v1/topics/{topic}/partitions/{partition}/records",
                    {"offset": "0", "min_bytes": "0", "timeout_ms": "0"},
                ),
                *await try_parameters(
                    http, "GET", group_path, "/v1/groups/{group}/members/{member}/records",
                    {"min_bytes": "0", "timeout_ms": "0"},
                ),
                *await try_parameters(http, "POST", PRODUCE, "/v1/topics/{topic}/records", {}),
            ]  # fmt: skip
            assert not wrong, "\n".join(wrong)
            assert await parked(http) == 0
            assert (await http.get("/healthz")).status_code == 200
    finally:
        assert gateway.server.stop() == 0
    assert not [line for line in gateway.lines() if "Traceback" in line]


async def get(port: int, path: str, **params: str) -> tuple[int, Any]:
    """GET on a connection of its own (httpx's pool slows down with hundreds of connections):
    the status and the JSON document answered."""
    target = f"{path}?{urlencode(params)}"
    request = f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
    status, _, body = parse_answer(await exchange(port, request))
    return status, orjson.loads(body)


async def get_h2(client: httpx.AsyncClient, path: str, **params: str) -> tuple[int, Any]:
    answer = await client.get(path, params=params)
    return answer.status_code, answer.json()


async def until_parked(http: httpx.AsyncClient, count: int, polls: list[Any]) -> None:
    while await parked(http) < count:
        done = [p for p in polls if p.done()]
        assert not done, f"a long-poll ended early: {done[0].exception() or done[0].result()}"


async def test_many_long_polls_at_the_longest_wait(tmp_path: Path) -> None:
    """500 long-polls (and a group member's) at the longest timeout_ms: held while 500 asking
    for 10**12 ms are refused and other clients are served; a produce answers them all. Then
    500 more are answered, empty, by a graceful shutdown."""
    path = "/v1/topics/{topic}/partitions/{partition}/records"
    longest = str(documented_bounds(path, "get")["timeout_ms"][1])
    gateway = start_logged(tmp_path)
    port, pid = gateway.server.port, gateway.server.process.pid
    try:
        async with (
            client_of(gateway, http1=False, http2=True) as h2,
            client_of(gateway) as other,
        ):
            assert (await other.post("/v1/topics", json={"name": "t"})).status_code == 201
            assert (await other.post("/v1/topics", json={"name": "u"})).status_code == 201
            member = await join(other, "g", "latest")
            rss_before = rss_bytes(pid)
            polls = [
                get(port, f"/v1/groups/g/members/{member}/records", timeout_ms=longest),
                *(get(port, PARTITION, offset="0", timeout_ms=longest) for _ in range(POLLS_H1)),
                *(get_h2(h2, PARTITION, offset="0", timeout_ms=longest) for _ in range(POLLS_H2)),
            ]
            waiting = [asyncio.create_task(poll) for poll in polls]
            await until_parked(other, len(waiting), waiting)

            huge = [get(port, PARTITION, timeout_ms=str(10**12)) for _ in range(500)]
            for status, doc in await asyncio.gather(*huge):
                assert (status, doc["code"]) == (400, "INVALID_PARAMETER"), doc
            await serve_another_client(other)
            assert await parked(other) == len(waiting)
            rss = rss_bytes(pid)
            print(f"\nRSS {rss_before / 2**20:.0f} MiB, {rss / 2**20:.0f} MiB, {len(polls)} parked")
            assert rss < MAX_RSS

            produced = await other.post(PRODUCE, json={"records": [{"value": "wake"}]})
            assert produced.status_code == 200, produced.text
            for status, doc in await asyncio.gather(*waiting):
                assert status == 200, doc
                assert [r["value"] for r in doc["records"]] == ["wake"]
            assert await parked(other) == 0

            # HTTP/1.1 only: httpx fails every stream of a connection the server sends GOAWAY
            # on, even those the GOAWAY says will be answered (tests/gateway/test_http2.py
            # checks that the server answers them).
            polls = [
                get(port, PARTITION, offset="1", timeout_ms=longest)
                for _ in range(POLLS_H1 + POLLS_H2)
            ]
            waiting = [asyncio.create_task(poll) for poll in polls]
            await until_parked(other, len(waiting), waiting)
            gateway.server.process.send_signal(signal.SIGTERM)
            for status, doc in await asyncio.gather(*waiting):
                assert (status, doc["records"]) == (200, []), doc
        assert await asyncio.to_thread(gateway.server.process.wait, WAIT_S) == 0
    finally:
        if gateway.server.process.poll() is None:
            gateway.server.kill()
    assert not [line for line in gateway.lines() if "Traceback" in line]


async def serve_another_client(http: httpx.AsyncClient) -> None:
    assert (await http.get("/healthz")).status_code == 200
    produced = await http.post("/v1/topics/u/records", json={"records": [{"value": "other"}]})
    assert produced.status_code == 200, produced.text
    fetched = await http.get("/v1/topics/u/partitions/0/records", params={"timeout_ms": "0"})
    assert [r["value"] for r in fetched.json()["records"]] == ["other"]
