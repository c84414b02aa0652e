"""The follower's side of fetch sessions against a leader that keeps the session rules of
replication.fetch_sessions (a part goes out with records or marks the follower was not sent):
a part the follower drops when its role changes is sent again, and a failure nobody expects
does not end the fetching from that leader."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from engine import batch as fmt
from engine.manager import LogManager
from replication.errors import NotLeader, ReplicationError, UnknownLeaderEpoch
from replication.fetch_sessions import FetchSessions
from replication.fetcher import THREAD_APPEND_BYTES, FetcherSettings, ReplicaFetchers
from replication.idempotency import IdempotencyIndex
from replication.memory_store import MemoryBackend, MemoryMetadataStore
from replication.metadata import NodeInfo, PartitionState
from replication.partition import Partition
from replication.replica_client import ReplicaClient
from replication.session_wire import (
    MAX_PARTITIONS,
    PartitionAnswer,
    SessionFetchAnswer,
    SessionFetchRequest,
)

KEY = ("t", 0)
RECORDS = 3
EVENT_TIMEOUT_S = 10.0  # bounds a wait for the fetcher's next request; never reached when right
# The longest backoff, far past EVENT_TIMEOUT_S: a fetcher waiting it fails the test at once.
MAX_BACKOFF_MS = int(EVENT_TIMEOUT_S * 1000) * 6


@dataclass
class Event:
    """A request the leader took, and its answer (None: it parked)."""

    request: SessionFetchRequest
    answer: SessionFetchAnswer | None


class SessionLeader:
    """Node 1 leading t-0 with RECORDS records (epoch 0): it answers a part with the records
    to a fetch from 0, and with its marks when the session has not sent them; with nothing to
    answer it parks until `move` changes its high watermark. Each request it takes is put in
    `events`; `failures` are raised by the next fetches, one each, `epoch_failures` by the
    next truncation requests; `part_failures` answer the next parts, one each."""

    def __init__(self) -> None:
        self.sessions = FetchSessions(MAX_PARTITIONS)
        batch = fmt.encode_batch([fmt.RecordInput(None, b"r", [], None)] * RECORDS)
        fmt.set_leader_epoch(batch, 0, 0)
        self.records = bytes(batch)
        self.high_watermark = 1
        self.events: asyncio.Queue[Event] = asyncio.Queue()
        self.failures: list[Exception] = []
        self.epoch_failures: list[Exception] = []
        self.part_failures: list[ReplicationError] = []
        self._moved = asyncio.Event()

    def move(self, high_watermark: int) -> None:
        self.high_watermark = high_watermark
        self._moved.set()

    async def next_event(self) -> Event:
        return await asyncio.wait_for(self.events.get(), EVENT_TIMEOUT_S)

    async def epoch_end(
        self, url: str, topic: str, partition: int, *, leader_epoch: int, epoch: int
    ) -> tuple[int, int]:
        if self.epoch_failures:
            raise self.epoch_failures.pop(0)
        return epoch, RECORDS  # every epoch the follower has ends where the leader's log does

    async def session_fetch(self, url: str, request: SessionFetchRequest) -> SessionFetchAnswer:
        if self.failures:
            raise self.failures.pop(0)
        session = self.sessions.take(request)
        while True:
            parts = {}
            for key, part in session:
                hw = self.high_watermark
                records = self.records if part.position.fetch_offset == 0 else b""
                if self.part_failures:
                    failure = self.part_failures.pop(0)
                    problem = orjson.dumps({"code": failure.code, "detail": str(failure)})
                    parts[key] = PartitionAnswer(hw, 0, error_status=409, error_body=problem)
                elif request.full or records or part.news(hw, 0):
                    parts[key] = PartitionAnswer(hw, 0, records)
                    session.answered(key, hw, 0)
            if parts:
                answer = SessionFetchAnswer(session.id, parts)
                self.events.put_nowait(Event(request, answer))
                return answer
            self.events.put_nowait(Event(request, None))
            self._moved.clear()
            await self._moved.wait()


@dataclass
class Follower:
    partition: Partition
    fetchers: ReplicaFetchers
    leader: SessionLeader


@pytest.fixture
async def follower(tmp_path: Path) -> AsyncIterator[Follower]:
    """This node (0) following node 1's t-0 in epoch 0 through a SessionLeader."""
    backend = MemoryBackend()
    stores = [MemoryMetadataStore(backend) for _ in range(2)]
    for node, store in enumerate(stores):
        await store.start(NodeInfo(node, f"http://node{node}:8080"))
    manager = LogManager(tmp_path)
    manager.create_topic("t")
    partition = Partition(manager.log(*KEY), 0, IdempotencyIndex(60, 100))
    partition.make_follower(PartitionState(1, 0, (1, 0), (1, 0)))
    leader = SessionLeader()
    client: ReplicaClient = leader  # type: ignore[assignment]
    fetchers = ReplicaFetchers(
        stores[0], client, 0, FetcherSettings(backoff_ms=1, max_backoff_ms=MAX_BACKOFF_MS)
    )
    try:
        yield Follower(partition, fetchers, leader)
    finally:
        await fetchers.close()
        manager.close()
        for store in stores:
            await store.close()


