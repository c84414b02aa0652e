"""Memory per parked long-poll: park polls in growing steps and read the server's RSS.

Sluice: long-poll fetches past the end of a partition, each on its own HTTP/1.1 connection,
counted by the gateway's `sluice_parked_fetches` gauge. Redis: `XREAD BLOCK 0` clients, counted
by `INFO clients` blocked_clients. Polls stay parked across steps, so each step's figure is
(RSS now - RSS before the first poll) / polls parked; a record then releases them all.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from loadtests.common import RedisServer, rss_bytes

PARK_TIMEOUT_S = 120.0


async def _wait_for(count: Callable[[], Awaitable[float]], target: int) -> None:
    """Poll a server-side count until it reaches `target`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + PARK_TIMEOUT_S
    while await count() < target:
        if loop.time() > deadline:
            raise TimeoutError(f"only {await count()} of {target} polls parked")
        await asyncio.sleep(0.05)


def _row(polls: int, before: int, after: int) -> dict[str, Any]:
    return {
        "polls": polls,
        "rss_delta_bytes": after - before,
        "bytes_per_parked_poll": round((after - before) / polls),
    }


async def sluice_parked(url: str, topic: str, pid: int, steps: list[int]) -> list[dict[str, Any]]:
    rows = []
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as http:

        async def parked() -> float:
            async with http.get(f"{url}/metrics") as response:
                found = re.search(r"^sluice_parked_fetches (\S+)", await response.text(), re.M)
            return float(found.group(1)) if found else 0.0

        await parked()
        before = rss_bytes(pid)
        target = f"{url}/v1/topics/{topic}/partitions/0/records?offset=latest&timeout_ms=300000"
        tasks: list[asyncio.Task[aiohttp.ClientResponse]] = []
        for step in steps:
            tasks += [asyncio.create_task(http.get(target)) for _ in range(step - len(tasks))]
            await _wait_for(parked, step)
            rows.append(_row(step, before, rss_bytes(pid)))
        async with http.post(
            f"{url}/v1/topics/{topic}/partitions/0/records", json={"records": [{"value": 1}]}
        ) as response:
            await response.read()
        for response in await asyncio.gather(*tasks):
            if response.status != 200:
                raise RuntimeError(f"a parked poll answered {response.status}")
            response.release()
    return rows


async def redis_parked(server: RedisServer, stream: str, steps: list[int]) -> list[dict[str, Any]]:
    pid = server.process.pid
    command = (
        b"*6\r\n$5\r\nXREAD\r\n$5\r\nBLOCK\r\n$1\r\n0\r\n$7\r\nSTREAMS\r\n$%d\r\n%s\r\n$1\r\n$\r\n"
    )
    request = command % (len(stream), stream.encode())

    async def blocked() -> float:
        info = await asyncio.to_thread(server.info, "clients")
        return float(info.get("blocked_clients", 0))

    before = rss_bytes(pid)
    rows = []
    connections: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    for step in steps:
        while len(connections) < step:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(request)
            connections.append((reader, writer))
        await _wait_for(blocked, step)
        rows.append(_row(step, before, rss_bytes(pid)))
    await asyncio.to_thread(server.command, "XADD", stream, "*", "v", "1")
    for reader, writer in connections:
        if not (await reader.readline()).startswith(b"*"):
            raise RuntimeError("a blocked XREAD did not answer with entries")
        writer.close()
    return rows
