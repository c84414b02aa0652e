"""Group commit: one loop turn's produces to a partition share one write and one fsync, and
each still gets its own offsets, its own idempotent answer and its own error."""

from __future__ import annotations

import asyncio
import errno
import functools
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine import batch as fmt
from engine import txn_index
from engine.config import TopicConfig
from engine.errors import (
    InsufficientStorage,
    InvalidRecord,
    ProducerFenced,
    RecordTooLarge,
    TransactionNotOngoing,
)
from engine.log import AppendInfo, PartitionLog
from engine.producer_state import EndMarker, Isolation, ProducerIdentity
from engine.segment import LogSegment
from engine.txn_index import AbortedTxn
from replication.acks import Acks
from replication.errors import IdempotencyKeyReused, NotEnoughReplicas, NotLeader
from replication.group_commit import AppendGroups, FlushGroups
from replication.idempotency import IdempotencyIndex, Marker
from replication.metadata import PartitionState
from replication.partition import Partition
from tests.replication.test_idempotency import marked

EVENT_TIMEOUT_S = 10.0  # bounds a wait on another thread; never reached when right
P, Q = 1000, 2000  # transactional producers' ids


def records(*values: bytes) -> bytearray:
    return fmt.encode_batches([(None, v, [], None) for v in values], max_batch_bytes=1 << 20)


def marker(key: str, digest: str = "d", count: int = 1) -> Marker:
    return Marker(key, digest, 1, count, int(time.time() * 1000))


@pytest.fixture
def leader(tmp_path: Path) -> Iterator[Partition]:
    config = TopicConfig().with_overrides({"max.message.bytes": 4096, "flush.messages": 1})
    log = PartitionLog(tmp_path / "t-0", "t", 0, config)
    partition = Partition(log, 0, IdempotencyIndex(3600, 1000))
    partition.make_leader(PartitionState(0, 3, (0,), (0,)))
    yield partition
    log.close()


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every write to a segment file."""
    sizes: list[int] = []
    original = LogSegment.append

    def counted(self: LogSegment, data: bytes | bytearray | memoryview, *args: object) -> None:
        sizes.append(len(data))
        original(self, data, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(LogSegment, "append", counted)
    return sizes


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of the bytes of every `check_as_leader` call."""
    sizes: list[int] = []
    check = PartitionLog.check_as_leader

    def counted(
        log: PartitionLog, data: bytes | bytearray, *, in_transaction: bool = False
    ) -> list[tuple[int, fmt.BatchHeader]]:
        sizes.append(len(data))
        return check(log, data, in_transaction=in_transaction)

    monkeypatch.setattr(PartitionLog, "check_as_leader", counted)
    return sizes


