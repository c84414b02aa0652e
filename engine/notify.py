"""Wake asyncio waiters when a partition log changes (long-poll fetches, replica fetches).

A parked waiter is one future in a set: it costs no CPU and a few hundred bytes. Appends may
come from any thread; wake-ups are delivered on the event loop.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Iterable

from engine.log import PartitionLog


class ChangeNotifier:
    """Per-log sets of futures, resolved on the next append, high-watermark move or truncation."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop or asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._waiters: dict[PartitionLog, set[asyncio.Future[None]]] = {}
        self._watched: set[PartitionLog] = set()
        self.closing = False
        # Waiters parked now (a metric, and the limit's count): one per client's wait; the
        # server's own followers of a log (the registry's of _schemas) are not counted.
        self.parked = 0

    def watch(self, log: PartitionLog) -> None:
        if log not in self._watched:
            self._watched.add(log)
            log.add_listener(self._changed)

    def unwatch(self, log: PartitionLog) -> None:
        if log in self._watched:
            self._watched.discard(log)
            log.remove_listener(self._changed)
            self._wake(log)

    async def wait(self, log: PartitionLog, timeout: float, counted: bool = True) -> bool:
        """Wait for the log to change; False on timeout. Cancellation releases the waiter.
        `counted` False: a server's own follower of a log, not in `parked`."""
        return await self.wait_any((log,), timeout, counted=counted)

    async def wait_any(
        self,
        logs: Iterable[PartitionLog],
        timeout: float,
        also: asyncio.Future[None] | None = None,
        counted: bool = True,
    ) -> bool:
        """Wait for any of the logs to change, or `also` to be resolved; False on timeout.

        One future parked on several logs: a group member's fetch spans its partitions.
        """
        future: asyncio.Future[None] = self._loop.create_future() if also is None else also
        parked: list[tuple[PartitionLog, set[asyncio.Future[None]]]] = []
        for log in logs:
            self.watch(log)
            waiters = self._waiters.setdefault(log, set())
            waiters.add(future)
            parked.append((log, waiters))
        self.parked += counted
        # A timer on the future itself: asyncio.wait_for would add a future, two callbacks and
        # a loop lookup to every park, and a long-poll parks once per answer.
        waiter = future if also is None else self._loop.create_future()
        timer = self._loop.call_later(timeout, _expire, waiter)
        follow = None
        if also is not None:  # the caller's future: resolved by it too, never failed here
            follow = functools.partial(_follow, waiter)
            also.add_done_callback(follow)
        try:
            await waiter
            return True
        except TimeoutError:
            return False
        finally:
            timer.cancel()
            if waiter.done() and not waiter.cancelled():
                waiter.exception()  # a timeout that raced a cancellation: read, not logged
            if also is not None and follow is not None:
                also.remove_done_callback(follow)
            self.parked -= counted
            for log, waiters in parked:
                waiters.discard(future)
                if not waiters and self._waiters.get(log) is waiters:
                    del self._waiters[log]

    def wake(self, log: PartitionLog) -> None:
        """Wake the log's waiters to look again (a role or ISR change, not a log change)."""
        self._wake(log)

    def wake_all(self) -> None:
        """Release every waiter (shutdown): long-polls answer with what they have."""
        self.closing = True
        for log in list(self._waiters):
            self._wake(log)

    def _changed(self, log: PartitionLog) -> None:
        if threading.get_ident() == self._loop_thread:
            self._wake(log)
        else:
            self._loop.call_soon_threadsafe(self._wake, log)

    def _wake(self, log: PartitionLog) -> None:
        for future in self._waiters.get(log, ()):
            if not future.done():
                future.set_result(None)


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


def _follow(waiter: asyncio.Future[None], _: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
