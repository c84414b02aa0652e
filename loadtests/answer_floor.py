"""What answering one request costs the server here, from the cheapest server there is to the
gateway's own answers: nginx writing a canned answer (one worker; `nginx` must be installed),
`loadtests.floor_server` (uvloop and a bare Protocol), the gateway's admission refusal (503
SERVER_OVERLOADED: a gateway started with `--admission-max-inflight 1`, so nearly every
produce is refused) and its one-record produce; over HTTP/1.1 and h2c (not the Python floor,
which speaks HTTP/1.1 only), from 64 and 1,024 connections with one request in flight each.
The figure is the server's CPU per answer (µs), servers on the first CPU and h2load on the
others. Cells alternate over the rounds; the median round is the figure. Then the same servers
but the produce under `loadtests.overload`'s open loop over 1,024 connections, at 150% of the
rate the gateway's produce reached from 64 connections in the first round: a flood's pattern,
each request arriving alone on its connection, with a read, a write and a wake-up of its own.

Two bounds follow, for one worker on one core. A flood at 150% of the produce's capacity
keeps its latency only if the answers fit the core: admitting a share of the maximum and
refusing the rest at r produces' cost each, at most (1 - 1.5 r) / (1 - r) of the maximum is
served; with nginx's r, no server could do better. And h2c / HTTP/1.1 for the produce is at
most produce / (produce + what HTTP/2 adds to nginx's answer).

    python -m loadtests.answer_floor [--quick] [--rounds N] [--seconds S] [--out DIR]
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson

from gateway.workers.local_cluster import free_port
from loadtests import generators, overload, ratio_cli
from loadtests.common import http_json, separate_cpus, start_gateway
from loadtests.floor_server import LISTEN_BACKLOG

ONE_RECORD = orjson.dumps({"records": [{"value": {"event": "click", "user": 42}}]})
TARGET = "/v1/topics/answers/partitions/0/records?acks=1"
# nginx answers with a body as long as the gateway's refusal (tests/loadtests keeps them equal),
# as a 200 so that h2load counts it answered.
CANNED = (
    b'{"type":"https://sluice.dev/problems/server-overloaded","title":"Service Unavailable",'
    b'"status":503,"detail":"this server is past its capacity: nothing was appended; retry '
    b'after 1 s","code":"SERVER_OVERLOADED"}'
)
SERVERS = ("nginx", "python floor", "refusal", "produce")
CELLS = [  # (server, protocol, connections)
    (server, protocol, connections)
    for connections in (64, 1024)
    for server in SERVERS
    for protocol in ("http/1.1", "h2c")
    if not (server == "python floor" and protocol == "h2c")
]
FLOOD = 1.5  # the offered load of the flood bound, in shares of the produce's capacity
OPEN_LOOP = ("nginx", "python floor", "refusal")  # the servers that keep up with a flood
OPEN_CONNECTIONS = 1024


def nginx_config(directory: Path, port: int, h2c_port: int) -> Path:
    """One nginx worker in the foreground answering every request with `CANNED` (HTTP/1.1
    on `port`, h2c with prior knowledge on `h2c_port`), nothing logged, connections kept, and
    a listen queue as long as the gateway's: with nginx's default (511) the 1,024 connections
    of a cell opening at once overflowed it, and h2load, whose late connections never stop,
    ran on past its duration."""
    body = directory / "canned.json"
    body.write_bytes(CANNED)
    config = directory / "nginx.conf"
    config.write_text(
        f"""
worker_processes 1;
master_process off;
daemon off;
error_log {directory}/error.log warn;
pid {directory}/nginx.pid;
events {{ worker_connections 8192; }}
http {{
  access_log off;
  keepalive_requests 1000000000;
  keepalive_timeout 300s;
  http2_max_requests 1000000000;
  client_body_temp_path {directory}/body;
  proxy_temp_path {directory}/proxy;
  fastcgi_temp_path {directory}/fastcgi;
  uwsgi_temp_path {directory}/uwsgi;
  scgi_temp_path {directory}/scgi;
  server {{
    listen 127.0.0.1:{port} backlog={LISTEN_BACKLOG};
    listen 127.0.0.1:{h2c_port} http2 backlog={LISTEN_BACKLOG};
    location / {{
      default_type application/problem+json;
      add_header Retry-After 1;
      return 200 '{CANNED.decode()}';
    }}
  }}
}}
"""
    )
    return config


def start_nginx(directory: Path) -> tuple[subprocess.Popen[bytes], int, int]:
    """nginx as `nginx_config` sets it up; the process and its two ports once it answers."""
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists():
        raise RuntimeError("nginx is needed: apt-get install nginx-light")
    directory.mkdir(parents=True, exist_ok=True)
    port, h2c_port = free_port(), free_port()
    process = subprocess.Popen(
        [nginx, "-c", str(nginx_config(directory, port, h2c_port))],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as answer:
                answer.read()
            return process, port, h2c_port
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError(f"nginx did not start: {directory}/error.log") from None
            time.sleep(0.05)


def _shed(url: str) -> float:
    """The gateway's count of produces refused by its admission control."""
    with urllib.request.urlopen(url + "/metrics", timeout=30) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith("sluice_admission_shed_total "):
                return float(line.split()[1])
    return 0.0


