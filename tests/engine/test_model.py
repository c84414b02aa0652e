"""Model-based test: a real PartitionLog driven against a plain-Python model of it.

The model holds the log as segments of batches of records (offsets kept across compaction) plus
the log start offset, high watermark and log end offset; it decides rolls, truncation, retention
and compaction by their rules itself rather than reading them back from the log. Hypothesis drives
appends, HW moves (to batch boundaries, as follower log ends are), truncation, DeleteRecords,
retention, compaction, reads from any offset, rolls, clean reopens and crashes (torn tails, a
compaction killed mid-swap). After every step the log's offsets, segments, committed and
uncommitted reads, offset_for_timestamp answers and epoch cache must match the model.
segment.ms keeps its default: time-based rolls are not modelled.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, NamedTuple
from unittest import mock

import pytest
from hypothesis import HealthCheck
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from engine import batch as fmt
from engine.cleaner import clean
from engine.config import TopicConfig
from engine.errors import InvalidRecord, OffsetOutOfRange
from engine.log import PartitionLog
from engine.segment import segment_name
from tests.hypothesis_runs import deterministic

KEYS = (b"a", b"b", b"c", b"d")
START_MS = 1_000_000_000  # whole seconds, so `clock() * 1000` round-trips exactly
READ_SIZES = (1, 90, 400, 1 << 20)  # the max_bytes the invariant's reads cycle through
CODECS = (0, fmt.COMPRESSION_CODECS["zstd"])

Headers = list[tuple[str, bytes | None]]
# (key, value, headers, timestamp relative to the clock)
RecordSpec = tuple[bytes | None, bytes | None, Headers, int]
Request = tuple[int, list[list[RecordSpec]]]  # (compression codec, batches)

headers_st = st.lists(
    st.tuples(st.sampled_from(["h", "trace"]), st.none() | st.binary(max_size=6)), max_size=2
)
values_st = st.none() | st.binary(max_size=40)
deltas_st = st.integers(-8_000, 2_000)
keyed_st = st.tuples(st.sampled_from(KEYS), values_st, headers_st, deltas_st)
keyless_st = st.tuples(st.none(), values_st, headers_st, deltas_st)


def requests_of(records: st.SearchStrategy[RecordSpec]) -> st.SearchStrategy[list[Request]]:
    """One to four append requests, each a codec and one or two batches of one to five records."""
    batch = st.lists(records, min_size=1, max_size=5)
    request = st.tuples(st.sampled_from(CODECS), st.lists(batch, min_size=1, max_size=2))
    return st.lists(request, min_size=1, max_size=4)


class MRecord(NamedTuple):
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp: int


@dataclass
class MBatch:
    """A stored batch: its records (with gaps after compaction), leader epoch, codec and size."""

    records: list[MRecord]
    epoch: int
    codec: int
    log_append_time: bool
    size: int

    @property
    def base(self) -> int:
        return self.records[0].offset

    @property
    def last(self) -> int:
        return self.records[-1].offset

    @property
    def max_timestamp(self) -> int:
        return max(r.timestamp for r in self.records)


@dataclass
class MSegment:
    """A segment: a base offset and the batches stored in it."""

    base: int
    batches: list[MBatch] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(b.size for b in self.batches)

    @property
    def next_offset(self) -> int:
        return self.batches[-1].last + 1 if self.batches else self.base

    @property
    def max_timestamp(self) -> int:
        return max((b.max_timestamp for b in self.batches), default=fmt.NO_TIMESTAMP)


def encoded_size(batch: MBatch) -> int:
    """Bytes `batch` takes once encoded (the cleaner rebuilds shrunk batches the same way)."""
    records = [fmt.RecordInput(r.key, r.value, r.headers, r.timestamp) for r in batch.records]
    offsets = [r.offset for r in batch.records]
    return len(fmt.encode_batch(records, compression=batch.codec, offsets=offsets))


def as_model(record: fmt.Record) -> MRecord:
    return MRecord(record.offset, record.key, record.value, record.headers, record.timestamp)


class Crash(Exception):
    """The process dies here."""


class Clock:
    """A hand-moved clock in whole seconds."""

    def __init__(self) -> None:
        self.ms = START_MS

    def __call__(self) -> float:
        return self.ms / 1000


class LogMachine(RuleBasedStateMachine):
    """Drive one PartitionLog and its model side by side; subclasses fix cleanup.policy."""

    policy: ClassVar[str] = "delete"

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="sluice-model-"))
        self.clock = Clock()
        self.segments = [MSegment(0)]
        self.log_start = self.hw = self.leo = 0
        self.epoch = 0
        self.cleaned_to = 0  # the next compaction's first dirty offset
        self.config = TopicConfig()
        self.log: PartitionLog | None = None

    # -- helpers -------------------------------------------------------------------------------

    @property
    def plog(self) -> PartitionLog:
        assert self.log is not None
        return self.log

    def open_log(self, **kwargs: Any) -> None:
        self.log = PartitionLog(self.root / "t-0", "t", 0, self.config, clock=self.clock, **kwargs)

    def batches(self) -> Iterator[MBatch]:
        for segment in self.segments:
            yield from segment.batches

    def visible(self, upper: int, start: int = 0) -> list[MRecord]:
        """Model records in [max(log start, start), upper)."""
        low = max(self.log_start, start)
        return [r for b in self.batches() for r in b.records if low <= r.offset < upper]

    def delete_prefix(self, count: int) -> None:
        """Drop the `count` oldest segments; the log start follows the first one left."""
        self.segments = self.segments[count:]
        self.log_start = max(self.log_start, self.segments[0].base)

    def cut_back(self) -> None:
        """After the log end moved back. Below the log start (a cut batch straddled it), the log
        restarts empty at the log start: offsets below it are never reused. Nothing past the
        end stays committed or clean."""
        if self.leo < self.log_start:
            self.segments = [MSegment(self.log_start)]
            self.leo = self.log_start
        self.hw = min(self.hw, self.leo)
        self.cleaned_to = min(self.cleaned_to, self.leo)

    def read_range(
        self, start: int, upper: int | None, next_size: Callable[[], int], min_one: bool = True
    ) -> list[MRecord]:
        """Read [start, upper or HW) with `read` in a loop, checking each batch's header.

        Without `min_one`, an empty answer must mean no data left or a first batch larger than
        max_bytes; the loop then reads that batch with `min_one`.
        """
        end = self.hw if upper is None else upper
        by_base = {b.base: b for b in self.batches()}
        out: list[MRecord] = []
        pos = start
        while pos < end:
            max_bytes = next_size()
            result = self.plog.read(pos, max_bytes, upper, min_one)
            assert (result.high_watermark, result.log_start_offset, result.log_end_offset) == (
                self.hw,
                self.log_start,
                self.leo,
            )
            data = result.data
            if not data and not min_one:
                data = self.plog.read(pos, max_bytes, upper).data
                assert not data or fmt.read_header(data).size > max_bytes
            if not data:
                break
            scanned = fmt.scan(data)
            assert scanned.error is None, scanned.error
            assert len(data) <= max_bytes or len(scanned.headers) == 1
            assert scanned.headers[0][1].last_offset >= pos
            for _, header in scanned.headers:
                batch = by_base[header.base_offset]
                assert header.last_offset < end
                assert (header.last_offset, header.partition_leader_epoch, header.size) == (
                    batch.last,
                    batch.epoch,
                    batch.size,
                )
                assert header.log_append_time == batch.log_append_time
            out.extend(as_model(r) for r in fmt.iter_records(data) if r.offset >= pos)
            pos = scanned.headers[-1][1].next_offset
        return out

    # -- setup ---------------------------------------------------------------------------------

    @initialize(
        segment_bytes=st.integers(300, 2000),
        index_interval=st.integers(0, 400),
        retention_ms=st.sampled_from([-1, 30_000, 120_000]),
        retention_bytes=st.sampled_from([-1, 600, 2000]),
        delete_retention_ms=st.sampled_from([0, 20_000, 24 * 3600 * 1000]),
        append_time=st.booleans(),
    )
    def open_new_log(
        self,
        segment_bytes: int,
        index_interval: int,
        retention_ms: int,
        retention_bytes: int,
        delete_retention_ms: int,
        append_time: bool,
    ) -> None:
        self.config = TopicConfig().with_overrides(
            {
                "cleanup.policy": self.policy,
                "segment.bytes": segment_bytes,
                "index.interval.bytes": index_interval,
                "retention.ms": retention_ms,
                "retention.bytes": retention_bytes,
                "delete.retention.ms": delete_retention_ms,
                "message.timestamp.type": "LogAppendTime" if append_time else "CreateTime",
            }
        )
        self.open_log()

    def teardown(self) -> None:
        if self.log is not None:
            self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)

    # -- appends -------------------------------------------------------------------------------

    def do_append(self, request: list[list[RecordSpec]], codec: int) -> None:
        now = self.clock.ms
        encoded = [
            fmt.encode_batch(
                [fmt.RecordInput(k, v, h, now + dt) for k, v, h, dt in specs], compression=codec
            )
            for specs in request
        ]
        data = bytearray(b"".join(encoded))
        info = self.plog.append_as_leader(data, self.epoch)

        active = self.segments[-1]
        config = self.config
        if active.batches and active.size + len(data) > config.segment_bytes:
            active = MSegment(self.leo)
            self.segments.append(active)
        offsets = itertools.count(self.leo)
        for specs, raw in zip(request, encoded, strict=True):
            records = [
                MRecord(next(offsets), k, v, h, now if config.log_append_time else now + dt)
                for k, v, h, dt in specs
            ]
            active.batches.append(
                MBatch(records, self.epoch, codec, config.log_append_time, len(raw))
            )
        first, self.leo = self.leo, active.next_offset
        expected_time = now if config.log_append_time else -1
        assert info[:4] == (first, self.leo - 1, self.leo - first, expected_time)

    def append_all(self, requests: list[Request], new_epoch: bool, commit: bool) -> None:
        """Append each request (maybe as a new leader epoch); with `commit`, then move the HW
        to the log end, as acks=all would."""
        self.epoch += new_epoch
        for codec, request in requests:
            self.do_append(request, codec)
        if commit:
            self.plog.advance_high_watermark(self.leo)
            self.hw = self.leo

    @rule(requests=requests_of(keyed_st), new_epoch=st.booleans(), commit=st.booleans())
    def append(self, requests: list[Request], new_epoch: bool, commit: bool) -> None:
        self.append_all(requests, new_epoch, commit)

    @precondition(lambda self: not self.config.compact)
    @rule(requests=requests_of(keyless_st), new_epoch=st.booleans(), commit=st.booleans())
    def append_keyless(self, requests: list[Request], new_epoch: bool, commit: bool) -> None:
        self.append_all(requests, new_epoch, commit)

    @rule(good=st.lists(keyed_st, min_size=1, max_size=3), keyless=st.booleans())
    def append_rejected(self, good: list[RecordSpec], keyless: bool) -> None:
        """A request whose second batch is bad (keyless on a compacted topic, or a CRC
        mismatch) is refused whole."""
        records = [fmt.RecordInput(k, v, h, self.clock.ms + dt) for k, v, h, dt in good]
        if keyless and self.config.compact:
            bad = fmt.encode_batch([fmt.RecordInput(None, b"v", [], self.clock.ms)])
        else:
            bad = fmt.encode_batch(records)
            bad[-1] ^= 0xFF
        with pytest.raises(InvalidRecord):
            self.plog.append_as_leader(fmt.encode_batch(records) + bad, self.epoch)

    # -- watermarks, truncation, deletion, reads -----------------------------------------------

    @rule(data=st.data())
    def advance_high_watermark(self, data: st.DataObject) -> None:
        """Move the HW to a batch boundary (as follower log ends are), or past the log end."""
        ends = {b.last + 1 for b in self.batches() if b.last + 1 > self.hw}
        target = data.draw(st.sampled_from(sorted(ends | {self.hw, self.leo + 2})))
        moved = self.plog.advance_high_watermark(target)
        new = min(target, self.leo)
        assert moved == (new > self.hw)
        self.hw = max(self.hw, new)

    @rule(data=st.data())
    def truncate_to(self, data: st.DataObject) -> None:
        """Truncate at the HW or in the tail above it: batches holding offsets >= target go."""
        tail = st.integers(max(self.hw, self.leo - 12), self.leo + 1)
        target = data.draw(st.just(self.hw) | tail)
        self.plog.truncate_to(target)
        if target >= self.leo:
            return
        kept = [s for s in self.segments if s.base < target] or [MSegment(target)]
        last = kept[-1]
        last.batches = [b for b in last.batches if b.last < target]
        self.segments = kept
        self.leo = last.next_offset
        self.cut_back()

    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        """DeleteRecords up to the HW moves the log start; beyond the HW it is refused."""
        before = data.draw(st.integers(0, self.hw + 2))
        if before > self.hw:
            with pytest.raises(OffsetOutOfRange):
                self.plog.delete_records(before)
            return
        assert self.plog.delete_records(before) == max(before, self.log_start)
        if before > self.log_start:
            self.log_start = before
            doomed = 0
            while doomed < len(self.segments) - 1 and self.segments[doomed + 1].base <= before:
                doomed += 1
            self.delete_prefix(doomed)

    @rule(data=st.data(), to_end=st.booleans(), min_one=st.booleans())
    def read_from(self, data: st.DataObject, to_end: bool, min_one: bool) -> None:
        """Reads from any offset in the log (mid-batch, in compaction gaps), each with its own
        max_bytes, up to the HW or the log end, return the model's records from there."""
        start = data.draw(st.integers(self.log_start, self.leo))
        upper = self.leo if to_end else None
        records = self.read_range(start, upper, lambda: data.draw(st.integers(1, 1500)), min_one)
        assert records == self.visible(self.leo if to_end else self.hw, start)

    # -- time, retention, compaction -----------------------------------------------------------

    @rule(seconds=st.integers(1, 40))
    def tick(self, seconds: int) -> None:
        self.clock.ms += seconds * 1000

    @rule(
        limits=st.none()
        | st.tuples(st.sampled_from([-1, 10_000, 60_000]), st.sampled_from([-1, 0, 500, 1500]))
    )
    def apply_retention(self, limits: tuple[int, int] | None) -> None:
        """Oldest closed segments go while below the log start, or (delete policy, wholly below
        the HW) past retention.ms or beyond retention.bytes. `limits` first sets those two."""
        if limits is not None:
            retention_ms, retention_bytes = limits
            self.config = self.config.with_overrides(
                {"retention.ms": retention_ms, "retention.bytes": retention_bytes}
            )
            self.plog.update_config(self.config)
        config = self.config
        excess = sum(s.size for s in self.segments) - config.retention_bytes
        doomed = 0
        while doomed < len(self.segments) - 1:
            segment, following = self.segments[doomed], self.segments[doomed + 1].base
            if following <= self.log_start:
                pass
            elif not config.delete or following > self.hw:
                break
            elif config.retention_ms >= 0 and (
                segment.max_timestamp < self.clock.ms - config.retention_ms
            ):
                pass
            elif not (config.retention_bytes >= 0 and excess - segment.size >= 0):
                break
            excess -= segment.size
            doomed += 1
        assert self.plog.apply_retention() == doomed
        self.delete_prefix(doomed)

    def compaction_plan(self, first_dirty: int) -> tuple[int, Callable[[MRecord], bool]] | None:
        """A pass from `first_dirty`: the cleaned range end and which records survive it, or
        None when no closed segment wholly below the HW holds a dirty offset."""
        cleanable = []
        for segment, following in itertools.pairwise(self.segments):
            if following.base > self.hw:
                break
            cleanable.append(segment)
        end = max(
            [s.next_offset for s in cleanable if s.next_offset > first_dirty],
            default=first_dirty,
        )
        if end <= first_dirty:
            return None
        latest = {r.key: r.offset for b in self.batches() for r in b.records if r.offset < end}
        horizon = self.clock.ms - self.config.delete_retention_ms

        def survives(r: MRecord) -> bool:
            return latest[r.key] == r.offset and not (r.value is None and r.timestamp < horizon)

        return end, survives

    @staticmethod
    def clean_segment(segment: MSegment, survives: Callable[[MRecord], bool]) -> int:
        """Drop the records of `segment` that do not survive (offsets kept); return how many."""
        removed = 0
        kept_batches = []
        for batch in segment.batches:
            kept = [r for r in batch.records if survives(r)]
            removed += len(batch.records) - len(kept)
            if kept:
                shrunk = MBatch(kept, batch.epoch, batch.codec, batch.log_append_time, batch.size)
                if kept != batch.records:
                    shrunk.size = encoded_size(shrunk)
                kept_batches.append(shrunk)
        segment.batches = kept_batches
        return removed

    @precondition(lambda self: self.config.compact)
    @rule(from_zero=st.booleans())
    def compact(self, from_zero: bool) -> None:
        """Below the cleaned range end, keep the latest record per key; drop old tombstones."""
        first_dirty = 0 if from_zero else self.cleaned_to
        plan = self.compaction_plan(first_dirty)
        stats = clean(self.plog, first_dirty, now_ms=self.clock.ms, force=True)
        if plan is None:
            assert stats is None
            return
        end, survives = plan
        removed = [self.clean_segment(s, survives) for s in self.segments if s.base < end]
        assert stats is not None
        assert (stats.records_removed, stats.segments_rewritten, stats.cleaned_up_to) == (
            sum(removed),
            sum(1 for r in removed if r),
            end,
        )
        self.cleaned_to = end

    @precondition(lambda self: self.config.compact)
    @rule(data=st.data())
    def crash_while_compacting(self, data: st.DataObject) -> None:
        """Kill a pass at one of a segment's file renames, then recover: every segment is found
        either cleaned (once its `.log.swap` exists) or untouched."""
        plan = self.compaction_plan(self.cleaned_to)
        if plan is None:
            return
        end, survives = plan
        dirty = [
            s
            for s in self.segments
            if s.base < end and not all(survives(r) for b in s.batches for r in b.records)
        ]
        if not dirty:
            return
        victim = data.draw(st.sampled_from(dirty))
        name = segment_name(victim.base)
        # (source, destination) of the rename that dies; only the last two follow the log swap
        fatal, cleaned = data.draw(
            st.sampled_from(
                [
                    ((f"{name}.log.cleaned", f"{name}.log.swap"), False),
                    ((f"{name}.index.swap", f"{name}.index"), True),
                    ((f"{name}.log.swap", f"{name}.log"), True),
                ]
            )
        )
        real_replace = os.replace

        def replace(src: str | Path, dst: str | Path) -> None:
            if (Path(src).name, Path(dst).name) == fatal:
                raise Crash(f"killed renaming {src}")
            real_replace(src, dst)

        with mock.patch.object(os, "replace", replace), pytest.raises(Crash):
            clean(self.plog, self.cleaned_to, now_ms=self.clock.ms, force=True)
        for segment in self.segments:
            if segment is victim:
                if cleaned:
                    self.clean_segment(segment, survives)
                break
            self.clean_segment(segment, survives)
        self.reopen_after_crash(data)

    # -- rolls, flushes, reopening -------------------------------------------------------------

    @rule()
    def roll(self) -> None:
        segment = self.plog.roll()
        if self.segments[-1].batches:
            self.segments.append(MSegment(self.leo))
        assert segment.base_offset == self.segments[-1].base

    @rule()
    def reopen_clean(self) -> None:
        """Close, then open with the checkpointed recovery point, log start and HW."""
        old = self.plog
        old.close()
        assert old.recovery_point == self.leo
        self.open_log(
            recovery_point=old.recovery_point,
            log_start_offset=old.log_start_offset,
            high_watermark=old.high_watermark,
            trust_files=True,
        )
        assert not self.plog.recovery.errors

    def reopen_after_crash(self, data: st.DataObject, torn: int = 0) -> None:
        """Drop the log unclosed and open it untrusted, from the log's recovery point or 0 and a
        HW checkpoint that may lag (any committed batch boundary); `torn` bytes must be cut."""
        recovery_point = data.draw(st.sampled_from([0, self.plog.recovery_point]))
        boundaries = {b.last + 1 for b in self.batches() if self.log_start < b.last + 1 < self.hw}
        hw_checkpoint = data.draw(st.sampled_from(sorted(boundaries | {self.log_start, self.hw})))
        self.log = None
        self.open_log(
            recovery_point=recovery_point,
            log_start_offset=self.log_start,
            high_watermark=hw_checkpoint,
        )
        assert self.plog.recovery.truncated_bytes == torn
        self.leo = self.segments[-1].next_offset
        self.hw = max(hw_checkpoint, self.log_start)
        self.cut_back()

    @rule(data=st.data())
    def crash_and_recover(self, data: st.DataObject) -> None:
        """Maybe flush, maybe damage the tail, crash and recover.

        Damage is garbage after the last batch, or the active segment cut anywhere (as unflushed
        pages lost in a machine crash): the batches past the cut are lost.
        """
        if data.draw(st.booleans()):
            self.plog.flush()
            assert self.plog.recovery_point == self.leo
        path = self.plog.segments[-1].path
        active = self.segments[-1]
        torn = 0
        tear = data.draw(st.sampled_from(["none", "garbage", "cut"]))
        if tear == "garbage":
            torn = data.draw(st.integers(1, fmt.HEADER_SIZE - 1))
            with open(path, "ab") as f:
                f.write(b"\x07" * torn)
        elif tear == "cut" and active.batches:
            cut = data.draw(st.integers(0, active.size - 1))
            while active.size > cut:
                active.batches.pop()
            torn = cut - active.size  # the bytes of a partly written batch left behind
            with open(path, "r+b") as f:
                f.truncate(cut)
        self.reopen_after_crash(data, torn)

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def offsets_and_segments_match(self) -> None:
        log = self.plog
        assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (
            self.log_start,
            self.hw,
            self.leo,
        )
        assert self.log_start <= self.hw <= self.leo
        assert [(s.base_offset, s.next_offset, s.size, s.max_timestamp) for s in log.segments] == [
            (s.base, s.next_offset, s.size, s.max_timestamp) for s in self.segments
        ]

    @invariant()
    def reads_match(self) -> None:
        """Committed and uncommitted reads return the model's records, in offset order."""
        sizes = itertools.cycle(READ_SIZES)
        committed = self.read_range(self.log_start, None, lambda: next(sizes))
        assert committed == self.visible(self.hw)
        offsets = [r.offset for r in committed]
        assert offsets == sorted(set(offsets))
        uncommitted = self.read_range(self.log_start, self.leo, lambda: next(sizes))
        assert uncommitted == self.visible(self.leo)
        assert not self.plog.read(self.leo, 1 << 20).data
        for outside in (self.log_start - 1, self.leo + 1):
            if outside >= 0:
                with pytest.raises(OffsetOutOfRange):
                    self.plog.read(outside, 1 << 20)

    @invariant()
    def timestamps_match(self) -> None:
        """offset_for_timestamp finds the first committed record at or after the probe."""
        stamps = sorted({r.timestamp for b in self.batches() for r in b.records})
        if not stamps:
            return
        probes = [*stamps[:: max(1, len(stamps) // 8)], stamps[0] - 1, stamps[-1] + 1]
        committed = self.visible(self.hw)
        for probe in probes:
            expected = next(
                ((r.offset, r.timestamp) for r in committed if r.timestamp >= probe), None
            )
            assert self.plog.offset_for_timestamp(probe) == expected, probe

    @invariant()
    def epochs_match(self) -> None:
        """The epoch cache is ordered, within the log, and names each stored batch's epoch."""
        cache = self.plog.epoch_cache
        entries = cache.entries
        assert all(
            a.epoch < b.epoch and a.start_offset < b.start_offset
            for a, b in itertools.pairwise(entries)
        )
        assert all(self.log_start <= e.start_offset <= self.leo for e in entries)
        for batch in self.batches():
            if batch.last >= self.log_start:
                assert cache.epoch_for_offset(max(batch.base, self.log_start)) == batch.epoch


class CompactedLogMachine(LogMachine):
    policy = "compact"


class CompactDeleteLogMachine(LogMachine):
    policy = "compact,delete"


_SETTINGS = deterministic(80, HealthCheck.filter_too_much, stateful_step_count=50)

TestDeletePolicy = LogMachine.TestCase
TestDeletePolicy.settings = _SETTINGS
TestCompactPolicy = CompactedLogMachine.TestCase
TestCompactPolicy.settings = _SETTINGS
TestCompactDeletePolicy = CompactDeleteLogMachine.TestCase
TestCompactDeletePolicy.settings = _SETTINGS
