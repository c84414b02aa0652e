"""End-to-end tests of gateway.http.http2 with real clients: curl, httpx, h2load and raw frames."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import shutil
import ssl
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import hpack
import pytest
from aiohttp import web
from h2.errors import ErrorCodes
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)
from yarl import URL

from gateway.http import h2_session, http2
from gateway.http.h2_session import NgH2Session
from gateway.http.h2_session import header_block as h2_block
from gateway.http.http2 import PREFACE, H2Limits, Http2Site, start_server
from tests.tls import write_self_signed

FrameT = TypeVar("FrameT", bound=Frame)

httpx = pytest.importorskip("httpx")
pytest.importorskip("h2")

CURL = shutil.which("curl")
H2LOAD = shutil.which("h2load")
MAX_BODY = 6 * 1024 * 1024
STREAM_LINES = 1000
BIG_CHUNK, BIG_CHUNKS = 64 * 1024, 20
TIMEOUT = 30.0


# -- the application under test -------------------------------------------------------------


@dataclass
class AppState:
    """What the test app's handlers record, plus events the tests use to synchronise."""

    wake: asyncio.Event = field(default_factory=asyncio.Event)
    waiting_target: int = 1
    waiting: int = 0
    all_waiting: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled_count: int = 0
    peers: set[Any] = field(default_factory=set)
    body_gate: asyncio.Event = field(default_factory=asyncio.Event)
    written: int = 0


STATE = web.AppKey("state", AppState)


@web.middleware
async def tag_middleware(
    request: web.Request, handler: Callable[[web.Request], Any]
) -> web.StreamResponse:
    try:
        response: web.StreamResponse = await handler(request)
    except web.HTTPException as exc:
        exc.headers["X-Sluice-Gateway"] = "1"
        raise
    response.headers["X-Sluice-Gateway"] = "1"
    return response


async def hello(request: web.Request) -> web.Response:
    return web.json_response(
        {
            "hello": "world",
            "version": list(request.version),
            "scheme": request.scheme,
            "secure": request.secure,
            "remote": request.remote,
            "host": request.host,
            "query": dict(request.query),
            "client": request.headers.get("X-Client"),
            "has_transport": request.transport is not None,
        }
    )


async def echo(request: web.Request) -> web.Response:
    return web.Response(body=await request.read(), content_type="application/octet-stream")


async def digest(request: web.Request) -> web.Response:
    sha = hashlib.sha256()
    size = 0
    async for chunk in request.content.iter_chunked(65536):
        sha.update(chunk)
        size += len(chunk)
    return web.json_response({"size": size, "sha256": sha.hexdigest()})


async def hold(request: web.Request) -> web.Response:
    await request.app[STATE].body_gate.wait()
    body = await request.content.readexactly(int(request.query["n"]))
    return web.json_response({"size": len(body)})


async def stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse()
    response.content_type = "application/x-ndjson"
    await response.prepare(request)
    for i in range(STREAM_LINES):
        await response.write(b'{"seq": %d}\n' % i)
    await response.write_eof()
    return response


