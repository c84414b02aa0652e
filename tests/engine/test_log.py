"""PartitionLog behaviour: appends, reads, rolls, watermarks, truncation, retention, flush."""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Iterator

import pytest

from engine import batch as fmt
from engine import checkpoint
from engine.config import TopicConfig
from engine.errors import (
    InvalidRecord,
    OffsetMismatch,
    OffsetOutOfRange,
    RecordTooLarge,
)
from engine.index import PENDING_MAX, OffsetIndex
from engine.log import PartitionLog
from engine.watermarks import WatermarkReader
from tests.engine.conftest import FakeClock, LogFactory, batch_of, read_all


def fill(log: PartitionLog, batches: int, per_batch: int = 2, size: int = 20) -> None:
    for b in range(batches):
        log.append_as_leader(batch_of([b"%04d" % b + b"x" * size] * per_batch), 0)
    log.advance_high_watermark(log.log_end_offset)


def test_leader_append_assigns_consecutive_offsets(make_log: LogFactory) -> None:
    log = make_log()
    first = log.append_as_leader(batch_of([b"a", b"b", b"c"]), 0)
    second = log.append_as_leader(batch_of([b"d"]), 0)
    assert (first.first_offset, first.last_offset, first.record_count) == (0, 2, 3)
    assert (second.first_offset, second.last_offset) == (3, 3)
    assert log.log_end_offset == 4
    assert log.high_watermark == 0
    log.advance_high_watermark(10)
    assert log.high_watermark == 4
    assert [(r.offset, r.value) for r in read_all(log)] == [
        (0, b"a"),
        (1, b"b"),
        (2, b"c"),
        (3, b"d"),
    ]


def test_several_batches_in_one_append(make_log: LogFactory) -> None:
    log = make_log()
    info = log.append_as_leader(batch_of([b"a", b"b"]) + batch_of([b"c"]), 3)
    assert (info.first_offset, info.last_offset, info.record_count) == (0, 2, 3)
    headers = fmt.scan(log.read(0, 10_000, upper_offset=3).data).headers
    assert [(h.base_offset, h.partition_leader_epoch) for _, h in headers] == [(0, 3), (2, 3)]
    assert log.epoch_cache.latest_epoch == 3


def test_reads_stop_at_the_high_watermark(make_log: LogFactory) -> None:
    log = make_log()
    log.append_as_leader(batch_of([b"a"]), 0)
    log.advance_high_watermark(1)
    log.append_as_leader(batch_of([b"b"]), 0)
    assert [r.value for r in fmt.iter_records(log.read(0, 10_000).data)] == [b"a"]
    assert not log.read(1, 10_000).data
    upper = log.read(1, 10_000, upper_offset=log.log_end_offset).data
    assert [r.value for r in fmt.iter_records(upper)] == [b"b"]


def test_out_of_range_offsets(make_log: LogFactory) -> None:
    log = make_log()
    fill(log, 2)
    assert not log.read(4, 100).data
    for bad in (-1, 5):
        with pytest.raises(OffsetOutOfRange) as err:
            log.read(bad, 100)
        assert (err.value.log_start_offset, err.value.log_end_offset) == (0, 4)


def test_max_bytes_returns_whole_batches_and_at_least_one(make_log: LogFactory) -> None:
    log = make_log()
    fill(log, 5, per_batch=3, size=50)
    size = fmt.read_header(log.read(0, 10).data).size
    assert len(log.read(0, 10).data) == size
    assert len(log.read(0, 10, min_one=False).data) == 0
    assert len(log.read(0, size * 2 + 5).data) == size * 2
    mid = log.read(4, 10_000).data
    assert fmt.read_header(mid).base_offset == 3