def run_cell(
    url: str, pid: int, body: Path, refusals: bool, protocol: str, connections: int, seconds: float
) -> dict[str, Any]:
    """One h2load run of one-record produces; its answers (2xx, and the refusals the gateway
    counted when `refusals`) and the server's CPU per answer."""
    before = _shed(url) if refusals else 0.0
    run = generators.h2load(
        [url + TARGET],
        seconds=seconds,
        server_pid=pid,
        body=body,
        headers={"Content-Type": "application/json"},
        clients=connections,
        threads=1,
        http1=protocol == "http/1.1",
    )
    refused = int(_shed(url) - before) if refusals else 0
    answers = run.requests + refused
    return {
        "answers": answers,
        "refused": refused,
        "answers_per_s": round(answers / run.seconds, 1) if run.seconds else 0.0,
        "server_cpu_s": run.server_cpu_s,
        "generator_cpu_s": run.generator_cpu_s,
        "server_us_per_answer": round(run.server_cpu_s / answers * 1e6, 2) if answers else None,
    }


def run(rounds: int, seconds: float, scratch: Path) -> dict[str, Any]:
    """Every cell `rounds` times, alternating; the median round of each, and the bounds."""
    body = scratch / "produce"
    body.write_bytes(ONE_RECORD)
    processes: list[subprocess.Popen[Any]] = []
    try:
        nginx, port, h2c_port = start_nginx(scratch / "nginx")
        processes.append(nginx)
        floor = subprocess.Popen(
            [sys.executable, "-m", "loadtests.floor_server", "0"], stdout=subprocess.PIPE, text=True
        )
        processes.append(floor)
        assert floor.stdout is not None
        said = floor.stdout.readline()
        if not said.startswith("listening on "):
            raise RuntimeError(f"loadtests.floor_server did not start: {said!r}")
        gateway, gateway_url = start_gateway(scratch / "produce-data")
        processes.append(gateway)
        refusing, refusing_url = start_gateway(
            scratch / "refusal-data", "--admission-max-inflight", "1"
        )
        processes.append(refusing)
        for url in (gateway_url, refusing_url):
            http_json("POST", url + "/v1/topics", {"name": "answers", "partitions": 1})
        at = {
            ("nginx", "http/1.1"): (f"http://127.0.0.1:{port}", nginx.pid),
            ("nginx", "h2c"): (f"http://127.0.0.1:{h2c_port}", nginx.pid),
            ("python floor", "http/1.1"): ("http://127.0.0.1:" + said.split()[-1], floor.pid),
            **{("refusal", p): (refusing_url, refusing.pid) for p in ("http/1.1", "h2c")},
            **{("produce", p): (gateway_url, gateway.pid) for p in ("http/1.1", "h2c")},
        }
        placement = separate_cpus(*(p.pid for p in processes))
        results: dict[tuple[str, str, int], list[dict[str, Any]]] = {c: [] for c in CELLS}
        flood: dict[str, list[dict[str, Any]]] = {server: [] for server in OPEN_LOOP}
        rate = 0.0
        for _ in range(rounds):
            for cell in CELLS:
                server, protocol, connections = cell
                url, pid = at[(server, protocol)]
                row = run_cell(url, pid, body, server == "refusal", protocol, connections, seconds)
                results[cell].append(row)
            rate = rate or FLOOD * results[("produce", "http/1.1", 64)][0]["answers_per_s"]
            for server in OPEN_LOOP:
                url, pid = at[(server, "http/1.1")]
                flood[server].append(open_loop_cell(server, url, pid, rate, seconds))
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(30)
    rows = [
        {"server": server, "protocol": protocol, "connections": connections, **median(runs)}
        for (server, protocol, connections), runs in results.items()
    ]
    open_rows = [median(runs) for runs in flood.values()]
    return {"cells": rows, "bounds": bounds(rows), "open_loop": open_rows, "cpus": placement}


