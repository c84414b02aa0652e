"""`loadtests.request_cost`, `loadtests.auth_bench` and `loadtests.answer_floor` in their quick
modes: every cell gives a figure with the CPU both sides spent, and each ratio is computed from
the same run. Speed is never judged here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.api.admission import Admission
from gateway.api.fast_answer import problem_answer
from gateway.settings import Settings
from loadtests.answer_floor import CANNED, CELLS, OPEN_CONNECTIONS, flood_bound, nginx_config
from loadtests.floor_server import LISTEN_BACKLOG
from loadtests.rows import judged

REPO = Path(__file__).resolve().parents[2]


def _quick(module: str, out: Path, report: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", module, "--quick", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    doc: dict[str, Any] = json.loads((out / report).read_text())
    return doc


def _spent(row: dict[str, Any]) -> None:
    assert row["records_per_s"] > 0, row
    assert row["generator_cpu_s"] > 0, row
    assert row["server_cpu_s"] > 0, row


def test_request_cost_reports_every_cell_and_target(tmp_path: Path) -> None:
    doc = _quick("loadtests.request_cost", tmp_path, "request-cost.json")
    assert (tmp_path / "request-cost.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    cells = {(c["what"], c["protocol"], c["connections"]): c for c in doc["cells"]}
    assert set(cells) == {
        ("healthz", "http/1.1", 64),
        ("produce", "http/1.1", 64),
        ("healthz", "h2c", 64),
        ("produce", "h2c", 64),
        ("produce", "http/1.1", 256),
        ("floor", "http/1.1", 256),
        ("xadd", "resp", 64),
        *(
            (what, protocol, 8)
            for what in ("produce binary 1000", "fetch binary 1000", "fetch json 1000")
            for protocol in ("http/1.1", "h2c")
        ),
    }
    for cell in cells.values():
        _spent(cell)
        assert not cell["failures"], cell  # the bare Protocol answered every request too
    # The servers apart from the generators, where there are two or more CPUs.
    assert doc["cpus"].startswith("servers on CPU 0, load generators on CPU") or (
        doc["cpus"] == "shared (one CPU)"
    )
    share = doc["floor_share"]
    produce, floor = cells[("produce", "http/1.1", 256)], cells[("floor", "http/1.1", 256)]
    assert share["produce_over_floor_rate"] == pytest.approx(
        produce["requests_per_s"] / floor["requests_per_s"], abs=1e-3
    )
    for key, row in (("produce", produce), ("floor", floor)):
        spent = row["server_cpu_s"] / row["requests"] * 1e6
        assert share[f"{key}_server_us_per_request"] == pytest.approx(spent, abs=0.1)
    for what, protocol, connections in cells:
        if what.startswith("produce"):  # the gateway's own counters: every request was written
            assert cells[(what, protocol, connections)]["requests_per_write"] >= 1
    for what in ("produce binary 1000", "fetch binary 1000", "fetch json 1000"):
        bulk = cells[(what, "h2c", 8)]
        assert bulk["records_per_s"] == pytest.approx(bulk["requests_per_s"] * 1000, rel=1e-3)
        [judged] = [t for t in doc["targets"] if t["figure"].startswith(what)]
        assert judged["value"] == pytest.approx(
            bulk["requests_per_s"] / cells[(what, "http/1.1", 8)]["requests_per_s"], abs=1e-3
        )
    ratio = doc["targets"][0]
    assert ratio["value"] == pytest.approx(
        cells[("produce", "http/1.1", 64)]["requests_per_s"]
        / cells[("healthz", "http/1.1", 64)]["requests_per_s"],
        abs=1e-3,
    )
    assert [t["met"] for t in doc["targets"]] == [t["value"] >= t["target"] for t in doc["targets"]]


def test_auth_bench_compares_the_same_cells_with_and_without_auth(tmp_path: Path) -> None:
    doc = _quick("loadtests.auth_bench", tmp_path, "auth-bench.json")
    assert (tmp_path / "auth-bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [c["cell"] for c in doc["cells"]] == [
        "healthz, http/1.1, 64 connections",
        "produce json 1, http/1.1, 64 connections",
        "produce json 1, h2c, 64 connections",
        "produce binary 1000, http/1.1, 8 connections",
        "fetch json 1000, http/1.1, 8 connections",
    ]
    for cell in doc["cells"]:
        assert cell["tree"] == "after"
        for side in ("open", "auth"):
            _spent(cell[side])
            assert not cell[side]["failures"], cell  # authenticated and authorised, every one
        assert cell["ratio"] == pytest.approx(
            cell["auth"]["requests_per_s"] / cell["open"]["requests_per_s"], abs=1e-3
        )
    assert [t["met"] for t in doc["targets"]] == [t["value"] >= t["target"] for t in doc["targets"]]


def test_rest_proxy_bench_reports_rates_cpu_and_ratios(tmp_path: Path) -> None:
    """Every cell of `loadtests.rest_proxy_bench` has its rate and the gateway's CPU per
    record, and each v2/v1 ratio is computed from the same run's cells."""
    doc = _quick("loadtests.rest_proxy_bench", tmp_path, "rest-proxy.json")
    cells = {(c["what"], c["api"]): c for c in doc["cells"]}
    assert set(cells) == {
        ("produce 100", "v1"),
        ("produce 100", "v2"),
        ("consumer read", "v1"),
        ("consumer read", "v2"),
        ("produce 1", "v2"),
    }
    for cell in cells.values():
        assert cell["records_per_s"] > 0 and cell["server_us_per_record"] >= 0, cell
    ratios = doc["v2_over_v1"]["after"]
    for what in ("produce 100", "consumer read"):
        v1, v2 = cells[(what, "v1")], cells[(what, "v2")]
        assert ratios[what]["rate"] == pytest.approx(
            v2["records_per_s"] / v1["records_per_s"], abs=0.01
        )
        if v2["server_us_per_record"]:  # a read too short for the CPU clock has no ratio
            assert ratios[what]["cpu"] == pytest.approx(
                v1["server_us_per_record"] / v2["server_us_per_record"], abs=0.01
            )
    assert cells[("produce 100", "v2")]["server_us_per_record"] > 0


