"""HTTP body formats: produce bodies -> records, and fetched batches -> response bodies.

Media types:
- `application/json`: `{"records": [{"key", "value", "headers", "partition", "timestamp"}]}`
  in, `{"records": [...], "next_offset", "high_watermark"}` out;
- `application/x-ndjson`: one JSON value per line in, one record object per line out;
- `application/vnd.sluice.record-batch`: one or more Kafka RecordBatch v2, as stored.

Values produced as JSON are stored as their JSON text in batches flagged VALUES_JSON_MASK, so a
JSON fetch embeds them as they are (`msgspec.Raw`) instead of parsing them again.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import msgspec
import orjson

from engine import batch as fmt
from engine import record_check
from engine.batch import Headers, RecordTuple
from gateway.formats import native
from gateway.http.problem import Problem, bad_request

# The API's binary media type is the one nodes send each other: batches as stored.
from replication.node_contract import RECORD_BATCH as RECORD_BATCH

JSON = "application/json"
NDJSON = "application/x-ndjson"
PRODUCE_TYPES = (JSON, NDJSON, RECORD_BATCH)
FETCH_TYPES = (JSON, NDJSON, RECORD_BATCH)

MAX_TIMESTAMP = 2**63 - 1


@dataclass(slots=True)
class ParsedRecords:
    """A JSON produce body, validated: records in order and what they asked for."""

    records: list[RecordTuple]
    partitions: list[int | None] | None  # per record; None when no record names a partition
    not_json: set[int]  # indexes of records whose value was sent as base64


def invalid(index: int, detail: str, field: str | None = None) -> Problem:
    pointer = f"/records/{index}" + (f"/{field}" if field else "")
    return bad_request(
        f"records[{index}]: {detail}", "INVALID_RECORD", index=index, pointer=pointer
    )


NonNegative = Annotated[int, msgspec.Meta(ge=0)]
Timestamp = Annotated[int, msgspec.Meta(ge=0, le=MAX_TIMESTAMP)]
_NULL = b"null"


class JsonRecord(msgspec.Struct, forbid_unknown_fields=True):
    """One record of a JSON produce body; `value` stays raw JSON text, never parsed twice."""

    key: str | None = None
    value: msgspec.Raw = msgspec.Raw(_NULL)
    headers: dict[str, str | None] | None = None
    partition: NonNegative | None = None
    timestamp: Timestamp | None = None
    key_encoding: Literal["base64"] | None = None
    value_encoding: Literal["base64"] | None = None


class JsonProduceBody(msgspec.Struct, forbid_unknown_fields=True):
    records: list[JsonRecord]


_BODY = msgspec.json.Decoder(JsonProduceBody)
_ERROR_PATH = re.compile(
    r"^(?P<message>.*) - at `\$\.records\[(?P<index>\d+)\](?:\.(?P<field>\w+))?"
)


def _validation_problem(exc: msgspec.ValidationError) -> Problem:
    match = _ERROR_PATH.match(str(exc))
    if match is None:
        return bad_request(f"invalid produce body: {exc}", "INVALID_JSON")
    return invalid(int(match["index"]), match["message"], match["field"])


def _base64(index: int, field: str, raw: bytes) -> bytes:
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise invalid(index, f"{field} is not valid base64", field) from None


# A number too large for a double (1e309, or 309 digits and more) has an exponent after a digit
# or a run of 309 digits: a body with neither, found in C, needs no second parse.
_NUMBER_CHARS = bytes.maketrans(b"123456789E", b"000000000e")
_LONG_DIGITS = b"0" * 309


def _may_overflow(body: bytes) -> bool:
    chars = body.translate(_NUMBER_CHARS)
    return b"0e" in chars or _LONG_DIGITS in chars


def _too_deep() -> Problem:
    return bad_request("the body nests JSON deeper than the parser allows", "INVALID_JSON")


def _is_utf8(body: bytes) -> bool:
    if body.isascii():
        return True
    try:
        body.decode()
    except UnicodeDecodeError:
        return False
    return True


def _require_utf8(body: bytes) -> None:
    """JSON is UTF-8 (RFC 8259): msgspec keeps raw values as sent, so a string that is not
    would be stored and break every later JSON fetch of its partition."""
    if not _is_utf8(body):
        raise bad_request("the body is not UTF-8", "INVALID_JSON")


def parse_json_records(body: bytes) -> ParsedRecords:
    """Validate a JSON produce body (in C, by msgspec); errors name the record and field."""
    _require_utf8(body)
    try:
        doc = _BODY.decode(body)
    except msgspec.ValidationError as exc:
        raise _validation_problem(exc) from None
    except msgspec.DecodeError as exc:
        raise bad_request(f"malformed JSON: {exc}", "INVALID_JSON") from None
    except RecursionError:
        raise _too_deep() from None
    if not doc.records:
        raise bad_request('"records" must not be empty', "INVALID_RECORD")
    if _may_overflow(body):
        _refuse_infinite_values(doc.records)
    parsed = ParsedRecords([], None, set())
    append = parsed.records.append
    no_headers: list[tuple[str, bytes | None]] = []
    for index, rec in enumerate(doc.records):
        text = rec.key
        key = None if text is None else text.encode()
        value: bytes | None = bytes(rec.value)
        if value == _NULL:
            value = None
        headers = rec.headers
        if rec.key_encoding or rec.value_encoding or rec.partition is not None:
            key, value = _special(index, rec, parsed, key, value)
        append(
            (
                key,
                value,
                [(k, None if v is None else v.encode()) for k, v in headers.items()]
                if headers
                else no_headers,
                rec.timestamp,
            )
        )
    if parsed.partitions is not None:
        parsed.partitions.extend([None] * (len(parsed.records) - len(parsed.partitions)))
    return parsed


def _refuse_infinite_values(records: list[JsonRecord]) -> None:
    """Refuse a value holding a number that is infinite as a double: every other route and
    most JSON decoders (orjson among them) refuse one, so no consumer could read it back."""
    for index, rec in enumerate(records):
        try:
            orjson.loads(memoryview(rec.value))
        except orjson.JSONDecodeError as exc:
            raise invalid(index, f"value: {exc} (numbers must be finite)", "value") from None


def _special(
    index: int, rec: JsonRecord, parsed: ParsedRecords, key: bytes | None, value: bytes | None
) -> tuple[bytes | None, bytes | None]:
    """The rarer fields: base64 keys and values, and a partition named per record."""
    if rec.key_encoding and key is not None:
        key = _base64(index, "key", key)
    if rec.value_encoding and value is not None:
        text = msgspec.json.decode(value)
        if not isinstance(text, str):
            raise invalid(index, "value with base64 encoding must be a string", "value")
        value = _base64(index, "value", text.encode())
        parsed.not_json.add(index)
    if rec.partition is not None:
        if parsed.partitions is None:
            parsed.partitions = []
        parsed.partitions.extend([None] * (index - len(parsed.partitions)))
        parsed.partitions.append(rec.partition)
    return key, value


_LINES = msgspec.json.Decoder(msgspec.Raw)


def parse_ndjson_records(body: bytes, key: bytes | None) -> list[RecordTuple]:
    """One JSON value per line (blank lines skipped), each a record with `key`.

    msgspec validates every line in one C call; it also accepts two values on one line, so
    its answer is used only when it found exactly one value per non-empty line and no number
    can be too large for a double (which orjson refuses). Otherwise the line-by-line check runs,
    and its errors name the 1-based line. msgspec keeps values as sent, unchecked for UTF-8:
    a body that is not UTF-8 takes the line-by-line check too, which names the line.
    """
    try:
        values = _LINES.decode_lines(body)
    except msgspec.DecodeError:
        values = None
    except RecursionError:
        raise _too_deep() from None
    if values is not None and not _may_overflow(body) and _is_utf8(body):
        lines = body.splitlines()
        if values and len(values) == len(lines) - lines.count(b""):
            no_headers: list[tuple[str, bytes | None]] = []
            # msgspec.Raw has the buffer protocol: the C batch builder copies it directly.
            return [(key, value, no_headers, None) for value in values]
    return _parse_ndjson_lines(body, key)


def _parse_ndjson_lines(body: bytes, key: bytes | None) -> list[RecordTuple]:
    records: list[RecordTuple] = []
    append = records.append
    loads = orjson.loads
    no_headers: list[tuple[str, bytes | None]] = []
    for number, raw in enumerate(body.split(b"\n"), 1):
        line = raw.strip()
        if not line:
            continue
        try:
            loads(line)
        except orjson.JSONDecodeError as exc:
            raise bad_request(
                f"line {number} is not a JSON value: {exc}", "INVALID_JSON", line=number
            ) from None
        append((key, line, no_headers, None))
    if not records:
        raise bad_request("the body holds no records", "INVALID_RECORD")
    return records


def validate_record_batches(body: bytes) -> bytearray:
    """Check binary batches (magic, sizes, CRC) and that every record reads at the offset
    deltas 0..count-1 (in C where `gateway.formats._batchcheck` can say so; else, and for its
    error, by `engine.record_check`, which decompresses a compressed batch first)."""
    result = fmt.scan(body, check_crc=True)
    if result.error is not None:
        raise bad_request(
            f"invalid record batch at byte {result.valid_bytes}: {result.error}",
            "INVALID_RECORD",
            byte=result.valid_bytes,
        )
    if not result.headers:
        raise bad_request("the body holds no record batch", "INVALID_RECORD")
    view = memoryview(body)
    for pos, header in result.headers:
        if header.attributes & ~fmt.COMPRESSION_MASK:
            raise bad_request(
                f"batch at byte {pos} sets attribute bits 0x{header.attributes:04x}; a producer "
                "may set only the compression codec (timestamp type, transactions, control "
                "batches and Sluice's flags are the broker's)",
                "INVALID_RECORD",
                byte=pos,
            )
        batch = view[pos : pos + header.size]
        if native.records_well_formed(batch):
            continue
        error = record_check.records_error(batch, header)
        if error is not None:
            raise bad_request(
                f"batch at byte {pos} holds malformed records: {error}", "INVALID_RECORD", byte=pos
            )
    return bytearray(body)


# -- fetch encoding ----------------------------------------------------------------------------


def _text_or_base64(out: dict[str, Any], field: str, raw: bytes | None) -> None:
    if raw is None:
        out[field] = None
        return
    try:
        out[field] = raw.decode()
    except UnicodeDecodeError:
        out[field] = base64.b64encode(raw).decode()
        out[f"{field}_encoding"] = "base64"


def _value(out: dict[str, Any], raw: bytes | None, known_json: bool) -> None:
    if raw is None:
        out["value"] = None
    elif known_json:
        out["value"] = msgspec.Raw(raw)
    else:
        try:
            orjson.loads(raw)
            out["value"] = msgspec.Raw(raw)
        except orjson.JSONDecodeError:
            out["value"] = base64.b64encode(raw).decode()
            out["value_encoding"] = "base64"


def _record_headers(out: dict[str, Any], headers: list[tuple[str, bytes | None]]) -> None:
    try:
        out["headers"] = {k: None if v is None else v.decode() for k, v in headers}
    except UnicodeDecodeError:
        out["headers"] = {
            k: None if v is None else base64.b64encode(v).decode() for k, v in headers
        }
        out["headers_encoding"] = "base64"


def record_doc(
    offset: int,
    timestamp: int,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes | None]],
    values_json: bool,
    into: dict[str, Any],
) -> dict[str, Any]:
    """One record as a fetch answers it (key and headers as text or base64, a JSON value
    embedded), added to `into` (the fields a reader puts first)."""
    into["offset"] = offset
    into["timestamp"] = timestamp
    _text_or_base64(into, "key", key)
    _value(into, value, values_json)
    if headers:
        _record_headers(into, headers)
    else:
        into["headers"] = {}
    return into


class FetchedRecord(msgspec.Struct, gc=False):
    """A fetched record on the common path; `value` is stored JSON text, embedded as is.

    Untracked by the garbage collector (it holds no cycles): a fetch makes a thousand of
    these, and tracked ones trigger collections that walk the whole server heap.
    """

    offset: int
    timestamp: int
    key: str | None
    value: msgspec.Raw
    headers: dict[str, str | None]


class GroupFetchedRecord(msgspec.Struct, gc=False):
    """A FetchedRecord that names its topic and partition, for a group member's fetch."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: str | None
    value: msgspec.Raw
    headers: dict[str, str | None]


