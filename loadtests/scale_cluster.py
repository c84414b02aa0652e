"""Scale of a 3-node cluster in partitions: `python -m loadtests.scale_bench --cluster`.

For each partition count, a fresh cluster (etcd and three nodes on this machine, as `sluice
dev-cluster` runs them) and one topic of that many partitions with replication factor 3:

- create: the seconds to the topic's 201, and until every partition has a leader and a full ISR;
- idle: each node's CPU (% of one core) and RSS over a quiet window, before and after, and
  etcd's CPU beside them (not in the nodes' sum);
- produce: keyed records in binary batches over all the partitions (acks=all, through every
  node; KEYS_PER_PARTITION distinct keys a partition, so that every one gets records),
  against the same through a topic of 10 partitions, in alternating rounds;
- restart: a node stopped (SIGTERM) and started again: the seconds until every ISR is full,
  and until it leads its preferred partitions again (the controller's rebalance, every 30 s;
  every 2 s in the quick run);
- failover: the node leading the most partitions (not the controller) killed (SIGKILL): the
  seconds until another node leads every one of them (its lease, 2 s, expires first), but
  those whose ISR held only that node (offline, as they should be: counted).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from engine import batch as fmt
from gateway.workers.local_cluster import LocalCluster
from loadtests.common import cpu_seconds, http_json, progress, rss_bytes

RECORD_BATCH = "application/vnd.sluice.record-batch"
TOPIC = "wide"
NARROW = "narrow"
NARROW_PARTITIONS = 10
POLL_S = 0.25  # a description of thousands of partitions costs the node asked: not too often
POLL_SHARE = 5  # and a poll waits five times what the last took: the node asked busy <= 1/6
REFUSED_PAUSE_S = 0.1
_MOVE = re.compile(r": leader -?\d+ -> -?\d+ in epoch")  # the controller's election lines
_LEASE_LOST = re.compile(r"lost its etcd lease")


@dataclass(frozen=True)
class ClusterSizes:
    partitions: tuple[int, ...]  # one cluster per count
    idle_s: float  # the quiet window CPU is measured over
    produce_s: float  # per produce cell
    rounds: int  # produce cells alternate wide/narrow this many times
    records_per_request: int
    value_bytes: int
    connections: int
    deadline_s: float  # for the topic to be ready, an ISR to fill, a failover to end
    # the nodes' --leader-imbalance-check-interval-ms (None: their default, 30 s): the restart
    # waits for it to lead its preferred partitions again
    rebalance_ms: int | None = None


KEYS_PER_PARTITION = 5  # distinct keys a partition: all but e^-5 (0.7%) of them get records
CLUSTER_FULL = ClusterSizes((1_000, 10_000), 30.0, 10.0, 3, 1_000, 100, 6, 600.0)
CLUSTER_QUICK = ClusterSizes((12,), 0.5, 0.5, 1, 20, 10, 2, 120.0, rebalance_ms=2_000)


def _mib(n: int) -> float:
    return round(n / 2**20, 1)


def _partitions(url: str, topic: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = http_json("GET", f"{url}/v1/topics/{topic}")["partitions"]
    return rows


def _wait(what: str, condition: Callable[[], bool], deadline_s: float) -> float:
    """Seconds until `condition()` holds (polled), or RuntimeError after `deadline_s`. Polls
    every POLL_S, or POLL_SHARE times as long as the last poll took, whichever is longer, so
    that asking (a description of 10,000 partitions is 1.6 MB) keeps the node asked busy a
    small share of the time."""
    started = time.perf_counter()
    while True:
        asked = time.perf_counter()
        if condition():
            return round(time.perf_counter() - started, 2)
        took = time.perf_counter() - asked
        if time.perf_counter() - started > deadline_s:
            raise RuntimeError(f"{what}: not within {deadline_s} s")
        time.sleep(max(POLL_S, POLL_SHARE * took))


def _all_full(url: str, topic: str, count: int | None, nodes: int = 3) -> Callable[[], bool]:
    """Whether the topic has `count` partitions (any, if None), each led with a full ISR."""

    def full() -> bool:
        try:
            rows = _partitions(url, topic)
        except (RuntimeError, OSError):
            return False
        return (count is None or len(rows) == count) and all(
            r["leader"] is not None and len(r["isr"]) == nodes for r in rows
        )

    return full


def logged(cluster: LocalCluster, pattern: re.Pattern[str]) -> int:
    """The lines of every node's log that match `pattern` so far."""
    found = 0
    for node in cluster.nodes:
        log = node.data_dir.parent / f"node-{node.node_id}.log"
        if log.exists():
            found += sum(1 for line in log.open(errors="replace") if pattern.search(line))
    return found


