"""Sparse per-segment indexes: offset -> file position, and timestamp -> offset.

The active segment's entries are kept in memory (two `array('q')`, bisected in O(log n)) and
written to disk in Kafka's layout on flush, roll and close, and when `PENDING_MAX` wait. A
closed segment's index is released to its file and bisected there, one `pread` per probe
through the file cache, so closed segments cost no memory for their indexes. Entries past the
recovery point may be lost in a crash; recovery rebuilds them from the log, as Kafka does.
"""

from __future__ import annotations

import contextlib
import os
import struct
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path

from engine import file_cache
from engine.file_cache import CachedFile, FileCache
from engine.fsync import checked_fsync

_RELEASED = (array("q"), array("q"))  # what a released index holds in memory: nothing, shared
# The active segment writes its indexes' entries once this many wait (LogSegment.append): each
# is encoded in Python, and a roll (on the event loop, with the append that fills the segment)
# writes those left, so this bounds its length, however many entries the segment holds.
PENDING_MAX = 1024


class SparseIndex:
    """Monotonic (key -> value) entries for one segment, stored relative to its base offset."""

    ENTRY: struct.Struct  # on-disk layout of one entry

    __slots__ = ("_entries", "_persisted", "base_offset", "file", "files", "released")

    def __init__(self, path: str | Path, base_offset: int, files: FileCache | None = None) -> None:
        self.file = CachedFile(os.fspath(path))
        self.base_offset = base_offset
        self.files = file_cache.shared if files is None else files
        self.released = False  # the entries are in the file only (a closed segment's)
        # Keys and values in one attribute: a reader racing `release` sees both or neither.
        self._entries = (array("q"), array("q"))
        self._persisted = 0  # entries already written to the file

    @property
    def path(self) -> Path:
        return Path(self.file.path)

    @property
    def keys(self) -> array[int]:
        """The keys held in memory (none once released)."""
        return self._entries[0]

    @property
    def values(self) -> array[int]:
        return self._entries[1]

    def __len__(self) -> int:
        return len(self._entries[0])

    def append(self, key: int, value: int) -> None:
        keys, values = self._entries
        keys.append(key)
        values.append(value)

    @property
    def pending(self) -> int:
        """Entries held in memory and not yet in the file."""
        return len(self._entries[0]) - self._persisted

    def truncate_entries(self, count: int) -> None:
        """Keep only the first `count` entries (in memory and on disk)."""
        keys, values = self._entries
        if count >= len(keys):
            return
        del keys[count:]
        del values[count:]
        if self._persisted > count:
            self._persisted = count
            if os.path.exists(self.file.path):
                os.truncate(self.file.path, count * self.ENTRY.size)

    def clear(self) -> None:
        """Drop every entry, in memory and on disk (before a rebuild)."""
        self._entries = (array("q"), array("q"))
        self.released = False
        if self._persisted:
            self._persisted = 0
            if os.path.exists(self.file.path):
                os.truncate(self.file.path, 0)

    def _encode(self, key: int, value: int) -> bytes:
        raise NotImplementedError

    def _decode(self, raw: tuple[int, ...]) -> tuple[int, int]:
        raise NotImplementedError

    def flush(self, fsync: bool = False) -> None:
        """Append the entries not yet on disk; fsync if asked."""
        keys, values = self._entries
        end = len(keys)
        if self.released or (end == self._persisted and not fsync):
            return
        encode = self._encode
        chunk = b"".join(encode(keys[i], values[i]) for i in range(self._persisted, end))
        with open(self.file.path, "ab") as f:
            if f.tell() != self._persisted * self.ENTRY.size:
                f.truncate(self._persisted * self.ENTRY.size)
            f.write(chunk)
            if fsync:
                f.flush()
                checked_fsync(f.fileno(), self.file.path)
        self._persisted = end

    def create_file(self) -> None:
        """Create the file, empty, if it is missing. Creating a file can wait on the disk; the
        active segment's index files are made with it (in a roll's thread), so the writes of
        its entries on the event loop only ever append."""
        os.close(os.open(self.file.path, os.O_WRONLY | os.O_CREAT, 0o666))

    def release(self) -> None:
        """Write out the pending entries, then keep them in the file only."""
        self.flush()
        self.released = True
        self._entries = _RELEASED

    def load(self) -> bool:
        """Read entries from disk; False when the file is missing or fails its sanity checks."""
        try:
            with open(self.file.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return False
        size = self.ENTRY.size
        if len(raw) % size:
            return False
        keys = array("q")
        values = array("q")
        for fields in self.ENTRY.iter_unpack(raw):
            key, value = self._decode(fields)
            if keys and (key < keys[-1] or value < values[-1]):
                return False
            keys.append(key)
            values.append(value)
        self._entries = (keys, values)
        self.released = False
        self._persisted = len(keys)
        return True

    def rewrite(self) -> None:
        """Replace the file with the in-memory entries (after a rebuild)."""
        tmp = self.file.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(b"".join(self._encode(k, v) for k, v in zip(*self._entries, strict=True)))
        os.replace(tmp, self.file.path)
        self._persisted = len(self._entries[0])

    def delete(self) -> None:
        self.files.forget(self.file)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.file.path)

    def _last_entry_below(self, key: int, inclusive: bool) -> tuple[int, int] | None:
        """The last entry whose key is below `key` (or equal, if `inclusive`), if any."""
        find = bisect_right if inclusive else bisect_left
        if not self.released:
            keys, values = self._entries
            i = find(keys, key) - 1
            return None if i < 0 else (keys[i], values[i])
        if not self._persisted:
            return None
        with self.files.pinned(self.file) as fd:
            i = find(_FileKeys(self, fd), key, 0, self._persisted) - 1
            return None if i < 0 else self._read_entry(fd, i)

    def _read_entry(self, fd: int, i: int) -> tuple[int, int]:
        size = self.ENTRY.size
        return self._decode(self.ENTRY.unpack(os.pread(fd, size, i * size)))


