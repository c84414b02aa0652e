"""`loadtests.profiling.summarize`: where a py-spy profile's samples fell, in per cent of those
not idle, with the frames of the code a bench is about picked out; `own_beside`: the table a
report shows of it."""

from __future__ import annotations

import re
from pathlib import Path

from loadtests.profiling import own_beside, summarize

REPO = Path(__file__).resolve().parents[2]
SHARE_CODE = re.compile(r"\((groups/share/|gateway/api/share_groups\.py)")


def test_a_profile_summary_leaves_out_executor_threads_waiting_for_work() -> None:
    collapsed = "\n".join(
        [
            "run (/srv/venv/lib/python3.11/site-packages/uvloop/__init__.py:10);"
            f"acquire ({REPO}/gateway/api/share_groups.py:120);"
            f"_runs ({REPO}/groups/share/partition_state.py:300) 3",
            "run (/srv/venv/lib/python3.11/site-packages/uvloop/__init__.py:10);"
            "write (aiohttp/http_writer.py:5) 1",
            "Thread.run (threading.py:982);_worker (concurrent/futures/thread.py:81) 96",
        ]
    )
    summary = summarize(collapsed, SHARE_CODE)
    assert summary["samples"] == 4 and summary["idle_samples"] == 96
    assert summary["own"][0] == ["_runs (groups/share/partition_state.py)", 75.0]
    assert ["run (uvloop/__init__.py)", 100.0] in summary["inclusive"]
    assert summary["code"] == [
        ["acquire (gateway/api/share_groups.py)", 75.0],
        ["_runs (groups/share/partition_state.py)", 75.0],
    ]


def test_a_reports_table_sets_each_rank_of_inclusive_shares_beside_the_same_rank_of_own() -> None:
    summary = {
        "code": [["acquire (gateway/api/share_groups.py)", 75.0]],
        "own": [["_runs (groups/share/partition_state.py)", 75.0], ["write (aiohttp)", 25.0]],
    }
    assert own_beside(summary, "code", "share-group code, inclusive %") == [
        "| share-group code, inclusive % | function | | own % | function |",
        "|---|---|---|---|---|",
        "| 75.0 | `acquire (gateway/api/share_groups.py)` | | 75.0 "
        "| `_runs (groups/share/partition_state.py)` |",
    ]
