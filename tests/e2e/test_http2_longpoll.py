"""100 long-polls on one HTTP/2 connection to a real server, all woken by one produce."""

from __future__ import annotations

import asyncio
import re

import httpx

from tests.e2e.conftest import Server

POLLS = 100


async def parked(http: httpx.AsyncClient) -> float:
    metrics = (await http.get("/metrics")).text
    found = re.search(r"^sluice_parked_fetches (\S+)$", metrics, re.M)
    return float(found.group(1)) if found else 0.0


async def test_hundred_long_polls_share_one_connection(server: Server) -> None:
    limits = httpx.Limits(max_connections=1)
    async with (
        httpx.AsyncClient(
            base_url=server.url, http1=False, http2=True, limits=limits, timeout=60
        ) as polls,
        httpx.AsyncClient(base_url=server.url, timeout=60) as control,
    ):
        created = await control.post("/v1/topics", json={"name": "t"})
        assert created.status_code == 201
        params = {"offset": "latest", "timeout_ms": "30000"}
        path = "/v1/topics/t/partitions/0/records"
        waiting = [asyncio.create_task(polls.get(path, params=params)) for _ in range(POLLS)]
        while await parked(control) < POLLS:
            await asyncio.sleep(0.01)
        produced = await control.post(
            "/v1/topics/t/records", json={"records": [{"value": {"wake": True}}]}
        )
        assert produced.status_code == 200
        answers = await asyncio.gather(*waiting)
        assert {a.http_version for a in answers} == {"HTTP/2"}
        assert all(a.status_code == 200 for a in answers)
        assert all(a.json()["records"][0]["value"] == {"wake": True} for a in answers)
        assert await parked(control) == 0
