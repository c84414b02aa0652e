"""`python -m loadtests.cluster_bench --rounds N --out FILE` runs the follower-read cell alone on
a cluster of its own and writes its row, with the command, date and load: the reads of a
consumer naming a follower's rack, served by that follower, timed beside the leader's. Speed is
never judged."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_follower_read_cell_runs_alone(tmp_path: Path) -> None:
    out = tmp_path / "follower-reads.json"
    done = subprocess.run(
        [sys.executable, "-m", "loadtests.cluster_bench", "--rounds", "3", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    report = json.loads(out.read_text())
    assert report["command"] == "python -m loadtests.cluster_bench --rounds 3"
    assert report["date"] and len(report["load_average_before"]) == 3
    reads = report["follower_reads"]
    assert "error" not in reads, reads
    assert reads["rounds"] == 3 and reads["follower"] != reads["leader"]
    assert reads["client_rack"] == "abc"[reads["follower"]]
    assert reads["follower_bytes_out"] > 0
    for name in ("produce", "leader", "follower", "follower_after_answer"):
        figures = [reads[f"{name}_{q}_ms"] for q in ("p50", "p99", "max")]
        assert 0 <= figures[0] <= figures[1] <= figures[2], (name, reads)
