"""A share group's acquired record as JSON: what an acquire answers per record, and what a
queue-mode push subscription's `json` format carries."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import msgspec

from gateway.formats import native
from gateway.formats.codecs import record_doc
from groups.share.model import Delivery, ShareRecord

_ENCODER = msgspec.json.Encoder()


def share_record_doc(r: ShareRecord) -> dict[str, Any]:
    """The record as a fetch has it (with its topic and partition), its delivery count, when
    its lock ends, and the token to acknowledge it by."""
    into: dict[str, Any] = {"topic": r.topic, "partition": r.partition}
    doc = record_doc(r.offset, r.timestamp, r.key, r.value, r.headers, r.values_json, into)
    doc["delivery_count"] = r.delivery_count
    doc["lock_expires_at"] = r.lock_deadline_ms
    doc["token"] = r.token
    return doc


def share_record_json(r: ShareRecord) -> bytes:
    """`share_record_doc` encoded."""
    return _ENCODER.encode(share_record_doc(r))


def deliveries_json(deliveries: list[Delivery], separator: bytes) -> bytes:
    """The records of an acquire's deliveries, each as `share_record_json` has it, with
    `separator` between them. Written from the batch in C (`native.share_json`) where the
    batch is a plain one, as a fetch's records are; decoded otherwise."""
    chunks = []
    for d in deliveries:
        prefix, token = _names(d.topic, d.partition)
        count = d.delivery_count
        middle = b',"delivery_count":%d,"lock_expires_at":%d,"token":"%b' % (
            count,
            d.lock_deadline_ms,
            token,
        )
        parts = native.share_json(d.batch, d.first, d.count, prefix, middle, b':%d"}' % count)
        if parts is None:
            parts = [share_record_json(r) for r in d.records()]
        chunks.append(separator.join(parts))
    return separator.join(chunks)


@lru_cache(maxsize=4096)
def _names(topic: str, partition: int) -> tuple[bytes, bytes]:
    """A record's JSON up to its offset (its topic and partition), and its token's start."""
    opening = _ENCODER.encode({"topic": topic, "partition": partition})[:-1] + b","
    return opening, _ENCODER.encode(f"{topic}:{partition}:")[1:-1]
