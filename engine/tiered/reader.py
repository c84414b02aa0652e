"""Reads of tiered offsets from S3: the segment's offset index locates the batch, a ranged GET
brings whole batches from there; a read_committed reader's aborted transactions come from the
segments' aborted-transaction indexes, a replica that starts after a segment takes the producer
state shipped with it. A small LRU cache holds indexes and recent ranges, and the range after
the one a consumer is reading is fetched ahead, so a consumer reading old data in order mostly
finds it in memory."""

from __future__ import annotations

import struct
import threading
from bisect import bisect_right
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor

from engine import batch as fmt
from engine import txn_index
from engine.errors import RemoteStorageError
from engine.producer_state import SNAPSHOT_SUFFIX, ProducerState
from engine.tiered.manifest import Manifest, RemoteSegment, partition_prefix
from engine.tiered.remote import RemoteStorage
from engine.txn_index import AbortedTxn

_OFFSET_ENTRY = struct.Struct(">ii")
RANGE = 2 * 1024 * 1024  # the smallest GET; a consumer halfway through one gets the next read ahead


class _Cache:
    """Bytes-bounded LRU over objects, each with its two latest byte ranges (the one being
    read and the one read ahead), shared by the threads reading S3."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, list[tuple[int, bytes]]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(
        self, key: str, start: int, length: int, *, count: bool = True
    ) -> tuple[int, bytes] | None:
        """The cached range of object `key` holding [start, start + length), as (its start,
        its bytes); `count` False for a probe that is no read."""
        with self._lock:
            for first, data in self._items.get(key, ()):
                if first <= start and start + length <= first + len(data):
                    self._items.move_to_end(key)
                    self.hits += count
                    return first, data
            self.misses += count
            return None

    def whole(self, key: str) -> bytes | None:
        """An object cached whole (an index)."""
        with self._lock:
            ranges = self._items.get(key)
            if not ranges:
                return None
            self._items.move_to_end(key)
            return ranges[-1][1]

    def put(self, key: str, start: int, value: bytes) -> None:
        if len(value) > self.max_bytes:
            return
        with self._lock:
            ranges = [r for r in self._items.pop(key, []) if r[0] != start]
            ranges.append((start, value))
            self._bytes += len(value)
            for _, dropped in ranges[:-2]:
                self._bytes -= len(dropped)
            self._items[key] = ranges[-2:]
            while self._bytes > self.max_bytes:
                _, evicted = self._items.popitem(last=False)
                self._bytes -= sum(len(data) for _, data in evicted)


class RemoteReader:
    """Whole batches of a tiered partition from S3, from the one holding an offset."""

    def __init__(self, storage: RemoteStorage, prefix: str, cache_bytes: int = 32 << 20) -> None:
        self.storage = storage
        self.prefix = prefix
        self.cache = _Cache(cache_bytes)
        self._pool = ThreadPoolExecutor(2, thread_name_prefix="s3-read-ahead")
        self._ahead: dict[tuple[str, int], Future[bytes]] = {}
        self._lock = threading.Lock()
        self.fetches = 0  # ranged GETs of segment data
        self.bytes_read = 0

    def read(self, manifest: Manifest, offset: int, max_bytes: int) -> bytes:
        """Batches from the one holding `offset` (or the next segment's first, past a gap),
        up to `max_bytes` but at least one whole batch; empty past the manifest's end."""
        segment = manifest.segment_for(offset)
        if segment is None:
            return b""
        base = partition_prefix(self.prefix, manifest.topic, manifest.partition) + segment.name
        key = base + ".log"
        position = self._position(base + ".index", segment, max(offset, segment.base_offset))
        while position < segment.size:
            data = memoryview(self._range(key, position, max_bytes, segment.size))
            pos, kept_from = 0, None
            while pos + fmt.HEADER_SIZE <= len(data):
                header = fmt.read_header(data, pos)
                wanted = header.next_offset > offset
                if pos + header.size > len(data):  # the range ends inside this batch
                    if kept_from is None and wanted:
                        return self._range(key, position + pos, header.size, segment.size)
                    if kept_from is None:
                        pos += header.size  # below `offset`: read on after it
                    break
                if wanted:
                    if kept_from is None:
                        kept_from = pos
                    elif pos + header.size - kept_from > max_bytes:
                        break
                pos += header.size
            if kept_from is not None:
                return bytes(data[kept_from:pos])
            if pos == 0:
                raise RemoteStorageError(f"{key}: no whole batch at byte {position}")
            position += pos  # only batches below `offset` so far: read on from the next one
        return b""

    def aborted_transactions(
        self, manifest: Manifest, start: int, end: int
    ) -> list[AbortedTxn] | None:
        """The aborted transactions with records in [start, end) whose ABORT marker S3 holds,
        from the `.txnindex` objects of the segments from the one holding `start` on, up to an
        entry whose last stable offset reaches `end` (every transaction open below `end` had
        ended by then: Kafka's search); a segment without entries is not asked. None if one on
        the way was uploaded before its index was (what it aborts is not known)."""
        found: list[AbortedTxn] = []
        prefix = partition_prefix(self.prefix, manifest.topic, manifest.partition)
        for segment in manifest.segments:
            if segment.last_offset < start:
                continue
            if segment.aborted_transactions is None:
                return None
            if not segment.aborted_transactions:
                continue
            index = self._whole(prefix + segment.name + txn_index.SUFFIX)
            for entry in txn_index.decode(index):
                if entry.last_offset >= start and entry.first_offset < end:
                    found.append(entry)
                if entry.last_stable_offset >= end:
                    return found
        return found

    def producer_state_before(
        self, manifest: Manifest, offset: int
    ) -> tuple[int, ProducerState] | None:
        """For a replica that starts over at `offset` (its leader's local log start), Kafka's
        remote auxiliary state: the end of the segment S3 holds `offset - 1` in, and the
        producer state as of that end (its `.snapshot`), where the replica is to start. None
        if S3 holds no such segment, or it went up without a producer state (or an
        unreadable one)."""
        segment = manifest.segment_for(offset - 1)
        if segment is None or segment.base_offset >= offset or segment.producers is None:
            return None
        if not segment.producers:
            return segment.next_offset, ProducerState()
        prefix = partition_prefix(self.prefix, manifest.topic, manifest.partition)
        data = self.storage.get(prefix + segment.name + SNAPSHOT_SUFFIX)
        try:
            return segment.next_offset, ProducerState.decode(data)
        except (ValueError, KeyError, TypeError):
            return None

    def _whole(self, key: str) -> bytes:
        """An index object, from the cache or S3 (then cached)."""
        data = self.cache.whole(key)
        if data is None:
            data = self.storage.get(key)
            self.cache.put(key, 0, data)
        return data

    def _position(self, key: str, segment: RemoteSegment, offset: int) -> int:
        index = self._whole(key)
        entries = [
            (relative + segment.base_offset, position)
            for relative, position in _OFFSET_ENTRY.iter_unpack(index)
        ]
        i = bisect_right([e[0] for e in entries], offset) - 1
        return entries[i][1] if i >= 0 else 0

    def _range(self, key: str, start: int, length: int, size: int) -> bytes:
        length = min(length, size - start)
        if length <= 0:
            raise RemoteStorageError(f"{key}: position {start} is past its {size} bytes")
        cached = self.cache.get(key, start, length)
        if cached is None:
            ahead = self._ahead.get((key, start))
            if ahead is not None:  # the range is being read ahead: wait for it
                ahead.result()
                cached = self.cache.get(key, start, length)
        if cached is None:
            cached = start, self._get(key, start, max(length, RANGE))
        first, data = cached
        end = first + len(data)
        if start + length > first + len(data) // 2 and end < size:
            self._read_ahead(key, end)
        offset = start - first
        return data[offset : offset + length]

    def _get(self, key: str, start: int, length: int) -> bytes:
        data = self.storage.get_range(key, start, length)
        self.fetches += 1
        self.bytes_read += len(data)
        self.cache.put(key, start, data)
        return data

    def _read_ahead(self, key: str, start: int) -> None:
        """GET the range after the one a consumer is halfway through, in the background."""
        with self._lock:
            if (key, start) in self._ahead or self.cache.get(key, start, 1, count=False):
                return
            future = self._pool.submit(self._get, key, start, RANGE)
            self._ahead[(key, start)] = future
        future.add_done_callback(lambda _: self._ahead.pop((key, start), None))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
