"""Idempotent produce, kept by each partition replica.

The first record of a request's batch in a partition carries a marker (the key, a hash of the
request, how many partitions it wrote, how many records here, the front node's clock) and
the batch is flagged IDEMPOTENT_MASK. Every replica indexes the markers of its own log as it
appends (leader or follower), forgets what truncation removes, and rebuilds the index from
its recent segments on start. So whichever replica leads next answers a retry with the first
attempt's offsets and appends nothing, across leader changes and whichever node the retry
reaches.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from engine import batch as fmt
from engine.errors import CorruptRecord

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Marker:
    key: str
    digest: str  # what makes two requests "the same": path, query, media type, body
    partitions: int  # how many partitions the request wrote to
    count: int  # records of the request in this partition
    created_ms: int

    def encode(self) -> bytes:
        return (
            f"{self.key}\n{self.digest}\n{self.partitions}\n{self.count}\n{self.created_ms}"
        ).encode()


def parse_marker(raw: bytes) -> Marker | None:
    try:
        key, digest, partitions, count, created_ms = raw.decode().split("\n")
        return Marker(key, digest, int(partitions), int(count), int(created_ms))
    except (UnicodeDecodeError, ValueError):
        return None


def batch_marker(batch: memoryview) -> Marker | None:
    """The marker on a flagged batch's first record, if it carries one."""
    first = next(iter(fmt.batch_records(batch)), None)
    raw = None if first is None else dict(first.headers).get(fmt.IDEMPOTENCY_HEADER)
    return None if raw is None else parse_marker(raw)


def first_marker(data: bytes | bytearray | memoryview) -> Marker | None:
    """The marker of a request's batches: on the first batch, when it is flagged."""
    if len(data) < fmt.HEADER_SIZE or not fmt.attributes_at(data) & fmt.IDEMPOTENT_MASK:
        return None  # most batches: one field read, not the whole header
    header = fmt.read_header(data)
    if not header.idempotent or header.size > len(data):
        return None
    return batch_marker(memoryview(data)[: header.size])


@dataclass(frozen=True)
class Appended:
    """Where a marked request's records went in this partition."""

    digest: str
    base_offset: int
    count: int
    created_ms: int


class IdempotencyIndex:
    """Recent marked requests of one partition, by key; bounded in time and in entries."""

    def __init__(self, window_s: float, max_entries: int) -> None:
        self.window_ms = int(window_s * 1000)
        self.max_entries = max_entries
        self._entries: OrderedDict[str, Appended] = OrderedDict()

    def lookup(self, key: str) -> Appended | None:
        entry = self._entries.get(key)
        if entry is not None and entry.created_ms < time.time() * 1000 - self.window_ms:
            del self._entries[key]
            return None
        return entry

    def note(self, marker: Marker, base_offset: int) -> None:
        if marker.created_ms < time.time() * 1000 - self.window_ms:
            return
        self._entries[marker.key] = Appended(
            marker.digest, base_offset, marker.count, marker.created_ms
        )
        self._entries.move_to_end(marker.key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def note_batches(self, data: bytes | bytearray | memoryview) -> None:
        """Index the flagged batches among `data` (a follower's append)."""
        view = memoryview(data)
        for pos, header in fmt.scan(view, check_crc=False).headers:
            if header.idempotent:
                marker = batch_marker(view[pos : pos + header.size])
                if marker is not None:
                    self.note(marker, header.base_offset)

    def truncate(self, offset: int) -> None:
        """Forget requests whose records a truncation removed."""
        for key in [k for k, e in self._entries.items() if e.base_offset >= offset]:
            del self._entries[key]

    def clear(self) -> None:
        self._entries.clear()

    def rebuild(self, batches: Iterable[tuple[fmt.BatchHeader, memoryview]]) -> None:
        """Index a log's recent batches (on start); stops quietly at a corrupt one."""
        try:
            for header, data in batches:
                if header.idempotent:
                    marker = batch_marker(data)
                    if marker is not None:
                        self.note(marker, header.base_offset)
        except (CorruptRecord, FileNotFoundError) as exc:
            log.warning("idempotency keys after a bad batch are not restored: %s", exc)

    def __len__(self) -> int:
        return len(self._entries)
