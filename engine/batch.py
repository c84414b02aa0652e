"""Kafka RecordBatch v2: header access, validation, in-place stamping, encode and decode.

The batch is the unit everywhere (disk, replicas, S3, the binary HTTP type). Headers are parsed
with one struct call per batch; records are built and decoded by aiokafka's C codec. This module
depends on neither aiohttp nor the rest of the engine, so readers of segment files can use it alone.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from crc32c import crc32c

from engine.errors import InvalidRecord, RecordTooLarge

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # base offset (8) + batch length (4): the bytes not counted in `length`
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
MAGIC = 2

LEADER_EPOCH_AT = 12
CRC_AT = 17
ATTRIBUTES_AT = 21
FIRST_TIMESTAMP_AT = 27
MAX_TIMESTAMP_AT = 35
_OFFSET_FIELD = struct.Struct(">q")
_EPOCH_FIELD = struct.Struct(">i")
_OFFSET_LENGTH_EPOCH = struct.Struct(">qii")
_CRC_FIELD = struct.Struct(">I")
_TIMESTAMPS = struct.Struct(">qq")  # first and max timestamp
_ATTRIBUTES_FIELD = struct.Struct(">h")

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
# Sluice's own flag in a bit Kafka leaves unused (7-15): every value in the batch is a JSON
# document, so a JSON fetch can embed values without parsing them. Kafka decoders ignore it.
VALUES_JSON_MASK = 0x4000
# Also Sluice's: the batch's first record carries an idempotency-key header, so a restart can
# rebuild the dedupe window by reading batch headers and decoding only the flagged batches.
IDEMPOTENT_MASK = 0x2000
IDEMPOTENCY_HEADER = "sluice-idempotency-key"

# A control batch's one record: key = int16 version + int16 type, value = int16 version + int32
# coordinator epoch (Kafka's EndTransactionMarker).
CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")
_COORDINATOR_EPOCH_FROM_END = 1 + 4  # the value's int32, before the record's header count
_PRODUCER_FIELDS = struct.Struct(">qhi")  # producer id, producer epoch, base sequence
PRODUCER_ID_AT = 43

COMPRESSION_CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
NO_TIMESTAMP = -1
NO_EPOCH = -1


class BatchHeader(NamedTuple):
    """The 61-byte v2 batch header, field for field."""

    base_offset: int
    length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes the batch occupies in a log, header included."""
        return self.length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def values_json(self) -> bool:
        return bool(self.attributes & VALUES_JSON_MASK)

    @property
    def idempotent(self) -> bool:
        return bool(self.attributes & IDEMPOTENT_MASK)


_new_tuple = tuple.__new__

NativeScan = Callable[
    [bytes | bytearray | memoryview, bool, type], tuple[list[Any], int, str | None, int]
]
_native_scan: NativeScan | None
NativeStamp = Callable[[bytearray | memoryview, int, int, int, int, type], list[Any]]
_native_stamp: NativeStamp | None
try:
    from engine import _scan
except ImportError:  # built without a C compiler: `python_scan`, `set_producer`
    _native_scan = _native_stamp = None
else:
    _native_scan, _native_stamp = _scan.scan, _scan.stamp_producer


class Record(NamedTuple):
    """One decoded record; `headers` are (name, value) pairs as on the wire."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


Headers = list[tuple[str, bytes | None]]
# (key, value, headers, timestamp): what the encoders take. RecordInput is the named form; hot
# paths build plain tuples, which cost half as much to create.
RecordTuple = tuple[bytes | None, bytes | None, Headers, int | None]


class RecordInput(NamedTuple):
    """A record to encode; offsets come from its position in the batch."""

    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = []  # noqa: RUF012 - never mutated
    timestamp: int | None = None


def restamped(header: BatchHeader, base_offset: int, epoch: int, max_timestamp: int) -> BatchHeader:
    """`header` as a leader's append stamps it, once per batch appended (built with
    `tuple.__new__`: namedtuple's `_replace` costs three times this, its constructor 1.6 times)."""
    return _new_tuple(
        BatchHeader,
        (
            base_offset,
            header.length,
            epoch,
            header.magic,
            header.crc,
            header.attributes,
            header.last_offset_delta,
            header.first_timestamp,
            max_timestamp,
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
            header.record_count,
        ),
    )


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    return BatchHeader._make(HEADER.unpack_from(buf, pos))


