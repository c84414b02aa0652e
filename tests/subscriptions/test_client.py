"""The delivery client against real loopback servers that answer as each test scripts: keep-alive
reuse, Connection: close, answers that are slow, garbage, oversized, chunked, cut short, or
interim; redirects not followed; the pool's limit; TLS; loopback refused unless allowed."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from groups.subscriptions.client import DeliveryClient, Response
from replication.http1_reader import MAX_HEAD, AnswerError
from tests.tls import write_self_signed

HEAD = b"Content-Length: 2\r\n\r\n"
ALLOWED = ("127.0.0.1",)
# The n-th request (from 0) -> the bytes to answer it with; None: answer nothing, close.
Script = Callable[[int], bytes | None]


@dataclass
class Server:
    """Reads whole requests (head and Content-Length body) and answers each by `script`,
    closing the connection after those `close_after` names."""

    script: Script
    close_after: Callable[[int], bool] = lambda _: False
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    url: str = ""

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                self.requests.append(head + await reader.readexactly(length))
                answer = self.script(len(self.requests) - 1)
                if answer is None:
                    break
                writer.write(answer)
                await writer.drain()
                if self.close_after(len(self.requests) - 1):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def serving(script: Script, tls: ssl.SSLContext | None = None) -> AsyncIterator[Server]:
    server = Server(script)
    listening = await asyncio.start_server(server.handle, "127.0.0.1", 0, ssl=tls)
    port = listening.sockets[0].getsockname()[1]
    server.url = f"{'https' if tls else 'http'}://127.0.0.1:{port}/hook?x=1"
    try:
        yield server
    finally:
        listening.close()


def always(answer: bytes) -> Script:
    return lambda _: answer


NO_CONTENT = b"HTTP/1.1 204 No Content\r\n\r\n"


async def post(
    client: DeliveryClient, url: str, timeout_s: float = 5.0, limit: int = 4096
) -> Response:
    return await client.post(url, HEAD, b"{}", timeout_s, limit)


async def test_keep_alive_connections_are_reused() -> None:
    client = DeliveryClient(ALLOWED)
    async with serving(always(NO_CONTENT)) as server:
        for _ in range(3):
            assert (await post(client, server.url)).status == 204
    assert server.connections == 1 and len(server.requests) == 3
    first = server.requests[0]
    assert first.startswith(b"POST /hook?x=1 HTTP/1.1\r\nHost: 127.0.0.1:")
    assert first.endswith(b"Content-Length: 2\r\n\r\n{}")
    await client.close()


async def test_connection_close_and_http_1_0_are_not_reused() -> None:
    client = DeliveryClient(ALLOWED)
    answers = [
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.0 200 OK\r\n\r\nuntil the close",
        NO_CONTENT,
    ]
    async with serving(lambda n: answers[n] if n < 3 else NO_CONTENT) as server:
        server.close_after = lambda n: n == 1  # HTTP/1.0 without a length: the close ends it
        assert (await post(client, server.url)).body == b"ok"
        assert (await post(client, server.url)).body == b"until the close"
        assert (await post(client, server.url)).status == 204
    assert server.connections == 3
    await client.close()


async def test_a_slow_answer_times_out_and_its_connection_is_dropped() -> None:
    client = DeliveryClient(ALLOWED)
    answered = asyncio.Event()

    def script(n: int) -> bytes | None:
        if n == 0:
            answered.set()
            return b""  # nothing: the client's deadline passes first
        return NO_CONTENT

    async with serving(script) as server:
        with pytest.raises(TimeoutError):
            await post(client, server.url, timeout_s=0.2)
        assert answered.is_set()
        assert (await post(client, server.url)).status == 204
    assert server.connections == 2
    await client.close()


async def test_a_cancelled_request_drops_its_connection() -> None:
    client = DeliveryClient(ALLOWED)
    arrived = asyncio.Event()

    def script(n: int) -> bytes:
        if n == 0:
            arrived.set()
            return b""  # no answer: the request is cancelled while it waits
        return NO_CONTENT

    async with serving(script) as server:
        pending = asyncio.create_task(post(client, server.url))
        await arrived.wait()
        pending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pending
        assert (await post(client, server.url)).status == 204
    assert server.connections == 2
    await client.close()


@pytest.mark.parametrize(
    "answer",
    [
        b"garbage\r\n\r\n",
        b"HTTP/2 200\r\n\r\n",
        b"HTTP/1.1 20x OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\n" + b"X: " + b"y" * MAX_HEAD,
    ],
)
async def test_garbage_answers_fail_the_attempt(answer: bytes) -> None:
    client = DeliveryClient(ALLOWED)
    async with serving(always(answer)) as server:
        with pytest.raises(AnswerError):
            await post(client, server.url)
    await client.close()


async def test_an_answer_cut_short_by_the_close_fails() -> None:
    client = DeliveryClient(ALLOWED)
    cut = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this"
    async with serving(always(cut)) as server:
        server.close_after = lambda _: True
        with pytest.raises(AnswerError, match="before the answer was whole"):
            await post(client, server.url)
    await client.close()


async def test_a_server_closing_without_an_answer_fails() -> None:
    client = DeliveryClient(ALLOWED)
    async with serving(lambda _: None) as server:
        with pytest.raises(OSError):
            await post(client, server.url)
    await client.close()


async def test_an_oversized_body_is_cut_at_the_limit_and_the_connection_dropped() -> None:
    client = DeliveryClient(ALLOWED)
    big = b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n" + b"x" * 1_000_000
    async with serving(lambda n: big if n == 0 else NO_CONTENT) as server:
        response = await post(client, server.url, limit=1000)
        assert response.status == 200 and response.body == b"x" * 1001
        assert (await post(client, server.url)).status == 204
    assert server.connections == 2
    await client.close()


async def test_chunked_interim_and_headers() -> None:
    client = DeliveryClient(ALLOWED)
    answer = (
        b"HTTP/1.1 100 Continue\r\n\r\n"
        b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\n"
        b"Content-Type: Application/JSON; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nTrailer: x\r\n\r\n"
    )
    async with serving(always(answer)) as server:
        for _ in range(2):
            response = await post(client, server.url)
            assert (response.status, response.reason, response.body) == (
                429, "Too Many Requests", b"abcde",
            )  # fmt: skip
            assert response.headers["retry-after"] == "7"
            assert response.headers["content-type"].startswith("Application/JSON")
    assert server.connections == 1
    await client.close()


async def test_an_answer_repeated_byte_for_byte_is_read_once() -> None:
    """An endpoint answering alike: the bytes of the second answer are known, so it is the
    first's response (read by no reader); an answer that ends its connection is not kept."""
    client = DeliveryClient(ALLOWED)
    answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\nok"
    closing = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"
    async with serving(lambda n: closing if n == 2 else answer) as server:
        server.close_after = lambda n: n == 2
        first = await post(client, server.url)
        second = await post(client, server.url)
        assert (await post(client, server.url)).body == b"ok"
        assert (await post(client, server.url)) is first
    assert second is first
    assert (first.status, first.headers["content-type"], first.body) == (
        200, "application/json", b"ok",
    )  # fmt: skip
    assert client.known == {answer: first} and server.connections == 2
    await client.close()


