"""A real `sluice serve` against clients that misbehave on purpose: malformed requests, headers
sent a byte at a time, idle connections, HTTP/2 connections that never send SETTINGS or that
upload on many streams at once, and a consumer reading a value no decoder can read. Waits are
on the server's answers and on end-of-file, never on the clock."""

from __future__ import annotations

import asyncio
import gzip
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx
import orjson
import pytest
from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.errors import ErrorCodes
from h2.events import ConnectionTerminated, DataReceived, ResponseReceived, StreamEnded
from hyperframe.frame import Frame, GoAwayFrame, SettingsFrame

from engine import batch as fmt
from gateway.http.connections import BAD_REQUESTS_PER_MINUTE
from gateway.http.http2 import PREFACE
from replication.node_contract import APPEND_PREFIX
from tests.e2e.conftest import REPO, Server, start_server

PROBLEM = "application/problem+json"
WAIT_S = 30.0  # a bound on every wait for the server, far above the timeouts under test


@dataclass
class Logged:
    """A gateway process and the file its log (stderr) goes to."""

    server: Server
    log: Path

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines()


Launch = Callable[..., Logged]  # the `launch` fixture: options -> a started gateway


def start_logged(tmp_path: Path, *extra: str) -> Logged:
    tmp_path.mkdir(parents=True, exist_ok=True)
    log = tmp_path / "gateway.log"
    return Logged(start_server(tmp_path / "data", *extra, log=log), log)


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Launch]:
    """Start a gateway with these options (stopped, and its exit checked, after the test)."""
    started: list[Logged] = []

    def go(*options: str) -> Logged:
        started.append(start_logged(tmp_path / str(len(started)), *options))
        return started[-1]

    yield go
    for running in started:
        if running.server.process.poll() is None:
            assert running.server.stop() == 0


def client_of(gateway: Logged, **options: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=gateway.server.url, timeout=WAIT_S, **options)


async def exchange(port: int, data: bytes) -> bytes:
    """Send `data` on a new connection and read until the server closes it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        return await asyncio.wait_for(reader.read(), WAIT_S)
    finally:
        writer.close()


def parse_answer(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, body[: int(headers.get("content-length", 0))]


def problem_code(raw: bytes, status: int) -> str:
    got, headers, body = parse_answer(raw)
    assert got == status, raw
    assert headers["content-type"] == PROBLEM, raw
    doc = orjson.loads(body)
    assert doc["status"] == status
    code: str = doc["code"]
    return code


# -- what the HTTP/1.1 parser refuses -------------------------------------------------------------

MALFORMED = [
    b"GET / HTTP/1.1\r\nHost: x\r\nFoo bar\r\n\r\n",  # a header without a colon
    b"GET /\x01 HTTP/1.1\r\nHost: x\r\n\r\n",  # a control byte in the target
    b"GET / HTTP/9.9\r\nHost: x\r\n\r\n",  # no such version
    b"POST /v1/topics/t/records HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"zz\r\n{}\r\n0\r\n\r\n",  # a chunk size that is no number
    b"POST /v1/topics HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n{}",
]


async def test_malformed_requests_are_problems_logged_briefly(launch: Launch) -> None:
    """Each gets 400 MALFORMED_REQUEST as problem+json; the log holds one short line per bad
    request, at most BAD_REQUESTS_PER_MINUTE of them, and never a traceback."""
    gateway = launch()
    port = gateway.server.port
    sent = 0
    while sent < BAD_REQUESTS_PER_MINUTE + 10:
        for request in MALFORMED:
            assert problem_code(await exchange(port, request), 400) == "MALFORMED_REQUEST"
            sent += 1
    assert gateway.server.stop() == 0
    lines = gateway.lines()
    noted = [line for line in lines if "bad request from 127.0.0.1" in line]
    assert len(noted) == BAD_REQUESTS_PER_MINUTE, lines
    assert not [line for line in lines if "Traceback" in line or "aiohttp.server" in line]


async def test_a_malformed_chunk_size_mid_body_is_400_at_once(launch: Launch) -> None:
    """The handler is reading the body (it asked for it: 100 Continue) when a bad chunk size
    comes: it answers 400 then, not 408 once the body timeout (300 s here) runs out."""
    gateway = launch("--body-read-timeout", "300")
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.server.port)
    try:
        writer.write(
            b"POST /v1/topics/t/records HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Expect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        continued = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT_S)
        assert continued.startswith(b"HTTP/1.1 100")
        writer.write(b'5\r\n{"rec\r\nzz\r\n')
        answer = await asyncio.wait_for(reader.read(), WAIT_S)
    finally:
        writer.close()
    assert problem_code(answer, 400) == "MALFORMED_REQUEST"
    assert b"chunk size" in answer
    assert gateway.server.stop() == 0
    assert not [line for line in gateway.lines() if "Traceback" in line]


async def test_an_unsupported_content_encoding_is_a_problem(launch: Launch) -> None:
    """aiohttp's own answer was a plain-text 400 asking to install Brotli."""
    async with client_of(launch()) as http:
        assert (await http.post("/v1/topics", json={"name": "t"})).status_code == 201
        answer = await http.post(
            "/v1/topics/t/records",
            content=b"\x0b\x03\x80{}\x03",
            headers={"Content-Type": "application/json", "Content-Encoding": "br"},
        )
    assert answer.status_code == 415
    assert answer.headers["content-type"] == PROBLEM
    assert answer.json()["code"] == "UNSUPPORTED_ENCODING"


