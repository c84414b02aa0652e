"""A failing disk under one partition: EIO or EROFS from a write, an fsync, a roll, an index
write or a read takes that partition offline (KafkaStorageError, for good in this run); a full
disk only refuses the request. The faults are injected at the OS calls (os.write, os.fsync,
os.pread, os.ftruncate, open, io.FileIO), for the files under one partition's directory only,
so that the other partitions keep working on the same filesystem. The restart after the disk
is fixed finds everything acknowledged.

(A real failing device is in tests/e2e/test_failing_disk.py: an ext4 shut down, or remounted
read-only by its own error handling. This kernel has no device-mapper for dm-flakey.)"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.config import TopicConfig
from engine.errors import InsufficientStorage, KafkaStorageError, LogClosed, StorageError
from engine.log import PartitionLog
from engine.manager import CLEAN_SHUTDOWN, LogManager
from tests.engine.conftest import FakeClock, batch_of, read_all
from tests.faults import Disk


def open_log(root: Path, clock: FakeClock, partition: int = 0, **configs: object) -> PartitionLog:
    config = TopicConfig().with_overrides(configs)
    return PartitionLog(root / f"t-{partition}", "t", partition, config, clock=clock)


@pytest.fixture
def logs(tmp_path: Path, clock: FakeClock) -> tuple[PartitionLog, PartitionLog]:
    """Two partitions on one filesystem: t-0, whose disk will fail, and t-1, which stays."""
    return open_log(tmp_path, clock, 0), open_log(tmp_path, clock, 1)


@pytest.fixture
def disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Disk]:
    yield Disk(monkeypatch, tmp_path / "t-0")


def acknowledged(log: PartitionLog, values: list[bytes]) -> None:
    for value in values:
        log.append_as_leader(batch_of([value]), 0)
    log.advance_high_watermark(log.log_end_offset)


def assert_offline(log: PartitionLog, errno_name: str) -> None:
    """Every later operation refuses with KafkaStorageError, naming the partition and the
    OS error."""
    assert log.offline
    for operation in (
        lambda: log.append_as_leader(batch_of([b"later"]), 0),
        lambda: log.read(0, 1 << 20),
        lambda: log.flush(),
        lambda: log.roll(),
        lambda: log.truncate_to(0),
        lambda: log.apply_retention(),
        lambda: log.offset_for_timestamp(0),
    ):
        with pytest.raises(KafkaStorageError) as refused:
            operation()
        detail = str(refused.value)
        assert "t-0 is offline" in detail and os.strerror(getattr(errno, errno_name)) in detail
        assert (refused.value.topic, refused.value.partition) == ("t", 0)


def still_works(log: PartitionLog) -> None:
    """The other partition on the same filesystem appends, flushes and reads."""
    before = log.log_end_offset
    log.append_as_leader(batch_of([b"other"]), 0)
    log.advance_high_watermark(log.log_end_offset)
    log.flush()
    assert not log.offline
    assert read_all(log, before)[-1].value == b"other"


def reopened(root: Path, clock: FakeClock, log: PartitionLog, **kwargs: Any) -> PartitionLog:
    """The restart after the disk is fixed: the log closed (its failure says so), opened again
    from its recovery point with a CRC check."""
    with pytest.raises(KafkaStorageError):
        log.close()
    return PartitionLog(
        root / "t-0",
        "t",
        0,
        TopicConfig(),
        clock=clock,
        recovery_point=log.recovery_point,
        high_watermark=log.high_watermark,
        **kwargs,
    )


@pytest.mark.parametrize("code", ["EIO", "EROFS"])
def test_a_failed_write_takes_the_partition_offline_and_appends_nothing(
    logs: tuple[PartitionLog, PartitionLog],
    disk: Disk,
    tmp_path: Path,
    clock: FakeClock,
    code: str,
) -> None:
    log, other = logs
    acknowledged(log, [b"a", b"b"])
    size = log.segments[-1].path.stat().st_size
    disk.fail("write", getattr(errno, code))
    with pytest.raises(KafkaStorageError) as refused:
        log.append_as_leader(batch_of([b"c"]), 0)
    assert "nothing was appended" in str(refused.value)
    assert "writing the log failed" in str(refused.value)
    assert log.log_end_offset == 2 and log.segments[-1].path.stat().st_size == size
    disk.heal()  # a disk that answers again does not bring the partition back in this run
    assert_offline(log, code)
    still_works(other)
    again = reopened(tmp_path, clock, log)
    assert not again.offline
    assert [r.value for r in read_all(again)] == [b"a", b"b"]
    again.append_as_leader(batch_of([b"c"]), 0)
    assert again.log_end_offset == 3


def test_a_full_disk_only_refuses_the_append(
    logs: tuple[PartitionLog, PartitionLog], disk: Disk
) -> None:
    """ENOSPC heals by itself: the partition stays online (507, not 503)."""
    log, _ = logs
    acknowledged(log, [b"a"])
    disk.fail("write", errno.ENOSPC)
    with pytest.raises(InsufficientStorage):
        log.append_as_leader(batch_of([b"b"]), 0)
    assert not log.offline
    disk.heal()
    acknowledged(log, [b"b"])
    assert [r.value for r in read_all(log)] == [b"a", b"b"]


def test_a_write_that_cannot_be_cut_back_takes_the_partition_offline(
    logs: tuple[PartitionLog, PartitionLog], disk: Disk
) -> None:
    """A full disk whose partial write cannot be cut back leaves the file in an unknown state:
    nothing may be appended after it, so the partition goes offline although ENOSPC alone
    would not take it there."""
    log, _ = logs
    acknowledged(log, [b"a"])
    disk.fail("write", errno.ENOSPC)
    disk.fail("ftruncate", errno.EIO)
    cut_back = r"No space left on device, and cutting \S+ back failed"
    with pytest.raises(KafkaStorageError, match=cut_back):
        log.append_as_leader(batch_of([b"b"]), 0)
    assert log.offline and log.log_end_offset == 1


@pytest.mark.parametrize("code", ["EIO", "ENOSPC"])
def test_a_failed_fsync_is_final(
    logs: tuple[PartitionLog, PartitionLog],
    disk: Disk,
    tmp_path: Path,
    clock: FakeClock,
    code: str,
) -> None:
    """fsyncgate: after a failed fsync the kernel may have dropped the pages it could not write,
    and the next fsync would succeed. So whatever its errno (ENOSPC too), the recovery point
    stays, the log goes offline and no later flush acknowledges anything."""
    log, other = logs
    acknowledged(log, [b"a"])
    log.flush()
    acknowledged(log, [b"b"])
    disk.fail("fsync", getattr(errno, code))
    with pytest.raises(KafkaStorageError, match="flushing the log to disk failed"):
        log.flush()
    assert log.recovery_point == 1
    disk.heal()
    with pytest.raises(KafkaStorageError):
        log.flush()  # a retry that would now "succeed" is refused
    assert log.recovery_point == 1
    assert_offline(log, code)
    still_works(other)
    again = reopened(tmp_path, clock, log)
    assert again.recovery.segments_scanned == 1  # above the recovery point: CRC-checked
    assert [r.value for r in read_all(again)] == [b"a", b"b"]


def test_a_failed_roll_takes_the_partition_offline(
    tmp_path: Path, clock: FakeClock, disk: Disk
) -> None:
    """The new segment's file cannot be created (a read-only filesystem)."""
    log = open_log(tmp_path, clock, 0, **{"segment.bytes": 200})
    other = open_log(tmp_path, clock, 1)
    acknowledged(log, [b"x" * 100])
    disk.fail("FileIO", errno.EROFS)
    with pytest.raises(KafkaStorageError, match="nothing was appended"):
        log.append_as_leader(batch_of([b"y" * 100]), 0)  # past segment.bytes: a roll
    assert len(log.segments) == 1 and log.log_end_offset == 1
    assert_offline(log, "EROFS")
    still_works(other)


