"""Group commit: concurrent produces to one leader share one write and one fsync.

Appends that reach a partition in the same event-loop turn are written together at the end of
that turn (`Partition.append_together`), so an idle partition waits for nothing but the turn it
is already in, and a busy one pays one write for many requests. A write that would first roll
a segment (creating files, which can wait on the disk) or wait for another thread holding the
log makes room in a thread; the partition's requests gather meanwhile and go in the next write.
fsyncs the flush policy asks for run one at a time per partition in a thread; the requests that
arrive while one runs share the next.
"""

from __future__ import annotations

import asyncio

from engine.log import AppendInfo
from replication.acks import Acks
from replication.partition import Partition

Waiting = list[tuple[bytes | bytearray, Acks, "asyncio.Future[AppendInfo]"]]


class AppendGroups:
    """Collects each leader partition's appends of the current loop turn and writes them."""

    def __init__(self) -> None:
        self._waiting: dict[Partition, Waiting] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self.writes = 0  # turns written; `requests / writes` is how much sharing happens
        self.requests = 0

    def append(
        self, partition: Partition, data: bytes | bytearray, acks: Acks
    ) -> asyncio.Future[AppendInfo]:
        """Where `data` landed, once this turn's appends to `partition` are written."""
        loop = self._loop
        if loop is None:  # bound once, not looked up (a getpid() system call) per produce
            loop = self._loop = asyncio.get_running_loop()
        waiting = self._waiting.get(partition)
        if waiting is None:
            waiting = self._waiting[partition] = []
            loop.call_soon(self._write, partition)
        done: asyncio.Future[AppendInfo] = loop.create_future()
        waiting.append((data, acks, done))
        return done

    def _write(self, partition: Partition, room_made: bool = False) -> None:
        waiting = self._waiting[partition]
        if not room_made:
            size = sum(len(data) for data, _, _ in waiting)
            if partition.log.needs_room(size):
                self._make_room(partition, size)
                return
        del self._waiting[partition]
        self.writes += 1
        self.requests += len(waiting)
        try:
            outcomes = partition.append_together([(data, acks) for data, acks, _ in waiting])
        except Exception as exc:  # no longer leader, or closed: the same answer for every one
            for _, _, done in waiting:
                if not done.cancelled():
                    done.set_exception(exc)
            return
        for (_, _, done), outcome in zip(waiting, outcomes, strict=True):
            if done.cancelled():
                continue
            if isinstance(outcome, Exception):
                done.set_exception(outcome)
            else:
                done.set_result(outcome)

    def _make_room(self, partition: Partition, size: int) -> None:
        """Roll (or wait for the log) in a thread, then write what gathered meanwhile. A failed
        roll is left to the write, which meets the same error and answers each request."""
        making = asyncio.ensure_future(asyncio.to_thread(partition.log.make_room, size))

        def made(future: asyncio.Future[None]) -> None:
            if not future.cancelled():
                future.exception()
            self._write(partition, room_made=True)

        making.add_done_callback(made)


class FlushGroups:
    """One fsync at a time per partition; appends made while it runs share the next one."""

    def __init__(self) -> None:
        self._running: dict[Partition, asyncio.Future[None]] = {}

    async def flush_through(self, partition: Partition, offset: int) -> None:
        """Return once `offset` is on disk (a flush that started after it was appended)."""
        running = self._running.get(partition)
        if running is not None and partition.log.recovery_point <= offset:
            # It may have started before `offset` was appended; it is waited for either way,
            # since two fsyncs of one file at once buy nothing.
            await asyncio.shield(running)
        if partition.log.recovery_point > offset:
            return
        running = self._running.get(partition)
        if running is None:
            running = self._start(partition)
        await asyncio.shield(running)

    def _start(self, partition: Partition) -> asyncio.Future[None]:
        running = asyncio.ensure_future(asyncio.to_thread(partition.log.flush))
        self._running[partition] = running

        def finished(future: asyncio.Future[None]) -> None:
            if self._running.get(partition) is future:
                del self._running[partition]
            if not future.cancelled():
                future.exception()  # read here, so an unawaited failure is not reported twice

        running.add_done_callback(finished)
        return running