async def test_a_part_dropped_on_a_role_change_is_sent_again(follower: Follower) -> None:
    """The leader notes a high watermark as sent when it answers; if the follower drops that
    part (its role changed while the answer was on its way) and nothing is produced after, only
    a session that starts the partition afresh tells it the high watermark again."""
    partition, fetchers, leader = follower.partition, follower.fetchers, follower.leader
    await fetchers.role_changed(partition)
    full = await leader.next_event()
    assert full.request.full and full.answer is not None
    parked = await leader.next_event()  # caught up: the next fetch parks
    assert not parked.request.full and parked.answer is None
    assert (partition.log_end_offset, partition.high_watermark) == (RECORDS, 1)
    # The leader's high watermark moves and the follower's role changes (a new epoch, the same
    # leader) before it takes the answer that carries the mark: in one loop turn, in this order.
    leader.move(RECORDS)
    partition.make_follower(PartitionState(1, 1, (1, 0), (1, 0)))
    await fetchers.role_changed(partition)
    dropped = await leader.next_event()
    assert dropped.answer is not None and dropped.answer.partitions[KEY].high_watermark == RECORDS
    assert partition.high_watermark == 1  # the part came to a partition not yet truncated
    # The next request starts the partition afresh: the leader sends the mark again.
    again = await leader.next_event()
    assert again.answer is not None, "the leader parked: it believes the follower has its mark"
    assert again.answer.partitions[KEY].high_watermark == RECORDS
    assert KEY in again.request.forgotten and KEY in again.request.partitions
    idle = await leader.next_event()
    assert idle.answer is None and KEY not in idle.request.forgotten
    assert partition.high_watermark == RECORDS


@pytest.mark.parametrize("failure", [NotLeader("not yet"), UnknownLeaderEpoch("not yet")])
@pytest.mark.parametrize("step", ["truncation", "fetch"])
async def test_a_leader_behind_its_view_is_asked_again_after_the_backoff(
    follower: Follower, failure: ReplicationError, step: str
) -> None:
    """A new partition's follower may ask before its leader has taken the view that makes it
    leader: the leader refuses (not the leader, or an epoch it does not know yet) and the
    follower asks again after replica.fetch.backoff.ms, not after the longest backoff."""
    partition, fetchers, leader = follower.partition, follower.fetchers, follower.leader
    if step == "truncation":
        leader.epoch_failures.append(failure)
    else:
        leader.part_failures.append(failure)
    await fetchers.role_changed(partition)
    answered = await leader.next_event()
    if step == "fetch":
        assert answered.answer is not None and answered.answer.partitions[KEY].error_status
        answered = await leader.next_event()
    assert answered.answer is not None and answered.answer.partitions[KEY].records
    parked = await leader.next_event()
    assert parked.answer is None
    assert partition.log_end_offset == RECORDS


async def test_an_unexpected_failure_is_logged_and_fetching_goes_on(
    follower: Follower, caplog: pytest.LogCaptureFixture
) -> None:
    """Only a role change would start another task for the leader: the one it has must not
    end on an error nobody expected (here the client's), but log it and start a new session."""
    partition, fetchers, leader = follower.partition, follower.fetchers, follower.leader
    leader.failures.append(RuntimeError("a bug below the fetcher"))
    with caplog.at_level(logging.ERROR, "replication.fetcher"):
        await fetchers.role_changed(partition)
        full = await leader.next_event()
    assert full.request.full and full.answer is not None
    [line] = [r for r in caplog.records if r.name == "replication.fetcher"]
    assert line.levelno == logging.ERROR
    assert "fetching from node 1 failed" in line.getMessage()
    assert line.exc_info is not None and "a bug below the fetcher" in str(line.exc_info[1])
    parked = await leader.next_event()
    assert parked.answer is None
    assert partition.log_end_offset == RECORDS