def test_rejected_batches_leave_the_log_unchanged(make_log: LogFactory) -> None:
    log = make_log({"max.message.bytes": 200})
    log.append_as_leader(batch_of([b"ok"]), 0)
    before = log.segments[-1].path.read_bytes()
    corrupt = batch_of([b"x"])
    corrupt[-1] ^= 1
    with pytest.raises(InvalidRecord, match="CRC"):
        log.append_as_leader(batch_of([b"fine"]) + corrupt, 0)
    with pytest.raises(RecordTooLarge, match=r"max\.message\.bytes"):
        log.append_as_leader(batch_of([b"y" * 300]), 0)
    with pytest.raises(InvalidRecord):
        log.append_as_leader(b"", 0)
    with pytest.raises(InvalidRecord):
        log.append_as_leader(batch_of([b"a"])[:-3], 0)
    assert log.segments[-1].path.read_bytes() == before
    assert log.log_end_offset == 1


def test_compacted_topics_refuse_keyless_records(make_log: LogFactory) -> None:
    log = make_log({"cleanup.policy": "compact"})
    with pytest.raises(InvalidRecord, match="key"):
        log.append_as_leader(batch_of([b"v"], keys=[None]), 0)
    log.append_as_leader(batch_of([b"v"], keys=[b"k"]), 0)
    assert log.log_end_offset == 1


def test_log_append_time_stamps_the_broker_clock(make_log: LogFactory, clock: FakeClock) -> None:
    log = make_log({"message.timestamp.type": "LogAppendTime"})
    info = log.append_as_leader(batch_of([b"a", b"b"], timestamp=5), 0)
    log.advance_high_watermark(2)
    assert info.log_append_time == clock.ms
    assert {r.timestamp for r in read_all(log)} == {clock.ms}


def test_create_time_is_kept(make_log: LogFactory) -> None:
    log = make_log()
    info = log.append_as_leader(batch_of([b"a"], timestamp=5), 0)
    log.advance_high_watermark(1)
    assert info.log_append_time == -1
    assert read_all(log)[0].timestamp == 5


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_compressed_batches_stay_compressed(make_log: LogFactory, codec: int) -> None:
    log = make_log()
    log.append_as_leader(batch_of([b"abc" * 100] * 10, compression=codec), 0)
    log.advance_high_watermark(10)
    assert fmt.read_header(log.read(0, 100_000).data).compression == codec
    assert [r.value for r in read_all(log)] == [b"abc" * 100] * 10


def test_follower_append_keeps_offsets_and_rejects_gaps(make_log: LogFactory) -> None:
    leader = make_log()
    leader.append_as_leader(batch_of([b"a", b"b"]), 4)
    leader.append_as_leader(batch_of([b"c"]), 5)
    data = bytes(leader.read(0, 10_000, upper_offset=3).data)
    first = fmt.read_header(data).size

    from pathlib import Path

    follower = PartitionLog(
        Path(leader.directory.parent / "t-1"), "t", 1, leader.config, clock=leader.clock
    )
    with pytest.raises(OffsetMismatch, match="gap"):
        follower.append_as_follower(data[first:])
    follower.append_as_follower(data[:first])
    with pytest.raises(OffsetMismatch, match="overlap"):
        follower.append_as_follower(data[:first])
    info = follower.append_as_follower(data[first:])
    assert (info.first_offset, info.last_offset) == (2, 2)
    assert follower.log_end_offset == 3
    assert follower.epoch_cache.entries == leader.epoch_cache.entries
    assert follower.segments[0].path.read_bytes() == leader.segments[0].path.read_bytes()


def test_roll_by_size_and_lookup_across_segments(make_log: LogFactory) -> None:
    log = make_log({"segment.bytes": 400, "index.interval.bytes": 100})
    fill(log, 30, per_batch=2, size=40)
    assert len(log.segments) > 5
    bases = [s.base_offset for s in log.segments]
    assert bases == sorted(bases) and bases[0] == 0
    for seg, following in zip(log.segments, log.segments[1:], strict=False):
        assert seg.next_offset == following.base_offset
        assert seg.size <= 400
    assert [r.offset for r in read_all(log)] == list(range(60))
    for offset in (0, 13, 27, 59):
        data = log.read(offset, 1).data
        header = fmt.read_header(data)
        assert header.base_offset <= offset <= header.last_offset


