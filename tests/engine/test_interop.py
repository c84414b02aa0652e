"""Interoperability: engine segment files are standard RecordBatch v2, and vice versa.

kafka-python's record classes (`kafka.record.default_records`) are pure Python, independent of
the aiokafka C codec the engine uses, so they serve as a second decoder and encoder. CRCs are
also checked with kafka-python's pure-Python CRC-32C, not only the C `crc32c` package it prefers.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pytest
from kafka.record._crc32c import crc as pure_python_crc32c
from kafka.record.default_records import DefaultRecordBatch as KafkaBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KafkaBatchBuilder
from kafka.record.memory_records import MemoryRecords

from engine.batch import (
    ATTRIBUTES_AT,
    COMPRESSION_CODECS,
    RecordInput,
    encode_batch,
    iter_records,
    read_header,
)
from engine.log import PartitionLog
from engine.manager import LogManager

EPOCH = 7
NOW_MS = 1_700_000_123_456  # the engine's clock: the LogAppendTime of every batch
T0 = 1_700_000_000_000
HUGE = 1 << 30


class Expected(NamedTuple):
    """A record as any decoder must see it."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


def clock() -> float:
    return NOW_MS / 1000


def sample_batches() -> list[list[RecordInput]]:
    """Batches covering null and empty keys and values, headers, and a large compressible value."""
    headers: list[list[tuple[str, bytes | None]]] = [
        [],
        [("trace-id", b"abc123")],
        [("null-value", None)],
        [("ünïcode", b"\x00\xff"), ("dup", b"1"), ("dup", b"2")],
    ]
    batches: list[list[RecordInput]] = []
    offset = 0
    for size in (1, 3, 17, 60, 5, 200):
        batch = []
        for i in range(size):
            key = None if offset % 3 == 0 else (b"" if offset % 5 == 0 else b"key-%d" % offset)
            value = None if offset % 7 == 0 else (b"" if offset % 11 == 0 else b"v%d" % offset)
            if offset == 40:
                value = b"large " * 4000
            ts = T0 + 10 * offset - (25 if i == 2 else 0)  # the third goes back in time
            batch.append(RecordInput(key, value, headers[offset % len(headers)], ts))
            offset += 1
        batches.append(batch)
    return batches


def expect(
    records: list[RecordInput], first_offset: int, append_time: int | None
) -> list[Expected]:
    """What decoders must see for `records` stored from `first_offset` (LogAppendTime if set)."""
    expected = []
    for offset, r in enumerate(records, first_offset):
        assert r.timestamp is not None
        timestamp = r.timestamp if append_time is None else append_time
        expected.append(Expected(offset, timestamp, r.key, r.value, r.headers))
    return expected


def write(log: PartitionLog, batches: list[list[RecordInput]], codec: int) -> list[Expected]:
    """Append the batches (two per call) and return the records every decoder must see."""
    append_time = NOW_MS if log.config.log_append_time else None
    expected: list[Expected] = []
    for pair in (batches[i : i + 2] for i in range(0, len(batches), 2)):
        data = bytearray().join(encode_batch(b, compression=codec) for b in pair)
        info = log.append_as_leader(data, EPOCH)
        expected += expect([r for batch in pair for r in batch], info.first_offset, append_time)
    return expected


def decode_with_kafka_python(buf: bytes, codec: int, timestamp_type: int) -> list[Expected]:
    """Walk a segment file with kafka-python, checking each batch's header and CRC."""
    found: list[Expected] = []
    records = MemoryRecords(buf)
    pos = 0
    while records.has_next():
        batch = records.next_batch()
        assert isinstance(batch, KafkaBatch)
        assert batch.validate_crc()
        raw = buf[pos : pos + batch.size_in_bytes]
        assert pure_python_crc32c(raw[ATTRIBUTES_AT:]) == batch.crc
        assert (batch.magic, batch.compression_type) == (2, codec)
        assert (batch.timestamp_type, batch.leader_epoch) == (timestamp_type, EPOCH)
        batch_records = [
            Expected(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch
        ]
        assert len(batch_records) == batch.records_count
        assert batch_records[-1].offset == batch.last_offset
        found += batch_records
        pos += batch.size_in_bytes
    assert pos == len(buf), "kafka-python stopped before the end of the segment"
    return found


@pytest.mark.parametrize("timestamp_type", ["CreateTime", "LogAppendTime"])
@pytest.mark.parametrize("codec_name", list(COMPRESSION_CODECS))
def test_segment_files_decode_with_kafka_python(
    tmp_path: Path, codec_name: str, timestamp_type: str
) -> None:
    codec = COMPRESSION_CODECS[codec_name]
    manager = LogManager(tmp_path, clock=clock)
    configs = {"segment.bytes": 512, "message.timestamp.type": timestamp_type}
    manager.create_topic("interop", 1, configs)
    log = manager.log("interop", 0)
    expected = write(log, sample_batches(), codec)
    manager.close()
    paths = sorted((tmp_path / "interop-0").glob("*.log"))
    assert len(paths) > 1
    decoded: list[Expected] = []
    for path in paths:
        decoded += decode_with_kafka_python(
            path.read_bytes(), codec, int(timestamp_type == "LogAppendTime")
        )
    assert decoded == expected


@pytest.mark.parametrize("codec_name", list(COMPRESSION_CODECS))
def test_kafka_python_batch_is_appended_and_reads_back(tmp_path: Path, codec_name: str) -> None:
    codec = COMPRESSION_CODECS[codec_name]
    records = [r for batch in sample_batches()[:4] for r in batch]
    builder = KafkaBatchBuilder(2, codec, 0, -1, -1, -1, HUGE)
    for i, r in enumerate(records):
        builder.append(i, timestamp=r.timestamp, key=r.key, value=r.value, headers=r.headers)
    built = bytes(builder.build())
    assert read_header(built).compression == codec  # kafka-python kept the compression
    manager = LogManager(tmp_path, clock=clock)
    try:
        log = manager.create_topic("interop", 1).partitions[0]
        log.append_as_leader(encode_batch(sample_batches()[0]), EPOCH)  # so offsets must move
        info = log.append_as_leader(bytearray(built), EPOCH)
        assert (info.first_offset, info.record_count) == (1, len(records))
        stored = bytes(log.read(info.first_offset, HUGE, upper_offset=log.log_end_offset).data)
    finally:
        manager.close()
    header = read_header(stored)
    assert (header.base_offset, header.partition_leader_epoch) == (1, EPOCH)
    assert stored[8:12] == built[8:12] and stored[16:] == built[16:]  # only offset, epoch stamped
    expected = expect(records, 1, None)
    assert [Expected(*r) for r in iter_records(stored)] == expected
    assert decode_with_kafka_python(stored, codec, 0) == expected