async def test_a_known_answer_past_a_smaller_limit_is_cut_as_any_other() -> None:
    client = DeliveryClient(ALLOWED)
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789"
    async with serving(always(answer)) as server:
        assert (await post(client, server.url, limit=100)).body == b"0123456789"
        assert answer in client.known
        assert (await post(client, server.url, limit=4)).body == b"01234"  # one past the limit
        assert (await post(client, server.url, limit=100)).body == b"0123456789"
    assert server.connections == 2  # the cut answer's connection was dropped
    await client.close()


async def test_the_known_answers_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from groups.subscriptions import client as module

    monkeypatch.setattr(module, "KNOWN_ANSWERS", 2)
    large = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % module.KNOWN_ANSWER_MAX_BYTES
    large += b"x" * module.KNOWN_ANSWER_MAX_BYTES
    client = DeliveryClient(ALLOWED)
    async with serving(always(large)) as server:
        assert len((await post(client, server.url)).body) == module.KNOWN_ANSWER_MAX_BYTES
        assert not client.known  # too large to keep
        server.script = lambda n: b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n%d" % (n % 10)
        for n in range(1, 6):
            assert (await post(client, server.url)).body == b"%d" % n
            assert 1 <= len(client.known) <= 2
    await client.close()


async def test_redirects_are_answers() -> None:
    client = DeliveryClient(ALLOWED)
    redirect = (
        b"HTTP/1.1 307 Temporary Redirect\r\nLocation: /elsewhere\r\nContent-Length: 0\r\n\r\n"
    )
    async with serving(always(redirect)) as server:
        assert (await post(client, server.url)).status == 307
    assert len(server.requests) == 1
    await client.close()


async def test_bytes_nobody_asked_for_drop_the_connection() -> None:
    client = DeliveryClient(ALLOWED)
    async with serving(lambda n: NO_CONTENT + NO_CONTENT if n == 0 else NO_CONTENT) as server:
        assert (await post(client, server.url)).status == 204
        assert (await post(client, server.url)).status == 204
    assert server.connections == 2
    await client.close()


async def test_the_per_origin_limit_queues_requests() -> None:
    client = DeliveryClient(ALLOWED, per_origin=1)
    async with serving(always(NO_CONTENT)) as server:
        answers = await asyncio.gather(*(post(client, server.url) for _ in range(5)))
    assert [a.status for a in answers] == [204] * 5 and server.connections == 1
    await client.close()


