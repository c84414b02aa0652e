"""Reads of tiered offsets from S3: the segment's offset index locates the batch, a ranged GET
brings whole batches from there. A small LRU cache holds indexes and recent ranges, so
consumers reading old data in order do not fetch each range twice."""

from __future__ import annotations

import struct
import threading
from bisect import bisect_right
from collections import OrderedDict

from engine import batch as fmt
from engine.errors import RemoteStorageError
from engine.tiered.manifest import Manifest, RemoteSegment, partition_prefix
from engine.tiered.remote import RemoteStorage

_OFFSET_ENTRY = struct.Struct(">ii")
MIN_RANGE = 256 * 1024  # the smallest GET: a read in order finds its next batches cached


class _Cache:
    """Bytes-bounded LRU, shared by the threads reading S3."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: tuple[str, int]) -> bytes | None:
        with self._lock:
            value = self._items.get(key)
            if value is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: tuple[str, int], value: bytes) -> None:
        if len(value) > self.max_bytes:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= len(old)
            self._items[key] = value
            self._bytes += len(value)
            while self._bytes > self.max_bytes:
                _, evicted = self._items.popitem(last=False)
                self._bytes -= len(evicted)


class RemoteReader:
    """Whole batches of a tiered partition from S3, from the one holding an offset."""

    def __init__(self, storage: RemoteStorage, prefix: str, cache_bytes: int = 32 << 20) -> None:
        self.storage = storage
        self.prefix = prefix
        self.cache = _Cache(cache_bytes)
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
            data = memoryview(self._range(key, position, max(max_bytes, MIN_RANGE), segment.size))
            pos, kept_from = 0, None
            while pos + fmt.HEADER_SIZE <= len(data):
                header = fmt.read_header(data, pos)
                wanted = header.next_offset > offset
                if pos + header.size > len(data):  # the range ends inside this batch
                    if kept_from is None and wanted:
                        return self._range(key, position + pos, header.size, segment.size)
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

    def _position(self, key: str, segment: RemoteSegment, offset: int) -> int:
        index = self.cache.get((key, -1))
        if index is None:
            index = self.storage.get(key)
            self.cache.put((key, -1), index)
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
        cached = self.cache.get((key, start))
        if cached is not None and len(cached) >= length:
            return cached
        data = self.storage.get_range(key, start, length)
        self.fetches += 1
        self.bytes_read += len(data)
        self.cache.put((key, start), data)
        return data