def _batch_holding(log: PartitionLog, offset: int) -> tuple[int, fmt.BatchHeader] | None:
    """The reference: the active segment's batch holding `offset`, by a walk from byte 0."""
    active = log.segments[-1]
    for position, header in fmt.scan(active.pread(active.size, 0), check_crc=False).headers:
        if header.last_offset >= offset:
            return position, header
    return None


def test_offsets_at_the_tail_of_the_active_segment_are_found_without_a_walk(
    make_log: LogFactory,
) -> None:
    """The active segment remembers where each batch since its last index entry starts, so a
    consumer at the tail reads from there: every offset still finds the batch holding it,
    through appends, a truncation, a reopen and rolls (a closed segment forgets them)."""
    log = make_log({"index.interval.bytes": 200, "segment.bytes": 4000})

    def check() -> None:
        active = log.segments[-1]
        _, last_entry = active.index.lookup(2**62)
        batches = fmt.scan(active.pread(active.size, 0), check_crc=False).headers
        assert active._tail == [(h.base_offset, p) for p, h in batches if p >= last_entry]
        for offset in range(active.base_offset, log.log_end_offset + 2):
            assert active.translate(offset) == _batch_holding(log, offset), offset

    fill(log, 25, per_batch=2, size=20)
    check()
    log.truncate_to(log.log_end_offset - 3)  # inside the tail
    check()
    log.truncate_to(log.segments[-1].index.lookup(2**62)[0] - 1)  # before the last entry
    check()
    fill(log, 7, per_batch=3, size=10)
    check()
    log.close()
    log = make_log({"index.interval.bytes": 200, "segment.bytes": 4000})
    check()
    fill(log, 60, per_batch=2, size=20)
    assert len(log.segments) > 1
    assert all(not segment._tail for segment in log.segments[:-1])
    check()
    assert [r.offset for r in read_all(log)] == list(range(log.log_end_offset))


def test_roll_by_age(make_log: LogFactory, clock: FakeClock) -> None:
    log = make_log({"segment.ms": 1000})
    log.append_as_leader(batch_of([b"a"], timestamp=clock.ms), 0)
    clock.advance(500)
    log.append_as_leader(batch_of([b"b"], timestamp=clock.ms), 0)
    assert len(log.segments) == 1
    clock.advance(600)
    log.append_as_leader(batch_of([b"c"], timestamp=clock.ms), 0)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_needs_room_says_when_an_append_would_roll_and_make_room_rolls(
    make_log: LogFactory, clock: FakeClock
) -> None:
    """What a caller on an event loop asks before appending: whether the append would roll
    (full or aged; never an empty active segment); `make_room` then rolls, where the append
    would have, and only then."""
    log = make_log({"segment.bytes": 400, "segment.ms": 1000})
    assert not log.needs_room(10_000)
    size = len(batch_of([b"a"], timestamp=clock.ms))
    log.append_as_leader(batch_of([b"a"], timestamp=clock.ms), 0)
    assert not log.needs_room(size)
    assert log.needs_room(400)
    log.make_room(size)
    assert len(log.segments) == 1
    clock.advance(1001)
    assert log.needs_room(size)
    log.make_room(size)
    assert [s.base_offset for s in log.segments] == [0, 1]
    assert not log.needs_room(size)
    log.append_as_leader(batch_of([b"b"], timestamp=clock.ms), 0)
    assert [s.base_offset for s in log.segments] == [0, 1]


def test_an_active_segment_begins_with_its_index_files(make_log: LogFactory) -> None:
    """A roll creates the new segment's index files with its log file, so the first write of
    their entries (on the event loop, once PENDING_MAX wait) appends to files that exist."""
    log = make_log({"segment.bytes": 400})
    fill(log, 10, per_batch=2, size=40)
    active = log.segments[-1]
    assert len(log.segments) > 1 and active.size > 0
    for index in (active.index, active.time_index):
        assert index.path.exists() and index.path.stat().st_size == 0


