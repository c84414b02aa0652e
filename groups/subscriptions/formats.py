"""What a delivery request carries: CloudEvents 1.0 over HTTP (binary content mode for one
record, structured mode on request, `application/cloudevents-batch+json` for batches) or the
plain /v1 fetch JSON; the endpoint's credential; and a Standard Webhooks signature.

Ids are made from where the records live, so a redelivery carries the same ones and receivers
can deduplicate: `ce-id` is `topic/partition/offset`; `webhook-id` is that of a single record,
or `topic/partition/first-last` for a batch (batches are cut the same way after a restart
only if the settings are unchanged; each event's `id` inside is always stable)."""

from __future__ import annotations

import base64
import binascii
import datetime
import functools
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import orjson

from groups.subscriptions.spec import Subscription
from groups.subscriptions.state import DeliveryRecord

if TYPE_CHECKING:
    from _hashlib import HASH

CE_JSON = "application/cloudevents+json"
CE_BATCH = "application/cloudevents-batch+json"
# CloudEvents extension attribute names: lower-case letters and digits, at most 20.
EXTENSION = re.compile(r"[a-z0-9]{1,20}")
RESERVED_ATTRIBUTES = frozenset(
    {
        "id", "source", "specversion", "type", "datacontenttype", "dataschema", "subject",
        "time", "data", "data_base64", "partitionkey",
    }
)  # fmt: skip
# The CloudEvents HTTP binding: in header values, space, '"', '%' and anything outside
# printable ASCII are percent-encoded.
_HEADER_SAFE = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) not in '"%')


def ce_id(topic: str, partition: int, offset: int) -> str:
    return f"{topic}/{partition}/{offset}"


def source(topic: str) -> str:
    return f"/sluice/topics/{topic}"


def rfc3339(timestamp_ms: int) -> str:
    """`2026-11-25T09:00:00.123Z`: the second's text is cached, as a batch's records mostly
    share their seconds (formatting a datetime per record was 16% of a batch's CPU)."""
    seconds, millis = divmod(timestamp_ms, 1000)
    return f"{_second(seconds)}.{millis:03d}Z"


@functools.lru_cache(maxsize=4096)
def _second(seconds: int) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S")


def _is_json(value: bytes | None) -> bool:
    if value is None:
        return False
    try:
        orjson.loads(value)
    except orjson.JSONDecodeError:
        return False
    return True


def content_type(record: DeliveryRecord) -> str:
    """The value's media type: JSON if the registry decoded it, else its `content-type`
    header, else JSON if it parses as JSON, else bytes."""
    return _media(record)[0]


def _media(record: DeliveryRecord) -> tuple[str, bool]:
    """The value's media type (`content_type`), and whether the value is JSON that can go
    inline as a structured event's `data` (parsed once: a batch does this for every record)."""
    if record.schema is not None and record.schema.json is not None:
        return "application/json", False
    for name, value in record.headers:
        if name.lower() == "content-type" and value:
            media = value.decode("latin-1")
            return media, media.endswith("json") and _is_json(record.value)
    inline = _is_json(record.value)
    return ("application/json" if inline else "application/octet-stream"), inline


def extensions(record: DeliveryRecord) -> dict[str, str]:
    """The record's headers that can be CloudEvents extension attributes (their names
    lower-case letters and digits, up to 20; values as text); the others are left out."""
    out: dict[str, str] = {}
    for name, value in record.headers:
        lowered = name.lower()
        if EXTENSION.fullmatch(lowered) and lowered not in RESERVED_ATTRIBUTES and value:
            out[lowered] = value.decode("utf-8", "replace")
    return out


def schema_attributes(record: DeliveryRecord) -> dict[str, str | int]:
    """With `decode_values: schema`, the extension attributes that say how the value was read:
    `schemaid` when the data is its decoded JSON, `schemaerror` (why) when it stays as stored."""
    schema = record.schema
    if schema is None:
        return {}
    if schema.json is not None and schema.schema_id is not None:
        return {"schemaid": schema.schema_id}
    return {"schemaerror": schema.error or ""}


def _header(value: str | bytes) -> str:
    return quote(value, safe=_HEADER_SAFE)


def structured(sub: Subscription, partition: int, record: DeliveryRecord) -> dict[str, Any]:
    """One record as a structured-mode event (JSON data inline, other data as base64)."""
    media, inline = _media(record)
    event: dict[str, Any] = {
        "specversion": "1.0",
        "id": ce_id(sub.topic, partition, record.offset),
        "source": source(sub.topic),
        "type": sub.ce_type,
        "time": rfc3339(record.timestamp),
        "datacontenttype": media,
    }
    if record.key is not None:
        event["partitionkey"] = record.key.decode("utf-8", "replace")
    if record.headers:
        event.update(extensions(record))
    if record.schema is not None:
        event.update(schema_attributes(record))
    if record.value is not None:
        if record.schema is not None and record.schema.json is not None:
            event["data"] = orjson.Fragment(record.schema.json)
        elif inline:
            event["data"] = orjson.Fragment(record.value)
        else:
            event["data_base64"] = base64.b64encode(record.value).decode()
    return event


