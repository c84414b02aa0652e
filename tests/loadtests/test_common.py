"""What the load tools share: SIGTERM ends one through its cleanup, as Ctrl-C does; a server's
memory counts its children's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from loadtests import generators
from loadtests.common import rss_bytes, tree_rss_bytes

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


def test_a_servers_rss_counts_its_children() -> None:
    """A node's memory is its process's and its children's (tiering's shipper processes): a
    child holding 64 MiB shows in the tree's RSS, not in the process's own."""
    holder = "import sys; b = bytearray(64 << 20); b[::4096] = b'x' * len(b[::4096]); "
    holder += "print('ready', flush=True); sys.stdin.read()"
    parent = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {holder!r}])"
    process = subprocess.Popen(
        [sys.executable, "-c", parent], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
        own, tree = rss_bytes(process.pid), tree_rss_bytes(process.pid)
        assert tree - own >= 64 << 20
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(30)


def test_a_generator_that_does_not_end_is_an_error_with_its_output(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A generator run for a time and still running past it is killed and named, with what it
    printed, instead of holding its caller until the caller's own timeout."""
    monkeypatch.setattr(generators, "OVERRUN_S", 0.2)
    command = [sys.executable, "-c", "import time; print('started', flush=True); time.sleep(60)"]
    with pytest.raises(RuntimeError, match=r"did not end 0 s after its 0\.1 s:\nstarted"):
        generators._timed(command, os.getpid(), 0.1)
