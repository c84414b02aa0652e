"""Transactions in the partition log: transactional batches and markers as Kafka writes them,
the last stable offset, the aborted-transaction index, fencing, and what survives a restart,
a crash and a truncation."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from kafka.record.default_records import DefaultRecordBatch as KafkaBatch

from engine import batch as fmt
from engine import producer_state, txn_index
from engine.errors import InvalidRecord, ProducerFenced, TransactionNotOngoing
from engine.log import PartitionLog
from engine.producer_state import Isolation
from tests.engine.conftest import FakeClock, LogFactory, batch_of

PID, OTHER = 1000, 2000
LEADER_EPOCH = 3
EXPIRATION_MS = 3_600_000


def txn(log: PartitionLog, values: list[bytes], pid: int = PID, epoch: int = 0) -> int:
    """Append `values` in the transaction of `pid` at `epoch`; the first offset."""
    info = log.append_transactional_as_leader(batch_of(values), LEADER_EPOCH, pid, epoch)
    log.advance_high_watermark(log.log_end_offset)
    return info.first_offset


def plain(log: PartitionLog, values: list[bytes]) -> int:
    info = log.append_as_leader(batch_of(values), LEADER_EPOCH)
    log.advance_high_watermark(log.log_end_offset)
    return info.first_offset


def end(log: PartitionLog, commit: bool, pid: int = PID, epoch: int = 0) -> int | None:
    info = log.append_marker_as_leader(pid, epoch, commit, 7, LEADER_EPOCH)
    log.advance_high_watermark(log.log_end_offset)
    return None if info is None else info.first_offset


def values(log: PartitionLog, isolation: Isolation, start: int = 0) -> list[bytes | None]:
    """Every value a consumer at `isolation` reads from `start`, batch after batch."""
    out: list[bytes | None] = []
    offset = start
    while True:
        result = log.read(offset, 1 << 20, isolation=isolation)
        if not result.data:
            return out
        out.extend(r.value for r in fmt.iter_records(result.data) if r.offset >= offset)
        offset = fmt.scan(result.data, check_crc=False).headers[-1][1].next_offset


def test_committed_records_are_seen_only_after_the_commit(make_log: LogFactory) -> None:
    log = make_log()
    first = txn(log, [b"a", b"b"])
    plain(log, [b"plain"])
    assert log.last_stable_offset == first
    assert values(log, Isolation.READ_COMMITTED) == []
    assert values(log, Isolation.READ_UNCOMMITTED) == [b"a", b"b", b"plain"]
    marker = end(log, commit=True)
    assert marker == 3
    assert log.last_stable_offset == log.high_watermark == 4
    assert values(log, Isolation.READ_COMMITTED) == [b"a", b"b", b"plain"]
    # The marker reaches no consumer, but stays in the file for replicas and Kafka readers.
    assert values(log, Isolation.READ_UNCOMMITTED) == [b"a", b"b", b"plain"]
    raw = log.read(0, 1 << 20, isolation=Isolation.RAW).data
    control = [h for _, h in fmt.scan(raw).headers if h.is_control]
    assert [(h.base_offset, h.producer_id, h.is_transactional) for h in control] == [(3, PID, True)]


def test_aborted_records_are_left_out_and_the_next_offset_moves_past_them(
    make_log: LogFactory,
) -> None:
    log = make_log()
    txn(log, [b"x1", b"x2"])
    plain(log, [b"kept"])
    txn(log, [b"x3"])
    end(log, commit=False)
    plain(log, [b"after"])
    assert values(log, Isolation.READ_COMMITTED) == [b"kept", b"after"]
    assert values(log, Isolation.READ_UNCOMMITTED) == [b"x1", b"x2", b"kept", b"x3", b"after"]
    # An emptied batch still spans its offsets: a reader at offset 0 is told to go on past it.
    result = log.read(0, 1 << 20, isolation=Isolation.READ_COMMITTED, max_records=1)
    headers = fmt.scan(result.data).headers
    assert headers[0][1].record_count == 0
    assert headers[0][1].next_offset == 2
    assert log.aborted_transactions(0, 10) == [txn_index.AbortedTxn(PID, 0, 4, 5)]


def test_the_aborted_index_is_kafkas_file_format(make_log: LogFactory, tmp_path: Path) -> None:
    log = make_log()
    txn(log, [b"x"])
    end(log, commit=False)
    data = (tmp_path / "t-0" / f"{0:020d}.txnindex").read_bytes()
    assert data == txn_index.ENTRY.pack(0, PID, 0, 1, 2)


def test_an_open_transaction_holds_the_last_stable_offset_for_every_reader(
    make_log: LogFactory,
) -> None:
    log = make_log()
    plain(log, [b"before"])
    txn(log, [b"a"], pid=PID)
    txn(log, [b"b"], pid=OTHER)
    plain(log, [b"later"])
    assert log.last_stable_offset == 1
    end(log, commit=True, pid=OTHER)
    assert log.last_stable_offset == 1  # PID's transaction, older, is still open
    assert values(log, Isolation.READ_COMMITTED) == [b"before"]
    end(log, commit=True, pid=PID)
    assert values(log, Isolation.READ_COMMITTED) == [b"before", b"a", b"b", b"later"]


def test_the_last_stable_offset_is_never_below_the_log_start(make_log: LogFactory) -> None:
    """Records deleted below an open transaction's first offset (DeleteRecords, retention)
    leave the last stable offset at the log start, as Kafka clamps it: a read_committed
    reader's latest is an offset the log still has."""
    log = make_log()
    txn(log, [b"a"])
    plain(log, [b"b", b"c"])
    assert log.delete_records(2) == 2
    assert log.last_stable_offset == 2
    end(log, commit=True)
    assert log.last_stable_offset == log.high_watermark == 4
    assert values(log, Isolation.READ_COMMITTED, 2) == [b"c"]


