"""`sluice serve --workers 1` against `--workers 2` in one run: what more processes
behind one port buy on this machine.

Both servers run at once with the same topic (4 partitions) and take turns under the same load
from h2load (compiled, from nghttp2-client, HTTP/1.1, pinned to the last CPU; the servers are
not pinned), over several rounds whose median is reported: binary produce
and JSON fetch of 1000 records a request, a one-record JSON produce left to the sticky
partitioner, and a one-record produce naming the partition (under workers, half of these cross
to the other worker). For each: records/s, the CPU of every process of the server (workers,
supervisor, etcd) and of the generator, the --workers 2 / --workers 1 ratio, and the CPU cost
per million records of the server and of each worker, which is what extends to N cores.
Run: `python -m loadtests.workers_bench [--quick] [--out DIR]`.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from engine.batch import RecordInput, encode_batch
from loadtests import generators, report
from loadtests.common import cpu_seconds, http_json, raise_fd_limit, start_gateway

TOPIC = "bench"
PARTITIONS = 4
BATCH = 1000  # records per request of the batch scenarios
VALUE = "x" * 88  # with JSON quoting and a short key, ~100 bytes per record
PREFILL_REQUESTS = 3  # 1000-record JSON produces per partition before the fetch scenario


ALL_CPUS = sorted(os.sched_getaffinity(0))


@dataclass(frozen=True)
class Plan:
    seconds: float  # each measured cell
    warm_seconds: float  # a run before each cell, not measured
    clients: int
    rounds: int  # each scenario against each server, this many times


FULL = Plan(seconds=5.0, warm_seconds=1.0, clients=16, rounds=4)
QUICK = Plan(seconds=0.5, warm_seconds=0.0, clients=8, rounds=1)


@dataclass(frozen=True)
class Scenario:
    name: str
    records_per_request: int
    paths: list[str]
    method: str
    body: Path | None
    media: str | None


def scenarios(scratch: Path) -> list[Scenario]:
    binary = scratch / "batch.bin"
    binary.write_bytes(
        bytes(encode_batch([RecordInput(None, orjson.dumps(VALUE)) for _ in range(BATCH)]))
    )
    single = scratch / "single.json"
    single.write_bytes(orjson.dumps({"records": [{"value": VALUE}]}))
    records = f"/v1/topics/{TOPIC}/records"
    partitions = [f"/v1/topics/{TOPIC}/partitions/{p}/records" for p in range(PARTITIONS)]
    return [
        Scenario(
            "produce_binary_1000", BATCH, [records + "?acks=1"], "POST", binary,
            "application/vnd.sluice.record-batch",
        ),
        Scenario(
            "fetch_json_1000", BATCH,
            [f"{path}?offset=0&max_records={BATCH}&timeout_ms=0" for path in partitions],
            "GET", None, None,
        ),
        Scenario(
            "produce_one_record", 1, [records + "?acks=1"], "POST", single, "application/json"
        ),
        Scenario(
            "produce_one_record_to_partition", 1, [p + "?acks=1" for p in partitions], "POST",
            single, "application/json",
        ),
    ]  # fmt: skip


def process_tree(pid: int) -> dict[int, str]:
    """pid -> command line of the process and everything under it."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int(
                    (entry / "stat").read_text().rsplit(")", 1)[1].split()[1]
                )
            except OSError:
                continue
    tree, todo = {}, [pid]
    while todo:
        current = todo.pop()
        try:
            tree[current] = (Path(f"/proc/{current}/cmdline").read_bytes()).decode()
        except OSError:
            continue
        todo.extend(child for child, parent in parents.items() if parent == current)
    return tree


def worker_pids(pid: int, workers: int) -> dict[int, int]:
    """Worker index -> pid (the server itself when it is one process)."""
    if workers == 1:
        return {0: pid}
    found = {}
    for child, command in process_tree(pid).items():
        args = command.split("\0")
        if "--supervised" in args:
            found[int(args[args.index("--node-id") + 1])] = child
    return found


