"""Consumers run in several processes so the Python client is not the bottleneck.

Each worker process sets up (session, group join), waits on a barrier with the others and the
bench, reads until the shared record counter reaches the expected total, and reports its
records, CPU seconds and the time its last data arrived. Workers: per-partition fetch and
group consume on Sluice (a bare HTTP/1.1 client + orjson), XREAD and XREADGROUP on Redis
(redis-py + hiredis). Each runs on uvloop.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import queue
import re
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from multiprocessing.sharedctypes import Synchronized
from typing import Any

import aiohttp
import orjson
import redis.asyncio as aioredis
import uvloop

from loadtests.common import cpu_seconds

DEADLINE_S = 300.0
POLL_MS = 200
CONTENT_LENGTH = re.compile(rb"content-length:\s*(\d+)", re.I)
NEXT_OFFSET = re.compile(rb"sluice-next-offset:\s*(\d+)", re.I)


class RawHttp:
    """A bare keep-alive HTTP/1.1 client: aiohttp's response handling cost the client more
    CPU per record than the gateway spent serving it, which made the client the bottleneck."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, url: str) -> RawHttp:
        host, port = url.split("://", 1)[1].rsplit(":", 1)
        return cls(*await asyncio.open_connection(host, int(port)))

    async def get(self, target: str, accept: str = "application/json") -> tuple[int, bytes, bytes]:
        """Status, head and body of one GET."""
        self.writer.write(f"GET {target} HTTP/1.1\r\nHost: b\r\nAccept: {accept}\r\n\r\n".encode())
        return await self._answer()

    async def send(
        self,
        method: str,
        target: str,
        body: bytes = b"",
        content_type: str = "application/json",
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, bytes, bytes]:
        """Status, head and body of one request with a body (a POST, a DELETE), with
        `headers` besides its own (an Idempotency-Key)."""
        extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
        head = (
            f"{method} {target} HTTP/1.1\r\nHost: b\r\nContent-Type: {content_type}\r\n"
            f"{extra}Content-Length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        return await self._answer()

    async def _answer(self) -> tuple[int, bytes, bytes]:
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        if status == 204:  # no body, and no Content-Length to say so
            return status, head, b""
        length = CONTENT_LENGTH.search(head)
        if length is None:
            raise RuntimeError(f"no Content-Length in {head[:200]!r}")
        return status, head, await self.reader.readexactly(int(length.group(1)))

    def close(self) -> None:
        self.writer.close()


@dataclass
class Shared:
    """What every worker of one run shares: the start barrier and the delivered-records counter."""

    barrier: threading.Barrier
    counter: Synchronized[int]
    expected: int

    def add(self, n: int) -> None:
        """Count `n` delivered records."""
        with self.counter.get_lock():
            self.counter.value += n

    def done(self) -> bool:
        return self.counter.value >= self.expected


class Clock:
    """When a worker's last data arrived."""

    last = 0.0

    def saw(self, n: int) -> None:
        if n:
            self.last = time.time()


async def _sluice_partition_fetch(
    params: dict[str, Any], shared: Shared, clock: Clock, ready: Callable[[], None]
) -> int:
    """Read each partition from `start` to `end` with one fetch in flight per partition."""
    url, topic, accept = params["url"], params["topic"], params["accept"]
    ranges = params["ranges"]
    connections = [await RawHttp.open(url) for _ in ranges]
    total = 0

    json_body = accept == "application/json"

    async def one(http: RawHttp, partition: int, start: int, end: int) -> None:
        nonlocal total
        offset = start
        base = f"/v1/topics/{topic}/partitions/{partition}/records"
        while offset < end:
            query = f"?offset={offset}&max_records={params['max_records']}&timeout_ms=0"
            status, head, body = await http.get(base + query, accept)
            found = NEXT_OFFSET.search(head)
            if status != 200 or found is None:
                raise RuntimeError(f"fetch -> {status} {body[:200]!r}")
            next_offset = int(found.group(1))
            # JSON: count the records in the body, the same client work per record as the
            # group consumer does, so the group/partition ratio compares the gateway's work.
            count = body.count(b'"offset":') if json_body else min(next_offset, end) - offset
            offset = next_offset
            total += count
            clock.saw(count)
            shared.add(count)

    ready()
    try:
        await asyncio.gather(*(one(c, *r) for c, r in zip(connections, ranges, strict=True)))
    finally:
        for connection in connections:
            connection.close()
    return total


async def _sluice_group_consume(
    params: dict[str, Any], shared: Shared, clock: Clock, ready: Callable[[], None]
) -> int:
    """Join `members` members of one group, then each fetches until the group has everything."""
    url, group = params["url"], params["group"]
    base = f"{url}/v1/groups/{group}/members"
    total = 0
    async with aiohttp.ClientSession() as http:
        members = []
        for _ in range(params["members"]):
            join = {
                "topics": [params["topic"]],
                "session_timeout_ms": 30000,
                "auto_offset_reset": "earliest",
                "auto_commit": params.get("auto_commit", True),
            }
            async with http.post(base, json=join) as response:
                body = await response.read()
                if response.status != 201:
                    raise RuntimeError(f"POST {base} -> {response.status} {body[:300]!r}")
                members.append(orjson.loads(body)["member_id"])

        connections = [await RawHttp.open(url) for _ in members]
        prefix = base.split("://", 1)[1].split("/", 1)[1]

        async def one(http: RawHttp, member: str) -> None:
            nonlocal total
            query = f"?timeout_ms={POLL_MS}&max_records={params['max_records']}"
            target = f"/{prefix}/{member}/records{query}"
            checked = False
            while not shared.done():
                status, _, body = await http.get(target)
                if status != 200:
                    raise RuntimeError(f"GET {target} -> {status} {body[:300]!r}")
                # Count records without building them, so the client stays cheaper per record
                # than the gateway; one full parse per member first checks the answer's shape.
                count = body.count(b'"offset":') if checked else len(orjson.loads(body)["records"])
                checked = True
                total += count
                clock.saw(count)
                shared.add(count)

        ready()
        try:
            await asyncio.gather(*(one(c, m) for c, m in zip(connections, members, strict=True)))
        finally:
            for connection in connections:
                connection.close()
            for member in members:
                async with http.delete(f"{base}/{member}") as response:
                    await response.read()
    return total


def redis_client(port: int) -> aioredis.Redis:
    """redis-py without its per-entry Python conversion of stream replies: hiredis's nested lists
    are enough to count entries and find the last id, and keep the client off the critical path."""
    client = aioredis.Redis(port=port)
    for command in ("XREAD", "XREADGROUP", "XACK"):
        client.response_callbacks[command] = _raw
    return client


def _raw(response: Any, **_: Any) -> Any:
    return response


async def _redis_xread(
    params: dict[str, Any], shared: Shared, clock: Clock, ready: Callable[[], None]
) -> int:
    """XREAD BLOCK through each stream from the start, one call in flight per stream."""
    client = redis_client(params["port"])
    total = 0
    await client.execute_command("PING")  # type: ignore[no-untyped-call]

    async def one(stream: str, entries: int) -> None:
        nonlocal total
        last: bytes | str = "0-0"
        seen = 0
        while seen < entries:
            reply = await client.xread({stream: last}, count=params["max_records"], block=POLL_MS)
            if not reply:
                continue
            batch = reply[0][1]
            last = batch[-1][0]
            seen += len(batch)
            total += len(batch)
            clock.saw(len(batch))
            shared.add(len(batch))

    ready()
    try:
        await asyncio.gather(*(one(s, n) for s, n in params["streams"]))
    finally:
        await client.aclose()
    return total


async def _redis_xreadgroup(
    params: dict[str, Any], shared: Shared, clock: Clock, ready: Callable[[], None]
) -> int:
    """Consumers of one group: XACK what the previous call delivered, pipelined with XREADGROUP."""
    client = redis_client(params["port"])
    streams: list[str] = params["streams"]
    total = 0
    await client.execute_command("PING")  # type: ignore[no-untyped-call]

    async def one(consumer: str) -> None:
        nonlocal total
        pending: list[tuple[bytes, list[bytes]]] = []
        while not shared.done():
            pipe = client.pipeline(transaction=False)
            for stream, ids in pending:
                pipe.xack(stream, params["group"], *ids)
            pipe.xreadgroup(
                params["group"],
                consumer,
                dict.fromkeys(streams, ">"),
                count=params["max_records"],
                block=POLL_MS,
            )
            reply = (await pipe.execute())[-1] or []
            pending = [(name, [entry[0] for entry in entries]) for name, entries in reply]
            count = sum(len(ids) for _, ids in pending)
            total += count
            clock.saw(count)
            shared.add(count)

    ready()
    try:
        await asyncio.gather(*(one(c) for c in params["consumers"]))
    finally:
        await client.aclose()
    return total


Worker = Callable[[dict[str, Any], Shared, Clock, Callable[[], None]], Awaitable[int]]
WORKERS: dict[str, Worker] = {
    "sluice_partition_fetch": _sluice_partition_fetch,
    "sluice_group_consume": _sluice_group_consume,
    "redis_xread": _redis_xread,
    "redis_xreadgroup": _redis_xreadgroup,
}


async def _within_deadline(consuming: Awaitable[int]) -> int:
    async with asyncio.timeout(DEADLINE_S):
        return await consuming


def _worker_main(
    kind: str, params: dict[str, Any], shared: Shared, results: multiprocessing.Queue[Any]
) -> None:
    """Process entry: set up, meet the others at the barrier, consume, report."""
    clock = Clock()
    started = {"wall": 0.0, "cpu": 0.0}

    def ready() -> None:
        shared.barrier.wait(timeout=DEADLINE_S)
        started["wall"], started["cpu"] = time.time(), time.process_time()

    try:
        records = uvloop.run(_within_deadline(WORKERS[kind](params, shared, clock, ready)))
    except BaseException as error:  # report every failure to the bench, then end the process
        shared.barrier.abort()
        message = f"{type(error).__name__}: {error}".strip()
        results.put({"error": message or traceback.format_exc(limit=1)})
        return
    results.put(
        {
            "records": records,
            "start": started["wall"],
            "last": clock.last,
            "cpu_s": time.process_time() - started["cpu"],
        }
    )


def run_workers(
    kind: str, params: list[dict[str, Any]], expected: int, server_pid: int
) -> dict[str, Any]:
    """Run one worker process per params entry; throughput over the span they shared."""
    context = multiprocessing.get_context("fork")
    shared = Shared(context.Barrier(len(params) + 1), context.Value("q", 0), expected)
    results: multiprocessing.Queue[Any] = context.Queue()
    processes = [
        context.Process(target=_worker_main, args=(kind, p, shared, results), daemon=True)
        for p in params
    ]
    for process in processes:
        process.start()
    server_before = 0.0
    outcomes: list[dict[str, Any]] = []
    try:
        shared.barrier.wait(timeout=DEADLINE_S)
        server_before = cpu_seconds(server_pid)
    except threading.BrokenBarrierError:
        pass
    for _ in processes:
        try:
            outcomes.append(results.get(timeout=DEADLINE_S + 30))
        except queue.Empty:
            outcomes.append({"error": "a worker gave no result"})
    server_cpu = cpu_seconds(server_pid) - server_before
    for process in processes:
        process.join(timeout=30)
    errors = [o["error"] for o in outcomes if "error" in o]
    if errors:
        return {"error": errors[0]}
    records = sum(o["records"] for o in outcomes)
    seconds = max(o["last"] for o in outcomes) - min(o["start"] for o in outcomes)
    if records < expected:
        return {"error": f"only {records} of {expected} records arrived"}
    return {
        "records": records,
        "seconds": round(seconds, 3),
        "records_per_s": round(expected / seconds) if seconds > 0 else 0,
        "generator_cpu_s": round(sum(o["cpu_s"] for o in outcomes), 2),
        "server_cpu_s": round(server_cpu, 2),
        "processes": len(params),
    }
