"""A partition's watermarks published in a small shared file (`<partition dir>/watermarks`), so
that another process on the same host can read the log within them (`engine.sibling_log`).

The file is 48 bytes: a sequence number, then the high watermark, the log start offset, the
local log start offset, the layout generation and the leader epoch the writer leads in (-1 while
it does not lead: a restarted process's high watermark is its last checkpoint's until it leads
again, so a reader trusts only the epoch it knows as the leader's), mapped by both sides. The
one writer (one descriptor per log, counted by the manager's capacity check) makes the number
odd, writes the offsets and makes it even again; a reader keeps the offsets only if it read the
same even number before and after them (a seqlock), so it never mixes two updates.

The layout generation says when segment files change other than by appends: it is odd while
the writer truncates or replaces files, even otherwise, and moves on with every such change
(and at every opening of the log, whose recovery may have cut a tail; a deleted log leaves it
odd for good in the file it unlinks). A reader that saw the
same even generation before and after reading the files read files that did not change under
it, and what it remembered of them under that generation still holds.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path
from typing import NamedTuple

FILE_NAME = "watermarks"
_SEQUENCE = struct.Struct("<Q")
_OFFSETS = struct.Struct("<qqqqq")
_SIZE = _SEQUENCE.size + _OFFSETS.size
_READ_ATTEMPTS = 100  # a writer holds the sequence odd for a few instructions only


class Watermarks(NamedTuple):
    high_watermark: int
    log_start_offset: int
    local_log_start_offset: int
    generation: int  # of the segment files' layout: odd while they change in place
    leader_epoch: int  # the writer leads in this epoch; -1: it does not lead


class WatermarkFile:
    """The writer's side: a log publishes its watermarks here whenever one moves."""

    __slots__ = ("_map", "_sequence", "generation", "leader_epoch")

    def __init__(self, directory: Path) -> None:
        """Create (or take over) the file, its generation moved on past the one found (the
        files may have changed since it was written). Its offsets mean nothing until the first
        `publish`: a new file says 'nothing committed' until then."""
        fd = os.open(directory / FILE_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, _SIZE)
            self._map = mmap.mmap(fd, _SIZE)
        finally:
            os.close(fd)
        self._sequence = _SEQUENCE.unpack_from(self._map)[0] & ~1
        found = _OFFSETS.unpack_from(self._map, _SEQUENCE.size)[3]
        self.generation = (found | 1) + 1  # even, and past any generation a reader saw
        self.leader_epoch = -1

    def publish(self, high_watermark: int, log_start: int, local_log_start: int) -> None:
        sequence = self._sequence + 1
        _SEQUENCE.pack_into(self._map, 0, sequence)
        _OFFSETS.pack_into(
            self._map,
            _SEQUENCE.size,
            high_watermark,
            log_start,
            local_log_start,
            self.generation,
            self.leader_epoch,
        )
        self._sequence = sequence + 1
        _SEQUENCE.pack_into(self._map, 0, sequence + 1)

    def layout_changing(self) -> None:
        """Before the writer truncates or replaces segment files: readers stop trusting what
        they remember (the generation turns odd); `publish` once done with it even again."""
        self.generation += 1

    def layout_changed(self) -> None:
        self.generation += 1

    def close(self) -> None:
        self._map.close()


class WatermarkReader:
    """The reader's side of one partition's file, mapped while it is in use (one descriptor:
    `engine.sibling_log.SiblingLogs` bounds how many are). Each read checks first that the
    path still names the mapped file (a topic deleted and created again has a new one)."""

    __slots__ = ("_inode", "_map", "path")

    def __init__(self, directory: Path) -> None:
        self.path = os.fspath(directory / FILE_NAME)
        self._map: mmap.mmap | None = None
        self._inode = -1

    def read(self, same_file: bool = False) -> Watermarks | None:
        """The watermarks as last published; None when there is no file (or it is being
        written without pause, which a live writer never does). `same_file`: read the file
        mapped already, without checking the path (a second look within one read)."""
        if not same_file or self._map is None:
            try:
                inode = os.stat(self.path).st_ino
            except FileNotFoundError:
                self.close()
                return None
            if inode != self._inode or self._map is None:
                self.close()
                if not self._open(inode):
                    return None
        view = self._map
        assert view is not None
        for _ in range(_READ_ATTEMPTS):
            before = _SEQUENCE.unpack_from(view)[0]
            if before & 1:
                continue
            offsets = _OFFSETS.unpack_from(view, _SEQUENCE.size)
            if _SEQUENCE.unpack_from(view)[0] == before:
                return Watermarks._make(offsets)
        return None

    def _open(self, inode: int) -> bool:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            if os.fstat(fd).st_size < _SIZE:
                return False
            self._map = mmap.mmap(fd, _SIZE, access=mmap.ACCESS_READ)
            self._inode = inode
            return True
        finally:
            os.close(fd)

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
        self._inode = -1