def _full(self: LogSegment, data: bytes | bytearray | memoryview, *args: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def values_of(log: PartitionLog) -> list[bytes | None]:
    """Every record's value, over all segments."""
    values: list[bytes | None] = []
    while len(values) < log.log_end_offset:
        data = log.read(len(values), 1 << 20, upper_offset=log.log_end_offset).data
        values.extend(record.value for record in fmt.iter_records(data))
    return values


async def test_one_turns_produces_share_one_write_with_their_own_offsets(
    leader: Partition, writes: list[int]
) -> None:
    groups = AppendGroups()
    bodies = [records(b"a"), records(b"b", b"c"), records(b"d")]
    infos = await asyncio.gather(*(groups.append(leader, body, Acks.LEADER) for body in bodies))
    assert [(i.first_offset, i.last_offset, i.record_count) for i in infos] == [
        (0, 0, 1),
        (1, 2, 2),
        (3, 3, 1),
    ]
    assert writes == [sum(len(body) for body in bodies)]
    assert values_of(leader.log) == [b"a", b"b", b"c", b"d"]
    batches = fmt.scan(leader.log.read(0, 1 << 20, upper_offset=4).data, check_crc=True)
    assert [h.partition_leader_epoch for _, h in batches.headers] == [3, 3, 3]


async def test_plain_requests_are_checked_together_in_one_pass(
    leader: Partition, checks: list[int]
) -> None:
    groups = AppendGroups()
    bodies: list[bytes | bytearray] = [records(b"a"), records(b"b", b"c"), bytes(records(b"d"))]
    infos = await asyncio.gather(*(groups.append(leader, body, Acks.LEADER) for body in bodies))
    assert checks == [sum(len(body) for body in bodies)]  # one check of the joined bytes
    assert [(i.first_offset, i.last_offset, i.record_count) for i in infos] == [
        (0, 0, 1),
        (1, 2, 2),
        (3, 3, 1),
    ]
    assert values_of(leader.log) == [b"a", b"b", b"c", b"d"]


async def test_a_request_of_several_batches_gets_the_offsets_of_all_of_them(
    leader: Partition, writes: list[int], checks: list[int]
) -> None:
    groups = AppendGroups()
    bodies = [records(b"a"), records(b"b") + records(b"c", b"d"), records(b"e")]
    infos = await asyncio.gather(*(groups.append(leader, body, Acks.LEADER) for body in bodies))
    assert [(i.first_offset, i.last_offset, i.record_count) for i in infos] == [
        (0, 0, 1),
        (1, 3, 3),
        (4, 4, 1),
    ]
    assert len(writes) == 1
    assert checks == [sum(len(body) for body in bodies)]  # checked together all the same
    assert values_of(leader.log) == [b"a", b"b", b"c", b"d", b"e"]


async def test_an_empty_request_fails_alone(leader: Partition) -> None:
    groups = AppendGroups()
    outcomes = await asyncio.gather(
        groups.append(leader, records(b"a"), Acks.LEADER),
        groups.append(leader, b"", Acks.LEADER),
        groups.append(leader, records(b"b"), Acks.LEADER),
        return_exceptions=True,
    )
    assert isinstance(outcomes[1], InvalidRecord)
    assert [o.first_offset for o in outcomes if isinstance(o, AppendInfo)] == [0, 1]
    assert values_of(leader.log) == [b"a", b"b"]


async def test_a_failed_write_fails_every_request_of_the_turn(
    leader: Partition, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(LogSegment, "append", _full)
    groups = AppendGroups()
    outcomes = await asyncio.gather(
        *(groups.append(leader, records(v), Acks.LEADER) for v in (b"a", b"b", b"c")),
        return_exceptions=True,
    )
    assert all(isinstance(o, InsufficientStorage) for o in outcomes)
    assert leader.log.log_end_offset == 0
    monkeypatch.undo()
    assert (await groups.append(leader, records(b"d"), Acks.LEADER)).first_offset == 0


async def test_an_idle_partition_writes_in_the_turn_it_is_asked(leader: Partition) -> None:
    landing = AppendGroups().append(leader, records(b"a"), Acks.LEADER)
    assert not landing.done()
    await asyncio.sleep(0)  # one loop turn: the write is scheduled with call_soon
    assert landing.done()
    assert landing.result().first_offset == 0


async def test_a_refused_request_fails_alone(leader: Partition, writes: list[int]) -> None:
    groups = AppendGroups()
    corrupt = records(b"x")
    corrupt[-1] ^= 0xFF  # its CRC no longer matches
    too_large = records(b"y" * 5000)
    outcomes = await asyncio.gather(
        groups.append(leader, records(b"a"), Acks.LEADER),
        groups.append(leader, corrupt, Acks.LEADER),
        groups.append(leader, too_large, Acks.LEADER),
        groups.append(leader, records(b"b"), Acks.LEADER),
        return_exceptions=True,
    )
    assert isinstance(outcomes[1], InvalidRecord)
    assert isinstance(outcomes[2], RecordTooLarge)
    good = [o for o in outcomes if isinstance(o, AppendInfo)]
    assert [(o.first_offset, o.record_count) for o in good] == [(0, 1), (1, 1)]
    assert len(writes) == 1
    assert values_of(leader.log) == [b"a", b"b"]


async def test_transactional_requests_join_the_turns_write_as_their_own_batches(
    leader: Partition, writes: list[int]
) -> None:
    """Requests inside transactions share the turn's one write with plain ones; each keeps
    its own batch carrying its producer, and a zombie's (an epoch older than the partition
    saw) is refused alone."""
    groups = AppendGroups()
    await groups.append(leader, records(b"first"), Acks.LEADER, producer=ProducerIdentity(P, 1))
    writes.clear()
    outcomes = await asyncio.gather(
        groups.append(leader, records(b"zombie"), Acks.LEADER, producer=ProducerIdentity(P, 0)),
        groups.append(leader, records(b"a"), Acks.LEADER, producer=ProducerIdentity(P, 1)),
        groups.append(leader, records(b"plain"), Acks.LEADER),
        groups.append(leader, records(b"b", b"c"), Acks.LEADER, producer=ProducerIdentity(Q, 0)),
        return_exceptions=True,
    )
    assert isinstance(outcomes[0], ProducerFenced)
    landed = [(o.first_offset, o.record_count) for o in outcomes[1:] if isinstance(o, AppendInfo)]
    assert landed == [(1, 1), (2, 1), (3, 2)]
    assert len(writes) == 1
    assert values_of(leader.log) == [b"first", b"a", b"plain", b"b", b"c"]
    headers = fmt.scan(leader.log.read(1, 1 << 20, upper_offset=5).data, check_crc=True).headers
    assert [(h.producer_id, h.producer_epoch) for _, h in headers] == [(P, 1), (-1, -1), (Q, 0)]
    assert [bool(h.attributes & fmt.TRANSACTIONAL_MASK) for _, h in headers] == [1, 0, 1]
    assert leader.log.producer_state.ongoing == {P: 0, Q: 3}
    assert leader.last_stable_offset == 0


async def test_a_turn_with_transactional_requests_is_checked_in_one_pass(
    leader: Partition, checks: list[int], writes: list[int]
) -> None:
    """A turn whose requests are inside transactions (or beside them) is validated in one
    pass over its bytes joined, as a plain turn is, and written in one write."""
    groups = AppendGroups()
    bodies = [records(b"a"), records(b"b") + records(b"c"), records(b"d")]
    producers = [ProducerIdentity(P, 0), None, ProducerIdentity(Q, 0)]
    infos = await asyncio.gather(
        *(
            groups.append(leader, body, Acks.LEADER, producer=producer)
            for body, producer in zip(bodies, producers, strict=True)
        )
    )
    assert checks == [sum(len(body) for body in bodies)]
    assert len(writes) == 1
    assert [(i.first_offset, i.record_count) for i in infos] == [(0, 1), (1, 2), (3, 1)]
    headers = fmt.scan(leader.log.read(0, 1 << 20, upper_offset=4).data, check_crc=True).headers
    assert [h.producer_id for _, h in headers] == [P, -1, -1, Q]


async def test_a_transactions_newer_epoch_fences_an_older_one_later_in_the_same_turn(
    leader: Partition, writes: list[int]
) -> None:
    """Two epochs of one producer in a turn are judged as if written one after the other: the
    newer one, first, fences the older (checked against the state before the write alone,
    both would pass). A transaction ended here refuses its epoch's late write (KIP-890)."""
    groups = AppendGroups()
    outcomes = await asyncio.gather(
        groups.append(leader, records(b"new"), Acks.LEADER, producer=ProducerIdentity(P, 1)),
        groups.append(leader, records(b"zombie"), Acks.LEADER, producer=ProducerIdentity(P, 0)),
        groups.append(leader, records(b"other"), Acks.LEADER, producer=ProducerIdentity(Q, 0)),
        return_exceptions=True,
    )
    assert isinstance(outcomes[1], ProducerFenced)
    assert [o.first_offset for o in outcomes if isinstance(o, AppendInfo)] == [0, 1]
    assert len(writes) == 1
    leader.write_marker(ProducerIdentity(Q, 0), True, 0)
    late = await asyncio.gather(
        groups.append(leader, records(b"late"), Acks.LEADER, producer=ProducerIdentity(Q, 0)),
        groups.append(leader, records(b"more"), Acks.LEADER, producer=ProducerIdentity(P, 1)),
        return_exceptions=True,
    )
    assert isinstance(late[0], TransactionNotOngoing)
    assert isinstance(late[1], AppendInfo) and late[1].first_offset == 3
    read = leader.log.read(0, 1 << 20, upper_offset=4).data  # Q's marker at 2 reaches no one
    assert [r.value for r in fmt.iter_records(read)] == [b"new", b"other", b"more"]


def stamped(producer: ProducerIdentity, *values: bytes) -> bytearray:
    """Batches built for `producer`'s transaction already (as the C JSON path builds them)."""
    data = records(*values)
    fmt.set_producers(data, fmt.scan(data).headers, *producer)
    return data


async def test_batches_built_for_their_transaction_go_in_and_plain_ones_may_not_claim_one(
    leader: Partition, checks: list[int]
) -> None:
    """A transaction's request may come stamped for its producer, or for another one (it is
    stamped again for its own); a request outside any transaction whose batch claims one is
    refused alone, while the others of its write go in."""
    groups = AppendGroups()
    built = stamped(ProducerIdentity(P, 0), b"p")
    outcomes = await asyncio.gather(
        groups.append(leader, built, Acks.LEADER, producer=ProducerIdentity(P, 0)),
        groups.append(leader, stamped(ProducerIdentity(9, 9), b"q"), Acks.LEADER,
                      producer=ProducerIdentity(Q, 0)),
        groups.append(leader, stamped(ProducerIdentity(Q, 0), b"claims"), Acks.LEADER),
        groups.append(leader, records(b"plain"), Acks.LEADER),
        return_exceptions=True,
    )  # fmt: skip
    assert isinstance(outcomes[2], InvalidRecord)
    assert "transactional batches are refused" in str(outcomes[2])
    assert [o.first_offset for o in outcomes if isinstance(o, AppendInfo)] == [0, 1, 2]
    assert len(checks) == 1 + 4  # the joined check, then each request's own
    read = leader.log.read(0, 1 << 20, upper_offset=3).data
    headers = [h for _, h in fmt.scan(read).headers]
    assert [(h.producer_id, h.producer_epoch) for h in headers] == [(P, 0), (Q, 0), (-1, -1)]
    assert [bool(h.attributes & fmt.TRANSACTIONAL_MASK) for h in headers] == [True, True, False]
    assert [r.value for r in fmt.iter_records(read)] == [b"p", b"q", b"plain"]


async def test_the_lso_and_aborted_index_follow_a_joined_write_at_once(leader: Partition) -> None:
    """Right after a write that opened two transactions the last stable offset is held at the
    first; once that one is aborted, the index names its records (read_committed leaves them
    out) and the LSO moves to the other's."""
    groups = AppendGroups()
    await asyncio.gather(
        groups.append(leader, records(b"p1"), Acks.LEADER, producer=ProducerIdentity(P, 0)),
        groups.append(leader, records(b"q1"), Acks.LEADER, producer=ProducerIdentity(Q, 0)),
        groups.append(leader, records(b"p2"), Acks.LEADER, producer=ProducerIdentity(P, 0)),
    )
    log = leader.log
    assert (log.high_watermark, log.last_stable_offset) == (3, 0)
    leader.write_marker(ProducerIdentity(P, 0), False, 0)
    assert log.last_stable_offset == 1
    assert log.aborted_transactions(0, 4) == [AbortedTxn(P, 0, 3, 1)]
    assert txn_index.read_entries(txn_index.index_path(log.directory, 0)) == [
        AbortedTxn(P, 0, 3, 1)
    ]
    leader.write_marker(ProducerIdentity(Q, 0), True, 0)
    assert log.last_stable_offset == log.high_watermark == 5
    read = log.read(0, 1 << 20, isolation=Isolation.READ_COMMITTED).data
    assert [r.value for r in fmt.iter_records(read)] == [b"q1"]


async def test_markers_of_several_transactions_share_one_write_after_the_requests(
    leader: Partition, writes: list[int]
) -> None:
    """Markers asked for while a pass's requests gather go at the end of their write, one write
    for all: a commit of transactions that end together costs one write a partition, not
    one a marker. Each gets its own offset, and its transaction ends there."""
    groups = AppendGroups()
    await asyncio.gather(
        groups.append(leader, records(b"p"), Acks.LEADER, producer=ProducerIdentity(P, 0)),
        groups.append(leader, records(b"q"), Acks.LEADER, producer=ProducerIdentity(Q, 0)),
    )
    writes.clear()
    marked = groups.mark(leader, EndMarker(P, 0, True, 3))
    other = groups.mark(leader, EndMarker(Q, 0, False, 3))
    plain = groups.append(leader, records(b"plain"), Acks.LEADER)
    landed = await asyncio.gather(marked, other, plain)
    assert len(writes) == 1
    assert [(i.first_offset, i.record_count) for i in landed if i is not None] == [
        (3, 1),
        (4, 1),
        (2, 1),
    ]
    raw = leader.log.read(2, 1 << 20, isolation=Isolation.RAW).data
    headers = [h for _, h in fmt.scan(raw).headers]
    assert [(h.producer_id, h.is_control) for h in headers] == [(-1, False), (P, True), (Q, True)]
    log = leader.log
    assert log.producer_state.ongoing == {}
    assert log.last_stable_offset == log.high_watermark == 5
    assert log.aborted_transactions(0, 5) == [AbortedTxn(Q, 1, 4, 5)]
    read = log.read(0, 1 << 20, isolation=Isolation.READ_COMMITTED).data
    assert [r.value for r in fmt.iter_records(read)] == [b"p", b"plain"]


async def test_a_marker_waits_a_pass_for_the_requests_read_after_it(
    leader: Partition, writes: list[int]
) -> None:
    """A marker asked for with no request waiting is written a pass later, with the requests
    that arrived meanwhile (a coordinator's step runs before the produces read in its pass
    reach the partition), and alone when none did."""
    groups = AppendGroups()
    await groups.append(leader, records(b"p"), Acks.LEADER, producer=ProducerIdentity(P, 0))
    writes.clear()
    marked = groups.mark(leader, EndMarker(P, 0, True, 0))
    await asyncio.sleep(0)  # the next pass: a produce read then
    plain = groups.append(leader, records(b"plain"), Acks.LEADER)
    info, landing = await asyncio.gather(marked, plain)
    assert len(writes) == 1
    assert info is not None and (info.first_offset, landing.first_offset) == (2, 1)
    alone = await groups.mark(leader, EndMarker(Q, 0, False, 0))
    assert alone is not None and alone.first_offset == 3 and len(writes) == 2


async def test_a_marker_of_a_producer_in_the_same_write_goes_in_its_own_write_after_it(
    leader: Partition, writes: list[int]
) -> None:
    """A marker whose producer a request of the write names (or another marker) is written
    alone after the write, so that each producer's state is checked as it is when its
    batch goes in: the request joins the transaction, the marker then ends it, and a second
    marker of the same transaction is not written (None)."""
    groups = AppendGroups()
    await groups.append(leader, records(b"p"), Acks.LEADER, producer=ProducerIdentity(P, 0))
    writes.clear()
    landing = groups.append(leader, records(b"more"), Acks.LEADER, producer=ProducerIdentity(P, 0))
    first = groups.mark(leader, EndMarker(P, 0, False, 0))
    again = groups.mark(leader, EndMarker(P, 0, False, 0))
    outcomes = await asyncio.gather(landing, first, again)
    assert outcomes[0].first_offset == 1
    assert outcomes[1] is not None and outcomes[1].first_offset == 2
    assert outcomes[2] is None
    assert len(writes) == 2
    assert leader.log.aborted_transactions(0, 3) == [AbortedTxn(P, 0, 2, 3)]


async def test_a_marker_not_due_is_answered_none_and_writes_nothing(
    leader: Partition, writes: list[int]
) -> None:
    """A coordinator's retry of a marker already written, or of an epoch older than one the
    partition has seen since, writes nothing."""
    groups = AppendGroups()
    await groups.append(leader, records(b"p"), Acks.LEADER, producer=ProducerIdentity(P, 1))
    assert await groups.mark(leader, EndMarker(P, 1, True, 0)) is not None
    writes.clear()
    assert await groups.mark(leader, EndMarker(P, 1, True, 0)) is None
    assert await groups.mark(leader, EndMarker(P, 0, False, 0)) is None
    assert writes == [] and leader.log.log_end_offset == 2


async def test_a_failed_write_fails_its_markers_too(
    leader: Partition, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that fails (a full disk) fails the markers it carried; nothing of it is in the
    log, and the coordinator retries them."""
    groups = AppendGroups()
    await groups.append(leader, records(b"p"), Acks.LEADER, producer=ProducerIdentity(P, 0))

    def full(*_: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(LogSegment, "append", full)
    outcomes = await asyncio.gather(
        groups.append(leader, records(b"q"), Acks.LEADER),
        groups.mark(leader, EndMarker(P, 0, True, 0)),
        return_exceptions=True,
    )
    assert all(isinstance(o, InsufficientStorage) for o in outcomes), outcomes
    assert leader.log.log_end_offset == 1 and leader.log.producer_state.ongoing == {P: 0}


async def test_acks_all_below_min_insync_is_refused_per_request(tmp_path: Path) -> None:
    config = TopicConfig().with_overrides({"min.insync.replicas": 2})
    log = PartitionLog(tmp_path / "t-0", "t", 0, config)
    partition = Partition(log, 0, IdempotencyIndex(3600, 1000))
    partition.make_leader(PartitionState(0, 1, (0, 1), (0,)))
    groups = AppendGroups()
    outcomes = await asyncio.gather(
        groups.append(partition, records(b"a"), Acks.ALL),
        groups.append(partition, records(b"b"), Acks.LEADER),
        return_exceptions=True,
    )
    assert isinstance(outcomes[0], NotEnoughReplicas)
    assert isinstance(outcomes[1], AppendInfo) and outcomes[1].first_offset == 0
    log.close()


async def test_idempotent_requests_in_one_write_keep_exactly_once(
    leader: Partition, writes: list[int]
) -> None:
    groups = AppendGroups()
    first = marked(marker("k1"), [b"a"])
    outcomes = await asyncio.gather(
        groups.append(leader, first, Acks.LEADER),
        groups.append(leader, marked(marker("k2"), [b"b"]), Acks.LEADER),
        groups.append(
            leader, marked(marker("k1"), [b"a"]), Acks.LEADER
        ),  # a retry, in the same turn
        groups.append(leader, marked(marker("k2", digest="other"), [b"z"]), Acks.LEADER),
        return_exceptions=True,
    )
    assert isinstance(outcomes[0], AppendInfo) and isinstance(outcomes[1], AppendInfo)
    assert isinstance(outcomes[2], AppendInfo)
    assert outcomes[2].first_offset == outcomes[0].first_offset == 0
    assert outcomes[1].first_offset == 1
    assert isinstance(outcomes[3], IdempotencyKeyReused)
    assert values_of(leader.log) == [b"a", b"b"]
    # A retry in a later turn is answered from the index, without a write.
    again = await groups.append(leader, marked(marker("k2"), [b"b"]), Acks.LEADER)
    assert again.first_offset == 1
    assert len(writes) == 1


async def test_a_follower_refuses_the_whole_turn(leader: Partition) -> None:
    leader.make_follower(PartitionState(1, 4, (0, 1), (0, 1)))
    groups = AppendGroups()
    outcomes = await asyncio.gather(
        groups.append(leader, records(b"a"), Acks.LEADER),
        groups.append(leader, records(b"b"), Acks.LEADER),
        return_exceptions=True,
    )
    assert all(isinstance(o, NotLeader) for o in outcomes)
    assert leader.log.log_end_offset == 0


async def test_a_cancelled_request_does_not_stop_the_others(leader: Partition) -> None:
    groups = AppendGroups()
    gone = groups.append(leader, records(b"a"), Acks.LEADER)
    kept = groups.append(leader, records(b"b"), Acks.LEADER)
    gone.cancel()
    assert (await kept).first_offset == 1  # the cancelled one was still written: its client left
    assert values_of(leader.log) == [b"a", b"b"]


async def test_then_runs_in_the_writes_pass_with_the_landing_settled(leader: Partition) -> None:
    """`then` is called in the write's own pass, before a callback scheduled behind the write
    (a future's callback would run a pass later, after it); then the `on_written` hooks."""
    groups = AppendGroups()
    order: list[str] = []

    def then(name: str, landing: asyncio.Future[AppendInfo]) -> None:
        order.append(f"{name} {landing.result().first_offset}")

    groups.on_written.append(lambda: order.append("written"))
    first = groups.append(leader, records(b"a"), Acks.LEADER, functools.partial(then, "a"))
    first.add_done_callback(lambda _: order.append("future's callback"))
    groups.append(leader, records(b"b"), Acks.LEADER, functools.partial(then, "b"))
    asyncio.get_running_loop().call_soon(order.append, "scheduled after the write")
    await first
    assert order == ["a 0", "b 1", "written", "scheduled after the write", "future's callback"]


async def test_then_hears_of_a_failure_and_of_a_cancelled_landing(
    leader: Partition, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed write is handed to every `then`; one whose request was cancelled meanwhile (its
    client went) is called too, with the cancelled landing, so that it can let go of it."""
    monkeypatch.setattr(LogSegment, "append", _full)
    groups = AppendGroups()
    seen: list[str] = []

    def then(landing: asyncio.Future[AppendInfo]) -> None:
        seen.append("cancelled" if landing.cancelled() else type(landing.exception()).__name__)

    gone = groups.append(leader, records(b"a"), Acks.LEADER, then)
    kept = groups.append(leader, records(b"b"), Acks.LEADER, then)
    gone.cancel()
    with pytest.raises(InsufficientStorage):
        await kept
    assert seen == ["cancelled", "InsufficientStorage"]


async def test_a_failing_then_is_reported_and_the_others_still_run(leader: Partition) -> None:
    """A `then` that raises goes to the loop's exception handler, as a future's callback's
    error would; the other requests' and the hooks still run."""
    loop = asyncio.get_running_loop()
    reported: list[BaseException] = []
    loop.set_exception_handler(lambda _, context: reported.append(context["exception"]))
    try:
        groups = AppendGroups()
        seen: list[int] = []

        def broken(landing: asyncio.Future[AppendInfo]) -> None:
            raise RuntimeError("a bug in one request's callback")

        def then(landing: asyncio.Future[AppendInfo]) -> None:
            seen.append(landing.result().first_offset)

        groups.on_written.append(lambda: seen.append(-1))
        groups.append(leader, records(b"a"), Acks.LEADER, broken)
        await groups.append(leader, records(b"b"), Acks.LEADER, then)
    finally:
        loop.set_exception_handler(None)
    assert seen == [1, -1]
    assert [str(exc) for exc in reported] == ["a bug in one request's callback"]


async def test_flushes_asked_for_while_one_runs_share_the_next(
    leader: Partition, monkeypatch: pytest.MonkeyPatch
) -> None:
    targets: list[int] = []
    entered = asyncio.Event()
    release = asyncio.Event()
    loop = asyncio.get_running_loop()
    flush, fsync = PartitionLog.flush, LogSegment.fsync

    def counted_flush(log: PartitionLog, up_to: int | None = None) -> None:
        targets.append(log.log_end_offset)
        flush(log, up_to)

    def gated_fsync(segment: LogSegment) -> None:
        if len(targets) == 1:  # hold the first fsync until the later appends are made
            loop.call_soon_threadsafe(entered.set)
            asyncio.run_coroutine_threadsafe(release.wait(), loop).result()
        fsync(segment)

    monkeypatch.setattr(PartitionLog, "flush", counted_flush)
    monkeypatch.setattr(LogSegment, "fsync", gated_fsync)
    flushes = FlushGroups()
    leader.append(records(b"a"), Acks.LEADER)
    first = asyncio.ensure_future(flushes.flush_through(leader, 0))
    await entered.wait()
    later = []
    for value in (b"b", b"c", b"d"):
        info = leader.append(records(value), Acks.LEADER)
        later.append(asyncio.ensure_future(flushes.flush_through(leader, info.last_offset)))
    release.set()
    await asyncio.gather(first, *later)
    assert targets == [1, 4]  # two fsyncs for four requests: the three later ones share one
    assert leader.log.recovery_point == 4


@pytest.fixture
def small_segments(tmp_path: Path) -> Iterator[Partition]:
    """A leader whose segments hold about two one-record requests each."""
    size = len(records(b"a"))
    config = TopicConfig().with_overrides({"segment.bytes": 2 * size + size // 2})
    log = PartitionLog(tmp_path / "s-0", "s", 0, config)
    partition = Partition(log, 0, IdempotencyIndex(3600, 1000))
    partition.make_leader(PartitionState(0, 3, (0,), (0,)))
    yield partition
    log.close()


async def test_a_write_that_rolls_rolls_in_a_thread_with_later_requests_behind_it(
    small_segments: Partition, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A segment's files are created off the loop (their creation can wait on the disk); the
    loop turns meanwhile, requests made during the roll join the next write, and every
    request lands in order in the new segment."""
    log = small_segments.log
    loop = asyncio.get_running_loop()
    rolled_in: list[int] = []
    rolling = asyncio.Event()
    release = threading.Event()
    roll = PartitionLog._roll

    def gated_roll(self: PartitionLog) -> LogSegment:
        rolled_in.append(threading.get_ident())
        loop.call_soon_threadsafe(rolling.set)
        release.wait(EVENT_TIMEOUT_S)
        return roll(self)

    monkeypatch.setattr(PartitionLog, "_roll", gated_roll)
    groups = AppendGroups()
    await asyncio.gather(
        *(groups.append(small_segments, records(v), Acks.LEADER) for v in (b"a", b"b"))
    )
    first = groups.append(small_segments, records(b"c"), Acks.LEADER)
    await asyncio.wait_for(rolling.wait(), EVENT_TIMEOUT_S)
    later = [groups.append(small_segments, records(v), Acks.LEADER) for v in (b"d", b"e")]
    assert not first.done()
    release.set()
    infos = await asyncio.wait_for(asyncio.gather(first, *later), EVENT_TIMEOUT_S)
    assert [info.first_offset for info in infos] == [2, 3, 4]
    assert rolled_in and threading.get_ident() not in rolled_in
    assert [s.base_offset for s in log.segments] == [0, 2]
    assert values_of(log) == [b"a", b"b", b"c", b"d", b"e"]


async def test_a_log_another_thread_holds_is_waited_for_off_the_loop(leader: Partition) -> None:
    """While a thread holds the log (a roll of the tiering pass, a flush, a retention pass),
    a write waits for it in a thread: the loop goes on turning and the write lands after."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with leader.log._lock:
            held.set()
            release.wait(EVENT_TIMEOUT_S)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(EVENT_TIMEOUT_S)
    landing = AppendGroups().append(leader, records(b"a"), Acks.LEADER)
    for _ in range(3):
        await asyncio.sleep(0)  # loop turns the write's callback would block, were it inline
    assert not landing.done()
    release.set()
    assert (await asyncio.wait_for(landing, EVENT_TIMEOUT_S)).first_offset == 0
    holder.join()


async def test_a_roll_that_fails_answers_every_request_with_its_error(
    small_segments: Partition, monkeypatch: pytest.MonkeyPatch
) -> None:
    groups = AppendGroups()
    await asyncio.gather(
        *(groups.append(small_segments, records(v), Acks.LEADER) for v in (b"a", b"b"))
    )

    def full(self: PartitionLog, base_offset: int) -> LogSegment:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(PartitionLog, "_new_active_segment", full)
    outcomes = await asyncio.gather(
        *(groups.append(small_segments, records(v), Acks.LEADER) for v in (b"c", b"d")),
        return_exceptions=True,
    )
    assert all(isinstance(o, InsufficientStorage) for o in outcomes)
    assert small_segments.log.log_end_offset == 2
    monkeypatch.undo()
    info = await groups.append(small_segments, records(b"c"), Acks.LEADER)
    assert info.first_offset == 2
    assert values_of(small_segments.log) == [b"a", b"b", b"c"]