_FETCH_ENCODER = msgspec.json.Encoder()
_NO_HEADERS: dict[str, str | None] = {}  # shared by every header-less FetchedRecord; never mutated


def encode_json_body(records: list[Any], next_offset: int, high_watermark: int) -> bytes:
    return _FETCH_ENCODER.encode(
        {"records": records, "next_offset": next_offset, "high_watermark": high_watermark}
    )


def encode_ndjson_body(records: list[Any]) -> bytes:
    return _FETCH_ENCODER.encode_lines(records)


def encode_record(record: Any) -> bytes:
    """One fetched record's JSON (a Server-Sent Event's data)."""
    return _FETCH_ENCODER.encode(record)


def fetched_records(
    data: memoryview,
    start: int,
    max_records: int,
    source: tuple[str, int] | None = None,
    keep: Callable[[bytes | None, Headers], bool] | None = None,
) -> tuple[list[Any], int]:
    """The records of whole batches, skipping offsets below `start`, ready for the encoders;
    and the offset after the last one (`start` if none). With `source` (topic, partition),
    each record names them first, as a group member's fetch answers. With `keep` (key,
    headers -> bool), only the records it keeps; the others still advance the next offset.

    The fetch hot path: a batch of JSON values whose records carry no headers is written to
    JSON in C (gateway/formats/_fetchjson.c), a msgspec.Raw per record. Other batches are decoded
    here, a FetchedRecord per common record (UTF-8 key, JSON value, no headers) and a dict, through
    the helpers that pick base64 where needed, for the rest; both give the same JSON.
    """
    out: list[Any] = []
    append = out.append
    record = FetchedRecord
    raw = msgspec.Raw
    batch_json = native.batch_json
    if source is None:
        topic_partition: tuple[tuple[str, Any], ...] = ()
        prefix = b"{"
    else:
        topic_partition = (("topic", source[0]), ("partition", source[1]))
        prefix = _FETCH_ENCODER.encode(dict(topic_partition))[:-1] + b","
    next_offset = start
    pos = 0
    end = len(data)
    while pos < end and len(out) < max_records:
        header = fmt.read_header(data, pos)
        view = data[pos : pos + header.size]
        pos += header.size
        if header.last_offset < start:
            continue
        left = max_records - len(out)
        if keep is None:
            done = batch_json(view, start, left, prefix, raw)
            if done is not None:
                if done[0]:
                    out += done[0]
                    next_offset = done[1]
                continue
        known_json = header.values_json
        internal = header.idempotent  # its first record carries Sluice's idempotency header
        for rec in fmt.batch_records(view):
            offset = rec.offset
            if offset < start:
                continue
            key = rec.key
            value = rec.value
            headers = rec.headers
            if internal:
                internal = False
                headers = [h for h in headers if h[0] != fmt.IDEMPOTENCY_HEADER]
            if keep is not None and not keep(key, headers):
                next_offset = offset + 1
                continue
            try:
                text = None if key is None else key.decode()
                plain = True
            except UnicodeDecodeError:
                text, plain = None, False
            if known_json and value is not None and not headers and plain:
                if source is None:
                    append(record(offset, rec.timestamp, text, raw(value), _NO_HEADERS))
                else:
                    append(
                        GroupFetchedRecord(
                            *source, offset, rec.timestamp, text, raw(value), _NO_HEADERS
                        )
                    )
            else:
                item: dict[str, Any] = {} if source is None else dict(topic_partition)
                append(record_doc(offset, rec.timestamp, key, value, headers, known_json, item))
            next_offset = offset + 1
            left -= 1
            if not left:
                break
    if not out and data:
        next_offset = max(start, fmt.scan(data, check_crc=False).headers[-1][1].next_offset)
    return out, next_offset


