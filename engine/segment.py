"""LogSegment: one `.log` file of concatenated v2 batches with its offset and time indexes."""

from __future__ import annotations

import errno
import os
from bisect import bisect_right
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from engine import batch as fmt
from engine import file_cache, txn_index
from engine.errors import CorruptRecord
from engine.file_cache import CachedFile, FileCache, FileGone
from engine.fsync import FileStateUnknown, checked_fsync
from engine.index import PENDING_MAX, OffsetIndex, TimeIndex

_HEADER_PROBE = 8 * 1024  # bytes read at once while walking batch headers (> index interval)
# Bytes read at once by `batches()` (recovery, compaction, the tiering scan). Every batch
# header of a chunk is made at once, about 9 bytes of Python objects per byte of one-record
# batches: 8 MiB chunks made a compaction pass peak 63 MiB above its start, and in a busy node
# the pymalloc arenas it grew stayed.
_SCAN_CHUNK = 256 * 1024
_PAST_ANY_POSITION = 2**63  # (offset, this) sorts after every batch of the tail based at offset


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


class RecoveryResult(NamedTuple):
    truncated_bytes: int
    error: str | None
    epochs: list[tuple[int, int]]  # (leader epoch, first offset) where each epoch starts


class LogSegment:
    """Append-only batches for offsets [base_offset, next_offset), with sparse indexes.

    The active segment (`activate`) keeps its file open: one `os.write` per append on an
    O_APPEND descriptor. A closed one (`seal`) keeps only sizes, offsets and timestamps in
    memory: its files are opened on demand through the process-wide file cache and its indexes
    are looked up in their files. Reads use `os.pread`, so they never disturb the writer;
    `load`/`recover` derive the in-memory state from the files on open.
    """

    __slots__ = (
        "_bytes_since_index",
        "_fd",
        "_index_write_at",
        "_log",
        "_tail",
        "base_offset",
        "directory",
        "files",
        "index",
        "index_interval_bytes",
        "max_timestamp",
        "next_offset",
        "rolling_base_ms",
        "size",
        "time_index",
    )

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        index_interval_bytes: int,
        files: FileCache | None = None,
    ) -> None:
        """A segment as its files are (none yet: an empty one); nothing is opened here."""
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.files = file_cache.shared if files is None else files
        stem = os.path.join(directory, segment_name(base_offset))
        self._log = CachedFile(stem + ".log")
        self._fd = -1  # the active segment's descriptor for appends
        self.index = OffsetIndex(stem + ".index", base_offset, self.files)
        self.time_index = TimeIndex(stem + ".timeindex", base_offset, self.files)
        try:
            stat = os.stat(self._log.path)
            self.size, mtime = stat.st_size, stat.st_mtime
        except FileNotFoundError:
            self.size, mtime = 0, 0.0
        self.next_offset = base_offset
        self.max_timestamp = fmt.NO_TIMESTAMP
        # When segment.ms starts counting: the broker's clock at the first append (the file's
        # mtime after a restart), not record timestamps, which producers may set far in the past.
        self.rolling_base_ms: int | None = int(mtime * 1000) if self.size else None
        self._bytes_since_index = 0
        self._index_write_at = PENDING_MAX  # entries waiting when the next write is tried
        # (base offset, position) of each batch from the last index entry on, while active: a
        # consumer at the tail asks for the offset just appended, found here without a walk.
        self._tail: list[tuple[int, int]] = []

    @property
    def path(self) -> Path:
        return Path(self._log.path)

    # -- open for appends, or closed -----------------------------------------------------------

    def activate(self) -> None:
        """Open the file for appends (creating it and the index files) and keep it open: this
        is now the active segment. Released indexes come back into memory (or are rebuilt)."""
        if self._log.writer:
            return
        writer = CachedFile(self._log.path)
        self._fd = self.files.open_writer(writer)
        stale, self._log = self._log, writer
        self.files.forget(stale)
        if (self.index.released or self.time_index.released) and not self.load():
            self.recover()
        self.index.create_file()
        self.time_index.create_file()

    def seal(self) -> None:
        """Closed for appends: release the indexes to their files and hand the log's descriptor
        to the file cache, which closes it when it needs the room."""
        self.index.release()
        self.time_index.release()
        self._tail = []
        if self._log.writer:
            self._fd = -1
            self.files.seal(self._log)

    @contextmanager
    def _pinned(self) -> Iterator[int]:
        """The log's descriptor, held open for the block (from the cache if closed)."""
        file = self._log
        try:
            fd = self.files.pin(file)
        except FileGone:
            if file is self._log:
                raise
            file = self._log  # it became the active segment meanwhile: read the new descriptor
            fd = self.files.pin(file)
        try:
            yield fd
        finally:
            self.files.unpin(file)

    # -- writing -------------------------------------------------------------------------------

    def append(
        self, data: bytes | bytearray | memoryview, headers: list[tuple[int, fmt.BatchHeader]]
    ) -> None:
        """Write whole batches (already stamped) in one call; on failure the file is unchanged.

        `headers` holds each batch's position within `data` and its header as stamped.
        """
        start = self.size
        try:
            written = os.write(self._fd, data)
            while written < len(data):  # a short write: the next one says why (ENOSPC...)
                more = os.write(self._fd, memoryview(data)[written:])
                if more == 0:
                    raise OSError(errno.EIO, f"short write: {written} of {len(data)} bytes")
                written += more
        except BaseException as exc:
            try:
                os.ftruncate(self._fd, start)
            except OSError as cut:
                # The file may end in part of a batch: nothing may be appended after it.
                first = exc if isinstance(exc, OSError) else cut
                raise FileStateUnknown(
                    first.errno,
                    f"{first.strerror}, and cutting {self.path.name} back failed: {cut.strerror}",
                ) from exc
            raise
        self._index_batches(start, headers)
        self.size = start + len(data)
        if self.index.pending >= self._index_write_at:  # the time index gains entries with it
            self._write_waiting_entries()

    def _write_waiting_entries(self) -> None:
        """Write the indexes' waiting entries now, so that a roll has few left. Best effort: the
        batches are appended already, and on an error the entries stay waiting for the next
        flush, roll or close, which write them or take a failing disk's error as theirs; the
        next try here waits for PENDING_MAX more (each try encodes every waiting entry)."""
        try:
            self.index.flush()
            self.time_index.flush()
        except OSError:
            self._index_write_at = self.index.pending + PENDING_MAX
        else:
            self._index_write_at = PENDING_MAX

    def _index_batches(self, start: int, headers: list[tuple[int, fmt.BatchHeader]]) -> None:
        """Note batches written from `start` on (each header's position relative to it) in the
        indexes and the tail, in one loop over a write's batches with the segment's state in
        locals (a method call and two properties per batch before)."""
        interval = self.index_interval_bytes
        since = self._bytes_since_index
        max_timestamp = self.max_timestamp
        tail = self._tail
        unindexed = not len(self.index)
        for pos, header in headers:
            base_offset = header.base_offset
            if header.max_timestamp > max_timestamp:
                max_timestamp = header.max_timestamp
            if since >= interval or unindexed:
                unindexed = False
                self.index.append(base_offset, start + pos)
                # Keyed by the segment's largest timestamp so far, as in Kafka: a batch between
                # two entries may carry a larger one than either, and the last key is the max on
                # reload.
                self.time_index.maybe_append(max_timestamp, base_offset)
                since = 0
                tail = self._tail = [(base_offset, start + pos)]  # a new list: readers hold the old
            else:
                tail.append((base_offset, start + pos))
            since += header.length + fmt.LOG_OVERHEAD
        if headers:
            last = headers[-1][1]
            self.next_offset = last.base_offset + last.last_offset_delta + 1
        self.max_timestamp = max_timestamp
        self._bytes_since_index = since

    def flush(self, fsync: bool = True) -> None:
        """Write pending index entries; with `fsync`, also make the log and indexes durable."""
        self.index.flush()
        self.time_index.flush()
        if fsync:
            self.fsync()

    def fsync(self) -> None:
        """fsync the log and index files; safe from another thread (touches no memory state)."""
        try:
            with self._pinned() as fd:
                checked_fsync(fd, self._log.path)
        except FileGone:
            return  # closed, deleted or replaced meanwhile: nothing of it is left to sync
        for index in (self.index, self.time_index):
            try:
                fd = os.open(index.path, os.O_RDONLY)
            except FileNotFoundError:
                continue  # not written yet, or deleted meanwhile (retention)
            try:
                checked_fsync(fd, index.path)
            finally:
                os.close(fd)

    # -- reading -------------------------------------------------------------------------------

    def pread(self, length: int, position: int) -> bytes:
        with self._pinned() as fd:
            return os.pread(fd, length, position)

    def translate(self, offset: int) -> tuple[int, fmt.BatchHeader] | None:
        """Position and header of the first batch whose last offset is >= `offset`."""
        with self._pinned() as fd:
            return self._translate(fd, offset)

    def _translate(self, fd: int, offset: int) -> tuple[int, fmt.BatchHeader] | None:
        tail = self._tail
        if tail and offset >= tail[0][0]:
            _, position = tail[bisect_right(tail, (offset, _PAST_ANY_POSITION)) - 1]
        else:
            _, position = self.index.lookup(offset)
        for found, header in walk_headers(fd, position, self.size, self._log.path):
            if header.last_offset >= offset:
                return found, header
        return None

    def read(
        self,
        offset: int,
        max_bytes: int,
        upper_offset: int,
        min_one: bool,
        max_records: int | None = None,
    ) -> memoryview:
        """Whole batches from the one holding `offset`, ending before `upper_offset`.

        At most `max_bytes`, except that with `min_one` the first batch is returned whole even if
        larger (so a consumer always makes progress). With `max_records`, batches starting at or
        past `offset + max_records` are left out (the caller will not use them). Every batch
        returned passed its CRC; a corrupt first batch raises CorruptRecord, a later one ends the
        read before it.
        """
        with self._pinned() as fd:
            found = self._translate(fd, offset)
            if found is None:
                return memoryview(b"")
            position, first = found
            return read_batches(
                fd,
                position,
                first,
                self.size,
                offset,
                max_bytes,
                upper_offset,
                min_one,
                max_records,
                self._log.path,
            )

    def batches(self) -> Iterator[tuple[fmt.BatchHeader, memoryview]]:
        """Every batch in file order, CRC-checked; the first bad one raises CorruptRecord."""
        for chunk, headers in self.batch_chunks():
            for pos, header in headers:
                yield header, chunk[pos : pos + header.size]

    def batch_chunks(self) -> Iterator[tuple[memoryview, list[tuple[int, fmt.BatchHeader]]]]:
        """`batches`, a read at a time (module `batch_chunks`)."""
        return batch_chunks(self.pread, self.size, self.base_offset, self._log.path)

    def transactional_batches(
        self, start_offset: int
    ) -> Iterator[tuple[int, fmt.BatchHeader, bytes]]:
        """(position, header, bytes) of each transactional batch from `start_offset` on, read
        by walking the headers (the bytes are read for control batches only, b"" otherwise):
        what rebuilding a partition's producer state needs."""
        with self._pinned() as fd:
            found = self._translate(fd, start_offset)
            if found is None:
                return
            for position, header in walk_headers(fd, found[0], self.size, self._log.path):
                if not header.attributes & fmt.TRANSACTIONAL_MASK:
                    continue
                data = b""
                if header.attributes & fmt.CONTROL_MASK:
                    data = os.pread(fd, header.size, position)
                yield position, header, data

    def find_offset_by_timestamp(
        self, timestamp: int, start_offset: int = 0
    ) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record here at or after `start_offset` (the log start)
        with timestamp >= `timestamp`."""
        if self.max_timestamp < timestamp:
            return None
        start = self.time_index.lookup(timestamp)
        with self._pinned() as fd:
            found = self._translate(
                fd, max(self.base_offset if start is None else start, start_offset)
            )
            if found is None:
                return None
            position, header = found
            while position < self.size:
                header = fmt.read_header(os.pread(fd, fmt.HEADER_SIZE, position))
                if header.max_timestamp >= timestamp:
                    data = os.pread(fd, header.size, position)
                    for record in fmt.iter_records(data):
                        if record.offset >= start_offset and record.timestamp >= timestamp:
                            return record.offset, record.timestamp
                position += header.size
        return None

    # -- recovery and truncation ---------------------------------------------------------------

    def _reset_state(self) -> None:
        self.next_offset = self.base_offset
        self.max_timestamp = fmt.NO_TIMESTAMP
        self._bytes_since_index = 0
        self._tail = []
        if self.time_index.keys:
            self.max_timestamp = self.time_index.keys[-1]

    def _replay_tail(self) -> bool:
        """Walk the headers after the last index entry (no CRC) to restore in-memory state."""
        self._reset_state()
        _, position = self.index.lookup(2**63 - 1)
        result = fmt.scan(self.pread(self.size - position, position), check_crc=False)
        self._index_batches(position, result.headers)
        return result.error is None

    def load(self) -> bool:
        """Trust the file (a clean shutdown or a flushed segment): load indexes, replay the tail.

        Returns False when an index is unusable or the tail does not parse; the caller then runs
        `recover`.
        """
        if not (self.index.load() and self.time_index.load()):
            return False
        if self.index.values and self.index.values[-1] >= self.size:
            return False
        # Entries are monotonic (checked by load), so the first ones bound them from below.
        if self.index.keys and (self.index.keys[0] < self.base_offset or self.index.values[0] < 0):
            return False
        if self.time_index.values and self.time_index.values[0] < self.base_offset:
            return False
        if (
            self.time_index.values
            and self.index.keys
            and (self.time_index.values[-1] > self.index.keys[-1])
        ):
            return False
        return self._replay_tail()

    def recover(self) -> RecoveryResult:
        """CRC-check every batch, rebuild both indexes, cut the file after the last valid batch."""
        self.index.clear()
        self.time_index.clear()
        self._reset_state()
        position = 0
        error: str | None = None
        epochs: list[tuple[int, int]] = []
        try:
            for header, _ in self.batches():
                if header.base_offset < self.next_offset:
                    error = f"offset {header.base_offset} goes backwards at byte {position}"
                    break
                self._index_batches(position, [(0, header)])
                position += header.size
                if not epochs or header.partition_leader_epoch > epochs[-1][0]:
                    epochs.append((header.partition_leader_epoch, header.base_offset))
        except CorruptRecord as exc:
            error = str(exc)
        truncated = self.size - position
        if truncated:
            os.truncate(self._log.path, position)
            self.size = position
        self.index.rewrite()
        self.time_index.rewrite()
        return RecoveryResult(truncated, error, epochs)

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= `offset`; returns bytes removed. The
        segment becomes (or stays) the active one."""
        self.activate()
        found = self.translate(offset)
        if found is None:
            return 0
        position, header = found
        removed = self.size - position
        os.ftruncate(self._fd, position)
        self.size = position
        self.index.truncate_to_position(position)
        self.time_index.truncate_to_offset(header.base_offset)
        self._replay_tail()
        return removed

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def empty(self) -> bool:
        return self.size == 0

    def close(self, write_indexes: bool = True) -> None:
        """Write pending index entries (not for an offline log: its files are left as they are
        for recovery) and let go of the files, even if that write fails: a read of this
        segment that does not hold them already raises FileGone."""
        try:
            if write_indexes:
                self.index.flush()
                self.time_index.flush()
        finally:
            self._fd = -1
            for file in (self._log, self.index.file, self.time_index.file):
                self.files.forget(file)

    def delete(self) -> None:
        """Unlink the files; a read holding them keeps reading until it lets go, a later one
        raises FileGone."""
        self._fd = -1
        self.files.forget(self._log)
        self.path.unlink(missing_ok=True)
        self.index.delete()
        self.time_index.delete()
        txn_index.index_path(self.directory, self.base_offset).unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"LogSegment({self.path}, next_offset={self.next_offset}, size={self.size})"