@pytest.mark.parametrize(("copying", "nice"), [(False, 0), (True, 19)])
async def test_a_large_part_is_written_off_the_event_loop(
    follower: Follower, monkeypatch: pytest.MonkeyPatch, copying: bool, nice: int
) -> None:
    """A part of THREAD_APPEND_BYTES or more (a follower catching up, a replica a move adds) is
    appended in a worker thread, so the loop serves the node's other work meanwhile; the log
    ends as it would inline. A move's copy (this replica added, not in sync yet) is written at
    the lowest CPU priority, the ISR's catch-up at the node's own."""
    partition, fetchers, leader = follower.partition, follower.fetchers, follower.leader
    if copying:
        partition.make_follower(PartitionState(1, 0, (1, 0), (1,), adding=(0,)))
    own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    value = b"v" * (THREAD_APPEND_BYTES // RECORDS + 1)
    batch = fmt.encode_batch([fmt.RecordInput(None, value, [], None)] * RECORDS)
    fmt.set_leader_epoch(batch, 0, 0)
    leader.records = bytes(batch)
    threads: list[int] = []
    priorities: list[int] = []
    append = partition.append_from_leader

    def noting_thread(*args: object) -> None:
        threads.append(threading.get_ident())
        priorities.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        append(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(partition, "append_from_leader", noting_thread)
    await fetchers.role_changed(partition)
    full = await leader.next_event()
    assert full.answer is not None and len(leader.records) >= THREAD_APPEND_BYTES
    parked = await leader.next_event()
    assert parked.answer is None
    assert (partition.log_end_offset, partition.high_watermark) == (RECORDS, 1)
    assert threads and threading.get_ident() not in threads
    assert priorities == [max(nice, own)]
    written = partition.log.read(0, 1 << 24, upper_offset=RECORDS).data
    assert [r.value for r in fmt.iter_records(written)] == [value] * RECORDS


async def test_a_small_part_waits_off_the_loop_for_a_log_another_thread_holds(
    follower: Follower, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A part below THREAD_APPEND_BYTES whose append would wait (another thread holds the log:
    a roll, a flush, a retention pass) or roll a segment is written in a worker thread too."""
    partition, fetchers, leader = follower.partition, follower.fetchers, follower.leader
    assert len(leader.records) < THREAD_APPEND_BYTES
    loop = asyncio.get_running_loop()
    held, release = threading.Event(), threading.Event()
    entered: asyncio.Future[None] = loop.create_future()
    threads: list[int] = []
    append = partition.append_from_leader

    def hold() -> None:
        with partition.log._lock:
            held.set()
            release.wait(EVENT_TIMEOUT_S)

    def set_once() -> None:
        if not entered.done():
            entered.set_result(None)

    def noting_thread(*args: object) -> None:
        threads.append(threading.get_ident())
        loop.call_soon_threadsafe(set_once)
        append(*args)  # type: ignore[arg-type]

    holder = threading.Thread(target=hold)
    fetch = leader.session_fetch

    async def holding_from_the_answer(url: str, request: SessionFetchRequest) -> SessionFetchAnswer:
        answer = await fetch(url, request)
        if not holder.is_alive() and not release.is_set():  # the truncation step is done
            holder.start()
            held.wait(EVENT_TIMEOUT_S)
        return answer

    monkeypatch.setattr(partition, "append_from_leader", noting_thread)
    monkeypatch.setattr(leader, "session_fetch", holding_from_the_answer)
    await fetchers.role_changed(partition)
    await asyncio.wait_for(entered, EVENT_TIMEOUT_S)
    assert partition.log_end_offset == 0
    release.set()
    assert (await leader.next_event()).answer is not None
    assert (await leader.next_event()).answer is None
    holder.join()
    assert threads and threading.get_ident() not in threads
    assert partition.log_end_offset == RECORDS


async def test_close_ends_a_link_a_role_change_wakes_in_the_same_turn(follower: Follower) -> None:
    """A node stopping as its roles change: the link waiting for a change is woken and
    cancelled in one loop turn, and close still ends (with Python 3.11's asyncio.wait_for the
    cancellation was swallowed, the link ran on, and the node never exited)."""
    partition, fetchers = follower.partition, follower.fetchers
    partition.make_follower(PartitionState(2, 0, (2, 0), (2, 0)))  # node 2: no address known
    await fetchers.role_changed(partition)
    await asyncio.sleep(0)  # the link's task takes its first turn: it waits for a change
    partition.make_follower(PartitionState(2, 1, (2, 0), (2, 0)))
    await fetchers.role_changed(partition)  # wakes the link, and does not yield
    async with asyncio.timeout(EVENT_TIMEOUT_S):
        await fetchers.close()
