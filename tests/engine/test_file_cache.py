"""Closed segments share a bounded cache of open files, so a node's descriptors stay
bounded whatever its number of segments. Each test runs under a soft RLIMIT_NOFILE just above
what the process holds plus the cache's bound: a leak of one descriptor per segment fails with
EMFILE, not with a count that happens to be large."""

from __future__ import annotations

import asyncio
import os
import resource
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from engine import file_cache
from engine.cleaner import clean
from engine.config import TopicConfig
from engine.file_cache import CachedFile, FileCache, FileGone
from engine.log import PartitionLog
from engine.manager import LogManager
from tests.engine.conftest import FakeClock, batch_of, read_all

SEGMENTS = 3_000
CAPACITY = 16
SLACK = 8  # the active segment, an index file being written, the epoch checkpoint


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def fd_targets() -> list[str]:
    """Where this process's descriptors point (a deleted file ends with ' (deleted)')."""
    out = []
    for name in os.listdir("/proc/self/fd"):
        try:
            out.append(os.readlink(f"/proc/self/fd/{name}"))
        except FileNotFoundError:  # the descriptor listdir itself used
            continue
    return out


@contextmanager
def fd_ceiling(extra: int) -> Iterator[int]:
    """Lower the soft descriptor limit to what is open now plus `extra`; yields the baseline."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    baseline = open_fds()
    resource.setrlimit(resource.RLIMIT_NOFILE, (baseline + extra, hard))
    try:
        yield baseline
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.fixture
def cache() -> FileCache:
    return FileCache(CAPACITY)


LogOpener = Callable[..., PartitionLog]


@pytest.fixture
def open_log(tmp_path: Path, clock: FakeClock, cache: FileCache) -> LogOpener:
    """Open (or reopen) `t-0` with one record per segment, through the test's own cache."""

    def make(configs: dict[str, object] | None = None, **kwargs: object) -> PartitionLog:
        config = TopicConfig().with_overrides({"segment.bytes": 100, **(configs or {})})
        return PartitionLog(
            tmp_path / "t-0",
            "t",
            0,
            config,
            clock=clock,
            **{"files": cache, **kwargs},  # type: ignore[arg-type]
        )

    return make


def value(offset: int) -> bytes:
    return b"record-%06d-" % offset + b"x" * 20


def write_segments(log: PartitionLog, count: int, check: Callable[[], None] = lambda: None) -> None:
    """`count` batches of one record each, a segment apiece (segment.bytes=100); `check` runs
    after every append."""
    for offset in range(log.log_end_offset, log.log_end_offset + count):
        log.append_as_leader(batch_of([value(offset)], timestamp=1_700_000_000_000 + offset), 0)
        check()
    log.advance_high_watermark(log.log_end_offset)


def assert_reads_back(log: PartitionLog, start: int = 0) -> None:
    records = read_all(log, start)
    assert [r.offset for r in records] == list(range(start, log.high_watermark))
    assert all(r.value == value(r.offset) for r in records)


# -- the bound -----------------------------------------------------------------------------------


