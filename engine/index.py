"""Sparse per-segment indexes: offset -> file position, and timestamp -> offset.

Entries are kept in memory (two `array('q')`, bisected in O(log n)) and written to disk in
Kafka's layout on flush, roll and close. Entries past the recovery point may be lost in a crash;
recovery rebuilds them from the log, as Kafka does.
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path


class SparseIndex:
    """Monotonic (key -> value) entries for one segment, stored relative to its base offset."""

    ENTRY: struct.Struct  # on-disk layout of one entry

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.keys = array("q")
        self.values = array("q")
        self._persisted = 0  # entries already written to the file

    def __len__(self) -> int:
        return len(self.keys)

    def append(self, key: int, value: int) -> None:
        self.keys.append(key)
        self.values.append(value)

    def truncate_entries(self, count: int) -> None:
        """Keep only the first `count` entries (in memory and on disk)."""
        if count >= len(self.keys):
            return
        del self.keys[count:]
        del self.values[count:]
        if self._persisted > count:
            self._persisted = count
            if self.path.exists():
                os.truncate(self.path, count * self.ENTRY.size)

    def clear(self) -> None:
        self.truncate_entries(0)

    def _encode(self, key: int, value: int) -> bytes:
        raise NotImplementedError

    def _decode(self, raw: tuple[int, ...]) -> tuple[int, int]:
        raise NotImplementedError

    def flush(self, fsync: bool = False) -> None:
        """Append the entries not yet on disk; fsync if asked."""
        end = len(self.keys)
        if end == self._persisted and not fsync:
            return
        encode = self._encode
        chunk = b"".join(encode(self.keys[i], self.values[i]) for i in range(self._persisted, end))
        with open(self.path, "ab") as f:
            if f.tell() != self._persisted * self.ENTRY.size:
                f.truncate(self._persisted * self.ENTRY.size)
            f.write(chunk)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        self._persisted = end

    def load(self) -> bool:
        """Read entries from disk; False when the file is missing or fails its sanity checks."""
        try:
            raw = self.path.read_bytes()
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
        self.keys, self.values = keys, values
        self._persisted = len(keys)
        return True

    def rewrite(self) -> None:
        """Replace the file with the in-memory entries (after a rebuild)."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_bytes(
            b"".join(self._encode(k, v) for k, v in zip(self.keys, self.values, strict=True))
        )
        os.replace(tmp, self.path)
        self._persisted = len(self.keys)

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)


class OffsetIndex(SparseIndex):
    """offset -> byte position of the batch that starts at (or holds) that offset."""

    ENTRY = struct.Struct(">ii")

    def _encode(self, key: int, value: int) -> bytes:
        return self.ENTRY.pack(key - self.base_offset, value)

    def _decode(self, raw: tuple[int, ...]) -> tuple[int, int]:
        return raw[0] + self.base_offset, raw[1]

    def lookup(self, offset: int) -> tuple[int, int]:
        """The last entry at or below `offset`, as (offset, position); (base, 0) if none."""
        i = bisect_right(self.keys, offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.keys[i], self.values[i]

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries for batches at or beyond `offset`."""
        self.truncate_entries(bisect_left(self.keys, offset))

    def truncate_to_position(self, position: int) -> None:
        """Drop entries that point at or beyond byte `position`."""
        self.truncate_entries(bisect_left(self.values, position))


class TimeIndex(SparseIndex):
    """Largest timestamp so far -> offset of the batch that carried it."""

    ENTRY = struct.Struct(">qi")

    def _encode(self, key: int, value: int) -> bytes:
        return self.ENTRY.pack(key, value - self.base_offset)

    def _decode(self, raw: tuple[int, ...]) -> tuple[int, int]:
        return raw[0], raw[1] + self.base_offset

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add an entry only when the timestamp grows, keeping both columns monotonic."""
        if not self.keys or timestamp > self.keys[-1]:
            self.append(timestamp, offset)

    def lookup(self, timestamp: int) -> int | None:
        """An offset from which a forward scan finds the first record with ts >= `timestamp`."""
        i = bisect_left(self.keys, timestamp) - 1
        return None if i < 0 else self.values[i]

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries for batches at or beyond `offset`."""
        self.truncate_entries(bisect_left(self.values, offset))