@contextlib.contextmanager
def held_by_another_thread(log: PartitionLog) -> Iterator[None]:
    """The log held by another thread (as a roll, a flush or a retention pass holds it) until
    the block ends."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with log._lock:
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(30)
    try:
        yield
    finally:
        release.set()
        holder.join()


def test_needs_room_while_another_thread_holds_the_log(make_log: LogFactory) -> None:
    """A log held by another thread would make an append wait: `needs_room` says so without
    waiting, and `make_room` returns once it is free."""
    log = make_log({})
    with held_by_another_thread(log):
        assert log.needs_room(1)
    log.make_room(1)
    assert not log.needs_room(1)


def test_the_high_watermark_moves_while_another_thread_holds_the_log(
    make_log: LogFactory,
) -> None:
    """An event loop moving the high watermark (a follower fetched, a write landed) does not
    wait for a thread holding the log (a roll creating files, a retention pass): the move and
    its publication to other processes take only the watermarks' lock."""
    log = make_log({}, publish_watermarks=True)
    log.append_as_leader(batch_of([b"a", b"b"]), 0)
    moved: list[bool] = []
    mover = threading.Thread(target=lambda: moved.append(log.advance_high_watermark(5)))
    with held_by_another_thread(log):
        mover.start()
        mover.join(30)  # bounds a wait for the holder, which lets go only after this
        waited = mover.is_alive()
    mover.join()
    assert not waited and moved == [True] and log.high_watermark == 2  # never past the end
    marks = WatermarkReader(log.directory).read()
    assert marks is not None and marks.high_watermark == 2
    log.close()


def test_listeners_hear_appends_watermarks_and_truncation(make_log: LogFactory) -> None:
    log = make_log()
    heard: list[tuple[int, int]] = []
    listener = lambda lg: heard.append((lg.log_end_offset, lg.high_watermark))  # noqa: E731
    log.add_listener(listener)
    log.append_as_leader(batch_of([b"a"]), 0)
    log.advance_high_watermark(1)
    log.advance_high_watermark(1)
    log.truncate_to(0)
    assert heard == [(1, 0), (1, 1), (0, 0)]
    log.remove_listener(listener)
    log.append_as_leader(batch_of([b"b"]), 0)
    assert len(heard) == 3


def test_offset_for_timestamp(make_log: LogFactory) -> None:
    log = make_log({"segment.bytes": 300, "index.interval.bytes": 1})
    for i in range(20):
        log.append_as_leader(batch_of([b"v" * 30] * 2, timestamp=1000 + 10 * i), 0)
    log.advance_high_watermark(30)
    assert log.offset_for_timestamp(0) == (0, 1000)
    assert log.offset_for_timestamp(1000) == (0, 1000)
    assert log.offset_for_timestamp(1001) == (2, 1010)
    assert log.offset_for_timestamp(1140) == (28, 1140)
    assert log.offset_for_timestamp(1150) is None  # beyond the high watermark
    assert log.offset_for_timestamp(5000) is None


def test_truncate_removes_whole_batches(make_log: LogFactory) -> None:
    log = make_log({"segment.bytes": 300})
    fill(log, 10, per_batch=3, size=30)
    log.epoch_cache.assign(9, 21)
    log.truncate_to(22)
    assert log.log_end_offset == 21
    assert log.high_watermark == 21
    assert log.epoch_cache.latest_epoch == 0
    assert [r.offset for r in read_all(log)] == list(range(21))
    log.truncate_to(3)
    assert log.log_end_offset == 3
    assert all(s.base_offset < 3 for s in log.segments)
    info = log.append_as_leader(batch_of([b"new"]), 1)
    assert info.first_offset == 3


def test_truncate_below_log_start_restarts_the_log(make_log: LogFactory) -> None:
    log = make_log()
    fill(log, 4)
    log.delete_records(6)
    log.truncate_to(2)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (2, 2, 2)
    assert log.append_as_leader(batch_of([b"x"]), 0).first_offset == 2


