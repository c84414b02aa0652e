"""The placement planners (replication.placement) at internet scale, with no cluster: a skewed
cluster is built in memory, each planner is timed, and what its plan moves is set against what
any plan must move. The etcd writes a decommission needs are estimated at transaction rates
measured against a local etcd.

`python -m loadtests.balance_sim [--nodes 100 --racks 3 --partitions 100000 --seed N
--start grown|random --sizes lognormal|zipf --out DIR]`

The one loadtest that imports the product's code (pyproject.toml's import-linter contract says
so): the planners are pure functions, with nothing to reach over HTTP.

The cluster: topics of 1 to 1,000 partitions (most small), replication factor 3, placed by the
controller's rule (`assign_new`, each topic starting where the partitions so far leave off).
`grown` (the default): placed on all but 3 of the nodes, which then join empty; `random`:
each partition on random nodes of distinct racks. Sizes: `lognormal` (a topic's median
lognormal around 1 GB, sigma 1, and its partitions lognormal around it, sigma 1) or `zipf`
(the topic of rank k weighs 1/k^1.1, its partitions around that, sigma 0.5). Bytes are one
replica's on disk; GB = 10**9 bytes.

The plans: balance the cluster; then, on the balanced cluster, decommission the node holding
the most bytes (its moves only, then with the nodes left rebalanced, the default), and heal
the loss of that node. Figures: process CPU time to compute each plan
(one core), bytes to move against a lower bound, and each figure's lowest and highest node as
a ratio to the mean, before and after.

The lower bound on bytes a balance must move: every byte a node holds above its band's upper
edge must leave it, and every byte a node lacks below the lower edge must arrive, and each
byte moved leaves one node and arrives at one: the bound is the larger of the two sums. A
decommission must move every byte on the node, a heal every byte the node held.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import http.client
import json
import math
import os
import platform
import random
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.workers.local_cluster import EtcdServer
from replication.placement import (
    ClusterLoad,
    PartitionLoad,
    Plan,
    Spread,
    assign_new,
    plan_balance,
    plan_decommission,
    plan_heal,
)

GB = 10**9
TB = 10**12
RF = 3
# Partitions per all-or-none etcd transaction (replication.metadata.MAX_PARTITIONS_PER_WRITE;
# not imported: the simulation reaches the product only through the planners).
PARTITIONS_PER_WRITE = 60
TOPIC_SHAPES = (1, 3, 6, 12, 24, 50, 100, 256, 1000)
TOPIC_WEIGHTS = (20, 20, 15, 15, 10, 8, 6, 4, 2)


@dataclass(frozen=True)
class Scenario:
    nodes: int
    racks: int
    partitions: int
    seed: int
    start: str  # "grown" or "random"
    sizes: str  # "lognormal" or "zipf"
    grown_by: int
    tolerance: float


def rack_of(node: int, racks: int) -> str | None:
    return f"rack-{node % racks}" if racks else None


def build(scenario: Scenario) -> ClusterLoad:
    """The skewed cluster the plans start from."""
    rng = random.Random(scenario.seed)
    racks = {n: rack_of(n, scenario.racks) for n in range(scenario.nodes)}
    first = scenario.nodes - scenario.grown_by if scenario.start == "grown" else scenario.nodes
    initial = {n: racks[n] for n in range(first)}
    by_rack: dict[str | None, list[int]] = {}
    for node, rack in racks.items():
        by_rack.setdefault(rack, []).append(node)
    partitions: dict[tuple[str, int], PartitionLoad] = {}
    placed = 0
    topic = 0
    while placed < scenario.partitions:
        count = min(rng.choices(TOPIC_SHAPES, TOPIC_WEIGHTS)[0], scenario.partitions - placed)
        name = f"topic-{topic:05d}"
        if scenario.sizes == "zipf":
            median = 50 * GB / (topic + 1) ** 1.1
            sigma = 0.5
        else:
            median = GB * rng.lognormvariate(0, 1.0)
            sigma = 1.0
        if scenario.start == "grown":
            lists = assign_new(initial, placed % len(initial), range(count), RF)
        else:
            lists = [_random_replicas(rng, by_rack, racks) for _ in range(count)]
        for p, replicas in enumerate(lists):
            size = max(1, int(median * rng.lognormvariate(0, sigma)))
            partitions[(name, p)] = PartitionLoad(replicas, size)
        placed += count
        topic += 1
    return ClusterLoad(racks, partitions)


def _random_replicas(
    rng: random.Random, by_rack: dict[str | None, list[int]], racks: dict[int, str | None]
) -> tuple[int, ...]:
    if None in by_rack:
        return tuple(rng.sample(sorted(racks), RF))
    names = sorted(by_rack, key=str)
    chosen = rng.sample(names, min(RF, len(names)))
    replicas = [rng.choice(by_rack[r]) for r in chosen]
    while len(replicas) < RF:  # fewer racks than replicas
        extra = rng.choice(sorted(racks))
        if extra not in replicas:
            replicas.append(extra)
    return tuple(replicas)


def held_bytes(load: ClusterLoad) -> dict[int, int]:
    held = dict.fromkeys(load.racks, 0)
    for partition in load.partitions.values():
        for node in partition.replicas:
            held[node] = held.get(node, 0) + partition.size_bytes
    return held


def balance_lower_bound(load: ClusterLoad, tolerance: float) -> int:
    """The bytes any plan that brings every node within ±tolerance of the mean must move."""
    held = held_bytes(load)
    mean = sum(held.values()) / len(held)
    high, low = mean * (1 + tolerance), mean * (1 - tolerance)
    above = sum(b - high for b in held.values() if b > high)
    below = sum(low - b for b in held.values() if b < low)
    return math.ceil(max(above, below))


def applied(load: ClusterLoad, plan: Plan) -> ClusterLoad:
    return ClusterLoad(
        load.racks,
        {
            key: PartitionLoad(plan.targets.get(key, p.replicas), p.size_bytes)
            for key, p in load.partitions.items()
        },
    )


def _spread(spread: Spread) -> dict[str, list[float]]:
    return {
        "replicas": [round(x, 4) for x in spread.replicas],
        "leaders": [round(x, 4) for x in spread.leaders],
        "bytes": [round(x, 4) for x in spread.bytes],
    }


def timed(compute: Callable[[], Plan]) -> tuple[Plan, float]:
    began = time.process_time()
    plan = compute()
    return plan, time.process_time() - began


def plan_row(label: str, plan: Plan, cpu_s: float, lower_bound: int) -> dict[str, Any]:
    return {
        "plan": label,
        "cpu_s": round(cpu_s, 3),
        "goal_met": plan.goal_met,
        "replica_moves": plan.replica_moves,
        "partitions_moved": plan.partitions_moved,
        "leadership_changes": plan.leadership_changes,
        "bytes_to_move": plan.bytes_to_move,
        "lower_bound_bytes": lower_bound,
        "bytes_vs_bound": round(plan.bytes_to_move / lower_bound, 4) if lower_bound else None,
        "before": _spread(plan.before),
        "after": _spread(plan.after),
        "worst_after": round(plan.after.worst(), 4),
        "notes": list(plan.notes),
    }


# -- etcd ---------------------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class _Etcd:
    """Just enough of etcd's v3 JSON gateway, over one kept-alive connection."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.connection = http.client.HTTPConnection(host, int(port), timeout=30)

    def call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.connection.request(
            "POST", path, json.dumps(body), {"Content-Type": "application/json"}
        )
        response = self.connection.getresponse()
        answer: dict[str, Any] = json.loads(response.read())
        if response.status != 200:
            raise RuntimeError(f"etcd answered {response.status}: {answer}")
        return answer

    def fsync_ms(self) -> float | None:
        """The mean duration of etcd's WAL fsyncs so far (its own metric), in ms."""
        self.connection.request("GET", "/metrics")
        text = self.connection.getresponse().read().decode()
        figures = {}
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name in (
                "etcd_disk_wal_fsync_duration_seconds_sum",
                "etcd_disk_wal_fsync_duration_seconds_count",
            ):
                figures[name.rsplit("_", 1)[1]] = float(value)
        if not figures.get("count"):
            return None
        return round(1000 * figures["sum"] / figures["count"], 3)

    def close(self) -> None:
        self.connection.close()


