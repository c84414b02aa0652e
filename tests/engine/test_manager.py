"""LogManager: topic lifecycle, persistence, checkpoints, orphans and the directory lock."""

from __future__ import annotations

import os
import resource
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.errors import (
    InvalidConfig,
    InvalidPartitions,
    InvalidTopicName,
    TooManyPartitions,
    TopicAlreadyExists,
    UnknownPartition,
    UnknownTopic,
)
from engine.manager import CLEAN_SHUTDOWN, TOPICS_DIR, DataDirLocked, LogManager
from engine.segment import LogSegment
from tests.engine.conftest import batch_of, read_all


def test_create_describe_and_reopen(tmp_path: Path) -> None:
    manager = LogManager(tmp_path)
    topic = manager.create_topic("orders", 3, {"retention.ms": 1000})
    assert [log.partition for log in topic.partitions] == [0, 1, 2]
    assert topic.config.retention_ms == 1000
    log = manager.log("orders", 1)
    log.append_as_leader(batch_of([b"a", b"b"]), 0)
    log.advance_high_watermark(2)
    manager.close()
    assert (tmp_path / CLEAN_SHUTDOWN).exists()

    again = LogManager(tmp_path)
    assert again.had_clean_shutdown
    assert not (tmp_path / CLEAN_SHUTDOWN).exists()
    reopened = again.topic("orders")
    assert reopened.topic_id == topic.topic_id
    assert reopened.overrides == {"retention.ms": 1000}
    log = again.log("orders", 1)
    assert (log.log_end_offset, log.high_watermark) == (2, 2)
    assert [r.value for r in read_all(log)] == [b"a", b"b"]
    again.close()