def test_delete_records_moves_log_start_and_drops_segments(make_log: LogFactory) -> None:
    log = make_log({"segment.bytes": 300})
    fill(log, 10, per_batch=2, size=40)
    segments = len(log.segments)
    assert log.delete_records(7) == 7
    assert log.log_start_offset == 7
    assert len(log.segments) < segments
    assert log.segments[0].base_offset <= 7
    with pytest.raises(OffsetOutOfRange):
        log.read(6, 100)
    assert read_all(log)[0].offset == 7
    assert log.delete_records(3) == 7
    with pytest.raises(OffsetOutOfRange):
        log.delete_records(log.high_watermark + 1)


def test_retention_by_time_spares_the_active_segment(
    make_log: LogFactory, clock: FakeClock
) -> None:
    log = make_log({"segment.bytes": 300, "retention.ms": 1000})
    for i in range(12):
        log.append_as_leader(batch_of([b"x" * 60], timestamp=clock.ms + i), 0)
    log.advance_high_watermark(log.log_end_offset)
    assert log.apply_retention() == 0
    clock.advance(2000)
    deleted = log.apply_retention()
    assert deleted > 0
    assert len(log.segments) == 1
    assert log.log_start_offset == log.segments[0].base_offset


def test_retention_by_size(make_log: LogFactory) -> None:
    log = make_log({"segment.bytes": 300, "retention.bytes": 700})
    fill(log, 20, per_batch=1, size=80)
    log.apply_retention()
    assert log.size_bytes - log.segments[0].size < 700
    assert log.size_bytes >= 700 or len(log.segments) == 1
    assert read_all(log)[-1].offset == 19


def test_retention_by_size_counts_segments_below_the_log_start_as_gone(
    make_log: LogFactory,
) -> None:
    """A closed segment wholly below the log start (DELETE records up to the end, then a roll)
    goes, and its bytes no longer count against retention.bytes: the next segment stays when
    what would be left without it is under the limit (Kafka's size pass runs after the
    log-start pass)."""
    log = make_log()
    fill(log, 3)
    log.delete_records(log.log_end_offset)  # the active segment's records, all below the start
    log.roll()
    fill(log, 3)
    log.roll()
    fill(log, 3)
    _below, kept, active = (s.size for s in log.segments)
    log.update_config(TopicConfig().with_overrides({"retention.bytes": active + 1}))
    assert log.apply_retention() == 1
    assert [s.size for s in log.segments] == [kept, active]


def test_local_retention_by_size_counts_segments_below_the_log_start_as_gone(
    make_log: LogFactory,
) -> None:
    """The same for a tiered log's local retention, over segments S3 holds."""
    log = make_log({"remote.storage.enable": True})
    fill(log, 3)
    log.delete_records(log.log_end_offset)
    log.roll()
    fill(log, 3)
    log.roll()
    fill(log, 3)
    log.mark_uploaded(log.segments[-1].base_offset)
    _below, kept, active = (s.size for s in log.segments)
    overrides = {"remote.storage.enable": True, "local.retention.bytes": active + 1}
    log.update_config(TopicConfig().with_overrides(overrides))
    assert log.apply_retention() == 1
    assert [s.size for s in log.segments] == [kept, active]


def test_retention_never_deletes_above_the_high_watermark(make_log: LogFactory) -> None:
    log = make_log({"segment.bytes": 200, "retention.bytes": 0})
    for _ in range(10):
        log.append_as_leader(batch_of([b"x" * 80]), 0)
    assert log.apply_retention() == 0
    log.advance_high_watermark(5)
    log.apply_retention()
    assert log.segments[0].base_offset <= 5 and log.log_start_offset <= 5


def test_compact_only_topics_ignore_time_retention(make_log: LogFactory, clock: FakeClock) -> None:
    log = make_log({"segment.bytes": 200, "retention.ms": 1, "cleanup.policy": "compact"})
    for i in range(8):
        log.append_as_leader(batch_of([b"x" * 80], keys=[b"k%d" % i]), 0)
    log.advance_high_watermark(log.log_end_offset)
    clock.advance(10_000)
    assert log.apply_retention() == 0


