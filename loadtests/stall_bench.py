"""Event-loop stalls with and without tiering, in one run (counts and ratios, not absolutes).

One gateway at a time with `--stall-report-ms 10` (docs/gateway.md, "Loop stalls") on the first
CPU; h2load and a local moto_server on the others. A topic of 4 partitions rolls small segments
(`segment.bytes` 262,144 unless told) under one-record produces from 8 HTTP/1.1 connections;
in the tiering cell the gateway ships every closed segment to moto_server
(`--tiering-interval 1`), in the other it keeps them. Cells alternate over the rounds. Per
cell: the stall reports a minute, how late the loop's timers ran (p50, max), the share of the
stalls the loop thread spent on a CPU (the rest it waited: for the GIL, a lock, a system call
or the core), where the loop thread was (the innermost frame of Sluice's code in each report's
stack), requests/s and segments shipped.

    python -m loadtests.stall_bench [--rounds N] [--seconds S] [--segment-bytes B] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from loadtests import generators, ratio_cli
from loadtests.bench import machine
from loadtests.common import MotoServer, http_json, separate_cpus, start_gateway

STALL_REPORT_MS = 10
PARTITIONS = 4
SEGMENT_BYTES = 262_144
SHIPPED_WAIT_S = 30.0  # after the load, for the tiering cell's first closed segment to ship
# A stop's bound: the gateway's own (controlled shutdown 10 s, then 10 s) and its watchdog's
# report 5 s past it, with room. A gateway still running then is killed and its log's end
# (the watchdog's stacks) printed: the cell's figures were taken before the stop.
STOP_WAIT_S = 45.0
CONNECTIONS = 8
CELLS = ("no tiering", "tiering")
ONE_RECORD = orjson.dumps({"records": [{"value": {"event": "click", "user": 42}}]})
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}
_STALL = re.compile(r"timers ran (\d+) ms late, the loop thread on a CPU for (\d+) ms")
_SLUICE_FRAME = re.compile(
    r'File "[^"]*?/((?:engine|replication|groups|schemas|gateway)/[^"]+)", line (\d+), in (\w+)'
)
# A report's loop-thread stack ends where the busy threads' stacks or the next record begin.
_STACK_END = re.compile(r"^(?:thread |\d{4}-\d\d-\d\d )", re.MULTILINE)


class Stall(NamedTuple):
    late_ms: int  # how late the loop's timers ran
    cpu_ms: int  # how long the loop thread was on a CPU meanwhile
    where: str  # the innermost frame of Sluice's code in the loop thread's stack, or ""


def stalls_in(log: str) -> list[Stall]:
    """Each stall report of a gateway's log."""
    stalls = []
    for found in _STALL.finditer(log):
        end = _STACK_END.search(log, log.find("\n", found.end()) + 1 or len(log))
        frames = _SLUICE_FRAME.findall(log, found.end(), end.start() if end else len(log))
        where = f"{frames[-1][0]}:{frames[-1][1]} {frames[-1][2]}" if frames else ""
        stalls.append(Stall(int(found[1]), int(found[2]), where))
    return stalls


def _counter(url: str, name: str) -> float:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as answer:
        for line in answer.read().decode().splitlines():
            metric, _, value = line.partition(" ")
            if metric == name:
                return float(value)
    return 0.0


def _shipped(url: str, tiering: bool) -> float:
    """Segments the gateway shipped; with tiering, once at least one has (polled)."""
    name = "sluice_tier_segments_uploaded_total"
    deadline = time.monotonic() + SHIPPED_WAIT_S
    while True:
        shipped = _counter(url, name)
        if shipped or not tiering or time.monotonic() > deadline:
            return shipped
        time.sleep(0.2)  # polling the gateway's counter until it moves: no fixed wait


