"""Per-request figures, all from one gateway in one run (ratios, not absolutes).

h2load (compiled, HTTP/1.1 with --h1 or h2c with prior knowledge) against one gateway process:
`GET /healthz` (the framework's floor) and one-record JSON produces with acks=1 to a single
partition, from 64 and 256 connections, one request in flight each; the same produce
requests against `loadtests.floor_server` (uvloop and a bare Protocol answering a canned 200:
the floor of any Python request path on this machine); and Redis's `XADD` from as many
redis-benchmark clients, one command in flight each (no pipeline), the baseline a user would
run. The bulk cells, over HTTP/1.1 and h2c from 8 connections: a binary produce of one
1000-record batch (100 KB; dirty pages written back first, so that one cell's writes do not
slow the next), a binary fetch of one 1000-record batch and a JSON fetch of 1000 records.
The servers run on the first CPU and the generators on the others, so that neither waits for
the other's core (the report's `cpus`). Cells alternate over the rounds and the median is
the figure. Server-side batching shows as produce requests per log write, read from the
gateway's own counters around each cell.

    python -m loadtests.request_cost [--quick] [--rounds N] [--seconds S] [--out DIR]
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson

from loadtests import generators, ratio_cli, report
from loadtests.common import RedisServer, http_json, separate_cpus, start_gateway
from loadtests.rows import body_for, judged, rates

ONE_RECORD = orjson.dumps({"records": [{"value": {"event": "click", "user": 42}}]})
BATCH = "application/vnd.sluice.record-batch"
BULK = ("produce binary 1000", "fetch binary 1000", "fetch json 1000")
FETCH_RECORDS = 20_000  # prefilled for the fetch cells, in 1000-record batches
CELLS = [  # (what, protocol, connections)
    ("healthz", "http/1.1", 64),
    ("produce", "http/1.1", 64),
    ("healthz", "h2c", 64),
    ("produce", "h2c", 64),
    ("produce", "http/1.1", 256),
    ("floor", "http/1.1", 256),
    ("xadd", "resp", 64),
    *((what, protocol, 8) for what in BULK for protocol in ("http/1.1", "h2c")),
]


def _written(url: str) -> tuple[float, float]:
    """The gateway's (produce requests written, log writes) counters."""
    counters = {"sluice_produce_requests_written_total": 0.0, "sluice_produce_writes_total": 0.0}
    for line in http_text(url + "/metrics").splitlines():
        name, _, value = line.partition(" ")
        if name in counters:
            counters[name] = float(value)
    return (
        counters["sluice_produce_requests_written_total"],
        counters["sluice_produce_writes_total"],
    )


def http_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        return str(response.read().decode())


