"""Moving partitions, measured: `python -m loadtests.reassign_bench [--mb 64] [--out DIR]`.

A fresh cluster of four nodes on this machine (etcd and `sluice serve --cluster` processes, as
`sluice dev-cluster` runs them), three started. Through HTTP only:

1. catch-up: one partition (replication factor 2) whose follower is paused (SIGSTOP) while
   `--mb` MB are produced (acks=1), then resumed: the seconds until its log end reaches the
   leader's. That is the follower catch-up rate a reassignment is compared with.
2. move: the follower's replica moved to a node without a copy, unthrottled: the seconds from
   the plan's 202 until the move completes (bytes copied / seconds), and its ratio to 1.
3. throttled: moved back with the reassignment throttle at `--throttle-mb` MB/s: the rate
   reached against the throttle.
4. produce latency: one client sends acks=all batches to another topic, sequentially, for
   `--steady-s` seconds, then again while the big partition moves unthrottled three times
   (back and forth), then once throttled at a quarter of its unthrottled rate: the p50/p99
   of each, and their ratios to the steady p99.
5. balance: a topic of `--partitions` partitions (replication factor 2, skewed sizes) on the
   three nodes, the fourth started, `POST /v1/cluster/balance`: the seconds until every move
   completed, and each node's replicas, preferred leaders and bytes against the mean.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from engine import batch as fmt
from gateway.workers.local_cluster import LocalCluster, start_together
from loadtests.common import progress

RECORD_BATCH = "application/vnd.sluice.record-batch"
BIG = "big"
LOAD = "load"
WIDE = "wide"
POLL_S = 0.05
SETTLE_S = 600.0


def _batch(records: int, value_bytes: int, seed: int = 0) -> bytes:
    value = bytes((seed + i) % 251 for i in range(value_bytes))
    return bytes(fmt.encode_batch([fmt.RecordInput(None, value, [], None)] * records))


def _wait(probe: Any, what: str, timeout: float = SETTLE_S, poll_s: float = POLL_S) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(poll_s)


class Bench:
    def __init__(self, cluster: LocalCluster, http: httpx.Client) -> None:
        self.cluster = cluster
        self.http = http

    def url(self, node: int) -> str:
        return self.cluster.nodes[node].url

    def describe(self, node: int, topic: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.http.get(f"{self.url(node)}/v1/topics/{topic}").json()[
            "partitions"
        ]
        return rows

    def create(self, topic: str, partitions: int, replicas: int = 2) -> list[dict[str, Any]]:
        answer = self.http.post(
            self.url(0) + "/v1/topics",
            json={"name": topic, "partitions": partitions, "replication_factor": replicas},
        )
        answer.raise_for_status()
        rows: list[dict[str, Any]] = answer.json()["partitions"]
        return rows

    def produce(
        self, topic: str, partition: int, body: bytes, acks: str = "1", node: int = 0
    ) -> None:
        """A produce sent to `node` (one that is not paused)."""
        answer = self.http.post(
            f"{self.url(node)}/v1/topics/{topic}/partitions/{partition}/records?acks={acks}",
            content=body,
            headers={"Content-Type": RECORD_BATCH},
        )
        answer.raise_for_status()

    def fill(self, topic: str, partition: int, mb: int, node: int) -> int:
        """`mb` MB in 1 MB batches (acks=1) sent to `node`; the bytes sent."""
        body = _batch(1000, 1000)
        for _ in range(mb):
            self.produce(topic, partition, body, node=node)
        return mb * len(body)

    def moving(self, topic: str) -> bool:
        """Whether any started node still sees a move of `topic`: the next plan goes to one
        of them, and a view that has not caught up with the move's end refuses it (409)."""
        for node in range(len(self.cluster.nodes)):
            if self.cluster.nodes[node].process is None:
                continue
            doc = self.http.get(self.url(node) + "/v1/cluster/reassignments").json()
            if any(m["topic"] == topic for m in doc["reassignments"]):
                return True
        return False

    def move(self, topic: str, partition: int, replicas: list[int]) -> float:
        """Start a move; the seconds until it completes."""
        plan = {"partitions": [{"topic": topic, "partition": partition, "replicas": replicas}]}
        started = time.monotonic()

        def accepted() -> bool:
            """The plan taken; False while the controller asks to try again (409: a node
            restarted since the ISR was stored, elected past first), raised otherwise."""
            answer = self.http.post(self.url(1) + "/v1/cluster/reassignments", json=plan)
            if answer.status_code == 409:
                progress(f"plan refused for now: {answer.json().get('detail')}")
                return False
            answer.raise_for_status()
            return True

        _wait(accepted, f"the plan for {topic}-{partition} to be taken")
        _wait(lambda: not self.moving(topic), f"the move of {topic}-{partition}")
        return time.monotonic() - started

    def throttle(self, rate: int | None) -> None:
        self.http.put(
            self.url(0) + "/v1/cluster/reassignments/throttle", json={"bytes_per_second": rate}
        ).raise_for_status()


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def _latencies(bench: Bench, stop: threading.Event, out: list[tuple[float, float]]) -> None:
    body = _batch(10, 100)
    with httpx.Client(timeout=30.0) as http:
        while not stop.is_set():
            started = time.monotonic()
            answer = http.post(
                f"{bench.url(0)}/v1/topics/{LOAD}/partitions/0/records?acks=all",
                content=body,
                headers={"Content-Type": RECORD_BATCH},
            )
            if answer.status_code == 200:
                out.append((started, time.monotonic() - started))