def run_cell(
    cell: str, seconds: float, segment_bytes: int, work: Path, moto: MotoServer, body: Path
) -> dict[str, Any]:
    """One gateway, one h2load run; the stall reports of its log. The tiering cell waits (up to
    SHIPPED_WAIT_S) for a segment to have shipped, so that its figures are tiering's."""
    tiering = cell == "tiering"
    options = ["--stall-report-ms", str(STALL_REPORT_MS)]
    if tiering:
        bucket = moto.new_bucket()
        options += ["--s3-endpoint", moto.url, "--s3-bucket", bucket, "--tiering-interval", "1"]
    log = work / "gateway.log"
    process, url = start_gateway(work / "data", *options, log=log)
    try:
        placement = separate_cpus(process.pid)
        for thread in Path(f"/proc/{moto.process.pid}/task").iterdir():
            os.sched_setaffinity(int(thread.name), os.sched_getaffinity(0))
        configs: dict[str, object] = {
            "segment.bytes": segment_bytes,
            "remote.storage.enable": tiering,
        }
        if tiering:
            configs["local.retention.ms"] = 5_000
        topic = {"name": "s", "partitions": PARTITIONS, "configs": configs}
        http_json("POST", url + "/v1/topics", topic)
        targets = [f"{url}/v1/topics/s/partitions/{p}/records?acks=1" for p in range(PARTITIONS)]
        run = generators.h2load(
            targets,
            seconds=seconds,
            server_pid=process.pid,
            body=body,
            headers={"Content-Type": "application/json"},
            clients=CONNECTIONS,
            threads=1,
            http1=True,
        )
        shipped = _shipped(url, tiering)
    finally:
        process.terminate()
        try:
            process.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            said = log.read_text(errors="replace")[-20_000:]
            print(f"the {cell} cell's gateway did not stop in {STOP_WAIT_S:g} s:\n{said}",
                  file=sys.stderr)  # fmt: skip
    stalls = stalls_in(log.read_text())
    late = sorted(stall.late_ms for stall in stalls)
    return {
        "cell": cell,
        "cpus": placement,
        "seconds": seconds,
        "stalls": len(stalls),
        "stalls_per_minute": round(len(stalls) * 60 / seconds, 1),
        "late_p50_ms": statistics.median(late) if late else 0,
        "late_max_ms": late[-1] if late else 0,
        "loop_on_cpu_share": round(sum(s.cpu_ms for s in stalls) / sum(late), 2) if late else None,
        "where": dict(Counter(stall.where for stall in stalls).most_common()),
        "requests_per_s": run.requests_per_s,
        "failures": run.failures,
        "segments_shipped": int(shipped),
    }


def run(rounds: int, seconds: float, segment_bytes: int, scratch: Path) -> dict[str, Any]:
    """Every cell `rounds` times, alternating, each on a fresh gateway and data directory."""
    os.environ.update(CREDENTIALS)  # moto takes any key; boto3 in the gateway needs one
    body = scratch / "one-record.json"
    body.write_bytes(ONE_RECORD)
    everywhere = os.sched_getaffinity(0)
    moto = MotoServer()
    rows = []
    try:
        for round_ in range(rounds):
            for cell in CELLS:
                work = scratch / f"{round_}-{cell.replace(' ', '-')}"
                work.mkdir()
                os.sched_setaffinity(0, everywhere)  # each cell's gateway is placed anew
                row = run_cell(cell, seconds, segment_bytes, work, moto, body)
                rows.append({"round": round_ + 1, **row})
    finally:
        moto.close()
    return {"rows": rows}


def markdown(doc: dict[str, Any]) -> str:
    out = [
        "## Loop stalls with and without tiering",
        "",
        f"`{doc['meta']['command']}`, {doc['meta']['date']}; stalls of {STALL_REPORT_MS} ms "
        "or more.",
        "",
        "| round | cell | stalls a minute | timers late p50 / max ms | loop on a CPU | "
        "requests/s | segments shipped | where |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in doc["rows"]:
        share = "" if r["loop_on_cpu_share"] is None else f"{r['loop_on_cpu_share']:.0%}"
        where = "; ".join(f"{place or 'no Sluice frame'}: {n}" for place, n in r["where"].items())
        out.append(
            f"| {r['round']} | {r['cell']} | {r['stalls_per_minute']} | {r['late_p50_ms']} / "
            f"{r['late_max_ms']} | {share} | {r['requests_per_s']:,.0f} | {r['segments_shipped']} "
            f"| {where} |"
        )
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=60.0, help="per cell")
    parser.add_argument("--segment-bytes", type=int, default=SEGMENT_BYTES)
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sluice-bench-") as scratch:
        doc = run(args.rounds, args.seconds, args.segment_bytes, Path(scratch))
    doc["meta"] = {
        "command": f"python -m loadtests.stall_bench --rounds {args.rounds} --seconds "
        f"{args.seconds:g} --segment-bytes {args.segment_bytes}",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    ratio_cli.write(args.out, "stall-bench", doc, markdown(doc))


if __name__ == "__main__":
    main()
