"""Push subscriptions against the ways a user reads a topic today, in one
run on one gateway, to one receiver (`loadtests.push_receiver`, its own process, 204 at once).

- batch: a subscription delivering batches of 500 (CloudEvents batch, and the plain JSON
  format) against one long-poll /v1 group consumer reading the same records 500 at a time;
  goal: delivery >= 0.5 of the consumer's records/s;
- single: one record per request (binary CloudEvents), ordering `none` over PARTITIONS
  partitions: requests/s, and requests per CPU-second of the gateway (its /proc CPU time);
  again with PIPELINE requests pipelined on a connection (`concurrency.pipeline`);
- bridge: the same records through the bridge a user writes today (`loadtests.push_bridge`:
  long-poll a group, POST each record with aiohttp, BRIDGE_IN_FLIGHT at a time, commit once
  the batch's POSTs all succeeded); goal: the subscription >= 3x its records/s and its records
  per CPU-second (the bridge's: its process's CPU plus the gateway's);
- latency: produce -> receiver at half the single-record rate, same ordering (each record's
  timestamp, set by the producer, against its arrival): p50 / p99;
- memory: the gateway's RSS growth per idle subscription at IDLE subscriptions, and per open
  SSE stream (`GET /v1/topics/{t}/events`) at IDLE streams, each on a fresh gateway.

Throughput cells alternate over the rounds and the median round is the figure. With
`--before DIR` (a checkout of an earlier commit, its compiled extensions in place) that
tree's gateway also delivers the one-record cell, in the same rounds, to the same receiver.

    python -m loadtests.subscriptions_bench [--quick] [--rounds N] [--out DIR] [--before DIR]
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import orjson

from loadtests.bench import machine
from loadtests.common import (
    children_cpu_seconds,
    cpu_seconds,
    http_json,
    raise_fd_limit,
    rss_bytes,
    start_gateway,
)
from loadtests.ratio_cli import Stamp, chosen_plan, command, plan_options, write
from loadtests.rows import VALUE

PARTITIONS = 4
BATCH = 500
PIPELINE = 16  # requests on one connection, in the pipelined one-record cell
BRIDGE_IN_FLIGHT = 16  # the bridge's POSTs at once
FILL_BATCH = 1000
ALLOWED = ("--subscription-allowed-hosts", "127.0.0.1")
DELIVERY_DEADLINE_S = 600.0
POLL_S = 0.02  # how often the bench asks the receiver how far delivery got
LATENCY_TICK_S = 0.01  # the latency cell's producer sends what is due this often


@dataclasses.dataclass(frozen=True)
class Plan:
    batch_records: int  # pre-filled for the batch cells
    single_records: int  # pre-filled for the single-record and bridge cells
    latency_seconds: float
    idle: int  # idle subscriptions, and open SSE streams
    rounds: int


FULL = Plan(batch_records=200_000, single_records=60_000, latency_seconds=10.0, idle=1000, rounds=3)
QUICK = Plan(batch_records=2_000, single_records=300, latency_seconds=1.0, idle=20, rounds=1)


class Receiver:
    """The receiver process and its counts."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "loadtests.push_receiver"],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith("listening on "):
            self.process.kill()
            raise RuntimeError(f"the receiver did not start: {line!r}")
        self.base = f"http://127.0.0.1:{line.split()[-1]}"
        self.url = self.base + "/hook"

    def stats(self, latencies: bool = False) -> dict[str, Any]:
        doc: dict[str, Any] = http_json(
            "GET", self.base + ("/stats?latencies" if latencies else "/stats")
        )
        return doc

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.process.pid)

    def reset(self) -> None:
        http_json("POST", self.base + "/reset")

    def until(self, records: int) -> dict[str, Any]:
        """The counts once `records` records arrived (bounded)."""
        deadline = time.monotonic() + DELIVERY_DEADLINE_S
        while (doc := self.stats())["records"] < records:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {doc['records']} of {records} records arrived")
            time.sleep(POLL_S)
        return doc

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(30)


def _names() -> Iterator[str]:
    n = 0
    while True:
        n += 1
        yield f"b{n}-{time.monotonic_ns() % 10**9}"


