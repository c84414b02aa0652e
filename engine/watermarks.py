"""A partition's watermarks published in a small shared file (`<partition dir>/watermarks`), so
that another process on the same host can read the log within them (`engine.colocated`).

The file is 32 bytes: a sequence number, then the high watermark, the log start offset and the
local log start offset. The one writer maps it (one descriptor per log, counted by the
manager's capacity check) and makes the number odd, writes the offsets and makes it even
again; a reader keeps the offsets only if it read the same even number before and after them
(a seqlock), so it never mixes two updates.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path
from typing import NamedTuple

FILE_NAME = "watermarks"
_SEQUENCE = struct.Struct("<Q")
_OFFSETS = struct.Struct("<qqq")
_SIZE = _SEQUENCE.size + _OFFSETS.size
_READ_ATTEMPTS = 100  # a writer holds the sequence odd for a few instructions only


class Watermarks(NamedTuple):
    high_watermark: int
    log_start_offset: int
    local_log_start_offset: int


class WatermarkFile:
    """The writer's side: a log publishes its watermarks here whenever one moves."""

    __slots__ = ("_map", "_sequence")

    def __init__(self, directory: Path) -> None:
        """Create (or take over) the file; its offsets mean nothing until the first `publish`,
        so a new file says 'nothing committed' (all zero, sequence even) until then."""
        fd = os.open(directory / FILE_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, _SIZE)
            self._map = mmap.mmap(fd, _SIZE)
        finally:
            os.close(fd)
        self._sequence = _SEQUENCE.unpack_from(self._map)[0] & ~1

    def publish(self, high_watermark: int, log_start: int, local_log_start: int) -> None:
        sequence = self._sequence + 1
        _SEQUENCE.pack_into(self._map, 0, sequence)
        _OFFSETS.pack_into(self._map, _SEQUENCE.size, high_watermark, log_start, local_log_start)
        self._sequence = sequence + 1
        _SEQUENCE.pack_into(self._map, 0, sequence + 1)

    def close(self) -> None:
        self._map.close()


class WatermarkReader:
    """The reader's side of one partition's file. It holds no descriptor between reads (a node
    may read thousands of partitions beside their leaders): each read opens the file, reads
    the sequence number, the offsets and the number again, and closes it."""

    __slots__ = ("path",)

    def __init__(self, directory: Path) -> None:
        self.path = os.fspath(directory / FILE_NAME)

    def read(self) -> Watermarks | None:
        """The watermarks as last published; None when there is no file (or it is being
        written without pause, which a live writer never does)."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            for _ in range(_READ_ATTEMPTS):
                raw = os.pread(fd, _SEQUENCE.size, 0)
                if len(raw) < _SEQUENCE.size:
                    return None
                before = _SEQUENCE.unpack(raw)[0]
                if before & 1:
                    continue
                offsets = os.pread(fd, _OFFSETS.size, _SEQUENCE.size)
                if len(offsets) < _OFFSETS.size:
                    return None
                if os.pread(fd, _SEQUENCE.size, 0) == raw:
                    return Watermarks._make(_OFFSETS.unpack(offsets))
            return None
        finally:
            os.close(fd)