def test_thousands_of_segments_are_written_and_read_back_within_the_bound(
    open_log: LogOpener, cache: FileCache
) -> None:
    with fd_ceiling(CAPACITY + SLACK + 16) as baseline:
        log = open_log()

        def bounded() -> None:
            assert open_fds() <= baseline + CAPACITY + SLACK
            assert cache.open_files <= CAPACITY

        write_segments(log, SEGMENTS, bounded)
        assert len(log.segments) == SEGMENTS
        assert_reads_back(log)
        bounded()
        for offset in (0, SEGMENTS // 2, SEGMENTS - 1):
            ts = 1_700_000_000_000 + offset
            assert log.offset_for_timestamp(ts) == (offset, ts)
        bounded()
        log.close()
    assert cache.open_files == 0


def test_concurrent_readers_under_constant_eviction_read_the_right_bytes(
    open_log: LogOpener,
) -> None:
    """Four threads read every segment while a cache of two handles evicts at each open."""
    log = open_log(files=FileCache(2))
    write_segments(log, 400)
    expected = {o: bytes(log.read(o, 1000).data) for o in range(400)}

    def reader(start: int) -> None:
        for i in range(400 * 3):
            offset = (start + i * 7) % 400
            assert bytes(log.read(offset, 1000).data) == expected[offset]

    threads = [threading.Thread(target=reader, args=(n * 101,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    log.close()


# -- eviction and deletion under a reader ---------------------------------------------------------


def test_a_pinned_descriptor_survives_eviction_and_closes_at_its_last_unpin(
    tmp_path: Path,
) -> None:
    paths = [tmp_path / name for name in ("a", "b", "c")]
    for path in paths:
        path.write_bytes(path.name.encode() * 8)
    cache = FileCache(1)
    a, b, c = (CachedFile(str(p)) for p in paths)
    fd = cache.pin(a)
    with cache.pinned(b), cache.pinned(c):  # each open evicts the least recent: `a` first
        assert os.pread(fd, 4, 0) == b"aaaa"
        assert cache.open_files == 3
    assert os.pread(fd, 4, 0) == b"aaaa"
    cache.unpin(a)
    assert cache.open_files == 1  # `c`, the most recent; `a` and `b` closed at their unpins
    assert str(paths[0]) not in fd_targets()
    cache.forget(c)
    assert cache.open_files == 0
    with pytest.raises(FileGone):
        cache.pin(c)


def test_a_read_in_a_worker_thread_keeps_its_descriptor_through_eviction_and_deletion(
    open_log: LogOpener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read of segment 0 paused inside `pread` (in `asyncio.to_thread`, as the gateway runs
    slow reads) while the event loop reads every other segment (evicting segment 0's handle)
    and deletes segment 0: the paused read finishes with the original bytes, and the
    descriptor closes once it lets go."""
    cache = FileCache(1)
    log = open_log(files=cache)
    write_segments(log, 50)
    expected = bytes(log.read(0, 1000).data)
    segment0 = str(log.segments[0].path)
    inside, resume = threading.Event(), threading.Event()
    real_pread = os.pread

    def pausing_pread(fd: int, length: int, position: int) -> bytes:
        if threading.current_thread() is not main and os.readlink(f"/proc/self/fd/{fd}") in (
            segment0,
            segment0 + " (deleted)",
        ):
            inside.set()
            assert resume.wait(timeout=30)
        return real_pread(fd, length, position)

    main = threading.current_thread()
    monkeypatch.setattr(os, "pread", pausing_pread)

    async def scenario() -> bytes:
        paused = asyncio.ensure_future(asyncio.to_thread(log.read, 0, 1000))
        assert await asyncio.to_thread(inside.wait, 30)
        assert_reads_back(log, 1)  # every other segment: segment 0's handle is evicted
        assert log.delete_records(1) == 1
        assert log.segments[0].base_offset == 1
        assert not Path(segment0).exists()
        assert segment0 + " (deleted)" in fd_targets()  # still open: the read holds it
        resume.set()
        return bytes((await paused).data)

    assert asyncio.run(scenario()) == expected
    assert segment0 + " (deleted)" not in fd_targets()
    assert cache.open_files <= 1
    log.close()


# -- retention, truncation, compaction, deletion drop their handles -------------------------------


def deleted_targets(directory: Path) -> list[str]:
    """This process's descriptors on files under `directory` that were deleted."""
    return [t for t in fd_targets() if t.startswith(str(directory)) and t.endswith(" (deleted)")]


def test_retention_truncation_and_deletion_drop_the_handles_of_segments_they_remove(
    open_log: LogOpener, cache: FileCache, tmp_path: Path
) -> None:
    log = open_log({"retention.bytes": 100 * 100})
    write_segments(log, 200)
    assert_reads_back(log)
    for offset in range(CAPACITY // 2):  # the oldest segments' log and index files
        log.read(offset, 1000)
    assert cache.open_files == CAPACITY
    assert log.apply_retention() > CAPACITY // 2
    assert cache.open_files == 0
    assert deleted_targets(tmp_path) == []
    assert_reads_back(log, log.log_start_offset)  # the newest segments' files are cached now
    cut = log.log_end_offset - 30
    log.truncate_to(cut)
    assert deleted_targets(tmp_path) == []
    assert log.segments[-1].base_offset == cut - 1 and log.log_end_offset == cut
    write_segments(log, 5)  # into the segment that held the cut, open for appends again
    assert_reads_back(log, log.log_start_offset)
    log.delete()
    assert cache.open_files == 0
    assert not [t for t in fd_targets() if t.startswith(str(tmp_path))]


def test_compaction_drops_the_handles_of_the_segments_it_replaces(
    open_log: LogOpener, cache: FileCache, tmp_path: Path
) -> None:
    log = open_log({"cleanup.policy": "compact", "segment.bytes": 300})
    for n in range(120):
        log.append_as_leader(batch_of([b"v%d" % n], keys=[b"k%d" % (n % 3)]), 0)
    log.advance_high_watermark(log.log_end_offset)
    before = read_all(log)
    assert cache.open_files > 0
    stats = clean(log, 0, force=True)
    assert stats is not None and stats.segments_rewritten > 0
    assert deleted_targets(tmp_path) == []  # no descriptor left on a replaced file
    after = read_all(log)
    latest = {r.key: r.offset for r in before}
    assert {r.key: r.offset for r in after} == latest
    log.close()


# -- restart and recovery ------------------------------------------------------------------------


@pytest.mark.parametrize("clean_shutdown", [True, False])
def test_reopening_thousands_of_segments_never_holds_them_open_together(
    open_log: LogOpener, cache: FileCache, clean_shutdown: bool
) -> None:
    log = open_log()
    write_segments(log, SEGMENTS)
    end = log.log_end_offset
    if clean_shutdown:
        log.close()
    del log  # unclosed, as in a crash, unless closed above
    with fd_ceiling(CAPACITY + SLACK + 16) as baseline:
        again = open_log(trust_files=clean_shutdown, high_watermark=end)
        assert again.recovery.segments_scanned == (0 if clean_shutdown else SEGMENTS)
        assert again.log_end_offset == end
        assert open_fds() <= baseline + CAPACITY + SLACK
        assert_reads_back(again)
        write_segments(again, 10)
        assert_reads_back(again)
        assert open_fds() <= baseline + CAPACITY + SLACK
        again.close()


def test_the_log_manager_sizes_the_process_cache(tmp_path: Path) -> None:
    try:
        manager = LogManager(tmp_path / "sized", file_cache_size=7)
        assert manager.files is file_cache.shared and manager.files.capacity == 7
        manager.close()
        manager = LogManager(tmp_path / "derived")
        assert manager.files.capacity == file_cache.default_capacity()
        manager.close()
    finally:
        file_cache.shared.resize(file_cache.default_capacity())


def test_the_default_capacity_is_an_eighth_of_the_descriptor_limit_up_to_1024() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        for limit, expected in ((40, 8), (256, 32), (1024, 128), (hard, min(1024, hard // 8))):
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
            assert file_cache.default_capacity() == expected
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
