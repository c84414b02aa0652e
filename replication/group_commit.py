"""Group commit: concurrent produces to one leader share one write and one fsync.

Appends that reach a partition in the same event-loop turn are written together at the end of
that turn (`Partition.append_together`), so an idle partition waits for nothing but the turn it
is already in, and a busy one pays one write for many requests. Appends inside a transaction
join it too: their batches stay their own (each carries its producer id and epoch), and each
request's producer is checked alone, so a fenced request fails without failing the others. A
transaction's COMMIT and ABORT markers join the turn's write too, after its requests. A
write that would first roll a segment (creating files, which can wait on the disk) or wait for
another thread holding the log makes room in a thread; the partition's requests gather
meanwhile and go in the next write. fsyncs the flush policy asks for run one at a time per
partition in a thread; the requests that arrive while one runs share the next.

A landing's future resolves in the write's own pass, but its callbacks run only in the loop's
next pass, after every connection that became readable meanwhile was read; past a few thousand
requests a second each such hop costs a whole pass of latency. An append's `then` is called in
the write's pass instead, and the `on_written` hooks right after, so that what the landings
answered goes out in that pass too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from engine import batch as fmt
from engine.log import AppendInfo
from engine.producer_state import EndMarker, ProducerIdentity
from replication.acks import Acks
from replication.partition import Partition

Then = Callable[["asyncio.Future[AppendInfo]"], None]
Waiting = list[
    tuple[
        bytes | bytearray,
        Acks,
        ProducerIdentity | None,
        "asyncio.Future[AppendInfo]",
        Then | None,
    ]
]

Marking = list[tuple[EndMarker, "asyncio.Future[AppendInfo | None]"]]


class AppendGroups:
    """Collects each leader partition's appends of the current loop turn and writes them."""

    def __init__(self) -> None:
        self._waiting: dict[Partition, Waiting] = {}
        self._marking: dict[Partition, Marking] = {}  # markers, written after the requests
        self._loop: asyncio.AbstractEventLoop | None = None
        self.writes = 0  # turns written; `requests / writes` is how much sharing happens
        self.requests = 0
        # Called after each write's landings were handed on (the gateway writes the answers
        # they made then: gateway.http.connections.turn_sender).
        self.on_written: list[Callable[[], None]] = []

    def append(
        self,
        partition: Partition,
        data: bytes | bytearray,
        acks: Acks,
        then: Then | None = None,
        producer: ProducerIdentity | None = None,
    ) -> asyncio.Future[AppendInfo]:
        """Where `data` landed, once this turn's appends to `partition` are written. `then` is
        called with the landing in the write's own pass (also if it was cancelled meanwhile),
        where a callback of the future would run a pass later. With `producer`, the batches are
        written inside its transaction, as separate batches carrying it, its epoch checked."""
        loop = self._loop
        if loop is None:  # bound once, not looked up (a getpid() system call) per produce
            loop = self._loop = asyncio.get_running_loop()
        waiting = self._waiting.get(partition)
        if waiting is None:
            waiting = self._waiting[partition] = []
            loop.call_soon(self._write, partition)
        done: asyncio.Future[AppendInfo] = loop.create_future()
        waiting.append((data, acks, producer, done, then))
        return done

    def mark(self, partition: Partition, marker: EndMarker) -> asyncio.Future[AppendInfo | None]:
        """Where `marker` landed (None: it was not due), once written after the requests of a
        write to `partition`: this turn's, or, with none yet, the next pass's. A marker is
        written from a coordinator's task, whose step runs before the produces read in the
        same pass start theirs; one pass later they have joined it, and the markers share
        their write instead of costing one each."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        marking = self._marking.get(partition)
        if marking is None:
            marking = self._marking[partition] = []
            if partition not in self._waiting:
                loop.call_soon(self._write_in_next_pass, partition)
        done: asyncio.Future[AppendInfo | None] = loop.create_future()
        marking.append((marker, done))
        return done

    def _write_in_next_pass(self, partition: Partition) -> None:
        assert self._loop is not None
        self._loop.call_soon(self._write, partition)

    def _write(self, partition: Partition, room_made: bool = False) -> None:
        waiting = self._waiting.get(partition, [])
        marking = self._marking.get(partition, [])
        if not waiting and not marking:
            return  # an earlier call of the pass wrote them (markers join requests' writes)
        if not room_made:
            size = sum(len(data) for data, _, _, _, _ in waiting)
            size += len(marking) * fmt.CONTROL_BATCH_SIZE
            if partition.log.needs_room(size):
                self._make_room(partition, size)
                return
        self._waiting.pop(partition, None)
        self._marking.pop(partition, None)
        if waiting:  # the metrics count produce writes
            self.writes += 1
            self.requests += len(waiting)
        outcomes: list[AppendInfo | Exception]
        marked: list[AppendInfo | Exception | None]
        try:
            outcomes, marked = partition.append_together(
                [entry[:3] for entry in waiting], [marker for marker, _ in marking]
            )
        except Exception as exc:  # no longer leader, or closed: the same answer for every one
            outcomes = [exc] * len(waiting)
            marked = [exc] * len(marking)
        for (_, ended), outcome in zip(marking, marked, strict=True):
            if not ended.cancelled():
                if isinstance(outcome, Exception):
                    ended.set_exception(outcome)
                else:
                    ended.set_result(outcome)
        for (_, _, _, done, then), outcome in zip(waiting, outcomes, strict=True):
            if not done.cancelled():
                if isinstance(outcome, Exception):
                    done.set_exception(outcome)
                else:
                    done.set_result(outcome)
            if then is not None:
                self._call(then, done)
        for written in self.on_written:
            self._call(written)

    def _call(self, callback: Callable[..., None], *args: object) -> None:
        """One request's callback (or a hook): its failure goes to the loop's exception
        handler, as a future's callback's would, and the others still run."""
        try:
            callback(*args)
        except Exception as exc:
            assert self._loop is not None
            self._loop.call_exception_handler(
                {"message": "a group commit's callback failed", "exception": exc}
            )

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
