"""A share group's acquired record as JSON: what an acquire answers per record, and what a
queue-mode push subscription's `json` format carries."""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.formats.codecs import record_doc
from groups.share.model import ShareRecord

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
