"""The cluster section: three Sluice nodes and three JetStream servers on this machine.

Sluice: `LocalCluster` (etcd and three `python -m gateway --cluster` processes), a topic with
replication factor 3 and `min.insync.replicas=2`. Produce with acks=1 against acks=all (every
partition driven at its leader), through a non-leader against through the leader, consume,
and the time from a SIGKILL of a partition's leader to the first acknowledged acks=all produce
through another node, and how long after an acks=all produce's answer a consumer naming a
follower's rack (`client_rack`, KIP-392) reads the records there, beside one at the leader.
JetStream: three `nats-server` on loopback, a stream with three replicas,
publishing the same 100-byte values with acks, pulling them, and the same failover. Every row
carries the CPU seconds of every server process and of the load generator.

`python -m loadtests.cluster_bench [--rounds N] [--out FILE]` runs the follower-read cell
alone, on a cluster of its own (the whole section runs in `python -m loadtests.bench`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import orjson

from gateway.workers.local_cluster import LocalCluster
from loadtests import cluster_report, generators, jetstream
from loadtests.common import children_cpu_seconds, cpu_seconds, http_json
from loadtests.consumers import run_workers
from loadtests.failover import Refused, first_ack, nearest_rank, summarize
from loadtests.rows import MEDIA, VALUE, body_for, median_cell, rates

NODES = 3
PARTITIONS = 3
MIN_INSYNC = 2
CONNECTIONS = 8  # as the single-node produce cells: 8 connections, one request in flight each
FORMATS = [("binary", 1000), ("json", 100)]
ROUTING_ACKS = "1"  # no replication wait to hide the extra hop
PUBLISHERS = 2  # JetStream publishing processes (nats-py costs more per message than wrk)
SETTLE_DEADLINE_S = 60.0
RACKS = ("a", "b", "c")  # node i's rack: a consumer of a follower's rack reads there (KIP-392)
READ_WAIT_MS = 10_000  # the follower-read consumers' long-poll: past a follower's 5 s fetch wait
READ_PAUSE_S = 0.2  # between follower-read rounds: every fetch of the cluster parks again

T = TypeVar("T")
Guard = Callable[[str, dict[str, Any], Callable[[], dict[str, Any]]], dict[str, Any]]


@dataclass(frozen=True)
class ClusterPlan:
    """How much of the cluster section to run."""

    seconds: float  # per Sluice produce cell
    rounds: int  # the cells each ratio compares alternate over this many rounds; medians kept
    failover_trials: int
    consume_records_per_partition: int  # JetStream: as many in total in its one stream
    jetstream_messages: int  # per JetStream publish cell
    follower_read_rounds: int  # one acks=all record each, read at the leader and at a follower


FULL = ClusterPlan(
    seconds=3,
    rounds=5,
    failover_trials=20,
    consume_records_per_partition=200_000,
    jetstream_messages=200_000,
    follower_read_rounds=200,
)
QUICK = ClusterPlan(
    seconds=1,
    rounds=1,
    failover_trials=2,  # the fewest trials that show a spread
    consume_records_per_partition=2_000,
    jetstream_messages=2_000,
    follower_read_rounds=10,
)


def _cpu(pids: dict[str, int]) -> dict[str, float]:
    return {name: cpu_seconds(pid) for name, pid in pids.items()}


def _cpu_since(before: dict[str, float], pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds each named process spent since `before`."""
    return {name: round(cpu_seconds(pid) - before[name], 2) for name, pid in pids.items()}