def _state(replicas: Sequence[int], epoch: int) -> bytes:
    """A partition's state as the store writes it (about its size; the keys are not read)."""
    return json.dumps(
        {
            "leader": replicas[0],
            "leader_epoch": epoch,
            "replicas": list(replicas),
            "isr": list(replicas),
            "adding": [replicas[-1]],
            "removing": [replicas[0] + 1],
        }
    ).encode()


def measure_etcd(txns: int, batches: Sequence[int] = (1, PARTITIONS_PER_WRITE)) -> dict[str, Any]:
    """Guarded partition writes against a fresh single-member etcd on loopback (its data on
    this machine's disk), one transaction at a time as the controller writes: each
    transaction compares the fence key's create revision and every partition key's mod
    revision, then puts every partition's new state. Returns, per batch size, transactions
    and partition writes per second."""
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="balance-sim-etcd-") as workdir:
        server = EtcdServer(Path(workdir))
        server.start()
        etcd = _Etcd(server.url)
        try:
            fence = b"/sluice/controller/1"
            created = etcd.call("/v3/kv/put", {"key": _b64(fence), "value": _b64(b"1")})
            fence_revision = int(created["header"]["revision"])
            keys = [
                f"/sluice/partitions/topic-{p // 100:05d}/{p % 100}".encode() for p in range(3000)
            ]
            mod: dict[bytes, int] = {}
            for first in range(0, len(keys), 100):
                chunk = keys[first : first + 100]
                answer = etcd.call(
                    "/v3/kv/txn",
                    {
                        "success": [
                            {"requestPut": {"key": _b64(k), "value": _b64(_state((1, 2, 3), 0))}}
                            for k in chunk
                        ]
                    },
                )
                mod.update(dict.fromkeys(chunk, int(answer["header"]["revision"])))
            cursor = 0
            for batch in batches:
                # a few unmeasured first
                for measured in (False, True):
                    count = max(2, txns // 10) if not measured else txns
                    began = time.perf_counter()
                    for t in range(count):
                        chosen = [keys[(cursor + i) % len(keys)] for i in range(batch)]
                        cursor += batch
                        compare = [
                            {
                                "key": _b64(fence),
                                "target": "CREATE",
                                "create_revision": fence_revision,
                            }
                        ] + [
                            {"key": _b64(k), "target": "MOD", "mod_revision": mod[k]}
                            for k in chosen
                        ]
                        success = [
                            {
                                "requestPut": {
                                    "key": _b64(k),
                                    "value": _b64(_state((4, 5, 6), t + 1)),
                                }
                            }
                            for k in chosen
                        ]
                        answer = etcd.call("/v3/kv/txn", {"compare": compare, "success": success})
                        if not answer.get("succeeded"):
                            raise RuntimeError("a guarded write failed its guard")
                        revision = int(answer["header"]["revision"])
                        for k in chosen:
                            mod[k] = revision
                    elapsed = time.perf_counter() - began
                if elapsed <= 0:
                    elapsed = 1e-9
                results[str(batch)] = {
                    "wal_fsync_ms_mean_so_far": etcd.fsync_ms(),
                    "partitions_per_txn": batch,
                    "txns": txns,
                    "seconds": round(elapsed, 3),
                    "txn_per_s": round(txns / elapsed, 1),
                    "ms_per_txn": round(1000 * elapsed / txns, 2),
                    "partition_writes_per_s": round(batch * txns / elapsed, 1),
                }
        finally:
            etcd.close()
            server.stop()
    return results


def etcd_model(plan: Plan, rates: dict[str, Any]) -> dict[str, Any]:
    """The guarded etcd writes a plan's moves need (KIP-455 as replication.reassignment
    stores it), and how long they take one after another at the measured rates.

    Per partition that copies data: its start (target, adding, removing) and its completion
    (target alone; a new leader in the same write when the leader is removed) are controller
    writes, up to PARTITIONS_PER_WRITE a transaction; each added replica joins the ISR in a
    write by the partition's leader, batched with whatever else that leader decides in the
    same turn: from PARTITIONS_PER_WRITE a transaction (the replicas catch up together) to one
    each (one by one). Completions likewise range from batched to one each, as the controller
    completes what has caught up each time it looks. Per partition whose replicas are only
    reordered: one write of the new order and one preferred-leader election, both batched.
    Writes go one at a time (the controller's task writes sequentially; the leaders' ISR
    writes are counted as if they did too, which overstates their time)."""
    k = plan.partitions_moved
    m = plan.leadership_changes
    batched = math.ceil(k / PARTITIONS_PER_WRITE)
    reorders = 2 * math.ceil(m / PARTITIONS_PER_WRITE)
    best_txns = 3 * batched + reorders
    worst_batched = batched + reorders
    worst_single = 2 * k
    model: dict[str, Any] = {
        "partitions_moved": k,
        "leadership_only": m,
        "txns_best": best_txns,
        "txns_worst": worst_batched + worst_single,
    }
    if rates:
        batch_rate = rates[str(PARTITIONS_PER_WRITE)]["txn_per_s"]
        single_rate = rates["1"]["txn_per_s"]
        model["seconds_best"] = round(best_txns / batch_rate, 2)
        model["seconds_worst"] = round(worst_batched / batch_rate + worst_single / single_rate, 2)
    return model


# -- the run ------------------------------------------------------------------------------------


def run(scenario: Scenario, decommission: int | None, etcd_rates: dict[str, Any]) -> dict[str, Any]:
    began = time.process_time()
    load = build(scenario)
    build_s = time.process_time() - began
    tolerance = scenario.tolerance
    balance, balance_s = timed(lambda: plan_balance(load, tolerance=tolerance))
    rows = [plan_row("balance", balance, balance_s, balance_lower_bound(load, tolerance))]
    balanced = applied(load, balance)
    held = held_bytes(balanced)
    node = decommission if decommission is not None else max(held, key=lambda n: (held[n], -n))
    only, only_s = timed(
        lambda: plan_decommission(balanced, node, tolerance=tolerance, rebalance=False)
    )
    rows.append(plan_row(f"decommission node {node}, moves only", only, only_s, held[node]))
    decom, decom_s = timed(lambda: plan_decommission(balanced, node, tolerance=tolerance))
    rows.append(plan_row(f"decommission node {node}, rebalanced", decom, decom_s, held[node]))
    heal, heal_s = timed(lambda: plan_heal(balanced, {node}, tolerance=tolerance))
    rows.append(plan_row(f"heal node {node} lost", heal, heal_s, held[node]))
    return {
        "scenario": scenario.__dict__,
        "cluster": {
            "nodes": len(load.racks),
            "partitions": len(load.partitions),
            "replication_factor": RF,
            "bytes": sum(p.size_bytes for p in load.partitions.values()) * RF,
            "largest_partition_bytes": max(
                (p.size_bytes for p in load.partitions.values()), default=0
            ),
            "build_cpu_s": round(build_s, 3),
        },
        "plans": rows,
        "etcd": {
            "model": " ".join((etcd_model.__doc__ or "").split()),
            "rates": etcd_rates,
            "decommission": etcd_model(decom, etcd_rates),
            "balance": etcd_model(balance, etcd_rates),
        },
    }


def _tb(n: float) -> str:
    return f"{n / TB:,.2f} TB" if n >= TB / 10 else f"{n / GB:,.1f} GB"


def _range(pair: Sequence[float]) -> str:
    return f"{pair[0]:.2f}-{pair[1]:.2f}"


def render(report: dict[str, Any]) -> str:
    s = report["scenario"]
    c = report["cluster"]
    lines = [
        f"{c['nodes']} nodes, {s['racks']} racks, {c['partitions']:,} partitions x RF {RF}, "
        f"{_tb(c['bytes'])} ({s['sizes']} sizes, largest partition "
        f"{_tb(c['largest_partition_bytes'])}), start {s['start']}"
        + (f" (+{s['grown_by']} empty nodes)" if s["start"] == "grown" else "")
        + f", seed {s['seed']}, tolerance ±{s['tolerance']:.0%}",
        "",
        "| plan | CPU s | goal | replica moves | leadership only | bytes to move | lower bound "
        "| ratio | replicas min-max (before -> after) | leaders | bytes |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in report["plans"]:
        ratio = "-" if row["bytes_vs_bound"] is None else f"{row['bytes_vs_bound']:.3f}"
        b, a = row["before"], row["after"]
        lines.append(
            f"| {row['plan']} | {row['cpu_s']:.2f} | {'met' if row['goal_met'] else 'NOT met'} "
            f"| {row['replica_moves']:,} | {row['leadership_changes']:,} "
            f"| {_tb(row['bytes_to_move'])} | {_tb(row['lower_bound_bytes'])} | {ratio} "
            f"| {_range(b['replicas'])} -> {_range(a['replicas'])} "
            f"| {_range(b['leaders'])} -> {_range(a['leaders'])} "
            f"| {_range(b['bytes'])} -> {_range(a['bytes'])} |"
        )
    for row in report["plans"]:
        for note in row["notes"]:
            lines.append(f"  {row['plan']}: {note}")
    etcd = report["etcd"]
    rates = etcd["rates"]
    lines.append("")
    if rates:
        lines.append(
            "etcd, guarded partition writes one transaction at a time: "
            + "; ".join(
                f"{r['partitions_per_txn']} a txn: {r['txn_per_s']:,.0f} txn/s "
                f"({r['ms_per_txn']:.1f} ms, {r['partition_writes_per_s']:,.0f} partitions/s)"
                for r in rates.values()
            )
        )
    for label in ("decommission", "balance"):
        model = etcd[label]
        text = (
            f"{label}: {model['partitions_moved']:,} partitions copy, "
            f"{model['leadership_only']:,} reorder: {model['txns_best']:,} to "
            f"{model['txns_worst']:,} etcd transactions"
        )
        if "seconds_best" in model:
            text += f", {model['seconds_best']:,.1f} to {model['seconds_worst']:,.1f} s of writes"
        lines.append(text)
    return "\n".join(lines)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m loadtests.balance_sim", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--racks", type=int, default=3, help="0: racks not configured")
    parser.add_argument("--partitions", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--start", choices=("grown", "random"), default="grown")
    parser.add_argument("--grown-by", type=int, default=3, help="nodes that join empty")
    parser.add_argument("--sizes", choices=("lognormal", "zipf"), default="lognormal")
    parser.add_argument("--tolerance", type=float, default=0.10)
    parser.add_argument("--decommission", type=int, help="default: the node with most bytes")
    parser.add_argument(
        "--etcd-txns", type=int, default=300, help="transactions timed per batch size; 0: none"
    )
    parser.add_argument("--out", type=Path, help="where to write balance_sim.json")
    args = parser.parse_args(argv)
    if args.start == "grown" and not 0 < args.grown_by < args.nodes:
        parser.error("--grown-by must be between 1 and --nodes - 1")
    scenario = Scenario(
        nodes=args.nodes,
        racks=args.racks,
        partitions=args.partitions,
        seed=args.seed,
        start=args.start,
        sizes=args.sizes,
        grown_by=args.grown_by if args.start == "grown" else 0,
        tolerance=args.tolerance,
    )
    rates = measure_etcd(args.etcd_txns) if args.etcd_txns > 0 else {}
    report = run(scenario, args.decommission, rates)
    report["machine"] = {
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "when": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }
    print(render(report))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / "balance_sim.json"
        path.write_text(json.dumps(report, indent=2) + "\n")
        print(f"\nreport: {path}")


if __name__ == "__main__":
    main()
