"""`loadtests.queue_push_bench --quick`: the backlog is delivered, the search for the maximum
sustained rate ends on a rate delivery kept pace with, and the latency cell delivers every
record it produced once, with its delays, the gateway's CPU and the machine's stalls. Speed is
never judged here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from loadtests.queue_push_bench import GOAL_P99_MS, QUICK, produce_request

REPO = Path(__file__).resolve().parents[2]


def test_quick_run_reports_the_maximum_and_the_latency(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "loadtests.queue_push_bench", "--quick", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    doc = json.loads((tmp_path / "queue-push.json").read_text())
    assert doc["backlog"]["records"] == QUICK.backlog  # each record once
    search = doc["sustained"]
    kept = [p["rate"] for p in search["probes"] if p["kept_up"]]
    assert search["records_per_s"] == max(kept)
    latency = doc["latency"]
    assert latency["rate"] == round(search["records_per_s"] / 2)
    assert latency["sent"] == latency["answered"] == latency["delivered"] > 0
    assert latency["each_once"] and not latency["failures"]
    figures = latency["latency"]
    assert 0 < figures["p50_ms"] <= figures["p99_ms"] <= figures["p999_ms"] <= figures["max_ms"]
    assert latency["met"] == (figures["p99_ms"] <= GOAL_P99_MS)
    assert latency["gateway_cpu_s"] > 0 and latency["gateway_run_queue_s"] >= 0
    assert set(latency["stalls"]) == {f"cpu{c}" for c in sorted(os.sched_getaffinity(0))}
    assert "| first delivery |" in (tmp_path / "queue-push.md").read_text()


def test_a_produce_carries_its_scheduled_send_time_in_a_header() -> None:
    request = produce_request("t", 3, 1_795_910_476_577.25)
    head, _, body = request.partition(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/topics/t/partitions/3/records HTTP/1.1\r\n")
    assert f"Content-Length: {len(body)}".encode() in head
    (record,) = json.loads(body)["records"]
    assert record["headers"] == {"sent": "1795910476577.250"}