def test_close_flushes_logs_at_once_and_keeps_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shutdown's fsyncs overlap across logs (one at a time, 10,000 partitions took ~10 s
    here): each log's waits until the other's has begun, which one thread never does."""
    manager = LogManager(tmp_path, close_threads=2)
    first, second = manager.create_topic("t", 2).partitions
    first.append_as_leader(batch_of([b"a"]), 0)
    first.advance_high_watermark(1)
    second.append_as_leader(batch_of([b"b", b"c"]), 0)
    second.advance_high_watermark(2)
    both_syncing = threading.Barrier(2, timeout=30)
    fsync = LogSegment.fsync

    def fsync_with_the_other(segment: LogSegment) -> None:
        both_syncing.wait()
        fsync(segment)

    monkeypatch.setattr(LogSegment, "fsync", fsync_with_the_other)
    manager.close()
    monkeypatch.undo()
    assert manager.closed_cleanly and (tmp_path / CLEAN_SHUTDOWN).exists()

    again = LogManager(tmp_path)
    assert again.had_clean_shutdown
    assert [r.value for r in read_all(again.log("t", 0))] == [b"a"]
    assert [r.value for r in read_all(again.log("t", 1))] == [b"b", b"c"]
    again.close()


def test_close_threads_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="close_threads must be at least 1"):
        LogManager(tmp_path, close_threads=0)


def test_unclean_reopen_recovers_and_keeps_checkpointed_watermarks(tmp_path: Path) -> None:
    manager = LogManager(tmp_path)
    log = manager.create_topic("t").partitions[0]
    log.append_as_leader(batch_of([b"a"]), 0)
    log.advance_high_watermark(1)
    manager.write_checkpoints()
    log.append_as_leader(batch_of([b"b"]), 0)
    log.advance_high_watermark(2)
    # No close: the lock is dropped as if the process died.
    import os

    os.close(manager._lock_fd)
    again = LogManager(tmp_path)
    assert not again.had_clean_shutdown
    log = again.log("t", 0)
    assert log.log_end_offset == 2
    assert log.high_watermark == 1  # from the checkpoint: the rest must be re-committed
    assert log.recovery.segments_scanned == 1
    again.close()


def test_create_errors(tmp_path: Path) -> None:
    manager = LogManager(tmp_path)
    manager.create_topic("a.b")
    with pytest.raises(TopicAlreadyExists):
        manager.create_topic("a.b")
    with pytest.raises(InvalidTopicName, match="collides"):
        manager.create_topic("a_b")
    with pytest.raises(InvalidTopicName):
        manager.create_topic("bad name")
    for bad in (0, -1, 10_001, "3", True):
        with pytest.raises(InvalidPartitions):
            manager.create_topic("p", bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidConfig):
        manager.create_topic("c", 1, {"segment.bytes": 1})
    assert sorted(manager.topics) == ["a.b"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["a.b-0", TOPICS_DIR]
    manager.close()


def test_unknown_topic_and_partition(tmp_path: Path) -> None:
    manager = LogManager(tmp_path)
    manager.create_topic("t", 2)
    with pytest.raises(UnknownTopic):
        manager.log("nope", 0)
    for bad in (-1, 2):
        with pytest.raises(UnknownPartition):
            manager.log("t", bad)
    manager.close()


def test_delete_topic_removes_everything(tmp_path: Path) -> None:
    manager = LogManager(tmp_path)
    manager.create_topic("t", 2)
    manager.log("t", 0).append_as_leader(batch_of([b"x"]), 0)
    manager.delete_topic("t")
    assert "t" not in manager.topics
    assert not (tmp_path / "t-0").exists() and not (tmp_path / TOPICS_DIR / "t.json").exists()
    with pytest.raises(UnknownTopic):
        manager.delete_topic("t")
    recreated = manager.create_topic("t")
    assert recreated.partitions[0].log_end_offset == 0
    manager.close()


def test_alter_configs_and_add_partitions_persist(tmp_path: Path) -> None:
    manager = LogManager(tmp_path)
    manager.create_topic("t", 1, {"retention.ms": 5})
    topic = manager.alter_topic_configs("t", {"retention.ms": None, "segment.bytes": 1000})
    assert topic.overrides == {"segment.bytes": 1000}
    assert manager.log("t", 0).config.segment_bytes == 1000
    assert manager.log("t", 0).config.retention_ms == 604800000
    with pytest.raises(InvalidConfig):
        manager.alter_topic_configs("t", {"retention.ms": "x"})
    assert manager.topic("t").overrides == {"segment.bytes": 1000}
    manager.add_partitions("t", 3)
    with pytest.raises(InvalidPartitions):
        manager.add_partitions("t", 3)
    manager.close()
    again = LogManager(tmp_path)
    assert len(again.topic("t").partitions) == 3
    assert again.topic("t").config.segment_bytes == 1000
    again.close()


def test_orphan_partition_directories_are_removed(tmp_path: Path) -> None:
    (tmp_path / "ghost-0").mkdir()
    (tmp_path / "ghost-0" / "00000000000000000000.log").write_bytes(b"")
    (tmp_path / "notes").mkdir()
    manager = LogManager(tmp_path)
    manager.create_topic("t", 1)
    manager.close()
    (tmp_path / "t-5").mkdir()
    manager = LogManager(tmp_path)
    assert not (tmp_path / "ghost-0").exists()
    assert not (tmp_path / "t-5").exists()
    assert (tmp_path / "notes").exists()
    manager.close()


def test_second_process_is_locked_out(tmp_path: Path) -> None:
    manager = LogManager(tmp_path)
    with pytest.raises(DataDirLocked):
        LogManager(tmp_path)
    manager.close()
    LogManager(tmp_path).close()


def test_maintenance_passes(tmp_path: Path) -> None:
    manager = LogManager(tmp_path)
    manager.create_topic("kept", 1, {"segment.bytes": 200, "retention.bytes": 0})
    manager.create_topic("compacted", 1, {"segment.bytes": 200, "cleanup.policy": "compact"})
    manager.create_topic("flushed", 1, {"flush.ms": 0})
    for name in ("kept", "compacted"):
        log = manager.log(name, 0)
        for i in range(10):
            log.append_as_leader(batch_of([b"v" * 80], keys=[b"k%d" % (i % 2)]), 0)
        log.advance_high_watermark(log.log_end_offset)
    manager.log("flushed", 0).append_as_leader(batch_of([b"x"]), 0)
    assert manager.apply_retention() > 0
    stats = manager.clean_logs(force=True)
    assert len(stats) == 1 and stats[0].records_removed > 0
    assert manager.cleaner_offsets[("compacted", 0)] == stats[0].cleaned_up_to
    assert manager.flush_due_logs() == 1
    assert manager.log("flushed", 0).recovery_point == 1
    manager.close()
    assert LogManager(tmp_path).cleaner_offsets[("compacted", 0)] == stats[0].cleaned_up_to


def _run_together(calls: list[Callable[[], object]]) -> list[Exception | None]:
    """Release every call at once from its own thread; each one's exception, or None."""
    barrier = threading.Barrier(len(calls))
    outcomes: list[Exception | None] = [None] * len(calls)

    def run(i: int) -> None:
        barrier.wait()
        try:
            calls[i]()
        except Exception as exc:  # collected, and checked by the caller
            outcomes[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def _assert_topics_live(manager: LogManager, data_dir: Path) -> None:
    """Every topic's partitions are numbered 0..n-1, have their directories and take appends."""
    for name, topic in manager.topics.items():
        assert [log.partition for log in topic.partitions] == list(range(len(topic.partitions)))
        assert (data_dir / TOPICS_DIR / f"{name}.json").exists()
        for log in topic.partitions:
            assert log.segments[-1].path.exists()
            end = log.log_end_offset
            log.append_as_leader(batch_of([name.encode()]), 0)
            log.advance_high_watermark(log.log_end_offset)
            assert [r.value for r in read_all(log, end)] == [name.encode()]
    owned = {f"{log.topic}-{log.partition}" for log in manager.all_logs()}
    assert {p.name for p in data_dir.iterdir() if p.is_dir()} == owned | {TOPICS_DIR}


def test_concurrent_creates_of_one_name_make_exactly_one_topic(tmp_path: Path) -> None:
    manager = LogManager(tmp_path)
    outcomes = _run_together([lambda: manager.create_topic("t", 3)] * 6)
    assert outcomes.count(None) == 1
    assert all(isinstance(o, TopicAlreadyExists) for o in outcomes if o is not None)
    assert len(manager.topic("t").partitions) == 3
    _assert_topics_live(manager, tmp_path)
    manager.close()


def test_concurrent_creates_deletes_and_partition_adds_stay_consistent(tmp_path: Path) -> None:
    manager = LogManager(tmp_path)
    manager.create_topic("gone", 2)
    manager.create_topic("grown", 1)
    outcomes = _run_together(
        [
            lambda: manager.create_topic("new", 2),
            lambda: manager.create_topic("new", 2),
            lambda: manager.delete_topic("gone"),
            lambda: manager.create_topic("gone", 3),
            lambda: manager.add_partitions("grown", 4),
            lambda: manager.add_partitions("grown", 4),
            lambda: manager.alter_topic_configs("grown", {"retention.ms": 1000}),
        ]
    )
    create_new, create_new_again, delete_gone, recreate_gone, grow, grow_again, alter = outcomes
    assert [create_new, create_new_again].count(None) == 1
    assert isinstance(create_new or create_new_again, TopicAlreadyExists)
    assert delete_gone is None and alter is None
    if recreate_gone is None:  # the delete ran first
        assert len(manager.topic("gone").partitions) == 3
    else:
        assert isinstance(recreate_gone, TopicAlreadyExists)
        assert "gone" not in manager.topics
    assert [grow, grow_again].count(None) == 1
    assert isinstance(grow or grow_again, InvalidPartitions)
    assert len(manager.topic("grown").partitions) == 4
    _assert_topics_live(manager, tmp_path)
    expected = {name: len(topic.partitions) for name, topic in manager.topics.items()}
    manager.close()
    again = LogManager(tmp_path)
    assert {name: len(topic.partitions) for name, topic in again.topics.items()} == expected
    assert again.topic("grown").config.retention_ms == 1000
    again.close()


def test_create_keeps_a_given_topic_id(tmp_path: Path) -> None:
    manager = LogManager(tmp_path)
    assert manager.create_topic("t", topic_id="0123456789abcdef0123456789abcdef").topic_id == (
        "0123456789abcdef0123456789abcdef"
    )
    assert len(manager.create_topic("u").topic_id) == 32
    manager.close()
    again = LogManager(tmp_path)
    assert again.topic("t").topic_id == "0123456789abcdef0123456789abcdef"
    again.close()


def test_the_startup_report_says_what_recovery_did(tmp_path: Path) -> None:
    empty = LogManager(tmp_path / "empty")
    assert empty.startup.new and not empty.startup.clean_shutdown
    assert empty.startup.summary().startswith("a new data directory, nothing to recover")
    empty.close()
    again = LogManager(tmp_path / "empty")
    assert again.startup.summary().startswith("0 topics, 0 partitions opened after a clean")
    again.close()

    manager = LogManager(tmp_path / "data")
    log = manager.create_topic("t", 2).partitions[0]
    log.append_as_leader(batch_of([b"a"]), 0)
    segment = log.segments[-1].path
    import os

    os.close(manager._lock_fd)  # the process dies here
    with segment.open("ab") as f:
        f.write(b"\x00" * 7)  # a torn batch
    reopened = LogManager(tmp_path / "data")
    report = reopened.startup
    assert (report.clean_shutdown, report.topics, report.partitions) == (False, 1, 2)
    assert [
        (r.topic, r.partition, r.truncated_bytes, r.segments_deleted) for r in report.truncated
    ] == [("t", 0, 7, 0)]
    assert report.truncated_bytes == 7 and report.checked == 2 and not report.new
    assert all(r.seconds >= 0 for r in report.recovered)
    summary = report.summary()
    assert summary.startswith("1 topic, 2 partitions opened after an unclean shutdown in")
    assert "2 partitions checked, 1 partition cut back by 7 bytes; slowest t-" in summary
    reopened.close()


@pytest.mark.parametrize("publish_watermarks", [False, True])
def test_partitions_beyond_the_descriptor_budget_are_refused(
    tmp_path: Path, publish_watermarks: bool
) -> None:
    """Three quarters of the soft limit for the partitions' own descriptors: one each (the
    active segment), two when the watermarks file is published too."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    manager = LogManager(tmp_path, publish_watermarks=publish_watermarks)
    # Room for what this process has open already, and a quarter of the limit left over.
    limit = 4 * (len(os.listdir("/proc/self/fd")) + 64)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
        fits = limit * 3 // 4 // (2 if publish_watermarks else 1)
        with pytest.raises(TooManyPartitions):
            manager.create_topic("big", fits + 1)
        assert "big" not in manager.topics
        manager.create_topic("fits", fits)
        with pytest.raises(TooManyPartitions):
            manager.create_topic("one-more", 1)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        manager.close()
