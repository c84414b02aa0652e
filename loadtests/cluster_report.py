"""The cluster section's comparisons (acks=all/acks=1, non-leader/leader, Sluice/JetStream,
the goals: the follower read's latency among them), its part of bench-report.md and its plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after use("Agg"): no display on servers and CI

TARGET_RATIO = 0.7  # acks=all / acks=1 and non-leader / leader (Kafka 2014: 0.54)
TARGET_FAILOVER_P99_S = 3.0  # Kafka's default broker session timeout is 9 s
# An acks=all produce's answer -> a consumer of a follower's rack reading the records there
# (Kafka's follower learns the high watermark up to replica.fetch.wait.max.ms later, 500 ms).
TARGET_FOLLOWER_READ_P99_MS = 50.0


def _ratio(
    figure: str,
    top: dict[str, Any] | None,
    bottom: dict[str, Any] | None,
    key: str,
    better: str,
) -> dict[str, Any] | None:
    """top[key] / bottom[key] when both rows are figures of this run."""
    if not top or not bottom or "error" in top or "error" in bottom:
        return None
    a, b = top.get(key), bottom.get(key)
    if not isinstance(a, int | float) or not isinstance(b, int | float) or not b:
        return None
    return {
        "figure": figure,
        "unit": key,
        "numerator": a,
        "denominator": b,
        "ratio": round(a / b, 3),
        "better": better,
    }


def ratios(section: dict[str, Any]) -> list[dict[str, Any]]:
    """acks=all/acks=1, non-leader/leader and Sluice/JetStream, from this run's figures."""
    sluice, peer = section["sluice"], section["jetstream"]
    produce = {(r["format"], r["acks"]): r for r in sluice["produce"]}
    routing = {(r["format"], r["route"]): r for r in sluice["routing"]}
    published = {r["window"]: r for r in peer["produce"]}
    connections = section["setup"]["connections"]
    out = []
    for fmt, batch in section["setup"]["formats"]:
        out += [
            _ratio(
                f"acks=all / acks=1, {fmt} batch {batch}",
                produce.get((fmt, "all")),
                produce.get((fmt, "1")),
                "records_per_s",
                "higher",
            ),
            _ratio(
                f"through a non-leader / through the leader, {fmt} batch {batch}",
                routing.get((fmt, "non-leader")),
                routing.get((fmt, "leader")),
                "records_per_s",
                "higher",
            ),
            _ratio(
                f"Sluice / JetStream, acks=all produce: {fmt} batch {batch} x {connections} "
                f"connections vs {connections * batch} publishes in flight",
                produce.get((fmt, "all")),
                published.get(connections * batch),
                "records_per_s",
                "higher",
            ),
        ]
    out.append(
        _ratio(
            "Sluice / JetStream, consume",
            sluice["consume"],
            peer["consume"],
            "records_per_s",
            "higher",
        )
    )
    for key in ("p50_s", "p99_s", "max_s"):
        out.append(
            _ratio(
                f"Sluice / JetStream, failover {key[:-2]}",
                sluice["failover"],
                peer["failover"],
                key,
                "lower",
            )
        )
    return [r for r in out if r is not None]


def targets(section: dict[str, Any]) -> list[dict[str, Any]]:
    """The goals against this run's figures; a missing figure is not met."""
    by_figure = {r["figure"]: r["ratio"] for r in section["ratios"]}
    rows: list[dict[str, Any]] = []
    for fmt, batch in section["setup"]["formats"]:
        for figure in (
            f"acks=all / acks=1, {fmt} batch {batch}",
            f"through a non-leader / through the leader, {fmt} batch {batch}",
        ):
            value = by_figure.get(figure)
            rows.append(
                {
                    "figure": figure,
                    "value": value,
                    "target": f">= {TARGET_RATIO}",
                    "met": value is not None and value >= TARGET_RATIO,
                }
            )
    failover = section["sluice"]["failover"]
    p99 = failover.get("p99_s")
    rows.append(
        {
            "figure": f"failover p99 over {len(failover.get('trials', []))} trials (s)",
            "value": p99,
            "target": f"< {TARGET_FAILOVER_P99_S}",
            "met": p99 is not None and p99 < TARGET_FAILOVER_P99_S,
        }
    )
    reads = section["sluice"].get("follower_reads", {})
    after = None if "error" in reads else reads.get("follower_after_answer_p99_ms")
    rows.append(
        {
            "figure": "client_rack read at a follower after the acks=all produce's answer, p99 "
            f"over {reads.get('rounds', 0)} rounds (ms)",
            "value": after,
            "target": f"<= {TARGET_FOLLOWER_READ_P99_MS:g}",
            "met": after is not None and after <= TARGET_FOLLOWER_READ_P99_MS,
        }
    )
    return rows