def busy_cpu_seconds() -> float:
    """CPU time every process of the machine has spent (/proc/stat: all but idle and iowait),
    so that a cell can say how much went to processes other than the server and h2load."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def pin_generators() -> str:
    """The load generators (children of this process) on the last CPU; says what it did."""
    os.sched_setaffinity(0, {ALL_CPUS[-1]})
    return f"h2load on CPU {ALL_CPUS[-1]} of {len(ALL_CPUS)}; the server's processes unpinned"


def measure(url: str, pid: int, workers: int, scenario: Scenario, plan: Plan) -> dict[str, Any]:
    """One cell: a warm-up run, then the measured run, with every worker's CPU over it."""
    headers = {} if scenario.media is None else {"Content-Type": scenario.media}
    urls = [url + path for path in scenario.paths]
    if plan.warm_seconds:
        generators.h2load(
            urls, seconds=plan.warm_seconds, server_pid=pid, body=scenario.body,
            headers=headers, clients=plan.clients, threads=1, http1=True,
        )  # fmt: skip
    pids = worker_pids(pid, workers)
    before = {index: cpu_seconds(worker) for index, worker in pids.items()}
    machine_before = busy_cpu_seconds()
    run = generators.h2load(
        urls, seconds=plan.seconds, server_pid=pid, body=scenario.body, headers=headers,
        clients=plan.clients, threads=1, http1=True,
    )  # fmt: skip
    spent = {index: cpu_seconds(worker) - before[index] for index, worker in pids.items()}
    others = busy_cpu_seconds() - machine_before - run.server_cpu_s - run.generator_cpu_s
    records = run.requests * scenario.records_per_request
    per_million = 1e6 / records if records else 0.0
    return {
        "requests_per_s": round(run.requests_per_s),
        "records_per_s": round(records / run.seconds) if run.seconds else 0,
        "seconds": round(run.seconds, 2),
        "failures": run.failures,
        "server_cpu_s": run.server_cpu_s,
        "generator_cpu_s": run.generator_cpu_s,
        "other_processes_cpu_s": round(max(others, 0.0), 2),
        "server_cores_busy": round(run.server_cpu_s / run.seconds, 2) if run.seconds else 0.0,
        "server_cpu_s_per_million_records": round(run.server_cpu_s * per_million, 2),
        "workers": [
            {
                "worker": index,
                "cpu_s": round(spent[index], 2),
                "cpu_s_per_million_records": round(spent[index] * per_million, 2),
            }
            for index in sorted(spent)
        ],
    }


def start(workers: int, scratch: Path) -> tuple[subprocess.Popen[str], str]:
    """`--workers N` on every CPU, with the topic and the records the fetches read."""
    os.sched_setaffinity(0, set(ALL_CPUS))  # the server may use every CPU
    process, url = start_gateway(scratch / f"data-{workers}", "--workers", str(workers))
    http_json("POST", f"{url}/v1/topics", {"name": TOPIC, "partitions": PARTITIONS})
    body = {"records": [{"key": f"k{i:04d}", "value": VALUE} for i in range(BATCH)]}
    for partition in range(PARTITIONS):
        for _ in range(PREFILL_REQUESTS):
            http_json("POST", f"{url}/v1/topics/{TOPIC}/partitions/{partition}/records", body)
    return process, url


def run(scratch: Path, plan: Plan) -> tuple[list[dict[str, Any]], str]:
    """Both servers up at once; every round runs each scenario against one then the other
    (the order alternating), so that a change in the machine's load hits both alike."""
    servers = {}
    try:
        with ThreadPoolExecutor(2) as pool:  # both start at once: each waits on its own imports
            starting = {workers: pool.submit(start, workers, scratch) for workers in (1, 2)}
        for workers, future in starting.items():
            if future.exception() is None:
                servers[workers] = future.result()
        for future in starting.values():
            future.result()  # a failure raised once every server that started is stopped below
        placement = pin_generators()
        rounds = []
        for number in range(plan.rounds):
            cells: dict[str, Any] = {}
            for scenario in scenarios(scratch):
                row: dict[str, Any] = {}
                for workers in (1, 2) if number % 2 == 0 else (2, 1):
                    process, url = servers[workers]
                    row[str(workers)] = measure(url, process.pid, workers, scenario, plan)
                    os.sync()  # the next cell does not pay for this one's writeback
                base = row["1"]["records_per_s"]
                row["ratio"] = round(row["2"]["records_per_s"] / base, 2) if base else 0.0
                cells[scenario.name] = row
            rounds.append(cells)
    finally:
        os.sched_setaffinity(0, set(ALL_CPUS))
        for process, _ in servers.values():
            process.send_signal(signal.SIGTERM)
        for process, _ in servers.values():
            process.wait(timeout=120)
    return rounds, placement


def summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per scenario: the median ratio of the rounds (as many with either server first, since
    the one measured second runs on the first one's writeback), the round closest to it, and
    every round's ratio."""
    out = {}
    for name in rounds[0]:
        ratios = [float(cells[name]["ratio"]) for cells in rounds]
        median = statistics.median(ratios)
        closest = min(rounds, key=lambda cells: abs(float(cells[name]["ratio"]) - median))
        out[name] = {**closest[name], "ratio": round(median, 2), "round_ratios": ratios}
    return out


def markdown(doc: dict[str, Any]) -> str:
    rows = [
        "| scenario | workers | records/s | server CPU s | server cores busy | generator CPU s "
        "| server CPU s / M records | per worker CPU s / M records | other processes' CPU s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in doc["scenarios"].items():
        for workers in ("1", "2"):
            cell = row[workers]
            each = ", ".join(f"{w['cpu_s_per_million_records']}" for w in cell["workers"])
            rows.append(
                f"| {name} | {workers} | {cell['records_per_s']:,} | {cell['server_cpu_s']} | "
                f"{cell['server_cores_busy']} | {cell['generator_cpu_s']} | "
                f"{cell['server_cpu_s_per_million_records']} | {each} | "
                f"{cell['other_processes_cpu_s']} |"
            )
        rounds = ", ".join(map(str, row["round_ratios"]))
        rows.append(f"| {name} | **2 / 1** | **{row['ratio']}** (rounds: {rounds}) | | | | | | |")
    return "\n".join(rows) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short cells, no warm-up")
    parser.add_argument("--out", type=Path, help="also write workers-report.json and .md here")
    args = parser.parse_args()
    for tool, package in (("h2load", "nghttp2-client"), ("etcd", "etcd-server")):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is needed: apt-get install {package}")
    raise_fd_limit()
    plan = QUICK if args.quick else FULL
    scratch = Path(tempfile.mkdtemp(prefix="sluice-workers-"))
    meta: dict[str, Any] = {
        "command": "python -m loadtests.workers_bench" + (" --quick" if args.quick else ""),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "quick": args.quick,
        "machine": f"{platform.processor() or platform.machine()}, "
        f"{len(os.sched_getaffinity(0))} usable CPUs, kernel {platform.release()}",
        "load_average_before": [round(x, 2) for x in os.getloadavg()],
        "protocol": "HTTP/1.1",
        "clients": plan.clients,
        "seconds_per_cell": plan.seconds,
        "rounds": plan.rounds,
        "topic_partitions": PARTITIONS,
    }
    try:
        rounds, placement = run(scratch, plan)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    meta["placement"] = placement
    meta["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    doc: dict[str, Any] = {"meta": meta, "scenarios": summary(rounds), "rounds": rounds}
    text = markdown(doc)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "workers-report.json").write_bytes(
            orjson.dumps(doc, option=orjson.OPT_INDENT_2)
        )
        (args.out / "workers-report.md").write_text(text)
        targets = [
            {"figure": f"{name}: --workers 2 / 1", "value": cell["ratio"], "target": 1.6}
            for name, cell in doc["scenarios"].items()
        ]
        report.plot_ratios(targets, "Workers", args.out / "workers.png")
    print(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())
    print(text)


if __name__ == "__main__":
    main()
