"""The reassignment benchmark runs end to end on a tiny cluster (every phase, a few MB and a
few partitions) and reports each figure it promises."""

from __future__ import annotations

import argparse

from loadtests.reassign_bench import run


def test_a_tiny_run_reports_every_figure() -> None:
    report = run(argparse.Namespace(mb=2, throttle_mb=1.0, steady_s=0.5, partitions=12, out=None))
    for phase in ("catch_up", "move", "throttled"):
        assert report[phase]["bytes"] > 0 and report[phase]["seconds"] > 0, report[phase]
    assert report["move_vs_catch_up"] > 0
    assert report["throttled"]["throttle"] == 1_000_000
    latency = report["latency"]
    assert latency["steady"]["requests"] > 0 and latency["p99_ratio"] >= 0
    assert latency["during_throttled_move"]["throttle"] > 0
    balance = report["balance"]
    assert balance["partitions"] == 12 and balance["replicas"][3] > 0, balance