class _FileKeys:
    """A released index's keys as a sequence bisect can probe: each item is one `pread`."""

    __slots__ = ("fd", "index")

    def __init__(self, index: SparseIndex, fd: int) -> None:
        self.index, self.fd = index, fd

    def __len__(self) -> int:
        return self.index._persisted

    def __getitem__(self, i: int) -> int:
        return self.index._read_entry(self.fd, i)[0]


class OffsetIndex(SparseIndex):
    """offset -> byte position of the batch that starts at (or holds) that offset."""

    ENTRY = struct.Struct(">ii")
    __slots__ = ()

    def _encode(self, key: int, value: int) -> bytes:
        return self.ENTRY.pack(key - self.base_offset, value)

    def _decode(self, raw: tuple[int, ...]) -> tuple[int, int]:
        return raw[0] + self.base_offset, raw[1]

    def lookup(self, offset: int) -> tuple[int, int]:
        """The last entry at or below `offset`, as (offset, position); (base, 0) if none."""
        found = self._last_entry_below(offset, inclusive=True)
        return (self.base_offset, 0) if found is None else found

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries for batches at or beyond `offset`."""
        self.truncate_entries(bisect_left(self.keys, offset))

    def truncate_to_position(self, position: int) -> None:
        """Drop entries that point at or beyond byte `position`."""
        self.truncate_entries(bisect_left(self.values, position))


class TimeIndex(SparseIndex):
    """Largest timestamp so far -> offset of the batch that carried it."""

    ENTRY = struct.Struct(">qi")
    __slots__ = ()

    def _encode(self, key: int, value: int) -> bytes:
        return self.ENTRY.pack(key, value - self.base_offset)

    def _decode(self, raw: tuple[int, ...]) -> tuple[int, int]:
        return raw[0], raw[1] + self.base_offset

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add an entry only when the timestamp grows, keeping both columns monotonic."""
        keys = self.keys
        if not keys or timestamp > keys[-1]:
            self.append(timestamp, offset)

    def lookup(self, timestamp: int) -> int | None:
        """An offset from which a forward scan finds the first record with ts >= `timestamp`."""
        found = self._last_entry_below(timestamp, inclusive=False)
        return None if found is None else found[1]

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries for batches at or beyond `offset`."""
        self.truncate_entries(bisect_left(self.values, offset))