def fill(url: str) -> None:
    """The topic the fetch cells read: FETCH_RECORDS records in 1000-record binary batches."""
    http_json("POST", url + "/v1/topics", {"name": "fetched", "partitions": 1})
    batch = body_for("binary", 1000)
    for _ in range(FETCH_RECORDS // 1000):
        request = urllib.request.Request(
            url + "/v1/topics/fetched/partitions/0/records?acks=1",
            data=batch,
            method="POST",
            headers={"Content-Type": BATCH},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()


def run_cell(
    url: str, pid: int, bodies: Path, what: str, protocol: str, connections: int, seconds: float
) -> dict[str, Any]:
    """One h2load run; for produce, a fresh topic and the requests each write carried."""
    topic = ""
    records = 1000 if what in BULK else 1
    if what == "healthz":
        targets, headers, payload = [url + "/healthz"], {}, None
    elif what == "floor":
        targets = [url + "/v1/topics/floor/partitions/0/records?acks=1"]
        headers, payload = {"Content-Type": "application/json"}, bodies / "produce"
    elif what.startswith("fetch"):
        # One 1000-record batch an answer: bounded by bytes, a binary fetch takes the first
        # whole batch; unbounded it would answer ~1 MB, which HTTP/1.1 sends with sendfile.
        bound = "max_bytes=1000" if what == "fetch binary 1000" else "max_records=1000"
        accept = BATCH if what == "fetch binary 1000" else "application/json"
        targets = [
            f"{url}/v1/topics/fetched/partitions/0/records?offset={offset}&{bound}"
            for offset in range(0, FETCH_RECORDS, 1000)
        ]
        headers, payload = {"Accept": accept}, None
    else:
        topic = f"cost-{protocol.replace('/', '')}-{connections}-{time.monotonic_ns()}"
        http_json("POST", url + "/v1/topics", {"name": topic, "partitions": 1})
        targets = [url + f"/v1/topics/{topic}/partitions/0/records?acks=1"]
        if what == "produce":
            headers, payload = {"Content-Type": "application/json"}, bodies / "produce"
        else:
            headers, payload = {"Content-Type": BATCH}, bodies / "produce binary 1000"
            os.sync()
    before = _written(url) if topic else (0.0, 0.0)
    run = generators.h2load(
        targets,
        seconds=seconds,
        server_pid=pid,
        body=payload,
        headers=headers,
        clients=connections,
        http1=protocol == "http/1.1",
    )
    after = _written(url) if topic else (0.0, 0.0)
    size = payload.stat().st_size if payload is not None else 0
    row = {
        "what": what,
        "protocol": protocol,
        "connections": connections,
        **rates(run, records, size),
    }
    if topic:
        writes = after[1] - before[1]
        row["requests_per_write"] = round((after[0] - before[0]) / writes, 2) if writes else None
        http_json("DELETE", url + f"/v1/topics/{topic}")
    return row


def run_xadd(redis: RedisServer, connections: int, seconds: float) -> dict[str, Any]:
    """redis-benchmark's one-field XADD for about `seconds`, sized by a short run first."""
    args = ["XADD", "cost", "*", "v", "x" * len(ONE_RECORD)]  # as long, no quotes for its CSV
    pid = redis.process.pid
    probe = generators.redis_benchmark(
        redis.port, args, requests=20_000, server_pid=pid, clients=connections
    )
    requests = max(20_000, int(probe.requests_per_s * seconds))
    run = generators.redis_benchmark(
        redis.port, args, requests=requests, server_pid=pid, clients=connections
    )
    redis.command("DEL", "cost")
    return {"what": "xadd", "protocol": "resp", "connections": connections, **rates(run, 1, 0)}


def run(rounds: int, seconds: float, scratch: Path) -> dict[str, Any]:
    """Every cell `rounds` times, alternating; the median round of each and the targets."""
    process, url = start_gateway(scratch / "data")
    floor = subprocess.Popen(
        [sys.executable, "-m", "loadtests.floor_server", "0"], stdout=subprocess.PIPE, text=True
    )
    redis = RedisServer.start(scratch / "redis")
    bodies = scratch / "bodies"
    bodies.mkdir()
    (bodies / "produce").write_bytes(ONE_RECORD)
    (bodies / "produce binary 1000").write_bytes(body_for("binary", 1000))
    results: dict[tuple[str, str, int], list[dict[str, Any]]] = {c: [] for c in CELLS}
    try:
        assert floor.stdout is not None
        said = floor.stdout.readline()
        if not said.startswith("listening on "):
            raise RuntimeError(f"loadtests.floor_server did not start: {said!r}")
        floor_url = "http://127.0.0.1:" + said.split()[-1]
        placement = separate_cpus(process.pid, floor.pid, redis.process.pid)
        fill(url)
        for _ in range(rounds):
            for cell in CELLS:
                what, protocol, connections = cell
                if what == "xadd":
                    results[cell].append(run_xadd(redis, connections, seconds))
                    continue
                at, pid = (floor_url, floor.pid) if what == "floor" else (url, process.pid)
                row = run_cell(at, pid, bodies, what, protocol, connections, seconds)
                results[cell].append(row)
    finally:
        for server_process in (process, floor, redis.process):
            server_process.terminate()
            server_process.wait(30)
    rows = []
    for runs in results.values():
        runs.sort(key=lambda r: r["requests_per_s"])
        rows.append(
            {
                **runs[(len(runs) - 1) // 2],
                "rounds_requests_per_s": [r["requests_per_s"] for r in runs],
            }
        )
    return {
        "cells": rows,
        "targets": targets(rows),
        "floor_share": floor_share(rows),
        "cpus": placement,
    }


def floor_share(rows: list[dict[str, Any]]) -> dict[str, float]:
    """At 256 connections, the gateway's one-record produce rate and server CPU per request
    against the bare Protocol's: how much of a request's cost is the floor every Python server
    here pays, and how much is the gateway's own path."""
    cell = {(r["what"], r["connections"]): r for r in rows if r["protocol"] == "http/1.1"}
    produce, floor = cell[("produce", 256)], cell[("floor", 256)]

    def us_per_request(row: dict[str, Any]) -> float:
        return float(row["server_cpu_s"]) / int(row["requests"]) * 1e6

    return {
        "produce_over_floor_rate": round(produce["requests_per_s"] / floor["requests_per_s"], 3),
        "produce_server_us_per_request": round(us_per_request(produce), 1),
        "floor_server_us_per_request": round(us_per_request(floor), 1),
    }


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The figures for one worker, each with its target and whether this run met it."""
    rate = {(r["what"], r["protocol"], r["connections"]): r["requests_per_s"] for r in rows}
    produce = rate[("produce", "http/1.1", 64)]
    figures = [
        (
            "one-record produce / GET /healthz, HTTP/1.1, 64 connections",
            produce / rate[("healthz", "http/1.1", 64)],
            0.7,
        ),
        ("one-record produce, HTTP/1.1, 64 connections (records/s)", produce, 10_000),
        (
            "one-record produce, HTTP/1.1, 256 connections (records/s)",
            rate[("produce", "http/1.1", 256)],
            30_000,
        ),
        (
            "one-record produce h2c / HTTP/1.1, 64 connections",
            rate[("produce", "h2c", 64)] / produce,
            0.9,
        ),
        (
            "one-record produce, HTTP/1.1 / Redis XADD without pipeline, 64 connections",
            produce / rate[("xadd", "resp", 64)],
            0.5,
        ),
        *(
            (
                f"{what}, h2c / HTTP/1.1, 8 connections",
                rate[(what, "h2c", 8)] / rate[(what, "http/1.1", 8)],
                0.9,
            )
            for what in BULK
        ),
    ]
    return judged(figures)


def markdown(doc: dict[str, Any]) -> str:
    out = [
        "## Request cost",
        "",
        "| request | protocol | connections | requests/s (median) | rounds | server CPU s | "
        "generator CPU s | requests per write |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["cells"]:
        out.append(
            f"| {r['what']} | {r['protocol']} | {r['connections']} | {r['requests_per_s']:,.0f} | "
            f"{', '.join(f'{x:,.0f}' for x in r['rounds_requests_per_s'])} | {r['server_cpu_s']} | "
            f"{r['generator_cpu_s']} | {r.get('requests_per_write', '')} |"
        )
    share = doc["floor_share"]
    out += [
        "",
        f"CPUs: {doc['cpus']}.",
        "",
        f"At 256 connections the gateway serves {share['produce_over_floor_rate']} of the bare "
        f"Protocol's rate: {share['produce_server_us_per_request']} µs of server CPU per produce "
        f"against the floor's {share['floor_server_us_per_request']} µs.",
    ]
    out += ["", "| figure | this run | target | met |", "|---|---|---|---|"]
    for t in doc["targets"]:
        out.append(f"| {t['figure']} | {t['value']:,} | {t['target']:,} | {t['met']} |")
    return "\n".join(out) + "\n"


def main() -> None:
    out, doc = ratio_cli.run_rounds(__doc__ or "", "loadtests.request_cost", 3, 5.0, run)
    ratio_cli.write(out, "request-cost", doc, markdown(doc))
    report.plot_ratios(doc["targets"], "Request cost", out / "request-cost.png")


if __name__ == "__main__":
    main()