async def big_stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse()
    await response.prepare(request)
    for i in range(BIG_CHUNKS):
        await response.write(b"%07d\n" % i * (BIG_CHUNK // 8))
        request.app[STATE].written += 1
    await response.write_eof()
    return response


async def wait(request: web.Request) -> web.Response:
    state = request.app[STATE]
    transport = request.transport
    assert transport is not None
    state.peers.add(transport.get_extra_info("peername"))
    state.waiting += 1
    if state.waiting >= state.waiting_target:
        state.all_waiting.set()
    try:
        await state.wake.wait()
    except asyncio.CancelledError:
        state.cancelled_count += 1
        state.cancelled.set()
        raise
    return web.json_response({"woken": True})


async def wake(request: web.Request) -> web.Response:
    request.app[STATE].wake.set()
    return web.json_response({"woke": True})


async def missing(request: web.Request) -> web.Response:
    raise web.HTTPNotFound(
        text=json.dumps({"error": "no such log"}), content_type="application/json"
    )


async def hop_by_hop(request: web.Request) -> web.Response:
    return web.json_response({"ok": True}, headers={"Connection": "close", "Keep-Alive": "5"})


async def file(request: web.Request) -> web.FileResponse:
    return web.FileResponse(Path(__file__))


async def item(request: web.Request) -> web.Response:
    return web.json_response({"name": request.match_info["name"]})


def make_app() -> web.Application:
    app = web.Application(client_max_size=MAX_BODY, middlewares=[tag_middleware])
    app[STATE] = AppState()
    app.router.add_get("/hello", hello)
    app.router.add_post("/echo", echo)
    app.router.add_post("/digest", digest)
    app.router.add_post("/hold", hold)
    app.router.add_get("/stream", stream)
    app.router.add_get("/big-stream", big_stream)
    app.router.add_get("/wait", wait)
    app.router.add_post("/wake", wake)
    app.router.add_get("/missing", missing)
    app.router.add_get("/items/{name}", item)
    app.router.add_get("/file", file)
    app.router.add_get("/hop-by-hop", hop_by_hop)
    return app


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(autouse=True, params=["native", "ngh2"])
def session(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test with each HTTP/2 session: ours over libnghttp2, and the ngh2 one a gateway
    built without libnghttp2's headers falls back to."""
    if request.param == "ngh2":
        monkeypatch.setattr(http2, "Session", NgH2Session)
    elif not h2_session.native:
        pytest.skip("gateway.http._h2session is not built")
    return str(request.param)


@dataclass
class Served:
    site: Http2Site
    state: AppState

    @property
    def url(self) -> str:
        scheme = "https" if self.site._ssl_context else "http"
        return f"{scheme}://127.0.0.1:{self.site.port}"


async def serve(
    ssl_context: ssl.SSLContext | None = None, limits: H2Limits | None = None
) -> Served:
    app = make_app()
    site = await start_server(
        app, "127.0.0.1", 0, ssl_context=ssl_context, limits=limits, shutdown_timeout=10
    )
    return Served(site, app[STATE])


@pytest.fixture
async def server() -> AsyncIterator[Served]:
    served = await serve()
    yield served
    await served.site.runner.cleanup()


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture
async def tls_server(tls_files: tuple[Path, Path]) -> AsyncIterator[Served]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*tls_files)
    served = await serve(ssl_context=context)
    yield served
    await served.site.runner.cleanup()


# -- external clients ---------------------------------------------------------------------------


async def run(*argv: str, stdin: bytes | None = None) -> tuple[int, bytes, bytes]:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin), TIMEOUT)
    assert proc.returncode is not None
    return proc.returncode, out, err


@dataclass
class CurlResult:
    status_line: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


async def curl(*args: str, data: bytes | None = None) -> CurlResult:
    if CURL is None:
        pytest.skip("curl not installed")
    argv = [CURL, "-sS", "-i", "-H", "Expect:", *args]
    if data is not None:
        argv[1:1] = ["--data-binary", "@-"]
    code, out, err = await run(*argv, stdin=data)
    assert code == 0, err.decode()
    head, _, body = out.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return CurlResult(status_line, headers, body)


@pytest.fixture(scope="session")
def curl_has_http2() -> None:
    import subprocess

    if CURL is None:
        pytest.skip("curl not installed")
    version = subprocess.run([CURL, "-V"], capture_output=True, check=True, text=True).stdout
    if "HTTP2" not in version:
        pytest.skip("curl built without HTTP/2")