async def test_refused_connections_and_loopback_not_allowed() -> None:
    async with serving(always(NO_CONTENT)) as server:
        url = server.url
    with pytest.raises(ConnectionError):
        await post(DeliveryClient(ALLOWED), url)  # nobody listens there any more
    with pytest.raises(ConnectionRefusedError, match="loopback"):
        await post(DeliveryClient(()), url)


async def test_requests_queued_on_a_connection_that_fails_to_open_fail_with_it() -> None:
    async with serving(always(NO_CONTENT)) as server:
        url = server.url
    client = DeliveryClient(ALLOWED, per_origin=1)
    answers = await asyncio.gather(
        *(post_body(client, url, b"x", 4) for _ in range(4)), return_exceptions=True
    )
    assert all(isinstance(a, ConnectionError) for a in answers)
    assert client._total == 0 and not client._ready.get((*client.origin(url).key, 4))


async def test_https(tmp_path: Path) -> None:
    cert, key = write_self_signed(tmp_path)
    serving_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    serving_tls.load_cert_chain(cert, key)
    trusting = ssl.create_default_context(cafile=str(cert))
    async with serving(always(NO_CONTENT), serving_tls) as server:
        client = DeliveryClient(ALLOWED, ssl_context=trusting)
        assert (await post(client, server.url)).status == 204
        assert (await post(client, server.url)).status == 204
        assert server.connections == 1
        await client.close()
        with pytest.raises(ConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
            await post(DeliveryClient(ALLOWED), server.url)  # not trusted by default


def echo(server: Server) -> Script:
    """Answer each request with its own body, so a test can tell which answer is whose."""

    def script(n: int) -> bytes:
        body = server.requests[n].split(b"\r\n\r\n", 1)[1]
        return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)

    return script


async def post_body(client: DeliveryClient, url: str, body: bytes, depth: int) -> Response:
    head = b"Content-Length: %d\r\n\r\n" % len(body)
    return await client.post(url, head, body, 5.0, 4096, depth)


