"""The C fetch path (gateway/formats/_fetchjson.c) against the Python path it stands in for.

For any batches, well formed or damaged, `fetched_records` must answer exactly what it answers
without the extension: the same JSON and NDJSON bytes and next offset, or the same error.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec
import orjson
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from hypothesis import given
from hypothesis import strategies as st

from engine import batch as fmt
from gateway.formats import codecs
from gateway.formats import native as c_paths
from tests.hypothesis_runs import deterministic

_fetchjson = pytest.importorskip("gateway.formats._fetchjson")

SETTINGS = deterministic(300)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=6,
)
# Text that stresses the escaping: quotes, backslashes, control characters, DEL, non-ASCII.
tricky_text = st.text(
    st.sampled_from('"\\/\x00\x08\x1f\x7f\n\t aé\u2028\U0001f600'), min_size=1, max_size=6
) | st.text(max_size=12)
header_lists = st.lists(
    st.tuples(
        st.sampled_from([fmt.IDEMPOTENCY_HEADER, "trace", "é"]),
        st.none() | st.binary(max_size=6),
    ),
    min_size=1,
    max_size=2,
)


@st.composite
def records(draw: st.DrawFn, values_json: bool, plain: bool) -> tuple[Any, Any, Any]:
    """(key, value, headers). A plain record has what the C path covers: no headers, a UTF-8
    or null key, a value from a JSON batch. Others differ in one of these."""
    key = draw(st.none() | tricky_text.map(str.encode))
    if values_json:
        value = draw(st.none() | json_values.map(orjson.dumps))
    else:
        value = draw(st.none() | st.binary(max_size=20) | json_values.map(orjson.dumps))
    if plain:
        return key, value, []
    differs = draw(st.sampled_from(["headers", "key"]))
    if differs == "key":
        return draw(st.binary(max_size=12)), value, []  # often not UTF-8: base64
    return key, value, draw(header_lists)


@st.composite
def batch(draw: st.DrawFn, base_offset: int) -> bytearray:
    """A v2 batch as the engine stores it, in any of the shapes the fetch path distinguishes;
    most are plain (JSON values, uncompressed, mostly plain records), the C path's share."""
    plain = draw(st.booleans())
    values_json = plain or draw(st.booleans())
    compression = 0 if plain else draw(st.sampled_from([0, 1]))  # none or gzip
    idempotent = draw(st.booleans())
    log_append_time = draw(st.booleans())
    # In a plain batch, one record in ten is not plain: the whole batch falls back to Python.
    record = st.integers(0, 9).flatmap(lambda n: records(values_json, plain and n > 0))
    items = draw(st.lists(record, min_size=1, max_size=8))
    gaps = draw(st.lists(st.integers(1, 3), min_size=len(items), max_size=len(items)))
    first_timestamp = draw(st.integers(-1, 2**50))
    builder = DefaultRecordBatchBuilder(2, compression, 0, -1, -1, -1, 2**31 - 1)
    delta = 0
    for (key, value, headers), gap in zip(items, gaps, strict=True):
        timestamp = first_timestamp + draw(st.integers(0, 10**6))
        assert builder.append(delta, timestamp, key, value, headers) is not None
        delta += gap
    out: bytearray = builder.build()
    fmt.set_base_offset(out, 0, base_offset)
    header = fmt.read_header(out)
    attributes = header.attributes
    if values_json:
        attributes |= fmt.VALUES_JSON_MASK
    if idempotent:
        attributes |= fmt.IDEMPOTENT_MASK
    fmt.set_attributes(out, 0, header, attributes)
    if log_append_time:
        fmt.set_log_append_time(out, 0, fmt.read_header(out), draw(st.integers(0, 2**50)))
    return out


@st.composite
def logs(draw: st.DrawFn) -> bytes:
    """One to three batches at increasing offsets, as a read returns them."""
    out = bytearray()
    offset = draw(st.integers(0, 2**40))
    for _ in range(draw(st.integers(1, 3))):
        built = draw(batch(offset))
        out += built
        offset = fmt.read_header(built).next_offset + draw(st.integers(0, 2))
    return bytes(out)


sources = st.none() | st.tuples(st.text(max_size=8), st.integers(0, 2**31 - 1))


def answer(
    data: bytes, start: int, max_records: int, source: tuple[str, int] | None
) -> tuple[Any, ...]:
    """What a fetch would send for these batches: both bodies and the next offset, or the error."""
    try:
        items, next_offset = codecs.fetched_records(memoryview(data), start, max_records, source)
    except Exception as exc:
        return ("error", type(exc), str(exc))
    return (
        codecs.encode_json_body(items, next_offset, 0),
        codecs.encode_ndjson_body(items),
        next_offset,
        len(items),
    )


def both_paths(
    data: bytes,
    start: int,
    max_records: int,
    source: tuple[str, int] | None,
) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    native = answer(data, start, max_records, source)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(c_paths, "batch_json", c_paths.declines)
        python = answer(data, start, max_records, source)
    return native, python


def offsets_of(data: bytes) -> Iterator[int]:
    for rec in fmt.iter_records(data):
        yield rec.offset


@SETTINGS
@given(data=logs(), picks=st.data(), source=sources)
def test_same_answer_as_python_path(data: bytes, picks: st.DataObject, source: Any) -> None:
    offsets = list(offsets_of(data))
    start = picks.draw(st.sampled_from(offsets) | st.integers(offsets[0] - 2, offsets[-1] + 2))
    max_records = picks.draw(st.integers(1, len(offsets) + 2))
    native, python = both_paths(data, start, max_records, source)
    assert native == python


