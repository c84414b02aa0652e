"""What a one-record produce costs the gateway when it is not busy, and its latency at a share
of its maximum, with the machine's own stalls and its other work over the same seconds.

Serverless clients keep many connections open and send now and then: the gateway's loop then
wakes for a few requests at a time, and whatever it does per wake-up or per loop turn is paid
by those few. Per round, on each server, alternating: this tree's gateway, with `--before DIR`
an earlier checkout's (its compiled extensions in place), and `loadtests.floor_server` (uvloop
and a bare Protocol answering a canned 200: what any Python server pays here per request at
the same rates, the machine's part):

- the maximum: h2load's closed loop of one-record produces from `--connections` (1,024)
  HTTP/1.1 connections, every one busy: requests/s, the server's CPU per answer (the busy
  cost), and the answers refused (503) or failed;
- open loop at `--shares` (20, 50, 80%) of the maximum (this tree's gateway's in the first
  round, or `--maximum`, so that every server gets the same load): `loadtests.overload`'s
  driver, one request per connection at a time (it pipelines only when every connection is
  busy, and says how often), latency from the scheduled time. Per cell: the server's CPU per
  request (its /proc time from the schedule's start to the last answer, over the answers) and
  its ratio to the busy cost; p50 / p99 / p99.9 / max; refusals (503); the gateway's longest
  event-loop delay; how long the server's loop thread waited for a CPU it shares with other
  work, and the share of that CPU other processes used; the machine's own stalls
  (`loadtests.machine_stalls`: a real-time sleeper on each CPU); the load average.

The servers run on the first CPU; h2load, the driver and this process on the other. The
machine is often shared: `--nice N` runs the bench and all it starts in a scheduling group of
its own (a Linux autogroup) at nice N, so that other work on the machine takes less of the
servers' CPU; the figures say how much it still took.

    python -m loadtests.idle_cost [--rounds N] [--seconds S] [--shares 20,50,80]
        [--connections 1024] [--maximum RATE] [--before DIR] [--nice N] [--out DIR] [--quick]
        [-- GATEWAY OPTIONS]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from loadtests import generators
from loadtests.bench import machine
from loadtests.common import (
    http_json,
    progress,
    raise_fd_limit,
    separate_cpus,
    start_gateway,
    stop_on_sigterm,
)
from loadtests.machine_stalls import Probes, longest_ms
from loadtests.overload import BODY, Phase, run_driver
from loadtests.ratio_cli import Stamp, write

TOPIC = "idle"
TARGET = f"/v1/topics/{TOPIC}/partitions/0/records?acks=1"
SHARES = (0.2, 0.5, 0.8)
QUICK_SECONDS = 0.5
QUICK_CONNECTIONS = 64
FLOOR = "floor server"
SHED, LOOP_DELAY = "sluice_admission_shed_total", "sluice_event_loop_delay_max_seconds"
OWN_SESSION = "SLUICE_IDLE_COST_SESSION"  # set once the bench runs in a session of its own
# /proc/stat's per-CPU fields counted as busy: user, nice, system, irq, softirq, steal
BUSY_FIELDS = (0, 1, 2, 5, 6, 7)


class Server:
    """One server the cells run on: a gateway (this tree's, or `tree`'s) with the bench's
    topic, or the floor server."""

    def __init__(
        self, scratch: Path, name: str, options: list[str], tree: Path | None = None
    ) -> None:
        self.name = name
        self.gateway = name != FLOOR
        if self.gateway:
            self.process, url = start_gateway(
                scratch / name, *options, preexec=raise_fd_limit, log=scratch / f"{name}.log",
                tree=tree,
            )  # fmt: skip
            http_json("POST", f"{url}/v1/topics", {"name": TOPIC, "partitions": 1})
        else:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "loadtests.floor_server", "0"],
                stdout=subprocess.PIPE,
                text=True,
                preexec_fn=raise_fd_limit,
            )
            assert self.process.stdout is not None
            said = self.process.stdout.readline()
            if not said.startswith("listening on "):
                raise RuntimeError(f"loadtests.floor_server did not start: {said!r}")
            url = f"http://127.0.0.1:{said.split()[-1]}"
        self.url = url
        self.port = int(url.rsplit(":", 1)[1])

    def metrics(self) -> dict[str, float]:
        """The gateway's admission and loop-delay figures (none for the floor server)."""
        if not self.gateway:
            return {}
        with urllib.request.urlopen(self.url + "/metrics", timeout=30) as answer:
            lines = answer.read().decode().splitlines()
        found = {}
        for line in lines:
            name, _, value = line.partition(" ")
            if name in (SHED, LOOP_DELAY):
                found[name] = float(value)
        return found

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(60)


