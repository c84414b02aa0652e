"""Freed memory goes back to the system (glibc's allocator), so that RSS follows what is in use.

glibc keeps the heap's freed pages: a log server's large buffers (segment reads, compaction
passes, tiering uploads, a growing index) leave free regions behind them, and RSS rises at
every compaction pass and stays. Every `--heap-trim-s` seconds a thread calls `malloc_trim`,
which hands the whole free pages of every arena back. Large buffers still come from the heap
between trims (glibc's dynamic mmap threshold): mapping each apart would cost page faults on
every large read. Without glibc (musl, macOS) nothing is done.

glibc also gives threads arenas of their own (up to eight per core). The node's worker threads
(S3 uploads and reads, flushes, retention, compaction) each free into a different arena what
the next allocation, in another thread, cannot reuse: the arenas grow while what is in use
stays flat. `--malloc-arenas` caps them (MALLOC_ARENA_MAX) before the first thread starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util


def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    except (OSError, AttributeError):  # not glibc: no malloc_trim
        return None
    return libc


_LIBC = _glibc()


_M_ARENA_MAX = -8  # mallopt's parameter number, from glibc's malloc.h


def limit_arenas(count: int) -> bool:
    """Let the process use at most `count` malloc arenas (0: glibc's own limit); call it
    before any thread starts. Whether it took effect (False without glibc)."""
    return _LIBC is not None and count > 0 and bool(_LIBC.mallopt(_M_ARENA_MAX, count))


def trim() -> bool:
    """Return the heap's free pages to the system; whether any were (False without glibc)."""
    return _LIBC is not None and bool(_LIBC.malloc_trim(0))


class HeapTrimmer:
    """Every `interval_s`, `trim` in a thread (it walks the heap: not on the event loop)."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.trims = 0  # passes run
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        if _LIBC is not None and self.interval_s > 0:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await asyncio.to_thread(trim)
            self.trims += 1
