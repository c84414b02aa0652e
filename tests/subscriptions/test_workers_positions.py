"""`--workers 2` (two nodes and their etcd, real processes): a subscription's partitions are
dispatched by both workers, and a worker commits to the group's coordinator on the other
worker over the internal positions route; every record is delivered in order and committed,
and a delete forgets the positions on both."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_workers import start_supervisor
from tests.subscriptions.tracing import TracingReceiver, check, serving

pytestmark = pytest.mark.skipif(shutil.which("etcd") is None, reason="needs etcd (etcd-server)")

PARTITIONS, PER_PARTITION = 4, 25


async def test_commits_reach_the_coordinator_on_the_other_worker(tmp_path: Path) -> None:
    data = tmp_path / "data"
    supervisor = await asyncio.to_thread(
        start_supervisor, data, "--subscription-allowed-hosts", "127.0.0.1"
    )
    try:
        async with (
            serving(TracingReceiver()) as receiver,
            httpx.AsyncClient(base_url=supervisor.url, timeout=30) as http,
        ):
            made = await http.post("/v1/topics", json={"name": "t", "partitions": PARTITIONS})
            assert made.status_code == 201, made.text
            leaders = {p["leader"] for p in made.json()["partitions"]}
            assert leaders == {0, 1}, leaders
            produced: dict[tuple[int, int], str | None] = {}
            for p in range(PARTITIONS):
                records = [{"key": f"k{i % 3}", "value": i} for i in range(PER_PARTITION)]
                answer = await http.post(f"/v1/topics/t/partitions/{p}/records",
                                         json={"records": records})  # fmt: skip
                assert answer.status_code == 200, answer.text
                produced |= {(p, i): f"k{i % 3}" for i in range(PER_PARTITION)}
            sub = await http.post("/v1/subscriptions", json={
                "name": "s", "topic": "t", "endpoint": receiver.url, "start": "earliest",
                "ordering": "key", "concurrency": {"max_in_flight": 2},
            })  # fmt: skip
            assert sub.status_code == 201, sub.text
            group = sub.json()["group"]
            total = PARTITIONS * PER_PARTITION
            await receiver.until(lambda _: len(receiver.acked()) == total, timeout=60)
            check(receiver.traces, produced, "key", 2, sub.json()["signing_secret"])

            async def committed() -> list[int | None]:
                doc = (await http.get(f"/v1/groups/{group}")).json()
                rows = sorted(doc.get("partitions", []), key=lambda r: r["partition"])
                return [r["committed_offset"] for r in rows]

            async with asyncio.timeout(30):
                while await committed() != [PER_PARTITION] * PARTITIONS:
                    await asyncio.sleep(0.05)
            assert (await http.delete("/v1/subscriptions/s")).status_code == 204
            for _ in range(10):  # connections land on either worker
                assert (await http.get(f"/v1/groups/{group}")).status_code == 404
    finally:
        if supervisor.process.poll() is None:
            assert await asyncio.to_thread(supervisor.stop) == 0
