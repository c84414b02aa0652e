"""The C check of produced batches (gateway/formats/_batchcheck.c) against the Python path it stands
in for: `validate_record_batches` must answer exactly what it answers without the extension (the
same bytes, or the same problem) for any body, well formed or damaged; and it must take the
well-formed uncompressed batches itself."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from hypothesis import given
from hypothesis import strategies as st

from engine import batch as fmt
from tests.fuzz import sanitizers
from tests.fuzz.batch_check_native import both_paths
from tests.fuzz.batch_validator import fix_crcs
from tests.hypothesis_runs import deterministic

_batchcheck = pytest.importorskip("gateway.formats._batchcheck")

SETTINGS = deterministic(400)

header_names = st.sampled_from(["h", "é", "", fmt.IDEMPOTENCY_HEADER]) | st.text(max_size=4)
records = st.tuples(
    st.none() | st.binary(max_size=12),
    st.none() | st.binary(max_size=40),
    st.lists(st.tuples(header_names, st.none() | st.binary(max_size=6)), max_size=2),
)


@st.composite
def batches(draw: st.DrawFn) -> bytes:
    """One batch as a producer sends it: records at deltas 0..n-1 (or not, when `gaps`)."""
    compression = draw(st.sampled_from([0, 0, 0, 1]))  # mostly none; gzip is Python's
    gaps = draw(st.booleans()) and draw(st.integers(0, 9)) == 0
    base = draw(st.sampled_from([0, 0, 7, 2**63 - 3]))
    builder = DefaultRecordBatchBuilder(2, compression, 0, -1, -1, -1, 2**31 - 1)
    delta = 0
    for key, value, headers in draw(st.lists(records, min_size=1, max_size=6)):
        timestamp = draw(st.integers(0, 2**45))
        assert builder.append(delta, timestamp, key, value, headers) is not None
        delta += 1 + (draw(st.integers(0, 1)) if gaps else 0)
    out: bytearray = builder.build()
    fmt.set_base_offset(out, 0, base)
    return bytes(out)


@st.composite
def damaged(draw: st.DrawFn) -> bytes:
    """Batches with some bytes changed, cut or added, their CRCs then fixed so the damage
    reaches the records."""
    body = bytearray(b"".join(draw(st.lists(batches(), min_size=1, max_size=2))))
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(fmt.HEADER_SIZE - 4, len(body)))
        kind = draw(st.sampled_from(["set", "cut", "insert"]))
        if kind == "set" and at < len(body):
            body[at] = draw(st.integers(0, 255))
        elif kind == "cut":
            del body[at : at + draw(st.integers(1, 4))]
        else:
            body[at:at] = draw(st.binary(min_size=1, max_size=4))
    return fix_crcs(bytes(body))


@SETTINGS
@given(st.lists(batches(), min_size=1, max_size=3).map(b"".join))
def test_well_formed_bodies_answer_alike(body: bytes) -> None:
    both_paths(body)


@SETTINGS
@given(damaged())
def test_damaged_bodies_answer_alike(body: bytes) -> None:
    both_paths(body)


@SETTINGS
@given(st.binary(max_size=200))
def test_any_bytes_framed_as_a_batch_answer_alike(records_part: bytes) -> None:
    """Arbitrary record bytes behind a valid header, whatever count it claims."""
    count = len(records_part) % 5
    header = bytearray(fmt.encode_batch([fmt.RecordInput(None, b"x")] * max(count, 1)))
    body = bytearray(header[: fmt.HEADER_SIZE]) + records_part
    body[fmt.HEADER_SIZE - 4 : fmt.HEADER_SIZE] = count.to_bytes(4, "big")
    body[8:12] = (len(body) - 12).to_bytes(4, "big")
    both_paths(fix_crcs(bytes(body)))


@SETTINGS
@given(batches())
def test_the_c_check_takes_well_formed_uncompressed_batches(batch: bytes) -> None:
    """What it is for: an uncompressed batch whose records read at deltas 0..n-1 (and whose
    offsets fit) is accepted in C; a compressed one is left to Python."""
    header = fmt.read_header(batch)
    offsets = [record.offset for record in fmt.batch_records(memoryview(batch))]
    plain = (
        not header.attributes & fmt.COMPRESSION_MASK
        and offsets == list(range(header.base_offset, header.base_offset + len(offsets)))
        and header.base_offset + len(offsets) < 2**63
    )
    assert _batchcheck.records_well_formed(batch) is plain


def test_the_check_refuses_what_aiokafka_would_refuse() -> None:
    """Hand-made cases: a header name that is not UTF-8, bytes left over, a batch cut short.
    The timestamp is fixed so the CRC is too: the name is changed among the records only."""
    good = bytes(
        fmt.encode_batch([fmt.RecordInput(b"k", b"v", [("h", b"x")])] * 2, default_timestamp=1)
    )
    assert _batchcheck.records_well_formed(good)
    records = fmt.HEADER_SIZE
    bad_name = good[:records] + good[records:].replace(b"\x02h", b"\x02\xff", 1)
    leftover = good[:8] + (len(good) - 11).to_bytes(4, "big") + good[12:] + b"\x00"
    for body in (bad_name, leftover, good[:-1]):
        assert not _batchcheck.records_well_formed(body)
        assert isinstance(both_paths(fix_crcs(body)), tuple)
    with pytest.raises(TypeError):
        _batchcheck.records_well_formed("text")


def test_under_sanitizers(tmp_path: Path) -> None:
    """This file's tests again, against gateway/formats/_batchcheck.c built with ASan and UBSan:
    every access checked, any undefined behaviour fatal."""
    sanitizers.check_tests(__file__, "_batchcheck", tmp_path)


def _framed(schema_id: int, payload: bytes = b"x") -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + payload


framed_fields = (
    st.none()
    | st.binary(max_size=6)
    | st.builds(
        lambda schema_id, payload: _framed(schema_id, payload),
        st.sampled_from([0, 1, 7, 2**31, 2**32 - 1]),
        st.binary(max_size=8),
    )
)


@given(st.lists(st.tuples(framed_fields, framed_fields), min_size=1, max_size=8), st.booleans())
@SETTINGS
def test_the_wire_schema_ids_are_those_python_reads(
    drawn: list[tuple[bytes | None, bytes | None]], key: bool
) -> None:
    """The C walk's ids and first unframed record, against the records as aiokafka reads them."""
    batch = bytes(fmt.encode_batch([fmt.RecordInput(k, v) for k, v in drawn]))
    fields = [r.key if key else r.value for r in fmt.iter_records(batch)]
    framed = [f for f in fields if f is not None and len(f) >= 5 and f[0] == 0]
    bad = next((i for i, f in enumerate(fields) if f not in framed), -1)
    ids = dict.fromkeys(int.from_bytes(f[1:5], "big") for f in framed[: None if bad < 0 else bad])
    assert _batchcheck.wire_schema_ids(batch, key) == (bad, tuple(ids))


