"""Model-based test of reading a log beside the process that writes it (engine.sibling_log).

Hypothesis drives one PartitionLog (publishing its watermarks, small segments, an index entry
per batch) through appends, high-watermark moves (to batch boundaries or into a batch), rolls,
DeleteRecords, retention, truncation of the tail above the high watermark followed by new
appends and, on a compacted topic, compaction. One SiblingLog reads the same directory all
along, keeping what it remembered between steps. After every step, reads from around the log
(below its start to past its end, with several max_bytes and max_records) must answer None or
exactly the log's own bytes; and below the high watermark, where the log has data, they must
answer it: at once if no segment file was ever deleted, cut back or swapped, else after one
retry at most (the first read may find what the reader remembered stale and drop it). A fresh
reader must answer it at once.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from pathlib import Path
from typing import ClassVar
from unittest import mock

from hypothesis import HealthCheck
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from engine import sibling_log
from engine.cleaner import clean
from engine.config import TopicConfig
from engine.errors import OffsetOutOfRange
from engine.log import PartitionLog
from engine.sibling_log import SiblingLog
from tests.engine.conftest import FakeClock, batch_of
from tests.hypothesis_runs import deterministic

KEYS = (b"a", b"b", b"c", b"d", b"e")
MAX_BYTES = (1, 100, 4096, 65536)
MAX_RECORDS = (None, 1, 3, 100)
READS = list(itertools.product(MAX_BYTES, MAX_RECORDS))

Record = tuple[bytes | None, bytes | None]  # (key, value)

values_st = st.binary(max_size=60)
maybe_keyed_st = st.tuples(st.none() | st.sampled_from(KEYS), values_st)
keyed_st = st.tuples(st.sampled_from(KEYS), st.none() | values_st)  # None: a tombstone


def appends(records: st.SearchStrategy[Record]) -> st.SearchStrategy[list[list[Record]]]:
    """One to three batches of one to five records."""
    return st.lists(st.lists(records, min_size=1, max_size=5), min_size=1, max_size=3)


class SiblingMachine(RuleBasedStateMachine):
    """One log written by its own code, one reader beside it; subclasses fix cleanup.policy."""

    policy: ClassVar[str] = "delete"

    def __init__(self) -> None:
        super().__init__()
        # Every read walks as far as it needs: a None is then never the walk limit's doing.
        self.walk_patch = mock.patch.object(sibling_log, "MAX_WALK", 1 << 40)
        self.walk_patch.start()
        self.root = Path(tempfile.mkdtemp(prefix="sluice-siblings-"))
        self.clock = FakeClock()
        self.config = TopicConfig()
        self.log: PartitionLog | None = None
        self.reader = SiblingLog(self.root / "t-0")
        # Segment files were deleted, cut back or swapped: what the reader remembers (where
        # batches start, which segments there are) may be stale, so a read may take a retry.
        self.disturbed = False
        self.checks = 0  # rotates which read sizes the invariant uses

    @property
    def plog(self) -> PartitionLog:
        assert self.log is not None
        return self.log

    @property
    def records(self) -> st.SearchStrategy[Record]:
        return keyed_st if self.config.compact else maybe_keyed_st

    # -- setup ---------------------------------------------------------------------------------

    @initialize(
        segment_bytes=st.integers(300, 600),
        retention_bytes=st.sampled_from([-1, 400, 1200]),
    )
    def open_log(self, segment_bytes: int, retention_bytes: int) -> None:
        self.config = TopicConfig().with_overrides(
            {
                "cleanup.policy": self.policy,
                "segment.bytes": segment_bytes,
                "index.interval.bytes": 1,
                "retention.bytes": retention_bytes,
            }
        )
        self.log = PartitionLog(
            self.root / "t-0", "t", 0, self.config, clock=self.clock, publish_watermarks=True
        )

    def teardown(self) -> None:
        try:
            if self.log is not None:
                self.log.close()
        finally:
            self.walk_patch.stop()
            shutil.rmtree(self.root, ignore_errors=True)

    # -- the writer's side ---------------------------------------------------------------------

    def do_append(self, batches: list[list[Record]]) -> None:
        for records in batches:
            keys = [k for k, _ in records]
            values = [v for _, v in records]
            self.plog.append_as_leader(batch_of(values, keys), 0)

    @precondition(lambda self: not self.config.compact)
    @rule(batches=appends(maybe_keyed_st), commit=st.booleans())
    def append(self, batches: list[list[Record]], commit: bool) -> None:
        self.do_append(batches)
        if commit:
            self.plog.advance_high_watermark(self.plog.log_end_offset)

    @precondition(lambda self: self.config.compact)
    @rule(batches=appends(keyed_st), commit=st.booleans())
    def append_keyed(self, batches: list[list[Record]], commit: bool) -> None:
        self.do_append(batches)
        if commit:
            self.plog.advance_high_watermark(self.plog.log_end_offset)

    @precondition(lambda self: self.plog.high_watermark < self.plog.log_end_offset)
    @rule(data=st.data())
    def advance_high_watermark(self, data: st.DataObject) -> None:
        """To any offset up to the log end: a batch boundary, the end, or inside a batch."""
        log = self.plog
        target = data.draw(
            st.integers(log.high_watermark + 1, log.log_end_offset) | st.just(log.log_end_offset),
            label="high watermark",
        )
        assert log.advance_high_watermark(target)

    @rule()
    def roll(self) -> None:
        self.plog.roll()

    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        log = self.plog
        before = data.draw(
            st.integers(log.log_start_offset, log.high_watermark), label="delete before"
        )
        segments = len(log.segments)
        assert log.delete_records(before) == max(before, log.log_start_offset)
        if len(log.segments) < segments:
            self.disturbed = True

    @rule(retention_bytes=st.none() | st.sampled_from([-1, 0, 300, 800]))
    def apply_retention(self, retention_bytes: int | None) -> None:
        if retention_bytes is not None:
            self.config = self.config.with_overrides({"retention.bytes": retention_bytes})
            self.plog.update_config(self.config)
        if self.plog.apply_retention():
            self.disturbed = True

    @rule(data=st.data())
    def truncate_and_append(self, data: st.DataObject) -> None:
        """Drop a divergent tail above the high watermark, then write other batches there."""
        log = self.plog
        target = data.draw(st.integers(log.high_watermark, log.log_end_offset), label="truncate to")
        end = log.log_end_offset
        log.truncate_to(target)
        if log.log_end_offset < end:
            self.disturbed = True
        self.do_append(data.draw(appends(self.records), label="appended after"))
        if data.draw(st.booleans(), label="commit"):
            log.advance_high_watermark(log.log_end_offset)

    def do_compact(self) -> None:
        stats = clean(self.plog, 0, now_ms=self.clock.ms, force=True)
        if stats is not None and stats.segments_rewritten:
            self.disturbed = True

    @precondition(lambda self: self.config.compact)
    @rule()
    def compact(self) -> None:
        self.do_compact()

    @precondition(lambda self: self.config.compact)
    @rule(batches=appends(keyed_st))
    def supersede_and_compact(self, batches: list[list[Record]]) -> None:
        """Newer values for some keys, committed and rolled, then a pass: the same segments are
        rewritten pass after pass (each time into a new file, maybe under a reused inode)."""
        self.do_append(batches)
        self.plog.advance_high_watermark(self.plog.log_end_offset)
        self.plog.roll()
        self.do_compact()

    # -- the reader's side ---------------------------------------------------------------------

    def own_read(self, offset: int, max_bytes: int, max_records: int | None) -> bytes | None:
        """The log's own answer; None where it refuses the offset."""
        try:
            return bytes(self.plog.read(offset, max_bytes, max_records=max_records).data)
        except OffsetOutOfRange:
            return None

    def check_read(
        self, offset: int, max_bytes: int, max_records: int | None, fresh: bool = False
    ) -> None:
        log = self.plog
        reader = SiblingLog(log.directory) if fresh else self.reader
        marks = reader.watermarks()
        assert marks is not None and marks[:3] == (
            log.high_watermark,
            log.log_start_offset,
            log.local_log_start_offset,
        )
        assert marks.generation % 2 == 0  # no file change under way between steps
        own = self.own_read(offset, max_bytes, max_records)

        def beside() -> bytes | None:
            data = reader.read(offset, max_bytes, max_records, marks)
            return None if data is None else bytes(data)

        answer = beside()
        where = (offset, max_bytes, max_records, marks, log.log_end_offset, fresh)
        assert answer is None or answer == own, where
        inside = marks.local_log_start_offset <= offset < marks.high_watermark
        if not inside:
            assert answer is None, where
            return
        if answer is None and own and self.disturbed and not fresh:
            answer = beside()  # the first read found stale positions and dropped them
            assert answer is None or answer == own, where
        if own:
            assert answer == own, where

    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        log = self.plog
        for _ in range(data.draw(st.integers(1, 4), label="reads")):
            offset = data.draw(
                st.integers(log.log_start_offset - 2, log.log_end_offset + 2), label="offset"
            )
            max_bytes = data.draw(st.sampled_from(MAX_BYTES), label="max_bytes")
            max_records = data.draw(st.sampled_from(MAX_RECORDS), label="max_records")
            self.check_read(offset, max_bytes, max_records)

    @invariant()
    def reads_match(self) -> None:
        """Every offset from below the log start to past the log end, each with read sizes
        that rotate from step to step; one offset with a reader that remembers nothing yet."""
        log = self.plog
        start, hw, end = log.log_start_offset, log.high_watermark, log.log_end_offset
        self.checks += 1
        for offset in range(max(start - 2, 0), end + 3):
            max_bytes, max_records = READS[(self.checks + 5 * offset) % len(READS)]
            self.check_read(offset, max_bytes, max_records)
        if start < hw:
            max_bytes, max_records = READS[self.checks % len(READS)]
            self.check_read(start + self.checks % (hw - start), max_bytes, max_records, True)


class CompactedSiblingMachine(SiblingMachine):
    policy = "compact"


_SETTINGS = deterministic(60, HealthCheck.filter_too_much, stateful_step_count=30)

TestDeletePolicy = SiblingMachine.TestCase
TestDeletePolicy.settings = _SETTINGS
TestCompactPolicy = CompactedSiblingMachine.TestCase
TestCompactPolicy.settings = _SETTINGS
