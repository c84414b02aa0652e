"""The open-loop producer's pacing: it sleeps at least a timer tick between sends (a shorter
sleep returns at once on uvloop, and the generator would spin a core away from the server it
measures), still sends every record at its schedule's rate, and reports how late it sent; it
tells the consumer how many produces failed, so that the consumer does not wait for them."""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
from collections.abc import Awaitable, Callable
from multiprocessing.sharedctypes import Synchronized
from typing import Any

import pytest

from loadtests import openloop

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"


def _answering(answer: Callable[[int], bytes]) -> Callable[..., Awaitable[None]]:
    """A server's connection handler that answers its n-th pipelined produce (n from 1, counted
    over every connection) with `answer(n)`."""
    answered = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal answered
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                break
            length = openloop.CONTENT_LENGTH.search(head)
            await reader.readexactly(int(length.group(1)) if length else 0)
            answered += 1
            writer.write(answer(answered))
        writer.close()

    return handle


async def test_the_producer_never_sleeps_below_a_tick(monkeypatch: pytest.MonkeyPatch) -> None:
    server = await asyncio.start_server(_answering(lambda _: OK), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    sleeps: list[float] = []
    real_sleep = asyncio.sleep

    async def recorded(delay: float, *args: Any) -> Any:
        sleeps.append(delay)
        return await real_sleep(delay, *args)

    monkeypatch.setattr(asyncio, "sleep", recorded)
    barrier = threading.Barrier(1)
    params = {"system": "sluice", "port": port, "topic": "t", "rate": 5_000, "seconds": 0.3}
    failed: Synchronized[int] = multiprocessing.Value("q", -1)
    async with server:
        result = await openloop._produce(params, barrier, failed)
    assert result["sent"] == result["acknowledged"] == 1_500
    assert result["failures"] == failed.value == 0
    pacing = [delay for delay in sleeps if delay != openloop.DRAIN_POLL_S]
    assert pacing and min(pacing) >= 0.001  # uvloop's timers tick in milliseconds
    assert len(pacing) <= result["sent"] / 2  # several records fall due per tick
    assert set(result["send_late"]) == {"p50_ms", "p99_ms", "p999_ms", "max_ms"}
    assert result["send_late"]["p50_ms"] >= 0


@pytest.mark.parametrize(
    ("split", "stream", "answers"),
    [
        (
            openloop.http_answer,
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
            b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 5\r\n\r\nbusy!"
            b"HTTP/1.1 204 No Content\r\n\r\n",
            [(200, b"{}"), (503, b"busy!"), (204, b"")],
        ),
        (
            openloop._redis_answer,
            b"$15\r\n1700000000000-0\r\n+OK\r\n-ERR no such key\r\n",
            [(200, b"1700000000000-0\r\n"), (200, b""), (500, b"")],
        ),
    ],
)
async def test_answers_are_split_however_the_bytes_arrive(
    split: openloop.Splitter, stream: bytes, answers: list[tuple[int, bytes]]
) -> None:
    """Every answer is handed on once, whole and in order, whether the bytes come at once, one
    by one, or cut anywhere."""
    for size in (len(stream), 1, 7):
        got: list[tuple[int, bytes]] = []

        def seen(status: int, body: bytes, got: list[tuple[int, bytes]] = got) -> None:
            got.append((status, body))

        protocol = openloop.Answers(split, seen)
        for at in range(0, len(stream), size):
            protocol.data_received(stream[at : at + size])
        assert got == answers
        assert not protocol.buffer


async def test_the_consumer_is_told_how_many_produces_failed() -> None:
    """A refused produce's record never arrives: the producer hands its failures on once it
    has its answers, and the consumer's wait ends at the records that can arrive."""
    refused = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 2\r\n\r\n{}"
    every_other_refused = _answering(lambda n: refused if n % 2 else OK)
    server = await asyncio.start_server(every_other_refused, "127.0.0.1", 0)
    params = {"system": "sluice", "port": server.sockets[0].getsockname()[1], "topic": "t",
              "rate": 1_000, "seconds": 0.1}  # fmt: skip
    failed: Synchronized[int] = multiprocessing.Value("q", -1)
    assert not openloop._all_arrived(99, 100, failed)  # before the producer's answers: all
    async with server:
        result = await openloop._produce(params, threading.Barrier(1), failed)
    assert result["failures"] == failed.value == 50
    assert openloop._all_arrived(50, 100, failed) and not openloop._all_arrived(49, 100, failed)
