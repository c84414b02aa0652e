"""Compaction: latest record per key, tombstones, preserved offsets, concurrency with appends,
the pass paced, superseded batches dropped on their headers."""

from __future__ import annotations

import threading
import tracemalloc
from collections.abc import Iterator

import pytest

from engine import batch as fmt
from engine import cleaner
from engine.log import PartitionLog
from engine.pacing import Pacer
from tests.engine.conftest import FakeClock, LogFactory, batch_of, read_all

COMPACT = {"cleanup.policy": "compact", "segment.bytes": 250, "index.interval.bytes": 1}


def put(log: PartitionLog, key: bytes, value: bytes | None, ts: int) -> int:
    info = log.append_as_leader(batch_of([value], keys=[key], timestamp=ts), 0)
    log.advance_high_watermark(log.log_end_offset)
    return info.first_offset


def test_keeps_latest_per_key_with_offsets_and_order(
    make_log: LogFactory, clock: FakeClock
) -> None:
    log = make_log(COMPACT)
    written: list[tuple[bytes, int]] = []
    for i in range(40):
        key = b"k%d" % (i % 4)
        written.append((key, put(log, key, b"v%02d" % i + b"." * 40, clock.ms)))
    active_base = log.segments[-1].base_offset
    # The active segment is not mapped (as in Kafka): only closed segments supersede.
    latest = {key: offset for key, offset in written if offset < active_base}
    stats = cleaner.clean(log, 0, force=True)
    assert stats is not None and stats.records_removed > 0
    assert stats.cleaned_up_to == active_base
    records = read_all(log)
    offsets = [r.offset for r in records]
    assert offsets == sorted(offsets)
    closed = [r for r in records if r.offset < active_base]
    assert {(r.key, r.offset) for r in closed} <= set(latest.items())
    for key, offset in latest.items():
        assert any(r.key == key and r.offset == offset for r in records)
    assert [r.offset for r in records if r.offset >= active_base] == list(range(active_base, 40))
    assert log.log_end_offset == 40
    assert put(log, b"k0", b"after", clock.ms) == 40


def test_tombstones_removed_only_after_delete_retention(
    make_log: LogFactory, clock: FakeClock
) -> None:
    log = make_log({**COMPACT, "delete.retention.ms": 1000})
    put(log, b"gone", b"x" * 50, clock.ms)
    put(log, b"gone", None, clock.ms)
    for i in range(8):
        put(log, b"other%d" % i, b"y" * 50, clock.ms)
    cleaner.clean(log, 0, force=True)
    gone = [r for r in read_all(log) if r.key == b"gone"]
    assert [r.value for r in gone] == [None]
    clock.advance(2000)
    cleaner.clean(log, 0, force=True)
    assert not [r for r in read_all(log) if r.key == b"gone"]


def test_dirty_ratio_gates_a_pass(make_log: LogFactory, clock: FakeClock) -> None:
    log = make_log({**COMPACT, "min.cleanable.dirty.ratio": 0.9})
    for i in range(20):
        put(log, b"k%d" % (i % 2), b"v" * 50, clock.ms)
    first = cleaner.clean(log, 0)
    assert first is not None
    assert cleaner.clean(log, first.cleaned_up_to) is None
    assert cleaner.dirty_ratio(log, first.cleaned_up_to) < 0.9


def test_never_touches_the_active_segment_or_above_the_watermark(
    make_log: LogFactory, clock: FakeClock
) -> None:
    log = make_log(COMPACT)
    for _ in range(12):
        log.append_as_leader(batch_of([b"v" * 50], keys=[b"same"], timestamp=clock.ms), 0)
    assert [s.base_offset for s in log.segments[:2]] == [0, 2]
    log.advance_high_watermark(3)
    cleaner.clean(log, 0, force=True)
    log.advance_high_watermark(log.log_end_offset)
    # Only segment [0, 2) lies wholly below the watermark: just offset 0 is superseded.
    assert [r.offset for r in read_all(log)] == list(range(1, 12))


def test_reopen_after_compaction(make_log: LogFactory, clock: FakeClock) -> None:
    log = make_log(COMPACT)
    for i in range(30):
        put(log, b"k%d" % (i % 3), b"v%d" % i + b"-" * 40, clock.ms)
    cleaner.clean(log, 0, force=True)
    expected = read_all(log)
    log.close()
    again = make_log(COMPACT, recovery_point=0, high_watermark=30)
    assert not again.recovery.errors
    assert read_all(again) == expected


