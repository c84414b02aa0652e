"""Freed memory goes back to the system while the node runs (engine.heap, glibc only): every
`--heap-trim-s` seconds a thread calls `trim`, which hands the whole free pages of every arena
back. Large buffers still come from the heap between trims (glibc's dynamic mmap threshold):
mapping each apart would cost page faults on every large read. `--malloc-arenas` caps the
arenas (`limit_arenas`) before the first thread starts."""

from __future__ import annotations

import asyncio
import contextlib

from engine.heap import available, trim


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
        if available() and self.interval_s > 0:
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
