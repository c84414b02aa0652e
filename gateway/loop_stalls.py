"""Event-loop stalls, named: with --stall-report-ms, a thread beside the loop notices when the
loop has not come back to its timers for that long and logs, once the loop is back, how long
it was away and the loop thread's stack as it was then. A stall seen once under load (a
retention pass, a roll, a flush, a collection) names its code without a profiler attached."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from types import FrameType

log = logging.getLogger("sluice")

STACK_LIMIT = 40  # frames kept of the loop thread's stack
OTHER_LIMIT = 12  # and of each other busy thread's
# Where an idle thread waits: a pool worker for work, a timer or event for its time.
_IDLE = frozenset(("wait", "get", "_worker", "select", "poll", "_wait_for_tstate_lock"))


class StallWatch:
    """A heartbeat the loop refreshes every half threshold, and the thread that reads it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, threshold_s: float) -> None:
        self.threshold_s = threshold_s
        self.stalls = 0  # stalls reported so far
        self._loop = loop
        self._loop_thread = threading.get_ident()
        self._beat = _now()
        self._stopped = threading.Event()
        self._timer: asyncio.TimerHandle | None = None
        self._stalled: tuple[tuple[float, float], str] | None = None  # the stalled beat, the stack
        self._thread = threading.Thread(target=self._watch, name="sluice-stall-watch", daemon=True)

    def start(self) -> None:
        self._beat = _now()
        self._timer = self._loop.call_later(self.threshold_s / 2, self._tick)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._timer is not None:
            self._timer.cancel()
        self._thread.join()

    @property
    def stalled(self) -> bool:
        """Whether a stall is in progress (seen, not yet over)."""
        return self._stalled is not None

    def _tick(self) -> None:
        self._beat = _now()
        self._timer = self._loop.call_later(self.threshold_s / 2, self._tick)

    def _watch(self) -> None:
        """Each half threshold: past the threshold since the last beat, take the loop thread's
        stack; when the beat moves again, log the stall with it."""
        while not self._stopped.wait(self.threshold_s / 2):
            beat = self._beat
            if self._stalled is not None and beat != self._stalled[0]:
                (wall, cpu), stack = self._stalled
                self._report(beat[0] - wall, beat[1] - cpu, stack)
                self._stalled = None
            if self._stalled is None and time.monotonic() - beat[0] > self.threshold_s:
                self._stalled = (beat, self._stacks())

    def _stacks(self) -> str:
        """The loop thread's stack, then those of the other threads that are not idle (one of
        them may hold the lock or the GIL the loop waits for)."""
        names = {thread.ident: thread.name for thread in threading.enumerate()}
        frames = sys._current_frames()
        loop_frame = frames.pop(self._loop_thread, None)
        frames.pop(threading.get_ident(), None)
        parts = [_format(loop_frame, STACK_LIMIT)]
        for ident, frame in frames.items():
            if frame.f_code.co_name not in _IDLE:
                parts.append(f"thread {names.get(ident, ident)}:\n{_format(frame, OTHER_LIMIT)}")
        return "\n".join(parts)

    def _report(self, away_s: float, cpu_s: float, stack: str) -> None:
        self.stalls += 1
        log.warning(
            "event loop stalled: its timers ran %.0f ms late, the loop thread on a CPU for %.0f "
            "ms of it (the rest: waiting on a lock, a system call or the GIL, or not scheduled); "
            "it was in (then the busy threads):\n%s",
            (away_s - self.threshold_s / 2) * 1000,
            cpu_s * 1000,
            stack,
        )


def _now() -> tuple[float, float]:
    """A beat: the time, and the CPU time the calling (loop) thread has used."""
    return time.monotonic(), time.thread_time()


def _format(frame: FrameType | None, limit: int) -> str:
    return "".join(traceback.format_stack(frame, limit=limit)).rstrip() if frame else ""
