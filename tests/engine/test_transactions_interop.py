"""Interoperability of transactions: a Kafka client reading Sluice's segment files at
read_committed gets exactly what Sluice's own read_committed fetch gives.

The `.log` files are decoded by kafka-python's pure-Python record classes
(`kafka.record.memory_records.MemoryRecords`, `default_records`), independent of the aiokafka C
codec the engine writes with. The consumer-side filtering is aiokafka's own, not a copy of it:
`aiokafka.consumer.fetcher.PartitionRecords` (importable without a broker) is the Fetcher's
read_committed logic, Kafka's: the aborted transactions of a fetch sorted by first offset, a
transactional batch of a producer in that set skipped until the producer's ABORT marker,
control batches skipped. It is fed what a broker's fetch response holds: the batches of one
segment file below the last stable offset, and the aborted transactions overlapping them, read
from every `.txnindex` file with this file's own struct code for Kafka's format.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import NamedTuple

from aiokafka.consumer.fetcher import READ_COMMITTED, PartitionRecords
from aiokafka.structs import TopicPartition
from kafka.record.memory_records import MemoryRecords

from engine import batch as fmt
from engine.log import PartitionLog
from engine.producer_state import Isolation
from tests.engine.conftest import LogFactory, batch_of

LEADER_EPOCH = 3
GZIP = fmt.COMPRESSION_CODECS["gzip"]
# Kafka's AbortedTxn (TransactionIndex.scala): version, producer id, first offset, last
# offset, last stable offset; big-endian.
KAFKA_ABORTED_TXN = struct.Struct(">hqqqq")

Seen = tuple[int, bytes | None, bytes | None]  # offset, key, value


class KafkaAbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int


def kafka_aborted_txns(directory: Path) -> list[KafkaAbortedTxn]:
    """Every entry of every `.txnindex` file, parsed as Kafka's broker reads them."""
    entries: list[KafkaAbortedTxn] = []
    for path in sorted(directory.glob("*.txnindex")):
        data = path.read_bytes()
        assert len(data) % KAFKA_ABORTED_TXN.size == 0
        for version, pid, first, last, _lso in KAFKA_ABORTED_TXN.iter_unpack(data):
            assert version == 0
            entries.append(KafkaAbortedTxn(pid, first, last))
    return entries


def kafka_batches(data: bytes) -> list[tuple[int, int, bytes]]:
    """(base offset, next offset, bytes) of each batch of a segment file, by kafka-python."""
    records = MemoryRecords(data)
    found: list[tuple[int, int, bytes]] = []
    position = 0
    while records.has_next():
        batch = records.next_batch()
        size = batch.size_in_bytes
        found.append((batch.base_offset, batch.next_offset, data[position : position + size]))
        position += size
    return found


def kafka_read_committed(directory: Path, last_stable_offset: int) -> list[Seen]:
    """A Kafka consumer at read_committed over the segment files, one fetch per file: whole
    batches from its fetch offset up to the last stable offset the broker reports, with the
    aborted transactions that overlap them."""
    aborted = kafka_aborted_txns(directory)
    seen: list[Seen] = []
    fetch_offset = 0
    for path in sorted(directory.glob("*.log")):
        batches = [
            (base, end, raw)
            for base, end, raw in kafka_batches(path.read_bytes())
            if end > fetch_offset and base < last_stable_offset
        ]
        if not batches:
            continue
        upper = batches[-1][1]
        overlapping = [
            (a.producer_id, a.first_offset)
            for a in aborted
            if a.last_offset >= fetch_offset and a.first_offset < upper
        ]
        fetched = PartitionRecords(
            TopicPartition("t", 0),
            MemoryRecords(b"".join(raw for _, _, raw in batches)),
            overlapping,
            fetch_offset,
            None,
            None,
            True,
            READ_COMMITTED,
        )
        seen.extend((r.offset, r.key, r.value) for r in fetched)
        fetch_offset = fetched.next_fetch_offset
    return seen


