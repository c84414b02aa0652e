"""The asyncio side: change notification for long-polls and background maintenance."""

from __future__ import annotations

import asyncio
from pathlib import Path

from engine.background import BackgroundTasks, Intervals
from engine.manager import LogManager
from engine.notify import ChangeNotifier
from tests.engine.conftest import batch_of


async def test_waiters_wake_on_append_and_time_out(tmp_path: Path) -> None:
    manager = LogManager(tmp_path)
    log = manager.create_topic("t").partitions[0]
    notifier = ChangeNotifier()
    waiters = [asyncio.create_task(notifier.wait(log, 30)) for _ in range(100)]
    while notifier.parked < 100:
        await asyncio.sleep(0)
    log.append_as_leader(batch_of([b"x"]), 0)
    assert await asyncio.gather(*waiters) == [True] * 100
    assert notifier.parked == 0
    assert await notifier.wait(log, 0.01) is False
    manager.close()


async def test_cancelled_waiter_is_released(tmp_path: Path) -> None:
    manager = LogManager(tmp_path)
    log = manager.create_topic("t").partitions[0]
    notifier = ChangeNotifier()
    task = asyncio.create_task(notifier.wait(log, 30))
    while notifier.parked < 1:
        await asyncio.sleep(0)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert notifier.parked == 0
    manager.close()


async def test_a_shared_future_wakes_its_waiter_and_is_never_failed_or_cancelled(
    tmp_path: Path,
) -> None:
    """A group member's fetch parks the member's own future (`also`) on its partitions: the
    coordinator resolving it, or a log change, wakes the wait; a timeout or a cancelled wait
    leaves it pending for its owner."""
    manager = LogManager(tmp_path)
    topic = manager.create_topic("t", partitions=2)
    first, second = topic.partitions
    notifier = ChangeNotifier()
    loop = asyncio.get_running_loop()

    also: asyncio.Future[None] = loop.create_future()
    assert await notifier.wait_any((first, second), 0.01, also) is False
    assert not also.done()
    assert notifier.parked == 0

    waiting = asyncio.create_task(notifier.wait_any((first, second), 30, also))
    while notifier.parked < 1:
        await asyncio.sleep(0)
    also.set_result(None)  # the coordinator: a rebalance, say
    assert await waiting is True

    also = loop.create_future()
    waiting = asyncio.create_task(notifier.wait_any((first, second), 30, also))
    while notifier.parked < 1:
        await asyncio.sleep(0)
    second.append_as_leader(batch_of([b"x"]), 0)
    assert await waiting is True
    assert also.done() and not also.cancelled()  # parked on the logs itself, and resolved

    also = loop.create_future()
    waiting = asyncio.create_task(notifier.wait_any((first,), 30, also))
    while notifier.parked < 1:
        await asyncio.sleep(0)
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    assert not also.done()
    assert notifier.parked == 0
    manager.close()


async def test_append_from_another_thread_wakes_the_loop(tmp_path: Path) -> None:
    manager = LogManager(tmp_path)
    log = manager.create_topic("t").partitions[0]
    notifier = ChangeNotifier()
    waiter = asyncio.create_task(notifier.wait(log, 30))
    while notifier.parked < 1:
        await asyncio.sleep(0)
    await asyncio.to_thread(log.append_as_leader, batch_of([b"x"]), 0)
    assert await waiter is True
    manager.close()


async def test_background_tasks_run_and_stop(tmp_path: Path) -> None:
    manager = LogManager(tmp_path)
    log = manager.create_topic("t", 1, {"flush.ms": 0}).partitions[0]
    log.append_as_leader(batch_of([b"x"]), 0)
    checkpoint = tmp_path / "recovery-point-offset-checkpoint"
    tasks = BackgroundTasks(manager, Intervals(0.001, 0.001, 0.001, 0.001))
    tasks.start()
    # The flush job moves the recovery point; the checkpoint job then writes it down.
    while not (checkpoint.exists() and checkpoint.read_text().endswith("t 0 1\n")):
        await asyncio.sleep(0.001)
    running = list(tasks._tasks)
    await tasks.stop()
    assert log.recovery_point == 1
    assert running and all(task.done() and not task.cancelled() for task in running)
    assert not tasks._tasks
    manager.close()


async def test_the_producer_expiration_pass_forgets_idle_producers(tmp_path: Path) -> None:
    manager = LogManager(tmp_path, producer_id_expiration_ms=1)
    log = manager.create_topic("t", 1).partitions[0]
    log.append_transactional_as_leader(batch_of([b"x"]), 0, 1000, 0)
    log.append_marker_as_leader(1000, 0, True, 0, 0)
    assert set(log.producer_state.producers) == {1000}
    tasks = BackgroundTasks(manager, Intervals(600, 600, 600, 600, 0.001))
    tasks.start()
    async with asyncio.timeout(10):
        while log.producer_state.producers:
            await asyncio.sleep(0.001)
    await tasks.stop()
    manager.close()