def _follower_read_rows(reads: dict[str, Any]) -> list[dict[str, Any]]:
    """The follower-read cell as rows: each consumer's read, from the produce's send or answer."""
    if "error" in reads and "leader_p50_ms" not in reads:
        return [{"read": "every round", "error": reads["error"]}]
    named = [
        ("the acks=all produce's answer, from its send", "produce"),
        ("a consumer at the leader, from the produce's send", "leader"),
        ("a consumer naming the follower's rack, from the produce's send", "follower"),
        (
            "a consumer naming the follower's rack, from the produce's answer",
            "follower_after_answer",
        ),
    ]
    return [
        {
            "read": label,
            **{q: reads.get(f"{key}_{q}") for q in ("p50_ms", "p99_ms", "max_ms")},
            "error": reads.get("error"),
        }
        for label, key in named
    ]


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "**no**"
    if isinstance(value, int):
        return f"{value:,}"
    return "" if value is None else str(value)


def _table(rows: list[dict[str, Any]], columns: list[str]) -> list[str]:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(row.get(c)) for c in columns) + " |" for row in rows]
    return lines


def _cpu_columns(rows: list[dict[str, Any]]) -> list[str]:
    return sorted({key for row in rows for key in row if key.startswith("cpu_s_")})


def markdown(section: dict[str, Any]) -> str:
    """The cluster section of bench-report.md: targets, every figure with its CPU, ratios."""
    sluice, peer, setup = section["sluice"], section["jetstream"], section["setup"]
    machine = section["machine"]
    rate = ["records_per_s", "rounds_records_per_s", "p99_ms", "generator_cpu_s", "server_cpu_s"]
    produce, routing = sluice["produce"], sluice["routing"]
    follower_reads = sluice.get("follower_reads", {})
    failover_rows = [
        {"system": name, **row}
        for name, row in (("sluice", sluice["failover"]), ("jetstream", peer["failover"]))
    ]
    consume_rows = [
        {"system": name, **row}
        for name, row in (("sluice", sluice["consume"]), ("jetstream", peer["consume"]))
    ]
    out = [
        "",
        "## Cluster",
        "",
        f"Sluice: {setup['nodes']} nodes and etcd on this machine, replication factor "
        f"{setup['replication_factor']}, min.insync.replicas {setup['min_insync_replicas']}; "
        f"wrk, {setup['connections']} connections, one request in flight each. JetStream: "
        f"{setup['nodes']} nats-server, one stream with {setup['nodes']} replicas "
        f"({setup['jetstream_storage']} store), {setup['jetstream_publishers']} nats-py processes "
        "publishing. The two clusters run one after the other. Medians of "
        f"{setup['rounds']} alternating rounds; `cpu_s_*` are CPU seconds of each process.",
        "",
        f"Machine during the section: load average {machine['load_average_before']} before, "
        f"{machine['load_average_after']} after; CPUs busy {machine['busy_share']:.0%} of the "
        f"time (all processes), steal {machine['steal_share']:.0%}.",
        "",
        "Batching differs: a Sluice request carries a batch of records "
        f"({setup['connections']} connections x batch records in flight); JetStream takes one "
        "message per record, so its clients keep as many records in flight as unacknowledged "
        f"publishes ({setup['connections']} x batch).",
        "",
        "### Targets",
        "",
        *_table(section["targets"], ["figure", "value", "target", "met"]),
        "",
        f"### Produce, {setup['partitions']} partitions, each at its leader",
        "",
        *_table(produce, ["format", "batch", "acks", *rate, *_cpu_columns(produce), "error"]),
        "",
        f"acks=all / acks=1 by round: {sluice['acks_all_to_1_by_round']}.",
        "",
        "### Produce to one partition through its leader or through another node "
        f"(acks={setup['routing_acks']})",
        "",
        *_table(
            routing,
            ["format", "batch", "route", "leader", "node", *rate, *_cpu_columns(routing), "error"],
        ),
        "",
        f"non-leader / leader by round: {sluice['non_leader_to_leader_by_round']}.",
        "",
        "### JetStream publish with acks",
        "",
        *_table(
            peer["produce"],
            [
                "like",
                "window",
                "records_per_s",
                "rounds_records_per_s",
                "generator_cpu_s",
                "server_cpu_s",
                *_cpu_columns(peer["produce"]),
                "error",
            ],
        ),
        "",
        "### Consume (one client process per partition; JetStream: as many on one stream)",
        "",
        *_table(
            consume_rows,
            [
                "system",
                "records",
                "records_per_s",
                "generator_cpu_s",
                "server_cpu_s",
                *_cpu_columns(consume_rows),
                "error",
            ],
        ),
        "",
        "### Reading at a follower: a consumer naming its rack against one at the leader",
        "",
        f"Racks {list(setup.get('racks', []))} (node i in the i-th); one partition, "
        f"{follower_reads.get('rounds', 0)} rounds of one acks=all record through the leader, "
        "both consumers long-polling from its offset, "
        f"{follower_reads.get('pause_s', '')} s between rounds (the cluster quiet, every "
        f"fetch parked). Node {follower_reads.get('follower', '')} (rack "
        f"{follower_reads.get('client_rack', '')}) served "
        f"{_cell(follower_reads.get('follower_bytes_out'))} bytes of the `client_rack` reads; "
        f"server CPU {follower_reads.get('server_cpu_s', '')} s over the cell.",
        "",
        *_table(
            _follower_read_rows(follower_reads), ["read", "p50_ms", "p99_ms", "max_ms", "error"]
        ),
        "",
        "### Failover: SIGKILL of the leader -> first acknowledged write through another node",
        "",
        *_table(failover_rows, ["system", "count", "p50_s", "p99_s", "max_s", "min_s", "error"]),
        "",
    ]
    for row in failover_rows:
        seconds = [t.get("seconds", t.get("error")) for t in row.get("trials", [])]
        out.append(f"- {row['system']} trials (s): {seconds}")
        for killed in (True, False):
            alike = [
                t["seconds"]
                for t in row.get("trials", [])
                if t.get("killed_controller") is killed and "seconds" in t
            ]
            if alike:
                out.append(
                    f"  - {len(alike)} trials where the killed leader was "
                    f"{'' if killed else 'not '}the controller: median "
                    f"{sorted(alike)[(len(alike) - 1) // 2]} s, max {max(alike)} s"
                )
    out += [
        "",
        "### Ratios (same run)",
        "",
        *_table(section["ratios"], ["figure", "numerator", "denominator", "ratio", "better"]),
        "",
        "![cluster](cluster.png)",
    ]
    return "\n".join(out) + "\n"


