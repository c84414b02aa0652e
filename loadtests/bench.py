"""The benchmark harness: Sluice and Redis Streams, side by side, in one run.

Starts a fresh gateway (`python -m gateway --port 0`) and a redis-server (loopback, persistence
off), runs produce, fetch, group-consume, open-loop latency and scaling scenarios on both, and
writes DIR/bench-report.json, DIR/bench-report.md and PNG plots. Compiled generators (wrk,
h2load, redis-benchmark) or several client processes drive the load; every figure carries the
CPU seconds of its generator and of the server. Then the cluster section
(`cluster_bench`): three Sluice nodes against three NATS JetStream servers. Run:
`python -m loadtests.bench [--out DIR] [--quick]`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.request
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from gateway.cli.progress import Progress
from loadtests import cluster_bench, cluster_report, generators, parked, report
from loadtests.common import (
    RedisServer,
    cpu_seconds,
    http_json,
    raise_fd_limit,
    start_gateway,
    stop_on_sigterm,
)
from loadtests.consumers import run_workers
from loadtests.openloop import run_latency
from loadtests.rows import MEDIA, VALUE, body_for, median_cell, rates


@dataclass(frozen=True)
class Plan:
    """How much of each scenario to run."""

    seconds: float  # per cell (wrk's last a whole second at least)
    produce_cells: list[tuple[str, int, str, str]]  # format, batch, acks, protocol
    fetch_records: int
    consume_partitions: int
    consume_records_per_partition: int
    consume_rounds: int  # JSON partition fetch and group consume alternate; medians compared
    latency_seconds: float
    partition_counts: list[int]
    parked_steps: list[int]
    cluster: cluster_bench.ClusterPlan


def _all_produce_cells() -> list[tuple[str, int, str, str]]:
    return [
        (fmt, batch, acks, protocol)
        for protocol in ("http/1.1", "h2c")
        for fmt in ("json", "ndjson", "binary")
        for batch in (1, 100, 1000)
        for acks in ("0", "1", "all")
    ]


FULL = Plan(
    seconds=3,
    produce_cells=_all_produce_cells(),
    fetch_records=200_000,
    consume_partitions=8,
    consume_records_per_partition=250_000,
    consume_rounds=5,
    latency_seconds=10,
    partition_counts=[1, 10, 100, 1000],
    parked_steps=[1, 10, 100, 1000, 5000],
    cluster=cluster_bench.FULL,
)
QUICK = Plan(
    seconds=0.5,  # h2load's and redis-benchmark's cells; wrk's take 1 s
    produce_cells=[
        ("json", 1, "1", "http/1.1"),
        ("json", 100, "1", "http/1.1"),
        ("ndjson", 1000, "all", "http/1.1"),
        ("binary", 1000, "1", "http/1.1"),
        ("json", 100, "0", "h2c"),
        ("binary", 100, "all", "h2c"),
    ],
    fetch_records=20_000,
    consume_partitions=4,
    consume_records_per_partition=10_000,
    consume_rounds=1,
    latency_seconds=0.5,
    partition_counts=[1, 10],
    parked_steps=[1, 100],
    cluster=cluster_bench.QUICK,
)


class Bench:
    """One run: the two servers, the scratch directory and the report being built."""

    def __init__(self, plan: Plan, scratch: Path, progress: Progress) -> None:
        self.plan = plan
        self.scratch = scratch
        self.progress = progress  # scenarios done, and the cell running beside it
        self.gateway, self.url = start_gateway(scratch / "data")
        self.port = int(self.url.rsplit(":", 1)[1])
        self.redis = RedisServer.start(scratch / "redis")
        self.report: dict[str, Any] = {"errors": []}
        self.serial = 0

    def close(self) -> None:
        self.gateway.terminate()
        self.gateway.wait(timeout=60)
        self.redis.stop()

    # -- helpers -------------------------------------------------------------------------

    def topic(self, prefix: str, partitions: int = 1) -> str:
        """A fresh topic, so no figure depends on what an earlier one wrote."""
        self.serial += 1
        name = f"{prefix}-{self.serial}"
        http_json("POST", f"{self.url}/v1/topics", {"name": name, "partitions": partitions})
        return name

    def drop(self, topic: str) -> None:
        http_json("DELETE", f"{self.url}/v1/topics/{topic}", ok=(404,))

    def file(self, name: str, data: bytes) -> Path:
        path = self.scratch / name
        path.write_bytes(data)
        return path

    def prefill(self, topic: str, partition: int, records: int) -> None:
        """Fill a partition with 1000-record NDJSON requests (JSON values)."""
        body = body_for("ndjson", 1000)
        target = f"{self.url}/v1/topics/{topic}/partitions/{partition}/records?acks=1"
        for _ in range(records // 1000):
            request = urllib.request.Request(
                target, data=body, method="POST", headers={"Content-Type": MEDIA["ndjson"]}
            )
            with urllib.request.urlopen(request, timeout=60) as response:
                response.read()

    def warm(self, paths: list[str]) -> None:
        """One record to each partition first, so the figure is the steady state: a partition's
        first append creates its leader-epoch checkpoint, a one-off cost per partition."""
        for target in paths:
            http_json("POST", self.url + target, {"records": [{"value": 0}]})

    def redis_fill(self, stream: str, records: int) -> None:
        generators.redis_benchmark(
            self.redis.port,
            ["XADD", stream, "*", "v", VALUE.decode()],
            requests=records,
            server_pid=self.redis.process.pid,
            pipeline=1000,
            clients=1,
            threads=1,
        )

    def redis_run(
        self, args: list[str], pipeline: int, keyspace: int | None = None, probe: int = 20_000
    ) -> generators.Run:
        """redis-benchmark sized to last about `seconds`: a short calibration run first."""
        pid = self.redis.process.pid
        calibration = generators.redis_benchmark(
            self.redis.port,
            args,
            requests=max(probe, pipeline * 200),
            server_pid=pid,
            pipeline=pipeline,
            keyspace=keyspace,
        )
        requests = max(calibration.requests, int(calibration.requests_per_s * self.plan.seconds))
        return generators.redis_benchmark(
            self.redis.port,
            args,
            requests=requests,
            server_pid=pid,
            pipeline=pipeline,
            keyspace=keyspace,
        )

    def guarded(
        self, scenario: str, what: dict[str, Any], run: Callable[[], dict[str, Any]]
    ) -> dict[str, Any]:
        """Run one cell; a failure becomes an error row in the report, never a figure."""
        self.progress.advance(0, " ".join([scenario, *map(str, what.values())]))
        try:
            row = {**what, **run()}
        except Exception as error:
            row = {**what, "error": f"{type(error).__name__}: {error}"}
            traceback.print_exc(file=sys.stderr)
        if "error" in row:
            self.report["errors"].append({"scenario": scenario, **what, "error": row["error"]})
        print(
            f"[{time.strftime('%H:%M:%S')}] {scenario} {orjson.dumps(row).decode()}",
            file=sys.stderr,
        )
        return row

    # -- scenarios -----------------------------------------------------------------------

    def produce(self) -> None:
        """1. Produce throughput per format, batch size, acks and protocol; Redis XADD pipelines."""
        rows = []
        for fmt, batch, acks, protocol in self.plan.produce_cells:

            def cell(
                fmt: str = fmt, batch: int = batch, acks: str = acks, protocol: str = protocol
            ) -> dict[str, Any]:
                topic = self.topic("produce")
                body = body_for(fmt, batch)
                path = self.file(f"body-{fmt}-{batch}", body)
                target = f"/v1/topics/{topic}/partitions/0/records?acks={acks}"
                headers = {"Content-Type": MEDIA[fmt]}
                try:
                    if protocol == "h2c":
                        run = generators.h2load(
                            [self.url + target],
                            seconds=self.plan.seconds,
                            server_pid=self.gateway.pid,
                            body=path,
                            headers=headers,
                        )
                    else:
                        run = generators.wrk(
                            self.url,
                            [target],
                            seconds=self.plan.seconds,
                            server_pid=self.gateway.pid,
                            method="POST",
                            body=path,
                            headers=headers,
                        )
                finally:
                    self.drop(topic)
                return {
                    "generator": "h2load" if protocol == "h2c" else "wrk",
                    **rates(run, batch, len(body)),
                }

            what = {"format": fmt, "batch": batch, "acks": acks, "protocol": protocol}
            rows.append(self.guarded("produce", what, cell))
        self.report["produce"] = rows
        redis_rows = []
        for batch in sorted({cell[1] for cell in self.plan.produce_cells}):

            def redis_cell(batch: int = batch) -> dict[str, Any]:
                stream = f"produce-{batch}"
                run = self.redis_run(["XADD", stream, "*", "v", VALUE.decode()], batch)
                self.redis.command("DEL", stream)
                return {"generator": "redis-benchmark", **rates(run, 1, len(VALUE))}

            redis_rows.append(self.guarded("redis_produce", {"pipeline": batch}, redis_cell))
        self.report["redis_produce"] = redis_rows

    def fetch(self) -> None:
        """2a. Fetch throughput: 1000 records per request across a prefilled partition."""
        topic = self.topic("fetch")
        self.prefill(topic, 0, self.plan.fetch_records)
        offsets = range(0, self.plan.fetch_records, 1000)
        rows = []
        for fmt in ("json", "binary"):
            for protocol in ("http/1.1", "h2c"):

                def cell(fmt: str = fmt, protocol: str = protocol) -> dict[str, Any]:
                    limit = "max_records=1000" if fmt == "json" else "max_bytes=1"
                    paths = [
                        f"/v1/topics/{topic}/partitions/0/records?offset={o}&{limit}&timeout_ms=0"
                        for o in offsets
                    ]
                    headers = {"Accept": MEDIA[fmt]}
                    per_request, size = self.records_per_fetch(paths[0], headers)
                    if protocol == "h2c":
                        run = generators.h2load(
                            [self.url + p for p in paths],
                            seconds=self.plan.seconds,
                            server_pid=self.gateway.pid,
                            headers=headers,
                        )
                    else:
                        run = generators.wrk(
                            self.url,
                            paths,
                            seconds=self.plan.seconds,
                            server_pid=self.gateway.pid,
                            headers=headers,
                        )
                    return {
                        "generator": "h2load" if protocol == "h2c" else "wrk",
                        **rates(run, per_request, size),
                    }

                rows.append(self.guarded("fetch", {"format": fmt, "protocol": protocol}, cell))
        self.drop(topic)
        self.report["fetch"] = rows

        def redis_cell() -> dict[str, Any]:
            self.redis_fill("fetch", self.plan.fetch_records)
            run = self.redis_run(["XRANGE", "fetch", "-", "+", "COUNT", "1000"], 1, probe=200)
            self.redis.command("DEL", "fetch")
            return {
                "generator": "redis-benchmark",
                "command": "XRANGE - + COUNT 1000",
                **rates(run, 1000, 0),
            }

        self.report["redis_fetch"] = self.guarded("redis_fetch", {}, redis_cell)

    def records_per_fetch(self, path: str, headers: dict[str, str]) -> tuple[int, int]:
        """One probe request: how many records (and bytes) each fetch of this shape returns."""
        request = urllib.request.Request(self.url + path, headers=headers)
        with urllib.request.urlopen(request, timeout=60) as response:
            body = response.read()
            offset = int(path.split("offset=")[1].split("&")[0])
            return int(response.headers["Sluice-Next-Offset"]) - offset, len(body)

    def consume(self) -> None:
        """2b. Group consume against per-partition fetch of the same data; XREAD, XREADGROUP."""
        partitions, each = self.plan.consume_partitions, self.plan.consume_records_per_partition
        total = partitions * each
        topic = self.topic("consume", partitions)
        for partition in range(partitions):
            self.prefill(topic, partition, each)
        halves = [list(range(partitions))[i::2] for i in range(2)]
        rows: dict[str, Any] = {"partitions": partitions, "records": total, "processes": 2}

        def fetch_cell(fmt: str) -> dict[str, Any]:
            params = [
                {
                    "url": self.url,
                    "topic": topic,
                    "accept": MEDIA[fmt],
                    "max_records": 1000,
                    "ranges": [(p, 0, each) for p in half],
                }
                for half in halves
            ]
            return run_workers("sluice_partition_fetch", params, total, self.gateway.pid)

        def group_cell() -> dict[str, Any]:
            self.serial += 1  # a new group each round: it starts from the beginning again
            group = [
                {
                    "url": self.url,
                    "topic": topic,
                    "group": f"bench-{self.serial}",
                    "members": len(half),
                    "max_records": 1000,
                }
                for half in halves
            ]
            return run_workers("sluice_group_consume", group, total, self.gateway.pid)

        # The two figures the group/partition ratio compares alternate over several rounds,
        # so a stretch of host steal or contention does not land on one of them only.
        runs: dict[str, list[dict[str, Any]]] = {"partition_fetch_json": [], "group_consume": []}
        for _ in range(self.plan.consume_rounds):
            runs["partition_fetch_json"].append(
                self.guarded("partition_fetch", {"format": "json"}, lambda: fetch_cell("json"))
            )
            runs["group_consume"].append(
                self.guarded("group_consume", {"members": partitions}, group_cell)
            )
        for name, cells in runs.items():
            rows[name] = median_cell(cells)
        rows["partition_fetch_binary"] = self.guarded(
            "partition_fetch", {"format": "binary"}, lambda: fetch_cell("binary")
        )
        self.drop(topic)
        group_row, fetch_row = rows["group_consume"], rows["partition_fetch_json"]
        if "error" not in group_row and "error" not in fetch_row:
            ratio = group_row["records_per_s"] / fetch_row["records_per_s"]
            rows["group_to_partition_fetch"] = round(ratio, 3)
            rows["group_to_partition_fetch_by_round"] = [
                round(g["records_per_s"] / f["records_per_s"], 3)
                for f, g in zip(runs["partition_fetch_json"], runs["group_consume"], strict=True)
                if "error" not in f and "error" not in g
            ]
        streams = [f"consume:{p}" for p in range(partitions)]
        for stream in streams:
            self.redis_fill(stream, each)
        redis_pid = self.redis.process.pid
        xread = [
            {
                "port": self.redis.port,
                "max_records": 1000,
                "streams": [(streams[p], each) for p in half],
            }
            for half in halves
        ]
        rows["redis_xread"] = self.guarded(
            "redis_xread", {}, lambda: run_workers("redis_xread", xread, total, redis_pid)
        )
        for stream in streams:
            self.redis.command("XGROUP", "CREATE", stream, "bench", "0")
        xreadgroup = [
            {
                "port": self.redis.port,
                "max_records": 1000,
                "group": "bench",
                "streams": streams,
                "consumers": [f"c{p}" for p in half],
            }
            for half in halves
        ]
        rows["redis_xreadgroup"] = self.guarded(
            "redis_xreadgroup",
            {},
            lambda: run_workers("redis_xreadgroup", xreadgroup, total, redis_pid),
        )

        def compiled_group() -> dict[str, Any]:
            """The Python Redis clients cost more per entry than redis-server: this one does not."""
            self.redis.command("XGROUP", "CREATE", streams[0], "compiled", "0")
            run = generators.redis_benchmark(
                self.redis.port,
                [
                    "XREADGROUP",
                    "GROUP",
                    "compiled",
                    "c",
                    "COUNT",
                    "1000",
                    "STREAMS",
                    streams[0],
                    ">",
                ],
                requests=each // 1000,
                server_pid=redis_pid,
            )
            return {"generator": "redis-benchmark", "stream": streams[0], **rates(run, 1000, 0)}

        rows["redis_xreadgroup_compiled"] = self.guarded(
            "redis_xreadgroup_compiled", {}, compiled_group
        )
        self.redis.command("DEL", *streams)
        self.report["consume"] = rows

    def max_single_record_rate(self) -> float:
        """The measured maximum single-record produce rate (JSON, acks=1, HTTP/1.1)."""
        for row in self.report.get("produce", []):
            if (row["format"], row["batch"], row["acks"], row["protocol"]) == (
                "json",
                1,
                "1",
                "http/1.1",
            ) and "error" not in row:
                return float(row["records_per_s"])
        raise RuntimeError("no single-record JSON produce figure to take the latency rates from")

    def latency(self) -> None:
        """3. Open-loop produce -> long-poll latency at 10%, 50% and 90% of the maximum rate."""
        rows = []
        try:
            maximum = self.max_single_record_rate()
        except RuntimeError as error:
            self.report["errors"].append({"scenario": "latency", "error": str(error)})
            self.report["latency"] = [{"error": str(error)}]
            return
        for share in (0.1, 0.5, 0.9):
            rate = max(1, round(maximum * share))
            what = {"share_of_max": share, "rate": rate}

            def sluice_cell(rate: int = rate) -> dict[str, Any]:
                topic = self.topic("latency")
                params = {
                    "system": "sluice",
                    "url": self.url,
                    "port": self.port,
                    "topic": topic,
                    "rate": rate,
                    "seconds": self.plan.latency_seconds,
                }
                try:
                    return run_latency(params, self.gateway.pid)
                finally:
                    self.drop(topic)

            def redis_cell(rate: int = rate) -> dict[str, Any]:
                params = {
                    "system": "redis",
                    "port": self.redis.port,
                    "stream": f"latency-{rate}",
                    "rate": rate,
                    "seconds": self.plan.latency_seconds,
                }
                try:
                    return run_latency(params, self.redis.process.pid)
                finally:
                    self.redis.command("DEL", f"latency-{rate}")

            rows.append(
                {
                    **what,
                    "sluice": self.guarded("latency", {**what, "system": "sluice"}, sluice_cell),
                    "redis": self.guarded("latency", {**what, "system": "redis"}, redis_cell),
                }
            )
        self.report["latency"] = rows
        self.report["latency_max_rate"] = maximum

    def scaling(self) -> None:
        """4. Throughput against partitions; memory per parked long-poll."""
        body = body_for("json", 100)
        path = self.file("body-scaling", body)
        rows = []
        for count in self.plan.partition_counts:

            def sluice_cell(count: int = count) -> dict[str, Any]:
                topic = self.topic("scaling", count)
                paths = [f"/v1/topics/{topic}/partitions/{p}/records?acks=1" for p in range(count)]
                try:
                    self.warm(paths)
                    run = generators.wrk(
                        self.url,
                        paths,
                        seconds=self.plan.seconds,
                        server_pid=self.gateway.pid,
                        method="POST",
                        body=path,
                        headers={"Content-Type": MEDIA["json"]},
                    )
                finally:
                    self.drop(topic)
                return {"generator": "wrk", **rates(run, 100, len(body))}

            def redis_cell(count: int = count) -> dict[str, Any]:
                run = self.redis_run(
                    ["XADD", "scaling:__rand_int__", "*", "v", VALUE.decode()], 100, keyspace=count
                )
                self.redis.command("FLUSHALL")
                return {"generator": "redis-benchmark", **rates(run, 1, len(VALUE))}

            rows.append(
                {
                    "partitions": count,
                    "sluice": self.guarded(
                        "partitions", {"partitions": count, "system": "sluice"}, sluice_cell
                    ),
                    "redis": self.guarded(
                        "partitions", {"partitions": count, "system": "redis"}, redis_cell
                    ),
                }
            )
        self.report["partitions"] = rows
        steps = self.plan.parked_steps

        def sluice_parked() -> dict[str, Any]:
            topic = self.topic("parked")
            try:
                return _with_cpu(
                    self.gateway.pid,
                    lambda: parked.sluice_parked(self.url, topic, self.gateway.pid, steps),
                )
            finally:
                self.drop(topic)

        def redis_parked() -> dict[str, Any]:
            return _with_cpu(
                self.redis.process.pid, lambda: parked.redis_parked(self.redis, "parked", steps)
            )

        self.report["parked"] = {
            "sluice": self.guarded("parked", {"system": "sluice"}, sluice_parked),
            "redis": self.guarded("parked", {"system": "redis"}, redis_parked),
        }

    def cluster(self) -> None:
        """5. Three Sluice nodes against three JetStream servers (after the single node stopped)."""
        self.report["cluster"] = cluster_bench.run(
            self.plan.cluster, self.scratch / "cluster", self.guarded
        )


def _with_cpu(
    server_pid: int, steps: Callable[[], Coroutine[Any, Any, list[dict[str, Any]]]]
) -> dict[str, Any]:
    """Run an in-process generator; its steps with this process's and the server's CPU seconds."""
    server_before, own_before = cpu_seconds(server_pid), time.process_time()
    rows = asyncio.run(steps())
    return {
        "steps": rows,
        "generator_cpu_s": round(time.process_time() - own_before, 2),
        "server_cpu_s": round(cpu_seconds(server_pid) - server_before, 2),
    }


def _tool_version(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=10)
    except OSError:
        return "missing"
    return (
        (done.stdout or done.stderr).strip().splitlines()[0]
        if (done.stdout or done.stderr)
        else "?"
    )


def machine() -> dict[str, Any]:
    model = ""
    for line in subprocess.run(
        ["lscpu"], capture_output=True, text=True, check=False
    ).stdout.splitlines():
        if line.startswith("Model name:"):
            model = line.split(":", 1)[1].strip()
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "tools": {
            "wrk": _tool_version(["wrk", "-v"]),
            "h2load": _tool_version(["h2load", "--version"]),
            "redis-server": _tool_version(["redis-server", "--version"]),
            "etcd": _tool_version(["etcd", "--version"]),
            "nats-server": _tool_version(["nats-server", "--version"]),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path("bench-out"), help="report directory")
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: every scenario, small and short"
    )
    args = parser.parse_args()
    stop_on_sigterm()
    for tool in ("wrk", "h2load", "redis-server", "redis-benchmark"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is needed: apt-get install wrk nghttp2-client redis-server")
    raise_fd_limit()
    args.out.mkdir(parents=True, exist_ok=True)
    plan = QUICK if args.quick else FULL
    started = time.time()
    meta = {
        "command": "python -m loadtests.bench" + (" --quick" if args.quick else ""),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "quick": args.quick,
        "machine": machine(),
        "record_value_bytes": len(VALUE),
        "seconds_per_cell": plan.seconds,
    }
    scratch = Path(tempfile.mkdtemp(prefix="sluice-bench-"))
    names = ["produce", "fetch", "consume", "latency", "scaling", "cluster"]
    progress = Progress("bench", len(names), unit="scenarios")
    bench = Bench(plan, scratch, progress)

    def scenario(name: str) -> None:
        progress.describe(f"scenario {names.index(name) + 1} of {len(names)}: {name}")
        getattr(bench, name)()
        progress.advance()

    try:
        try:
            for name in names[:-1]:
                scenario(name)
        finally:
            bench.close()
        scenario("cluster")  # once the single node has stopped
    finally:
        progress.close()
        shutil.rmtree(scratch, ignore_errors=True)
    meta["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    meta["wall_seconds"] = round(time.time() - started, 1)
    doc = {"meta": meta, **bench.report}
    doc["ratios"] = report.ratios(doc)
    (args.out / "bench-report.json").write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    report.plots(doc, args.out)
    cluster_report.plot(doc["cluster"], args.out / "cluster.png")
    (args.out / "bench-report.md").write_text(
        report.markdown(doc) + cluster_report.markdown(doc["cluster"])
    )
    print(
        f"wrote {args.out}/bench-report.json, bench-report.md and plots in {meta['wall_seconds']} s"
    )


if __name__ == "__main__":
    main()