# REST Proxy v2's embedded formats -> the C encoder's record shape (gateway/formats/_fetchjson.c).
_V2_SHAPES = {"json": 1, "binary": 2}


@dataclass
class ByteBudget:
    """The key and value bytes one REST Proxy v2 read may still take, across its partitions:
    a record that would go over it waits for the next read, unless the read has none yet (as
    Kafka's fetch.max.bytes, a record larger than the bound still comes, alone)."""

    left: int
    delivered: bool = False


def rest_proxy_records(
    embedded: str,
    data: memoryview,
    start: int,
    max_records: int,
    source: tuple[str, int],
    budget: ByteBudget | None = None,
) -> tuple[list[Any], int]:
    """`fetched_records` in REST Proxy v2's shape: {topic, partition, offset, timestamp, key,
    value} (Karapace's; Confluent's proxy leaves out the timestamp), keys and values as JSON
    (`embedded` "json": as stored if that is JSON, else as a string) or base64 ("binary");
    v2 shows no headers. Within `budget`, if given. In C where `_fetchjson` covers the batch
    (byte for byte what the loop below writes)."""
    out: list[Any] = []
    shape = _V2_SHAPES[embedded]
    prefix = _FETCH_ENCODER.encode({"topic": source[0], "partition": source[1]})[:-1] + b","
    next_offset = start
    pos, end = 0, len(data)
    bounded = (-1,) if budget is None else (max(budget.left, 0), not budget.delivered)
    while pos < end and len(out) < max_records:
        if budget is not None and budget.left < 0:  # a first record larger than the bound
            break
        header = fmt.read_header(data, pos)
        view = data[pos : pos + header.size]
        pos += header.size
        if header.last_offset < start:
            continue
        left = max_records - len(out)
        done = native.batch_json(view, start, left, prefix, msgspec.Raw, shape, *bounded)
        if done is not None:
            if done[0]:
                out += done[0]
                next_offset = done[1]
            if budget is not None:
                budget.left -= done[-1]
                budget.delivered = budget.delivered or bool(done[0])
                if not done[0] or done[1] <= header.last_offset:  # stopped inside the batch
                    return out, next_offset
                bounded = (max(budget.left, 0), False)
            continue
        for rec in fmt.batch_records(view):
            if rec.offset < start:
                continue
            if budget is not None:
                size = len(rec.key or b"") + len(rec.value or b"")
                if size > budget.left and budget.delivered:
                    return out, next_offset
                budget.left -= size
                budget.delivered = True
                bounded = (max(budget.left, 0), False)
            item: dict[str, Any] = {
                "topic": source[0],
                "partition": source[1],
                "offset": rec.offset,
                "timestamp": rec.timestamp,
            }
            if shape == 2:
                item["key"] = _b64_or_none(rec.key)
                item["value"] = _b64_or_none(rec.value)
            else:
                item["key"] = _as_json(rec.key)
                item["value"] = (
                    msgspec.Raw(rec.value)
                    if header.values_json and rec.value is not None
                    else _as_json(rec.value)
                )
            out.append(item)
            next_offset = rec.offset + 1
            left -= 1
            if not left:
                break
    if not out and data and (budget is None or not budget.delivered):
        next_offset = max(start, fmt.scan(data, check_crc=False).headers[-1][1].next_offset)
    return out, next_offset