async def test_pipelined_requests_share_connections_and_get_their_own_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from groups.subscriptions import client as module

    writes: list[int] = []
    write_outbox = module._Connection.write_outbox

    def counted(self: module._Connection) -> None:
        writes.append(len(self.outbox) // 2)
        write_outbox(self)

    monkeypatch.setattr(module._Connection, "write_outbox", counted)
    client = DeliveryClient(ALLOWED)
    async with serving(always(b"")) as server:
        server.script = echo(server)
        bodies = [b"%03d" % i for i in range(12)]
        answers = await asyncio.gather(*(post_body(client, server.url, b, 4) for b in bodies))
        assert [a.body for a in answers] == bodies
        # Twelve requests of one turn, four to a connection: three connections, one write each.
        assert server.connections == 3 and writes == [4, 4, 4]
        again = await asyncio.gather(*(post_body(client, server.url, b, 4) for b in bodies[:4]))
        assert [a.body for a in again] == bodies[:4]
    assert server.connections == 3 and len(server.requests) == 16
    await client.close()


async def test_depth_one_and_pipelined_connections_are_pooled_apart() -> None:
    client = DeliveryClient(ALLOWED)
    async with serving(always(b"")) as server:
        server.script = echo(server)
        assert (await post_body(client, server.url, b"a", 1)).body == b"a"
        assert (await post_body(client, server.url, b"b", 2)).body == b"b"
        assert (await post_body(client, server.url, b"c", 1)).body == b"c"
    assert server.connections == 2
    await client.close()


async def test_a_close_in_a_pipeline_fails_the_requests_behind_it() -> None:
    client = DeliveryClient(ALLOWED)
    closing = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"
    async with serving(lambda n: closing if n == 1 else NO_CONTENT) as server:
        server.close_after = lambda n: n == 1
        answers = await asyncio.gather(
            *(post_body(client, server.url, b"x", 4) for _ in range(4)), return_exceptions=True
        )
        assert [getattr(a, "status", None) for a in answers[:2]] == [204, 200]
        assert all(isinstance(a, AnswerError) for a in answers[2:])
        assert (await post_body(client, server.url, b"x", 4)).status == 204
    assert server.connections == 2
    await client.close()


async def test_a_timeout_in_a_pipeline_fails_the_requests_behind_it() -> None:
    client = DeliveryClient(ALLOWED)
    async with serving(lambda n: NO_CONTENT if n >= 2 else b"") as server:
        first = asyncio.ensure_future(client.post(server.url, HEAD, b"{}", 0.2, 4096, 2))
        second = asyncio.ensure_future(client.post(server.url, HEAD, b"{}", 30.0, 4096, 2))
        with pytest.raises(TimeoutError):
            await first
        with pytest.raises(TimeoutError):
            await second  # behind the first on its connection: failed with it
        assert (await post_body(client, server.url, b"x", 2)).status == 204
    assert server.connections == 2
    await client.close()


async def test_answers_split_or_joined_across_reads_in_a_pipeline() -> None:
    client = DeliveryClient(ALLOWED)
    both = NO_CONTENT + b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nbye"
    async with serving(lambda n: both if n == 1 else b"") as server:
        answers = await asyncio.gather(*(post_body(client, server.url, b"x", 2) for _ in range(2)))
        assert [(a.status, a.body) for a in answers] == [(204, b""), (200, b"bye")]
    await client.close()


async def test_a_shorter_deadline_behind_a_longer_one_times_out_at_its_own() -> None:
    """One timer a connection, armed at the earliest deadline of the requests waiting there:
    a request sent after one with a later deadline still times out at its own."""
    client = DeliveryClient(ALLOWED)
    async with serving(lambda n: NO_CONTENT if n >= 2 else b"") as server:
        first = asyncio.ensure_future(client.post(server.url, HEAD, b"{}", 300.0, 4096, 2))
        second = asyncio.ensure_future(client.post(server.url, HEAD, b"{}", 0.2, 4096, 2))
        async with asyncio.timeout(60):  # far before the first request's deadline
            with pytest.raises(TimeoutError):
                await second
            with pytest.raises(TimeoutError):
                await first  # ahead of it on the connection: failed with it
    await client.close()


async def test_the_connection_timer_moves_to_the_requests_still_waiting() -> None:
    """The timer armed for an answered request's deadline fails nothing when it fires: it
    moves to the deadline of the request waiting now."""
    client = DeliveryClient(ALLOWED)
    arrived = asyncio.Event()

    def script(n: int) -> bytes:
        if n == 1:
            arrived.set()
            return b""  # no answer: the second request waits
        return NO_CONTENT

    async with serving(script) as server:
        assert (await client.post(server.url, HEAD, b"{}", 5.0, 4096)).status == 204
        (connection,) = client._open[(*client.origin(server.url).key, 1)]
        armed_at = connection.timer_at
        later = asyncio.ensure_future(client.post(server.url, HEAD, b"{}", 300.0, 4096))
        await arrived.wait()
        (waiting,) = connection.pending
        assert connection.timer_at == armed_at < waiting.deadline
        connection._expire()  # as it fires at the first request's deadline
        assert not connection.closed and not later.done()
        assert connection.timer_at == waiting.deadline
        later.cancel()
        with pytest.raises(asyncio.CancelledError):
            await later
        assert connection.closed and connection.timer is None
    await client.close()


async def test_try_send_hands_the_end_to_its_callback() -> None:
    """`try_send` on an open connection: no future, the answer handed to the callback with
    its request; None while no connection is open."""
    client = DeliveryClient(ALLOWED)
    ended: list[tuple[object, int | None, BaseException | None]] = []
    done = asyncio.Event()

    def answered(request: object, response: Response | None, error: BaseException | None) -> None:
        ended.append((request, None if response is None else response.status, error))
        done.set()

    async with serving(always(NO_CONTENT)) as server:
        assert client.try_send(server.url, HEAD, b"{}", 5.0, 4096, 1, answered) is None
        assert (await post(client, server.url)).status == 204
        request = client.try_send(server.url, HEAD, b"{}", 5.0, 4096, 1, answered)
        assert request is not None
        await done.wait()
    assert ended == [(request, 204, None)]
    await client.close()


async def test_the_requests_of_a_turn_are_written_at_its_end_one_write_a_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Requests sent in one turn on three open connections (one request at a time each)
    stay unwritten until the turn ends, then go out in one pass, one write a connection."""
    from groups.subscriptions import client as module

    passes: list[int] = []
    write = module.DeliveryClient._write

    def counted(self: module.DeliveryClient) -> None:
        passes.append(len(self._unwritten))
        write(self)

    monkeypatch.setattr(module.DeliveryClient, "_write", counted)
    client = DeliveryClient(ALLOWED)
    async with serving(always(NO_CONTENT)) as server:
        await asyncio.gather(*(post(client, server.url) for _ in range(3)))
        assert server.connections == 3
        passes.clear()
        done = asyncio.Event()
        ended: list[int | None] = []

        def answered(_: object, response: Response | None, error: BaseException | None) -> None:
            ended.append(None if response is None else response.status)
            if len(ended) == 3:
                done.set()

        sent = [client.try_send(server.url, HEAD, b"{}", 5.0, 4096, 1, answered) for _ in range(3)]
        assert all(r is not None and r.connection.outbox for r in sent)  # not written yet
        await done.wait()
    assert passes == [3] and ended == [204] * 3 and server.connections == 3
    await client.close()