def median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median round by CPU an answer, with every round's figure."""
    ordered = sorted(runs, key=lambda r: r["server_us_per_answer"] or 0.0)
    return {
        **ordered[(len(ordered) - 1) // 2],
        "rounds_us_per_answer": [r["server_us_per_answer"] for r in ordered],
    }


def open_loop_cell(server: str, url: str, pid: int, rate: float, seconds: float) -> dict[str, Any]:
    """`loadtests.overload`'s driver at `rate` for `seconds` over `OPEN_CONNECTIONS`
    connections: the server's CPU per answer, and how late the answers came."""
    port = int(url.rsplit(":", 1)[1])
    phase = overload.Phase("open loop", rate, seconds)
    result = overload.cell(pid, port, "answers", [phase], OPEN_CONNECTIONS)
    [tally] = result["phases"]
    latency = [tally["admitted_latency"], tally["shed_latency"]]
    return {
        "server": server,
        "offered_per_s": round(rate),
        "connections": OPEN_CONNECTIONS,
        "answers": tally["admitted"] + tally["shed"],
        "refused": tally["shed"],
        "unanswered": tally["unanswered"],
        "p99_ms": max(part.get("p99_ms", 0.0) for part in latency),
        "server_cpu_s": result["server_cpu_s"],
        "server_us_per_answer": result["server_cpu_us_per_request"],
    }


def flood_bound(refusal_share: float) -> float:
    """The most of the maximum a worker serves at `FLOOD` times it while keeping up, each
    refusal costing `refusal_share` of an admitted request (admitted a, refused the rest:
    a + (FLOOD - a) r = 1, in units of the maximum)."""
    return max(0.0, (1 - FLOOD * refusal_share) / (1 - refusal_share))


def bounds(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per connection count: the flood's bound with the gateway's refusals and with nginx's
    answer as the refusal, and h2c / HTTP/1.1 for the produce, measured and at most."""
    us = {(r["server"], r["protocol"], r["connections"]): r["server_us_per_answer"] for r in rows}
    out = []
    for connections in (64, 1024):
        produce = us[("produce", "http/1.1", connections)]
        refusal = us[("refusal", "http/1.1", connections)]
        nginx = us[("nginx", "http/1.1", connections)]
        h2_extra = us[("nginx", "h2c", connections)] - nginx
        out.append(
            {
                "connections": connections,
                "refusal_over_produce": round(refusal / produce, 3),
                "flood_bound_with_refusals": round(flood_bound(refusal / produce), 3),
                "nginx_over_produce": round(nginx / produce, 3),
                "flood_bound_with_nginx": round(flood_bound(nginx / produce), 3),
                "h2c_over_http1_produce": round(produce / us[("produce", "h2c", connections)], 3),
                "nginx_h2c_extra_us": round(h2_extra, 2),
                "h2c_over_http1_bound": round(produce / (produce + h2_extra), 3),
            }
        )
    return out


def markdown(doc: dict[str, Any]) -> str:
    out = [
        "## What an answer costs the server",
        "",
        "| server | protocol | connections | µs of server CPU an answer (median) | rounds | "
        "answers/s | refused |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in doc["cells"]:
        out.append(
            f"| {r['server']} | {r['protocol']} | {r['connections']} | "
            f"{r['server_us_per_answer']} | {', '.join(map(str, r['rounds_us_per_answer']))} | "
            f"{r['answers_per_s']:,.0f} | {r['refused']:,} |"
        )
    out += [
        "",
        f"CPUs: {doc['cpus']}.",
        "",
        "| connections | refusal / produce | flood bound, these refusals | nginx / produce | "
        "flood bound, nginx's answer | h2c / HTTP/1.1 produce | nginx's h2c extra µs | "
        "h2c / HTTP/1.1 bound |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for b in doc["bounds"]:
        out.append(
            f"| {b['connections']} | {b['refusal_over_produce']} | "
            f"{b['flood_bound_with_refusals']} | {b['nginx_over_produce']} | "
            f"{b['flood_bound_with_nginx']} | {b['h2c_over_http1_produce']} | "
            f"{b['nginx_h2c_extra_us']} | {b['h2c_over_http1_bound']} |"
        )
    out += [
        "",
        "| server, open loop | offered/s | connections | µs of server CPU an answer (median) | "
        "rounds | refused | unanswered | p99 ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["open_loop"]:
        out.append(
            f"| {r['server']} | {r['offered_per_s']:,} | {r['connections']} | "
            f"{r['server_us_per_answer']} | {', '.join(map(str, r['rounds_us_per_answer']))} | "
            f"{r['refused']:,} | {r['unanswered']:,} | {r['p99_ms']} |"
        )
    return "\n".join(out) + "\n"


def main() -> None:
    out, doc = ratio_cli.run_rounds(__doc__ or "", "loadtests.answer_floor", 3, 3.0, run)
    ratio_cli.write(out, "answer-floor", doc, markdown(doc))


if __name__ == "__main__":
    main()
