"""A real server with its default admission rule (the suite's other gateways turn it off,
tests/conftest.py): a burst past what it can serve is shed with 503, Retry-After and a
problem, and a refused produce appends nothing."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import httpx
import orjson
import pytest

from tests.e2e.conftest import start_server

CONNECTIONS = 2000
PIPELINED = 30  # a connection's requests, all in its socket's buffer before the server reads
BODY = b'{"records": [{"value": 1}]}'
REQUEST = (
    b"POST /v1/topics/t/partitions/0/records?acks=1 HTTP/1.1\r\nHost: sluice\r\n"
    b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
)


def read_answers(sock: socket.socket, count: int) -> list[tuple[int, dict[str, str], bytes]]:
    """`count` HTTP/1.1 answers from a connection: status, headers, body."""
    data = b""
    out: list[tuple[int, dict[str, str], bytes]] = []
    while len(out) < count:
        head_end = data.find(b"\r\n\r\n")
        if head_end >= 0:
            lines = data[:head_end].decode("latin-1").split("\r\n")
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            end = head_end + 4 + int(headers.get("content-length", "0"))
            if len(data) >= end:
                out.append((int(lines[0].split()[1]), headers, data[head_end + 4 : end]))
                data = data[end:]
                continue
        chunk = sock.recv(1 << 16)
        assert chunk, f"the connection closed after {len(out)} answers"
        data += chunk
    return out


def test_a_burst_past_capacity_is_shed_with_503_and_nothing_refused_is_appended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SLUICE_ADMISSION_TARGET_DELAY_MS", raising=False)  # the default rule
    server = start_server(tmp_path / "data")
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            assert http.post("/v1/topics", json={"name": "t"}).status_code == 201
        socks = [
            socket.create_connection(("127.0.0.1", server.port), timeout=60)
            for _ in range(CONNECTIONS)
        ]
        # The burst waits in the kernel while the server is stopped, then lands all at once:
        # a queue far deeper than the default 50 ms of delay the rule allows.
        os.kill(server.process.pid, signal.SIGSTOP)
        try:
            for sock in socks:
                sock.sendall(REQUEST * PIPELINED)
        finally:
            os.kill(server.process.pid, signal.SIGCONT)
        answers = [a for sock in socks for a in read_answers(sock, PIPELINED)]
        for sock in socks:
            sock.close()
        statuses = [status for status, _, _ in answers]
        assert set(statuses) <= {200, 503}, set(statuses)
        refused = [(headers, body) for status, headers, body in answers if status == 503]
        assert refused, "no produce was shed"
        for headers, body in refused[:10]:
            assert headers["content-type"].startswith("application/problem+json")
            assert int(headers["retry-after"]) >= 1
            problem = orjson.loads(body)
            assert problem["status"] == 503 and problem["code"]
        with httpx.Client(base_url=server.url, timeout=30) as http:
            offsets = http.get("/v1/topics/t/partitions/0/offsets").json()
        assert offsets["offset"] == statuses.count(200)  # each admitted one appended one
    finally:
        if server.process.poll() is None:
            assert server.stop() == 0