async def test_gzip_bodies_are_decoded_over_http2(launch: Launch) -> None:
    """HTTP/2 bodies take the same decoding path as HTTP/1.1 ones."""
    gateway = launch()
    async with client_of(gateway, http1=False, http2=True) as h2:
        assert (await h2.post("/v1/topics", json={"name": "t"})).status_code == 201
        produced = await h2.post(
            "/v1/topics/t/records",
            content=gzip.compress(b'{"records": [{"value": {"h2": true}}]}'),
            headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
        )
        assert produced.status_code == 200, produced.text
        assert produced.http_version == "HTTP/2"
        fetched = await h2.get("/v1/topics/t/partitions/0/records", params={"timeout_ms": 0})
        assert [r["value"] for r in fetched.json()["records"]] == [{"h2": True}]


# -- slow and idle clients ------------------------------------------------------------------------


async def test_headers_sent_a_byte_at_a_time_are_cut_off(launch: Launch) -> None:
    """Each byte arrives well within the deadline, the headers as a whole do not: 408, then
    the connection closes (before, it stayed open for good)."""
    gateway = launch("--header-read-timeout", "0.5", "--keepalive-timeout", "300")
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.server.port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")

    async def trickle() -> None:
        with suppress(ConnectionError):
            while not writer.is_closing():
                writer.write(b"a")
                await writer.drain()
                await asyncio.sleep(0.05)  # the attacker's pace, not a synchronisation

    sender = asyncio.create_task(trickle())
    try:
        answer = await asyncio.wait_for(reader.read(), WAIT_S)
    finally:
        sender.cancel()
        writer.close()
    assert problem_code(answer, 408) == "REQUEST_TIMED_OUT"
    assert b"headers did not arrive within 0.5 s" in answer


async def test_a_body_in_several_segments_starts_no_header_deadline(launch: Launch) -> None:
    """The end of a body that came in pieces is not the start of the next request's headers:
    the connection, idle after its answer, must not be sent a 408 past the header deadline
    (a pooled client, another node's forwarding one, read that stale 408 as the answer to its
    next request)."""
    gateway = launch("--header-read-timeout", "0.5", "--keepalive-timeout", "300")
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.server.port)
    body = b'{"name": "split"}'
    try:
        writer.write(
            b"POST /v1/topics HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body[:5])
        )
        await writer.drain()
        await asyncio.sleep(0.1)  # the client's pace: the rest of the body in a later segment
        writer.write(body[5:])
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT_S)
        assert head.startswith(b"HTTP/1.1 201"), head
        length = int(re.search(rb"Content-Length: (\d+)", head, re.I).group(1))  # type: ignore[union-attr]
        await reader.readexactly(length)
        # Idle for four header deadlines: nothing may arrive (a bounded wait for what must
        # not happen), and the connection still serves the next request.
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.read(1), 2.0)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT_S)
        assert answer.startswith(b"HTTP/1.1 200"), answer
    finally:
        writer.close()