def plot(section: dict[str, Any], path: Path) -> None:
    """Throughput bars and the failover trials of both systems, in one PNG."""
    figure, (bars, trials) = plt.subplots(1, 2, figsize=(13, 5))
    sluice, peer = section["sluice"], section["jetstream"]
    named: list[tuple[str, dict[str, Any], str]] = [
        *(
            (f"Sluice {r['format']} b{r['batch']} acks={r['acks']}", r, "C0")
            for r in sluice["produce"]
        ),
        *(
            (f"Sluice {r['format']} b{r['batch']} via {r['route']}", r, "C1")
            for r in sluice["routing"]
        ),
        *((f"JetStream publish, {r['window']} in flight", r, "black") for r in peer["produce"]),
        ("Sluice consume", sluice["consume"], "C2"),
        ("JetStream consume", peer["consume"], "dimgray"),
    ]
    shown = [
        (label, row["records_per_s"], color) for label, row, color in named if "error" not in row
    ]
    bars.barh([s[0] for s in shown], [s[1] for s in shown], color=[s[2] for s in shown])
    bars.set_xscale("log")
    bars.set_xlabel("records/s (log)")
    bars.set_title("Three nodes, replication factor 3")
    for x, (name, row) in enumerate(
        (("Sluice", sluice["failover"]), ("JetStream", peer["failover"]))
    ):
        seconds = [t["seconds"] for t in row.get("trials", []) if "seconds" in t]
        trials.plot([x] * len(seconds), seconds, "o", alpha=0.6, label=name)
    trials.axhline(
        TARGET_FAILOVER_P99_S,
        color="red",
        linestyle="--",
        label=f"target p99 < {TARGET_FAILOVER_P99_S} s",
    )
    trials.set_xticks([0, 1], ["Sluice", "JetStream"])
    trials.set_ylabel("SIGKILL of the leader -> first acked write (s)")
    trials.set_title("Failover trials")
    trials.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
