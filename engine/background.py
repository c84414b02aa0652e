"""Background maintenance for a LogManager: flush.ms, retention, compaction, checkpoints,
producer expiration.

Each job runs in a worker thread on its own interval (Kafka's defaults), so fsync, segment
deletion and cleaning never block the event loop. A failing pass is logged and retried later.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from engine.manager import LogManager

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Intervals:
    """Seconds between passes of each job."""

    flush_check: float = 1.0
    retention_check: float = 300.0  # log.retention.check.interval.ms
    cleaner_backoff: float = 15.0  # log.cleaner.backoff.ms
    checkpoint: float = 60.0  # log.flush.offset.checkpoint.interval.ms
    producer_expiration_check: float = 600.0  # producer.id.expiration.check.interval.ms


class BackgroundTasks:
    """Starts and stops the periodic maintenance jobs of one LogManager."""

    def __init__(self, manager: LogManager, intervals: Intervals | None = None) -> None:
        self.manager = manager
        self.intervals = intervals or Intervals()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()

    def start(self) -> None:
        jobs: list[tuple[str, float, Callable[[], object]]] = [
            ("flush", self.intervals.flush_check, self.manager.flush_due_logs),
            ("retention", self.intervals.retention_check, self.manager.apply_retention),
            ("cleaner", self.intervals.cleaner_backoff, self.manager.clean_logs),
            ("checkpoint", self.intervals.checkpoint, self.manager.write_checkpoints),
            (
                "producer expiration",
                self.intervals.producer_expiration_check,
                self.manager.remove_expired_producers,
            ),
        ]
        for name, interval, job in jobs:
            self._tasks.append(asyncio.create_task(self._every(name, interval, job)))

    async def _every(self, name: str, interval: float, job: Callable[[], object]) -> None:
        while True:
            try:
                async with asyncio.timeout(interval):
                    await self._stopping.wait()
                return
            except TimeoutError:
                pass
            try:
                await asyncio.to_thread(job)
            except Exception:
                log.exception("background %s pass failed; retrying in %.0f s", name, interval)

    async def stop(self) -> None:
        """End the loops, letting a pass under way finish (a thread cannot be cancelled)."""
        self._stopping.set()
        await asyncio.gather(*self._tasks)
        self._tasks.clear()
