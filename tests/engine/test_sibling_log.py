"""Reading a log another process writes (engine.sibling_log) within the watermarks it publishes
(engine.watermarks): the same bytes as the log's own read, or None, never anything else."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine import cleaner, sibling_log
from engine.log import PartitionLog
from engine.sibling_log import SiblingLog, SiblingLogs
from engine.watermarks import FILE_NAME, WatermarkFile, WatermarkReader
from tests.engine.conftest import FakeClock, LogFactory, batch_of

SMALL_SEGMENTS = {"segment.bytes": 400, "index.interval.bytes": 1}


def fill(log: PartitionLog, batches: int, per_batch: int = 3, size: int = 20) -> None:
    for b in range(batches):
        log.append_as_leader(batch_of([b"%04d" % b + b"x" * size] * per_batch), 0)
    log.advance_high_watermark(log.log_end_offset)


def read_beside(
    reader: SiblingLog, offset: int, max_bytes: int = 64 * 1024, max_records: int | None = None
) -> bytes | None:
    marks = reader.watermarks()
    assert marks is not None
    data = reader.read(offset, max_bytes, max_records, marks)
    return None if data is None else bytes(data)


def read_own(
    log: PartitionLog, offset: int, max_bytes: int = 64 * 1024, max_records: int | None = None
) -> bytes:
    return bytes(log.read(offset, max_bytes, max_records=max_records).data)


def offsets_of(reader: WatermarkReader) -> tuple[int, ...] | None:
    """The three offsets a reader sees (not the layout generation), if any."""
    marks = reader.read()
    return None if marks is None else marks[:3]


def test_the_watermarks_file_round_trips_and_is_followed_when_replaced(tmp_path: Path) -> None:
    reader = WatermarkReader(tmp_path)
    assert reader.read() is None  # no file: nothing published
    writer = WatermarkFile(tmp_path)
    assert offsets_of(reader) == (0, 0, 0)  # a new file says nothing is committed
    writer.publish(10, 2, 4)
    assert offsets_of(reader) == (10, 2, 4)
    writer.publish(11, 2, 4)
    assert offsets_of(reader) == (11, 2, 4)
    writer.close()
    os.unlink(tmp_path / FILE_NAME)  # the topic deleted ...
    assert reader.read() is None
    again = WatermarkFile(tmp_path)  # ... and created again: the reader maps the new file
    again.publish(3, 0, 0)
    assert offsets_of(reader) == (3, 0, 0)
    again.close()


def test_a_torn_publish_is_never_read(tmp_path: Path) -> None:
    """While the sequence number is odd (a write under way), no offsets are returned."""
    writer = WatermarkFile(tmp_path)
    writer.publish(5, 0, 0)
    with open(tmp_path / FILE_NAME, "r+b") as raw:
        raw.write((7).to_bytes(8, "little"))  # odd: as if the writer stopped mid-update
    assert WatermarkReader(tmp_path).read() is None
    writer.publish(6, 0, 0)  # the writer's next update makes it even again
    assert offsets_of(WatermarkReader(tmp_path)) == (6, 0, 0)
    writer.close()


def test_a_log_publishes_its_watermarks_only_when_asked(make_log: LogFactory) -> None:
    log = make_log()
    fill(log, 2)
    assert not (log.directory / FILE_NAME).exists()
    log.close()
    published = make_log(publish_watermarks=True, high_watermark=6)
    reader = WatermarkReader(published.directory)
    assert offsets_of(reader) == (6, 0, 0)
    marks = reader.read()
    assert marks is not None and marks.leader_epoch == -1  # opened: it leads in no epoch yet
    published.publish_leadership(4)
    marks = reader.read()
    assert marks is not None and marks.leader_epoch == 4 and marks.high_watermark == 6
    published.close()


def test_every_read_below_the_high_watermark_is_the_logs_own(make_log: LogFactory) -> None:
    log = make_log(SMALL_SEGMENTS, publish_watermarks=True)
    fill(log, 30)
    log.append_as_leader(batch_of([b"not yet committed"]), 0)  # above the high watermark
    assert len(log.segments) > 5
    reader = SiblingLog(log.directory)
    for offset in range(log.log_start_offset, log.high_watermark):
        for max_bytes in (1, 100, 300, 64 * 1024):
            for max_records in (None, 1, 4, 50):
                beside = read_beside(reader, offset, max_bytes, max_records)
                assert beside == read_own(log, offset, max_bytes, max_records), (
                    offset,
                    max_bytes,
                    max_records,
                )
    assert read_beside(reader, log.high_watermark) is None  # the leader waits, or answers
    assert read_beside(reader, log.log_end_offset + 5) is None
    log.close()


def test_it_follows_new_segments_appends_and_a_moved_log_start(make_log: LogFactory) -> None:
    log = make_log(SMALL_SEGMENTS, publish_watermarks=True)
    fill(log, 3)
    reader = SiblingLog(log.directory)
    assert read_beside(reader, 0) == read_own(log, 0)
    fill(log, 20)  # new segments the reader has not listed yet
    last = log.high_watermark - 1
    assert read_beside(reader, last) == read_own(log, last)
    start = log.delete_records(25)
    assert start == 25
    assert read_beside(reader, 10) is None  # below the log start: the leader answers 416
    assert read_beside(reader, 25) == read_own(log, 25)
    log.close()


def test_retention_deleting_a_segment_under_a_reader_is_never_misread(
    make_log: LogFactory,
) -> None:
    log = make_log({**SMALL_SEGMENTS, "retention.bytes": 1000}, publish_watermarks=True)
    fill(log, 30)
    reader = SiblingLog(log.directory)
    marks = reader.watermarks()
    assert marks is not None
    assert reader.read(0, 64 * 1024, None, marks) is not None
    assert log.apply_retention() > 0
    # The stale watermarks still say offset 0 is there: its file is gone, so None.
    assert reader.read(0, 64 * 1024, None, marks) is None
    assert read_beside(reader, 0) is None  # the fresh ones say it is below the log start
    first = log.log_start_offset
    assert read_beside(reader, first) == read_own(log, first)
    log.close()


def test_a_compacted_segment_swapped_in_is_read_from_its_new_file(
    make_log: LogFactory, clock: FakeClock
) -> None:
    log = make_log(
        {"cleanup.policy": "compact", "segment.bytes": 250, "index.interval.bytes": 1},
        publish_watermarks=True,
    )
    for i in range(40):
        log.append_as_leader(batch_of([b"v%02d" % i + b"." * 40], keys=[b"k%d" % (i % 4)]), 0)
        log.advance_high_watermark(log.log_end_offset)
    reader = SiblingLog(log.directory)
    before = {o: read_beside(reader, o) for o in range(log.high_watermark)}
    assert all(before.values())
    assert cleaner.clean(log, 0, force=True) is not None
    for offset in range(log.high_watermark):
        assert read_beside(reader, offset) == read_own(log, offset), offset
    log.close()


def test_a_tail_truncated_and_written_again_is_read_as_it_is_now(make_log: LogFactory) -> None:
    """A remembered position whose file was rewritten in place is not trusted."""
    log = make_log(publish_watermarks=True)
    fill(log, 10, per_batch=1)
    reader = SiblingLog(log.directory)
    for offset in range(10):
        assert read_beside(reader, offset) == read_own(log, offset)
    log.truncate_to(4)  # a follower's divergent tail (the reader remembered positions in it)
    fill(log, 2, per_batch=5, size=3)  # other batches at the same positions
    for offset in range(log.high_watermark):
        assert read_beside(reader, offset) in (None, read_own(log, offset)), offset
    assert read_beside(reader, 8) == read_own(log, 8)  # and, once stale, read again
    log.close()


def test_a_corrupt_batch_is_left_to_the_log_itself(make_log: LogFactory) -> None:
    log = make_log(publish_watermarks=True)
    fill(log, 4)
    path = log.segments[-1].path
    with open(path, "r+b") as raw:
        raw.seek(os.path.getsize(path) - 3)
        raw.write(b"!!!")
    reader = SiblingLog(log.directory)
    assert read_beside(reader, 9) is None  # the last batch fails its CRC
    assert read_beside(reader, 0) == read_own(log, 0)
    log.close()


def test_a_long_walk_stops_and_the_next_read_goes_on_from_where_it_stopped(
    make_log: LogFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sibling_log, "MAX_WALK", 16)
    log = make_log(publish_watermarks=True)
    fill(log, 100, per_batch=1)
    reader = SiblingLog(log.directory)
    answers = [read_beside(reader, 99) for _ in range(10)]
    assert answers[0] is None  # 99 batches to walk, 16 at a time
    assert answers[-1] == read_own(log, 99)
    log.close()


def test_the_logs_kept_open_are_bounded(tmp_path: Path) -> None:
    logs = SiblingLogs(capacity=2)
    first = logs.get(tmp_path / "a")
    logs.get(tmp_path / "b")
    assert logs.get(tmp_path / "a") is first
    logs.get(tmp_path / "c")  # evicts b, the least recently read
    assert logs.get(tmp_path / "a") is first
    assert len(logs._logs) == 2


def test_the_layout_generation_is_odd_while_files_change_and_moves_on_after(
    make_log: LogFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read that began before a truncation and ends after it is not kept: the files may
    have changed in place under it (compaction and truncation reuse names and inodes)."""
    log = make_log(publish_watermarks=True)
    fill(log, 6, per_batch=1)
    reader = SiblingLog(log.directory)
    marks = reader.watermarks()
    assert marks is not None and marks.generation % 2 == 0
    seen: list[int] = []
    segment_read = SiblingLog._read_segment

    def truncating_meanwhile(self: SiblingLog, *args: object) -> memoryview | None:
        data = segment_read(self, *args)  # type: ignore[arg-type]
        log.truncate_to(3)
        during = self.watermarks()
        assert during is not None
        seen.append(during.generation)
        return data

    monkeypatch.setattr(SiblingLog, "_read_segment", truncating_meanwhile)
    assert reader.read(4, 64 * 1024, None, marks) is None  # read whole, but not kept
    assert seen[0] > marks.generation and seen[0] % 2 == 0
    monkeypatch.undo()
    log.advance_high_watermark(log.log_end_offset)
    assert read_beside(reader, 2) == read_own(log, 2)
    log.close()
    reopened = make_log(publish_watermarks=True, high_watermark=3)
    again = reopened.directory
    fresh = WatermarkReader(again).read()
    assert fresh is not None and fresh.generation > seen[0]  # recovery may have cut a tail
    reopened.close()


def test_nothing_is_read_while_the_files_change(make_log: LogFactory) -> None:
    log = make_log(publish_watermarks=True)
    fill(log, 3)
    reader = SiblingLog(log.directory)
    assert read_beside(reader, 0) == read_own(log, 0)
    with log._changing_files():  # as truncate_to and a compaction swap hold it
        assert read_beside(reader, 0) is None
    assert read_beside(reader, 0) == read_own(log, 0)
    log.close()


def test_a_deleted_log_leaves_its_mapped_file_saying_files_change(make_log: LogFactory) -> None:
    """A reader that mapped the file of a topic deleted since reads nothing more from it, even
    before it looks at the path again (a topic created again has a new file there)."""
    log = make_log(publish_watermarks=True)
    fill(log, 3)
    reader = SiblingLog(log.directory)
    assert read_beside(reader, 0) == read_own(log, 0)
    log.delete()
    stale = reader.watermark_file.read(same_file=True)
    assert stale is not None and stale.generation % 2 == 1
    assert reader.read(0, 64 * 1024, None, stale) is None
    assert reader.watermarks() is None  # and the path names no file now
