"""The benchmarks' `--profile`: `py-spy record -r 200` of a gateway over a cell, and where its
samples fell (own and inclusive, over everything and over the code a bench is about)."""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

IDLE_FRAME = "_worker (concurrent/futures/thread.py)"  # an executor thread waiting for work
LIBRARY = re.compile(r"^.*/(site-packages|lib/python3\.\d+)/")
REPO = Path(__file__).resolve().parents[1]


def py_spy() -> str:
    """The py-spy beside this Python, or on the PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if found is None:
        raise SystemExit("--profile needs py-spy: pip install py-spy")
    return found


@contextlib.contextmanager
def recording(pid: int, raw: Path) -> Iterator[None]:
    """`py-spy record -r 200` of process `pid` while the block runs; its collapsed stacks
    (`--format raw`) to `raw`."""
    recorder = subprocess.Popen(
        [py_spy(), "record", "-r", "200", "-p", str(pid), "--format", "raw", "-o", str(raw)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield
    finally:
        recorder.send_signal(signal.SIGINT)
        recorder.wait(60)


def summarize(collapsed: str, code: re.Pattern[str], top: int = 25) -> dict[str, Any]:
    """Samples by function, in per cent of the samples not idle: its own (the leaf) and
    inclusive (anywhere on the stack), over everything and over the functions whose frame
    `code` matches (`code`). An executor thread waiting for work (py-spy counts it busy) is
    left out."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = idle = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        frames = [_frame(f) for f in stack.split(";")]
        if frames[-1] == IDLE_FRAME:
            idle += count
            continue
        total += count
        own[frames[-1]] += count
        for frame in dict.fromkeys(frames):  # once per stack, root first
            inclusive[frame] += count

    def shares(pairs: list[tuple[str, int]]) -> list[list[Any]]:
        return [[f, round(100 * n / total, 1)] for f, n in pairs[:top]]

    matched = [(f, n) for f, n in inclusive.most_common() if code.search(f)]
    return {
        "samples": total,
        "idle_samples": idle,
        "own": shares(own.most_common(top)),
        "inclusive": shares(inclusive.most_common(top)),
        "code": shares(matched),
    }


def _frame(frame: str) -> str:
    """`function (path:line)` as `function (path relative to the tree)`."""
    name, _, where = frame.partition(" (")
    path = LIBRARY.sub("", where.rsplit(":", 1)[0]).removeprefix(f"{REPO}/")
    return f"{name} ({path})"


def own_beside(summary: dict[str, Any], shares: str, heading: str) -> list[str]:
    """A report's table of a `summarize` result: its `shares` ("inclusive" or "code") under
    `heading`, beside its own shares, rank by rank."""
    return [
        f"| {heading} | function | | own % | function |",
        "|---|---|---|---|---|",
        *(
            f"| {share} | `{name}` | | {mine} | `{leaf}` |"
            for (name, share), (leaf, mine) in zip(summary[shares], summary["own"], strict=False)
        ),
    ]
