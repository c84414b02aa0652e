"""Turn a bench run into Sluice/Redis ratios, PNG plots (matplotlib, Agg) and a markdown summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after use("Agg"): no display on servers and CI

PLOTS = {
    "produce": "produce.png",
    "consume": "fetch-consume.png",
    "latency": "latency.png",
    "partitions": "partitions.png",
    "parked": "parked-polls.png",
}


def _ok(row: dict[str, Any] | None) -> bool:
    return row is not None and "error" not in row


def _ratio(
    figure: str, sluice: dict[str, Any] | None, redis: dict[str, Any] | None, key: str, better: str
) -> dict[str, Any] | None:
    if not (_ok(sluice) and _ok(redis)) or sluice is None or redis is None:
        return None
    a, b = sluice.get(key), redis.get(key)
    if not isinstance(a, int | float) or not isinstance(b, int | float) or not b:
        return None
    return {
        "figure": figure,
        "unit": key,
        "sluice": a,
        "redis": b,
        "ratio": round(a / b, 3),
        "better": better,
    }


def ratios(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Sluice/Redis for every figure both systems produced in this run."""
    out: list[dict[str, Any] | None] = []
    redis_produce = {r["pipeline"]: r for r in doc.get("redis_produce", [])}
    for row in doc.get("produce", []):
        figure = (
            f"produce {row['format']} batch {row['batch']} acks={row['acks']} {row['protocol']}"
        )
        redis = redis_produce.get(row["batch"])
        out.append(_ratio(figure, row, redis, "records_per_s", "higher"))
    for row in doc.get("fetch", []):
        figure = f"fetch {row['format']} {row['protocol']} vs XRANGE COUNT 1000"
        out.append(_ratio(figure, row, doc.get("redis_fetch"), "records_per_s", "higher"))
    consume = doc.get("consume", {})
    for fmt in ("json", "binary"):
        out.append(
            _ratio(
                f"per-partition fetch ({fmt}) vs XREAD",
                consume.get(f"partition_fetch_{fmt}"),
                consume.get("redis_xread"),
                "records_per_s",
                "higher",
            )
        )
    out.append(
        _ratio(
            "group consume vs XREADGROUP",
            consume.get("group_consume"),
            consume.get("redis_xreadgroup"),
            "records_per_s",
            "higher",
        )
    )
    for row in doc.get("latency", []):
        for key in ("p50_ms", "p99_ms", "p999_ms"):
            figure = f"latency at {row.get('rate')} records/s"
            out.append(_ratio(figure, row.get("sluice"), row.get("redis"), key, "lower"))
    for row in doc.get("partitions", []):
        figure = f"produce to {row['partitions']} partitions / streams"
        out.append(_ratio(figure, row["sluice"], row["redis"], "records_per_s", "higher"))
    parked = doc.get("parked", {})
    if _ok(parked.get("sluice")) and _ok(parked.get("redis")):
        for a, b in zip(parked["sluice"]["steps"], parked["redis"]["steps"], strict=False):
            figure = f"memory per parked poll, {a['polls']} parked"
            out.append(_ratio(figure, a, b, "bytes_per_parked_poll", "lower"))
    return [r for r in out if r is not None]


def _save(figure: Any, path: Path) -> None:
    figure.tight_layout()
    figure.savefig(path, dpi=110, bbox_inches="tight")  # long labels stay whole
    plt.close(figure)


def plots(doc: dict[str, Any], out: Path) -> None:
    """Five PNGs; a scenario with no figures still gets a plot that says so."""
    _plot_produce(doc, out / PLOTS["produce"])
    _plot_consume(doc, out / PLOTS["consume"])
    _plot_latency(doc, out / PLOTS["latency"])
    _plot_partitions(doc, out / PLOTS["partitions"])
    _plot_parked(doc, out / PLOTS["parked"])


def _plot_produce(doc: dict[str, Any], path: Path) -> None:
    rows = [r for r in doc.get("produce", []) if _ok(r)]
    groups = sorted({(r["format"], r["batch"]) for r in rows}, key=lambda g: (g[1], g[0]))
    series = sorted({(r["protocol"], r["acks"]) for r in rows})
    redis = {r["pipeline"]: r for r in doc.get("redis_produce", []) if _ok(r)}
    figure, axes = plt.subplots(figsize=(11, 5))
    width = 0.8 / (len(series) + 1)
    for i, (protocol, acks) in enumerate(series):
        values = [
            next(
                (
                    r["records_per_s"]
                    for r in rows
                    if (r["format"], r["batch"], r["protocol"], r["acks"]) == (*g, protocol, acks)
                ),
                0,
            )
            for g in groups
        ]
        axes.bar(
            [x + i * width for x in range(len(groups))],
            values,
            width,
            label=f"Sluice {protocol} acks={acks}",
        )
    axes.bar(
        [x + len(series) * width for x in range(len(groups))],
        [redis[g[1]]["records_per_s"] if g[1] in redis else 0 for g in groups],
        width,
        label="Redis XADD (pipeline = batch)",
        color="black",
    )
    axes.set_xticks([x + 0.4 - width / 2 for x in range(len(groups))])
    axes.set_xticklabels([f"{f}\nbatch {b}" for f, b in groups])
    axes.set_yscale("log")
    axes.set_ylabel("records/s (log)")
    axes.set_title("Produce throughput")
    axes.legend(fontsize=7, ncol=2)
    _save(figure, path)