def test_the_wire_schema_ids_of_framed_values_and_where_c_cannot_say() -> None:
    values = [_framed(7), _framed(7, b""), _framed(2**32 - 1), _framed(7)]
    batch = bytes(fmt.encode_batch([fmt.RecordInput(None, v) for v in values]))
    assert _batchcheck.wire_schema_ids(batch, False) == (-1, (7, 2**32 - 1))
    assert _batchcheck.wire_schema_ids(batch, True) == (0, ())  # the keys are null
    unframed = [_framed(1), b"\x01" + _framed(1)[1:], _framed(3)]
    batch = bytes(fmt.encode_batch([fmt.RecordInput(None, v) for v in unframed]))
    assert _batchcheck.wire_schema_ids(batch, False) == (1, (1,))
    many = [_framed(i) for i in range(17)]
    batch = bytes(fmt.encode_batch([fmt.RecordInput(None, v) for v in many]))
    assert _batchcheck.wire_schema_ids(batch, False) is None, "more ids than C keeps"
    gzip = 1
    compressed = bytes(fmt.encode_batch([fmt.RecordInput(None, _framed(1))], compression=gzip))
    assert _batchcheck.wire_schema_ids(compressed, False) is None
    assert _batchcheck.wire_schema_ids(batch[:-3], False) is None, "a truncated batch"
