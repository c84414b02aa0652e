"""Fuzz target: the C fetch path (gateway/formats/_fetchjson.c) answers byte for byte what the
Python path answers (both bodies, the next offset, or the same error) for batches as a log holds
them, and never crashes on any bytes at all.

The first byte chooses: even, batches built from the input (the shapes the fetch path tells
apart); odd, the input itself, framed as one batch (damaged records, counts and varints).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import atheris
import msgspec
import orjson
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from engine import batch as fmt
from gateway.formats import codecs
from gateway.formats import native as c_paths
from tests.fuzz.c_paths import both_ways

assert c_paths.batch_json is not c_paths.declines, "gateway.formats._fetchjson is not built"
batch_json = c_paths.batch_json

Source = tuple[str, int] | None


def answer(data: bytes, start: int, max_records: int, source: Source) -> tuple[Any, ...]:
    """What a fetch sends for these batches: both bodies and the next offset, or the error."""
    try:
        items, next_offset = codecs.fetched_records(memoryview(data), start, max_records, source)
    except Exception as exc:
        return ("error", type(exc), str(exc))
    return (
        codecs.encode_json_body(items, next_offset, 0),
        codecs.encode_ndjson_body(items),
        next_offset,
    )


def compare(data: bytes, start: int, max_records: int, source: Source) -> None:
    native, python = both_ways(
        "batch_json", c_paths.declines, lambda: answer(data, start, max_records, source)
    )
    assert native == python, (native, python)


def _value(fdp: atheris.FuzzedDataProvider) -> bytes | None:
    kind = fdp.ConsumeIntInRange(0, 3)
    if kind == 0:
        return None
    if kind == 1:
        return bytes(fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 16)))
    if kind == 2:
        return orjson.dumps(fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 8)))
    return orjson.dumps({"n": fdp.ConsumeInt(8), "f": fdp.ConsumeRegularFloat()})


def _key(fdp: atheris.FuzzedDataProvider) -> bytes | None:
    kind = fdp.ConsumeIntInRange(0, 2)
    if kind == 0:
        return None
    size = fdp.ConsumeIntInRange(0, 12)
    if kind == 1:
        return str(fdp.ConsumeUnicodeNoSurrogates(size)).encode()
    return bytes(fdp.ConsumeBytes(size))


def _headers(fdp: atheris.FuzzedDataProvider, first: bool) -> list[tuple[str, bytes | None]]:
    if fdp.ConsumeIntInRange(0, 7):
        return []
    name = fdp.PickValueInList([fmt.IDEMPOTENCY_HEADER, "trace", "é"])
    if first and fdp.ConsumeBool():
        name = fmt.IDEMPOTENCY_HEADER
    return [(name, None if fdp.ConsumeBool() else fdp.ConsumeBytes(4))]


def built_batches(fdp: atheris.FuzzedDataProvider) -> bytes:
    """One to three uncompressed batches at increasing offsets, as the engine stores them."""
    out = bytearray()
    offset = fdp.ConsumeIntInRange(0, 2**62)
    for _ in range(fdp.ConsumeIntInRange(1, 3)):
        builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 2**31 - 1)
        first_timestamp = fdp.ConsumeIntInRange(-1, 2**50)
        delta = 0
        for index in range(fdp.ConsumeIntInRange(1, 6)):
            timestamp = first_timestamp + fdp.ConsumeIntInRange(0, 10**6)
            headers = _headers(fdp, index == 0)
            assert builder.append(delta, timestamp, _key(fdp), _value(fdp), headers) is not None
            delta += fdp.ConsumeIntInRange(1, 3)
        built: bytearray = builder.build()
        fmt.set_base_offset(built, 0, offset)
        header = fmt.read_header(built)
        attributes = header.attributes
        if fdp.ConsumeIntInRange(0, 3):
            attributes |= fmt.VALUES_JSON_MASK
        if fdp.ConsumeBool():
            attributes |= fmt.IDEMPOTENT_MASK
        fmt.set_attributes(built, 0, header, attributes)
        if fdp.ConsumeBool():
            fmt.set_log_append_time(
                built, 0, fmt.read_header(built), fdp.ConsumeIntInRange(0, 2**50)
            )
        out += built
        offset = fmt.read_header(built).next_offset + fdp.ConsumeIntInRange(0, 2)
        if offset > 2**62:
            break
    return bytes(out)


def framed(blob: bytes) -> bytes:
    """Arbitrary bytes made one batch a read could return: magic 2, the length of the bytes,
    no compression; the JSON flag kept from the input or set, so the C path looks at it."""
    out = bytearray(blob.ljust(fmt.HEADER_SIZE, b"\0"))
    out[8:12] = (len(out) - fmt.LOG_OVERHEAD).to_bytes(4, "big")
    out[16] = fmt.MAGIC
    attributes = int.from_bytes(out[21:23], "big") & ~fmt.COMPRESSION_MASK
    out[21:23] = (attributes | fmt.VALUES_JSON_MASK).to_bytes(2, "big")
    out[23:27] = max(0, int.from_bytes(out[23:27], "big", signed=True)).to_bytes(4, "big")
    out[57:61] = max(0, int.from_bytes(out[57:61], "big", signed=True)).to_bytes(4, "big")
    return bytes(out)


def one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    odd = fdp.ConsumeIntInRange(0, 255) & 1
    start = fdp.ConsumeIntInRange(-2, 2**62)
    max_records = fdp.ConsumeIntInRange(1, 20)
    source: tuple[str, int] | None = (
        fdp.ConsumeUnicodeNoSurrogates(4),
        fdp.ConsumeIntInRange(0, 2**31 - 1),
    )
    if fdp.ConsumeBool():
        source = None
    if odd:
        blob = fdp.ConsumeBytes(atheris.ALL_REMAINING)
        result = batch_json(memoryview(blob), start, max_records, b"{", msgspec.Raw)
        assert result is None or isinstance(result[0], list)
        batches = framed(blob)
        start = min(start, fmt.read_header(batches).base_offset + 3)
    else:
        batches = built_batches(fdp)
        start = min(start, fmt.read_header(batches).base_offset + fdp.ConsumeIntInRange(-2, 8))
    compare(batches, start, max_records, source)


def seeds() -> Iterator[bytes]:
    yield bytes(range(256))
    yield b"\x00" * 64
    built = fmt.encode_batches(
        [(b"k%d" % i, b"%d" % i, [], None) for i in range(4)],
        max_batch_bytes=2**20,
        values_json=True,
        default_timestamp=1_700_000_000_000,
    )
    yield b"\x01\x00\x00\x00\x00\x00\x00\x00\x05\x00" + bytes(built)