def test_a_failed_roll_outside_an_append_takes_the_partition_offline(
    logs: tuple[PartitionLog, PartitionLog], disk: Disk
) -> None:
    """A roll on its own (segment.ms, as tiering asks) failing on the old segment's index."""
    log, _ = logs
    acknowledged(log, [b"a"])
    disk.fail("open", errno.EIO)
    with pytest.raises(KafkaStorageError, match="rolling a new segment failed"):
        log.roll()
    assert_offline(log, "EIO")


def test_a_failed_index_write_takes_the_partition_offline(
    logs: tuple[PartitionLog, PartitionLog], disk: Disk, tmp_path: Path, clock: FakeClock
) -> None:
    log, other = logs
    acknowledged(log, [b"a", b"b"])
    disk.fail("open", errno.EIO)
    with pytest.raises(KafkaStorageError, match="writing the indexes failed"):
        log.flush()
    assert log.recovery_point == 0
    disk.heal()
    assert_offline(log, "EIO")
    still_works(other)
    again = reopened(tmp_path, clock, log)
    assert [r.value for r in read_all(again)] == [b"a", b"b"]


def test_a_failed_read_takes_the_partition_offline_and_serves_nothing(
    logs: tuple[PartitionLog, PartitionLog], disk: Disk
) -> None:
    """What a disk answering EIO returns can no longer be trusted, even once it answers."""
    log, other = logs
    acknowledged(log, [b"a"])
    disk.fail("pread", errno.EIO)
    with pytest.raises(KafkaStorageError, match="reading the log failed"):
        log.read(0, 1 << 20)
    disk.heal()
    assert_offline(log, "EIO")
    still_works(other)