def _plot_consume(doc: dict[str, Any], path: Path) -> None:
    bars: list[tuple[str, float]] = []
    for r in doc.get("fetch", []):
        if _ok(r):
            bars.append(
                (f"Sluice fetch {r['format']} {r['protocol']} (compiled)", r["records_per_s"])
            )
    if _ok(doc.get("redis_fetch")):
        bars.append(("Redis XRANGE COUNT 1000 (compiled)", doc["redis_fetch"]["records_per_s"]))
    names = {
        "partition_fetch_json": "Sluice per-partition fetch JSON",
        "partition_fetch_binary": "Sluice per-partition fetch binary",
        "group_consume": "Sluice group consume",
        "redis_xread": "Redis XREAD BLOCK",
        "redis_xreadgroup": "Redis XREADGROUP + XACK",
        "redis_xreadgroup_compiled": "Redis XREADGROUP, one stream",
    }
    consume = doc.get("consume", {})
    for key, label in names.items():
        if _ok(consume.get(key)):
            client = "compiled" if key.endswith("compiled") else "Python clients"
            bars.append((f"{label} ({client})", consume[key]["records_per_s"]))
    figure, axes = plt.subplots(figsize=(10, 5))
    axes.barh(
        [b[0] for b in bars],
        [b[1] for b in bars],
        color=["black" if "Redis" in b[0] else "C0" for b in bars],
    )
    axes.set_xscale("log")
    axes.set_xlabel("records/s (log)")
    axes.set_title("Fetch and consume throughput" + ("" if bars else " (no figures)"))
    _save(figure, path)


def _plot_latency(doc: dict[str, Any], path: Path) -> None:
    figure, axes = plt.subplots(figsize=(8, 5))
    rows = [r for r in doc.get("latency", []) if "rate" in r]
    for system, style in (("sluice", "-"), ("redis", "--")):
        for key, marker in (("p50_ms", "o"), ("p99_ms", "s"), ("p999_ms", "^")):
            points = [
                (r["rate"], r[system][key]) for r in rows if _ok(r.get(system)) and key in r[system]
            ]
            if points:
                axes.plot(
                    *zip(*points, strict=True), style, marker=marker, label=f"{system} {key[:-3]}"
                )
    axes.set_yscale("log")
    axes.set_xlabel("offered single-record produce rate (records/s, open loop)")
    axes.set_ylabel("produce -> long-poll consumer latency (ms, log)")
    axes.set_title("End-to-end latency")
    axes.legend(fontsize=8)
    _save(figure, path)


def _plot_partitions(doc: dict[str, Any], path: Path) -> None:
    figure, axes = plt.subplots(figsize=(8, 5))
    rows = doc.get("partitions", [])
    for system, label in (
        ("sluice", "Sluice (JSON, batch 100, acks=1)"),
        ("redis", "Redis XADD (pipeline 100)"),
    ):
        points = [(r["partitions"], r[system]["records_per_s"]) for r in rows if _ok(r[system])]
        if points:
            axes.plot(*zip(*points, strict=True), marker="o", label=label)
    axes.set_xscale("log")
    axes.set_xlabel("partitions (Redis: streams)")
    axes.set_ylabel("records/s")
    axes.set_title("Produce throughput against partitions")
    axes.legend()
    _save(figure, path)


def _plot_parked(doc: dict[str, Any], path: Path) -> None:
    figure, axes = plt.subplots(figsize=(8, 5))
    parked = doc.get("parked", {})
    for system, label in (
        ("sluice", "Sluice long-poll (HTTP/1.1 connection each)"),
        ("redis", "Redis XREAD BLOCK client"),
    ):
        row = parked.get(system)
        if _ok(row):
            steps = row["steps"]
            axes.plot(
                [s["polls"] for s in steps],
                [s["bytes_per_parked_poll"] for s in steps],
                marker="o",
                label=label,
            )
    axes.set_xscale("log")
    axes.set_xlabel("parked polls")
    axes.set_ylabel("server RSS growth per parked poll (bytes)")
    axes.set_title("Memory per parked long-poll")
    axes.legend()
    _save(figure, path)


def _table(rows: list[dict[str, Any]], columns: list[str]) -> list[str]:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        cells = [row.get("error", "") if c == "error" else row.get(c, "") for c in columns]
        lines.append(
            "| " + " | ".join(f"{c:,}" if isinstance(c, int) else str(c) for c in cells) + " |"
        )
    return lines