@SETTINGS
@given(built=batch(0), damage=st.data(), source=sources)
def test_damaged_batches_get_the_python_answer(
    built: bytearray, damage: st.DataObject, source: Any
) -> None:
    """Bytes of a batch set, cut or inserted (all but its length field, which a read checks
    before any decoding): never a crash, never an answer other than the Python path's."""
    for _ in range(damage.draw(st.integers(1, 3))):
        # Anywhere but the length field; often the record count or the first record's varints.
        last = len(built) - 1
        at = damage.draw(
            st.integers(12, last) | st.integers(57, 60) | st.integers(61, min(last, 66))
        )
        how = damage.draw(st.sampled_from(["set", "nudge", "cut", "insert"]))
        byte = damage.draw(st.integers(0, 255))
        if how == "set":
            built[at] = byte
        elif how == "nudge":  # one more or one less keeps most varints and counts readable
            built[at] = (built[at] + damage.draw(st.sampled_from([1, -1]))) % 256
        elif how == "cut":
            del built[at:]
        else:
            built[at:at] = bytes([byte])
        if len(built) <= 66:
            break
    start = damage.draw(st.integers(-1, 3))
    native, python = both_paths(bytes(built), start, damage.draw(st.integers(1, 9)), source)
    assert native == python


@SETTINGS
@given(
    blob=st.binary(min_size=0, max_size=200),
    start=st.integers(-(2**63), 2**63 - 1),
    limit=st.integers(-1, 10),
)
def test_arbitrary_bytes_never_crash(blob: bytes, start: int, limit: int) -> None:
    result = _fetchjson.batch_json(memoryview(blob), start, limit, b"{", msgspec.Raw)
    assert result is None or isinstance(result[0], list)


def plain_batch(count: int, base_offset: int = 0) -> bytearray:
    built = fmt.encode_batches(
        [(f"k{i}".encode(), orjson.dumps(i), [], None) for i in range(count)],
        max_batch_bytes=2**20,
        values_json=True,
        default_timestamp=1_700_000_000_000,
    )
    fmt.set_base_offset(built, 0, base_offset)
    return built


def test_plain_batches_take_the_c_path() -> None:
    view = memoryview(bytes(plain_batch(5, base_offset=10)))
    done = _fetchjson.batch_json(view, 12, 2, b"{", msgspec.Raw)
    assert done is not None
    items, next_offset = done
    assert [bytes(item) for item in items] == [
        b'{"offset":12,"timestamp":1700000000000,"key":"k2","value":2,"headers":{}}',
        b'{"offset":13,"timestamp":1700000000000,"key":"k3","value":3,"headers":{}}',
    ]
    assert next_offset == 14
    assert _fetchjson.batch_json(view, 100, 5, b"{", msgspec.Raw) == ([], 100)


@pytest.mark.parametrize("base_offset", [0, 8, 9_998, 999_999_999_999_999_998, 2**63 - 5])
def test_offsets_carry_across_powers_of_ten(base_offset: int) -> None:
    """The C path counts offsets up in decimal text; carries must match a fresh format."""
    data = bytes(plain_batch(4, base_offset=base_offset))
    native, python = both_paths(data, base_offset, 10, None)
    assert native == python
    assert native[2] == base_offset + 4


def test_other_batches_are_left_to_python() -> None:
    not_json = fmt.encode_batch([fmt.RecordInput(b"k", b"1")])
    with_headers = fmt.encode_batches(
        [(b"k", b"1", [("h", b"v")], None)], max_batch_bytes=2**20, values_json=True
    )
    for built in (not_json, with_headers):
        assert _fetchjson.batch_json(memoryview(bytes(built)), 0, 5, b"{", msgspec.Raw) is None


def test_errors_from_the_wrapper_propagate() -> None:
    view = memoryview(bytes(plain_batch(2)))

    def refuse(_: bytes) -> None:
        raise RuntimeError("no")

    with pytest.raises(RuntimeError, match="no"):
        _fetchjson.batch_json(view, 0, 5, b"{", refuse)
    with pytest.raises(TypeError):
        _fetchjson.batch_json(view, 0, 5, "{", msgspec.Raw)


def test_gzip_is_not_plain() -> None:
    """Compressed batches go through aiokafka, which decompresses them."""
    builder = DefaultRecordBatchBuilder(2, 1, 0, -1, -1, -1, 2**31 - 1)
    builder.append(0, 1, b"k", b"1", [])
    built = builder.build()
    header = fmt.read_header(built)
    fmt.set_attributes(built, 0, header, header.attributes | fmt.VALUES_JSON_MASK)
    assert _fetchjson.batch_json(memoryview(bytes(built)), 0, 5, b"{", msgspec.Raw) is None


def _count(built: bytearray, change: int) -> None:
    built[57:61] = (fmt.read_header(built).record_count + change).to_bytes(4, "big", signed=True)


def _first_length(built: bytearray, change: int) -> None:
    built[fmt.HEADER_SIZE] += 2 * change  # zigzag: the raw byte moves by two per unit


def _trailing_byte(built: bytearray, change: int) -> None:
    built.append(change)
    built[8:12] = (fmt.read_header(built).length + 1).to_bytes(4, "big")


@pytest.mark.parametrize(
    ("damage", "change"),
    [(_count, -1), (_count, 1), (_first_length, 1), (_first_length, -1), (_trailing_byte, 0)],
)
@pytest.mark.parametrize("source", [None, ("t", 1)])
def test_structural_damage_is_refused(
    damage: Any, change: int, source: tuple[str, int] | None
) -> None:
    """Record counts, record lengths and bytes left over are checked as aiokafka checks them."""
    built = plain_batch(3)
    damage(built, change)
    native, python = both_paths(bytes(built), 0, 10, source)
    assert python[0] == "error"
    assert native == python
