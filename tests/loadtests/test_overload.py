"""`loadtests.overload --quick`: every request the driver sends is answered (a 200 or a 503
SERVER_OVERLOADED, nothing else), the flood's new connections are served, and every figure is
reported. Speed is never judged here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import uvloop

from loadtests.common import http_json, start_gateway
from loadtests.overload import Phase, drive

REPO = Path(__file__).resolve().parents[2]


def test_quick_run_answers_every_request_and_reports_every_figure(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "loadtests.overload", "--quick", "--connections", "128",
         "--out", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-5000:]
    report = json.loads((tmp_path / "overload.json").read_text())
    for run in [*report["cells"].values(), report["flood"]]:
        for phase in run["phases"]:
            assert phase["sent"] > 0 and phase["unanswered"] == 0, phase
            assert phase["other_statuses"] == {}, phase
            assert phase["admitted"] + phase["shed"] == phase["sent"], phase
        assert run["server_cpu_s"] > 0 and run["peak_rss_mib"] > 0
    fresh = report["flood"]["new_connections"]
    assert fresh["opened"] == fresh["answered"] > 0
    assert set(fresh["statuses"]) <= {200, 503}
    # The gateway and the load generators on separate CPUs, where there are two or more.
    assert report["cpus"].startswith("servers on CPU 0, load generators on CPU") or (
        report["cpus"] == "shared (one CPU)"
    )
    figures = report["figures"]
    assert figures["maximum_per_s"] > 0 and figures["recovery_s"] >= 0
    assert set(figures) >= {
        "open_loop_80_p99_ms", "open_loop_80_cpu_us_per_request", "cpu_ratio_80_to_busy",
        "open_loop_80_of_own_p99_ms", "open_loop_80_of_own_p999_ms",
        "flood_goodput_share", "flood_admitted_p99_ms", "flood_shed", "flood_peak_rss_mib",
    }  # fmt: skip


def test_each_connection_carries_one_produce_before_the_schedule_and_it_is_not_counted(
    tmp_path: Path,
) -> None:
    """The warm-up: every connection is set up in the gateway before the clock starts, and
    its request is neither in the phases nor in the timeline."""
    gateway, url = start_gateway(tmp_path / "data")
    try:
        http_json("POST", f"{url}/v1/topics", {"name": "t", "partitions": 1})
        port = int(url.rsplit(":", 1)[1])
        result = uvloop.run(drive(port, "t", [Phase("steady", 200.0, 0.1)], 8))
        latest = http_json("GET", f"{url}/v1/topics/t/partitions/0/offsets?timestamp=latest")
    finally:
        gateway.terminate()
        gateway.wait(timeout=60)
    (phase,) = result["phases"]
    assert phase["sent"] == phase["admitted"] == 20
    assert sum(bucket["admitted"] for bucket in result["timeline"]) == 20
    assert latest["offset"] == 8 + 20