def markdown(doc: dict[str, Any]) -> str:
    """The summary: machine, every figure with its CPU, the ratios, the errors, the plots."""
    meta = doc["meta"]
    machine = meta["machine"]
    rate_cols = [
        "records_per_s",
        "payload_mb_per_s",
        "requests_per_s",
        "generator_cpu_s",
        "server_cpu_s",
        "error",
    ]
    out = [
        "# Sluice benchmark report",
        "",
        f"Command: `{meta['command']}`; date {meta['date']}; {meta['wall_seconds']} s.",
        f"Machine: {machine['nproc']} cores ({machine['cpu_model']}), Linux {machine['kernel']}, "
        f"Python {machine['python']}; load average before {machine['load_average']}, "
        f"after {meta['load_average_after']}.",
        f"Tools: {', '.join(f'{k} `{v}`' for k, v in machine['tools'].items())}.",
        f"Every record carries a {meta['record_value_bytes']}-byte value; "
        "`*_cpu_s` are CPU seconds of the load generator and of the server during that figure.",
        "",
        "## Produce",
        "",
        *_table(doc.get("produce", []), ["format", "batch", "acks", "protocol", *rate_cols]),
        "",
        "Redis Streams, pipelined XADD (redis-benchmark, pipeline = batch size):",
        "",
        *_table(doc.get("redis_produce", []), ["pipeline", *rate_cols]),
        "",
        "## Fetch (compiled generators)",
        "",
        *_table(doc.get("fetch", []), ["format", "protocol", *rate_cols]),
        *_table([doc["redis_fetch"]] if "redis_fetch" in doc else [], ["command", *rate_cols])[2:],
        "",
        "## Consume (Python client processes, same data)",
        "",
    ]
    consume = doc.get("consume", {})
    rows = [{"consumer": k, **v} for k, v in consume.items() if isinstance(v, dict)]
    out += _table(
        rows, ["consumer", "records_per_s", "seconds", "generator_cpu_s", "server_cpu_s", "error"]
    )
    if "group_to_partition_fetch" in consume:
        out += [
            "",
            "Group consume / per-partition fetch (JSON), medians of alternating rounds: "
            f"**{consume['group_to_partition_fetch']}** (the goal: ≥ 0.70); by round: "
            f"{consume.get('group_to_partition_fetch_by_round', [])}.",
        ]
    out += ["", "## End-to-end latency (open loop)", ""]
    latency_rows = []
    for row in doc.get("latency", []):
        for system in ("sluice", "redis"):
            if system in row:
                latency_rows.append(
                    {"system": system, "share_of_max": row["share_of_max"], **row[system]}
                )
    out += _table(
        latency_rows,
        [
            "system",
            "share_of_max",
            "rate",
            "achieved_rate",
            "p50_ms",
            "p99_ms",
            "p999_ms",
            "max_ms",
            "send_late_p99_ms",
            "generator_cpu_s",
            "server_cpu_s",
            "error",
        ],
    )
    out += ["", "## Scaling", ""]
    partition_rows = [
        {"system": s, "partitions": r["partitions"], **r[s]}
        for r in doc.get("partitions", [])
        for s in ("sluice", "redis")
    ]
    out += _table(partition_rows, ["system", "partitions", *rate_cols])
    out.append("")
    for system, row in doc.get("parked", {}).items():
        steps = [{"system": system, **s} for s in row.get("steps", [])] or [
            {"system": system, **row}
        ]
        out += _table(
            steps, ["system", "polls", "rss_delta_bytes", "bytes_per_parked_poll", "error"]
        )
        if "server_cpu_s" in row:
            out += [
                "",
                f"CPU over all steps: generator {row['generator_cpu_s']} s, "
                f"server {row['server_cpu_s']} s.",
            ]
        out.append("")
    out += ["## Sluice / Redis", ""]
    out += _table(doc.get("ratios", []), ["figure", "unit", "sluice", "redis", "ratio", "better"])
    out += ["", "## Errors", ""]
    out += [f"- {e}" for e in doc.get("errors", [])] or ["none"]
    out += ["", "## Plots", ""]
    out += [f"![{name}]({file})" for name, file in PLOTS.items()]
    return "\n".join(out) + "\n"


def plot_ratios(figures: list[dict[str, Any]], title: str, path: Path) -> None:
    """One bar per figure (`figure`, `value`, `target`), each with its target as a tick: the
    goal figures whose units differ (ratios, records/s) are drawn as value / target."""
    names = [f["figure"] for f in figures]
    shares = [f["value"] / f["target"] if f["target"] else 0.0 for f in figures]
    figure, axes = plt.subplots(figsize=(9, 1.2 + 0.6 * len(figures)))
    colours = ["tab:green" if share >= 1 else "tab:red" for share in shares]
    axes.barh(range(len(names)), shares, color=colours)
    axes.axvline(1.0, color="black", linewidth=1)
    axes.set_yticks(range(len(names)))
    axes.set_yticklabels(names, fontsize=7)
    axes.invert_yaxis()
    for i, f in enumerate(figures):
        axes.text(
            shares[i], i, f"  {f['value']:,} (target {f['target']:,})", va="center", fontsize=7
        )
    axes.set_xlabel("this run / target (1 = met)")
    axes.set_title(title)
    _save(figure, path)
