"""Admission control on a real `sluice serve`: past `--admission-max-inflight` produces in
progress, every produce (fast routes or the Application, HTTP/1.1 or h2c, /v1 or REST Proxy
v2) is answered 503 SERVER_OVERLOADED with Retry-After at once, in its route's dialect, and
appends nothing; fetches are still served; a flood of produces is answered without one more in
progress; once the held produces end, produces are admitted again. The produces held in
progress are chunked bodies left unfinished: the Application admitted them and waits for the
rest."""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import Server, finish, held_produce, start_server, until

WAIT_S = 30.0
PROBLEM = "application/problem+json"
V2_JSON = "application/vnd.kafka.json.v2+json"
LIMIT = 2
RECORDS = "/v1/topics/t/partitions/0/records"
BODY = b'{"records":[{"value":1}]}'


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[Server]:
    running = start_server(tmp_path / "data", "--admission-max-inflight", str(LIMIT))
    answer = httpx.post(
        f"{running.url}/v1/topics", json={"name": "t", "partitions": 1}, timeout=WAIT_S
    )
    assert answer.status_code == 201, answer.text
    yield running
    if running.process.poll() is None:
        assert running.stop() == 0


def metric(server: Server, name: str) -> float:
    text = httpx.get(f"{server.url}/metrics", timeout=WAIT_S).text
    found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert found is not None, name
    return float(found.group(1))


def refused(answer: httpx.Response, media: str = PROBLEM) -> None:
    assert answer.status_code == 503, answer.text
    assert answer.headers["Retry-After"] == "1"
    assert answer.headers["Content-Type"] == media
    if media == PROBLEM:
        doc = answer.json()
        assert doc["code"] == "SERVER_OVERLOADED", doc
        assert "nothing was appended" in doc["detail"]


def end_offset(server: Server) -> int:
    doc = httpx.get(f"{server.url}/v1/topics/t", timeout=WAIT_S).json()
    return int(doc["partitions"][0]["log_end_offset"])


async def flood(server: Server, count: int) -> list[int]:
    """`count` produces at once, each on its own connection: their statuses."""
    limits = httpx.Limits(max_connections=count, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=WAIT_S) as http:
        answers = await asyncio.gather(
            *(
                http.post(RECORDS, content=BODY, headers={"Content-Type": "application/json"})
                for _ in range(count)
            )
        )
    return [answer.status_code for answer in answers]


def test_past_the_limit_every_produce_is_refused_at_once_and_appends_nothing(
    limited: Server,
) -> None:
    held = [held_produce(limited.port, RECORDS, BODY) for _ in range(LIMIT)]
    until(lambda: metric(limited, "sluice_admission_inflight") == LIMIT, "the held produces")
    url = limited.url
    json_type = {"Content-Type": "application/json"}

    refused(httpx.post(url + RECORDS, content=BODY, headers=json_type, timeout=WAIT_S))
    with httpx.Client(http1=False, http2=True, timeout=WAIT_S) as h2c:
        answer = h2c.post(url + RECORDS, content=BODY, headers=json_type)
        assert answer.http_version == "HTTP/2"
        refused(answer)
    v2 = httpx.post(
        url + "/topics/t", content=BODY, headers={"Content-Type": V2_JSON}, timeout=WAIT_S
    )
    refused(v2, "application/vnd.kafka.v2+json")
    assert v2.json()["error_code"] == 50003, v2.json()  # v2: a retriable error
    third = held_produce(
        limited.port, RECORDS, BODY
    )  # the Application's own admission: refused before its body
    answer_bytes = third.recv(65536)
    third.close()
    assert answer_bytes.startswith(b"HTTP/1.1 503"), answer_bytes
    assert b"SERVER_OVERLOADED" in answer_bytes and b"Retry-After: 1" in answer_bytes

    statuses = asyncio.run(flood(limited, 100))
    assert statuses == [503] * 100
    assert metric(limited, "sluice_admission_inflight") == LIMIT
    fetched = httpx.get(url + RECORDS, params={"offset": 0, "timeout_ms": 0}, timeout=WAIT_S)
    assert fetched.status_code == 200  # fetches are not shed
    assert end_offset(limited) == 0

    for sock in held:
        assert finish(sock, BODY).startswith(b"HTTP/1.1 200 OK")
    assert end_offset(limited) == LIMIT
    again = httpx.post(url + RECORDS, content=BODY, headers=json_type, timeout=WAIT_S)
    assert again.status_code == 200, again.text
    assert end_offset(limited) == LIMIT + 1
    traffic = httpx.get(url + "/v1/traffic", timeout=WAIT_S).json()["admission"]
    assert traffic["shed"] == metric(limited, "sluice_admission_shed_total") >= 104
    assert traffic["admitted"] >= LIMIT + 1 and traffic["inflight"] == 0


def test_pipelined_produces_past_the_limit_are_refused_in_order_on_their_connection(
    limited: Server,
) -> None:
    """Produces pipelined on one keep-alive connection while the limit is taken: each is
    answered 503 at once and in order (the connection writes a refusal as it reads its
    request), and the connection goes on serving once there is room again."""
    request = (
        f"POST {RECORDS} HTTP/1.1\r\nHost: sluice\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(BODY)}\r\n\r\n"
    ).encode() + BODY
    with socket.create_connection(("127.0.0.1", limited.port), timeout=WAIT_S) as sock:
        sock.sendall(request)  # a first produce: its head is known from here on
        assert read_answers(sock, 1)[0].startswith(b"HTTP/1.1 200")
        held = [held_produce(limited.port, RECORDS, BODY) for _ in range(LIMIT)]
        until(lambda: metric(limited, "sluice_admission_inflight") == LIMIT, "the held produces")
        sock.sendall(request * 20)
        answers = read_answers(sock, 20)
        assert all(a.startswith(b"HTTP/1.1 503") and b"SERVER_OVERLOADED" in a for a in answers)
        for other in held:
            assert finish(other, BODY).startswith(b"HTTP/1.1 200 OK")
        sock.sendall(request * 3)
        assert all(a.startswith(b"HTTP/1.1 200") for a in read_answers(sock, 3))
    assert end_offset(limited) == 1 + LIMIT + 3


def read_answers(sock: socket.socket, count: int) -> list[bytes]:
    """The next `count` HTTP/1.1 answers on `sock` (Content-Length bodies)."""
    data, answers = b"", list[bytes]()
    while len(answers) < count:
        head_end = data.find(b"\r\n\r\n")
        if head_end < 0:
            chunk = sock.recv(65536)
            assert chunk, answers
            data += chunk
            continue
        found = re.search(rb"Content-Length: (\d+)", data[:head_end])
        assert found is not None, data[:head_end]
        length = int(found.group(1))
        end = head_end + 4 + length
        while len(data) < end:
            chunk = sock.recv(65536)
            assert chunk, answers
            data += chunk
        answers.append(data[:end])
        data = data[end:]
    return answers