def test_an_older_epoch_is_fenced_and_a_late_write_after_the_marker_refused(
    make_log: LogFactory,
) -> None:
    log = make_log()
    txn(log, [b"a"], epoch=1)
    with pytest.raises(ProducerFenced):
        txn(log, [b"zombie"], epoch=0)
    end(log, commit=True, epoch=1)
    with pytest.raises(TransactionNotOngoing):
        txn(log, [b"late"], epoch=1)
    end_before = log.log_end_offset
    assert end(log, commit=True, epoch=1) is None  # a retried marker writes nothing
    assert log.log_end_offset == end_before
    txn(log, [b"next"], epoch=2)
    assert log.last_stable_offset == end_before


def test_a_marker_without_records_fences_late_writes_of_its_epoch(make_log: LogFactory) -> None:
    log = make_log()
    end(log, commit=False, epoch=4)
    with pytest.raises(TransactionNotOngoing):
        txn(log, [b"late"], epoch=4)
    assert log.aborted_transactions(0, 10) == []


def test_producers_may_not_write_transactional_batches_themselves(make_log: LogFactory) -> None:
    log = make_log()
    forged = fmt.encode_control_batch(PID, 0, True, 0, 1)
    with pytest.raises(InvalidRecord):
        log.append_as_leader(forged, LEADER_EPOCH)


def test_compacted_topics_refuse_transactions(make_log: LogFactory) -> None:
    log = make_log({"cleanup.policy": "compact"})
    with pytest.raises(InvalidRecord, match="compacted"):
        log.append_transactional_as_leader(batch_of([b"v"], [b"k"]), LEADER_EPOCH, PID, 0)


def test_a_follower_copying_the_leader_knows_the_same(make_log: LogFactory, tmp_path: Path) -> None:
    leader = make_log()
    txn(leader, [b"a"])
    plain(leader, [b"p"])
    txn(leader, [b"o"], pid=OTHER)
    end(leader, commit=False)
    follower = PartitionLog(tmp_path / "f-0", "f", 0, leader.config)
    follower.append_as_follower(leader.read(0, 1 << 20, isolation=Isolation.RAW).data)
    follower.advance_high_watermark(follower.log_end_offset)
    assert follower.last_stable_offset == leader.last_stable_offset == 2
    assert follower.aborted_transactions(0, 10) == leader.aborted_transactions(0, 10)


def test_a_clean_restart_keeps_open_transactions_and_the_index(make_log: LogFactory) -> None:
    log = make_log({"segment.bytes": 200})
    txn(log, [b"a"])
    for i in range(5):
        plain(log, [b"p%d" % i])
    end(log, commit=False)
    txn(log, [b"open"], pid=OTHER)
    expected = (log.last_stable_offset, log.aborted_transactions(0, 100))
    assert len(log.segments) > 2
    log.close()
    again = make_log({"segment.bytes": 200}, high_watermark=100)
    assert (again.last_stable_offset, again.aborted_transactions(0, 100)) == expected
    with pytest.raises(TransactionNotOngoing):
        again.append_transactional_as_leader(batch_of([b"late"]), LEADER_EPOCH, PID, 0)


def test_a_crash_rebuilds_the_state_from_the_batches(make_log: LogFactory, tmp_path: Path) -> None:
    """No snapshot and no index file survive: both come back from the markers in the log."""
    log = make_log({"segment.bytes": 200})
    txn(log, [b"a"])
    plain(log, [b"p"] * 3)
    end(log, commit=False)
    txn(log, [b"open"], pid=OTHER)
    expected = (log.last_stable_offset, log.aborted_transactions(0, 100))
    directory = tmp_path / "t-0"
    for path in [*directory.glob("*.snapshot"), *directory.glob("*.txnindex")]:
        path.unlink()
    again = make_log({"segment.bytes": 200}, high_watermark=100)
    assert (again.last_stable_offset, again.aborted_transactions(0, 100)) == expected