def sluice_read_committed(log: PartitionLog) -> list[Seen]:
    """What Sluice's read_committed fetch returns, one batch a read."""
    seen: list[Seen] = []
    offset = 0
    while True:
        data = log.read(offset, 1, isolation=Isolation.READ_COMMITTED).data
        if not data:
            return seen
        headers = fmt.scan(data, check_crc=True).headers
        assert len(headers) == 1
        seen.extend(
            (r.offset, r.key, r.value) for r in fmt.iter_records(data) if r.offset >= offset
        )
        offset = headers[0][1].next_offset


class Writer:
    """Appends to a log as a leader does: plain batches, transactional ones, markers."""

    def __init__(self, log: PartitionLog) -> None:
        self.log = log
        self.count = 0

    def values(self, n: int, tag: str) -> list[bytes | None]:
        self.count += n
        return [f"{tag}-{self.count - n + i}".encode() for i in range(n)]

    def plain(self, n: int) -> None:
        self.log.append_as_leader(batch_of(self.values(n, "plain")), LEADER_EPOCH)
        self.log.advance_high_watermark(self.log.log_end_offset)

    def txn(self, pid: int, n: int, epoch: int = 0, compression: int = 0) -> int:
        values = self.values(n, f"p{pid}e{epoch}")
        keys: list[bytes | None] = [f"k{pid}".encode()] * n
        data = batch_of(values, keys, compression=compression)
        info = self.log.append_transactional_as_leader(data, LEADER_EPOCH, pid, epoch)
        self.log.advance_high_watermark(self.log.log_end_offset)
        return info.first_offset

    def end(self, pid: int, commit: bool, epoch: int = 0) -> None:
        assert self.log.append_marker_as_leader(pid, epoch, commit, 9, LEADER_EPOCH) is not None
        self.log.advance_high_watermark(self.log.log_end_offset)


def test_a_kafka_consumer_reads_the_segment_files_as_sluice_reads_at_read_committed(
    make_log: LogFactory, tmp_path: Path
) -> None:
    log = make_log()
    w = Writer(log)
    directory = tmp_path / "t-0"
    # Segment 1: plain records among two producers' transactions.
    w.plain(2)
    w.txn(1, 2)
    w.plain(1)
    w.txn(2, 3, compression=GZIP)
    log.roll()
    # Segment 2: both go on; 2 aborts with batches in two segments, 1 commits; 3 opens.
    w.txn(1, 1)
    w.txn(3, 2)
    w.end(2, commit=False)
    w.plain(2)
    w.end(1, commit=True)
    log.roll()
    # Segment 3: 3 goes on, 2's next epoch begins, 4 opens, 3 aborts, 2 commits.
    w.txn(3, 1, compression=GZIP)
    w.txn(2, 2, epoch=1)
    open_first = w.txn(4, 2)
    w.end(3, commit=False)
    w.plain(1)
    w.end(2, commit=True, epoch=1)
    log.roll()
    # Segment 4 (active): 4 stays open, 1's next epoch opens, plain records after them.
    w.txn(4, 1)
    w.txn(1, 2, epoch=1)
    w.plain(2)
    assert len(list(directory.glob("*.log"))) == 4
    assert log.last_stable_offset == open_first

    sluice = sluice_read_committed(log)
    assert kafka_read_committed(directory, log.last_stable_offset) == sluice
    assert {value for _, _, value in sluice} >= {b"p1e0-2", b"p1e0-8", b"p2e1-14"}
    assert not any(
        value is not None and value.startswith((b"p3", b"p2e0")) for _, _, value in sluice
    )

    w.end(4, commit=True)  # the open transactions end: the last stable offset moves on
    w.end(1, commit=False, epoch=1)
    w.plain(1)
    assert log.last_stable_offset == log.high_watermark

    sluice = sluice_read_committed(log)
    assert kafka_read_committed(directory, log.last_stable_offset) == sluice
    assert [v for _, _, v in sluice if v is not None and v.startswith(b"p4")] == [
        b"p4e0-16",
        b"p4e0-17",
        b"p4e0-19",
    ]
    assert not any(v is not None and v.startswith(b"p1e1") for _, _, v in sluice)