def test_flush_policy_by_messages_and_time(make_log: LogFactory, clock: FakeClock) -> None:
    log = make_log({"flush.messages": 3})
    assert not log.append_as_leader(batch_of([b"a", b"b"]), 0).flush_due
    assert log.append_as_leader(batch_of([b"c"]), 0).flush_due
    log.flush()
    assert log.recovery_point == 3
    assert not log.append_as_leader(batch_of([b"d"]), 0).flush_due

    timed = make_log({"flush.ms": 100})
    timed.flush()
    timed.append_as_leader(batch_of([b"e"]), 0)
    assert not timed.flush_due_by_time()
    clock.advance(150)
    assert timed.flush_due_by_time()
    timed.flush()
    assert not timed.flush_due_by_time()


def test_clean_reopen_trusts_files(make_log: LogFactory) -> None:
    log = make_log({"segment.bytes": 300})
    fill(log, 10)
    expected = read_all(log)
    log.close()
    again = make_log({"segment.bytes": 300}, trust_files=True, high_watermark=20)
    assert again.recovery.segments_scanned == 0
    assert again.log_end_offset == 20 and again.recovery_point == 20
    assert read_all(again) == expected


def test_unclean_reopen_scans_from_the_recovery_point(make_log: LogFactory) -> None:
    log = make_log({"segment.bytes": 300})
    fill(log, 10)
    log.flush()
    fill(log, 3)
    tail_segments = [s for s in log.segments if s.next_offset > 20]
    again = make_log({"segment.bytes": 300}, recovery_point=20, high_watermark=26)
    assert again.recovery.segments_scanned == len(tail_segments)
    assert again.log_end_offset == 26
    assert [r.offset for r in read_all(again)] == list(range(26))


def test_an_oversized_first_batch_without_min_one_is_not_skipped(make_log: LogFactory) -> None:
    log = make_log({"segment.bytes": 300})
    log.append_as_leader(batch_of([b"x" * 200]), 0)
    log.append_as_leader(batch_of([b"y"]), 0)
    log.advance_high_watermark(2)
    assert [s.base_offset for s in log.segments] == [0, 1]
    # Offset 0's batch is over max_bytes; the small batch after it must not be served instead.
    assert not log.read(0, 150, min_one=False).data
    assert fmt.read_header(log.read(0, 150).data).base_offset == 0


def test_max_records_leaves_out_batches_the_caller_will_not_reach(make_log: LogFactory) -> None:
    log = make_log()
    fill(log, 10, per_batch=5)
    starts = [h.base_offset for _, h in fmt.scan(log.read(7, 100_000, max_records=6).data).headers]
    assert starts == [5, 10]  # 7..12 is needed: the batch holding 7, and the one starting at 10
    assert len(fmt.scan(log.read(7, 100_000, max_records=1).data).headers) == 1
    assert len(fmt.scan(log.read(7, 100_000).data).headers) == 9


