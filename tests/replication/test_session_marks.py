"""A leader's fetch sessions answer a parked follower when the high watermark of one of its
partitions moves past what it was last sent, records or not, after a short linger for records
to carry it: a follower learns what is committed within the linger and a round trip, not at
the end of its wait (5 s) while nothing more is produced, and so do the consumers it serves
(KIP-392). Nothing new, the fetch stays parked."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engine import batch as fmt
from engine.errors import EngineError
from engine.log import ReadResult
from engine.manager import LogManager
from engine.notify import ChangeNotifier
from replication import replica_manager
from replication.acks import Acks
from replication.memory_store import MemoryBackend, MemoryMetadataStore
from replication.metadata import NodeInfo, PartitionState, TopicPartition, TopicSpec
from replication.replica_manager import ReplicaManager
from replication.session_wire import FetchPosition, SessionFetchRequest

KEY = ("t", 0)
EPOCH = 3
PARKED_MS = 60_000  # a parked fetch's wait: far past TIMEOUT_S, so only a wake-up answers it
TIMEOUT_S = 10.0  # bounds each wait for an answer; never reached when right
Found = dict[TopicPartition, ReadResult | EngineError]  # an answer's parts


@pytest.fixture
async def leader(tmp_path: Path) -> AsyncIterator[ReplicaManager]:
    """Node 0 leading t-0 in epoch 3, replicas and ISR (0, 1, 2)."""
    backend = MemoryBackend()
    store = MemoryMetadataStore(backend)
    await store.start(NodeInfo(0, "http://node0:8080"))
    controller = MemoryMetadataStore(backend)
    await controller.start(NodeInfo(1, "http://node1:8080"))
    fence = await controller.campaign()
    state = PartitionState(0, EPOCH, (0, 1, 2), (0, 1, 2))
    await controller.create_topic(fence, TopicSpec("t", "a" * 32, 1, 3, {}), [state])
    manager = LogManager(tmp_path)
    replicas = ReplicaManager(manager, store, 0, ChangeNotifier())
    try:
        await replicas.start()
        assert await replicas.applied(lambda: replicas.leading(*KEY) is not None, 5)
        yield replicas
    finally:
        await replicas.close()
        await controller.close()
        await store.close()
        manager.close()


def fetch(replica: int, session: tuple[int, int], offset: int | None = None) -> SessionFetchRequest:
    """A follower's session fetch (full with session (0, 0)) naming t-0 at `offset`, or
    nothing (its position unchanged)."""
    named = {} if offset is None else {KEY: FetchPosition(EPOCH, offset, 1 << 20)}
    return SessionFetchRequest(replica, session[0], session[1], PARKED_MS, 1, 1 << 20, named)


def part(found: Found) -> tuple[int, int]:
    """t-0's part of an answer: (its high watermark, its bytes of records)."""
    result = found[KEY]
    assert isinstance(result, ReadResult), result
    return result.high_watermark, len(result.data)


async def parks(
    replicas: ReplicaManager, request: SessionFetchRequest
) -> asyncio.Future[tuple[int, Found]]:
    """The request sent, once it is parked at the leader."""
    before = replicas.notifier.parked
    sent = asyncio.ensure_future(replicas.session_fetch(request))
    async with asyncio.timeout(TIMEOUT_S):
        while replicas.notifier.parked == before and not sent.done():
            await asyncio.sleep(0)
    assert not sent.done(), sent.result()
    return sent


async def test_a_high_watermark_move_answers_the_parked_session_fetches(
    leader: ReplicaManager,
) -> None:
    record = fmt.encode_batch([fmt.RecordInput(None, b"r", [], None)])
    await leader.append(*KEY, bytes(record), Acks.LEADER, 1000)
    sessions = {}
    for replica in (1, 2):  # both followers take the record; nothing is committed yet
        sessions[replica], found = await leader.session_fetch(fetch(replica, (0, 0), 0))
        assert part(found)[0] == 0 and part(found)[1] > 0
    # Node 1 has it; node 2 is still at 0 for the leader: the high watermark stays, node 1 parks.
    first = await parks(leader, fetch(1, (sessions[1], 1), 1))
    # Node 2's fetch from 1 moves the high watermark: answered at once with it, no records,
    _, second = await asyncio.wait_for(
        leader.session_fetch(fetch(2, (sessions[2], 1), 1)), TIMEOUT_S
    )
    assert part(second) == (1, 0)
    # and node 1's parked fetch wakes with it.
    _, woken = await asyncio.wait_for(first, TIMEOUT_S)
    assert part(woken) == (1, 0)
    # Told, node 1 parks again; the next record wakes it, with that record.
    again = await parks(leader, fetch(1, (sessions[1], 2)))
    await leader.append(*KEY, bytes(record), Acks.LEADER, 1000)
    _, more = await asyncio.wait_for(again, TIMEOUT_S)
    assert part(more)[0] == 1 and part(more)[1] > 0


async def test_a_mark_waits_the_linger_for_records_to_carry_it(
    leader: ReplicaManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under load the next records come within the linger: the high watermark rides with them
    instead of costing each follower an answer of its own per produce."""
    monkeypatch.setattr(replica_manager, "MARKS_LINGER_S", PARKED_MS / 1000)
    record = fmt.encode_batch([fmt.RecordInput(None, b"r", [], None)])
    await leader.append(*KEY, bytes(record), Acks.LEADER, 1000)
    sessions = {}
    for replica in (1, 2):
        sessions[replica], _ = await leader.session_fetch(fetch(replica, (0, 0), 0))
    first = await parks(leader, fetch(1, (sessions[1], 1), 1))
    # Node 2's fetch moves the high watermark to 1 and waits: so does node 1's, woken by it.
    second = await parks(leader, fetch(2, (sessions[2], 1), 1))
    moved = leader.leading(*KEY)
    assert moved is not None and moved.high_watermark == 1 and not first.done()
    await leader.append(*KEY, bytes(record), Acks.LEADER, 1000)
    for answer in (first, second):
        _, found = await asyncio.wait_for(answer, TIMEOUT_S)
        assert part(found)[0] == 1 and part(found)[1] > 0  # the mark with the next record
