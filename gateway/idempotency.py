"""Idempotent produce: a retry with the same Idempotency-Key and body appends nothing.

The record of a request lives in the log itself: the first record of the request's batch in
each partition carries the header `sluice-idempotency-key` = key, request hash, number of
partitions written, records in this partition and the broker's clock, and the batch is flagged
IDEMPOTENT_MASK. Memory holds the recent entries (bounded, for `window` seconds); on start they
are rebuilt from the segments written within the window (by file mtime: the broker's clock, not
record timestamps, which producers choose), decoding only the flagged batches. Keys are scoped
to a topic.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

from engine import batch as fmt
from engine.errors import CorruptRecord
from gateway.problems import Problem
from replication.partition import Partition

MAX_KEY_LENGTH = 255
log = logging.getLogger(__name__)


@dataclass
class Entry:
    """What the first attempt of a request wrote, partition by partition."""

    body_hash: str
    partitions: int  # how many partitions the request wrote to
    results: dict[int, tuple[int, int]] = field(default_factory=dict)  # partition -> (base, count)
    created: float = 0.0

    @property
    def complete(self) -> bool:
        return len(self.results) >= self.partitions


def body_hash(body: bytes, content_type: str, target: str) -> str:
    """What makes two requests 'the same': path with query (partition, key, acks), type, body."""
    digest = hashlib.sha256(content_type.encode() + b"\0" + target.encode() + b"\0")
    digest.update(body)
    return digest.hexdigest()


def header_value(key: str, digest: str, partitions: int, count: int, created_ms: int) -> bytes:
    return f"{key}\n{digest}\n{partitions}\n{count}\n{created_ms}".encode()


def parse_header_value(raw: bytes) -> tuple[str, str, int, int, int] | None:
    try:
        key, digest, partitions, count, created_ms = raw.decode().split("\n")
        return key, digest, int(partitions), int(count), int(created_ms)
    except ValueError:
        return None


def validate_key(key: str) -> str:
    if not key or len(key) > MAX_KEY_LENGTH or not key.isprintable() or "\n" in key:
        raise Problem(
            400,
            "INVALID_IDEMPOTENCY_KEY",
            f"Idempotency-Key must be 1 to {MAX_KEY_LENGTH} printable characters",
        )
    return key


class IdempotencyStore:
    """Recent idempotent produce requests per (topic, key), and the ones in flight."""

    def __init__(self, window_s: float, max_entries: int) -> None:
        self.window_s = window_s
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple[str, str], Entry] = OrderedDict()
        self._in_flight: set[tuple[str, str]] = set()

    def begin(self, topic: str, key: str, digest: str) -> Entry | None:
        """Claim a key: the earlier entry to replay or finish, or None for a fresh request.

        Raises 409 while the first attempt is in flight, 422 when the body differs.
        """
        slot = (topic, key)
        if slot in self._in_flight:
            raise Problem(
                409,
                "IDEMPOTENCY_KEY_IN_FLIGHT",
                "a request with this Idempotency-Key is still being processed; retry later",
                headers={"Retry-After": "1"},
            )
        entry = self._fresh(slot)
        if entry is not None and entry.body_hash != digest:
            raise Problem(
                422,
                "IDEMPOTENCY_KEY_REUSED",
                "this Idempotency-Key was used with a different request",
            )
        self._in_flight.add(slot)
        return entry

    def finish(self, topic: str, key: str, entry: Entry | None) -> None:
        """Release the claim; remember `entry` (None when the attempt appended nothing)."""
        slot = (topic, key)
        self._in_flight.discard(slot)
        if entry is not None:
            self._remember(slot, entry)

    def forget_topic(self, topic: str) -> None:
        for slot in [s for s in self._entries if s[0] == topic]:
            del self._entries[slot]

    def _fresh(self, slot: tuple[str, str]) -> Entry | None:
        entry = self._entries.get(slot)
        if entry is not None and time.time() - entry.created > self.window_s:
            del self._entries[slot]
            return None
        return entry

    def _remember(self, slot: tuple[str, str], entry: Entry) -> None:
        self._entries[slot] = entry
        self._entries.move_to_end(slot)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def rebuild(self, partitions: Iterable[Partition]) -> int:
        """Reload the window's entries from the partitions' logs; returns how many."""
        since = time.time() - self.window_s
        found: dict[tuple[str, str], Entry] = {}
        for partition in partitions:
            try:
                for header, data in partition.recent_batches(since):
                    if header.idempotent:
                        self._note(partition, header, data, since, found)
            except (CorruptRecord, FileNotFoundError) as exc:
                log.warning("idempotency keys after a bad batch are not restored: %s", exc)
        for slot, entry in sorted(found.items(), key=lambda item: item[1].created):
            self._remember(slot, entry)
        return len(found)

    @staticmethod
    def _note(
        partition: Partition,
        header: fmt.BatchHeader,
        data: memoryview,
        since: float,
        found: dict[tuple[str, str], Entry],
    ) -> None:
        first = next(iter(fmt.batch_records(data)))
        raw = dict(first.headers).get(fmt.IDEMPOTENCY_HEADER)
        parsed = None if raw is None else parse_header_value(raw)
        if parsed is None or parsed[4] / 1000 < since:
            return
        key, digest, partitions, count, created_ms = parsed
        entry = found.setdefault(
            (partition.topic, key), Entry(digest, partitions, created=created_ms / 1000)
        )
        entry.results[partition.partition] = (header.base_offset, count)

    def __len__(self) -> int:
        return len(self._entries)
