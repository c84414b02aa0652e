"""Log compaction (cleanup.policy=compact): keep the latest record per key.

A pass maps each key in the dirty section (closed segments not yet cleaned) to its latest
offset, then rewrites every closed segment without superseded records and without tombstones
older than delete.retention.ms. Offsets and order are preserved (gaps are allowed). Each
segment is rebuilt in a scratch directory and swapped in by `PartitionLog.replace_segment`,
so appends and reads go on meanwhile and a crash at any point leaves a valid log.

A pass runs in a worker thread beside the event loop and paces itself (engine.pacing): a busy
group's offsets partition holds hundreds of thousands of one-record commits, whose decoding
would otherwise hold the GIL for seconds. A batch of the dirty section that holds none of the
latest offsets is dropped on its header alone.
"""

from __future__ import annotations

import bisect
import itertools
import os
import shutil
from pathlib import Path
from typing import NamedTuple

from engine import batch as fmt
from engine.file_cache import FileGone
from engine.log import CLEANED_SUFFIX, PartitionLog
from engine.pacing import Pacer
from engine.segment import LogSegment

SCRATCH_DIR = "cleaning"
DEFAULT_MAX_KEYS = 1_000_000


class CleanStats(NamedTuple):
    segments_rewritten: int
    records_removed: int
    bytes_before: int
    bytes_after: int
    cleaned_up_to: int  # the next pass treats offsets from here on as dirty


def cleanable(log: PartitionLog) -> list[LogSegment]:
    """Closed segments wholly below the high watermark: the part a pass may rewrite."""
    segments = log.segments
    out = []
    for segment, following in itertools.pairwise(segments):
        if following.base_offset > log.high_watermark:
            break
        out.append(segment)
    return out


def dirty_ratio(log: PartitionLog, first_dirty_offset: int) -> float:
    segments = cleanable(log)
    total = sum(s.size for s in segments)
    dirty = sum(s.size for s in segments if s.next_offset > first_dirty_offset)
    return dirty / total if total else 0.0


def clean(
    log: PartitionLog,
    first_dirty_offset: int,
    *,
    now_ms: int | None = None,
    force: bool = False,
    max_keys: int = DEFAULT_MAX_KEYS,
    pacer: Pacer | None = None,
) -> CleanStats | None:
    """Run one compaction pass if the dirty ratio calls for it (or `force`); None if skipped.
    `pacer` paces the work between batches (a Pacer of engine.pacing's defaults if None)."""
    pacer = Pacer() if pacer is None else pacer
    config = log.config
    segments = cleanable(log)
    if not segments:
        return None
    if not force and dirty_ratio(log, first_dirty_offset) < config.min_cleanable_dirty_ratio:
        return None
    latest: dict[bytes | None, int] = {}
    end = first_dirty_offset
    for segment in segments:
        if segment.next_offset <= first_dirty_offset:
            continue
        if len(latest) >= max_keys:
            break
        try:
            for _, data in segment.batches():
                pacer.tick()
                for record in fmt.iter_records(data):
                    if record.offset >= first_dirty_offset:
                        latest[record.key] = record.offset
        except FileGone:
            continue  # retention deleted it meanwhile: its records are gone
        end = segment.next_offset
    if end <= first_dirty_offset:
        return None
    now = log.now_ms() if now_ms is None else now_ms
    horizon = now - config.delete_retention_ms
    scratch = log.directory / SCRATCH_DIR
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    dirty = _Dirty(first_dirty_offset, end, sorted(latest.values()))
    rewritten = removed = before = after = 0
    try:
        for segment in segments:
            if segment.base_offset >= end:
                break
            size = segment.size
            try:
                dropped = _rewrite(segment, latest, dirty, horizon, scratch, pacer)
            except FileGone:
                continue  # retention deleted it meanwhile
            if dropped == 0:
                continue
            if log.replace_segment(segment, size):
                rewritten += 1
                removed += dropped
                before += size
                after += next(s.size for s in log.segments if s.base_offset == segment.base_offset)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return CleanStats(rewritten, removed, before, after, end)


class _Dirty(NamedTuple):
    """The section a pass mapped, and the offsets it keeps there: the latest of each key."""

    start: int
    end: int
    kept: list[int]  # sorted

    def drops_whole(self, header: fmt.BatchHeader) -> bool:
        """Whether every record of this batch is superseded: it lies in the section and holds
        none of the offsets kept (each of its records has a later one of its key)."""
        first, last = header.base_offset, header.last_offset
        if first < self.start or last >= self.end:
            return False
        i = bisect.bisect_left(self.kept, first)
        return i == len(self.kept) or self.kept[i] > last


def _rewrite(
    segment: LogSegment,
    latest: dict[bytes | None, int],
    dirty: _Dirty,
    horizon: int,
    scratch: Path,
    pacer: Pacer,
) -> int:
    """Write the cleaned copy of `segment` as `.cleaned` files beside it; return records dropped.

    Returns 0 (and writes nothing) when every record survives.
    """
    out: LogSegment | None = None
    dropped = 0
    pending: list[tuple[fmt.BatchHeader, memoryview]] = []
    for header, data in segment.batches():
        pacer.tick()
        if dirty.drops_whole(header):
            dropped += header.record_count
            continue
        records = list(fmt.iter_records(data))
        kept = [
            r
            for r in records
            if latest.get(r.key, -1) <= r.offset and not (r.value is None and r.timestamp < horizon)
        ]
        dropped += len(records) - len(kept)
        if len(kept) == len(records):
            pending.append((header, data))
            continue
        if kept:
            rebuilt = fmt.encode_batch(
                [fmt.RecordInput(r.key, r.value, r.headers, r.timestamp) for r in kept],
                compression=header.compression,
                offsets=[r.offset for r in kept],
            )
            fmt.set_leader_epoch(rebuilt, 0, header.partition_leader_epoch)
            rebuilt_header = fmt.read_header(rebuilt)
            if header.log_append_time:
                fmt.set_log_append_time(rebuilt, 0, rebuilt_header, header.max_timestamp)
                rebuilt_header = fmt.read_header(rebuilt)
            pending.append((rebuilt_header, memoryview(rebuilt)))
    if dropped == 0:
        return 0
    out = LogSegment(scratch, segment.base_offset, segment.index_interval_bytes, segment.files)
    out.activate()
    for header, data in pending:
        out.append(data, [(0, header)])
    out.flush(fsync=True)
    out.close()
    for made, original in (
        (out.path, segment.path),
        (out.index.path, segment.index.path),
        (out.time_index.path, segment.time_index.path),
    ):
        if not made.exists():
            made.touch()
        os.replace(made, original.with_name(original.name + CLEANED_SUFFIX))
    return dropped
