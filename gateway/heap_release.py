"""Freed memory goes back to the system (glibc's allocator), so that RSS follows what is in use.

Left to itself, glibc raises its mmap threshold after the first large buffer is freed (large
buffers then come from the heap, where they leave holes), and keeps freed heap pages. A log
server's large buffers (segment reads, compaction passes, tiering uploads) come and go all day:
measured in the soak, the heap kept 13 to 20 MiB free and RSS grew with every compaction pass.
At start the threshold is fixed; every `--heap-trim-s` seconds a thread returns free pages.
Without glibc (musl, macOS) nothing is done.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging

log = logging.getLogger("sluice")

M_TRIM_THRESHOLD = -1  # mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 128 * 1024  # glibc's initial value, kept: larger buffers are mapped apart
TRIM_THRESHOLD = 128 * 1024  # free memory at the heap's top beyond this is returned at once


def _glibc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
    except (OSError, AttributeError):  # not glibc: no mallopt or malloc_trim
        return None
    return libc


_LIBC = _glibc()


def fix_thresholds() -> bool:
    """Fix the mmap and trim thresholds (no dynamic raise); False without glibc."""
    if _LIBC is None:
        return False
    return bool(
        _LIBC.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        and _LIBC.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )


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