class SluiceCluster:
    """The three-node cluster the Sluice cells run on; topics are fresh for every cell."""

    def __init__(self, workdir: Path) -> None:
        self.local = LocalCluster(workdir, NODES)
        for node, rack in zip(self.local.nodes, RACKS, strict=True):
            node.extra += ["--rack", rack]
        self.serial = 0

    def start(self) -> None:
        self.local.start()

    def stop(self) -> None:
        self.local.stop()

    def url(self, node_id: int) -> str:
        return self.local.nodes[node_id].url

    def any_url(self) -> str:
        return next(n.url for n in self.local.nodes if n.running)

    def pids(self) -> dict[str, int]:
        pids = {
            f"node-{n.node_id}": n.process.pid for n in self.local.nodes if n.process is not None
        }
        assert self.local.etcd.process is not None
        return {**pids, "etcd": self.local.etcd.process.pid}

    def topic(self, prefix: str, partitions: int) -> tuple[str, dict[int, int]]:
        """A fresh replicated topic once every replica is in sync; its leader per partition."""
        self.serial += 1
        name = f"{prefix}-{self.serial}"
        http_json(
            "POST",
            f"{self.any_url()}/v1/topics",
            {
                "name": name,
                "partitions": partitions,
                "replication_factor": NODES,
                "configs": {"min.insync.replicas": MIN_INSYNC},
            },
        )
        return name, self.settled(name)

    def settled(self, topic: str) -> dict[int, int]:
        """Wait until every partition has a leader and all replicas in its ISR."""
        deadline = time.monotonic() + SETTLE_DEADLINE_S
        last: Any = None
        while time.monotonic() < deadline:
            with contextlib.suppress(RuntimeError, OSError):
                last = http_json("GET", f"{self.any_url()}/v1/topics/{topic}")["partitions"]
                if all(p["leader"] is not None and len(p["isr"]) == NODES for p in last):
                    return {p["partition"]: p["leader"] for p in last}
            time.sleep(0.05)
        raise TimeoutError(f"{topic} did not settle: {last}")

    def preferred_led(self, topic: str, controller_too: bool) -> tuple[int, int, int]:
        """Once every replica is in sync: a partition whose leader is its preferred replica (so
        the controller's periodic rebalance cannot move it), led by the controller or not as
        asked when there is a choice; the partition, its leader and the controller."""
        deadline = time.monotonic() + SETTLE_DEADLINE_S
        while time.monotonic() < deadline:
            self.settled(topic)
            controller = http_json("GET", f"{self.any_url()}/v1/cluster")["controller"]
            rows = http_json("GET", f"{self.any_url()}/v1/topics/{topic}")["partitions"]
            led = [r for r in rows if r["leader"] == r["replicas"][0] and len(r["isr"]) == NODES]
            led.sort(key=lambda r: (r["leader"] == controller) != controller_too)
            if led:
                return led[0]["partition"], led[0]["leader"], controller
            time.sleep(0.5)
        raise TimeoutError(f"no partition of {topic} is led by its preferred replica")

    def high_watermark_at(self, node: int, topic: str, high_watermark: int) -> None:
        """Wait until `node`'s replica of partition 0 is in sync with `high_watermark`."""
        deadline = time.monotonic() + SETTLE_DEADLINE_S
        last: Any = None
        while time.monotonic() < deadline:
            last = http_json("GET", f"{self.url(node)}/v1/topics/{topic}")["partitions"][0]
            if last["high_watermark"] == high_watermark and node in last["isr"]:
                return
            time.sleep(0.05)
        raise TimeoutError(f"node {node} never had {topic}'s high watermark {high_watermark}")

    def traffic_out(self, node: int, topic: str) -> int:
        """The bytes `node` has served of `topic` to consumers (its /v1/traffic)."""
        rows = http_json("GET", f"{self.url(node)}/v1/traffic")["topics"]
        return sum(int(row["bytes_out"]) for row in rows if row["topic"] == topic)

    def drop(self, topic: str) -> None:
        http_json("DELETE", f"{self.any_url()}/v1/topics/{topic}", ok=(404,))

    def warm(self, topic: str, leaders: dict[int, int]) -> None:
        """One acks=all record per partition: the first append's one-off costs are paid."""
        for partition, leader in leaders.items():
            http_json(
                "POST",
                f"{self.url(leader)}/v1/topics/{topic}/partitions/{partition}/records?acks=all",
                {"records": [{"value": 0}]},
            )

    def wrk_at_once(
        self, jobs: list[tuple[str, str, int]], body: Path, fmt: str, seconds: float
    ) -> generators.Run:
        """One wrk per (node URL, path, connections), all at once; summed, with every process's
        CPU seconds (the generators' from this process's reaped children)."""
        pids = self.pids()
        before, children = _cpu(pids), children_cpu_seconds()

        def one(job: tuple[str, str, int]) -> generators.Run:
            url, path, connections = job
            return generators.wrk(
                url,
                [path],
                seconds=seconds,
                server_pid=pids["etcd"],  # unused: every process's CPU is taken around them all
                method="POST",
                body=body,
                headers={"Content-Type": MEDIA[fmt]},
                connections=connections,
                threads=min(2, connections) if len(jobs) == 1 else 1,
            )

        with ThreadPoolExecutor(len(jobs)) as pool:
            runs = list(pool.map(one, jobs))
        by_process = _cpu_since(before, pids)
        return generators.Run(
            requests=sum(r.requests for r in runs),
            seconds=max(r.seconds for r in runs),
            failures=sum(r.failures for r in runs),
            generator_cpu_s=round(children_cpu_seconds() - children, 2),
            server_cpu_s=round(sum(by_process.values()), 2),
            extra={
                "p99_ms": max(r.extra["p99_ms"] for r in runs),
                **{f"cpu_s_{name}": s for name, s in by_process.items()},
            },
        )


