"""RecordBatch v2 helpers: encode, scan, stamp, decode."""

from __future__ import annotations

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from hypothesis import given
from hypothesis import strategies as st

from engine import batch as fmt
from engine.errors import InvalidRecord


def make(n: int = 3, compression: int = 0) -> bytearray:
    return fmt.encode_batch(
        [fmt.RecordInput(b"k%d" % i, b"v%d" % i, [("h", b"x")], 1000 + i) for i in range(n)],
        compression=compression,
    )


@pytest.mark.parametrize("codec", sorted(fmt.COMPRESSION_CODECS.values()))
def test_encode_decode_round_trip(codec: int) -> None:
    data = make(5, codec)
    header = fmt.read_header(data)
    assert header.magic == 2
    assert header.record_count == 5
    assert header.last_offset_delta == 4
    assert header.compression == codec
    assert header.size == len(data)
    records = list(fmt.iter_records(data))
    assert [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in records] == [
        (i, b"k%d" % i, b"v%d" % i, 1000 + i, [("h", b"x")]) for i in range(5)
    ]


def test_explicit_offsets_allow_gaps() -> None:
    data = fmt.encode_batch(
        [fmt.RecordInput(b"a", b"1"), fmt.RecordInput(b"b", None)], offsets=[10, 17]
    )
    header = fmt.read_header(data)
    assert (header.base_offset, header.last_offset) == (10, 17)
    assert [(r.offset, r.value) for r in fmt.iter_records(data)] == [(10, b"1"), (17, None)]


def test_scan_stops_at_each_kind_of_damage() -> None:
    one, two = make(), make()
    good = one + two
    assert fmt.scan(good).error is None
    assert len(fmt.scan(good).headers) == 2

    torn = fmt.scan(good[:-5])
    assert (torn.valid_bytes, torn.needed, torn.error) == (len(one), len(two), "truncated batch")

    short = fmt.scan(good + b"\x00" * 10)
    assert short.valid_bytes == len(good) and short.needed == fmt.HEADER_SIZE

    flipped = bytearray(good)
    flipped[len(one) + 70] ^= 0xFF
    assert fmt.scan(flipped).error == "CRC mismatch"
    assert fmt.scan(flipped, check_crc=False).error is None

    bad_magic = bytearray(good)
    bad_magic[16] = 1
    assert fmt.scan(bad_magic).error == "unsupported magic 1"

    tiny = bytearray(good)
    tiny[8:12] = (10).to_bytes(4, "big")
    assert "too small" in (fmt.scan(tiny).error or "")


def test_stamping_outside_crc_keeps_it_valid() -> None:
    data = make()
    fmt.set_base_offset(data, 0, 1234)
    fmt.set_leader_epoch(data, 0, 7)
    header = fmt.read_header(data)
    assert (header.base_offset, header.partition_leader_epoch) == (1234, 7)
    assert fmt.crc_matches(data, 0, header)


def test_restamped_header_is_the_stamped_batchs_header() -> None:
    """What a leader's append remembers of a batch is what reading it back after the stamps
    gives (base offset, epoch, max timestamp; every other field as it was)."""
    data = make()
    header = fmt.read_header(data)
    fmt.set_base_offset(data, 0, 1234)
    fmt.set_leader_epoch(data, 0, 7)
    assert fmt.restamped(header, 1234, 7, header.max_timestamp) == fmt.read_header(data)
    fmt.set_log_append_time(data, 0, header, 99_999)
    stamped = fmt.restamped(header, 1234, 7, 99_999)
    assert stamped._replace(attributes=stamped.attributes | fmt.TIMESTAMP_TYPE_MASK, crc=0) == (
        fmt.read_header(data)._replace(crc=0)
    )


def test_set_producers_header_is_the_batchs_header_read_back() -> None:
    """A transactional produce's batches are stamped with their producer, re-CRCed, and the
    header `set_producer` makes (not read back) is what reading the batch gives."""
    data = make() + make()
    first, second = (header for _, header in fmt.scan(data).headers)
    made = fmt.set_producer(data, first.size, second, 1 << 40, 3)
    assert made == fmt.read_header(data, first.size)
    assert (made.producer_id, made.producer_epoch, made.base_sequence) == (1 << 40, 3, -1)
    assert made.attributes & fmt.TRANSACTIONAL_MASK
    assert fmt.crc_matches(data, first.size, made)
    assert fmt.read_header(data) == first  # the batch before it is left alone