def attributes_at(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """The attributes of the batch at `pos` (whose header is whole), without the rest of it."""
    return int(_ATTRIBUTES_FIELD.unpack_from(buf, pos + ATTRIBUTES_AT)[0])


def crc_matches(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> bool:
    """Check the CRC-32C that covers attributes through the end of the batch."""
    view = memoryview(buf)[pos + ATTRIBUTES_AT : pos + header.size]
    return bool(crc32c(view) == header.crc)


class ScanResult(NamedTuple):
    """What a validating scan found: the valid prefix and why it stopped, if early."""

    headers: list[tuple[int, BatchHeader]]  # (position, header) of each valid batch
    valid_bytes: int
    error: str | None  # why the scan stopped at `valid_bytes`
    needed: int = (
        0  # when the buffer ends inside a batch: the bytes that batch needs from its start
    )


def scan(
    buf: bytes | bytearray | memoryview,
    *,
    check_crc: bool = True,
) -> ScanResult:
    """Walk the batches in `buf`, stopping at the first incomplete or invalid one: in C
    (engine/_scan.c) where it was built, else `python_scan`, the reference."""
    if _native_scan is None:
        return python_scan(buf, check_crc=check_crc)
    return _new_tuple(ScanResult, _native_scan(buf, check_crc, BatchHeader))


def python_scan(
    buf: bytes | bytearray | memoryview,
    *,
    check_crc: bool = True,
) -> ScanResult:
    """`scan`'s walk in Python, one batch at a time."""
    found: list[tuple[int, BatchHeader]] = []
    pos = 0
    end = len(buf)
    unpack = HEADER.unpack_from
    view = memoryview(buf) if check_crc else None
    while pos < end:
        if end - pos < HEADER_SIZE:
            return ScanResult(found, pos, "truncated batch header", HEADER_SIZE)
        header = _new_tuple(BatchHeader, unpack(buf, pos))  # `_make` without its Python call
        if header.magic != MAGIC:
            return ScanResult(found, pos, f"unsupported magic {header.magic}")
        length = header.length
        if length < MIN_BATCH_LENGTH:
            return ScanResult(found, pos, f"batch length {length} is too small")
        if header.last_offset_delta < 0 or header.record_count < 0:
            return ScanResult(found, pos, "negative record count")
        size = length + LOG_OVERHEAD
        if pos + size > end:
            return ScanResult(found, pos, "truncated batch", size)
        if view is not None and crc32c(view[pos + ATTRIBUTES_AT : pos + size]) != header.crc:
            return ScanResult(found, pos, "CRC mismatch")
        found.append((pos, header))
        pos += size
    return ScanResult(found, pos, None)


def set_base_offset(buf: bytearray | memoryview, pos: int, offset: int) -> None:
    """Stamp a base offset; it lies outside the CRC, so no checksum changes."""
    _OFFSET_FIELD.pack_into(buf, pos, offset)


def stamp_offset_and_epoch(
    buf: bytearray | memoryview, pos: int, header: BatchHeader, offset: int, epoch: int
) -> None:
    """Stamp a base offset and the partition leader epoch in one call (both outside the CRC;
    the length between them is written back as it is)."""
    _OFFSET_LENGTH_EPOCH.pack_into(buf, pos, offset, header.length, epoch)


def set_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Stamp the partition leader epoch; also outside the CRC."""
    _EPOCH_FIELD.pack_into(buf, pos + LEADER_EPOCH_AT, epoch)


def set_log_append_time(
    buf: bytearray | memoryview, pos: int, header: BatchHeader, timestamp: int
) -> None:
    """Mark the batch LogAppendTime with `timestamp` as its max timestamp, then re-CRC it."""
    _OFFSET_FIELD.pack_into(buf, pos + MAX_TIMESTAMP_AT, timestamp)
    set_attributes(buf, pos, header, header.attributes | TIMESTAMP_TYPE_MASK)


def set_attributes(
    buf: bytearray | memoryview, pos: int, header: BatchHeader, attributes: int
) -> None:
    """Rewrite the attributes field (inside the CRC), then recompute the CRC."""
    _ATTRIBUTES_FIELD.pack_into(buf, pos + ATTRIBUTES_AT, attributes)
    crc = crc32c(memoryview(buf)[pos + ATTRIBUTES_AT : pos + header.size])
    _CRC_FIELD.pack_into(buf, pos + CRC_AT, crc)


def stamped_for(header: BatchHeader, producer_id: int, epoch: int) -> bool:
    """Whether the batch is a transactional one of `producer_id` at `epoch` already, as
    `set_producer` leaves it (the C JSON path builds a transaction's batches so)."""
    return (
        header.attributes & TRANSACTIONAL_MASK != 0
        and header.producer_id == producer_id
        and header.producer_epoch == epoch
        and header.base_sequence == -1
    )


def set_producer(
    buf: bytearray | memoryview, pos: int, header: BatchHeader, producer_id: int, epoch: int
) -> BatchHeader:
    """Make the batch at `pos` a transactional one of `producer_id` at `epoch` (sequence -1:
    Sluice fences by epoch, not by sequence), re-CRC it; its new header (made from `header`,
    not read back: this runs for every batch of a transactional produce). A batch built so
    already (the C JSON path builds a transaction's batches stamped) is left as it is."""
    if stamped_for(header, producer_id, epoch):
        return header
    (base_offset, length, leader_epoch, magic, _, attributes, delta, first, last, *_, count) = (
        header
    )
    attributes |= TRANSACTIONAL_MASK
    _PRODUCER_FIELDS.pack_into(buf, pos + PRODUCER_ID_AT, producer_id, epoch, -1)
    _ATTRIBUTES_FIELD.pack_into(buf, pos + ATTRIBUTES_AT, attributes)
    crc = crc32c(memoryview(buf)[pos + ATTRIBUTES_AT : pos + length + LOG_OVERHEAD])
    _CRC_FIELD.pack_into(buf, pos + CRC_AT, crc)
    return _new_tuple(
        BatchHeader,
        (
            base_offset,
            length,
            leader_epoch,
            magic,
            crc,
            attributes,
            delta,
            first,
            last,
            producer_id,
            epoch,
            -1,
            count,
        ),
    )


def set_producers(
    buf: bytearray | memoryview,
    headers: Sequence[tuple[int, BatchHeader]],
    producer_id: int,
    epoch: int,
) -> list[tuple[int, BatchHeader]]:
    """`set_producer` on each of a request's batches (`headers`: consecutive, whole, checked),
    in one C call where engine/_scan.c was built (a Python call and a header a batch cost more
    than the CRC); their positions and new headers."""
    if _native_stamp is None or not headers:
        return [(pos, set_producer(buf, pos, h, producer_id, epoch)) for pos, h in headers]
    last_pos, last = headers[-1]
    end = last_pos + last.length + LOG_OVERHEAD
    stamped: list[tuple[int, BatchHeader]] = _native_stamp(
        buf, headers[0][0], end, producer_id, epoch, BatchHeader
    )
    if len(stamped) != len(headers):
        raise ValueError(f"{len(headers)} batches to stamp, {len(stamped)} found between them")
    return stamped


def encode_control_batch(
    producer_id: int, epoch: int, commit: bool, coordinator_epoch: int, timestamp: int
) -> bytearray:
    """A COMMIT or ABORT marker as Kafka writes it: a transactional control batch of one record."""
    return control_batch(producer_id, epoch, commit, coordinator_epoch, timestamp)[0]


def control_batch(
    producer_id: int, epoch: int, commit: bool, coordinator_epoch: int, timestamp: int
) -> tuple[bytearray, BatchHeader]:
    """`encode_control_batch`'s batch and its header: the codec's batch for the marker's type,
    built once, with this marker's fields and CRC written in (a transaction writes one on
    every partition it touched; building each cost more than its write)."""
    out = bytearray(_CONTROL_BATCHES[commit])
    _TIMESTAMPS.pack_into(out, FIRST_TIMESTAMP_AT, timestamp, timestamp)
    _PRODUCER_FIELDS.pack_into(out, PRODUCER_ID_AT, producer_id, epoch, -1)
    _EPOCH_FIELD.pack_into(out, len(out) - _COORDINATOR_EPOCH_FROM_END, coordinator_epoch)
    _CRC_FIELD.pack_into(out, CRC_AT, crc32c(memoryview(out)[ATTRIBUTES_AT:]))
    return out, BatchHeader._make(HEADER.unpack_from(out))


def _built_control_batch(commit: bool) -> bytes:
    """A marker of the type built by the codec (producer, timestamps and coordinator epoch
    zero), flagged a control batch: what `control_batch` fills in."""
    builder = DefaultRecordBatchBuilder(2, 0, 1, 0, 0, -1, 2**31 - 1)
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    builder.append(0, 0, key, _CONTROL_VALUE.pack(0, 0), [])
    out: bytearray = builder.build()
    header = read_header(out)
    set_attributes(out, 0, header, header.attributes | CONTROL_MASK)
    # The record ends with its value (version, coordinator epoch) and no headers (one byte).
    value_at = len(out) - 1 - _CONTROL_VALUE.size
    if out[value_at:-1] != _CONTROL_VALUE.pack(0, 0) or out[-1] != 0:
        raise RuntimeError("the codec's control record is not laid out as expected")
    return bytes(out)


_CONTROL_BATCHES = {commit: _built_control_batch(commit) for commit in (True, False)}
CONTROL_BATCH_SIZE = len(_CONTROL_BATCHES[True])  # bytes a marker takes in a log


def empty_batch(header: BatchHeader) -> bytearray:
    """A batch holding no record that spans `header`'s offsets: what a reader is given in place
    of a batch it must not see (its producer and sequence kept, not transactional any more)."""
    attributes = header.attributes & TIMESTAMP_TYPE_MASK
    out = bytearray(HEADER_SIZE)
    HEADER.pack_into(
        out,
        0,
        header.base_offset,
        MIN_BATCH_LENGTH,
        header.partition_leader_epoch,
        MAGIC,
        0,
        attributes,
        header.last_offset_delta,
        header.first_timestamp,
        header.max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        0,
    )
    _CRC_FIELD.pack_into(out, CRC_AT, crc32c(memoryview(out)[ATTRIBUTES_AT:]))
    return out


def control_type(batch: bytes | bytearray | memoryview) -> int:
    """CONTROL_COMMIT or CONTROL_ABORT: the type in the key of a control batch's record."""
    for record in DefaultRecordBatch(memoryview(batch)):
        key = record.key
        if key is None or len(key) < _CONTROL_KEY.size:
            break
        return int(_CONTROL_KEY.unpack_from(key)[1])
    raise InvalidRecord("a control batch without a control record")


def encode_batch(
    records: Iterable[RecordInput],
    *,
    compression: int = 0,
    base_offset: int = 0,
    offsets: Sequence[int] | None = None,
    default_timestamp: int | None = None,
) -> bytearray:
    """Build one v2 batch with the C codec; `offsets` (absolute) may have gaps, as after compaction.

    Record offsets are `base_offset + i` unless `offsets` is given. Records without a timestamp
    get `default_timestamp` (the current time when that is None too).
    """
    builder = DefaultRecordBatchBuilder(2, compression, 0, -1, -1, -1, 2**31 - 1)
    append = builder.append
    if offsets is None:
        for delta, (key, value, headers, timestamp) in enumerate(records):
            ts = default_timestamp if timestamp is None else timestamp
            append(delta, ts, key, value, headers)
    else:
        base_offset = offsets[0]
        for offset, (key, value, headers, timestamp) in zip(offsets, records, strict=True):
            ts = default_timestamp if timestamp is None else timestamp
            append(offset - base_offset, ts, key, value, headers)
    out: bytearray = builder.build()
    if base_offset:
        set_base_offset(out, 0, base_offset)
    return out


def encode_batches(
    records: Sequence[RecordTuple],
    *,
    max_batch_bytes: int,
    compression: int = 0,
    default_timestamp: int | None = None,
    values_json: bool = False,
    extra_attributes: int = 0,
) -> bytearray:
    """Encode records in order into as many batches as `max_batch_bytes` requires, concatenated.

    A record that cannot fit in a batch of its own raises RecordTooLarge naming its index.
    With `values_json`, each batch carries VALUES_JSON_MASK; `extra_attributes` go on the first.
    """
    out = bytearray()
    builder: DefaultRecordBatchBuilder | None = None
    count = 0
    first_index = 0

    def finish(builder: DefaultRecordBatchBuilder) -> None:
        built: bytearray = builder.build()
        header = read_header(built)
        if header.size > max_batch_bytes:
            raise RecordTooLarge(
                f"the record alone encodes to a {header.size}-byte batch; "
                f"max.message.bytes is {max_batch_bytes}",
                first_index,
            )
        attributes = header.attributes | (VALUES_JSON_MASK if values_json else 0)
        if not out:
            attributes |= extra_attributes
        if attributes != header.attributes:
            set_attributes(built, 0, header, attributes)
        out.extend(built)

    for index, (key, value, headers, timestamp) in enumerate(records):
        ts = default_timestamp if timestamp is None else timestamp
        if builder is not None and builder.append(count, ts, key, value, headers) is not None:
            count += 1
            continue
        if builder is not None:
            finish(builder)
        builder = DefaultRecordBatchBuilder(2, compression, 0, -1, -1, -1, max_batch_bytes)
        builder.append(0, ts, key, value, headers)
        count = 1
        first_index = index
    if builder is not None:
        finish(builder)
    return out


def iter_records(buf: bytes | bytearray | memoryview) -> Iterator[Record]:
    """Decode every record of every batch in `buf` (which must hold whole batches)."""
    pos = 0
    end = len(buf)
    view = memoryview(buf)
    while pos < end:
        header = read_header(view, pos)
        batch = DefaultRecordBatch(view[pos : pos + header.size])
        try:
            for rec in batch:
                yield Record(rec.offset, rec.timestamp, rec.key, rec.value, rec.headers)
        except Exception as exc:  # the C codec raises several types for malformed input
            raise InvalidRecord(
                f"malformed records in batch at offset {header.base_offset}: {exc}"
            ) from exc
        pos += header.size


def batch_records(view: memoryview) -> DefaultRecordBatch:
    """The C codec's view of one whole batch, for callers that iterate records themselves."""
    return DefaultRecordBatch(view)
