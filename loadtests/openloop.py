"""Open-loop end-to-end latency: produce on a clock, consume with long-polls, measure from schedule.

The producer process sends single-record requests at fixed times t0 + i/rate over a few
pipelined HTTP/1.1 (or RESP) connections and never waits for an answer before the next send,
so a slow server cannot slow the offered load (no coordinated omission, as in wrk2). Each
record's value is its scheduled send time; the consumer process long-polls (Sluice fetch with
`timeout_ms`, Redis XREAD BLOCK) and takes latency = arrival time - scheduled time.
Answers are read by a bare asyncio Protocol (Sluice's fetches go out on one keep-alive
connection the same way), not a client library: on a machine of two cores, every CPU-second the
generators spend is taken from the server they measure.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import multiprocessing
import queue
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from multiprocessing.sharedctypes import Synchronized
from typing import Any, cast

import orjson
import redis.asyncio as aioredis
import uvloop

from loadtests.common import cpu_seconds

CONNECTIONS = 8
DRAIN_S = 10.0
MIN_SLEEP_S = 0.001
DRAIN_POLL_S = 0.01
CONTENT_LENGTH = re.compile(rb"content-length:\s*(\d+)", re.I)
Answer = tuple[int, int, int]  # its end, its status (RESP: 200 or 500), where its body starts
Splitter = Callable[[bytearray, int], Answer | None]


def percentiles(values: list[float]) -> dict[str, float]:
    """p50/p99/p99.9/max of milliseconds (nearest rank)."""
    if not values:
        return {}
    ordered = sorted(values)

    def rank(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)

    return {"p50_ms": rank(0.5), "p99_ms": rank(0.99), "p999_ms": rank(0.999), "max_ms": rank(1)}


def _sluice_request(params: dict[str, Any], scheduled_ms: float) -> bytes:
    body = b'{"records":[{"value":%.3f}]}' % scheduled_ms
    return (
        b"POST /v1/topics/%s/partitions/0/records?acks=1 HTTP/1.1\r\nHost: bench\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
        % (params["topic"].encode(), len(body))
    ) + body


def http_answer(buffer: bytearray, at: int) -> Answer | None:
    """The HTTP/1.1 answer (Content-Length bodies) starting at `at`, if it is all there."""
    head_end = buffer.find(b"\r\n\r\n", at)
    if head_end < 0:
        return None
    length = CONTENT_LENGTH.search(buffer, at, head_end)
    start = head_end + 4
    end = start + (int(length.group(1)) if length else 0)
    if len(buffer) < end:
        return None
    return end, int(buffer[at + 9 : at + 12]), start


def _redis_request(params: dict[str, Any], scheduled_ms: float) -> bytes:
    value = b"%.3f" % scheduled_ms
    stream = params["stream"].encode()
    return b"*5\r\n$4\r\nXADD\r\n$%d\r\n%s\r\n$1\r\n*\r\n$1\r\nv\r\n$%d\r\n%s\r\n" % (
        len(stream),
        stream,
        len(value),
        value,
    )


def _redis_answer(buffer: bytearray, at: int) -> Answer | None:
    """The RESP reply to an XADD (a bulk string, or a simple string or error line) at `at`."""
    line_end = buffer.find(b"\r\n", at)
    if line_end < 0:
        return None
    kind = bytes(buffer[at : at + 1])
    end = line_end + 2
    if kind == b"$":
        end += int(buffer[at + 1 : line_end]) + 2
        if len(buffer) < end:
            return None
    return end, 200 if kind in (b"$", b"+") else 500, line_end + 2


class Answers(asyncio.Protocol):
    """One connection's answers, split as they arrive by `split` and each handed to
    `on_answer(status, body)`: no StreamReader or client library, so that the generator's own CPU
    stays small beside the server it measures on the same cores."""

    def __init__(self, split: Splitter, on_answer: Callable[[int, bytes], None]) -> None:
        self.split = split
        self.on_answer = on_answer
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        at = 0
        while (answer := self.split(buffer, at)) is not None:
            end, status, body = answer
            self.on_answer(status, bytes(buffer[body:end]))
            at = end
        del buffer[:at]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_exception(exc or ConnectionResetError("the server closed the connection"))
            self.lost.exception()  # retrieved here: a producer's connections close at its end


async def connect(port: int, split: Splitter, on_answer: Callable[[int, bytes], None]) -> Answers:
    loop = asyncio.get_running_loop()
    _, protocol = await loop.create_connection(lambda: Answers(split, on_answer), "127.0.0.1", port)
    return protocol


@dataclasses.dataclass(frozen=True)
class Sent:
    """What an open-loop producer did (milliseconds, counted from each request's schedule)."""

    sent: int
    answers: list[float]  # from the schedule to each answer
    failures: int  # answers not 2xx
    late: list[float]  # from the schedule to each send
    achieved_rate: float  # sent over the seconds the sends took
    sends_ended: float  # time.monotonic() after the last send
    cpu_s: float  # this process's, from the first send to the end of the drain


async def send_on_schedule(
    port: int,
    split: Splitter,
    connections: int,
    rate: float,
    seconds: float,
    request: Callable[[int, float], bytes],
    ready: Callable[[], object] = lambda: None,
) -> Sent:
    """Send `rate` requests/s for `seconds` by the clock over `connections` pipelined
    connections in turn, `request(i, scheduled_ms)` the i-th, never waiting for an answer before
    the next send; then up to DRAIN_S for the answers. `ready` runs once connected."""
    pending: list[deque[float]] = [deque() for _ in range(connections)]
    answers: list[float] = []
    failures = 0

    def answered(slot: int, status: int, _: bytes) -> None:
        nonlocal failures
        answers.append(time.time() * 1000 - pending[slot].popleft())
        failures += not 200 <= status < 300

    opened = [
        await connect(port, split, functools.partial(answered, slot)) for slot in range(connections)
    ]
    total = int(rate * seconds)
    ready()
    cpu_before = time.process_time()
    interval = 1.0 / rate
    start = time.time() + 0.05
    sent = 0
    late: list[float] = []
    while sent < total:
        now = time.time()
        due = start + sent * interval
        if due > now:
            # The loop's timers tick in milliseconds: a shorter sleep returns at once, and
            # the generator would spin a whole core away from the server (as wrk2, requests
            # that fell due meanwhile go together; their lateness counts in the latency).
            await asyncio.sleep(max(due - now, MIN_SLEEP_S))
            continue
        while sent < total and start + sent * interval <= now:
            scheduled_ms = (start + sent * interval) * 1000
            late.append(now * 1000 - scheduled_ms)
            slot = sent % connections
            pending[slot].append(scheduled_ms)
            transport = opened[slot].transport
            assert transport is not None
            transport.write(request(sent, scheduled_ms))
            sent += 1
    send_seconds = time.time() - start
    sends_ended = time.monotonic()
    deadline = time.time() + DRAIN_S
    while len(answers) < total and time.time() < deadline:
        await asyncio.sleep(DRAIN_POLL_S)
    for connection in opened:
        if connection.transport is not None:
            connection.transport.close()
    return Sent(
        sent=sent,
        answers=answers,
        failures=failures,
        late=late,
        achieved_rate=round(sent / send_seconds, 1),
        sends_ended=sends_ended,
        cpu_s=time.process_time() - cpu_before,
    )


def _all_arrived(received: int, total: int, failed: Synchronized[int]) -> bool:
    """Every record that can arrive did: `total`, less the produces that failed once the
    producer has its answers (`failed` is -1 until then): a consumer that waited for those
    spent the whole drain on a starved cell."""
    refused = failed.value
    return received >= total - max(refused, 0)


async def _produce(
    params: dict[str, Any], barrier: threading.Barrier, failed: Synchronized[int]
) -> dict[str, Any]:
    """Send `rate` requests/s for `seconds` by the clock; ack latency counts from the schedule."""
    redis = params["system"] == "redis"
    make = _redis_request if redis else _sluice_request
    done = await send_on_schedule(
        params["port"],
        _redis_answer if redis else http_answer,
        CONNECTIONS,
        params["rate"],
        params["seconds"],
        lambda _, scheduled_ms: make(params, scheduled_ms),
        lambda: barrier.wait(timeout=120),
    )
    failed.value = done.failures
    return {
        "sent": done.sent,
        "acknowledged": len(done.answers),
        "failures": done.failures,
        "achieved_rate": done.achieved_rate,
        "ack": percentiles(done.answers),
        "send_late": percentiles(done.late),
        "cpu_s": done.cpu_s,
    }


async def _consume_sluice(
    params: dict[str, Any],
    total: int,
    latencies: list[float],
    deadline: float,
    failed: Synchronized[int],
) -> None:
    """Long-poll fetches on one keep-alive connection until every record that can arrive
    did (`_all_arrived`)."""
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[tuple[int, bytes]] = loop.create_future()

    def answered(status: int, body: bytes) -> None:
        answer.set_result((status, body))

    connection = await connect(params["port"], http_answer, answered)
    transport = connection.transport
    assert transport is not None
    target = f"/v1/topics/{params['topic']}/partitions/0/records"
    offset = 0
    try:
        while not _all_arrived(len(latencies), total, failed) and time.time() < deadline:
            transport.write(
                b"GET %s?offset=%d&timeout_ms=1000&max_records=1000 HTTP/1.1\r\nHost: bench\r\n\r\n"
                % (target.encode(), offset)
            )
            waits: list[asyncio.Future[Any]] = [answer, connection.lost]
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            if not answer.done():
                await connection.lost  # raises what ended the connection
            status, body = answer.result()
            answer = loop.create_future()
            if not 200 <= status < 300:
                raise RuntimeError(f"fetch failed: {body[:200]!r}")
            now_ms = time.time() * 1000
            doc = orjson.loads(body)
            latencies.extend([now_ms - record["value"] for record in doc["records"]])
            offset = doc["next_offset"]
    finally:
        transport.close()


async def _consume(
    params: dict[str, Any], barrier: threading.Barrier, failed: Synchronized[int]
) -> dict[str, Any]:
    """Long-poll until every record that can arrive did (or the drain deadline passed)."""
    total = int(params["rate"] * params["seconds"])
    latencies: list[float] = []
    deadline_after = params["seconds"] + DRAIN_S
    if params["system"] == "redis":
        client = aioredis.Redis(port=params["port"])
        await client.execute_command("PING")  # type: ignore[no-untyped-call]
        barrier.wait(timeout=120)
        cpu_before, deadline = time.process_time(), time.time() + deadline_after
        last: bytes | str = "0-0"
        while not _all_arrived(len(latencies), total, failed) and time.time() < deadline:
            reply = await client.xread({params["stream"]: last}, count=1000, block=1000)
            now_ms = time.time() * 1000
            for _, entries in reply or []:
                latencies.extend(now_ms - float(fields[b"v"]) for _, fields in entries)
                last = entries[-1][0]
        await client.aclose()
    else:
        barrier.wait(timeout=120)
        cpu_before = time.process_time()
        await _consume_sluice(params, total, latencies, time.time() + deadline_after, failed)
    return {
        "received": len(latencies),
        "latency": percentiles(latencies),
        "cpu_s": time.process_time() - cpu_before,
    }


def _role_main(
    role: str,
    params: dict[str, Any],
    barrier: threading.Barrier,
    results: multiprocessing.Queue[Any],
    failed: Synchronized[int],
) -> None:
    """Process entry for the producer or the consumer; every failure goes back to the bench."""
    try:
        runner = _produce if role == "producer" else _consume
        results.put((role, uvloop.run(runner(params, barrier, failed))))
    except BaseException as error:  # report every failure to the bench, then end the process
        barrier.abort()
        results.put((role, {"error": f"{role}: {type(error).__name__}: {error}"}))


def run_latency(params: dict[str, Any], server_pid: int) -> dict[str, Any]:
    """One rate: a producer process and a consumer process, started together."""
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(3)
    results: multiprocessing.Queue[Any] = context.Queue()
    failed: Synchronized[int] = context.Value("q", -1)
    processes = [
        context.Process(
            target=_role_main, args=(role, params, barrier, results, failed), daemon=True
        )
        for role in ("consumer", "producer")
    ]
    for process in processes:
        process.start()
    server_before = cpu_seconds(server_pid)
    try:
        barrier.wait(timeout=120)
        server_before = cpu_seconds(server_pid)
    except threading.BrokenBarrierError:
        pass
    outcome: dict[str, dict[str, Any]] = {}
    for _ in processes:
        try:
            role, got = results.get(timeout=params["seconds"] + DRAIN_S + 120)
            outcome[role] = got
        except queue.Empty:
            outcome["missing"] = {"error": "a latency process gave no result"}
    server_cpu = cpu_seconds(server_pid) - server_before
    for process in processes:
        process.join(timeout=30)
    errors = [r["error"] for r in outcome.values() if "error" in r]
    if errors:
        return {"rate": params["rate"], "error": "; ".join(errors)}
    producer, consumer = outcome["producer"], outcome["consumer"]
    result: dict[str, Any] = {
        "rate": params["rate"],
        "achieved_rate": producer["achieved_rate"],
        "sent": producer["sent"],
        "received": consumer["received"],
        "failures": producer["failures"],
        **consumer["latency"],
        "ack": producer["ack"],
        "send_late_p99_ms": producer["send_late"].get("p99_ms"),
        "generator_cpu_s": round(producer["cpu_s"] + consumer["cpu_s"], 2),
        "producer_cpu_s": round(producer["cpu_s"], 2),
        "consumer_cpu_s": round(consumer["cpu_s"], 2),
        "server_cpu_s": round(server_cpu, 2),
    }
    if consumer["received"] < producer["sent"] or producer["failures"]:
        result["error"] = (
            f"{consumer['received']} of {producer['sent']} records arrived, "
            f"{producer['failures']} produce failures"
        )
    return result
