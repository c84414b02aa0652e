"""The planners' simulation runs on a tiny cluster and reports every figure (speed is never
asserted)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from loadtests import balance_sim

TINY = ("--nodes", "9", "--racks", "3", "--partitions", "400", "--grown-by", "3")


def run(tmp_path: Path, *args: str) -> Any:
    balance_sim.main([*TINY, "--out", str(tmp_path), *args])
    return json.loads((tmp_path / "balance_sim.json").read_text())


def test_tiny_cluster_is_balanced_decommissioned_and_healed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = run(tmp_path, "--etcd-txns", "0", "--sizes", "zipf")
    printed = capsys.readouterr().out
    plans = report["plans"]
    assert [row["plan"].split(" node")[0] for row in plans] == [
        "balance",
        "decommission",
        "decommission",
        "heal",
    ]
    balance = plans[0]
    assert balance["replica_moves"] > 0 and balance["cpu_s"] >= 0
    assert balance["bytes_to_move"] >= balance["lower_bound_bytes"] > 0
    assert balance["before"]["replicas"][0] == 0.0  # three nodes joined empty
    assert balance["after"]["replicas"][0] > 0
    for row in plans[1:]:
        # each must move every byte the node held, and these move no more
        assert row["bytes_to_move"] >= row["lower_bound_bytes"] > 0
    assert plans[1]["bytes_to_move"] == plans[1]["lower_bound_bytes"]
    etcd = report["etcd"]
    assert etcd["rates"] == {}
    model = etcd["decommission"]
    assert model["partitions_moved"] == plans[2]["partitions_moved"]
    assert 0 < model["txns_best"] <= model["txns_worst"]
    assert "| balance |" in printed and "etcd transactions" in printed


@pytest.mark.skipif(shutil.which("etcd") is None, reason="needs the etcd binary")
def test_etcd_rates_are_measured_and_priced(tmp_path: Path) -> None:
    report = run(tmp_path, "--etcd-txns", "5", "--start", "random", "--racks", "0")
    etcd = report["etcd"]
    for batch in ("1", "60"):
        assert etcd["rates"][batch]["txn_per_s"] > 0
    model = etcd["decommission"]
    assert 0 < model["seconds_best"] <= model["seconds_worst"]
