"""Reads of a partition log that another process on this host writes (a sibling worker's).

Whole batches below the high watermark that process publishes (engine.watermarks), straight
from its segment files: what lies below the high watermark is written and never changes in
place (retention deletes whole files, compaction swaps in new ones), so a reader needs no lock.
Only what the files show for sure is served; in every other case (nothing committed at the
offset yet, below the local log start, a segment gone or replaced under the read, a batch that
fails its checks, too long a walk to find the offset) the read answers None and the caller asks
the log's own process, which stays the reference.
"""

from __future__ import annotations

import os
from bisect import bisect_right, insort
from collections import OrderedDict
from pathlib import Path

from engine import batch as fmt
from engine.errors import CorruptRecord
from engine.segment import read_batches, segment_name, walk_headers
from engine.watermarks import WatermarkReader, Watermarks

MAX_WALK = 2048  # batch headers one read may walk to find its offset; the next goes on from there
LEARN_EVERY = 4096  # bytes between two positions a reader remembers (Kafka's index interval)
MAX_LEARNED = 512  # positions remembered per segment file, thinned by half past this
MAX_SEGMENTS = 64  # segment files per log whose positions are remembered


class _Stale(Exception):
    """A remembered position starts a batch below the offset remembered for it (a check that
    holds whatever the layout generation says: it costs nothing)."""


class SiblingLog:
    """One partition directory another process writes, read within its published watermarks.
    Remembers where batches start in the files it walked, so reads go on from there."""

    __slots__ = ("_bases", "_generation", "_learned", "directory", "watermark_file")

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.watermark_file = WatermarkReader(directory)
        self._bases: list[int] = []  # the segments' base offsets, as last listed
        self._generation = -1  # the layout generation `_bases` and `_learned` hold for
        # (segment base, inode) -> sorted (batch base offset, position): where batches start
        self._learned: OrderedDict[tuple[int, int], list[tuple[int, int]]] = OrderedDict()

    def watermarks(self) -> Watermarks | None:
        return self.watermark_file.read()

    def read(
        self, offset: int, max_bytes: int, max_records: int | None, marks: Watermarks
    ) -> memoryview | None:
        """What `PartitionLog.read(offset, max_bytes, max_records=...)` answers below
        `marks.high_watermark`, if the files show it now; else None."""
        if marks.generation & 1:  # the writer is truncating or swapping files
            return None
        if marks.generation != self._generation:
            self._forget()
            self._generation = marks.generation
        if not marks.local_log_start_offset <= offset < marks.high_watermark:
            return None
        try:
            data = self._read_listed(offset, max_bytes, max_records, marks)
        except (OSError, CorruptRecord, _Stale):
            return None  # a segment changed under the read, or no descriptor was left
        if not data:
            return None
        after = self.watermark_file.read(same_file=True)
        if after is None or after.generation != marks.generation:
            self._forget()  # the files changed during the read: neither it nor what it learned
            return None
        return data

    def _forget(self) -> None:
        self._learned.clear()
        self._bases = []
        self._generation = -1

    def _read_listed(
        self, offset: int, max_bytes: int, max_records: int | None, marks: Watermarks
    ) -> memoryview | None:
        """The read from the segment holding `offset`, listing the directory again when the
        segments listed before end below it or one of them went (retention, truncation)."""
        for relist in (False, True):
            if relist or not self._bases:
                self._bases = self._list()
            bases = self._bases
            i = bisect_right(bases, offset) - 1
            if i < 0:
                return None
            try:
                for base in bases[i:]:
                    data = self._read_segment(base, offset, max_bytes, max_records, marks)
                    if data is not None:
                        return data
            except FileNotFoundError:
                continue
        return None

    def _list(self) -> list[int]:
        names = os.listdir(self.directory)
        return sorted(int(n[:-4]) for n in names if n.endswith(".log") and n[:-4].isdigit())

    def _read_segment(
        self, base: int, offset: int, max_bytes: int, max_records: int | None, marks: Watermarks
    ) -> memoryview | None:
        """The read from segment `base`: data (empty: give up), or None when the segment
        ends before `offset`."""
        path = os.path.join(self.directory, segment_name(base) + ".log")
        fd = os.open(path, os.O_RDONLY)
        try:
            stat = os.fstat(fd)
            key = (base, stat.st_ino)
            learned = self._learned.get(key)
            if learned is None:
                learned = self._learned[key] = []
                if len(self._learned) > MAX_SEGMENTS:
                    self._learned.popitem(last=False)
            else:
                self._learned.move_to_end(key)
            try:
                return self._walk(
                    fd, path, stat.st_size, learned, base, offset, max_bytes, max_records, marks
                )
            except (CorruptRecord, _Stale):
                learned.clear()  # a remembered position may be what misled the walk
                raise
        finally:
            os.close(fd)

    def _walk(
        self,
        fd: int,
        path: str,
        size: int,
        learned: list[tuple[int, int]],
        base: int,
        offset: int,
        max_bytes: int,
        max_records: int | None,
        marks: Watermarks,
    ) -> memoryview | None:
        """`_read_segment` in the open file `fd` of `size` bytes, from the remembered batch
        start nearest below `offset`, remembering more on the way."""
        start_offset, start = _start(learned, base, offset)
        last_learned = start
        for walked, (position, header) in enumerate(walk_headers(fd, start, size, path), 1):
            if walked == 1 and header.base_offset < start_offset:
                raise _Stale(path)
            if header.last_offset >= marks.high_watermark:
                return memoryview(b"")  # at the high watermark: nothing more is committed
            if header.last_offset >= offset:
                data = read_batches(
                    fd, position, header, size, offset, max_bytes, marks.high_watermark, True,
                    max_records, path,
                )  # fmt: skip
                _learn(learned, header.base_offset, position)
                if data:
                    _learn(learned, _next_offset(data), position + len(data))
                return data
            if walked >= MAX_WALK:
                _learn(learned, header.base_offset, position)  # where the next read goes on
                return memoryview(b"")
            if position - last_learned >= LEARN_EVERY:
                _learn(learned, header.base_offset, position)
                last_learned = position
        return None