def test_set_producers_stamps_a_requests_batches_as_set_producer_does() -> None:
    """A request's batches stamped in one call (in C where it was built) come out byte for
    byte, and header for header, as `set_producer` makes them one by one; the batch before
    the range is left alone, and a range that cuts a batch is refused."""
    data = make() + make() + make()
    headers = fmt.scan(data).headers
    one_by_one = bytearray(data)
    expected = [(pos, fmt.set_producer(one_by_one, pos, h, 1 << 40, 3)) for pos, h in headers[1:]]
    together = bytearray(data)
    assert fmt.set_producers(together, headers[1:], 1 << 40, 3) == expected
    assert together == one_by_one
    assert fmt.read_header(together) == headers[0][1]
    assert fmt.set_producers(together, [], 1, 0) == []
    if fmt._native_stamp is not None:
        with pytest.raises(ValueError, match="truncated batch"):
            fmt._native_stamp(together, 0, len(together) - 1, 1, 0, fmt.BatchHeader)
        with pytest.raises(ValueError, match="within the buffer"):
            fmt._native_stamp(together, 0, len(together) + 1, 1, 0, fmt.BatchHeader)
        with pytest.raises(ValueError, match="producer_epoch"):
            fmt._native_stamp(together, 0, len(together), 1, 2**15, fmt.BatchHeader)


def test_stamped_for_is_what_set_producer_leaves_as_it_is() -> None:
    """A batch is stamped for a producer when it is transactional and carries that producer's
    id and epoch with sequence -1 (what the log's write of a transaction may then skip);
    anything else is not, and `set_producer` changes it."""
    data = make()
    (pos, plain), *_ = fmt.scan(data).headers
    assert not fmt.stamped_for(plain, 7, 1)
    stamped = fmt.set_producer(data, pos, plain, 7, 1)
    assert fmt.stamped_for(stamped, 7, 1)
    assert not fmt.stamped_for(stamped, 7, 2) and not fmt.stamped_for(stamped, 8, 1)
    assert fmt.set_producer(data, pos, stamped, 7, 1) is stamped
    sequenced = stamped._replace(base_sequence=0)
    assert not fmt.stamped_for(sequenced, 7, 1)
    untransactional = stamped._replace(attributes=stamped.attributes & ~fmt.TRANSACTIONAL_MASK)
    assert not fmt.stamped_for(untransactional, 7, 1)


def test_log_append_time_rewrites_crc_and_record_timestamps() -> None:
    data = make()
    fmt.set_log_append_time(data, 0, fmt.read_header(data), 99_999)
    header = fmt.read_header(data)
    assert header.log_append_time and header.max_timestamp == 99_999
    assert fmt.crc_matches(data, 0, header)
    assert {r.timestamp for r in fmt.iter_records(data)} == {99_999}


def codec_marker(
    producer_id: int, epoch: int, commit: bool, coordinator_epoch: int, timestamp: int
) -> bytes:
    """A marker built record by record by aiokafka's codec, as Kafka's EndTransactionMarker."""
    builder = DefaultRecordBatchBuilder(2, 0, 1, producer_id, epoch, -1, 2**31 - 1)
    key = (fmt.CONTROL_COMMIT if commit else fmt.CONTROL_ABORT).to_bytes(4, "big")
    value = b"\x00\x00" + coordinator_epoch.to_bytes(4, "big", signed=True)
    builder.append(0, timestamp, key, value, [])
    out = builder.build()
    header = fmt.read_header(out)
    fmt.set_attributes(out, 0, header, header.attributes | fmt.CONTROL_MASK)
    return bytes(out)


@given(
    st.integers(0, 2**63 - 1),
    st.integers(0, 2**15 - 1),
    st.booleans(),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(0, 2**50),
)
def test_a_control_batch_is_the_codecs_marker_byte_for_byte(
    producer_id: int, epoch: int, commit: bool, coordinator_epoch: int, timestamp: int
) -> None:
    """Markers are filled into a batch built once; each must be the batch the codec builds
    for it, with its header and a good CRC."""
    out, header = fmt.control_batch(producer_id, epoch, commit, coordinator_epoch, timestamp)
    assert bytes(out) == codec_marker(producer_id, epoch, commit, coordinator_epoch, timestamp)
    assert header == fmt.read_header(out) and fmt.crc_matches(out, 0, header)
    assert header.is_control and header.is_transactional
    assert fmt.control_type(out) == (fmt.CONTROL_COMMIT if commit else fmt.CONTROL_ABORT)


def test_malformed_records_raise_invalid_record() -> None:
    data = make()
    data[fmt.HEADER_SIZE :] = b"\x7f" * (len(data) - fmt.HEADER_SIZE)
    with pytest.raises(InvalidRecord, match="malformed"):
        list(fmt.iter_records(data))