def test_the_epoch_checkpoint_is_synced_by_flush_not_by_the_append(
    make_log: LogFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new epoch's first append does no fsync (it runs on the event loop); the log's flush,
    which runs in a worker thread, makes the checkpoint durable before the recovery point."""
    log = make_log()
    synced: list[int] = []
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd))
    log.append_as_leader(batch_of([b"a"]), 0)
    log.append_as_leader(batch_of([b"b"]), 3)
    assert synced == []
    assert log.epoch_cache.entries == [(0, 0), (3, 1)]
    log.flush()
    assert synced  # segment, epoch checkpoint and its directory
    assert not log.epoch_cache.unsynced


def test_recovery_rebuilds_epochs_above_the_recovery_point(make_log: LogFactory) -> None:
    """A crash that lost the unsynced epoch checkpoint: the scan of the batches restores it."""
    log = make_log()
    log.append_as_leader(batch_of([b"a", b"b"]), 0)
    log.flush()
    log.append_as_leader(batch_of([b"c"]), 2)
    log.append_as_leader(batch_of([b"d"]), 5)
    log.close()
    checkpoint.write_lines(log.epoch_cache.path, [(0, 0)])  # the file as last synced
    again = make_log(recovery_point=2)
    assert again.epoch_cache.entries == [(0, 0), (2, 2), (5, 3)]
    assert again.epoch_cache.end_offset_for(2, again.log_end_offset) == (2, 3)


def test_a_read_racing_delete_records_gets_the_batch_holding_its_offset(
    make_log: LogFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pause delete_records after each attribute it stores and read from another thread there.

    Segments and their base offsets must be published together, or the read misses offset 10.
    """
    log = make_log({"segment.bytes": 14})
    fill(log, 12)  # one two-record batch per segment: bases 0, 2, 4, ..., 22
    assert [s.base_offset for s in log.segments] == list(range(0, 24, 2))
    stored: queue.Queue[str | None] = queue.Queue()
    resume: queue.Queue[None] = queue.Queue()
    store = PartitionLog.__setattr__

    def pausing_store(self: PartitionLog, name: str, value: object) -> None:
        store(self, name, value)
        if threading.current_thread() is writer:
            stored.put(name)
            resume.get(timeout=10)

    def delete_records() -> None:
        try:
            log.delete_records(8)
        finally:
            stored.put(None)

    monkeypatch.setattr(PartitionLog, "__setattr__", pausing_store)
    writer = threading.Thread(target=delete_records, daemon=True)
    writer.start()
    seen: list[tuple[str, int, int]] = []
    while (name := stored.get(timeout=10)) is not None:
        try:
            first = fmt.read_header(log.read(10, 10_000).data)
            seen.append((name, first.base_offset, first.next_offset))
        finally:
            resume.put(None)
    writer.join(timeout=10)
    assert not writer.is_alive()
    assert len(seen) >= 2  # the log start, then the segments
    assert [(name, base) for name, base, following in seen if not base <= 10 < following] == []
    assert log.log_start_offset == log.segments[0].base_offset == 8


def test_the_active_segment_writes_its_index_entries_once_pending_max_wait(
    make_log: LogFactory,
) -> None:
    """A roll runs on the event loop: it must find at most PENDING_MAX entries left to write,
    however many batches the segment holds."""
    log = make_log({"index.interval.bytes": 1})  # an offset-index entry for every batch
    fill(log, PENDING_MAX - 1, per_batch=1)
    path = log.segments[-1].index.path
    assert not path.exists() or path.stat().st_size == 0
    fill(log, 1, per_batch=1)
    assert path.stat().st_size == PENDING_MAX * 8
    fill(log, 10, per_batch=1)
    assert path.stat().st_size == PENDING_MAX * 8
    log.roll()
    assert path.stat().st_size == (PENDING_MAX + 10) * 8


def test_an_index_write_that_fails_on_append_is_left_to_the_next_flush(
    make_log: LogFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batches are appended already when the entries are written: a failing write fails
    no append, and the entries wait for the flush, which writes them all. Appends try again
    only once PENDING_MAX more wait: each try encodes every waiting entry."""
    log = make_log({"index.interval.bytes": 1})
    path = log.segments[-1].index.path
    path.unlink()
    path.mkdir()  # opening it for writing fails (IsADirectoryError)
    tries = []
    flush = OffsetIndex.flush

    def counted(index: OffsetIndex, fsync: bool = False) -> None:
        tries.append(fsync)
        flush(index, fsync)

    monkeypatch.setattr(OffsetIndex, "flush", counted)
    fill(log, PENDING_MAX + 5, per_batch=1)
    assert len(tries) == 1
    assert log.log_end_offset == PENDING_MAX + 5
    headers = fmt.scan(log.read(PENDING_MAX, 10_000).data).headers
    assert headers[0][1].base_offset == PENDING_MAX
    fill(log, PENDING_MAX - 5, per_batch=1)
    assert len(tries) == 2
    path.rmdir()
    log.flush()
    assert path.stat().st_size == 2 * PENDING_MAX * 8
    log.close()
    again = make_log({"index.interval.bytes": 1})
    assert again.segments[-1].index.lookup(PENDING_MAX + 3)[0] == PENDING_MAX + 3
