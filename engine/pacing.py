"""A background pass's share of the CPU.

Python runs one thread at a time (the GIL). A pass doing Python work in a worker thread (the
log cleaner decoding every record of a segment) takes turns with the event loop, which then
waits for it up to the interpreter's switch interval (5 ms) each time it wakes: requests are
served at a fraction of their speed for as long as the pass lasts, and queue up. Paced, the
pass sleeps after each slice of work so that it takes at most `share` of the time; a sleep
releases the GIL, so the loop waits at most about one slice for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

SHARE = 0.25
SLICE_S = 0.002


class Pacer:
    """Call `tick()` between units of work (a batch): past `slice_s` of work since the last
    rest, it sleeps long enough that the work is `share` of the time."""

    def __init__(
        self,
        share: float = SHARE,
        slice_s: float = SLICE_S,
        *,
        clock: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"share must be in (0, 1], not {share}")
        self.rest_per_work = 1 / share - 1
        self.slice_s = slice_s
        self.clock = clock
        self.sleep = sleep
        self._since: float | None = None

    def tick(self) -> None:
        now = self.clock()
        since = self._since
        if since is None:
            self._since = now
            return
        worked = now - since
        if worked < self.slice_s:
            return
        rest = worked * self.rest_per_work
        if rest > 0:
            self.sleep(rest)
        self._since = self.clock()