def create(cluster: LocalCluster, topic: str, partitions: int, deadline_s: float) -> float:
    """Create the topic through any node, again while the cluster answers that it is busy
    electing (421 or 503: a lease lost on a loaded machine); the seconds it took."""
    started = time.perf_counter()
    for attempt in itertools.count():
        url = cluster.nodes[attempt % len(cluster.nodes)].url
        try:
            http_json("POST", f"{url}/v1/topics", {"name": topic, "partitions": partitions})
            return round(time.perf_counter() - started, 2)
        except RuntimeError as exc:
            if "already exists" in str(exc):
                return round(time.perf_counter() - started, 2)
            if not any(f"-> {s} " in str(exc) for s in (421, 503)):
                raise
            if time.perf_counter() - started > deadline_s:
                raise
            time.sleep(POLL_S)
    raise AssertionError("unreachable")


def idle(cluster: LocalCluster, seconds: float) -> dict[str, Any]:
    """Each node's CPU over `seconds` doing nothing (% of one core), and its RSS after; etcd's
    CPU over the same window apart (the nodes' lease keepalives and watches cost it too)."""
    pids = {n.node_id: n.process.pid for n in cluster.nodes if n.process is not None}
    etcd = cluster.etcd.process
    before = {i: cpu_seconds(pid) for i, pid in pids.items()}
    etcd_before = None if etcd is None else cpu_seconds(etcd.pid)
    started = time.perf_counter()
    time.sleep(seconds)
    elapsed = time.perf_counter() - started
    cpu = {i: round(100 * (cpu_seconds(pid) - before[i]) / elapsed, 1) for i, pid in pids.items()}
    etcd_cpu = None
    if etcd is not None and etcd_before is not None:
        etcd_cpu = round(100 * (cpu_seconds(etcd.pid) - etcd_before) / elapsed, 1)
    return {
        "cpu_pct_per_node": cpu,
        "cpu_pct_cluster": round(sum(cpu.values()), 1),
        "cpu_pct_etcd": etcd_cpu,
        "rss_mib_per_node": {i: _mib(rss_bytes(pid)) for i, pid in pids.items()},
    }