def walk_headers(
    fd: int, position: int, size: int, path: str
) -> Iterator[tuple[int, fmt.BatchHeader]]:
    """(position, header) of each batch of the log file `fd` (at `path`) from byte `position`
    to `size`, read a probe at a time; a header that cannot be one raises CorruptRecord."""
    while position < size:
        chunk = os.pread(fd, min(_HEADER_PROBE, size - position), position)
        pos = 0
        while pos + fmt.HEADER_SIZE <= len(chunk):
            header = fmt.read_header(chunk, pos)
            if header.length < fmt.MIN_BATCH_LENGTH:
                raise CorruptRecord(
                    f"invalid batch header in {os.path.basename(path)} at byte {position + pos}",
                    header.base_offset,
                )
            if position + pos + header.size > size:
                raise CorruptRecord(
                    f"batch at byte {position + pos} of {os.path.basename(path)} runs past the end",
                    header.base_offset,
                )
            yield position + pos, header
            pos += header.size
        if pos == 0:
            return
        position += pos


def read_batches(
    fd: int,
    position: int,
    first: fmt.BatchHeader,
    size: int,
    offset: int,
    max_bytes: int,
    upper_offset: int,
    min_one: bool,
    max_records: int | None,
    path: str,
) -> memoryview:
    """`LogSegment.read` from the batch `first` found at `position` (holding `offset`) in the
    log file `fd` (at `path`) of `size` bytes: whole, CRC-checked batches below
    `upper_offset`."""
    if first.last_offset >= upper_offset:
        return memoryview(b"")
    length = min(max_bytes, size - position)
    if max_records is not None and first.record_count:
        # Read about as many batches as max_records needs, sized like the first one,
        # instead of copying all of max_bytes to use a fraction of it.
        batches = -(-(max_records + offset - first.base_offset) // first.record_count)
        length = min(length, batches * first.size)
    if min_one and first.size > length:
        length = first.size
    data = memoryview(os.pread(fd, length, position))
    stop = upper_offset if max_records is None else min(upper_offset, offset + max_records)
    pos = 0
    end = len(data)
    while pos + fmt.HEADER_SIZE <= end:
        header = fmt.read_header(data, pos)
        if pos + header.size > end or header.last_offset >= upper_offset:
            break
        if pos and header.base_offset >= stop:
            break
        if header.magic != fmt.MAGIC or not fmt.crc_matches(data, pos, header):
            if pos == 0:
                raise CorruptRecord(
                    f"batch at offset {header.base_offset} in {os.path.basename(path)} failed "
                    "its CRC",
                    header.base_offset,
                )
            break
        pos += header.size
    return data[:pos]


def batch_chunks(
    pread: Callable[[int, int], bytes], size: int, base_offset: int, path: str
) -> Iterator[tuple[memoryview, list[tuple[int, fmt.BatchHeader]]]]:
    """The batches of a segment's first `size` bytes, a read at a time: the bytes read and
    (position in them, header) of each whole batch they hold, CRC-checked; the first bad batch
    raises CorruptRecord. `pread(length, position)` reads the `.log` file at `path`."""
    position = 0
    expected = base_offset
    chunk_size = _SCAN_CHUNK
    while position < size:
        chunk = memoryview(pread(min(chunk_size, size - position), position))
        result = fmt.scan(chunk, check_crc=True)
        if result.headers:
            yield chunk, result.headers
            expected = result.headers[-1][1].next_offset
        position += result.valid_bytes
        if result.error is None:
            continue
        if result.needed and position + result.needed <= size:
            chunk_size = max(_SCAN_CHUNK, result.needed)  # a batch straddled the chunk
            continue
        name = os.path.basename(path)
        raise CorruptRecord(f"{result.error} at byte {position} of {name}", expected)
