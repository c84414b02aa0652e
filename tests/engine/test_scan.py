"""The C walk over record batches (engine/_scan.c) against the Python walk it stands in for
(`engine.batch.python_scan`): the same headers, valid prefix, error and bytes needed for any
buffer, whole or damaged, of any buffer type, and for one large enough to be walked without
the GIL."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine import batch as fmt
from tests.fuzz import sanitizers
from tests.hypothesis_runs import deterministic

_scan = pytest.importorskip("engine._scan")

SETTINGS = deterministic(400)


@st.composite
def batches(draw: st.DrawFn) -> bytes:
    """One batch of a few records, stamped as a log holds it (any offset, epoch, producer)."""
    values = draw(st.lists(st.none() | st.binary(max_size=30), min_size=1, max_size=4))
    timestamp = draw(st.integers(0, 2**45))
    out = fmt.encode_batch(
        [fmt.RecordInput(None, value, [], timestamp) for value in values],
        compression=draw(st.sampled_from([0, 0, 0, 1])),
    )
    offset = draw(st.sampled_from([0, 7, 2**31, 2**63 - 10]))
    fmt.stamp_offset_and_epoch(
        out, 0, fmt.read_header(out), offset, draw(st.integers(-1, 2**31 - 1))
    )
    return bytes(out)


@st.composite
def damaged(draw: st.DrawFn) -> bytes:
    """Batches with some bytes changed, cut or added: a header field, a record byte (the CRC),
    the magic, the length, the counts, the end."""
    body = bytearray(b"".join(draw(st.lists(batches(), min_size=1, max_size=4))))
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["flip", "cut", "add"]))
        if kind == "flip" and body:
            at = draw(st.integers(0, len(body) - 1))
            body[at] ^= draw(st.integers(1, 255))
        elif kind == "cut" and body:
            del body[draw(st.integers(0, len(body) - 1)) :]
        else:
            body += draw(st.binary(min_size=1, max_size=70))
    return bytes(body)


def same_walk(buf: bytes | bytearray | memoryview) -> None:
    for check_crc in (True, False):
        walked = fmt.scan(buf, check_crc=check_crc)
        assert walked == fmt.python_scan(buf, check_crc=check_crc)
        assert all(type(header) is fmt.BatchHeader for _, header in walked.headers)


@SETTINGS
@given(st.lists(batches(), max_size=5))
def test_whole_batches_walk_alike(parts: list[bytes]) -> None:
    body = b"".join(parts)
    same_walk(body)
    same_walk(bytearray(body))
    same_walk(memoryview(body)[:])


@SETTINGS
@given(damaged())
def test_damaged_batches_stop_alike(body: bytes) -> None:
    same_walk(body)


def test_every_refusal_reads_as_the_python_walk_words_it() -> None:
    good = bytes(fmt.encode_batch([fmt.RecordInput(b"k", b"v")], default_timestamp=1))
    cases = {
        "truncated batch header": good + good[:60],
        "unsupported magic 1": good[:16] + b"\x01" + good[17:],
        "batch length 48 is too small": good[:8] + (48).to_bytes(4, "big") + good[12:],
        "negative record count": good[:57] + (-1).to_bytes(4, "big", signed=True) + good[61:],
        "truncated batch": good + good[:-1],
        "CRC mismatch": good[:-1] + bytes([good[-1] ^ 1]),
    }
    for error, body in cases.items():
        walked = fmt.scan(body)
        assert walked.error == error
        assert walked == fmt.python_scan(body)


def test_a_buffer_walked_without_the_gil_walks_alike() -> None:
    """Past 16 KiB the walk runs with the GIL released (a segment's chunk in an upload)."""
    one = bytes(fmt.encode_batch([fmt.RecordInput(None, b"x" * 100)] * 3))
    body = one * (65_536 // len(one))
    walked = fmt.scan(body)
    assert walked.error is None and len(walked.headers) == len(body) // len(one)
    same_walk(body)
    same_walk(body[:-7] + b"\xff" * 7)


def test_what_is_not_a_buffer_is_refused() -> None:
    for wrong in ("text", 1, None):
        with pytest.raises(TypeError):
            fmt.scan(wrong)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        _scan.scan(b"", True, int)


@SETTINGS
@given(
    st.lists(batches(), min_size=1, max_size=5), st.integers(0, 2**62), st.integers(0, 2**15 - 1)
)
def test_stamping_a_requests_batches_is_set_producers_python_loop(
    parts: list[bytes], producer_id: int, epoch: int
) -> None:
    """stamp_producer (C) leaves the bytes and makes the headers `set_producer` does, batch
    by batch."""
    data = bytearray(b"".join(parts))
    headers = fmt.scan(data).headers
    by_python = bytearray(data)
    expected = [
        (pos, fmt.set_producer(by_python, pos, h, producer_id, epoch)) for pos, h in headers
    ]
    end = headers[-1][0] + headers[-1][1].size
    assert _scan.stamp_producer(data, 0, end, producer_id, epoch, fmt.BatchHeader) == expected
    assert data == by_python


@SETTINGS
@given(damaged(), st.data())
def test_stamping_any_range_of_any_bytes_refuses_or_stamps(
    body: bytes, data: st.DataObject
) -> None:
    """Whatever the bytes and the range, stamp_producer stamps whole batches or says why it
    cannot (ValueError), touching nothing outside the range. A batch that carried the producer
    already is left as it was, its CRC right or wrong."""
    buf = bytearray(body)
    start = data.draw(st.integers(-2, len(buf) + 2))
    end = data.draw(st.integers(-2, len(buf) + 2))
    before = bytes(buf)
    try:
        stamped = _scan.stamp_producer(buf, start, end, 5, 1, fmt.BatchHeader)
    except ValueError:
        return
    assert 0 <= start <= end <= len(buf)
    assert buf[:start] == before[:start] and buf[end:] == before[end:]
    for pos, header in stamped:
        assert fmt.read_header(buf, pos) == header
        assert header.attributes & fmt.TRANSACTIONAL_MASK
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == (5, 1, -1)
        end_of = pos + header.length + fmt.LOG_OVERHEAD
        assert fmt.crc_matches(buf, pos, header) or buf[pos:end_of] == before[pos:end_of]


def test_a_batch_built_for_its_producer_is_not_stamped_again() -> None:
    """json_batches builds a transaction's batches stamped: stamping them again changes no byte
    and computes no CRC (a wrong one stays wrong, which it would not if it were computed)."""
    data = fmt.encode_batch([fmt.RecordInput(None, b"v", [], 0)] * 3)
    (pos, header), *_ = fmt.scan(data).headers
    fmt.set_producers(data, [(pos, header)], 9, 2)
    stamped = bytes(data)
    data[fmt.CRC_AT] ^= 0xFF
    damaged = bytes(data)
    (_, again), *_ = fmt.scan(data, check_crc=False).headers
    assert _scan.stamp_producer(data, 0, len(data), 9, 2, fmt.BatchHeader)[0][1] == again
    assert bytes(data) == damaged
    assert fmt.set_producer(data, 0, again, 9, 2) == again and bytes(data) == damaged
    data[fmt.CRC_AT] ^= 0xFF
    assert bytes(data) == stamped


def test_stamping_needs_a_writable_buffer_and_a_header_type() -> None:
    with pytest.raises((TypeError, BufferError)):
        _scan.stamp_producer(b"", 0, 0, 1, 0, fmt.BatchHeader)
    with pytest.raises(TypeError):
        _scan.stamp_producer(bytearray(), 0, 0, 1, 0, int)
    with pytest.raises(TypeError):
        _scan.stamp_producer(bytearray(), 0, 0)


def test_under_sanitizers(tmp_path: Path) -> None:
    """This file's tests again, against engine/_scan.c built with ASan and UBSan (and the
    portable CRC-32C): every access checked, any undefined behaviour fatal."""
    sanitizers.check_tests(__file__, "_scan", tmp_path)
