"""`loadtests.stall_bench` in a short run: both cells on fresh gateways, the tiering one having
shipped segments and the other none, and every figure of the report read from the gateway's own
stall reports. Speed and stall counts are never judged here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from loadtests.stall_bench import Stall, stalls_in

REPO = Path(__file__).resolve().parents[2]
REPORT = (
    "2026-11-27 11:42:11,591 WARNING sluice event loop stalled: its timers ran 15 ms late, the "
    "loop thread on a CPU for 4 ms of it (the rest: waiting on a lock, a system call or the GIL, "
    "or not scheduled); it was in (then the busy threads):\n"
    '  File "/srv/sluice/gateway/server.py", line 254, in run\n'
    "    loop.run_forever()\n"
    '  File "/usr/lib/python3.11/asyncio/events.py", line 84, in _run\n'
    '  File "/srv/sluice/engine/segment.py", line 157, in append\n'
    "    written = os.write(self._fd, data)\n"
    "thread sluice-tiering:\n"
    '  File "/srv/sluice/engine/log.py", line 480, in _roll\n'
)


def test_the_gateways_stall_reports_are_read() -> None:
    """Each report's figures, and the innermost frame of Sluice's code on the loop thread's
    stack (not a busy thread's, not the next record's)."""
    outside = REPORT.replace("15 ms", "23 ms").replace("/srv/sluice/engine", "/lib/other")
    log = "sluice listening on http://127.0.0.1:1\n" + REPORT + outside + "2026-11-27 INFO x\n"
    assert stalls_in(log) == [
        Stall(15, 4, "engine/segment.py:157 append"),
        Stall(23, 4, "gateway/server.py:254 run"),
    ]
    assert stalls_in("2026-11-27 INFO nothing stalled\n") == []


def test_a_short_run_compares_tiering_with_none(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable, "-m", "loadtests.stall_bench", "--rounds", "1", "--seconds", "2",
            "--segment-bytes", "16384", "--out", str(tmp_path),
        ],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-5000:]
    doc = json.loads((tmp_path / "stall-bench.json").read_text())
    rows = {row["cell"]: row for row in doc["rows"]}
    assert set(rows) == {"no tiering", "tiering"}
    assert rows["tiering"]["segments_shipped"] >= 1
    assert rows["no tiering"]["segments_shipped"] == 0
    for row in rows.values():
        assert row["requests_per_s"] > 0 and row["failures"] == 0, row
        assert row["stalls_per_minute"] == round(row["stalls"] * 60 / row["seconds"], 1)
        assert sum(row["where"].values()) == row["stalls"]
        assert row["cpus"].startswith("servers on CPU 0") or row["cpus"] == "shared (one CPU)"
    assert doc["meta"]["command"].startswith("python -m loadtests.stall_bench --rounds 1")
    assert (tmp_path / "stall-bench.md").read_text().startswith("## Loop stalls")
