"""A partition's watermarks published in a small shared file (`<partition dir>/watermarks`), so
that another process on the same host can read the log within them (`engine.colocated`).

The file is 32 bytes mapped by both sides: a sequence number, then the high watermark, the log
start offset and the local log start offset. The one writer makes the number odd, writes the
offsets and makes it even again; a reader keeps the offsets only if it saw the same even number
before and after reading them (a seqlock), so it never mixes two updates.
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
    """The reader's side of one partition's file; it follows the file if it is replaced (a
    topic deleted and created again)."""

    __slots__ = ("_inode", "_map", "path")

    def __init__(self, directory: Path) -> None:
        self.path = os.fspath(directory / FILE_NAME)
        self._map: mmap.mmap | None = None
        self._inode = -1

    def read(self) -> Watermarks | None:
        """The watermarks as last published; None when there is no file (or it is being
        written without pause, which a live writer never does)."""
        try:
            inode = os.stat(self.path).st_ino
        except FileNotFoundError:
            self.close()
            return None
        if inode != self._inode or self._map is None:
            self.close()
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return None
            try:
                if os.fstat(fd).st_size < _SIZE:
                    return None
                self._map = mmap.mmap(fd, _SIZE, access=mmap.ACCESS_READ)
                self._inode = inode
            finally:
                os.close(fd)
        view = self._map
        for _ in range(_READ_ATTEMPTS):
            before = _SEQUENCE.unpack_from(view)[0]
            if before & 1:
                continue
            offsets = _OFFSETS.unpack_from(view, _SEQUENCE.size)
            if _SEQUENCE.unpack_from(view)[0] == before:
                return Watermarks._make(offsets)
        return None

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
        self._inode = -1
