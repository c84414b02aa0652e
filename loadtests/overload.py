"""Open-loop one-record produce over many keep-alive connections: latency below saturation,
and what the gateway does past it.

Serverless traffic is many connections each sending now and then. The driver (its own
process, a bare asyncio Protocol per connection) sends one-record JSON produces at fixed times
t0 + i/rate whatever the answers (no coordinated omission): each to a connection with nothing
in flight when there is one, else pipelined behind a busy one; latency counts from the
scheduled time. Each connection first carries one produce, answered before the clock starts
and not counted, so that the gateway's accepting a thousand connections at once is not
measured as the load's latency. A schedule is a list of phases (rate, seconds) run back to
back. During a flood a fresh connection is opened every 100 ms and timed to its first answer.

    python -m loadtests.overload [--connections 1024] [--seconds 30] [--out DIR] [--quick]

measures the gateway's maximum (h2load closed loop, from 64 connections and from all of them),
then the cells: open loop at 50% and 80% of the 64-connection maximum, at 80% of the
all-connection one, and a flood: 50% for 3 s, 150% for `--seconds`, 50% for 5 s.
Options after `--` go to the gateway (`-- --admission-target-delay-ms 0`: without the
admission control's delay rule); `--maximum` takes shares of a given rate instead, so that two
runs offer the same load. The gateway runs on the first CPU and h2load and the driver on the
others (as `loadtests.quick`): sharing the cores, the scheduler put them on one at first and
the first ~80 ms of a cell measured that; `--shared-cpus` leaves them together.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import itertools
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import uvloop

from loadtests import generators
from loadtests.common import (
    cpu_seconds,
    http_json,
    raise_fd_limit,
    runqueue_wait_seconds,
    separate_cpus,
    start_gateway,
    stop_on_sigterm,
)
from loadtests.openloop import MIN_SLEEP_S, Answers, connect, http_answer, percentiles

BUCKET_S = 0.1  # the timeline's resolution
WARM_UP = -1  # the phase of each connection's first request, sent before the schedule
NEW_CONNECTION_EVERY_S = 0.1
DRAIN_S = 15.0
BODY = b'{"records":[{"value":{"event":"click","user":42}}]}'
BEFORE_S, AFTER_S = 3.0, 5.0  # the flood cell's calm phases
# --quick (a smoke run: every figure, none judged): cells of 0.5 s, the flood 1 s (ten fresh
# connections) between calm phases of 0.5 s
QUICK_CELL_S, QUICK_FLOOD_S, QUICK_CALM_S = 0.5, 1.0, 0.5


@dataclass(frozen=True)
class Phase:
    """`rate` requests/s for `seconds`; `flood` marks the phase whose new connections are timed."""

    name: str
    rate: float
    seconds: float
    flood: bool = False


def produce_request(topic: str) -> bytes:
    """The one-record produce every connection sends (acks=1, partition 0)."""
    return (
        b"POST /v1/topics/%s/partitions/0/records?acks=1 HTTP/1.1\r\nHost: bench\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
        % (topic.encode(), len(BODY), BODY)
    )


class _PhaseTally:
    """Answers to the requests scheduled in one phase."""

    def __init__(self) -> None:
        self.sent = 0
        self.admitted: list[float] = []  # ms from schedule to a 2xx
        self.shed: list[float] = []  # ms from schedule to a 503
        self.other: dict[int, int] = {}
        self.answered_within = 0  # 2xx answers that arrived during the phase

    def summary(self, phase: Phase) -> dict[str, Any]:
        return {
            "phase": phase.name,
            "offered_per_s": phase.rate,
            "seconds": phase.seconds,
            "sent": self.sent,
            "admitted": len(self.admitted),
            "shed": len(self.shed),
            "other_statuses": {str(k): v for k, v in sorted(self.other.items())},
            "unanswered": self.sent
            - len(self.admitted)
            - len(self.shed)
            - sum(self.other.values()),
            "goodput_per_s": round(self.answered_within / phase.seconds, 1),
            "admitted_latency": percentiles(self.admitted),
            "shed_latency": percentiles(self.shed),
        }


async def drive(
    port: int, topic: str, phases: list[Phase], connections: int, server_pid: int | None = None
) -> dict[str, Any]:
    """Run the schedule over `connections` connections; per phase and per 100 ms, what came back.
    With `server_pid`, that server's CPU from the schedule's start to its last answer and how long
    its main thread waited for a CPU meanwhile, and when those were (time.monotonic: the machine's
    stalls are read over the same seconds)."""
    request = produce_request(topic)
    tallies = [_PhaseTally() for _ in phases]
    buckets: dict[int, list[float]] = {}  # scheduled 100 ms bucket -> 2xx latencies
    answered_in: dict[int, int] = {}  # 100 ms bucket -> 2xx answers that arrived in it
    late: list[float] = []  # ms each send went out after its scheduled time
    pending: list[deque[tuple[float, int]]] = [deque() for _ in range(connections)]
    idle: deque[int] = deque()  # filled as the warm-up requests are answered
    pipelined = 0
    start = 0.0

    def answered(slot: int, status: int, _: bytes) -> None:
        scheduled, phase = pending[slot].popleft()
        if not pending[slot]:
            idle.append(slot)
        if phase == WARM_UP:
            if len(idle) == connections:
                warmed.set()
            return
        now = time.perf_counter()
        waited = (now - scheduled) * 1000
        tally = tallies[phase]
        if 200 <= status < 300:
            tally.admitted.append(waited)
            buckets.setdefault(int((scheduled - start) / BUCKET_S), []).append(waited)
            arrived = int((now - start) / BUCKET_S)
            answered_in[arrived] = answered_in.get(arrived, 0) + 1
        elif status == 503:
            tally.shed.append(waited)
        else:
            tally.other[status] = tally.other.get(status, 0) + 1

    pool: list[Answers] = []
    for slot in range(connections):
        pool.append(await connect(port, http_answer, functools.partial(answered, slot)))
    # Every connection carries one produce before the clock starts: the gateway has accepted
    # and set up all of them, as a serverless fleet's keep-alive connections already are.
    warmed = asyncio.Event()  # set once every connection is idle again
    for slot, protocol in enumerate(pool):
        pending[slot].append((0.0, WARM_UP))
        assert protocol.transport is not None
        protocol.transport.write(request)
    async with asyncio.timeout(DRAIN_S):
        await warmed.wait()
    fresh: list[dict[str, float | int]] = []
    fresh_tasks: list[asyncio.Task[None]] = []

    async def fresh_connection(opened_at: float) -> None:
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def first(status: int, _: bytes) -> None:
            if not done.done():
                done.set_result(status)

        protocol = await connect(port, http_answer, first)
        assert protocol.transport is not None
        protocol.transport.write(request)
        status = await done
        fresh.append({"status": status, "ms": round((time.perf_counter() - opened_at) * 1000, 3)})
        protocol.transport.close()

    cpu_before = time.process_time()
    server_before = cpu_seconds(server_pid) if server_pid is not None else 0.0
    waited_before = runqueue_wait_seconds(server_pid) if server_pid is not None else 0.0
    clock_start = time.monotonic()
    start = time.perf_counter() + 0.05
    phase_start = start
    for index, phase in enumerate(phases):
        total = int(phase.rate * phase.seconds)
        interval = 1.0 / phase.rate
        next_fresh = phase_start
        sent = 0
        tally = tallies[index]
        while sent < total:
            now = time.perf_counter()
            if phase.flood and now >= next_fresh:
                fresh_tasks.append(asyncio.create_task(fresh_connection(now)))
                next_fresh += NEW_CONNECTION_EVERY_S
            due = phase_start + sent * interval
            if due > now:
                await asyncio.sleep(max(due - now, MIN_SLEEP_S))
                continue
            while sent < total and phase_start + sent * interval <= now:
                if idle:
                    slot = idle.popleft()
                else:
                    slot = sent % connections
                    pipelined += 1
                scheduled = phase_start + sent * interval
                late.append((now - scheduled) * 1000)
                pending[slot].append((scheduled, index))
                transport = pool[slot].transport
                assert transport is not None
                transport.write(request)
                sent += 1
        tally.sent = sent
        phase_start += phase.seconds
    deadline = time.perf_counter() + DRAIN_S
    while any(pending) and time.perf_counter() < deadline:
        await asyncio.sleep(0.01)
    scheduled_window = {"clock_start": clock_start, "clock_end": time.monotonic()}
    if server_pid is not None:
        scheduled_window["server_cpu_s"] = cpu_seconds(server_pid) - server_before
        waited = runqueue_wait_seconds(server_pid) - waited_before
        scheduled_window["server_runqueue_wait_s"] = waited
    async with asyncio.timeout(DRAIN_S):
        await asyncio.gather(*fresh_tasks, return_exceptions=True)
    for protocol in pool:
        if protocol.transport is not None:
            protocol.transport.close()
    timeline = [
        {
            "at_s": round(bucket * BUCKET_S, 1),
            "admitted": len(got),
            "answered_per_s": answered_in.get(bucket, 0) / BUCKET_S,
            **percentiles(got),
        }
        for bucket, got in sorted(buckets.items())
    ]
    ends = list(itertools.accumulate(phase.seconds for phase in phases))
    for tally, phase, end in zip(tallies, phases, ends, strict=True):
        first, last = round((end - phase.seconds) / BUCKET_S), round(end / BUCKET_S)
        tally.answered_within = sum(answered_in.get(b, 0) for b in range(first, last))
    return {
        "connections": connections,
        "pipelined": pipelined,
        "phases": [tally.summary(phase) for tally, phase in zip(tallies, phases, strict=True)],
        "new_connections": {
            "opened": len(fresh_tasks),
            "answered": len(fresh),
            "statuses": sorted({int(f["status"]) for f in fresh}),
            **percentiles([float(f["ms"]) for f in fresh]),
        },
        "timeline": timeline,
        "send_late": percentiles(late),
        "driver_cpu_s": round(time.process_time() - cpu_before, 2),
        "scheduled_window": scheduled_window,
    }


def recovery_seconds(
    timeline: list[dict[str, Any]], flood_end_s: float, normal_p99_ms: float
) -> float:
    """Seconds after the flood's end until every later 100 ms bucket's p99 is back within
    twice the normal p99 (at least 10 ms)."""
    limit = max(10.0, 2 * normal_p99_ms)
    after = [row for row in timeline if row["at_s"] >= flood_end_s]
    recovered_at = flood_end_s
    for row in after:
        if row.get("p99_ms", 0.0) > limit:
            recovered_at = row["at_s"] + BUCKET_S
    return round(recovered_at - flood_end_s, 2)


def run_driver(
    port: int, topic: str, phases: list[Phase], connections: int, server_pid: int | None = None
) -> dict[str, Any]:
    """The driver in its own process (it needs a core of its own); with `server_pid`, it reads
    that server's CPU over the schedule itself (`drive`)."""
    spec = orjson.dumps(
        {"port": port, "topic": topic, "connections": connections,
         "phases": [phase.__dict__ for phase in phases], "server_pid": server_pid}
    )  # fmt: skip
    process = subprocess.Popen(
        [sys.executable, "-m", "loadtests.overload", "--drive", spec.decode()],
        stdout=subprocess.PIPE,
        text=True,
    )
    out, _ = process.communicate(timeout=sum(p.seconds for p in phases) + DRAIN_S + 120)
    if process.returncode != 0:
        raise RuntimeError(f"the driver failed ({process.returncode})")
    result: dict[str, Any] = orjson.loads(out)
    return result


