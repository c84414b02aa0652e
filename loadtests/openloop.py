"""Open-loop end-to-end latency: produce on a clock, consume with long-polls, measure from schedule.

The producer process sends single-record requests at fixed times t0 + i/rate over a few
pipelined HTTP/1.1 (or RESP) connections and never waits for an answer before the next send,
so a slow server cannot slow the offered load (no coordinated omission, as in wrk2). Each
record's value is its scheduled send time; the consumer process long-polls (Sluice fetch with
`timeout_ms`, Redis XREAD BLOCK) and takes latency = arrival time - scheduled time.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import queue
import re
import threading
import time
from collections import deque
from typing import Any

import aiohttp
import orjson
import redis.asyncio as aioredis
import uvloop

from loadtests.common import cpu_seconds

CONNECTIONS = 8
DRAIN_S = 10.0
MIN_SLEEP_S = 0.001
DRAIN_POLL_S = 0.01
CONTENT_LENGTH = re.compile(rb"content-length:\s*(\d+)", re.I)


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


async def _sluice_reply(reader: asyncio.StreamReader) -> bool:
    head = await reader.readuntil(b"\r\n\r\n")
    length = CONTENT_LENGTH.search(head)
    await reader.readexactly(int(length.group(1)) if length else 0)
    return head[9:10] == b"2"


def _redis_request(params: dict[str, Any], scheduled_ms: float) -> bytes:
    value = b"%.3f" % scheduled_ms
    stream = params["stream"].encode()
    return b"*5\r\n$4\r\nXADD\r\n$%d\r\n%s\r\n$1\r\n*\r\n$1\r\nv\r\n$%d\r\n%s\r\n" % (
        len(stream),
        stream,
        len(value),
        value,
    )


async def _redis_reply(reader: asyncio.StreamReader) -> bool:
    line = await reader.readline()
    if line[:1] == b"$":
        await reader.readexactly(int(line[1:]) + 2)
    return line[:1] in (b"$", b"+")


async def _produce(params: dict[str, Any], barrier: threading.Barrier) -> dict[str, Any]:
    """Send `rate` requests/s for `seconds` by the clock; ack latency counts from the schedule."""
    redis = params["system"] == "redis"
    make = _redis_request if redis else _sluice_request
    read = _redis_reply if redis else _sluice_reply
    connections = [
        await asyncio.open_connection("127.0.0.1", params["port"]) for _ in range(CONNECTIONS)
    ]
    pending: list[deque[float]] = [deque() for _ in connections]
    acks: list[float] = []
    failures = 0
    total = int(params["rate"] * params["seconds"])

    async def collect(index: int) -> None:
        nonlocal failures
        reader = connections[index][0]
        while True:
            ok = await read(reader)
            acks.append(time.time() * 1000 - pending[index].popleft())
            failures += not ok

    readers = [asyncio.create_task(collect(i)) for i in range(len(connections))]
    barrier.wait(timeout=120)
    cpu_before = time.process_time()
    interval = 1.0 / params["rate"]
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
            slot = sent % len(connections)
            pending[slot].append(scheduled_ms)
            connections[slot][1].write(make(params, scheduled_ms))
            sent += 1
    send_seconds = time.time() - start
    deadline = time.time() + DRAIN_S
    while len(acks) < total and time.time() < deadline:
        await asyncio.sleep(DRAIN_POLL_S)
    for task in readers:
        task.cancel()
    for _, writer in connections:
        writer.close()
    return {
        "sent": sent,
        "acknowledged": len(acks),
        "failures": failures,
        "achieved_rate": round(sent / send_seconds, 1),
        "ack": percentiles(acks),
        "send_late": percentiles(late),
        "cpu_s": time.process_time() - cpu_before,
    }


async def _consume(params: dict[str, Any], barrier: threading.Barrier) -> dict[str, Any]:
    """Long-poll until every produced record arrived (or the drain deadline passed)."""
    total = int(params["rate"] * params["seconds"])
    latencies: list[float] = []
    deadline_after = params["seconds"] + DRAIN_S
    if params["system"] == "redis":
        client = aioredis.Redis(port=params["port"])
        await client.execute_command("PING")  # type: ignore[no-untyped-call]
        barrier.wait(timeout=120)
        cpu_before, deadline = time.process_time(), time.time() + deadline_after
        last: bytes | str = "0-0"
        while len(latencies) < total and time.time() < deadline:
            reply = await client.xread({params["stream"]: last}, count=1000, block=1000)
            now_ms = time.time() * 1000
            for _, entries in reply or []:
                latencies.extend(now_ms - float(fields[b"v"]) for _, fields in entries)
                last = entries[-1][0]
        await client.aclose()
    else:
        base = f"{params['url']}/v1/topics/{params['topic']}/partitions/0/records"
        async with aiohttp.ClientSession() as http:
            await (await http.get(f"{params['url']}/healthz")).read()
            barrier.wait(timeout=120)
            cpu_before, deadline = time.process_time(), time.time() + deadline_after
            offset = 0
            while len(latencies) < total and time.time() < deadline:
                query = f"?offset={offset}&timeout_ms=1000&max_records=1000"
                async with http.get(base + query) as response:
                    body = await response.read()
                now_ms = time.time() * 1000
                doc = orjson.loads(body)
                latencies.extend(now_ms - record["value"] for record in doc["records"])
                offset = doc["next_offset"]
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
) -> None:
    """Process entry for the producer or the consumer; every failure goes back to the bench."""
    try:
        runner = _produce if role == "producer" else _consume
        results.put((role, uvloop.run(runner(params, barrier))))
    except BaseException as error:  # report every failure to the bench, then end the process
        barrier.abort()
        results.put((role, {"error": f"{role}: {type(error).__name__}: {error}"}))


def run_latency(params: dict[str, Any], server_pid: int) -> dict[str, Any]:
    """One rate: a producer process and a consumer process, started together."""
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(3)
    results: multiprocessing.Queue[Any] = context.Queue()
    processes = [
        context.Process(target=_role_main, args=(role, params, barrier, results), daemon=True)
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
