"""A reply subscription against a real `python -m gateway` process: the node is killed with
SIGKILL as soon as a batch's replies are in the reply topic (while that batch's transaction is
under way: its offsets and commit follow), started again, and the reply topic read at
read_committed holds every reply exactly once."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web

from tests.e2e.conftest import Server, start_server
from tests.subscriptions.receiver import Receiver, serve

RECORDS, BATCH = 100, 5
HELD = 6  # the request held until the test watches the reply topic


def echo(body: bytes) -> tuple[bytes, str]:
    replies = [{"value": {"echo": r["value"]}} for r in json.loads(body)["records"]]
    return json.dumps({"records": replies}).encode(), "application/json"


@dataclass
class Held(Receiver):
    """Holds request HELD until `gate` opens; `arrived` says it came."""

    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    seen: int = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.seen += 1
        if self.seen == HELD:
            self.arrived.set()
            await self.gate.wait()
        return await super().handle(request)


async def read(http: httpx.AsyncClient, isolation: str, offset: int, wait_ms: int) -> list[Any]:
    params = {"isolation": isolation, "offset": str(offset), "timeout_ms": str(wait_ms),
              "max_records": "1000"}  # fmt: skip
    doc = (await http.get("/v1/topics/out/partitions/0/records", params=params)).json()
    return [r["value"]["echo"] for r in doc["records"]]


async def test_sigkill_between_the_replies_and_the_commit(tmp_path: Path) -> None:
    allowed = ("--subscription-allowed-hosts", "127.0.0.1")
    server: Server = start_server(tmp_path / "data", *allowed)
    receiver = Held(behaviour=lambda n, _: (200, {}), reply=echo)
    runner = await serve(receiver)
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
            for topic in ("t", "out"):
                assert (await http.post("/v1/topics", json={"name": topic})).status_code == 201
            sub = await http.post("/v1/subscriptions", json={
                "name": "s", "topic": "t", "endpoint": receiver.url, "start": "earliest",
                "format": "json", "batching": {"max_records": BATCH, "max_wait_ms": 50},
                "reply": {"topic": "out"},
            })  # fmt: skip
            assert sub.status_code == 201, sub.text
            group = sub.json()["group"]
            records = {"records": [{"value": i} for i in range(RECORDS)]}
            assert (await http.post("/v1/topics/t/records", json=records)).status_code == 200
            async with asyncio.timeout(30):
                await receiver.arrived.wait()
            end = (await http.get("/v1/topics/out")).json()["partitions"][0]["log_end_offset"]
            replies = asyncio.create_task(read(http, "read_uncommitted", end, 30_000))
            receiver.gate.set()
            assert await replies  # the held batch's replies, produced in its transaction
        server.kill()
        # In a thread: the receiver runs on this loop, and the restarted node delivers at once.
        server = await asyncio.to_thread(start_server, tmp_path / "data", *allowed)
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
            async with asyncio.timeout(60):
                while len(found := await read(http, "read_committed", 0, 0)) < RECORDS:
                    await asyncio.sleep(0.1)
                while (await http.get(f"/v1/groups/{group}")).json()["partitions"][0][
                    "committed_offset"
                ] != RECORDS:
                    await asyncio.sleep(0.1)
            assert sorted(found) == list(range(RECORDS))  # each exactly once
    finally:
        if server.process.poll() is None:
            server.stop()
        await runner.cleanup()
    delivered = [r["offset"] for a in receiver.acked() for r in json.loads(a.body)["records"]]
    assert sorted(set(delivered)) == list(range(RECORDS))
