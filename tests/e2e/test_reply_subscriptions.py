"""Reply subscriptions against real `python -m gateway` processes: a node killed with SIGKILL
as soon as a batch's replies are in the reply topic (while that batch's transaction is under
way: its offsets and commit follow), then started again; and a three-node cluster on a real
etcd whose partition leader is killed mid-delivery. Read at read_committed, the reply topic
holds every reply exactly once."""

from __future__ import annotations

import asyncio
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from gateway.workers.local_cluster import LocalCluster
from tests.e2e.conftest import Server, start_server
from tests.e2e.test_subscription_faults import DEADLINE_S, call, cluster
from tests.subscriptions.receiver import Receiver, serve

__all__ = ["cluster"]  # the three-node cluster fixture

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


def echo_partitioned(body: bytes) -> tuple[bytes, str]:
    doc = json.loads(body)
    replies = [{"value": [doc["partition"], r["value"]]} for r in doc["records"]]
    return json.dumps({"records": replies}).encode(), "application/json"


async def committed_everywhere(http: httpx.AsyncClient, url: str) -> list[Any]:
    """The reply topic's values read at read_committed, all partitions (through `url`)."""
    found: list[Any] = []
    params = {"isolation": "read_committed", "timeout_ms": "0", "max_records": "10000"}
    for partition in range(3):
        path = f"{url}/v1/topics/out/partitions/{partition}/records"
        answer = await call(http, "GET", path, params=params)
        assert answer.status_code == 200, answer.text
        found += [r["value"] for r in answer.json()["records"]]
    return found


@pytest.mark.skipif(shutil.which("etcd") is None, reason="needs etcd (etcd-server)")
async def test_a_cluster_commits_each_reply_once_through_a_leaders_death(
    cluster: LocalCluster,
) -> None:
    """Three nodes: each partition's transactions go to their ids' coordinators wherever they
    are; a partition's leader is killed mid-delivery, the new leader's dispatcher begins under
    the same id (aborting what the dead one left open) and goes on from the committed
    position."""
    receiver = Receiver(behaviour=lambda n, _: (200, {}), reply=echo_partitioned)
    runner = await serve(receiver)
    urls = [node.url for node in cluster.nodes]
    per_partition = 60
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            for name in ("t", "out"):
                doc = {"name": name, "partitions": 3, "replication_factor": 3}
                answer = await call(http, "POST", f"{urls[0]}/v1/topics", json=doc)
                assert answer.status_code == 201, answer.text
            answer = await call(http, "POST", f"{urls[1]}/v1/subscriptions", json={
                "name": "s", "topic": "t", "endpoint": receiver.url, "start": "earliest",
                "format": "json", "batching": {"max_records": BATCH, "max_wait_ms": 0},
                "reply": {"topic": "out"}, "isolation": "read_committed",
            })  # fmt: skip
            assert answer.status_code == 201, answer.text
            for partition in range(3):
                records = [{"value": i} for i in range(per_partition)]
                path = f"{urls[2]}/v1/topics/t/partitions/{partition}/records"
                answer = await call(http, "POST", path, json={"records": records})
                assert answer.status_code == 200, answer.text
            topic = (await call(http, "GET", f"{urls[0]}/v1/topics/t")).json()
            victim = topic["partitions"][0]["leader"]
            await receiver.until(lambda a: len(a) >= 4)
            await asyncio.to_thread(cluster.nodes[victim].kill)
            alive = next(node.url for node in cluster.nodes if node.running)
            expected = sorted([p, i] for p in range(3) for i in range(per_partition))
            async with asyncio.timeout(DEADLINE_S):
                while len(found := await committed_everywhere(http, alive)) < len(expected):
                    await asyncio.sleep(0.2)
            assert sorted(found) == expected  # each exactly once
    finally:
        await runner.cleanup()