def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="sluice-reassign-"))
    options = ("--lease-ttl", "2", "--offsets-topic-partitions", "1")
    cluster = LocalCluster(workdir, 4, node_options=options)
    cluster.etcd.start()
    report: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "mb": args.mb,
    }
    try:
        start_together(cluster.nodes[:3])
        cluster.wait_ready()
        with httpx.Client(timeout=120.0) as http:
            bench = Bench(cluster, http)
            (row,) = bench.create(BIG, 1)
            leader, follower = row["replicas"]
            spare = next(n for n in range(3) if n not in row["replicas"])

            progress(f"catch-up: node {follower} paused, {args.mb} MB produced")
            cluster.nodes[follower].pause()
            size = bench.fill(BIG, 0, args.mb, leader)  # wherever the paused follower is
            end = bench.describe(leader, BIG)[0]["log_end_offset"]
            started = time.monotonic()
            cluster.nodes[follower].resume()
            _wait(
                lambda: bench.describe(follower, BIG)[0]["log_end_offset"] == end,
                "the follower to catch up",
            )
            catch_up_s = time.monotonic() - started
            report["catch_up"] = {"bytes": size, "seconds": catch_up_s, "rate": size / catch_up_s}

            progress(f"move: {BIG}-0 from node {follower} to node {spare}, unthrottled")
            moved_s = bench.move(BIG, 0, [leader, spare])
            report["move"] = {"bytes": size, "seconds": moved_s, "rate": size / moved_s}
            report["move_vs_catch_up"] = (size / moved_s) / (size / catch_up_s)

            rate = int(args.throttle_mb * 1_000_000)
            progress(f"throttled: back to node {follower} at {args.throttle_mb} MB/s")
            bench.throttle(rate)
            throttled_s = bench.move(BIG, 0, [leader, follower])
            bench.throttle(None)
            report["throttled"] = {
                "throttle": rate,
                "bytes": size,
                "seconds": throttled_s,
                "rate": size / throttled_s,
                "vs_throttle": size / throttled_s / rate,
            }

            progress(f"produce latency: {args.steady_s:.0f} s steady, then during a move")
            bench.create(LOAD, 1)
            samples: list[tuple[float, float]] = []
            stop = threading.Event()
            client = threading.Thread(target=_latencies, args=(bench, stop, samples))
            client.start()
            time.sleep(args.steady_s)  # the steady window, measured by the client thread
            steady_end = time.monotonic()
            move_s = 0.0
            for target in (spare, follower, spare):  # back and forth: a longer window
                move_s += bench.move(BIG, 0, [leader, target])
            move_end = time.monotonic()
            # the same under a throttle of a quarter of the unthrottled rate
            limit = int(size / moved_s / 4)
            bench.throttle(limit)
            limited_s = bench.move(BIG, 0, [leader, follower])
            limited_end = time.monotonic()
            bench.throttle(None)
            stop.set()
            client.join()
            steady = [s for at, s in samples if at < steady_end]
            during = [s for at, s in samples if steady_end <= at < move_end]
            limited = [s for at, s in samples if move_end <= at < limited_end]
            report["latency"] = {
                "steady": {
                    "requests": len(steady),
                    "p50_ms": 1000 * _percentile(steady, 0.5),
                    "p99_ms": 1000 * _percentile(steady, 0.99),
                },
                "during_move": {
                    "requests": len(during),
                    "seconds": move_s,
                    "p50_ms": 1000 * _percentile(during, 0.5),
                    "p99_ms": 1000 * _percentile(during, 0.99),
                },
            }
            report["latency"]["during_throttled_move"] = {
                "throttle": limit,
                "requests": len(limited),
                "seconds": limited_s,
                "p50_ms": 1000 * _percentile(limited, 0.5),
                "p99_ms": 1000 * _percentile(limited, 0.99),
            }
            steady_p99 = max(report["latency"]["steady"]["p99_ms"], 1e-9)
            report["latency"]["p99_ratio"] = report["latency"]["during_move"]["p99_ms"] / steady_p99
            report["latency"]["p99_ratio_throttled"] = (
                report["latency"]["during_throttled_move"]["p99_ms"] / steady_p99
            )

            for topic in (BIG, LOAD):  # the balance is measured on the wide topic alone
                http.delete(f"{bench.url(0)}/v1/topics/{topic}").raise_for_status()
            report["balance"] = _balance(bench, args.partitions)
    finally:
        cluster.stop()
    return report


