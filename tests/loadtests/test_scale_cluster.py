"""`python -m loadtests.scale_bench --cluster --quick` writes its report with every figure
it names, each of the right shape: per-node idle CPU and RSS, creation, produce over all
partitions against 10, ISR refill after a restart, failover. Speed is never judged."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
NODES = {"0", "1", "2"}


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("scale-cluster")
    done = subprocess.run(
        [sys.executable, "-m", "loadtests.scale_bench", "--cluster", "--quick", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    report: dict[str, Any] = json.loads((out / "scale-cluster-report.json").read_text())
    return report


def test_every_count_has_every_figure(report: dict[str, Any]) -> None:
    assert report["machine"] and report["load"].startswith("load average")
    rows = report["cluster"]
    assert [row["partitions"] for row in rows] == report["sizes"]["partitions"]
    for row in rows:
        for quiet in ("idle_before_topic", "idle", "idle_after_produce_and_restart"):
            figures = row[quiet]
            assert set(figures["cpu_pct_per_node"]) == set(figures["rss_mib_per_node"]) == NODES
            assert figures["cpu_pct_cluster"] == pytest.approx(
                sum(figures["cpu_pct_per_node"].values()), abs=0.2
            )
            assert all(rss > 0 for rss in figures["rss_mib_per_node"].values())
            assert figures["cpu_pct_etcd"] >= 0  # beside the nodes', not in their sum
        assert 0 < row["create_s"] <= row["ready_s"]


def test_produce_restart_and_failover_are_measured(report: dict[str, Any]) -> None:
    for row in report["cluster"]:
        produced = row["produce"]
        assert produced["wide_records_s"] > 0 and produced["narrow_records_s"] > 0
        assert produced["leader_moves"] >= 0
        assert isinstance(produced["refused_wide"], dict)
        assert produced["ratio"] == pytest.approx(
            produced["wide_records_s"] / produced["narrow_records_s"], abs=0.01
        )
        assert 0 < row["restart"]["isr_full_s"] <= row["restart"]["balanced_s"]
        failover = row["failover"]
        assert failover["node"] != failover["controller"] and failover["led"] > 0
        assert failover["all_led_again_s"] > 0
        assert row["leases_lost"] >= 0