async def test_an_idle_keep_alive_connection_is_closed(launch: Launch) -> None:
    gateway = launch("--keepalive-timeout", "0.5")
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.server.port)
    try:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(), WAIT_S)  # answered, then closed
    finally:
        writer.close()
    assert answer.startswith(b"HTTP/1.1 200")


async def frames_until_closed(reader: asyncio.StreamReader) -> list[Frame]:
    frames: list[Frame] = []
    while True:
        try:
            header = await asyncio.wait_for(reader.readexactly(9), WAIT_S)
        except asyncio.IncompleteReadError as eof:
            assert not eof.partial
            return frames
        frame, length = Frame.parse_frame_header(memoryview(header))
        frame.parse_body(memoryview(await reader.readexactly(length)))
        frames.append(frame)


async def test_an_http2_client_that_never_sends_settings_is_cut_off(launch: Launch) -> None:
    gateway = launch("--header-read-timeout", "0.5", "--keepalive-timeout", "300")
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.server.port)
    try:
        writer.write(PREFACE)
        frames = await frames_until_closed(reader)
    finally:
        writer.close()
    goaway = [f for f in frames if isinstance(f, GoAwayFrame)]
    assert goaway and goaway[-1].error_code == ErrorCodes.SETTINGS_TIMEOUT


async def test_an_idle_http2_connection_is_closed(launch: Launch) -> None:
    gateway = launch("--keepalive-timeout", "0.5")
    reader, writer = await asyncio.open_connection("127.0.0.1", gateway.server.port)
    try:
        writer.write(PREFACE + SettingsFrame(0).serialize())
        frames = await frames_until_closed(reader)
    finally:
        writer.close()
    goaway = [f for f in frames if isinstance(f, GoAwayFrame)]
    assert goaway and goaway[-1].error_code == ErrorCodes.NO_ERROR


# -- bodies held by one HTTP/2 connection ---------------------------------------------------------

BODY_BYTES = 100_000


def padded_produce_body(value: str) -> bytes:
    body = orjson.dumps({"records": [{"value": value}]})
    return body + b" " * (BODY_BYTES - len(body))


