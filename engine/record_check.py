"""A produced batch's records checked without decoding them: the reference that words the
errors of the C check (`gateway/formats/_batchcheck.c`), with the same rules.

aiokafka's record reader bounds-checks one byte before each varint and none before a header
name's length, so a malformed record makes it read past its buffer: its errors then depend on
the bytes that lie there ("Invalid negative header key size -51", then -64 for the same input)
and may show them. Every read here stays within the record; a compressed batch's records are
decompressed first (aiokafka's codecs) and checked alike. Records that pass decode.
"""

from __future__ import annotations

from aiokafka import codec

from engine.batch import COMPRESSION_MASK, HEADER_SIZE, BatchHeader

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MAX = 2**63 - 1
_DECODERS = {
    1: ("gzip", codec.gzip_decode),
    2: ("snappy", codec.snappy_decode),
    3: ("lz4", codec.lz4_decode),
    4: ("zstd", codec.zstd_decode),
}


class _Malformed(Exception):
    """What is wrong with a record (its index is added by the caller)."""


def records_error(batch: memoryview, header: BatchHeader) -> str | None:
    """Why the records of one whole batch (its header included) do not read at offset deltas
    0..count-1, or None when they all do."""
    records: bytes | memoryview = batch[HEADER_SIZE:]
    compression = header.attributes & COMPRESSION_MASK
    if compression:
        name, decode = _DECODERS.get(compression, (f"codec {compression}", None))
        if decode is None:
            return f"compression codec {compression} is not one Kafka defines"
        try:
            records = decode(bytes(records))
        except Exception as exc:  # each codec raises its own types for a corrupt stream
            return f"the {name} records do not decompress: {exc}"
    count = header.record_count
    if count < 0 or header.base_offset + count > INT64_MAX:
        return f"record count {count} from base offset {header.base_offset} does not fit"
    pos, end = 0, len(records)
    for index in range(count):
        try:
            pos = _record(records, pos, end, index)
        except _Malformed as exc:
            return f"record {index}: {exc}"
    if pos != end:
        return f"{end - pos} bytes left after the {count} records"
    return None


def _record(buf: bytes | memoryview, pos: int, end: int, index: int) -> int:
    """The position after record `index`, which starts at `pos`."""
    length, pos = _varint32(buf, pos, end, "length")
    if length < 0:
        raise _Malformed(f"its length is {length}")
    if length > end - pos:
        raise _Malformed(f"its length {length} runs past the batch's {end - pos} bytes left")
    end = pos + length
    _, pos = _varint(buf, pos, end, 10, "attributes")
    _, pos = _varint(buf, pos, end, 10, "timestamp delta")
    delta, pos = _varint(buf, pos, end, 10, "offset delta")
    if delta != index:
        raise _Malformed(f"offset delta {delta}; the offset deltas must be 0..count-1")
    _, pos = _bytes(buf, pos, end, "key")
    _, pos = _bytes(buf, pos, end, "value")
    headers, pos = _varint32(buf, pos, end, "header count")
    if headers < 0:
        raise _Malformed(f"header count {headers}")
    for number in range(headers):
        name_at, after = _bytes(buf, pos, end, f"header {number}'s name")
        if name_at is None:
            raise _Malformed(f"header {number}'s name is null")
        try:
            bytes(buf[name_at:after]).decode()
        except UnicodeDecodeError:
            raise _Malformed(f"header {number}'s name is not UTF-8") from None
        _, pos = _bytes(buf, after, end, f"header {number}'s value")
    if pos != end:
        raise _Malformed(f"{end - pos} bytes left inside the record after its fields")
    return pos


def _varint(buf: bytes | memoryview, pos: int, end: int, widest: int, what: str) -> tuple[int, int]:
    """A zigzag varint of at most `widest` bytes before `end`, and the position after it."""
    value = 0
    for shift in range(0, 7 * widest, 7):
        if pos >= end:
            raise _Malformed(f"its {what} is cut off by the record's end")
        byte = buf[pos]
        pos += 1
        if shift == 63 and byte > 1:
            raise _Malformed(f"its {what} is wider than 64 bits")
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (value >> 1) ^ -(value & 1), pos
    raise _Malformed(f"its {what} is longer than {widest} bytes")


def _varint32(buf: bytes | memoryview, pos: int, end: int, what: str) -> tuple[int, int]:
    """Kafka's varint: at most 5 bytes, within int32."""
    value, pos = _varint(buf, pos, end, 5, what)
    if not INT32_MIN <= value <= INT32_MAX:
        raise _Malformed(f"its {what} {value} is beyond 32 bits")
    return value, pos


def _bytes(buf: bytes | memoryview, pos: int, end: int, what: str) -> tuple[int | None, int]:
    """A nullable byte string: where it starts (None for null) and the position after it."""
    length, pos = _varint32(buf, pos, end, f"{what}'s length")
    if length < -1:
        raise _Malformed(f"its {what}'s length is {length}")
    if length == -1:
        return None, pos
    if length > end - pos:
        raise _Malformed(f"its {what} ({length} bytes) runs past the record's end")
    return pos, pos + length