NAMES = _names()


def fill(url: str, topic: str, count: int) -> None:
    """A topic of PARTITIONS partitions with `count` 100-byte records spread evenly."""
    http_json("POST", url + "/v1/topics", {"name": topic, "partitions": PARTITIONS})
    with httpx.Client(timeout=120) as client:
        for start in range(0, count, FILL_BATCH):
            n = min(FILL_BATCH, count - start)
            body = orjson.dumps({"records": [{"value": orjson.Fragment(VALUE)}] * n})
            partition = (start // FILL_BATCH) % PARTITIONS
            client.post(
                f"{url}/v1/topics/{topic}/partitions/{partition}/records",
                content=body,
                headers={"Content-Type": "application/json"},
            ).raise_for_status()


def subscribe(url: str, topic: str, endpoint: str, **fields: Any) -> str:
    name = next(NAMES)
    doc = {"name": name, "topic": topic, "endpoint": endpoint, "start": "earliest", **fields}
    http_json("POST", url + "/v1/subscriptions", doc)
    return name


def subscription_cell(
    url: str, pid: int, receiver: Receiver, topic: str, count: int, **fields: Any
) -> dict[str, Any]:
    """Deliver the whole topic through a new subscription: from its creation to the last
    record's arrival."""
    receiver.reset()
    cpu, receiving = cpu_seconds(pid), receiver.cpu_seconds()
    started = time.monotonic()
    name = subscribe(url, topic, receiver.url, **fields)
    got = receiver.until(count)
    spent, receiving = cpu_seconds(pid) - cpu, receiver.cpu_seconds() - receiving
    http_json("DELETE", f"{url}/v1/subscriptions/{name}")
    seconds = got["last_at"] - started
    return {
        "records": got["records"],
        "requests": got["requests"],
        "seconds": round(seconds, 3),
        "records_per_s": round(got["records"] / seconds),
        "requests_per_s": round(got["requests"] / seconds, 1),
        "server_cpu_s": round(spent, 2),
        "server_cores_busy": round(spent / seconds, 2),
        "receiver_cpu_s": round(receiving, 2),
        "requests_per_server_cpu_s": round(got["requests"] / spent, 1) if spent else None,
        "records_per_server_cpu_s": round(got["records"] / spent) if spent else None,
    }


def consumer_cell(url: str, pid: int, topic: str, count: int) -> dict[str, Any]:
    """One /v1 group member long-polls the whole topic, BATCH records a fetch."""
    group = f"reader-{next(NAMES)}"
    cpu = cpu_seconds(pid)
    started = time.monotonic()
    read = requests = 0
    with httpx.Client(base_url=url, timeout=60) as client:
        joined = client.post(
            f"/v1/groups/{group}/members", json={"topics": [topic], "auto_offset_reset": "earliest"}
        ).json()
        path = f"/v1/groups/{group}/members/{joined['member_id']}/records"
        cursor = joined["cursor"]
        while read < count:
            params = {"max_records": str(BATCH), "timeout_ms": "1000", "cursor": str(cursor)}
            answer = client.get(path, params=params)
            answer.raise_for_status()
            doc = answer.json()
            cursor = doc["cursor"]
            read += len(doc["records"])
            requests += 1
        seconds = time.monotonic() - started
        client.delete(f"/v1/groups/{group}/members/{joined['member_id']}")
    spent = cpu_seconds(pid) - cpu
    return {
        "records": read,
        "requests": requests,
        "seconds": round(seconds, 3),
        "records_per_s": round(read / seconds),
        "requests_per_s": round(requests / seconds, 1),
        "server_cpu_s": round(spent, 2),
        "server_cores_busy": round(spent / seconds, 2),
        "records_per_server_cpu_s": round(read / spent) if spent else None,
    }


def bridge_cell(url: str, pid: int, receiver: Receiver, topic: str, count: int) -> dict[str, Any]:
    """`loadtests.push_bridge` over the whole topic; its own CPU while it delivers (its start
    left out, as the subscription's process was started before its cell) counted beside the
    gateway's."""
    receiver.reset()
    cpu, own, receiving = cpu_seconds(pid), children_cpu_seconds(), receiver.cpu_seconds()
    command = [sys.executable, "-m", "loadtests.push_bridge", url, topic, receiver.url]
    done = subprocess.run(
        [*command, str(count), str(BRIDGE_IN_FLIGHT)],
        capture_output=True,
        text=True,
        timeout=DELIVERY_DEADLINE_S,
        check=True,
    )
    spent, whole = cpu_seconds(pid) - cpu, children_cpu_seconds() - own
    receiving = receiver.cpu_seconds() - receiving
    doc = orjson.loads(done.stdout)
    bridge_cpu = doc["cpu_s"]
    got = receiver.stats()
    return {
        "records": got["records"],
        "requests": got["requests"],
        "seconds": round(doc["seconds"], 3),
        "records_per_s": round(doc["records"] / doc["seconds"]),
        "requests_per_s": round(doc["requests"] / doc["seconds"], 1),
        "server_cpu_s": round(spent, 2),
        "server_cores_busy": round(spent / doc["seconds"], 2),
        "receiver_cpu_s": round(receiving, 2),
        "bridge_cpu_s": round(bridge_cpu, 2),
        "bridge_process_cpu_s": round(whole, 2),  # its start included
        "bridge_cores_busy": round(bridge_cpu / doc["seconds"], 2),
        "records_per_cpu_s": round(doc["records"] / (spent + bridge_cpu)),
        "in_flight": doc["in_flight"],
    }


def latency_cell(
    url: str, receiver: Receiver, rate: float, seconds: float, **fields: Any
) -> dict[str, Any]:
    """Produce at `rate` records/s for `seconds` (each record stamped with its send time) to a
    fresh topic a one-record subscription (with `fields`) follows; the receiver's delays, in
    ms."""
    topic = f"lat-{next(NAMES)}"
    http_json("POST", url + "/v1/topics", {"name": topic, "partitions": PARTITIONS})
    name = subscribe(url, topic, receiver.url, start="latest", **fields)
    described = f"{url}/v1/subscriptions/{name}"
    deadline = time.monotonic() + 60
    while not all(
        p["committed_offset"] is not None for p in http_json("GET", described)["partitions"]
    ):
        if time.monotonic() > deadline:
            raise RuntimeError("the subscription's dispatchers did not start")
        time.sleep(POLL_S)
    receiver.reset()
    sent = 0
    started = time.monotonic()
    with httpx.Client(timeout=60) as client:
        tick = 0
        while (now := time.monotonic()) < started + seconds:
            due = int((now - started) * rate) - sent
            if due > 0:
                stamp = int(time.time() * 1000)
                records = [{"value": orjson.Fragment(VALUE), "timestamp": stamp}] * due
                client.post(
                    f"{url}/v1/topics/{topic}/partitions/{tick % PARTITIONS}/records",
                    content=orjson.dumps({"records": records}),
                    headers={"Content-Type": "application/json"},
                ).raise_for_status()
                sent += due
                tick += 1
            time.sleep(max(0.0, started + (tick + 1) * LATENCY_TICK_S - time.monotonic()))
    receiver.until(sent)
    delays = sorted(receiver.stats(latencies=True)["latencies_ms"])
    http_json("DELETE", described)
    return {
        "rate": round(rate),
        "records": sent,
        "p50_ms": round(_quantile(delays, 0.5), 2),
        "p99_ms": round(_quantile(delays, 0.99), 2),
        "max_ms": round(delays[-1], 2),
    }


def _quantile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@contextmanager
def gateway(
    scratch: Path, name: str, tree: Path | None = None
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A gateway of this tree (or of `tree`) that may deliver to the loopback receiver."""
    process, url = start_gateway(scratch / name, *ALLOWED, preexec=raise_fd_limit, tree=tree)
    try:
        yield process, url
    finally:
        process.terminate()
        process.wait(60)


def idle_subscriptions_cell(scratch: Path, receiver: Receiver, count: int) -> dict[str, Any]:
    """RSS growth of a fresh gateway as `count` subscriptions with nothing to deliver start."""
    with gateway(scratch, "idle-subs") as (process, url):
        http_json("POST", url + "/v1/topics", {"name": "idle", "partitions": 1})
        _until_dispatching(url, [subscribe(url, "idle", receiver.url, start="latest")])
        before = rss_bytes(process.pid)
        started = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            names = list(
                pool.map(
                    lambda _: subscribe(url, "idle", receiver.url, start="latest"), range(count)
                )
            )
        _until_dispatching(url, names)
        seconds = time.monotonic() - started
        grown = rss_bytes(process.pid) - before
    return {
        "subscriptions": count,
        "rss_growth_mb": round(grown / 2**20, 1),
        "kib_per_subscription": round(grown / count / 1024, 1),
        "seconds_to_start": round(seconds, 1),
    }


def _until_dispatching(url: str, names: list[str]) -> None:
    """Until every named subscription's partition committed its start position (its
    dispatcher runs) — one group per subscription."""
    wanted = len(names)
    deadline = time.monotonic() + DELIVERY_DEADLINE_S
    while True:
        groups = http_json("GET", url + "/v1/groups")["groups"]
        started = sum(
            1 for g in groups if any(g["group"].startswith(f"subscription.{n}.") for n in names)
        )
        if started >= wanted:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{started} of {wanted} subscriptions started")
        time.sleep(0.1)


def sse_cell(scratch: Path, count: int) -> dict[str, Any]:
    """RSS growth of a fresh gateway as `count` SSE streams of one topic are open and idle."""
    with gateway(scratch, "sse") as (process, url):
        http_json("POST", url + "/v1/topics", {"name": "sse", "partitions": 1})
        return asyncio.run(_streams(url, process.pid, count))


async def _streams(url: str, pid: int, count: int) -> dict[str, Any]:
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        opening = asyncio.Semaphore(64)

        async def stream() -> aiohttp.ClientResponse:
            async with opening:
                response = await http.get(
                    f"{url}/v1/topics/sse/events", headers={"Accept": "text/event-stream"}
                )
                if response.status != 200:
                    raise RuntimeError(f"an SSE stream answered {response.status}")
                await response.content.readline()  # its first line: the stream is running
                return response

        warm = await stream()
        before = rss_bytes(pid)
        started = time.monotonic()
        streams = await asyncio.gather(*(stream() for _ in range(count)))
        seconds = time.monotonic() - started
        grown = rss_bytes(pid) - before
        for response in [warm, *streams]:
            response.close()
    return {
        "streams": count,
        "rss_growth_mb": round(grown / 2**20, 1),
        "kib_per_stream": round(grown / count / 1024, 1),
        "seconds_to_open": round(seconds, 1),
    }


CELLS = (
    "consumer batch 500",
    "subscription batch 500 cloudevents",
    "subscription batch 500 json",
    "subscription one record",
    "subscription one record pipelined",
    "bridge one record",
)
BEFORE = "subscription one record (before)"  # the one-record cell on the --before gateway
BATCHED = {"batching": {"max_records": BATCH, "max_wait_ms": 0}}
PIPELINED = {"ordering": "none", "concurrency": {"pipeline": PIPELINE}}


def single_ordering(url: str, endpoint: str) -> str:
    """`none` (up to N requests in flight) if the gateway offers it, else `partition` (one in
    flight per partition): asked by creating a paused subscription."""
    try:
        name = subscribe(url, "single", endpoint, ordering="none", paused=True)
    except RuntimeError as refused:
        if "/ordering" not in str(refused):
            raise
        return "partition"
    http_json("DELETE", f"{url}/v1/subscriptions/{name}")
    return "none"


def cell(
    what: str, url: str, pid: int, receiver: Receiver, plan: Plan, ordering: str
) -> dict[str, Any]:
    """One throughput cell by its name."""
    if what == "consumer batch 500":
        return consumer_cell(url, pid, "batch", plan.batch_records)
    if what == "subscription batch 500 cloudevents":
        return subscription_cell(url, pid, receiver, "batch", plan.batch_records, **BATCHED)
    if what == "subscription batch 500 json":
        return subscription_cell(
            url, pid, receiver, "batch", plan.batch_records, format="json", **BATCHED
        )
    if what == "subscription one record":
        return subscription_cell(
            url, pid, receiver, "single", plan.single_records, ordering=ordering
        )
    if what == "subscription one record pipelined":
        return subscription_cell(url, pid, receiver, "single", plan.single_records, **PIPELINED)
    return bridge_cell(url, pid, receiver, "single", plan.single_records)


def run(plan: Plan, scratch: Path, before: Path | None = None) -> dict[str, Any]:
    receiver = Receiver()
    cells: dict[str, list[dict[str, Any]]] = {}
    names = (*CELLS, BEFORE) if before else CELLS
    try:
        with contextlib.ExitStack() as stack:
            process, url = stack.enter_context(gateway(scratch, "data"))
            fill(url, "batch", plan.batch_records)
            fill(url, "single", plan.single_records)
            ordering = single_ordering(url, receiver.url)
            if before:
                old, old_url = stack.enter_context(gateway(scratch, "before", before))
                fill(old_url, "single", plan.single_records)
                old_ordering = single_ordering(old_url, receiver.url)
            for number in range(plan.rounds):  # alternating: the machine's drift hits all
                for what in names if number % 2 == 0 else reversed(names):
                    if what == BEFORE:
                        row = subscription_cell(
                            old_url, old.pid, receiver, "single", plan.single_records,
                            ordering=old_ordering,
                        )  # fmt: skip
                    else:
                        row = cell(what, url, process.pid, receiver, plan, ordering)
                    cells.setdefault(what, []).append(row)
            medians = {what: _median(rows) for what, rows in cells.items()}
            rate = medians["subscription one record"]["records_per_s"] / 2
            latency = latency_cell(url, receiver, rate, plan.latency_seconds, ordering=ordering)
        memory = [
            idle_subscriptions_cell(scratch, receiver, plan.idle),
            sse_cell(scratch, plan.idle),
        ]
    finally:
        receiver.close()
    return {
        "single_record_ordering": ordering,
        "cells": medians,
        "figures": figures(medians),
        "latency": latency,
        "memory": memory,
    }


def figures(medians: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The goals, each a ratio of two cells of the same run."""
    consumer = medians["consumer batch 500"]["records_per_s"]
    single, bridge = medians["subscription one record"], medians["bridge one record"]
    pipelined = medians["subscription one record pipelined"]
    out = []
    for fmt in ("cloudevents", "json"):
        rate = medians[f"subscription batch 500 {fmt}"]["records_per_s"]
        out.append(_figure(f"batch 500 ({fmt}) / long-poll consumer", rate, consumer, 0.5))
    out.append(
        _figure(
            "batch 500 (cloudevents) / bridge (records/s)",
            medians["subscription batch 500 cloudevents"]["records_per_s"],
            bridge["records_per_s"],
            3.0,
        )
    )
    out.append(
        _figure(
            "one record a request / bridge (records/s)",
            single["records_per_s"],
            bridge["records_per_s"],
            3.0,
        )
    )
    out.append(
        _figure(
            "one record a request / bridge (records per CPU-second: gateway, gateway + bridge)",
            single["records_per_server_cpu_s"],
            bridge["records_per_cpu_s"],
            3.0,
        )
    )
    out.append(
        _figure(
            f"one record a request, pipeline {PIPELINE} / bridge (records/s)",
            pipelined["records_per_s"],
            bridge["records_per_s"],
            3.0,
        )
    )
    out.append(
        _figure(
            f"one record a request, pipeline {PIPELINE} / bridge (records per CPU-second)",
            pipelined["records_per_server_cpu_s"],
            bridge["records_per_cpu_s"],
            3.0,
        )
    )
    if BEFORE in medians:
        old = medians[BEFORE]
        for what, key in (
            ("records/s", "records_per_s"),
            ("per gateway CPU-second", "records_per_server_cpu_s"),
        ):
            out.append(
                _figure(f"one record a request: this tree / before ({what})",
                        single[key], old[key], 1.0)
            )  # fmt: skip
    return out


def _median(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ordered = sorted(rows, key=lambda r: r["records_per_s"])
    return {
        **ordered[(len(ordered) - 1) // 2],
        "rounds_records_per_s": [r["records_per_s"] for r in rows],
    }


def _figure(what: str, of: float | None, to: float | None, goal: float) -> dict[str, Any]:
    """The ratio `of / to` against its goal; None (not measured) when a side is missing, as a
    gateway's CPU over a short cell can read 0 in /proc's 10 ms ticks."""
    if of is None or not to:
        return {"figure": what, "value": None, "goal": goal, "met": None}
    value = round(of / to, 2)
    return {"figure": what, "value": value, "goal": goal, "met": value >= goal}


def _shown(value: float | None) -> str:
    return "not measured" if value is None else str(value)


def _met(met: bool | None) -> str:
    return "-" if met is None else "yes" if met else "no"


def markdown(doc: dict[str, Any]) -> str:
    meta = doc["meta"]
    lines = [
        f"# Push subscriptions, {meta['date']}",
        "",
        f"`{meta['command']}` on {meta['machine']['cpu_model']} ({meta['machine']['nproc']} "
        f"CPUs), load average before {meta['load_average_before']}, after "
        f"{meta['load_average_after']}; {meta['rounds']} rounds, {PARTITIONS} partitions, "
        f"100-byte values; one record a request with ordering `{doc['single_record_ordering']}`.",
        "",
        "| cell | records | records/s | requests/s | gateway CPU s | gateway cores busy "
        "| receiver CPU s | records / gateway CPU s | rounds (records/s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for what, row in doc["cells"].items():
        lines.append(
            f"| {what} | {row['records']} | {row['records_per_s']} | {row['requests_per_s']} | "
            f"{row['server_cpu_s']} | {row['server_cores_busy']} | "
            f"{row.get('receiver_cpu_s', '')} | {row.get('records_per_server_cpu_s', '')} | "
            f"{row['rounds_records_per_s']} |"
        )
    bridge = doc["cells"]["bridge one record"]
    lines += [
        "",
        f"The bridge ({bridge['in_flight']} POSTs in flight): its own CPU while it delivered "
        f"{bridge['bridge_cpu_s']} s ({bridge['bridge_cores_busy']} cores busy; "
        f"{bridge['bridge_process_cpu_s']} s with its start); records per CPU-second of gateway "
        f"and bridge together: {bridge['records_per_cpu_s']}.",
        "",
        "| figure | value | goal | met |",
        "|---|---|---|---|",
        *(
            f"| {f['figure']} | {_shown(f['value'])} | >= {f['goal']} | {_met(f['met'])} |"
            for f in doc["figures"]
        ),
        "",
        f"Latency, produce -> receiver at {doc['latency']['rate']} records/s (half the one-record "
        f"rate, ordering `{doc['single_record_ordering']}`), {doc['latency']['records']} "
        f"records: p50 {doc['latency']['p50_ms']} ms, p99 {doc['latency']['p99_ms']} ms, max "
        f"{doc['latency']['max_ms']} ms.",
        "",
    ]  # fmt: skip
    subs, sse = doc["memory"]
    lines += [
        f"Memory: {subs['subscriptions']} idle subscriptions grew the gateway's RSS by "
        f"{subs['rss_growth_mb']} MiB, {subs['kib_per_subscription']} KiB each (started in "
        f"{subs['seconds_to_start']} s); {sse['streams']} open SSE streams by "
        f"{sse['rss_growth_mb']} MiB, {sse['kib_per_stream']} KiB each.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = plan_options(__doc__ or "", f"default {FULL.rounds}")
    parser.add_argument(
        "--before", type=Path, help="an earlier checkout whose gateway runs the one-record cell too"
    )
    args = parser.parse_args()
    plan = chosen_plan(args, QUICK, FULL)
    raise_fd_limit()
    stamp = Stamp()
    with tempfile.TemporaryDirectory(prefix="sluice-subs-bench-") as scratch:
        doc = run(plan, Path(scratch), args.before)
    doc["meta"] = stamp.meta(
        command("loadtests.subscriptions_bench", parser, args),
        rounds=plan.rounds,
        plan=dataclasses.asdict(plan),
        machine=machine(),
    )
    args.out.mkdir(parents=True, exist_ok=True)
    write(args.out, "subscriptions", doc, markdown(doc))


if __name__ == "__main__":
    main()