def test_a_read_short_of_descriptors_leaves_the_partition_online(
    logs: tuple[PartitionLog, PartitionLog], disk: Disk
) -> None:
    """EMFILE is the process's, not the disk's: the read is refused, the partition stays."""
    log, _ = logs
    acknowledged(log, [b"a"])
    disk.fail("pread", errno.EMFILE)
    with pytest.raises(StorageError, match="Too many open files") as refused:
        log.read(0, 1 << 20)
    assert not isinstance(refused.value, KafkaStorageError) and not log.offline
    disk.heal()
    assert [r.value for r in read_all(log)] == [b"a"]


def test_a_failed_follower_truncation_takes_the_partition_offline(
    logs: tuple[PartitionLog, PartitionLog], disk: Disk
) -> None:
    log, _ = logs
    acknowledged(log, [b"a", b"b", b"c"])
    disk.fail("ftruncate", errno.EIO)
    with pytest.raises(KafkaStorageError, match="truncating the log failed"):
        log.truncate_to(1)
    assert_offline(log, "EIO")


def test_going_offline_wakes_the_listeners(
    logs: tuple[PartitionLog, PartitionLog], disk: Disk
) -> None:
    """Long-polls and acks=all waiters parked on the log wake up to see the error."""
    log, _ = logs
    woken: list[bool] = []
    log.add_listener(lambda changed: woken.append(changed.offline))
    disk.fail("write")
    with pytest.raises(KafkaStorageError):
        log.append_as_leader(batch_of([b"a"]), 0)
    assert woken == [True]


def test_a_manager_with_an_offline_partition_does_not_mark_its_shutdown_clean(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """So the restart after the disk is fixed CRC-checks the logs from their recovery points;
    everything acknowledged is there and the partition is back online."""
    manager = LogManager(tmp_path, clock=clock)
    manager.create_topic("t", 2)
    manager.create_topic("u")
    t0, t1 = manager.topic("t").partitions
    acknowledged(t0, [b"a", b"b"])
    acknowledged(t1, [b"c"])
    disk = Disk(monkeypatch, tmp_path / "t-0")
    disk.fail("write")
    with pytest.raises(KafkaStorageError):
        t0.append_as_leader(batch_of([b"lost"]), 0)
    assert manager.offline_logs() == [t0]
    # The background jobs pass over it and flush the others.
    t1.append_as_leader(batch_of([b"d"]), 0)
    assert manager.flush_due_logs() == 0 and manager.apply_retention() == 0
    manager.close()
    assert not (tmp_path / CLEAN_SHUTDOWN).exists()
    disk.heal()

    again = LogManager(tmp_path, clock=clock)
    assert not again.startup.clean_shutdown and not again.offline_logs()
    t0, t1 = again.topic("t").partitions
    assert [r.value for r in read_all(t0)] == [b"a", b"b"]
    assert [r.value for r in read_all(t1)] == [b"c"]
    t0.append_as_leader(batch_of([b"e"]), 0)
    assert t0.log_end_offset == 3
    again.close()
    assert (tmp_path / CLEAN_SHUTDOWN).exists()


def test_an_fsync_failing_in_the_shutdowns_flush_leaves_the_others_closed_and_unclean(
    tmp_path: Path,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The shutdown fsyncs logs on several threads: one failing there goes offline and is
    named in the error, the others close with everything acknowledged, and the shutdown is not
    marked clean, so the restart CRC-checks from the recovery points."""
    manager = LogManager(tmp_path, clock=clock, close_threads=4)
    logs = manager.create_topic("t", 4).partitions
    for i, log in enumerate(logs):
        acknowledged(log, [b"v%d" % i])
    disk = Disk(monkeypatch, tmp_path / "t-2")
    disk.fail("fsync")
    manager.close()
    disk.heal()
    assert not manager.closed_cleanly and not (tmp_path / CLEAN_SHUTDOWN).exists()
    assert logs[2].offline and not any(log.offline for log in logs[:2] + logs[3:])
    assert "1 partitions could not be closed (t-2 is offline" in caplog.text

    again = LogManager(tmp_path, clock=clock)
    assert not again.startup.clean_shutdown and not again.offline_logs()
    for i, log in enumerate(again.topic("t").partitions):
        assert [r.value for r in read_all(log)] == [b"v%d" % i]
    again.close()


def test_a_closed_offline_log_is_closed(
    logs: tuple[PartitionLog, PartitionLog], disk: Disk
) -> None:
    log, _ = logs
    disk.fail("write")
    with pytest.raises(KafkaStorageError):
        log.append_as_leader(batch_of([b"a"]), 0)
    with pytest.raises(KafkaStorageError):
        log.close()
    with pytest.raises(LogClosed):
        log.read(0, 100)
