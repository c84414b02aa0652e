"""Freed memory goes back to the system: with the thresholds fixed, a large buffer is mapped
apart even after one was freed (glibc would raise its threshold and take the next from the
heap); `trim` returns a freed heap region's pages; the trimmer runs every interval, and 0 turns
it off. Allocator behaviour is checked in fresh processes, where no earlier buffer moved it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gateway import heap_release

REPO = Path(__file__).resolve().parents[2]

MALLINFO = """
import ctypes

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2

def mapped():
    return libc.mallinfo2().hblkhd

def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
"""


def run(script: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", MALLINFO + textwrap.dedent(script)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


LARGE_AFTER_A_FREE = """
from gateway import heap_release
if FIX:
    assert heap_release.fix_thresholds()
first = bytearray(4 << 20)
del first
before = mapped()
second = bytearray(1 << 20)
print(mapped() - before >= 1 << 20)
"""


@pytest.mark.parametrize(("fix", "mapped_apart"), [(False, "False"), (True, "True")])
def test_a_large_buffer_is_mapped_apart_even_after_one_was_freed(
    fix: bool, mapped_apart: str
) -> None:
    assert run(f"FIX = {fix}" + LARGE_AFTER_A_FREE) == mapped_apart


def test_trim_returns_a_freed_heap_regions_pages() -> None:
    got = run(
        """
        from gateway import heap_release
        first = bytearray(8 << 20)  # freed: glibc's threshold rises, the next come from the heap
        del first
        chunks = [bytearray(64 << 10) for _ in range(128)]
        for chunk in chunks:
            chunk[::4096] = b"x" * len(chunk[::4096])  # touched: resident
        pinned = bytearray(64 << 10)  # above them: the heap's top cannot shrink
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
