"""Freed memory goes back to the system: `trim` returns a freed heap region's pages (checked in a
fresh process, where no earlier buffer moved the allocator); the trimmer runs every interval,
and 0 turns it off."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

from gateway import heap_release

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
        from gateway import heap_release
        chunks = [bytearray(64 << 10) for _ in range(128)]
        for chunk in chunks:
            chunk[::4096] = b"x" * len(chunk[::4096])  # touched: resident
        pinned = bytearray(64 << 10)  # above them: freeing them cannot shrink the heap's top
        del chunks
        before = rss()
        trimmed = heap_release.trim()
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