def test_appends_and_reads_continue_during_a_pass(make_log: LogFactory, clock: FakeClock) -> None:
    log = make_log({**COMPACT, "segment.bytes": 4000})
    for i in range(600):
        put(log, b"k%d" % (i % 10), b"v" * 50, clock.ms)
    done = threading.Event()
    result: list[cleaner.CleanStats | None] = []

    def run() -> None:
        result.append(cleaner.clean(log, 0, force=True))
        done.set()

    worker = threading.Thread(target=run)
    worker.start()
    appended = 0
    while not done.is_set() or appended < 50:
        put(log, b"new%d" % appended, b"n", clock.ms)
        read_all(log, start=max(log.log_start_offset, log.high_watermark - 5))
        appended += 1
    worker.join()
    assert result[0] is not None and result[0].records_removed > 0
    records = read_all(log)
    assert [r.key for r in records if r.offset >= 600] == [b"new%d" % i for i in range(appended)]
    assert log.log_end_offset == 600 + appended


def test_swap_is_refused_when_the_segment_changed(make_log: LogFactory, clock: FakeClock) -> None:
    log = make_log(COMPACT)
    for i in range(20):
        put(log, b"k", b"v%d" % i + b"." * 40, clock.ms)
    segment = log.segments[0]
    log.truncate_to(0)
    assert not log.replace_segment(segment, segment.size)
    assert not list(log.directory.glob("*.cleaned"))


class CountingPacer(Pacer):
    """A pacer that never sleeps and counts the ticks it was given."""

    def __init__(self) -> None:
        super().__init__(sleep=lambda seconds: None)
        self.ticks = 0

    def tick(self) -> None:
        self.ticks += 1
        super().tick()


def test_a_pass_paces_itself_batch_by_batch(make_log: LogFactory, clock: FakeClock) -> None:
    """Every batch the pass maps or rewrites gives the event loop its turn (engine.pacing)."""
    log = make_log(COMPACT)
    for i in range(30):
        put(log, b"k%d" % (i % 3), b"v" * 50, clock.ms)
    closed = sum(1 for s in cleaner.cleanable(log) for _ in s.batches())
    pacer = CountingPacer()
    assert cleaner.clean(log, 0, force=True, pacer=pacer) is not None
    assert pacer.ticks == 2 * closed  # mapped, then rewritten


def test_superseded_batches_are_dropped_on_their_headers(
    make_log: LogFactory, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A busy group's commits: one-record batches of few keys. Only the batches holding a
    key's latest offset are decoded again when the segments are rewritten."""
    log = make_log({**COMPACT, "segment.bytes": 2000})
    written = [put(log, b"k%d" % (i % 3), b"v" * 50, clock.ms) for i in range(120)]
    active_base = log.segments[-1].base_offset
    latest = {written[i]: b"k%d" % (i % 3) for i in range(120) if written[i] < active_base}
    kept = {b"k%d" % k: max(o for o, key in latest.items() if key == b"k%d" % k) for k in range(3)}
    decoded: list[int] = []
    iter_records = fmt.iter_records

    def counting(data: memoryview) -> Iterator[fmt.Record]:
        decoded.append(fmt.read_header(data).base_offset)
        return iter_records(data)

    monkeypatch.setattr(fmt, "iter_records", counting)
    stats = cleaner.clean(log, 0, force=True)
    assert stats is not None and stats.records_removed == len(latest) - 3
    rewritten = decoded[len(latest) :]  # after the map's pass over every closed batch
    assert sorted(rewritten) == sorted(kept.values())
    records = read_all(log)
    assert [(r.key, r.offset) for r in records if r.offset < active_base] == sorted(
        kept.items(), key=lambda item: item[1]
    )


def test_a_pass_holds_a_bounded_share_of_its_segment_in_memory(
    make_log: LogFactory, clock: FakeClock
) -> None:
    """Batch headers are made a chunk at once: a pass over 3 MiB of one-record batches (24,000
    of them) stays within a few MiB of Python memory whatever the segment's size (2.2 MiB; 8.7
    with chunks of 1 MiB, 14.6 with 8 MiB, 29.1 with 8 MiB over twice the batches)."""
    log = make_log({**COMPACT, "segment.bytes": 64 << 20})
    value = b"v" * 60
    for i in range(24_000):
        log.append_as_leader(batch_of([value], keys=[b"k%d" % (i % 4)], timestamp=clock.ms), 0)
    log.roll()
    log.advance_high_watermark(log.log_end_offset)
    tracemalloc.start()
    try:
        stats = cleaner.clean(log, 0, force=True, pacer=Pacer(share=1.0))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert stats is not None and stats.records_removed == 24_000 - 4
    assert peak < 4 << 20, f"{peak / 2**20:.1f} MiB"
