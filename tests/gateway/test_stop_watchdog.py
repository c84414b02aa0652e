"""A stop that overruns its bound logs what it waits for: each running task's stack (with the
line it waits on) and each thread's."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from gateway import stop_watchdog


async def hung_close(never: asyncio.Event) -> None:
    await never.wait()


async def test_an_overrun_stop_logs_every_task_and_thread(caplog: pytest.LogCaptureFixture) -> None:
    never = asyncio.Event()
    task = asyncio.create_task(hung_close(never), name="closing-the-fetchers")
    released = threading.Event()
    thread = threading.Thread(target=released.wait, name="sluice-copy")
    thread.start()
    try:
        await asyncio.sleep(0)  # the task takes its first turn: it waits
        with caplog.at_level(logging.WARNING, "sluice"):
            handle = stop_watchdog.arm(0)
            while not caplog.records:
                await asyncio.sleep(0)
        assert not handle.cancelled()
    finally:
        released.set()
        thread.join()
        task.cancel()
    [record] = caplog.records
    text = record.getMessage()
    assert text.startswith("stopping has taken over 0 s;")
    assert "closing-the-fetchers" in text and "await never.wait()" in text
    assert "thread sluice-copy:" in text and "in wait" in text  # threading.Event.wait


async def test_a_disarmed_watchdog_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "sluice"):
        stop_watchdog.arm(0).cancel()
        for _ in range(3):
            await asyncio.sleep(0)
    assert not caplog.records