def _start(learned: list[tuple[int, int]], base: int, offset: int) -> tuple[int, int]:
    """The remembered batch start nearest below `offset`: (an offset at or below the batch's
    base offset, its position). Compaction may leave a gap, so the batch can start above it."""
    i = bisect_right(learned, (offset, 2**63)) - 1
    return learned[i] if i >= 0 else (base, 0)


def _learn(learned: list[tuple[int, int]], batch_offset: int, position: int) -> None:
    entry = (batch_offset, position)
    i = bisect_right(learned, entry)
    if i and learned[i - 1] == entry:
        return
    insort(learned, entry)
    if len(learned) > MAX_LEARNED:
        del learned[::2]


def _next_offset(data: memoryview) -> int:
    """The offset after the last batch of `data` (whole batches)."""
    pos = 0
    last = None
    while pos < len(data):
        last = fmt.read_header(data, pos)
        pos += last.size
    assert last is not None
    return last.next_offset


class SiblingLogs:
    """The partition directories of the other processes on this host: the positions remembered
    and the watermarks file mapped (a descriptor) for a bounded number of them, least recently
    read first out."""

    def __init__(self, capacity: int = 64) -> None:
        self.capacity = capacity
        self._logs: OrderedDict[Path, SiblingLog] = OrderedDict()

    def get(self, directory: Path) -> SiblingLog:
        log = self._logs.get(directory)
        if log is None:
            log = self._logs[directory] = SiblingLog(directory)
            if len(self._logs) > self.capacity:
                self._logs.popitem(last=False)[1].watermark_file.close()
        else:
            self._logs.move_to_end(directory)
        return log
