"""SIGKILL of a real `python -m gateway` process mid-delivery under orderings `key` and
`none`: after the restart nothing is skipped, what is delivered twice is bounded by the
in-flight window (max_in_flight batches outstanding) and UNCOMMITTED_WINDOWS more
acknowledged but not yet committed, and every attempt, across both lives of the node, holds
to the ordering checker."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import httpx
import pytest

from groups.subscriptions.state import UNCOMMITTED_WINDOWS
from tests.e2e.conftest import start_server
from tests.subscriptions.tracing import TracingReceiver, check, serving

BATCH, WINDOW, RECORDS = 5, 4, 400


@pytest.mark.parametrize("ordering", ["key", "none"])
async def test_sigkill_redelivers_at_most_the_window(tmp_path: Path, ordering: str) -> None:
    allowed = ("--subscription-allowed-hosts", "127.0.0.1")
    keys = [f"k{i % 10}" for i in range(RECORDS)]
    async with serving(TracingReceiver(delay_s=0.002)) as receiver:
        server = start_server(tmp_path / "data", *allowed)
        try:
            async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
                made = await http.post("/v1/topics", json={"name": "t"})
                assert made.status_code == 201
                sub = await http.post("/v1/subscriptions", json={
                    "name": "s", "topic": "t", "endpoint": receiver.url, "start": "earliest",
                    "ordering": ordering, "batching": {"max_records": BATCH},
                    "concurrency": {"max_in_flight": WINDOW},
                })  # fmt: skip
                assert sub.status_code == 201, sub.text
                secret = sub.json()["signing_secret"]
                records = {"records": [{"key": k, "value": i} for i, k in enumerate(keys)]}
                produced = await http.post("/v1/topics/t/records", json=records)
                assert produced.status_code == 200
            await receiver.until(lambda _: len(receiver.acked()) >= 100)
            server.kill()
            killed_at = len(receiver.traces)
            # In a thread: the receiver runs on this loop, and the restarted node delivers at once.
            server = await asyncio.to_thread(start_server, tmp_path / "data", *allowed)
            await receiver.until(lambda _: len(receiver.acked()) >= RECORDS, timeout=60)
        finally:
            if server.process.poll() is None:
                server.stop()
    everything: dict[tuple[int, int], str | None] = {(0, o): k for o, k in enumerate(keys)}
    check(receiver.traces, everything, ordering, WINDOW, secret)
    acked = Counter((t.partition, o) for t in receiver.traces for o in t.acked)
    twice = [r for r, n in acked.items() if n > 1]
    # What was outstanding at the kill, and what was acknowledged but not yet committed
    # (commits are coalesced).
    assert len(twice) <= (1 + UNCOMMITTED_WINDOWS) * WINDOW * BATCH, twice
    assert killed_at < len(receiver.traces)