class _Sampler(threading.Thread):
    """The gateway's RSS every 100 ms, while a cell runs."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak_kib = 0
        self.stop = threading.Event()

    def run(self) -> None:
        status = Path(f"/proc/{self.pid}/status")
        while not self.stop.wait(BUCKET_S):
            for line in status.read_text().splitlines():
                if line.startswith("VmRSS:"):
                    self.peak_kib = max(self.peak_kib, int(line.split()[1]))


def cell(
    gateway_pid: int, port: int, topic: str, phases: list[Phase], connections: int
) -> dict[str, Any]:
    """One driver run with the gateway's CPU over it and its peak RSS."""
    sampler = _Sampler(gateway_pid)
    sampler.start()
    cpu_before = cpu_seconds(gateway_pid)
    try:
        result = run_driver(port, topic, phases, connections)
    finally:
        sampler.stop.set()
        sampler.join()
    server_cpu = cpu_seconds(gateway_pid) - cpu_before
    answered = sum(p["admitted"] + p["shed"] for p in result["phases"])
    result["server_cpu_s"] = round(server_cpu, 2)
    result["server_cpu_us_per_request"] = (
        round(server_cpu / answered * 1e6, 1) if answered else None
    )
    result["peak_rss_mib"] = round(sampler.peak_kib / 1024, 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=1024)
    parser.add_argument("--seconds", type=float, default=30.0, help="the flood's length")
    parser.add_argument("--cell-seconds", type=float, default=10.0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--shared-cpus",
        action="store_true",
        help="leave the gateway and the load generators on every CPU (default: apart)",
    )
    parser.add_argument(
        "--maximum", type=float, help="the maximum rate to take shares of (default: measured)"
    )
    parser.add_argument("--out", type=Path, default=Path("overload-report"))
    parser.add_argument("--drive", help=argparse.SUPPRESS)
    parser.add_argument("gateway_args", nargs="*", help="options for the gateway (after --)")
    args = parser.parse_args()
    stop_on_sigterm()
    raise_fd_limit()
    if args.drive:
        spec = orjson.loads(args.drive)
        phases = [Phase(**phase) for phase in spec["phases"]]
        result = uvloop.run(
            drive(spec["port"], spec["topic"], phases, spec["connections"], spec.get("server_pid"))
        )
        sys.stdout.write(orjson.dumps(result).decode())
        return
    report = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "overload.json").write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    print(orjson.dumps(report["figures"], option=orjson.OPT_INDENT_2).decode())


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Maximum, the two open-loop cells and the flood, on one fresh gateway."""
    seconds = QUICK_CELL_S if args.quick else args.cell_seconds
    flood_seconds = QUICK_FLOOD_S if args.quick else args.seconds
    with tempfile.TemporaryDirectory(prefix="sluice-overload-") as scratch:
        gateway, url = start_gateway(Path(scratch) / "data", *args.gateway_args)
        try:
            placement = "shared" if args.shared_cpus else separate_cpus(gateway.pid)
            port = int(url.rsplit(":", 1)[1])
            topic = "overload"
            http_json("POST", f"{url}/v1/topics", {"name": topic, "partitions": 1})
            body = Path(scratch) / "body.json"
            body.write_bytes(BODY)
            target = f"{url}/v1/topics/{topic}/partitions/0/records?acks=1"
            closed = {
                clients: generators.h2load(
                    [target], seconds=seconds, server_pid=gateway.pid, body=body, clients=clients,
                    headers={"Content-Type": "application/json"}, threads=1, http1=True,
                )
                for clients in (64, args.connections)
            }  # fmt: skip
            maximum = args.maximum or closed[64].requests_per_s
            busy_cpu_us = closed[64].server_cpu_s / closed[64].requests * 1e6
            cells = {
                f"{share:.0%}": cell(
                    gateway.pid, port, topic,
                    [Phase(f"{share:.0%}", maximum * share, seconds)], args.connections,
                )
                for share in (0.5, 0.8)
            }  # fmt: skip
            # 80% of what these connections themselves take closed loop: a produce over many
            # mostly idle connections costs more, so 80% of the 64-connection rate is more load.
            own = closed[args.connections].requests_per_s
            cells["80% of own"] = cell(
                gateway.pid, port, topic, [Phase("80% of own", own * 0.8, seconds)],
                args.connections,
            )  # fmt: skip
            calm = QUICK_CALM_S if args.quick else BEFORE_S
            flood_phases = [
                Phase("before", maximum * 0.5, calm),
                Phase("flood", maximum * 1.5, flood_seconds, flood=True),
                Phase("after", maximum * 0.5, QUICK_CALM_S if args.quick else AFTER_S),
            ]
            flood = cell(gateway.pid, port, topic, flood_phases, args.connections)
        finally:
            gateway.terminate()
            gateway.wait(timeout=60)
    normal = flood["phases"][0]["admitted_latency"].get("p99_ms", 0.0)
    during = flood["phases"][1]
    at80, own80 = cells["80%"], cells["80% of own"]
    figures = {
        "maximum_per_s": round(maximum, 1),
        "closed_loop_all_connections_per_s": round(closed[args.connections].requests_per_s, 1),
        "closed_loop_all_connections_failures": closed[args.connections].failures,
        "busy_64_cpu_us_per_request": round(busy_cpu_us, 1),
        "open_loop_80_p99_ms": at80["phases"][0]["admitted_latency"].get("p99_ms"),
        "open_loop_80_p999_ms": at80["phases"][0]["admitted_latency"].get("p999_ms"),
        "open_loop_80_cpu_us_per_request": at80["server_cpu_us_per_request"],
        "open_loop_80_send_late_p99_ms": at80["send_late"].get("p99_ms"),
        "open_loop_80_driver_cpu_s": at80["driver_cpu_s"],
        "cpu_ratio_80_to_busy": round(at80["server_cpu_us_per_request"] / busy_cpu_us, 2),
        "open_loop_80_of_own_p99_ms": own80["phases"][0]["admitted_latency"].get("p99_ms"),
        "open_loop_80_of_own_p999_ms": own80["phases"][0]["admitted_latency"].get("p999_ms"),
        "open_loop_80_of_own_send_late_p99_ms": own80["send_late"].get("p99_ms"),
        "flood_goodput_share": round(during["goodput_per_s"] / maximum, 3),
        "flood_admitted_p99_ms": during["admitted_latency"].get("p99_ms"),
        "flood_shed": during["shed"],
        "flood_shed_p99_ms": during["shed_latency"].get("p99_ms"),
        "flood_shed_max_ms": during["shed_latency"].get("max_ms"),
        "flood_new_connections": flood["new_connections"],
        "flood_peak_rss_mib": flood["peak_rss_mib"],
        "recovery_s": recovery_seconds(flood["timeline"], calm + flood_seconds, normal),
    }
    return {"figures": figures, "cpus": placement, "cells": cells, "flood": flood}


if __name__ == "__main__":
    main()