def _line(name: str, value: str) -> str:
    """One header line; ValueError if the value would end it early."""
    if "\r" in value or "\n" in value:
        raise ValueError(f"header {name!r} has a line break in its value")
    return f"{name}: {value}\r\n"


@dataclass(frozen=True, slots=True)
class Fixed:
    """What every request for one partition of a subscription carries alike, rendered once:
    the credential's header line, binary mode's constant `ce-` lines, the `ce-id` prefix
    (quoted, and as `webhook-id` has it), and SHA-256 states keyed with the signing key's
    inner and outer pads (RFC 2104), copied per request: cheaper than keying an HMAC, or
    copying one through `hmac.HMAC`."""

    sub: Subscription
    partition: int
    credential: str
    binary: str
    id_prefix: str
    message_prefix: str
    inner: HASH
    outer: HASH


def fixed(sub: Subscription, partition: int) -> Fixed:
    credential = ""
    if sub.auth is not None:
        value = f"Bearer {sub.auth.value}" if sub.auth.bearer else sub.auth.value
        credential = _line(sub.auth.header, value)
    binary = f"ce-specversion: 1.0\r\nce-source: {_header(source(sub.topic))}\r\n" + _line(
        "ce-type", sub.ce_type
    )
    prefix = _header(f"{sub.topic}/{partition}/")
    key = sub.signing_key().ljust(_SHA256_BLOCK, b"\0")  # at most 64 bytes (spec.py)
    inner = hashlib.sha256(key.translate(_IPAD))
    outer = hashlib.sha256(key.translate(_OPAD))
    return Fixed(
        sub, partition, credential, binary, prefix, f"{sub.topic}/{partition}/", inner, outer
    )


_SHA256_BLOCK = 64
_IPAD = bytes(b ^ 0x36 for b in range(256))
_OPAD = bytes(b ^ 0x5C for b in range(256))


def body_and_head(fixed: Fixed, records: Sequence[DeliveryRecord]) -> tuple[bytes, str]:
    """A delivery's body and its content header lines, by the subscription's format."""
    sub, partition = fixed.sub, fixed.partition
    if sub.format == "json":
        docs = b",".join(r.json or b"null" for r in records)
        body = b'{"topic":%s,"partition":%d,"records":[%s]}' % (
            orjson.dumps(sub.topic),
            partition,
            docs,
        )
        return body, "Content-Type: application/json\r\n"
    if sub.batching.max_records > 1:
        events = [structured(sub, partition, r) for r in records]
        return orjson.dumps(events), f"Content-Type: {CE_BATCH}\r\n"
    (record,) = records
    if sub.format == "structured":
        return orjson.dumps(structured(sub, partition, record)), f"Content-Type: {CE_JSON}\r\n"
    head = (
        f"{_line('Content-Type', content_type(record))}{fixed.binary}ce-id: {fixed.id_prefix}"
        f"{record.offset}\r\nce-time: {rfc3339(record.timestamp)}\r\n"
    )
    if record.key is not None:
        head += f"ce-partitionkey: {_header(record.key)}\r\n"
    schema = record.schema
    if schema is None:
        if record.headers:
            head += "".join(
                f"ce-{name}: {_header(value)}\r\n" for name, value in extensions(record).items()
            )
        return record.value or b"", head
    attributes = {**extensions(record), **schema_attributes(record)}
    head += "".join(f"ce-{name}: {_header(str(value))}\r\n" for name, value in attributes.items())
    return schema.json if schema.json is not None else record.value or b"", head


def sign(fixed: Fixed, message_id: str, timestamp_s: int, body: bytes) -> str:
    """Standard Webhooks: `v1,` and the base64 HMAC-SHA256 of `id.timestamp.body`."""
    inner = fixed.inner.copy()
    inner.update(f"{message_id}.{timestamp_s}.".encode())
    inner.update(body)
    outer = fixed.outer.copy()
    outer.update(inner.digest())
    return "v1," + binascii.b2a_base64(outer.digest(), newline=False).decode()


def request(fixed: Fixed, records: Sequence[DeliveryRecord], now_s: int) -> tuple[bytes, bytes]:
    """The whole request: its body, and its header lines (content, the credential, the
    signature, Content-Length) ended by the blank line."""
    body, head = body_and_head(fixed, records)
    first, last = records[0].offset, records[-1].offset
    message_id = (
        f"{fixed.message_prefix}{first}"
        if first == last
        else f"{fixed.message_prefix}{first}-{last}"
    )
    signature = sign(fixed, message_id, now_s, body)
    return body, (
        f"{head}{fixed.credential}webhook-id: {message_id}\r\nwebhook-timestamp: {now_s}\r\n"
        f"webhook-signature: {signature}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
