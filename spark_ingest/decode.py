"""Segment bytes to Arrow: verify the object, walk its batches, build columnar record batches.

Records are decoded by aiokafka's C codec (through engine.batch); control batches are skipped,
and so are the batches of aborted transactions the caller names (see transactions.py).
A value is JSON text when its batch carries Sluice's VALUES_JSON_MASK (the gateway validated
it) or when it parses as UTF-8 JSON; otherwise its raw bytes go to `value_bytes`. Two columns,
because one Parquet column cannot hold strings for some rows and bytes for others.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from engine import batch as fmt
from spark_ingest.errors import IngestError
from spark_ingest.transactions import Aborted, is_aborted

HEADER_TYPE = pa.struct([("key", pa.string()), ("value", pa.binary())])
HEADERS_TYPE = pa.list_(pa.field("element", HEADER_TYPE))
# Exactly the Arrow form of the Spark schema (Spark checks equality): timestamps in
# microseconds, UTC; Kafka's are milliseconds.
SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("key", pa.binary()),
        ("value", pa.string()),
        ("value_bytes", pa.binary()),
        ("headers", HEADERS_TYPE),
    ]
)
ROWS_PER_BATCH = 65536


def verify(data: bytes, size: int, sha256: str, where: str) -> None:
    """Check a downloaded segment against its manifest entry."""
    if len(data) != size:
        raise IngestError(f"segment {where} is {len(data)} bytes; its manifest says {size}")
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise IngestError(f"segment {where} has sha256 {digest}; its manifest says {sha256}")


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def is_json(raw: bytes) -> bool:
    """Whether `raw` is one JSON document in UTF-8 (NaN and Infinity are not JSON)."""
    try:
        json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError included
        return False
    return True


def scan_segment(data: bytes, where: str) -> list[tuple[int, fmt.BatchHeader]]:
    """(position, header) of every batch of a segment, CRC-checked."""
    result = fmt.scan(data, check_crc=True)
    if result.error is not None:
        raise IngestError(
            f"segment {where} is corrupt at byte {result.valid_bytes}: {result.error}"
        )
    return result.headers


def data_batches(
    headers: Iterable[tuple[int, fmt.BatchHeader]],
    lo: int,
    hi: int,
    aborted: Sequence[Aborted] = (),
) -> Iterator[tuple[int, fmt.BatchHeader]]:
    """The batches holding records with offsets in [lo, hi): no control batch, none of an
    aborted transaction. Only a transactional batch costs more than a bit test."""
    for pos, header in headers:
        if header.last_offset < lo or header.base_offset >= hi:
            continue
        attributes = header.attributes
        if attributes & fmt.TRANSACTIONAL_MASK and (
            attributes & fmt.CONTROL_MASK
            or is_aborted(aborted, header.producer_id, header.base_offset)
        ):
            continue
        yield pos, header


def count_records(data: bytes, lo: int, hi: int, where: str) -> int:
    """Data records with offsets in [lo, hi), decoding only batches that straddle a bound."""
    view = memoryview(data)
    count = 0
    for pos, header in data_batches(scan_segment(data, where), lo, hi):
        if header.base_offset >= lo and header.last_offset < hi:
            count += header.record_count
        else:
            batch = fmt.batch_records(view[pos : pos + header.size])
            count += sum(1 for record in batch if lo <= record.offset < hi)
    return count


class _Columns:
    """Column builders for one Arrow batch of one partition's records."""

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.keys: list[bytes | None] = []
        self.texts: list[bytes | None] = []
        self.raws: list[bytes | None] = []
        self.header_ends: list[int] = [0]
        self.header_keys: list[str] = []
        self.header_values: list[bytes | None] = []

    def add_batch(self, batch: Iterable[Any], lo: int, hi: int, values_json: bool) -> None:
        """Append the records of one decoded batch with offsets in [lo, hi)."""
        offsets, timestamps, keys = self.offsets, self.timestamps, self.keys
        texts, raws = self.texts, self.raws
        header_ends, header_keys, header_values = (
            self.header_ends,
            self.header_keys,
            self.header_values,
        )
        for record in batch:
            offset = record.offset
            if offset < lo or offset >= hi:
                continue
            offsets.append(offset)
            timestamps.append(record.timestamp)
            keys.append(record.key)
            value = record.value
            if value is not None and (values_json or is_json(value)):
                texts.append(value)
                raws.append(None)
            else:
                texts.append(None)
                raws.append(value)
            headers = record.headers
            if headers:
                for name, header_value in headers:
                    header_keys.append(name)
                    header_values.append(header_value)
            header_ends.append(len(header_keys))

    def __len__(self) -> int:
        return len(self.offsets)

    def build(self, topic: str, partition: int, where: str) -> pa.RecordBatch:
        rows = len(self.offsets)
        try:
            values = pa.array(self.texts, pa.binary()).cast(pa.string())
        except pa.ArrowInvalid as exc:
            raise IngestError(f"segment {where}: a batch flagged as JSON holds non-UTF-8") from exc
        headers = pa.ListArray.from_arrays(
            pa.array(self.header_ends, pa.int32()),
            pa.StructArray.from_arrays(
                [
                    pa.array(self.header_keys, pa.string()),
                    pa.array(self.header_values, pa.binary()),
                ],
                fields=list(HEADER_TYPE),
            ),
            type=HEADERS_TYPE,
        )
        columns = [
            pa.repeat(pa.scalar(topic, pa.string()), rows),
            pa.repeat(pa.scalar(partition, pa.int32()), rows),
            pa.array(self.offsets, pa.int64()),
            pa.array(self.timestamps, pa.timestamp("ms", tz="UTC")).cast(SCHEMA.field(3).type),
            pa.array(self.keys, pa.binary()),
            values,
            pa.array(self.raws, pa.binary()),
            headers,
        ]
        return pa.RecordBatch.from_arrays(columns, schema=SCHEMA)


def decode_segment(
    data: bytes,
    topic: str,
    partition: int,
    lo: int,
    hi: int,
    where: str,
    aborted: Sequence[Aborted] = (),
    headers: Sequence[tuple[int, fmt.BatchHeader]] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The data records of a segment with offsets in [lo, hi), as Arrow batches in SCHEMA,
    but those of the `aborted` transactions; `headers` when the segment is scanned already."""
    view = memoryview(data)
    columns = _Columns()
    scanned = scan_segment(data, where) if headers is None else headers
    for pos, header in data_batches(scanned, lo, hi, aborted):
        batch = fmt.batch_records(view[pos : pos + header.size])
        try:
            columns.add_batch(batch, lo, hi, header.values_json)
        except Exception as exc:  # the C codec raises several types for malformed records
            raise IngestError(
                f"segment {where}: malformed records in the batch at offset "
                f"{header.base_offset}: {exc}"
            ) from exc
        if len(columns) >= ROWS_PER_BATCH:
            yield columns.build(topic, partition, where)
            columns = _Columns()
    if len(columns):
        yield columns.build(topic, partition, where)
