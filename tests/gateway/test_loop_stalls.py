"""--stall-report-ms: a callback that holds the event loop past the threshold is logged, once
the loop is back, with how late its timers ran, how much of it the loop thread was on a CPU,
its stack inside the callback, and the stacks of the busy threads (the one holding the lock
it waits for)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from gateway.loop_stalls import StallWatch

THRESHOLD_S = 0.05


def take_the_lock(lock: threading.Lock) -> None:
    """A blocking step on the loop thread: a lock another thread holds."""
    with lock:
        pass


def hold_the_lock(lock: threading.Lock, held: threading.Event, released: threading.Event) -> None:
    with lock:
        held.set()
        while not released.is_set():  # busy, so that it does not look idle
            time.sleep(0.001)


async def test_a_callback_that_holds_the_loop_is_logged_with_the_stacks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop = asyncio.get_running_loop()
    watch = StallWatch(loop, THRESHOLD_S)
    lock = threading.Lock()
    held, released = threading.Event(), threading.Event()
    holder = threading.Thread(
        target=hold_the_lock, args=(lock, held, released), name="sluice-holder"
    )
    holder.start()
    held.wait()
    releaser = threading.Thread(target=_release_when_seen, args=(watch, released))
    with caplog.at_level(logging.WARNING, "sluice"):
        watch.start()
        try:
            releaser.start()
            loop.call_soon(take_the_lock, lock)
            while watch.stalls == 0:
                await asyncio.sleep(THRESHOLD_S / 5)
        finally:
            released.set()
            releaser.join()
            holder.join()
            watch.stop()
    [record] = [r for r in caplog.records if "stalled" in r.getMessage()]
    text = record.getMessage()
    assert text.startswith("event loop stalled: its timers ran ")
    late_ms = float(text.split("ran ")[1].split(" ms")[0])
    cpu_ms = float(text.split("for ")[1].split(" ms")[0])
    assert late_ms >= THRESHOLD_S * 1000 / 2  # seen once away a threshold; due half of one
    assert cpu_ms < late_ms, "the loop waited for the lock: little of it on a CPU"
    loop_part, _, others = text.partition("thread sluice-holder:")
    assert "in take_the_lock" in loop_part and "with lock:" in loop_part
    assert "in hold_the_lock" in others
    assert "thread sluice-stall-watch" not in text, "the watch itself is left out"


def _release_when_seen(watch: StallWatch, released: threading.Event) -> None:
    """Let the lock go once the watch has seen the stall and taken the stacks."""
    deadline = time.monotonic() + 30
    while not watch.stalled and time.monotonic() < deadline:
        time.sleep(THRESHOLD_S / 5)
    released.set()


async def test_a_loop_that_keeps_its_timers_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    """The watch looks six times (every half threshold) at a loop that only awaits: none of
    its beats is late, so nothing is reported."""
    threshold_s = 0.5
    watch = StallWatch(asyncio.get_running_loop(), threshold_s)
    with caplog.at_level(logging.WARNING, "sluice"):
        watch.start()
        deadline = time.monotonic() + 3 * threshold_s
        while time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        watch.stop()
    assert watch.stalls == 0 and not watch.stalled and not caplog.records