def _keyed_bodies(sizes: ClusterSizes, partitions: int) -> list[bytes]:
    """Binary batches of keyed records, KEYS_PER_PARTITION distinct keys a partition (at least
    8 bodies): with 8,000 keys, 10,000 partitions had only about 55% of them written."""
    count = max(8, -(-KEYS_PER_PARTITION * partitions // sizes.records_per_request))
    value = os.urandom(sizes.value_bytes // 2).hex().encode()
    keys = itertools.count()
    return [
        bytes(
            fmt.encode_batch(
                [
                    fmt.RecordInput(b"key-%d" % next(keys), value)
                    for _ in range(sizes.records_per_request)
                ]
            )
        )
        for _ in range(count)
    ]


async def _produce(
    urls: list[str], topic: str, bodies: list[bytes], sizes: ClusterSizes
) -> tuple[float, dict[str, int]]:
    """Records/s acknowledged (acks=all) over `sizes.produce_s`, connections spread over nodes,
    and the refusals by code (each retried after a pause, its records not counted)."""
    headers = {"Content-Type": RECORD_BATCH}
    acked = 0
    refused: dict[str, int] = {}
    deadline = time.perf_counter() + sizes.produce_s
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def worker(n: int) -> None:
            nonlocal acked
            target = f"{urls[n % len(urls)]}/v1/topics/{topic}/records?acks=all"
            for i in itertools.count(n):
                if time.perf_counter() >= deadline:
                    return
                async with session.post(target, data=bodies[i % len(bodies)], headers=headers) as r:
                    body = await r.read()
                    if r.status == 200:
                        acked += sizes.records_per_request
                        continue
                    if r.status < 500:
                        raise RuntimeError(f"produce -> {r.status}: {body[:500]!r}")
                    code = f"{r.status} {orjson.loads(body).get('code', '')}"
                refused[code] = refused.get(code, 0) + 1
                await asyncio.sleep(REFUSED_PAUSE_S)

        started = time.perf_counter()
        await asyncio.gather(*(worker(n) for n in range(sizes.connections)))
        return acked / (time.perf_counter() - started), refused


def produce(cluster: LocalCluster, sizes: ClusterSizes, partitions: int) -> dict[str, Any]:
    urls = [n.url for n in cluster.nodes]
    bodies = _keyed_bodies(sizes, partitions)
    rates: dict[str, list[float]] = {TOPIC: [], NARROW: []}
    refused: dict[str, dict[str, int]] = {TOPIC: {}, NARROW: {}}
    for _ in range(sizes.rounds):
        for topic in (TOPIC, NARROW):
            rate, codes = asyncio.run(_produce(urls, topic, bodies, sizes))
            rates[topic].append(rate)
            for code, times in codes.items():
                refused[topic][code] = refused[topic].get(code, 0) + times
    w, n = (sorted(rates[t])[len(rates[t]) // 2] for t in (TOPIC, NARROW))
    return {
        "wide_records_s": round(w),
        "narrow_records_s": round(n),
        "ratio": round(w / n, 2) if n else None,
        "rounds_wide": [round(x) for x in rates[TOPIC]],
        "rounds_narrow": [round(x) for x in rates[NARROW]],
        "refused_wide": refused[TOPIC],
        "refused_narrow": refused[NARROW],
    }


def restart(cluster: LocalCluster, count: int, deadline_s: float) -> dict[str, Any]:
    """Stop the last node, wait until the cluster took it out of every ISR, start it again:
    seconds until every ISR is full once more."""
    node = cluster.nodes[-1]
    other = cluster.nodes[0].url
    node.stop()

    def left() -> bool:
        return all(node.node_id not in r["isr"] for r in _partitions(other, TOPIC))

    out_s = _wait("the stopped node leaves every ISR", left, deadline_s)
    started = time.perf_counter()
    node.start()
    cluster.wait_ready()
    back = _wait("every ISR full again", _all_full(other, TOPIC, count), deadline_s)
    full_s = round(time.perf_counter() - started, 2)

    def balanced() -> bool:
        return all(r["leader"] == r["replicas"][0] for r in _partitions(other, TOPIC))

    _wait("every partition led by its preferred replica", balanced, deadline_s)
    return {
        "node": node.node_id,
        "left_isr_s": out_s,
        "isr_full_s": full_s,
        "after_start_s": back,
        "balanced_s": round(time.perf_counter() - started, 2),
    }


def failover(cluster: LocalCluster, deadline_s: float) -> dict[str, Any]:
    """SIGKILL the non-controller node leading the most partitions; seconds until every one of
    them has a live leader again."""
    controller = http_json("GET", f"{cluster.nodes[0].url}/v1/cluster")["controller"]
    rows = _partitions(cluster.nodes[0].url, TOPIC)
    led = {n.node_id: sum(1 for r in rows if r["leader"] == n.node_id) for n in cluster.nodes}
    victim = max((i for i in led if i != controller), key=lambda i: led[i])
    witness = next(n for n in cluster.nodes if n.node_id != victim).url
    cluster.nodes[victim].kill()
    started = time.perf_counter()

    stranded: list[int] = []  # partitions whose ISR held only the victim: offline, rightly

    def moved() -> bool:
        try:
            now = _partitions(witness, TOPIC)
        except (RuntimeError, OSError):
            return False
        stranded[:] = [r["partition"] for r in now if r["leader"] is None and r["isr"] == [victim]]
        return all(r["leader"] not in (None, victim) or r["isr"] == [victim] for r in now)

    _wait("every partition led again", moved, deadline_s)
    return {
        "node": victim,
        "led": led[victim],
        "controller": controller,
        "all_led_again_s": round(time.perf_counter() - started, 2),
        "offline_no_isr_left": len(stranded),
    }


def one_count(work: Path, count: int, sizes: ClusterSizes) -> dict[str, Any]:
    progress(f"cluster with {count} partitions")
    options: list[str] = []
    if sizes.rebalance_ms is not None:
        options = ["--leader-imbalance-check-interval-ms", str(sizes.rebalance_ms)]
    cluster = LocalCluster(work / f"cluster-{count}", 3, node_options=options)
    cluster.start()
    try:
        url = cluster.nodes[0].url
        _wait(
            "__consumer_offsets ready",
            _all_full(url, "__consumer_offsets", None),
            sizes.deadline_s,
        )
        base = idle(cluster, sizes.idle_s)
        progress(f"creating {count} partitions")
        created_s = create(cluster, TOPIC, count, sizes.deadline_s)
        ready = _wait("every partition led with a full ISR", _all_full(url, TOPIC, count), 900)
        create(cluster, NARROW, NARROW_PARTITIONS, sizes.deadline_s)
        _wait("the narrow topic", _all_full(url, NARROW, NARROW_PARTITIONS), sizes.deadline_s)
        progress("idle")
        quiet = idle(cluster, sizes.idle_s)
        progress("produce")
        moves = logged(cluster, _MOVE)
        produced = produce(cluster, sizes, count)
        produced["leader_moves"] = logged(cluster, _MOVE) - moves
        progress("restart")
        restarted = restart(cluster, count, sizes.deadline_s)
        quiet_after = idle(cluster, sizes.idle_s)
        progress("failover")
        failed_over = failover(cluster, sizes.deadline_s)
        return {
            "partitions": count,
            "idle_before_topic": base,
            "create_s": created_s,
            "ready_s": round(created_s + ready, 2),
            "idle": quiet,
            "produce": produced,
            "restart": restarted,
            "idle_after_produce_and_restart": quiet_after,
            "failover": failed_over,
            "leases_lost": logged(cluster, _LEASE_LOST),  # a loaded machine's etcd, too slow
        }
    finally:
        cluster.stop()


def run_cluster(
    sizes: ClusterSizes, work: Path, done: Callable[[dict[str, Any]], object]
) -> dict[str, Any]:
    """Every count's figures; `done` sees the report so far after each count (a long run that
    fails late keeps what it measured)."""
    report: dict[str, Any] = {"sizes": asdict(sizes), "cluster": []}
    for n in sizes.partitions:
        report["cluster"].append(one_count(work, n, sizes))
        done(report)
    return report
