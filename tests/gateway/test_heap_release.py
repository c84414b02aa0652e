"""Freed memory goes back to the system: `trim` returns a freed heap region's pages (checked in a
fresh process, where no earlier buffer moved the allocator); the trimmer runs every interval,
and 0 turns it off; the arena limit holds threads to that many malloc arenas, set before the
server's loop starts."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import uvloop

from engine import heap
from gateway import config, heap_release, server
from gateway.cli.main import parser

REPO = Path(__file__).resolve().parents[2]

RSS = """
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
"""


def run(script: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", RSS + textwrap.dedent(script)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_trim_returns_a_freed_heap_regions_pages() -> None:
    got = run(
        """
        from engine import heap
        chunks = [bytearray(64 << 10) for _ in range(128)]
        for chunk in chunks:
            chunk[::4096] = b"x" * len(chunk[::4096])  # touched: resident
        pinned = bytearray(64 << 10)  # above them: freeing them cannot shrink the heap's top
        del chunks
        before = rss()
        trimmed = heap.trim()
        print(trimmed, (before - rss()) >> 20)
        """
    )
    trimmed, released_mib = got.split()
    assert trimmed == "True"
    assert int(released_mib) >= 4


async def test_the_trimmer_runs_every_interval_until_stopped() -> None:
    trimmer = heap_release.HeapTrimmer(0.01)
    trimmer.start()
    async with asyncio.timeout(10):
        while trimmer.trims < 3:
            await asyncio.sleep(0.01)
    assert trimmer.running
    await trimmer.stop()
    assert not trimmer.running


async def test_zero_turns_the_trimmer_off() -> None:
    trimmer = heap_release.HeapTrimmer(0)
    trimmer.start()
    assert not trimmer.running
    await trimmer.stop()


ARENAS_USED = """
import ctypes, sys, threading
from engine import heap
if {limit}:
    assert heap.limit_arenas({limit})
gate = threading.Barrier(8)
def allocate():
    kept = [bytes(1024) + b"x" for _ in range(100)]  # past pymalloc's 512 bytes: malloc's
    gate.wait()  # all eight alive at once: none hands its arena to the next
threads = [threading.Thread(target=allocate) for _ in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
sys.stderr.flush()
ctypes.CDLL(None).malloc_stats()  # one "Arena N:" block per arena, on stderr
"""


def arenas(limit: int) -> int:
    done = subprocess.run(
        [sys.executable, "-c", ARENAS_USED.format(limit=limit)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stderr.count("Arena ")


def test_the_arena_limit_holds_threads_to_that_many_arenas() -> None:
    assert arenas(0) > 2  # glibc's own limit: eight threads, arenas of their own
    assert arenas(2) == 2


def test_the_server_sets_the_limit_before_its_loop_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--malloc-arenas` reaches glibc before the event loop, and so any thread, starts."""
    calls: list[tuple[str, int]] = []
    monkeypatch.setattr(heap, "limit_arenas", lambda n: calls.append(("limit", n)))
    monkeypatch.setattr(uvloop, "run", lambda coroutine: calls.append(("loop", 0)))
    monkeypatch.setattr(server, "serve", lambda settings: None)
    settings, _ = config.resolve(parser().parse_args(["serve", "--malloc-arenas", "1"]), {})
    server.run(settings)
    assert calls == [("limit", 1), ("loop", 0)]
