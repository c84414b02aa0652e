"""`python -m loadtests.bench --quick` runs every scenario and writes every report file.

Figures are never judged here (benchmarks are not tests); only that each scenario produced a
figure with its generator and server CPU, or, for latency under a starved machine, an error.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
PLOTS = ["produce.png", "fetch-consume.png", "latency.png", "partitions.png", "parked-polls.png"]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("bench")
    done = subprocess.run(
        [sys.executable, "-m", "loadtests.bench", "--quick", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    return out, json.loads((out / "bench-report.json").read_text())


def _figure(row: dict[str, Any]) -> None:
    assert "error" not in row, row
    assert row["records_per_s"] > 0
    assert row["generator_cpu_s"] >= 0
    assert row["server_cpu_s"] >= 0


def test_every_output_file_is_written(report: tuple[Path, dict[str, Any]]) -> None:
    out, _ = report
    for name in PLOTS:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    markdown = (out / "bench-report.md").read_text()
    for heading in ("## Produce", "## Fetch", "## Consume", "## End-to-end latency", "## Scaling"):
        assert heading in markdown
    assert "## Sluice / Redis" in markdown


def test_meta_records_machine_and_load(report: tuple[Path, dict[str, Any]]) -> None:
    meta = report[1]["meta"]
    assert meta["quick"] is True
    assert meta["machine"]["nproc"] >= 1
    assert len(meta["machine"]["load_average"]) == 3
    assert meta["command"] == "python -m loadtests.bench --quick"


def test_throughput_scenarios_give_figures_on_both_systems(
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


def test_latency_and_parked_polls_on_both_systems(report: tuple[Path, dict[str, Any]]) -> None:
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


def test_ratios_pair_each_figure_with_redis(report: tuple[Path, dict[str, Any]]) -> None:
    doc = report[1]
    figures = {r["figure"] for r in doc["ratios"]}
    assert any(f.startswith("produce ") for f in figures)
    assert "group consume vs XREADGROUP" in figures
    assert any(f.startswith("latency at ") for f in figures) or all(
        "error" in row["sluice"] or "error" in row["redis"] for row in doc["latency"]
    )
    for ratio in doc["ratios"]:
        assert ratio["ratio"] == pytest.approx(ratio["sluice"] / ratio["redis"], rel=1e-2, abs=1e-3)
    assert [e for e in doc["errors"] if e["scenario"] != "latency"] == []
