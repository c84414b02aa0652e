"""Partial batch responses, as Lambda's `ReportBatchItemFailures`: a receiver of a batch may
answer 2xx with `{"batchItemFailures": [{"itemIdentifier": "<id>"}, ...]}`, each id a record's
`ce-id` (`topic/partition/offset`, the same in every format); only those records are retried.

An answer that names a record not in the batch, or is not that shape, or is too long to read,
fails the whole batch (as Lambda does): retrying too much is at-least-once, acknowledging
what the receiver did not take would lose it."""

from __future__ import annotations

from typing import Any

import orjson

from groups.subscriptions.formats import ce_id
from groups.subscriptions.state import Send

FIELD = b"batchItemFailures"
MAX_PARTIAL_BYTES = 1024 * 1024  # of a batch's 2xx JSON answer


def failures(topic: str, partition: int, send: Send, body: bytes) -> tuple[frozenset[int], str]:
    """The offsets a 2xx answer's body says failed (none: every record acknowledged), and a
    short error text when some did."""
    if FIELD not in body:
        return frozenset(), ""
    everything = frozenset(r.offset for r in send.records)
    if len(body) > MAX_PARTIAL_BYTES:
        return everything, f"a partial batch response over {MAX_PARTIAL_BYTES} bytes"
    try:
        doc: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        return everything, "a partial batch response that is not JSON"
    items = doc.get("batchItemFailures") if isinstance(doc, dict) else None
    if items is None:
        return frozenset(), ""
    ids = {ce_id(topic, partition, r.offset): r.offset for r in send.records}
    if not isinstance(items, list):
        return everything, "batchItemFailures is not an array"
    failed: set[int] = set()
    for item in items:
        identifier = item.get("itemIdentifier") if isinstance(item, dict) else None
        offset = ids.get(identifier) if isinstance(identifier, str) else None
        if offset is None:
            return (
                everything,
                f"batchItemFailures names {str(identifier)[:100]!r}, not in the batch",
            )
        failed.add(offset)
    if not failed:
        return frozenset(), ""
    return frozenset(failed), f"the receiver reported {len(failed)} of {len(ids)} records failed"