def _b64_or_none(raw: bytes | None) -> str | None:
    return None if raw is None else base64.b64encode(raw).decode()


def _as_json(raw: bytes | None) -> Any:
    """Stored bytes as a JSON value: as they are if they are JSON, else as a string."""
    if raw is None:
        return None
    try:
        orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw.decode(errors="replace")
    return msgspec.Raw(raw)


def negotiate(accept: str, offered: tuple[str, ...], default: str) -> str | None:
    """The offered type the Accept header prefers (ties: header order); None if none allowed.

    A type listed with q=0 is refused even when a wildcard would admit it.
    """
    if not accept.strip():
        return default
    ranges: list[tuple[str, float]] = []
    for part in accept.split(","):
        fields = [f.strip() for f in part.split(";")]
        q = 1.0
        for param in fields[1:]:
            if param.startswith("q="):
                try:
                    q = float(param[2:])
                except ValueError:
                    q = 0.0
        ranges.append((fields[0].lower(), q))
    refused = {media for media, q in ranges if q <= 0 and media in offered}
    allowed = [t for t in offered if t not in refused]
    ordered = [default, *[t for t in allowed if t != default]] if default in allowed else allowed
    best: tuple[float, int, str] | None = None
    for order, (media, q) in enumerate(ranges):
        if q <= 0:
            continue
        for candidate in ordered:
            if media in (candidate, "*/*") or (
                media.endswith("/*") and candidate.startswith(media[:-1])
            ):
                rank = (-q, order, candidate)
                if best is None or rank < best:
                    best = rank
                break
    return None if best is None else best[2]
