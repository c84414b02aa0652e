"""A stop that overruns its bound says what it is waiting for: every asyncio task's stack and
every thread's, in the log at WARNING, so that a hang seen once (in a CI run, on a node an
orchestrator had to kill) can be found without reproducing it."""

from __future__ import annotations

import asyncio
import io
import logging
import sys
import threading
import traceback

log = logging.getLogger("sluice")

STACK_LIMIT = 30  # frames kept of each task's and thread's stack


def arm(bound_s: float) -> asyncio.TimerHandle:
    """Report once if the stop still runs `bound_s` seconds from now; cancel the handle to
    disarm it."""
    return asyncio.get_running_loop().call_later(bound_s, report, bound_s)


def report(bound_s: float) -> None:
    """Log what the process is doing: the tasks still running, then the threads."""
    tasks = sorted((t for t in asyncio.all_tasks() if not t.done()), key=asyncio.Task.get_name)
    parts = [f"stopping has taken over {bound_s:.0f} s; {len(tasks)} tasks still run"]
    for task in tasks:
        out = io.StringIO()
        task.print_stack(limit=STACK_LIMIT, file=out)
        parts.append(out.getvalue().rstrip())
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        stack = "".join(traceback.format_stack(frame, limit=STACK_LIMIT)).rstrip()
        parts.append(f"thread {names.get(ident, ident)}:\n{stack}")
    log.warning("\n".join(parts))
