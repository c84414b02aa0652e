"""`python -m loadtests.bench --quick` runs every scenario and writes every report file.

Figures are never judged here (benchmarks are not tests); only that each scenario produced a
figure with its generator and server CPU, or, for latency under a starved machine, an error.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loadtests import cluster_bench

REPO = Path(__file__).resolve().parents[2]
PLOTS = ["produce.png", "fetch-consume.png", "latency.png", "partitions.png", "parked-polls.png"]
# Without these the cluster section must still be there, as error rows that say what is missing.
CLUSTER_TOOLS = all(shutil.which(tool) for tool in ("etcd", "nats-server"))


def _quick_bench(out: Path) -> tuple[Path, dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "loadtests.bench", "--quick", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    (out / "stdout.txt").write_text(done.stdout)
    (out / "stderr.txt").write_text(done.stderr)
    return out, json.loads((out / "bench-report.json").read_text())


def _figure(row: dict[str, Any]) -> None:
    """A figure, and CPU that both sides really spent: no more than every core of the machine
    over the cell (plus the tools' start-up), and more than nothing once the cell lasted long
    enough for /proc's 10 ms ticks to see it."""
    assert "error" not in row, row
    assert row["records_per_s"] > 0
    seconds = row.get("seconds", 0)
    ceiling = (seconds + 5) * (os.cpu_count() or 1)
    for side in ("generator_cpu_s", "server_cpu_s"):
        assert 0 <= row[side] <= ceiling, (side, row)
        if seconds >= 0.5:
            assert row[side] > 0, (side, row)


def _every_output_file_is_written(report: tuple[Path, dict[str, Any]]) -> None:
    out, _ = report
    for name in PLOTS:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    markdown = (out / "bench-report.md").read_text()
    for heading in ("## Produce", "## Fetch", "## Consume", "## End-to-end latency", "## Scaling"):
        assert heading in markdown
    assert "## Sluice / Redis" in markdown


def _progress_is_plain_lines_on_a_pipe(report: tuple[Path, dict[str, Any]]) -> None:
    """stderr piped: `scenario i of n` as each starts, a line as each ends (and every 10 s at
    most in between); stdout keeps only the closing line."""
    out = report[0]
    names = ["produce", "fetch", "consume", "latency", "scaling", "cluster"]
    lines = (out / "stderr.txt").read_text().splitlines()
    starts = [line for line in lines if line.startswith("bench: scenario ")]
    assert starts == [f"bench: scenario {i} of 6: {name}" for i, name in enumerate(names, 1)]
    counts = [int(m[1]) for line in lines if (m := re.match(r"bench: (\d) of 6 scenarios", line))]
    assert counts == sorted(counts) and set(range(1, 7)) <= set(counts)
    assert any(line.startswith("bench: 6 of 6 scenarios (100%)") for line in lines)
    assert (out / "stdout.txt").read_text().startswith(f"wrote {out}/bench-report.json")


def _meta_records_machine_and_load(report: tuple[Path, dict[str, Any]]) -> None:
    meta = report[1]["meta"]
    assert meta["quick"] is True
    assert meta["machine"]["nproc"] >= 1
    assert len(meta["machine"]["load_average"]) == 3
    assert meta["command"] == "python -m loadtests.bench --quick"


def _throughput_scenarios_give_figures_on_both_systems(
    report: tuple[Path, dict[str, Any]],
) -> None:
    doc = report[1]
    formats = {row["format"] for row in doc["produce"]}
    protocols = {row["protocol"] for row in doc["produce"]}
    assert formats == {"json", "ndjson", "binary"}
    assert protocols == {"http/1.1", "h2c"}
    for row in [*doc["produce"], *doc["redis_produce"], *doc["fetch"], doc["redis_fetch"]]:
        _figure(row)
    consume = doc["consume"]
    for key in (
        "partition_fetch_json",
        "partition_fetch_binary",
        "group_consume",
        "redis_xread",
        "redis_xreadgroup",
        "redis_xreadgroup_compiled",
    ):
        _figure(consume[key])
    assert consume["group_to_partition_fetch"] > 0
    for row in doc["partitions"]:
        _figure(row["sluice"])
        _figure(row["redis"])


def _latency_and_parked_polls_on_both_systems(report: tuple[Path, dict[str, Any]]) -> None:
    doc = report[1]
    assert [row["share_of_max"] for row in doc["latency"]] == [0.1, 0.5, 0.9]
    for row in doc["latency"]:
        for system in ("sluice", "redis"):
            cell = row[system]
            if "error" in cell:  # a starved machine may not drain in time: not a speed verdict
                assert "arrived" in cell["error"], cell
            else:
                assert cell["p50_ms"] <= cell["p99_ms"] <= cell["p999_ms"]
    for system in ("sluice", "redis"):
        steps = doc["parked"][system]["steps"]
        assert [s["polls"] for s in steps] == [1, 100]


def _ratios_pair_each_figure_with_redis(report: tuple[Path, dict[str, Any]]) -> None:
    doc = report[1]
    figures = {r["figure"] for r in doc["ratios"]}
    assert any(f.startswith("produce ") for f in figures)
    assert "group consume vs XREADGROUP" in figures
    assert any(f.startswith("latency at ") for f in figures) or all(
        "error" in row["sluice"] or "error" in row["redis"] for row in doc["latency"]
    )
    for ratio in doc["ratios"]:
        assert ratio["ratio"] == pytest.approx(ratio["sluice"] / ratio["redis"], rel=1e-2, abs=1e-3)
    assert [
        e
        for e in doc["errors"]
        if e["scenario"] != "latency" and not e["scenario"].startswith("cluster")
    ] == []


def _cluster_figure(row: dict[str, Any]) -> None:
    """A figure with every process's CPU seconds, or (only without etcd or nats-server) an
    error row."""
    if "error" in row:
        assert not CLUSTER_TOOLS, row
        assert row["error"], row
        return
    _figure(row)
    assert [key for key in row if key.startswith("cpu_s_")], row


def _cluster_section_has_every_figure(report: tuple[Path, dict[str, Any]]) -> None:
    out, doc = report
    cluster = doc["cluster"]
    sluice, jetstream = cluster["sluice"], cluster["jetstream"]
    assert (out / "cluster.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "## Cluster" in (out / "bench-report.md").read_text()
    assert cluster["setup"]["replication_factor"] == 3
    assert cluster["setup"]["min_insync_replicas"] == 2
    assert {(r["format"], r["acks"]) for r in sluice["produce"]} == {
        (fmt, acks) for fmt in ("binary", "json") for acks in ("1", "all")
    }
    assert {(r["format"], r["route"]) for r in sluice["routing"]} == {
        (fmt, route) for fmt in ("binary", "json") for route in ("leader", "non-leader")
    }
    assert {r["window"] for r in jetstream["produce"]} == {8 * 1000, 8 * 100}
    for row in [*sluice["produce"], *sluice["routing"], *jetstream["produce"]]:
        _cluster_figure(row)
    for system in (sluice, jetstream):
        _cluster_figure(system["consume"])
        failover = system["failover"]
        if "error" in failover:  # a trial past its deadline on a starved machine: no figure
            assert not CLUSTER_TOOLS or "trials failed" in failover["error"], failover
            continue
        assert failover["count"] == len(failover["trials"]) == cluster_bench.QUICK.failover_trials
        assert 0 < failover["p50_s"] <= failover["p99_s"] <= failover["max_s"] < 30
        for trial in failover["trials"]:
            assert trial["killed"] != trial["new_leader"], trial


def _cluster_ratios_come_from_the_same_run(report: tuple[Path, dict[str, Any]]) -> None:
    cluster = report[1]["cluster"]
    produce = {(r["format"], r["acks"]): r for r in cluster["sluice"]["produce"]}
    by_figure = {r["figure"]: r for r in cluster["ratios"]}
    for ratio in cluster["ratios"]:
        assert ratio["ratio"] == pytest.approx(
            ratio["numerator"] / ratio["denominator"], rel=1e-2, abs=1e-3
        )
    if all("error" not in produce[("binary", acks)] for acks in ("1", "all")):
        acks = by_figure["acks=all / acks=1, binary batch 1000"]
        assert acks["numerator"] == produce[("binary", "all")]["records_per_s"]
        assert acks["denominator"] == produce[("binary", "1")]["records_per_s"]
    if CLUSTER_TOOLS:
        assert any(f.startswith("Sluice / JetStream, acks=all produce") for f in by_figure)
        assert "Sluice / JetStream, consume" in by_figure
    targets = cluster["targets"]
    assert len(targets) == 6
    bounds = {"< 3.0": lambda v: v < 3, ">= 0.7": lambda v: v >= 0.7, "<= 50": lambda v: v <= 50}
    for target in targets:
        assert target["met"] == (
            target["value"] is not None and bounds[target["target"]](target["value"])
        )


def _follower_reads_are_timed_beside_leader_reads(report: tuple[Path, dict[str, Any]]) -> None:
    """The client_rack consumer's reads were served by the follower and timed, as the leader
    consumer's were, from each produce's send and answer; or (without etcd) an error row."""
    out, doc = report
    reads = doc["cluster"]["sluice"]["follower_reads"]
    if "error" in reads:
        assert not CLUSTER_TOOLS, reads
        return
    assert reads["rounds"] == 10 and reads["follower"] != reads["leader"]
    assert reads["client_rack"] == doc["cluster"]["setup"]["racks"][reads["follower"]]
    assert reads["follower_bytes_out"] > 0
    for name in ("produce", "leader", "follower", "follower_after_answer"):
        figures = [reads[f"{name}_{q}_ms"] for q in ("p50", "p99", "max")]
        assert 0 <= figures[0] <= figures[1] <= figures[2], (name, reads)
    assert "### Reading at a follower" in (out / "bench-report.md").read_text()


CHECKS = [
    _every_output_file_is_written,
    _progress_is_plain_lines_on_a_pipe,
    _meta_records_machine_and_load,
    _throughput_scenarios_give_figures_on_both_systems,
    _latency_and_parked_polls_on_both_systems,
    _ratios_pair_each_figure_with_redis,
    _cluster_section_has_every_figure,
    _cluster_ratios_come_from_the_same_run,
    _follower_reads_are_timed_beside_leader_reads,
]


def test_one_quick_bench_run_passes_every_check(tmp_path: Path, subtests: pytest.Subtests) -> None:
    """One test, each check a subtest: the bench (a minute and more) runs once whichever
    xdist process takes it, where a module fixture ran once in each process given a test."""
    report = _quick_bench(tmp_path)
    for check in CHECKS:
        with subtests.test(check.__name__.lstrip("_")):
            check(report)
