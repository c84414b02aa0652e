"""A produced batch's records checked within their bounds (`engine.record_check`): well-formed
batches of every codec pass, each malformed field is named, and the answer never depends on
bytes past the records (aiokafka's reader, which this replaced for the check, read past them
and answered differently each time for the same input)."""

from __future__ import annotations

import pytest
from aiokafka import codec

from engine import batch as fmt
from engine.record_check import records_error
from gateway.formats import codecs
from gateway.http.problem import Problem
from tests.fuzz.batch_validator import fix_crcs

# A zstd batch found by the batch_check_native fuzz target: its 28 decompressed bytes start with
# a record whose length is negative. aiokafka's reader went on past them and answered
# "Invalid negative header key size -51", "... -64" or "Can't read 0 bytes from pos 30".
FUZZ_ZSTD = fix_crcs(
    b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00V\xff\xff\xff\xff\x02\xe4&r\x84\x00\x04\x00\x00"
    b"\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01\xff?\xff\xff\xff"
    b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x00\x00\x00\x02(\xb5/\xfd \x1c\xe1\x00\x00\xff\xff\xff"
    b'\xff\x00\x00\x00\x02"a": 1}\x00\x16\x00\x00\x00\x00\x00\x00\x00\x00\x80=\xf8'
)


def varint(value: int) -> bytes:
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while zigzag >= 0x80:
        out.append(zigzag & 0x7F | 0x80)
        zigzag >>= 7
    return bytes([*out, zigzag])


def record(delta: int, key: bytes | None = b"k", *, headers: bytes = varint(0)) -> bytes:
    """One record's bytes, its length first."""
    key_field = varint(-1) if key is None else varint(len(key)) + key
    body = varint(0) + varint(0) + varint(delta) + key_field + varint(1) + b"v" + headers
    return varint(len(body)) + body


def batch(records: bytes, count: int, compression: int = 0) -> memoryview:
    """A batch around raw record bytes (compressed as asked), its CRC right."""
    if compression:
        records = {1: codec.gzip_encode, 3: codec.lz4_encode, 4: codec.zstd_encode}[compression](
            records
        )
    length = fmt.HEADER_SIZE - fmt.LOG_OVERHEAD + len(records)
    head = fmt.HEADER.pack(0, length, -1, 2, 0, compression, count - 1, 0, 0, -1, -1, -1, count)
    return memoryview(fix_crcs(head + records))


def error(view: memoryview) -> str | None:
    return records_error(view, fmt.read_header(view, 0))


@pytest.mark.parametrize("compression", [0, 1, 3, 4])
def test_well_formed_records_pass_whatever_their_codec(compression: int) -> None:
    records = record(0) + record(1, None) + record(2, headers=varint(1) + b"\x02h\x02x")
    assert error(batch(records, 3, compression)) is None
    built = fmt.encode_batches(
        [(b"k", b"v", [("h", b"x")], None)] * 5, max_batch_bytes=1 << 20, compression=compression
    )
    assert error(memoryview(built)) is None


@pytest.mark.parametrize(
    ("records", "count", "why"),
    [
        (
            record(0) + record(2),
            2,
            "record 1: offset delta 2; the offset deltas must be 0..count-1",
        ),
        (record(0), 2, "record 1: its length is cut off by the record's end"),
        (record(0) + b"\x00", 1, "1 bytes left after the 1 records"),
        (varint(-3), 1, "record 0: its length is -3"),
        (varint(40) + b"\x00" * 3, 1, "record 0: its length 40 runs past the batch's 3 bytes left"),
        # The header count says one more header than there are bytes: aiokafka read its name's
        # length from past the record.
        (record(0, headers=varint(1)), 1, "record 0: its header 0's name's length is cut off"),
        (
            record(0, headers=varint(1) + varint(-1) + varint(-1)),
            1,
            "record 0: header 0's name is null",
        ),
        (
            record(0, headers=varint(1) + b"\x02\xff\x00"),
            1,
            "record 0: header 0's name is not UTF-8",
        ),
        (record(0, headers=varint(-2)), 1, "record 0: header count -2"),
        (record(0, key=b"k" * 3)[:-3], 1, "record 0: its length 10 runs past the batch's 7"),
    ],
)
def test_each_malformed_field_is_named(records: bytes, count: int, why: str) -> None:
    found = error(batch(records, count))
    assert found is not None and found.startswith(why), found


def test_a_compressed_stream_that_does_not_decompress_says_so() -> None:
    broken = bytearray(batch(record(0), 1, compression=4))
    broken[fmt.HEADER_SIZE + 4 :] = b"\xff" * (len(broken) - fmt.HEADER_SIZE - 4)
    found = error(memoryview(fix_crcs(bytes(broken))))
    assert found is not None and found.startswith("the zstd records do not decompress")


def test_the_fuzzers_zstd_batch_is_refused_the_same_way_every_time() -> None:
    details = set()
    for _ in range(50):
        with pytest.raises(Problem) as refused:
            codecs.validate_record_batches(FUZZ_ZSTD)
        details.add(refused.value.detail)
    assert details == {
        "batch at byte 0 holds malformed records: record 0: its length is -134217728"
    }