def _balance(bench: Bench, partitions: int) -> dict[str, Any]:
    progress(f"balance: {partitions} partitions on 3 nodes, then a 4th")
    bench.create(WIDE, partitions)
    for p in range(partitions):
        records = 1 + (p * 7919) % 50  # skewed sizes: 1 to 50 kB
        bench.produce(WIDE, p, _batch(records, 1000, p))
    bench.cluster.nodes[3].start()
    bench.cluster.wait_ready()
    started = time.monotonic()
    answer = bench.http.post(bench.url(0) + "/v1/cluster/balance")
    answer.raise_for_status()
    plan = answer.json()
    _wait(lambda: not bench.moving(WIDE), "the balance to complete", poll_s=0.25)
    seconds = time.monotonic() - started
    rows = bench.describe(0, WIDE)
    sizes = plan["nodes"]
    counts = {n: 0 for n in range(4)}
    leaders = {n: 0 for n in range(4)}
    for row in rows:
        for r in row["replicas"]:
            counts[r] += 1
        leaders[row["replicas"][0]] += 1

    def spread(figures: dict[int, int]) -> list[float]:
        mean = sum(figures.values()) / len(figures)
        return [min(figures.values()) / mean, max(figures.values()) / mean]

    return {
        "partitions": partitions,
        "seconds": seconds,
        "moves": len(plan["moves"]),
        "bytes_to_move": plan["bytes_to_move"],
        "goal_met": plan["goal_met"],
        "replicas": counts,
        "replicas_spread": spread(counts),
        "leaders": leaders,
        "leaders_spread": spread(leaders),
        "planned_bytes_spread": plan["after"]["bytes"],
        "planned_nodes": sizes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=256, help="the moved partition's size")
    parser.add_argument("--throttle-mb", type=float, default=4.0, help="MB/s of the throttled move")
    parser.add_argument("--steady-s", type=float, default=10.0)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    report = run(args)
    text = orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "reassign-report.json").write_text(text + "\n")


if __name__ == "__main__":
    main()