class H2Client:
    """A client-side h2 connection over asyncio streams."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.conn = H2Connection(H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        self.flush()
        self.status: dict[int, int] = {}
        self.headers: dict[int, dict[str, str]] = {}
        self.bodies: dict[int, bytes] = {}
        self.ended: set[int] = set()

    @classmethod
    async def connect(cls, port: int) -> H2Client:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    def flush(self) -> None:
        self.writer.write(self.conn.data_to_send())

    def post(self, path: str, length: int) -> int:
        """Open a POST stream announcing `length` body bytes, and send none of them yet."""
        stream_id = self.conn.get_next_available_stream_id()
        self.conn.send_headers(
            stream_id,
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":authority", "test"),
                (":path", path),
                ("content-type", "application/json"),
                ("content-length", str(length)),
            ],
        )
        self.flush()
        return stream_id

    async def send_body(self, stream_id: int, body: bytes) -> None:
        view = memoryview(body)
        while view:
            window = min(
                self.conn.local_flow_control_window(stream_id), self.conn.max_outbound_frame_size
            )
            if window <= 0:
                await self.receive()
                continue
            self.conn.send_data(stream_id, view[:window].tobytes(), end_stream=len(view) <= window)
            view = view[window:]
            self.flush()

    async def receive(self) -> None:
        data = await asyncio.wait_for(self.reader.read(65536), WAIT_S)
        assert data, "the server closed the connection"
        for event in self.conn.receive_data(data):
            if isinstance(event, ResponseReceived):
                headers = dict(cast(list[tuple[str, str]], event.headers))  # header_encoding
                self.status[event.stream_id] = int(headers[":status"])
                self.headers[event.stream_id] = headers
            elif isinstance(event, DataReceived):
                self.bodies[event.stream_id] = self.bodies.get(event.stream_id, b"") + event.data
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, StreamEnded):
                self.ended.add(event.stream_id)
            elif isinstance(event, ConnectionTerminated):
                raise AssertionError(f"GOAWAY {event.error_code}")
        self.flush()

    async def until(self, done: int) -> None:
        while len(self.ended) < done:
            await self.receive()

    async def close(self) -> None:
        self.writer.close()
        with suppress(ConnectionError):
            await self.writer.wait_closed()


async def test_one_connection_cannot_hold_more_than_its_share(launch: Launch) -> None:
    """Six streams announce 100 kB bodies and send nothing: two fit the connection's 250 kB,
    the other four get 503 CONNECTION_BUSY with Retry-After at once. Another connection is
    served meanwhile, and the two held bodies then go through."""
    gateway = launch("--max-request-bytes", "200000", "--max-connection-inflight-bytes", "250000")
    async with client_of(gateway) as http:
        await share_one_connection(gateway, http)


async def share_one_connection(gateway: Logged, http: httpx.AsyncClient) -> None:
    assert (await http.post("/v1/topics", json={"name": "t"})).status_code == 201
    client = await H2Client.connect(gateway.server.port)
    try:
        streams = [client.post("/v1/topics/t/records", BODY_BYTES) for _ in range(6)]
        await client.until(4)
        refused = sorted(client.ended)
        for stream_id in refused:
            assert client.status[stream_id] == 503
            assert client.headers[stream_id]["retry-after"] == "1"
            assert client.headers[stream_id]["content-type"] == PROBLEM
            assert orjson.loads(client.bodies[stream_id])["code"] == "CONNECTION_BUSY"
        held = [s for s in streams if s not in refused]
        assert len(held) == 2

        other = await http.post("/v1/topics/t/records", json={"records": [{"value": "other"}]})
        assert other.status_code == 200, other.text

        for stream_id in held:
            await client.send_body(stream_id, padded_produce_body(f"held {stream_id}"))
        await client.until(6)
        assert [client.status[s] for s in held] == [200, 200]
    finally:
        await client.close()
    fetched = await http.get("/v1/topics/t/partitions/0/records", params={"timeout_ms": 0})
    values = [r["value"] for r in fetched.json()["records"]]
    assert values == ["other", *(f"held {s}" for s in held)]


# -- a consumer meets a value it cannot decode ----------------------------------------------------


async def append_json_values(http: httpx.AsyncClient, values: list[bytes]) -> None:
    """Append values to t-0 as the gateway stores JSON ones (VALUES_JSON set), unchecked: what
    a log written before produce refused them holds."""
    assert (await http.post("/v1/topics", json={"name": "t"})).status_code == 201
    batch = fmt.encode_batches(
        [(None, v, [], None) for v in values],
        max_batch_bytes=1 << 20,
        values_json=True,
        default_timestamp=1,
    )
    appended = await http.post(
        f"{APPEND_PREFIX}/t/0/append",
        content=bytes(batch),
        headers={"Content-Type": "application/vnd.sluice.record-batch"},
    )
    assert appended.status_code == 200, appended.text


def sluice(server: Server, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from gateway.cli.main import main; main()",
            *args,
            "--url",
            server.url,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("group", [None, "g"], ids=["partition", "group"])
async def test_the_console_consumer_survives_an_undecodable_value(
    launch: Launch, group: str | None
) -> None:
    """A log may already hold `1e309` (produce refuses it now): consume prints it as stored,
    says so in one line on stderr, and carries on."""
    gateway = launch()
    async with client_of(gateway) as http:
        await append_json_values(http, [b"1", b"1e309", b'"after"'])
    extra = ["--group", group] if group else []
    consumed = await asyncio.to_thread(
        sluice, gateway.server, "consume", "t", "--from-beginning", "--max-records", "3", *extra
    )
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == ["1", "1e309", "after"]
    warnings = consumed.stderr.splitlines()
    assert len(warnings) == 1 and "offset 1: value printed as stored" in warnings[0], warnings
