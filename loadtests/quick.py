"""Quick gateway figures: produce, fetch, single-record latency, parked-poll memory.

Black box: starts `python -m gateway` on a free port, drives it over HTTP only, with h2load
(compiled, from Debian's nghttp2-client) as the load generator so the client is not the
bottleneck, and wrk (also compiled) timing single-record produces. Prints one JSON object.
Run: `python -m loadtests.quick [--json] [--requests N]`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from engine.batch import RecordInput, encode_batch
from loadtests import generators
from loadtests.common import cpu_seconds, rss_bytes, separate_cpus, start_gateway

RECORDS_PER_REQUEST = 1000
VALUE = "x" * 88  # with the JSON quoting and a short key, ~100 bytes per record


def h2load(
    url: str, requests: int, clients: int, body: Path | None, headers: dict[str, str], pid: int
) -> dict[str, float]:
    """Run h2load over HTTP/1.1; requests/s plus the gateway's CPU share during the run."""
    command = ["h2load", "--h1", "-n", str(requests), "-c", str(clients), "-m", "1"]
    for name, value in headers.items():
        command += ["-H", f"{name}: {value}"]
    if body is not None:
        command += ["-d", str(body)]
    before = cpu_seconds(pid)
    started = time.perf_counter()
    done = subprocess.run([*command, url], capture_output=True, text=True, check=True)
    elapsed = time.perf_counter() - started
    gateway_cpu = (cpu_seconds(pid) - before) / elapsed
    match = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", done.stdout)
    failed = re.search(r"(\d+) failed", done.stdout)
    status = re.search(r"status codes: (\d+) 2xx", done.stdout)
    if match is None or failed is None or int(failed.group(1)) or status is None:
        raise RuntimeError(done.stdout)
    if int(status.group(1)) != requests:
        raise RuntimeError(f"not every request succeeded:\n{done.stdout}")
    return {"requests_per_s": float(match.group(1)), "gateway_cpu": round(gateway_cpu, 2)}


def bodies(directory: Path) -> dict[str, tuple[Path, str]]:
    records = [{"key": f"k{i:04d}", "value": VALUE} for i in range(RECORDS_PER_REQUEST)]
    json_body = directory / "produce.json"
    json_body.write_bytes(orjson.dumps({"records": records}))
    ndjson_body = directory / "produce.ndjson"
    ndjson_body.write_bytes(b"".join(orjson.dumps(VALUE) + b"\n" for _ in records))
    binary_body = directory / "produce.bin"
    binary_body.write_bytes(encode_batch([RecordInput(None, orjson.dumps(VALUE)) for _ in records]))
    return {
        "json": (json_body, "application/json"),
        "ndjson": (ndjson_body, "application/x-ndjson"),
        "binary": (binary_body, "application/vnd.sluice.record-batch"),
    }


def latency_single_record(url: str, pid: int, scratch: Path) -> dict[str, float]:
    """Back-to-back single-record produces on one connection (low load), timed by wrk, so the
    client's own pauses stay out of the tail: p50/p99/max in milliseconds."""
    body = scratch / "single.json"
    body.write_bytes(orjson.dumps({"records": [{"key": "k", "value": VALUE}]}))
    run = generators.wrk(
        url,
        ["/v1/topics/latency/partitions/0/records?acks=1"],
        seconds=3,
        server_pid=pid,
        method="POST",
        body=body,
        headers={"Content-Type": "application/json"},
        connections=1,
        threads=1,
    )
    return {"requests": run.requests, **run.extra}


async def parked_poll_memory(url: str, pid: int, polls: int) -> dict[str, float]:
    """RSS growth of the gateway per parked long-poll, each on its own HTTP/1.1 connection."""
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as http:
        await (await http.get(f"{url}/readyz")).read()
        before = rss_bytes(pid)
        target = f"{url}/v1/topics/parked/partitions/0/records?offset=latest&timeout_ms=60000"
        tasks = [asyncio.create_task(http.get(target)) for _ in range(polls)]
        while True:
            metrics = await (await http.get(f"{url}/metrics")).text()
            parked = re.search(r"^sluice_parked_fetches (\S+)", metrics, re.M)
            if parked is not None and float(parked.group(1)) >= polls:
                break
            await asyncio.sleep(0.05)
        after = rss_bytes(pid)
        async with http.post(
            f"{url}/v1/topics/parked/partitions/0/records",
            json={"records": [{"value": 1}]},
        ) as response:
            await response.read()
        for response in await asyncio.gather(*tasks):
            assert response.status == 200
            response.release()
    return {"polls": polls, "bytes_per_parked_poll": round((after - before) / polls)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=2000, help="h2load requests per figure")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--polls", type=int, default=2000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    for tool, package in (("h2load", "nghttp2-client"), ("wrk", "wrk")):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is needed: apt-get install {package}")
    scratch = Path(tempfile.mkdtemp(prefix="sluice-quick-"))
    process, url = start_gateway(scratch / "data")
    pid = process.pid
    placement = separate_cpus(pid)
    out: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "records_per_request": RECORDS_PER_REQUEST,
        "protocol": "HTTP/1.1",
        "acks": "1",
        "cpus": placement,
    }
    try:
        for name, partitions in (("bench", 1), ("latency", 1), ("parked", 1)):
            subprocess.run(
                [
                    "curl",
                    "-sf",
                    "-X",
                    "POST",
                    f"{url}/v1/topics",
                    "-H",
                    "content-type: application/json",
                    "-d",
                    orjson.dumps({"name": name, "partitions": partitions}).decode(),
                ],
                check=True,
                capture_output=True,
            )
        produce_url = f"{url}/v1/topics/bench/partitions/0/records?acks=1"
        for name, (body, media) in bodies(scratch).items():
            run = h2load(
                produce_url, args.requests, args.clients, body, {"content-type": media}, pid
            )
            run["records_per_s"] = round(run["requests_per_s"] * RECORDS_PER_REQUEST)
            out[f"produce_{name}"] = run
        fetch_url = f"{url}/v1/topics/bench/partitions/0/records?offset=0&max_records=1000"
        run = h2load(fetch_url, args.requests, args.clients, None, {}, pid)
        run["records_per_s"] = round(run["requests_per_s"] * RECORDS_PER_REQUEST)
        out["fetch_json"] = run
        # At low load: the kernel's writeback of the gigabyte produced above would throttle the
        # gateway's writes (balance_dirty_pages) and put that in the latency figure.
        os.sync()
        out["produce_single_record_latency"] = latency_single_record(url, pid, scratch)
        out["parked_long_poll"] = asyncio.run(parked_poll_memory(url, pid, args.polls))
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
        shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        print(orjson.dumps(out).decode())
    else:
        print(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    main()
