"""`python -m loadtests.workers_bench --quick` compares --workers 1 and 2 and writes its report.

Figures are never judged here (benchmarks are not tests): only that every scenario has a
figure for both servers, with the CPU both sides really spent, and each worker's share.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = {
    "produce_binary_1000",
    "fetch_json_1000",
    "produce_one_record",
    "produce_one_record_to_partition",
}


@pytest.mark.skipif(
    not (shutil.which("h2load") and shutil.which("etcd")), reason="needs h2load and etcd"
)
def test_quick_run_reports_both_servers_with_their_cpu(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "loadtests.workers_bench", "--quick", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    doc = json.loads((tmp_path / "workers-report.json").read_text())
    assert (tmp_path / "workers.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| produce_binary_1000 | **2 / 1** |" in (tmp_path / "workers-report.md").read_text()
    meta = doc["meta"]
    assert meta["quick"] is True and meta["command"].endswith("--quick")
    assert "h2load on CPU" in meta["placement"]
    assert set(doc["scenarios"]) == SCENARIOS
    assert len(doc["rounds"]) == meta["rounds"] == 1
    for row in doc["scenarios"].values():
        assert row["ratio"] > 0 and row["round_ratios"] == [row["ratio"]]
        for workers in (1, 2):
            cell = row[str(workers)]
            assert cell["records_per_s"] > 0 and cell["failures"] == 0
            assert cell["server_cpu_s"] > 0 and cell["generator_cpu_s"] > 0
            assert cell["server_cpu_s_per_million_records"] > 0
            assert cell["other_processes_cpu_s"] >= 0
            assert [w["worker"] for w in cell["workers"]] == list(range(workers))
            assert sum(w["cpu_s"] for w in cell["workers"]) > 0