def _split(total: int, parts: int) -> list[int]:
    """`total` connections over `parts` generators, as even as can be."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


class ClusterBench:
    """One cluster section: its plan, scratch directory, the bench's guard and the rows."""

    def __init__(self, plan: ClusterPlan, scratch: Path, guarded: Guard) -> None:
        self.plan, self.scratch, self.guarded = plan, scratch, guarded
        scratch.mkdir(parents=True, exist_ok=True)

    def _body(self, fmt: str, batch: int) -> tuple[Path, int]:
        path = self.scratch / f"cluster-body-{fmt}-{batch}"
        body = body_for(fmt, batch)
        path.write_bytes(body)
        return path, len(body)

    # -- Sluice ----------------------------------------------------------------------------

    def run_sluice(self) -> dict[str, Any]:
        """Every Sluice cell; each one an error row if the cluster did not start."""
        cluster: SluiceCluster | None = None

        def start() -> dict[str, Any]:
            nonlocal cluster
            cluster = SluiceCluster(self.scratch / "sluice")
            began = time.monotonic()
            cluster.start()
            return {"seconds": round(time.monotonic() - began, 2), "processes": cluster.pids()}

        started = self.guarded("cluster_start", {"system": "sluice"}, start)
        up = cluster if "error" not in started else None
        try:
            return {
                "start": started,
                **self.sluice_produce(up),
                "consume": self.guarded(
                    "cluster_consume", {"system": "sluice"}, lambda: self.sluice_consume(up)
                ),
                "follower_reads": self.guarded(
                    "cluster_follower_reads",
                    {"system": "sluice"},
                    lambda: self.sluice_follower_reads(up),
                ),
                "failover": self.guarded(
                    "cluster_failover", {"system": "sluice"}, lambda: self.sluice_failover(up)
                ),
            }
        finally:
            if cluster is not None:
                cluster.stop()

    def sluice_produce(self, cluster: SluiceCluster | None) -> dict[str, Any]:
        """acks=1 and acks=all over three partitions at their leaders, and one partition
        through its leader and through another node, alternating over the rounds."""
        acks_cells: dict[tuple[str, str], list[dict[str, Any]]] = {}
        route_cells: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for _ in range(self.plan.rounds):
            for fmt, batch in FORMATS:
                for acks in ("1", "all"):
                    what = {"format": fmt, "batch": batch, "acks": acks, "route": "leaders"}
                    acks_cells.setdefault((fmt, acks), []).append(
                        self.guarded(
                            "cluster_produce",
                            what,
                            partial(self.leaders_cell, cluster, fmt, batch, acks),
                        )
                    )
                for route in ("leader", "non-leader"):
                    what = {"format": fmt, "batch": batch, "acks": ROUTING_ACKS, "route": route}
                    route_cells.setdefault((fmt, route), []).append(
                        self.guarded(
                            "cluster_routing",
                            what,
                            partial(self.route_cell, cluster, fmt, batch, route),
                        )
                    )
        return {
            "produce": [
                {"format": f, "batch": dict(FORMATS)[f], "acks": a, **median_cell(cells)}
                for (f, a), cells in acks_cells.items()
            ],
            "routing": [
                {"format": f, "batch": dict(FORMATS)[f], "route": r, **median_cell(cells)}
                for (f, r), cells in route_cells.items()
            ],
            "acks_all_to_1_by_round": {
                f: _by_round(acks_cells[(f, "all")], acks_cells[(f, "1")]) for f, _ in FORMATS
            },
            "non_leader_to_leader_by_round": {
                f: _by_round(route_cells[(f, "non-leader")], route_cells[(f, "leader")])
                for f, _ in FORMATS
            },
        }

    def leaders_cell(
        self, cluster: SluiceCluster | None, fmt: str, batch: int, acks: str
    ) -> dict[str, Any]:
        """Three partitions, each driven at its leader by its share of the connections."""
        cluster = _need(cluster)
        topic, leaders = cluster.topic("cluster-produce", PARTITIONS)
        body, size = self._body(fmt, batch)
        try:
            cluster.warm(topic, leaders)
            jobs = [
                (
                    cluster.url(leaders[p]),
                    f"/v1/topics/{topic}/partitions/{p}/records?acks={acks}",
                    c,
                )
                for p, c in zip(range(PARTITIONS), _split(CONNECTIONS, PARTITIONS), strict=True)
            ]
            run = cluster.wrk_at_once(jobs, body, fmt, self.plan.seconds)
        finally:
            cluster.drop(topic)
        return {"partitions": PARTITIONS, "generator": "wrk", **rates(run, batch, size)}

    def route_cell(
        self, cluster: SluiceCluster | None, fmt: str, batch: int, route: str
    ) -> dict[str, Any]:
        """One partition, all connections to its leader or to a node that is not its leader."""
        cluster = _need(cluster)
        topic, leaders = cluster.topic("cluster-route", 1)
        body, size = self._body(fmt, batch)
        node = leaders[0] if route == "leader" else (leaders[0] + 1) % NODES
        try:
            cluster.warm(topic, leaders)
            path = f"/v1/topics/{topic}/partitions/0/records?acks={ROUTING_ACKS}"
            run = cluster.wrk_at_once(
                [(cluster.url(node), path, CONNECTIONS)], body, fmt, self.plan.seconds
            )
        finally:
            cluster.drop(topic)
        return {
            "partitions": 1,
            "leader": leaders[0],
            "node": node,
            "generator": "wrk",
            **rates(run, batch, size),
        }

    def sluice_consume(self, cluster: SluiceCluster | None) -> dict[str, Any]:
        """Per-partition JSON fetch at each leader, one client process per partition."""
        cluster = _need(cluster)
        each = self.plan.consume_records_per_partition
        topic, leaders = cluster.topic("cluster-consume", PARTITIONS)
        try:
            body = body_for("ndjson", 1000)
            for partition, leader in leaders.items():
                target = (
                    f"{cluster.url(leader)}/v1/topics/{topic}/partitions/{partition}"
                    "/records?acks=all"
                )
                for _ in range(each // 1000):
                    request = urllib.request.Request(
                        target, data=body, method="POST", headers={"Content-Type": MEDIA["ndjson"]}
                    )
                    with urllib.request.urlopen(request, timeout=60) as response:
                        response.read()
            params = [
                {
                    "url": cluster.url(leader),
                    "topic": topic,
                    "accept": MEDIA["json"],
                    "max_records": 1000,
                    "ranges": [(partition, 0, each)],
                }
                for partition, leader in leaders.items()
            ]
            pids = cluster.pids()
            before = _cpu(pids)
            row = run_workers(
                "sluice_partition_fetch", params, each * PARTITIONS, pids[f"node-{leaders[0]}"]
            )
        finally:
            cluster.drop(topic)
        return _with_processes(row, _cpu_since(before, pids), {"format": "json"})

    def sluice_follower_reads(self, cluster: SluiceCluster | None) -> dict[str, Any]:
        """One record a round, acks=all through the leader of a quiet partition, read by two
        long-polling consumers parked from its offset: one at the leader, one naming a
        follower's rack (served by that follower). Each round waits for both reads and pauses
        before the next, so every fetch in the cluster is parked when the record comes: the
        follower learns the high watermark from its leader, not from the next records."""
        cluster = _need(cluster)
        topic, leaders = cluster.topic("cluster-follower-reads", 1)
        leader = leaders[0]
        follower = (leader + 1) % NODES
        try:
            cluster.warm(topic, leaders)
            cluster.high_watermark_at(follower, topic, 1)
            served_before = cluster.traffic_out(follower, topic)
            pids = cluster.pids()
            before = _cpu(pids)
            rounds = asyncio.run(
                _follower_read_rounds(
                    cluster.url(leader),
                    cluster.url(follower),
                    RACKS[follower],
                    topic,
                    self.plan.follower_read_rounds,
                )
            )
            by_process = _cpu_since(before, pids)
            served = cluster.traffic_out(follower, topic) - served_before
        finally:
            cluster.drop(topic)
        missed = [r for r in rounds if "error" in r]
        row: dict[str, Any] = {
            "rounds": len(rounds),
            "pause_s": READ_PAUSE_S,
            "leader": leader,
            "follower": follower,
            "client_rack": RACKS[follower],
            "follower_bytes_out": served,
            **_latencies(rounds),
            "server_cpu_s": round(sum(by_process.values()), 2),
            **{f"cpu_s_{name}": s for name, s in by_process.items()},
        }
        if missed:
            row["error"] = f"{len(missed)} of {len(rounds)} rounds failed: {missed[0]['error']}"
        elif not served:
            row["error"] = f"node {follower} served none of the client_rack reads"
        return row

    def sluice_failover(self, cluster: SluiceCluster | None) -> dict[str, Any]:
        """SIGKILL a partition's leader; time to the first acked produce through another node."""
        cluster = _need(cluster)
        topic, _ = cluster.topic("cluster-failover", PARTITIONS)
        trials = []
        for trial in range(self.plan.failover_trials):
            last = trial == self.plan.failover_trials - 1  # the cluster stops after it
            try:
                outcome = asyncio.run(_sluice_trial(cluster, topic, trial, restart=not last))
            except Exception as error:
                outcome = {"error": f"trial {trial}: {type(error).__name__}: {error}"}
            trials.append({"trial": trial, **outcome})
        cluster.drop(topic)
        return summarize(trials)

    # -- JetStream -------------------------------------------------------------------------

    def run_jetstream(self) -> dict[str, Any]:
        """The same cells on JetStream; each one an error row if its servers did not start."""
        servers: jetstream.NatsCluster | None = None

        def start() -> dict[str, Any]:
            nonlocal servers
            servers = jetstream.NatsCluster(self.scratch / "jetstream")
            began = time.monotonic()
            servers.start()
            urls = servers.urls()
            asyncio.run(jetstream.create_stream(urls, jetstream.STREAM, jetstream.SUBJECT))
            return {"seconds": round(time.monotonic() - began, 2), "processes": servers.pids()}

        started = self.guarded("cluster_start", {"system": "jetstream"}, start)
        up = servers if "error" not in started else None
        try:
            cells: dict[int, list[dict[str, Any]]] = {}
            for _ in range(self.plan.rounds):
                for fmt, batch in FORMATS:
                    window = CONNECTIONS * batch
                    cells.setdefault(window, []).append(
                        self.guarded(
                            "cluster_jetstream_produce",
                            {"window": window, "like": f"{fmt} batch {batch}"},
                            partial(self.jetstream_produce, up, window),
                        )
                    )
            return {
                "start": started,
                "produce": [
                    {
                        "window": CONNECTIONS * batch,
                        "like": f"{fmt} batch {batch}",
                        **median_cell(cells[CONNECTIONS * batch]),
                    }
                    for fmt, batch in FORMATS
                ],
                "consume": self.guarded(
                    "cluster_consume", {"system": "jetstream"}, lambda: self.jetstream_consume(up)
                ),
                "failover": self.guarded(
                    "cluster_failover",
                    {"system": "jetstream"},
                    lambda: self.jetstream_failover(up),
                ),
            }
        finally:
            if servers is not None:
                servers.stop()

    def _publish(
        self, servers: jetstream.NatsCluster, subject: str, messages: int, window: int
    ) -> dict[str, Any]:
        """`messages` acked publishes from PUBLISHERS processes, `window` unacked in all."""
        params = [
            {
                "servers": servers.urls(),
                "subject": subject,
                "messages": messages // PUBLISHERS,
                "window": window // PUBLISHERS,
            }
            for _ in range(PUBLISHERS)
        ]
        pids = servers.pids()
        before = _cpu(pids)
        total = messages // PUBLISHERS * PUBLISHERS
        row = run_workers("jetstream_publish", params, total, next(iter(pids.values())))
        return _with_processes(row, _cpu_since(before, pids), {"messages": total})

    def jetstream_produce(
        self, servers: jetstream.NatsCluster | None, window: int
    ) -> dict[str, Any]:
        servers = _need(servers)
        row = self._publish(servers, jetstream.SUBJECT, self.plan.jetstream_messages, window)
        return {"publishers": PUBLISHERS, **row}

    def jetstream_consume(self, servers: jetstream.NatsCluster | None) -> dict[str, Any]:
        """Fill a second replicated stream, then pull it with one process per Sluice partition."""
        servers = _need(servers)
        total = self.plan.consume_records_per_partition * PARTITIONS
        asyncio.run(jetstream.create_stream(servers.urls(), "consume", "consume.records"))
        filled = self._publish(servers, "consume.records", total, CONNECTIONS * 1000)
        if "error" in filled:
            return {"error": f"filling the stream: {filled['error']}"}
        asyncio.run(jetstream.create_consumer(servers.urls(), "consume", "reader"))
        params = [
            {
                "servers": servers.urls(),
                "stream": "consume",
                "durable": "reader",
                "max_records": 1000,
            }
            for _ in range(PARTITIONS)
        ]
        pids = servers.pids()
        before = _cpu(pids)
        row = run_workers("jetstream_fetch", params, total, next(iter(pids.values())))
        return _with_processes(row, _cpu_since(before, pids), {"batch": 1000})

    def jetstream_failover(self, servers: jetstream.NatsCluster | None) -> dict[str, Any]:
        servers = _need(servers)
        trials = []
        for trial in range(self.plan.failover_trials):
            last = trial == self.plan.failover_trials - 1  # the servers stop after it
            try:
                outcome = asyncio.run(jetstream.failover_trial(servers, restart=not last))
            except Exception as error:
                outcome = {"error": f"trial {trial}: {type(error).__name__}: {error}"}
            trials.append({"trial": trial, **outcome})
        return summarize(trials)


def _need(resource: T | None) -> T:
    if resource is None:
        raise RuntimeError("the cluster did not start (see cluster_start)")
    return resource


def _with_processes(
    row: dict[str, Any], by_process: dict[str, float], extra: dict[str, Any]
) -> dict[str, Any]:
    """A client-process row with every server's CPU seconds, summed into `server_cpu_s`."""
    if "error" in row:
        return row
    return {
        **extra,
        **row,
        "server_cpu_s": round(sum(by_process.values()), 2),
        **{f"cpu_s_{name}": s for name, s in by_process.items()},
    }


def _by_round(top: list[dict[str, Any]], bottom: list[dict[str, Any]]) -> list[float]:
    return [
        round(a["records_per_s"] / b["records_per_s"], 3)
        for a, b in zip(top, bottom, strict=True)
        if "error" not in a and "error" not in b and b["records_per_s"]
    ]


async def _follower_read_rounds(
    leader_url: str, follower_url: str, rack: str, topic: str, rounds: int
) -> list[dict[str, Any]]:
    """Each round: both consumers parked from the next offset (the pause lets them park), one
    acks=all record through the leader, then the time from its send to its answer and to each
    consumer's read, in ms; a round whose produce or read failed is {"error": ...}."""
    path = f"/v1/topics/{topic}/partitions/0/records"
    produce = leader_url + path + "?acks=all"
    body = orjson.dumps({"records": [{"value": orjson.Fragment(VALUE)}]})
    out: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as http:

        async def read(url: str, params: dict[str, Any]) -> float:
            async with http.get(url + path, params=params) as response:
                answer = await response.read()
            arrived = time.perf_counter()
            if response.status != 200 or len(orjson.loads(answer)["records"]) != 1:
                raise RuntimeError(f"{url}: {response.status} {answer[:200]!r}")
            return arrived

        for offset in range(1, rounds + 1):
            wait = {"offset": offset, "timeout_ms": READ_WAIT_MS}
            reads = [
                asyncio.ensure_future(read(leader_url, wait)),
                asyncio.ensure_future(read(follower_url, {**wait, "client_rack": rack})),
            ]
            await asyncio.sleep(READ_PAUSE_S)
            sent = time.perf_counter()
            try:
                async with http.post(
                    produce, data=body, headers={"Content-Type": MEDIA["json"]}
                ) as response:
                    text = await response.text()
                    if response.status != 200:
                        raise RuntimeError(f"produce: {response.status} {text[:200]}")
                answered = time.perf_counter()
                at_leader, at_follower = await asyncio.gather(*reads)
            except Exception as error:
                for pending in reads:
                    pending.cancel()
                await asyncio.gather(*reads, return_exceptions=True)
                out.append({"error": f"round {offset}: {type(error).__name__}: {error}"})
                continue
            out.append(
                {
                    "produce_ms": (answered - sent) * 1000,
                    "leader_ms": (at_leader - sent) * 1000,
                    "follower_ms": (at_follower - sent) * 1000,
                    # 0: served before the produce's answer reached the producer
                    "follower_after_answer_ms": max(at_follower - answered, 0) * 1000,
                }
            )
    return out


def _latencies(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """p50 / p99 / max (nearest rank, ms) of each figure over the rounds that ran."""
    good = [r for r in rounds if "error" not in r]
    if not good:
        return {}
    out: dict[str, Any] = {}
    for figure in ("produce_ms", "leader_ms", "follower_ms", "follower_after_answer_ms"):
        values = [r[figure] for r in good]
        name = figure.removesuffix("_ms")
        out[f"{name}_p50_ms"] = round(nearest_rank(values, 0.50), 2)
        out[f"{name}_p99_ms"] = round(nearest_rank(values, 0.99), 2)
        out[f"{name}_max_ms"] = round(max(values), 2)
    return out


async def _sluice_trial(
    cluster: SluiceCluster, topic: str, trial: int, *, restart: bool = True
) -> dict[str, Any]:
    """One failover: kill a partition's leader (every other trial the controller's node too),
    produce through the next node until acked, then, unless `restart` is false (the last
    trial), restart the killed node (the next trial waits for a full ISR)."""
    partition, leader, controller = cluster.preferred_led(topic, controller_too=trial % 2 == 1)
    via = (leader + 1) % NODES
    url = f"{cluster.url(via)}/v1/topics/{topic}/partitions/{partition}/records?acks=all"
    body = orjson.dumps({"records": [{"value": orjson.Fragment(VALUE)}]})
    try:
        async with aiohttp.ClientSession(headers={"Content-Type": MEDIA["json"]}) as http:

            async def write() -> None:
                async with http.post(url, data=body) as response:
                    answer = await response.read()
                    if response.status != 200:
                        code = orjson.loads(answer).get("code") if answer[:1] == b"{" else None
                        raise Refused(f"{response.status} {code}")

            await write()  # the path works before the kill
            started = time.monotonic()
            cluster.local.nodes[leader].kill()
            outcome = await first_ack(write, started)
        state = http_json("GET", f"{cluster.url(via)}/v1/topics/{topic}")["partitions"]
    finally:
        if restart and not cluster.local.nodes[leader].running:
            cluster.local.nodes[leader].start()
            cluster.local.wait_ready()
    return {
        "partition": partition,
        "killed": leader,
        "killed_controller": controller == leader,
        "via": via,
        "new_leader": state[partition]["leader"],
        **outcome,
    }


def _cpu_times() -> list[int]:
    """The machine's CPU time counters (/proc/stat `cpu` line: user ... steal)."""
    return [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]


def _shares(before: list[int], after: list[int]) -> dict[str, float]:
    """Between two readings: the share of all CPUs' time spent busy (by anyone, this run or
    not), and the share the host took for other guests (steal)."""
    spent = [b - a for a, b in zip(before, after, strict=True)]
    total = sum(spent) or 1
    return {
        "busy_share": round(1 - (spent[3] + spent[4]) / total, 3),
        "steal_share": round(spent[7] / total, 3),
    }


def run(plan: ClusterPlan, scratch: Path, guarded: Guard) -> dict[str, Any]:
    """The whole section: Sluice, then JetStream (never both at once), then the comparisons."""
    bench = ClusterBench(plan, scratch, guarded)
    load_before, times_before = [round(x, 2) for x in os.getloadavg()], _cpu_times()
    section: dict[str, Any] = {
        "setup": {
            "nodes": NODES,
            "replication_factor": NODES,
            "min_insync_replicas": MIN_INSYNC,
            "partitions": PARTITIONS,
            "racks": RACKS,
            "connections": CONNECTIONS,
            "formats": FORMATS,
            "routing_acks": ROUTING_ACKS,
            "jetstream_publishers": PUBLISHERS,
            "jetstream_storage": "file",
            **asdict(plan),
        },
        "sluice": bench.run_sluice(),
        "jetstream": bench.run_jetstream(),
    }
    section["machine"] = {
        "load_average_before": load_before,
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        **_shares(times_before, _cpu_times()),
    }
    section["ratios"] = cluster_report.ratios(section)
    section["targets"] = cluster_report.targets(section)
    return section


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rounds", type=int, default=FULL.follower_read_rounds, help="records, one a round"
    )
    parser.add_argument("--out", type=Path, help="also write the report (JSON) here")
    args = parser.parse_args()
    plan = replace(QUICK, follower_read_rounds=args.rounds)
    began = time.time()
    load_before = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="sluice-follower-reads-") as tmp:
        cluster = SluiceCluster(Path(tmp) / "sluice")
        cluster.start()
        try:
            bench = ClusterBench(plan, Path(tmp), lambda _scenario, what, run: {**what, **run()})
            row = bench.sluice_follower_reads(cluster)
        finally:
            cluster.stop()
    report = {
        "command": f"python -m loadtests.cluster_bench --rounds {args.rounds}",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(began)),
        "load_average_before": load_before,
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "nproc": os.cpu_count(),
        "follower_reads": row,
    }
    text = orjson.dumps(report, option=orjson.OPT_INDENT_2)
    if args.out is not None:
        args.out.write_bytes(text)
    print(text.decode())


if __name__ == "__main__":
    main()