def cpu_busy_seconds(cpu: int) -> float:
    """Busy time of one CPU so far, every process's, from /proc/stat."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith(f"cpu{cpu} "):
            fields = [int(f) for f in line.split()[1:]]
            return sum(fields[i] for i in BUSY_FIELDS) / os.sysconf("SC_CLK_TCK")
    raise RuntimeError(f"no cpu{cpu} in /proc/stat")


def closed_loop(server: Server, seconds: float, connections: int, body: Path) -> dict[str, Any]:
    """h2load, every connection busy: the maximum and the busy cost."""
    run = generators.h2load(
        [server.url + TARGET], seconds=seconds, server_pid=server.process.pid, body=body,
        clients=connections, headers={"Content-Type": "application/json"}, threads=1, http1=True,
    )  # fmt: skip
    answers = run.requests + run.failures
    return {
        "requests_per_s": round(run.requests_per_s, 1),
        "server_cpu_us_per_request": round(run.server_cpu_s / answers * 1e6, 2),
        "refused_or_failed": run.failures,
    }


def open_loop(
    server: Server, rate: float, seconds: float, connections: int, probes: Probes, cpu: int
) -> dict[str, Any]:
    """One open-loop cell at `rate`: cost, latency, refusals, the server's CPU shared with other
    work, and the machine's stalls."""
    before = server.metrics()
    busy_before, wall_before = cpu_busy_seconds(cpu), time.monotonic()
    result = run_driver(
        server.port, TOPIC, [Phase("open", rate, seconds)], connections, server.process.pid
    )
    busy, wall = cpu_busy_seconds(cpu) - busy_before, time.monotonic() - wall_before
    after = server.metrics()
    window = result["scheduled_window"]
    phase = result["phases"][0]
    answered = phase["admitted"] + phase["shed"]
    stalls = probes.window(window["clock_start"], window["clock_end"])
    server_cpu = window["server_cpu_s"]
    return {
        "offered_per_s": round(rate, 1),
        "sent": phase["sent"],
        "answered_2xx": phase["admitted"],
        "refused_503": phase["shed"],
        "other_statuses": phase["other_statuses"],
        "unanswered": phase["unanswered"],
        "pipelined": result["pipelined"],
        "server_cpu_us_per_request": round(server_cpu / answered * 1e6, 2) if answered else None,
        "latency": phase["admitted_latency"],
        "send_late": result["send_late"],
        "driver_cpu_s": result["driver_cpu_s"],
        "admission_shed": after.get(SHED, 0) - before.get(SHED, 0) if server.gateway else None,
        "loop_delay_max_ms": round(after[LOOP_DELAY] * 1000, 1) if server.gateway else None,
        "runqueue_wait_us_per_request": round(window["server_runqueue_wait_s"] / answered * 1e6, 2)
        if answered
        else None,
        "other_work_on_server_cpu": round(max(0.0, busy - server_cpu) / wall, 3),
        "machine_stalls": stalls,
        "machine_stall_max_ms": longest_ms(stalls),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def run(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    """Every server's maximum and open-loop cells, `rounds` times, alternating."""
    seconds = QUICK_SECONDS if args.quick else args.seconds
    connections = QUICK_CONNECTIONS if args.quick else args.connections
    rounds = 1 if args.quick else args.rounds
    body = scratch / "one-record.json"
    body.write_bytes(BODY)
    servers = [Server(scratch, "this tree", args.gateway_args)]
    if args.before is not None:
        servers.append(Server(scratch, "before", args.gateway_args, args.before.resolve()))
    servers.append(Server(scratch, FLOOR, []))
    rows: list[dict[str, Any]] = []
    maximum = args.maximum
    try:
        with Probes() as probes:  # on every CPU: started before this process is placed
            placement = separate_cpus(*(s.process.pid for s in servers))
            server_cpu = sorted(os.sched_getaffinity(servers[0].process.pid))[0]
            for number in range(rounds):
                order = servers if number % 2 == 0 else servers[::-1]
                for server in order:
                    progress(f"round {number + 1}: {server.name}, closed loop")
                    busy = closed_loop(server, seconds, connections, body)
                    if maximum is None and server.gateway:
                        maximum = busy["requests_per_s"]
                    rows.append({"round": number + 1, "server": server.name, "closed_loop": busy})
                for server in order:  # the cells at the first gateway's maximum
                    row = next(
                        r for r in rows if r["round"] == number + 1 and r["server"] == server.name
                    )
                    cost = row["closed_loop"]["server_cpu_us_per_request"]
                    for share in args.shares:
                        progress(f"round {number + 1}: {server.name}, {share:.0%}")
                        assert maximum is not None
                        cell = open_loop(
                            server, maximum * share, seconds, connections, probes, server_cpu
                        )
                        own = cell["server_cpu_us_per_request"]
                        cell["cost_over_busy"] = round(own / cost, 2) if own else None
                        row[f"{share:.0%}"] = cell
    finally:
        for server in servers:
            server.close()
    return {"maximum_per_s": maximum, "cpus": placement, "rows": rows, "summary": summary(rows)}


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per server and share, the medians over the rounds."""
    out: dict[str, Any] = {}
    for name in dict.fromkeys(row["server"] for row in rows):
        mine = [row for row in rows if row["server"] == name]
        per: dict[str, Any] = {
            "busy_cpu_us": _median([r["closed_loop"]["server_cpu_us_per_request"] for r in mine])
        }
        for key in [k for k in mine[0] if k.endswith("%")]:
            got = [row[key] for row in mine]
            per[key] = {
                "cpu_us": _median([c["server_cpu_us_per_request"] for c in got]),
                "cost_over_busy": _median([c["cost_over_busy"] for c in got]),
                "p99_ms": _median([c["latency"].get("p99_ms") for c in got]),
                "p999_ms": _median([c["latency"].get("p999_ms") for c in got]),
                "max_ms": _median([c["latency"].get("max_ms") for c in got]),
                "refused_503": sum(c["refused_503"] for c in got),
                "runqueue_wait_us": _median([c["runqueue_wait_us_per_request"] for c in got]),
                "machine_stall_max_ms": max(c["machine_stall_max_ms"] for c in got),
            }
        out[name] = per
    return out


def _median(values: list[Any]) -> Any:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 2) if known else None


def markdown(doc: dict[str, Any]) -> str:
    meta = doc["meta"]
    out = [
        "## What a one-record produce costs when the gateway is not busy",
        "",
        f"`{meta['command']}`; {meta['date']}; commit {meta['commit']}; {meta['cpus']}; "
        f"{meta['priority']}; load average before {meta['load_average_before']}, after "
        f"{meta['load_average_after']}; maximum {doc['maximum_per_s']:,.0f} requests/s.",
        "",
        "| round | server | cell | requests/s | µs of server CPU a request | over busy | "
        "p50 / p99 / p99.9 / max ms | 503 | pipelined | loop delay max ms | runqueue wait µs a "
        "request | other work on its CPU | machine stalls: max ms, over 3 ms (CPU 0; 1) | "
        "load average |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in doc["rows"]:
        busy = row["closed_loop"]
        out.append(
            f"| {row['round']} | {row['server']} | closed loop | {busy['requests_per_s']:,.0f} | "
            f"{busy['server_cpu_us_per_request']} | 1 | | {busy['refused_or_failed']} refused or "
            "failed | | | | | | |"
        )
        for key in [k for k in row if k.endswith("%")]:
            c = row[key]
            lat = c["latency"]
            stalls = "; ".join(
                f"{s['max_ms']}, {s['over_3ms']}" for s in c["machine_stalls"].values()
            )
            delay = "" if c["loop_delay_max_ms"] is None else c["loop_delay_max_ms"]
            out.append(
                f"| {row['round']} | {row['server']} | {key} | {c['offered_per_s']:,.0f} | "
                f"{c['server_cpu_us_per_request']} | {c['cost_over_busy']} | "
                f"{lat.get('p50_ms')} / {lat.get('p99_ms')} / {lat.get('p999_ms')} / "
                f"{lat.get('max_ms')} | {c['refused_503']} | {c['pipelined']} | {delay} | "
                f"{c['runqueue_wait_us_per_request']} | {c['other_work_on_server_cpu']:.0%} | "
                f"{stalls} | {c['load_average'][0]} |"
            )
    return "\n".join(out) + "\n"


def own_priority(nice: int | None) -> str:
    """With `nice`, put this process (and all it starts) in a scheduling group of its own at
    that nice value: on Linux with autogroups, nice counts only within a session's group, so
    the bench first runs in a session of its own (re-executed under setsid). What was done."""
    if nice is None:
        return "default priority"
    if os.getsid(0) != os.getpid() and not os.environ.get(OWN_SESSION):
        os.environ[OWN_SESSION] = "1"
        argv = [sys.executable, "-m", "loadtests.idle_cost", *sys.argv[1:]]
        os.execvp("setsid", ["setsid", "--wait", *argv])
    autogroup = Path("/proc/self/autogroup")
    if autogroup.exists():
        autogroup.write_text(str(nice))
        return f"an autogroup of its own at nice {nice}"
    os.setpriority(os.PRIO_PROCESS, 0, nice)
    return f"nice {nice}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0, help="per cell")
    parser.add_argument(
        "--shares",
        type=lambda text: [int(s) / 100 for s in text.split(",")],
        default=list(SHARES),
        help="open-loop cells, per cent of the maximum (default 20,50,80)",
    )
    parser.add_argument("--connections", type=int, default=1024)
    parser.add_argument("--maximum", type=float, help="the rate to take shares of")
    parser.add_argument("--before", type=Path, help="an earlier checkout measured beside")
    parser.add_argument("--nice", type=int, help="run in a scheduling group of its own at this")
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    parser.add_argument("--quick", action="store_true", help="one short round (CI)")
    parser.add_argument("gateway_args", nargs="*", help="options for the gateways (after --)")
    args = parser.parse_args()
    priority = own_priority(args.nice)
    stop_on_sigterm()
    raise_fd_limit()
    stamp = Stamp()
    with tempfile.TemporaryDirectory(prefix="sluice-idle-") as scratch:
        doc = run(args, Path(scratch))
    doc["meta"] = {
        **stamp.meta(
            " ".join(["python -m loadtests.idle_cost", *sys.argv[1:]]),
            commit=stamp.commit,
            cpus=doc.pop("cpus"),
            priority=priority,
        ),
        "machine": machine(),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    write(args.out, "idle-cost", doc, markdown(doc))


if __name__ == "__main__":
    main()