def test_truncating_a_marker_reopens_its_transaction(make_log: LogFactory) -> None:
    log = make_log()
    txn(log, [b"a", b"b"])
    marker = end(log, commit=False)
    assert marker is not None
    log.truncate_to(marker)
    assert log.aborted_transactions(0, 10) == []
    assert log.producer_state.ongoing == {PID: 0}
    assert log.last_stable_offset == 0


def test_snapshots_are_written_at_rolls_and_the_oldest_deleted(
    make_log: LogFactory, tmp_path: Path
) -> None:
    log = make_log({"segment.bytes": 150})
    for i in range(6):
        txn(log, [b"v%d" % i], epoch=i)
        end(log, commit=True, epoch=i)
    offsets = producer_state.snapshot_offsets(tmp_path / "t-0")
    assert len(offsets) == producer_state.SNAPSHOTS_KEPT
    assert offsets[-1] == log.segments[-1].base_offset


def test_a_kafka_decoder_reads_the_markers_as_kafka_wrote_them(make_log: LogFactory) -> None:
    """kafka-python's pure-Python decoder sees a transactional batch and its COMMIT marker."""
    log = make_log()
    txn(log, [b"a"], epoch=5)
    end(log, commit=True, epoch=5)
    raw = bytes(log.read(0, 1 << 20, isolation=Isolation.RAW).data)
    data_batch = KafkaBatch(raw[: fmt.read_header(raw).size])
    marker = KafkaBatch(raw[fmt.read_header(raw).size :])
    assert data_batch.is_transactional and not data_batch.is_control_batch
    assert (data_batch.producer_id, data_batch.producer_epoch) == (PID, 5)
    assert marker.is_control_batch and marker.is_transactional
    assert marker.validate_crc() and data_batch.validate_crc()
    (record,) = list(marker)
    assert record.key == b"\x00\x00\x00\x01"  # version 0, COMMIT
    assert record.value == b"\x00\x00\x00\x00\x00\x07"  # version 0, coordinator epoch 7


def test_a_newer_epoch_is_refused_while_an_older_ones_transaction_is_open_here(
    make_log: LogFactory,
) -> None:
    """A coordinator aborts an open transaction, markers and all, before a begin under the next
    epoch is answered; a partition that still finds it open refuses the newer epoch rather
    than end both transactions with one marker."""
    log = make_log()
    first = txn(log, [b"a"], epoch=1)
    with pytest.raises(TransactionNotOngoing, match="epoch 1 is still open"):
        txn(log, [b"b"], epoch=2)
    assert log.producer_state.producers[PID].epoch == 1
    end(log, commit=False, epoch=2)  # the fencing abort of epoch 1, under epoch 2
    assert log.aborted_transactions(0, 10)[0].first_offset == first
    with pytest.raises(TransactionNotOngoing):
        txn(log, [b"late"], epoch=2)
    txn(log, [b"next"], epoch=3)
    assert values(log, Isolation.READ_UNCOMMITTED) == [b"a", b"next"]


def test_idle_producers_expire_unless_their_transaction_is_open(
    make_log: LogFactory, clock: FakeClock, tmp_path: Path
) -> None:
    """producer.id.expiration.ms after its marker a producer is forgotten, in memory and in
    the snapshot; one whose transaction is open here stays, whatever its age. A later write of
    a forgotten producer is a new producer's."""
    log = make_log()
    txn(log, [b"a"], pid=PID, epoch=4)
    end(log, commit=True, pid=PID, epoch=4)
    txn(log, [b"open"], pid=OTHER)
    clock.advance(EXPIRATION_MS - 1)
    assert log.remove_expired_producers(EXPIRATION_MS) == 0
    clock.advance(1)
    assert log.remove_expired_producers(EXPIRATION_MS) == 1
    assert set(log.producer_state.producers) == {OTHER}
    assert log.last_stable_offset == 2  # OTHER's transaction still holds it
    log.close()
    again = make_log(high_watermark=100)
    assert set(again.producer_state.producers) == {OTHER}
    txn(again, [b"again"], pid=PID, epoch=4)  # the ended epoch 4 was forgotten with it
    assert again.producer_state.producers[PID].first_offset == 3


def test_a_snapshot_without_timestamps_starts_its_producers_wait_at_the_first_check(
    make_log: LogFactory, clock: FakeClock, tmp_path: Path
) -> None:
    log = make_log()
    txn(log, [b"a"])
    end(log, commit=True)
    log.close()
    directory = tmp_path / "t-0"
    [offset] = producer_state.snapshot_offsets(directory)
    path = producer_state.snapshot_path(directory, offset)
    doc = orjson.loads(path.read_bytes())
    doc["producers"] = [entry[:4] for entry in doc["producers"]]  # as written before
    path.write_bytes(orjson.dumps(doc))
    again = make_log(high_watermark=100)
    clock.advance(2 * EXPIRATION_MS)
    assert again.remove_expired_producers(EXPIRATION_MS) == 0
    clock.advance(EXPIRATION_MS)
    assert again.remove_expired_producers(EXPIRATION_MS) == 1
