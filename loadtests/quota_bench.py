"""Quota enforcement, measured against the configured rates: a real gateway with a
`<default>` quota, and greedy clients (several connections, each sending back to back and,
when refused, waiting exactly the `retry_after_ms` it is told, as `sluice` does). The figure
is the rate the clients were served after the first burst / the quota; target 0.9 to 1.1.

Cells: produce bytes/s (64 KiB JSON bodies), fetch bytes/s (~64 KiB answers), requests/s
(GET /v1/topics), each with `--quota-mode reject` (429 + Retry-After) and `delay`.

    python -m loadtests.quota_bench [--quick] [--rounds N] [--seconds S] [--out DIR]
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from loadtests import ratio_cli, report
from loadtests.common import start_gateway

CONNECTIONS = 8
WINDOW_S = 1.0  # --quota-window: the burst a client may spend at once, left out of the figure
RECORD = "x" * 1000
PRODUCE_BODY = orjson.dumps({"records": [{"value": RECORD}] * 64})  # ~64 KiB
QUOTAS = {
    "produce_bytes_per_second": 1 << 20,
    "fetch_bytes_per_second": 2 << 20,
    "requests_per_second": 400.0,
}
CELLS = tuple((field, mode) for field in QUOTAS for mode in ("reject", "delay"))
FETCH = "/v1/topics/bench/partitions/0/records?offset=0&max_records=64&timeout_ms=0"


async def greedy(url: str, field: str, seconds: float) -> dict[str, Any]:
    """CONNECTIONS clients for WINDOW_S + `seconds`; what they were served in the last
    `seconds` (after the burst), and how often they were refused."""
    served: list[tuple[float, int]] = []
    refused = 0
    end = time.monotonic() + WINDOW_S + seconds
    method, path, body = {
        "produce_bytes_per_second": ("POST", "/v1/topics/bench/partitions/1/records?acks=1",
                                     PRODUCE_BODY),
        "fetch_bytes_per_second": ("GET", FETCH, None),
        "requests_per_second": ("GET", "/v1/topics", None),
    }[field]  # fmt: skip
    headers = {"Content-Type": "application/json"}

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal refused
        while time.monotonic() < end:
            async with session.request(method, url + path, data=body, headers=headers) as answer:
                content = await answer.read()
                if answer.status == 429:
                    refused += 1
                    await asyncio.sleep(orjson.loads(content)["retry_after_ms"] / 1000)
                    continue
                assert answer.status == 200, (answer.status, content[:300])
                size = {"produce_bytes_per_second": len(PRODUCE_BODY),
                        "fetch_bytes_per_second": len(content)}.get(field, 1)  # fmt: skip
                served.append((time.monotonic(), size))

    connector = aiohttp.TCPConnector(limit=CONNECTIONS)
    async with aiohttp.ClientSession(connector=connector) as session:
        started = time.monotonic()
        await asyncio.gather(*(client(session) for _ in range(CONNECTIONS)))
    measured_from = started + WINDOW_S
    measured = sum(size for at, size in served if at >= measured_from)
    elapsed = max(at for at, _ in served) - measured_from
    return {"served_per_s": round(measured / elapsed, 1), "refused": refused,
            "seconds": round(elapsed, 2)}  # fmt: skip


def _call(url: str, method: str, path: str, doc: object) -> None:
    async def go() -> None:
        async with (
            aiohttp.ClientSession() as session,
            session.request(method, url + path, json=doc) as answer,
        ):
            assert answer.status < 300, await answer.text()

    asyncio.run(go())


def _start_cell(data: Path, field: str, mode: str) -> tuple[subprocess.Popen[str], str]:
    """A fresh gateway in quota mode `mode` with the `<default>` quota on `field` alone."""
    process, url = start_gateway(data, "--quota-mode", mode, "--quota-window", str(WINDOW_S))
    try:
        _call(url, "POST", "/v1/topics", {"name": "bench", "partitions": 2})
        _call(url, "POST", "/v1/topics/bench/partitions/0/records?acks=1",
              orjson.loads(PRODUCE_BODY))  # fmt: skip
        _call(url, "PUT", "/v1/quotas/%3Cdefault%3E", {field: QUOTAS[field]})
    except BaseException:
        _stop(process)
        raise
    return process, url


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.terminate()
        process.wait(30)


def run(rounds: int, seconds: float, scratch: Path) -> dict[str, Any]:
    """Each cell on a fresh gateway (its quota alone set), `rounds` times; the median. A
    round's gateways start at once (idle until their cell: no load on the one measured)."""
    results: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for round_ in range(rounds):
        with ThreadPoolExecutor(len(CELLS)) as pool:
            starting = {
                (field, mode): pool.submit(
                    _start_cell, scratch / f"{field}-{mode}-{round_}", field, mode
                )
                for field, mode in CELLS
            }
        gateways = {
            cell: future.result() for cell, future in starting.items() if not future.exception()
        }
        try:
            for future in starting.values():
                future.result()  # a failure raised once the gateways that started are stopped
            for (field, mode), (process, url) in gateways.items():
                row = asyncio.run(greedy(url, field, seconds))
                _stop(process)
                results.setdefault((field, mode), []).append(row)
        finally:
            for process, _ in gateways.values():
                _stop(process)
    figures = []
    for (field, mode), rows in results.items():
        rows.sort(key=lambda r: r["served_per_s"])
        median = rows[(len(rows) - 1) // 2]
        ratio = median["served_per_s"] / QUOTAS[field]
        figures.append({"quota": field, "mode": mode, "configured": QUOTAS[field], **median,
                        "rounds_served_per_s": [r["served_per_s"] for r in rows],
                        "ratio": round(ratio, 3), "met": 0.9 <= ratio <= 1.1})  # fmt: skip
    return {"figures": figures}


def markdown(doc: dict[str, Any]) -> str:
    out = [
        "## Quota enforcement",
        "",
        f"{CONNECTIONS} greedy connections; the first {WINDOW_S:g} s (the burst) left out.",
        "",
        "| quota | mode | configured | served | served / configured | target | refused |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in doc["figures"]:
        out.append(
            f"| {f['quota']} | {f['mode']} | {f['configured']:,} | {f['served_per_s']:,} | "
            f"{f['ratio']} | 0.9 to 1.1 | {f['refused']} |"
        )
    return "\n".join(out) + "\n"


def main() -> None:
    out, doc = ratio_cli.run_rounds(__doc__ or "", "loadtests.quota_bench", 3, 5.0, run)
    ratio_cli.write(out, "quota-bench", doc, markdown(doc))
    targets = [
        {
            "figure": f"{f['quota']} ({f['mode']}): served / configured",
            "value": f["ratio"],
            "target": 0.9,
        }
        for f in doc["figures"]
    ]
    report.plot_ratios(targets, "Quota enforcement", out / "quota-bench.png")


if __name__ == "__main__":
    main()