class RawH2:
    """A frame-level HTTP/2 client, to send what real clients won't and see every frame."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.encoder = hpack.Encoder()
        self.decoder = hpack.Decoder()

    @classmethod
    async def connect(cls, port: int, settings: dict[int, int] | None = None) -> RawH2:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        client = cls(reader, writer)
        client.write(PREFACE, SettingsFrame(0, settings or {}))
        # The server's SETTINGS (acknowledged by frame()) bind only from that ACK on.
        await client.until(lambda f: isinstance(f, SettingsFrame) and "ACK" not in f.flags)
        return client

    def write(self, *items: bytes | Frame) -> None:
        self.writer.write(b"".join(i if isinstance(i, bytes) else i.serialize() for i in items))

    def headers(
        self, stream_id: int, path: str, method: str = "GET", *, end_stream: bool = True
    ) -> HeadersFrame:
        block = self.encoder.encode(
            [(":method", method), (":scheme", "http"), (":authority", "test"), (":path", path)]
        )
        flags = ("END_HEADERS", "END_STREAM") if end_stream else ("END_HEADERS",)
        return HeadersFrame(stream_id, block, flags=flags)

    async def frame(self) -> Frame | None:
        """Next frame from the server (SETTINGS are ACKed automatically), None at EOF."""
        try:
            header = await asyncio.wait_for(self.reader.readexactly(9), TIMEOUT)
            frame, length = Frame.parse_frame_header(memoryview(header))
            frame.parse_body(memoryview(await self.reader.readexactly(length)))
        except (asyncio.IncompleteReadError, ConnectionResetError):
            return None
        if isinstance(frame, SettingsFrame) and "ACK" not in frame.flags:
            self.write(SettingsFrame(0, flags=("ACK",)))
        return frame

    async def next_of(self, kind: type[FrameT]) -> FrameT:
        """The first frame of ``kind`` from the server (the frames before it passed over)."""
        frame = (await self.until(lambda f: isinstance(f, kind)))[-1]
        assert isinstance(frame, kind)
        return frame

    async def until(self, done: Callable[[Frame], bool]) -> list[Frame]:
        """Frames up to and including the first one matching ``done``."""
        frames = []
        while (frame := await self.frame()) is not None:
            frames.append(frame)
            if done(frame):
                return frames
        raise AssertionError(f"connection closed before the expected frame; got {frames}")

    def status(self, frames: Iterable[Frame], stream_id: int) -> int:
        for frame in frames:
            if isinstance(frame, HeadersFrame) and frame.stream_id == stream_id:
                return int(dict(self.decoder.decode(frame.data, raw=True))[b":status"])
        raise AssertionError(f"no HEADERS for stream {stream_id}")

    async def close(self) -> None:
        self.writer.close()
        with suppress(ConnectionError):
            await self.writer.wait_closed()


def body_of(frames: Iterable[Frame], stream_id: int) -> bytes:
    return b"".join(f.data for f in frames if isinstance(f, DataFrame) and f.stream_id == stream_id)


def ends(stream_id: int) -> Callable[[Frame], bool]:
    def check(frame: Frame) -> bool:
        return (
            isinstance(frame, (DataFrame, HeadersFrame))
            and frame.stream_id == stream_id
            and "END_STREAM" in frame.flags
        )

    return check


# -- protocol selection and request/response parity ---------------------------------------------


@pytest.mark.parametrize(
    ("flags", "status_prefix", "version"),
    [(["--http1.1"], "HTTP/1.1 200", [1, 1]), (["--http2-prior-knowledge"], "HTTP/2 200", [2, 0])],
    ids=["http1.1", "h2c"],
)
async def test_curl_cleartext(
    server: Served,
    curl_has_http2: None,
    flags: list[str],
    status_prefix: str,
    version: list[int],
) -> None:
    result = await curl(*flags, "-H", "X-Client: curl", f"{server.url}/hello?log=a&n=1")
    assert result.status_line.startswith(status_prefix)
    assert result.headers["x-sluice-gateway"] == "1"
    assert result.headers["content-type"].startswith("application/json")
    info = result.json()
    assert info["version"] == version
    assert info["scheme"] == "http" and info["secure"] is False
    assert info["remote"] == "127.0.0.1"
    assert info["host"] == f"127.0.0.1:{server.site.port}"
    assert info["query"] == {"log": "a", "n": "1"}
    assert info["client"] == "curl" and info["has_transport"] is True

    not_found = await curl(*flags, f"{server.url}/missing")
    assert not_found.status_line.split()[1] == "404"
    assert not_found.headers["x-sluice-gateway"] == "1"
    assert not_found.json() == {"error": "no such log"}

    assert (await curl(*flags, f"{server.url}/items/orders")).json() == {"name": "orders"}
    assert (await curl(*flags, f"{server.url}/nope")).status_line.split()[1] == "404"

    streamed = await curl(*flags, f"{server.url}/stream")
    lines = streamed.body.splitlines()
    assert [json.loads(line)["seq"] for line in lines] == list(range(STREAM_LINES))
    assert "transfer-encoding" not in streamed.headers or flags == ["--http1.1"]

    payload = os.urandom(300_000)
    assert (await curl(*flags, f"{server.url}/echo", data=payload)).body == payload
    assert (await curl(*flags, f"{server.url}/file")).body == Path(__file__).read_bytes()

    hop = await curl(*flags, f"{server.url}/hop-by-hop")
    assert hop.json() == {"ok": True}
    assert ("connection" in hop.headers) is (version == [1, 1])


async def test_curl_tls_alpn(tls_server: Served, curl_has_http2: None) -> None:
    h2 = await curl("--http2", "-k", f"{tls_server.url}/hello")
    assert h2.status_line.startswith("HTTP/2 200")
    info = h2.json()
    assert info["version"] == [2, 0]
    assert info["scheme"] == "https" and info["secure"] is True

    h1 = await curl("--http1.1", "-k", f"{tls_server.url}/hello")
    assert h1.status_line.startswith("HTTP/1.1 200")
    assert h1.json()["version"] == [1, 1] and h1.json()["secure"] is True

    no_alpn = await curl("--no-alpn", "-k", f"{tls_server.url}/hello")
    assert no_alpn.status_line.startswith("HTTP/1.1 200")

    payload = os.urandom(200_000)
    echoed = await curl("--http2", "-k", f"{tls_server.url}/echo", data=payload)
    assert echoed.status_line.startswith("HTTP/2 200") and echoed.body == payload


async def test_httpx_tls_h2(tls_server: Served) -> None:
    async with httpx.AsyncClient(http2=True, verify=False, base_url=tls_server.url) as client:
        response = await client.get("/hello")
    assert response.http_version == "HTTP/2"
    assert response.json()["secure"] is True


@pytest.mark.parametrize("flags", [["--http1.1"], ["--http2-prior-knowledge"]], ids=["h1", "h2c"])
async def test_body_over_client_max_size_is_413(
    server: Served, curl_has_http2: None, flags: list[str]
) -> None:
    result = await curl(*flags, f"{server.url}/echo", data=b"x" * (MAX_BODY + 100_000))
    assert result.status_line.split()[1] == "413"
    assert result.headers["x-sluice-gateway"] == "1"


# -- concurrency, flow control and large bodies -------------------------------------------------


async def test_httpx_100_long_polls_share_one_connection(server: Served) -> None:
    server.state.waiting_target = 100
    limits = httpx.Limits(max_connections=1)
    options: dict[str, Any] = {"http1": False, "http2": True, "base_url": server.url}
    async with httpx.AsyncClient(limits=limits, timeout=TIMEOUT, **options) as client:
        polls = [asyncio.create_task(client.get("/wait")) for _ in range(100)]
        await asyncio.wait_for(server.state.all_waiting.wait(), TIMEOUT)
        # httpx caps a connection at 100 streams, so the wake-up travels on its own connection.
        async with httpx.AsyncClient(**options) as waker:
            woke = await waker.post("/wake")
        responses = await asyncio.gather(*polls)
    assert woke.status_code == 200
    assert all(r.status_code == 200 and r.http_version == "HTTP/2" for r in responses)
    assert all(r.json() == {"woken": True} for r in responses)
    assert len(server.state.peers) == 1
    assert server.state.cancelled_count == 0


async def test_httpx_large_upload_round_trip(server: Served) -> None:
    payload = os.urandom(5 * 1024 * 1024)
    async with httpx.AsyncClient(
        http1=False, http2=True, base_url=server.url, timeout=TIMEOUT
    ) as client:
        echoed, digested = await asyncio.gather(
            client.post("/echo", content=payload), client.post("/digest", content=payload)
        )
    assert echoed.http_version == "HTTP/2"
    assert echoed.status_code == 200 and echoed.content == payload
    assert digested.json() == {"size": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}


async def test_request_window_is_returned_only_as_the_handler_reads(server: Served) -> None:
    window = H2Limits().initial_window_size
    client = await RawH2.connect(server.site.port)
    frames: list[Frame] = [client.headers(1, f"/hold?n={window}", "POST", end_stream=False)]
    frames += [DataFrame(1, os.urandom(16384)) for _ in range(window // 16384)]
    client.write(*frames, PingFrame(0, b"barrier!"))
    before = await client.until(lambda f: isinstance(f, PingFrame) and "ACK" in f.flags)
    # The server saw the whole body before answering the PING: none of it may be acknowledged.
    assert not [f for f in before if isinstance(f, WindowUpdateFrame) and f.stream_id == 1]
    server.state.body_gate.set()
    after = await client.until(ends(1))
    assert [f for f in after if isinstance(f, WindowUpdateFrame) and f.stream_id == 1]
    assert client.status(after, 1) == 200
    assert json.loads(body_of(after, 1)) == {"size": window}
    # The rest of the body, arriving after the response, is accepted and discarded.
    client.write(DataFrame(1, b"tail", flags=("END_STREAM",)), PingFrame(0, b"barrier2"))
    tail = await client.until(lambda f: isinstance(f, PingFrame) and "ACK" in f.flags)
    assert not [f for f in tail if isinstance(f, RstStreamFrame)]
    await client.close()


async def test_unfinished_upload_is_reset_after_lingering_time() -> None:
    app = make_app()
    site = await start_server(app, "127.0.0.1", 0, lingering_time=0.05)
    try:
        client = await RawH2.connect(site.port)
        request = client.headers(1, "/hold?n=10", "POST", end_stream=False)
        client.write(request, DataFrame(1, b"x" * 10))
        app[STATE].body_gate.set()
        reset = await client.next_of(RstStreamFrame)
        assert reset.stream_id == 1 and reset.error_code == ErrorCodes.NO_ERROR
        await client.close()
    finally:
        await site.runner.cleanup()


async def test_response_waits_for_client_window(server: Served) -> None:
    client = await RawH2.connect(server.site.port, {SettingsFrame.INITIAL_WINDOW_SIZE: 10})
    client.write(client.headers(1, "/hello"))
    first = await client.until(lambda f: isinstance(f, DataFrame) and f.stream_id == 1)
    client.write(PingFrame(0, b"barrier!"))
    first += await client.until(lambda f: isinstance(f, PingFrame) and "ACK" in f.flags)
    assert len(body_of(first, 1)) == 10
    assert not any(ends(1)(f) for f in first)
    client.write(WindowUpdateFrame(1, 100_000))
    rest = await client.until(ends(1))
    info = json.loads(body_of(first, 1) + body_of(rest, 1))
    assert info["version"] == [2, 0]
    await client.close()


async def test_a_streaming_handler_waits_for_the_client_window(server: Served) -> None:
    client = await RawH2.connect(server.site.port, {SettingsFrame.INITIAL_WINDOW_SIZE: 0})
    client.write(client.headers(1, "/big-stream"))
    await client.until(lambda f: isinstance(f, HeadersFrame) and f.stream_id == 1)
    # Nothing can be sent: the handler stops once its unsent bytes pass the high-water mark
    # (256 KiB) instead of queueing its whole answer.
    assert server.state.written * BIG_CHUNK <= 256 * 1024 + BIG_CHUNK
    total = BIG_CHUNK * BIG_CHUNKS
    client.write(WindowUpdateFrame(0, 2 * total), WindowUpdateFrame(1, 2 * total))
    body = body_of(await client.until(ends(1)), 1)
    assert body == b"".join(b"%07d\n" % i * (BIG_CHUNK // 8) for i in range(BIG_CHUNKS))
    assert server.state.written == BIG_CHUNKS
    await client.close()


@pytest.mark.skipif(H2LOAD is None, reason="h2load (nghttp2-client) not installed")
async def test_h2load_hello(server: Served) -> None:
    assert H2LOAD is not None
    code, out, err = await run(H2LOAD, "-n", "2000", "-c", "4", "-m", "10", f"{server.url}/hello")
    text = out.decode()
    assert code == 0, err.decode()
    match = re.search(r"requests: 2000 total.*?(\d+) succeeded, (\d+) failed, (\d+) errored", text)
    assert match is not None, text
    assert match.groups() == ("2000", "0", "0"), text
    assert "status codes: 2000 2xx" in text


# -- resets, floods and shutdown -----------------------------------------------------------------


async def test_client_reset_cancels_handler(server: Served) -> None:
    client = await RawH2.connect(server.site.port)
    client.write(client.headers(1, "/wait"))
    await asyncio.wait_for(server.state.all_waiting.wait(), TIMEOUT)
    client.write(RstStreamFrame(1, ErrorCodes.CANCEL))
    await asyncio.wait_for(server.state.cancelled.wait(), TIMEOUT)
    assert server.state.cancelled_count == 1
    # The connection itself stays usable.
    client.write(client.headers(3, "/hello"))
    assert client.status(await client.until(ends(3)), 3) == 200
    await client.close()


async def test_data_after_the_clients_end_stream_is_a_connection_error(server: Served) -> None:
    """DATA on a stream the client ended (RFC 9113 §5.1): GOAWAY STREAM_CLOSED naming it,
    the connection closed, and the handler it waited on cancelled."""
    client = await RawH2.connect(server.site.port)
    client.write(client.headers(1, "/wait"))
    await asyncio.wait_for(server.state.all_waiting.wait(), TIMEOUT)
    client.write(DataFrame(1, b"late"))
    goaway = await client.next_of(GoAwayFrame)
    assert (goaway.error_code, goaway.last_stream_id) == (ErrorCodes.STREAM_CLOSED, 1)
    assert await client.frame() is None
    await asyncio.wait_for(server.state.cancelled.wait(), TIMEOUT)
    await client.close()


async def test_a_stream_below_the_last_opened_is_a_connection_error(server: Served) -> None:
    """Streams 5 then 3 in one write (RFC 9113 §5.1.1): GOAWAY PROTOCOL_ERROR naming 5, and
    stream 3 is never answered."""
    client = await RawH2.connect(server.site.port)
    client.write(client.headers(5, "/hello"), client.headers(3, "/hello"))
    frames = await client.until(lambda f: isinstance(f, GoAwayFrame))
    goaway = frames[-1]
    assert isinstance(goaway, GoAwayFrame)
    assert (goaway.error_code, goaway.last_stream_id) == (ErrorCodes.PROTOCOL_ERROR, 5)
    assert not [f for f in frames if f.stream_id == 3]
    assert await client.frame() is None
    await client.close()


async def test_http11_disconnect_cancels_handler(server: Served) -> None:
    _, writer = await asyncio.open_connection("127.0.0.1", server.site.port)
    writer.write(b"GET /wait HTTP/1.1\r\nHost: test\r\n\r\n")
    await asyncio.wait_for(server.state.all_waiting.wait(), TIMEOUT)
    writer.close()
    await asyncio.wait_for(server.state.cancelled.wait(), TIMEOUT)


async def test_rapid_reset_gets_enhance_your_calm() -> None:
    served = await serve(limits=H2Limits(max_resets=20, reset_window=60))
    try:
        client = await RawH2.connect(served.site.port)
        burst: list[Frame] = []
        for stream_id in range(1, 2 * 21, 2):
            burst += [client.headers(stream_id, "/wait"), RstStreamFrame(stream_id, 8)]
        client.write(*burst)
        goaway = await client.next_of(GoAwayFrame)
        assert goaway.error_code == ErrorCodes.ENHANCE_YOUR_CALM
        assert await client.frame() is None
        await client.close()
    finally:
        await served.site.runner.cleanup()


@pytest.mark.parametrize(
    ("extra", "error_code"),
    [
        # One field over the HPACK decoder's own limit (64 KiB).
        ([("x-big", "a" * 99_000)], ErrorCodes.COMPRESSION_ERROR),
        ([(f"x-big-{i}", "a" * 30_000) for i in range(3)], ErrorCodes.ENHANCE_YOUR_CALM),
        ([("x-bomb", "b" * 4000)] * 20, ErrorCodes.ENHANCE_YOUR_CALM),
    ],
    ids=["large-field", "large-block", "hpack-bomb"],
)
async def test_oversized_header_list_is_a_connection_error(
    server: Served, extra: list[tuple[str, str]], error_code: ErrorCodes
) -> None:
    client = await RawH2.connect(server.site.port)
    fields = [(":method", "GET"), (":scheme", "http"), (":path", "/hello"), *extra]
    # The bomb repeats one dynamic-table entry: ~4 KB on the wire, ~80 KB decoded.
    block = client.encoder.encode(fields, huffman=False)
    pieces = [block[i : i + 16384] for i in range(0, len(block), 16384)]
    frames: list[Frame] = [HeadersFrame(1, pieces[0], flags=("END_STREAM",))]
    frames += [ContinuationFrame(1, piece) for piece in pieces[1:]]
    frames[-1].flags.add("END_HEADERS")
    client.write(*frames)
    goaway = await client.next_of(GoAwayFrame)
    assert goaway.error_code == error_code
    assert await client.frame() is None
    await client.close()


async def test_continuation_flood_is_a_connection_error(server: Served) -> None:
    """A header block may take at most 8 CONTINUATION frames."""
    client = await RawH2.connect(server.site.port)
    frames: list[Frame] = [HeadersFrame(1, b"\x82", flags=("END_STREAM",))]
    frames += [ContinuationFrame(1, b"\x86") for _ in range(100)]
    client.write(*frames)
    goaway = await client.next_of(GoAwayFrame)
    assert goaway.error_code == ErrorCodes.ENHANCE_YOUR_CALM
    assert await client.frame() is None
    await client.close()


async def test_streams_beyond_the_limit_are_a_connection_error() -> None:
    served = await serve(limits=H2Limits(max_concurrent_streams=2))
    served.state.waiting_target = 2
    try:
        client = await RawH2.connect(served.site.port)
        client.write(client.headers(1, "/wait"), client.headers(3, "/wait"))
        await asyncio.wait_for(served.state.all_waiting.wait(), TIMEOUT)
        client.write(client.headers(5, "/wait"))
        goaway = await client.next_of(GoAwayFrame)
        assert goaway.error_code == ErrorCodes.PROTOCOL_ERROR
        assert await client.frame() is None
        assert served.state.waiting == 2
        await client.close()
    finally:
        await served.site.runner.cleanup()


BASE_FIELDS = [(":method", "GET"), (":scheme", "http"), (":authority", "test"), (":path", "/hello")]


@pytest.mark.parametrize(
    "fields",
    [
        [*BASE_FIELDS, ("X-Upper", "1")],
        [*BASE_FIELDS, ("connection", "keep-alive")],
        [*BASE_FIELDS, ("keep-alive", "5")],
        [*BASE_FIELDS, ("proxy-connection", "keep-alive")],
        [*BASE_FIELDS, ("transfer-encoding", "chunked")],
        [*BASE_FIELDS, ("upgrade", "h2c")],
        [*BASE_FIELDS, ("te", "gzip")],
        [*BASE_FIELDS[:2], ("x-a", "1"), *BASE_FIELDS[2:]],
        [*BASE_FIELDS, (":path", "/hello")],
        [*BASE_FIELDS[:3], (":foo", "bar"), BASE_FIELDS[3]],
        [(":status", "200"), *BASE_FIELDS],
        BASE_FIELDS[:3],
        BASE_FIELDS[1:],
        [BASE_FIELDS[0], *BASE_FIELDS[2:]],
        [*BASE_FIELDS[:3], (":path", "")],
        [*BASE_FIELDS[:3], (":path", "hello")],
        [*BASE_FIELDS[:3], (":path", "/he llo")],
        [(":method", "GE T"), *BASE_FIELDS[1:]],
        [*BASE_FIELDS, ("x-a", "a\rb")],
        [*BASE_FIELDS, ("x-a", "a\nb")],
        [*BASE_FIELDS, ("x-a", "a\x00b")],
        [*BASE_FIELDS, ("x-a", " a")],
        [*BASE_FIELDS, ("x a", "1")],
        [*BASE_FIELDS, ("x:a", "1")],
        [*BASE_FIELDS, ("", "1")],
    ],
    ids=[
        "uppercase-name",
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "upgrade",
        "te-not-trailers",
        "pseudo-after-regular",
        "duplicate-pseudo",
        "unknown-pseudo",
        "response-pseudo",
        "no-path",
        "no-method",
        "no-scheme",
        "empty-path",
        "relative-path",
        "space-in-path",
        "space-in-method",
        "cr-in-value",
        "lf-in-value",
        "nul-in-value",
        "surrounding-whitespace",
        "space-in-name",
        "colon-in-name",
        "empty-name",
    ],
)
async def test_malformed_request_headers_reset_the_stream(
    server: Served, fields: list[tuple[str, str]]
) -> None:
    """Each is refused (RST_STREAM PROTOCOL_ERROR) before a handler runs, again when repeated
    (header blocks are remembered); the connection lives."""
    client = await RawH2.connect(server.site.port)
    for stream_id in (1, 3):
        block = client.encoder.encode(fields, huffman=False)
        client.write(HeadersFrame(stream_id, block, flags=("END_HEADERS", "END_STREAM")))
        frames = await client.until(lambda f: isinstance(f, RstStreamFrame))
        reset = frames[-1]
        assert isinstance(reset, RstStreamFrame) and reset.stream_id == stream_id
        assert reset.error_code == ErrorCodes.PROTOCOL_ERROR
        assert not [f for f in frames if isinstance(f, (HeadersFrame, DataFrame))]
    client.write(client.headers(5, "/hello"))
    assert client.status(await client.until(ends(5)), 5) == 200
    await client.close()


def test_a_repeated_header_block_is_built_once_and_read_alike() -> None:
    """A client's repeated block gets the message built the first time; a different block,
    its own; a large one is built every time and never remembered."""
    fields = (
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":authority", b"x"),
        (b":path", b"/v1/topics/t/records?acks=1"),
        (b"content-type", b"application/json"),
    )
    block = h2_block(fields)
    first, built = http2._message_of(block), http2._build_message(block)
    assert first is not None and built is not None
    path = "/v1/topics/t/records?acks=1"
    for message in (first, built):
        assert (message.method, message.path, message.url) == ("POST", path, URL(path))
    assert (
        first.raw_headers
        == built.raw_headers
        == ((b"content-type", b"application/json"), (b"host", b"x"))
    )
    assert list(first.headers.items()) == list(built.headers.items())
    again = bytes(bytearray(block))
    assert again is not block and http2._message_of(again) is first
    other = http2._message_of(h2_block((*fields[:3], (b":path", b"/v1/topics/u/records"))))
    assert other is not None and other.path == "/v1/topics/u/records"
    large = h2_block((*fields, (b"x-large", b"v" * 4096)))
    assert http2._message_of(large) is not http2._message_of(large)
    assert large not in http2._messages


@pytest.mark.parametrize("body", [b"0123456789", b"0123"], ids=["longer", "shorter"])
async def test_body_not_of_its_content_length_resets_the_stream(
    server: Served, body: bytes
) -> None:
    client = await RawH2.connect(server.site.port)
    block = client.encoder.encode(
        [*BASE_FIELDS[:3], (":method", "POST"), (":path", "/echo"), ("content-length", "5")]
    )
    request = HeadersFrame(1, block, flags=("END_HEADERS",))
    client.write(request, DataFrame(1, body, flags=("END_STREAM",)))
    frames = await client.until(lambda f: isinstance(f, RstStreamFrame))
    reset = frames[-1]
    assert isinstance(reset, RstStreamFrame) and reset.stream_id == 1
    assert reset.error_code == ErrorCodes.PROTOCOL_ERROR
    assert not [f for f in frames if isinstance(f, HeadersFrame)]
    await client.close()


async def test_data_beyond_the_stream_window_is_a_connection_error() -> None:
    """A client cannot make a stream buffer more body than its window."""
    served = await serve(limits=H2Limits(initial_window_size=100_000))
    try:
        client = await RawH2.connect(served.site.port)
        frames: list[Frame] = [client.headers(1, "/hold?n=200000", "POST", end_stream=False)]
        frames += [DataFrame(1, b"x" * 16384) for _ in range(7)]  # 114,688 bytes
        client.write(*frames)
        goaway = await client.next_of(GoAwayFrame)
        assert goaway.error_code == ErrorCodes.FLOW_CONTROL_ERROR
        assert await client.frame() is None
        await client.close()
    finally:
        await served.site.runner.cleanup()


async def test_client_goaway_lets_its_streams_finish(server: Served) -> None:
    client = await RawH2.connect(server.site.port)
    client.write(client.headers(1, "/wait"))
    await asyncio.wait_for(server.state.all_waiting.wait(), TIMEOUT)
    client.write(GoAwayFrame(0, last_stream_id=0, error_code=ErrorCodes.NO_ERROR))
    goaway = await client.next_of(GoAwayFrame)
    assert goaway.error_code == ErrorCodes.NO_ERROR and goaway.last_stream_id == 1
    waker = await RawH2.connect(server.site.port)
    waker.write(waker.headers(1, "/wake", "POST"))
    assert waker.status(await waker.until(ends(1)), 1) == 200
    answer = await client.until(ends(1))
    assert client.status(answer, 1) == 200
    assert await client.frame() is None
    assert server.state.cancelled_count == 0
    await client.close()
    await waker.close()


async def test_graceful_shutdown_sends_goaway_and_finishes_in_flight() -> None:
    served = await serve()
    client = await RawH2.connect(served.site.port)
    client.write(client.headers(1, "/wait"))
    await asyncio.wait_for(served.state.all_waiting.wait(), TIMEOUT)
    cleanup = asyncio.create_task(served.site.runner.cleanup())

    goaway = await client.next_of(GoAwayFrame)
    assert goaway.error_code == ErrorCodes.NO_ERROR and goaway.last_stream_id == 1
    client.write(client.headers(3, "/hello"))
    refused = await client.next_of(RstStreamFrame)
    assert refused.stream_id == 3 and refused.error_code == ErrorCodes.REFUSED_STREAM
    assert not cleanup.done()

    served.state.wake.set()
    answer = await client.until(ends(1))
    assert client.status(answer, 1) == 200
    assert json.loads(body_of(answer, 1)) == {"woken": True}
    assert await client.frame() is None
    await asyncio.wait_for(cleanup, TIMEOUT)
    assert served.state.cancelled_count == 0
    await client.close()


async def test_shutdown_timeout_cancels_stragglers() -> None:
    app = make_app()
    site = await start_server(app, "127.0.0.1", 0, shutdown_timeout=0.2)
    client = await RawH2.connect(site.port)
    client.write(client.headers(1, "/wait"))
    await asyncio.wait_for(app[STATE].all_waiting.wait(), TIMEOUT)
    await asyncio.wait_for(site.runner.cleanup(), TIMEOUT)
    await asyncio.wait_for(app[STATE].cancelled.wait(), TIMEOUT)
    frames = []
    while (frame := await client.frame()) is not None:
        frames.append(frame)
    assert any(isinstance(f, GoAwayFrame) for f in frames)
    await client.close()


def test_limits_are_validated() -> None:
    with pytest.raises(ValueError):
        H2Limits(max_frame_size=1000)
    with pytest.raises(ValueError):
        H2Limits(initial_window_size=2**31)


def test_receive_windows_stay_within_a_connection_share() -> None:
    limits = H2Limits()
    assert limits.bounded(64 * 1024 * 1024) == limits
    small = limits.bounded(200_000)
    assert small.connection_window_size == small.initial_window_size == 200_000
    assert limits.bounded(1000).connection_window_size == 65535
