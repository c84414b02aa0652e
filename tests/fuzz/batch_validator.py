"""Fuzz target: a binary produce body (Kafka RecordBatch v2) is either accepted as batches
whose records all decode with aiokafka at the offsets the batch header claims, or refused 400
INVALID_RECORD; nothing else escapes codecs.validate_record_batches.

An input whose first byte is odd has its batches' CRCs fixed up first, so mutations reach the
record decoding instead of stopping at the checksum.
"""

from __future__ import annotations

from collections.abc import Iterator

from aiokafka.record.default_records import DefaultRecordBatch
from crc32c import crc32c

from engine import batch as fmt
from gateway.formats import codecs
from gateway.http.problem import Problem


def fix_crcs(body: bytes) -> bytes:
    """Each well-framed batch's CRC set to match its bytes."""
    out = bytearray(body)
    pos = 0
    while len(out) - pos >= fmt.HEADER_SIZE:
        header = fmt.read_header(out, pos)
        if header.length < fmt.MIN_BATCH_LENGTH or pos + header.size > len(out):
            break
        crc = crc32c(memoryview(out)[pos + fmt.ATTRIBUTES_AT : pos + header.size])
        out[pos + fmt.CRC_AT : pos + fmt.CRC_AT + 4] = crc.to_bytes(4, "big")
        pos += header.size
    return bytes(out)


def one_input(data: bytes) -> None:
    body = fix_crcs(data[1:]) if data[:1] and data[0] & 1 else data[1:]
    try:
        accepted = codecs.validate_record_batches(body)
    except Problem as problem:
        assert (problem.status, problem.code) == (400, "INVALID_RECORD"), problem.code
        return
    assert accepted == body
    view = memoryview(accepted)
    for pos, header in fmt.scan(accepted).headers:
        assert not header.attributes & ~fmt.COMPRESSION_MASK
        deltas = [
            r.offset - header.base_offset for r in DefaultRecordBatch(view[pos : pos + header.size])
        ]
        # The log gives the batch `record_count` offsets: its records must use exactly those.
        assert deltas == list(range(header.record_count)), (deltas, header.record_count)


def _batch(compression: int, records: list[fmt.RecordInput]) -> bytes:
    return bytes(fmt.encode_batch(records, compression=compression, default_timestamp=1))


def seeds() -> Iterator[bytes]:
    plain = [fmt.RecordInput(b"k", b'{"a": 1}'), fmt.RecordInput(None, b"v", [("h", b"x")])]
    for codec in fmt.COMPRESSION_CODECS.values():
        yield b"\x01" + _batch(codec, plain)
    yield b"\x00" + _batch(0, plain) + _batch(0, [fmt.RecordInput(b"", None)])
    yield b"\x01" + _batch(0, [fmt.RecordInput(b"k" * 40, b"v" * 200, [("a", None)])])