def test_a_figure_is_judged_as_the_report_shows_it() -> None:
    rows = judged([("at the goal once rounded", 0.89996, 0.9), ("short", 0.8994, 0.9)])
    assert [(r["value"], r["met"]) for r in rows] == [(0.9, True), (0.899, False)]


def test_answer_floor_measures_every_server_and_bounds_from_the_same_run(tmp_path: Path) -> None:
    """nginx, the Python floor, the gateway's refusal and its produce each answer and cost
    the server CPU; the refusal cells' answers are refusals the gateway counted; the bounds
    are computed from this run's cells; the open-loop cells offer 150% of the produce's rate
    over 1,024 connections to the servers that refuse or answer at once."""
    doc = _quick("loadtests.answer_floor", tmp_path, "answer-floor.json")
    cells = {(c["server"], c["protocol"], c["connections"]): c for c in doc["cells"]}
    assert set(cells) == {
        (server, protocol, connections)
        for server in ("nginx", "python floor", "refusal", "produce")
        for protocol in ("http/1.1", "h2c")
        for connections in (64, 1024)
        if not (server == "python floor" and protocol == "h2c")
    }
    for (server, _, _), cell in cells.items():
        assert cell["answers"] > 0 and cell["server_cpu_s"] > 0, cell
        assert cell["server_us_per_answer"] == pytest.approx(
            cell["server_cpu_s"] / cell["answers"] * 1e6, abs=0.01
        )
        if server == "refusal":  # all but the odd admitted produce
            assert cell["refused"] > 0.9 * cell["answers"], cell
        else:
            assert cell["refused"] == 0, cell
    for bound in doc["bounds"]:
        n = bound["connections"]
        us = {k[:2]: c["server_us_per_answer"] for k, c in cells.items() if k[2] == n}
        share = us[("refusal", "http/1.1")] / us[("produce", "http/1.1")]
        assert bound["refusal_over_produce"] == pytest.approx(share, abs=1e-3)
        assert bound["flood_bound_with_refusals"] == pytest.approx(flood_bound(share), abs=1e-3)
        extra = us[("nginx", "h2c")] - us[("nginx", "http/1.1")]
        assert bound["nginx_h2c_extra_us"] == pytest.approx(extra, abs=0.01)
    produce = cells[("produce", "http/1.1", 64)]["answers_per_s"]
    opened = {row["server"]: row for row in doc["open_loop"]}
    assert set(opened) == {"nginx", "python floor", "refusal"}
    for server, row in opened.items():  # a flood's rate, all of it answered
        assert row["offered_per_s"] == pytest.approx(1.5 * produce, rel=1e-3)
        assert row["connections"] == 1024 and row["unanswered"] == 0, row
        assert row["answers"] > 0 and row["server_us_per_answer"] > 0, row
        assert (row["refused"] > 0.9 * row["answers"]) == (server == "refusal"), row


def test_nginx_answers_with_a_body_as_long_as_the_gateways_refusal() -> None:
    refusal = Admission(Settings(data_dir=Path("unused"))).refusal()
    assert len(CANNED) == len(problem_answer(refusal).body)


def test_nginx_queues_every_connection_a_cell_opens_at_once(tmp_path: Path) -> None:
    """With nginx's default listen queue (511) some of a cell's 1,024 connections were dropped
    and opened after h2load's duration, and h2load never ended."""
    listens = [
        line.split()
        for line in nginx_config(tmp_path, 1, 2).read_text().splitlines()
        if line.strip().startswith("listen ")
    ]
    assert len(listens) == 2
    assert all(f"backlog={LISTEN_BACKLOG};" in words for words in listens), listens
    assert max(OPEN_CONNECTIONS, *(c for _, _, c in CELLS)) <= LISTEN_BACKLOG


def test_the_flood_bound_is_what_a_core_can_answer() -> None:
    """Free refusals keep the whole maximum; refusals at half a produce, half of it; at two
    thirds of a produce, refusing the excess of a 150% flood alone fills the core."""
    assert flood_bound(0.0) == 1.0
    assert flood_bound(0.5) == pytest.approx(0.5)
    assert flood_bound(2 / 3) == pytest.approx(0.0, abs=1e-9)
    assert flood_bound(0.9) == 0.0
