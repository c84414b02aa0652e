"""--stall-report-ms: a callback that holds the event loop past the threshold is logged, once
the loop is back, with how late its timers ran, how much of it the loop thread was on a CPU,
and the loop thread's stack inside it."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from gateway.loop_stalls import StallWatch

THRESHOLD_S = 0.05


def hold_the_loop(released: threading.Event) -> None:
    """A blocking step on the loop thread: it returns once the watch has seen the stall."""
    released.wait(timeout=30)
    time.sleep(THRESHOLD_S)  # then a little longer, so the lateness includes it


async def test_a_callback_that_holds_the_loop_is_logged_with_its_stack(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop = asyncio.get_running_loop()
    watch = StallWatch(loop, THRESHOLD_S)
    released = threading.Event()
    with caplog.at_level(logging.WARNING, "sluice"):
        watch.start()
        try:
            # the watch thread releases the blocked loop once it has taken its stack
            taken = threading.Thread(target=_release_when_seen, args=(watch, released))
            taken.start()
            loop.call_soon(hold_the_loop, released)
            while watch.stalls == 0:
                await asyncio.sleep(THRESHOLD_S / 5)
            taken.join()
        finally:
            watch.stop()
    [record] = [r for r in caplog.records if "stalled" in r.getMessage()]
    text = record.getMessage()
    assert text.startswith("event loop stalled: its timers ran ")
    late_ms = float(text.split("ran ")[1].split(" ms")[0])
    cpu_ms = float(text.split("for ")[1].split(" ms")[0])
    assert late_ms >= THRESHOLD_S * 1000
    assert cpu_ms < late_ms, "the loop waited (an event, a sleep): little of it on a CPU"
    assert "in hold_the_loop" in text and "released.wait(timeout=30)" in text


def _release_when_seen(watch: StallWatch, released: threading.Event) -> None:
    """Release the loop once the watch has seen the stall and taken its stack."""
    deadline = time.monotonic() + 30
    while not watch.stalled and time.monotonic() < deadline:
        time.sleep(THRESHOLD_S / 5)
    released.set()


async def test_a_loop_that_keeps_its_timers_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    watch = StallWatch(asyncio.get_running_loop(), 5.0)
    with caplog.at_level(logging.WARNING, "sluice"):
        watch.start()
        for _ in range(20):
            await asyncio.sleep(0.01)
        watch.stop()
    assert watch.stalls == 0 and not caplog.records
