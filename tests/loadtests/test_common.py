"""What the load tools share: SIGTERM ends one through its cleanup, as Ctrl-C does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TERMINATED = """
import os, signal, threading
from loadtests.common import stop_on_sigterm
stop_on_sigterm()
try:
    os.kill(os.getpid(), signal.SIGTERM)
    threading.Event().wait(30)
finally:
    print("servers stopped", flush=True)
"""


def test_sigterm_runs_the_tools_cleanup_and_exits_143() -> None:
    done = subprocess.run(
        [sys.executable, "-c", TERMINATED], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 143, done.stderr
    assert done.stdout == "servers stopped\n"
