"""Corruption injection: torn and garbage tails, flipped bytes, broken indexes, bad appends.

Each test writes a multi-segment log through the engine, closes it cleanly, damages the files as
a crash or a bad disk would, then reopens it (as after a crash when the clean-shutdown marker is
removed) and checks what recovery kept, what reads serve and where appends continue.
"""

from __future__ import annotations

import os
import random
import shutil
import struct
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import pytest

from engine import checkpoint
from engine.batch import (
    CRC_AT,
    HEADER_SIZE,
    BatchHeader,
    RecordInput,
    encode_batch,
    read_header,
    scan,
    set_leader_epoch,
)
from engine.errors import CorruptRecord, InvalidRecord, OffsetMismatch, RecordTooLarge
from engine.log import PartitionLog
from engine.manager import CLEAN_SHUTDOWN, RECOVERY_POINTS, LogManager

TOPIC = "t"
EPOCH = 3
T0 = 1_700_000_000_000  # the record at offset o has timestamp T0 + 10 * o
CONFIGS = {"segment.bytes": 2048, "index.interval.bytes": 256, "max.message.bytes": 1024}
BATCHES = 40
HUGE = 1 << 30


class Stored(NamedTuple):
    """A batch as the engine stored it."""

    header: BatchHeader
    data: bytes


def clock() -> float:
    return T0 / 1000


def open_manager(data_dir: Path) -> LogManager:
    return LogManager(data_dir, clock=clock)


@contextmanager
def opened(data_dir: Path) -> Iterator[PartitionLog]:
    """The test partition of a freshly opened manager, closed (cleanly) afterwards."""
    manager = open_manager(data_dir)
    try:
        yield manager.log(TOPIC, 0)
    finally:
        manager.close()


def records(start: int, count: int) -> list[RecordInput]:
    """Records for offsets start..start+count-1: a key, a value and a timestamp from the offset."""
    return [
        RecordInput(f"key-{o % 7}".encode(), f"value-{o}-".encode() * 8, [], T0 + 10 * o)
        for o in range(start, start + count)
    ]


def append(log: PartitionLog, count: int, compression: int = 0) -> Stored:
    data = encode_batch(records(log.log_end_offset, count), compression=compression)
    log.append_as_leader(data, EPOCH)
    return Stored(read_header(data), bytes(data))


def write_log(data_dir: Path, configs: dict[str, object] | None = None) -> list[Stored]:
    """A cleanly closed log of BATCHES batches over several segments; returns them as stored."""
    manager = open_manager(data_dir)
    manager.create_topic(TOPIC, 1, configs or CONFIGS)
    log = manager.log(TOPIC, 0)
    stored = [append(log, 1 + i % 4, compression=i % 5) for i in range(BATCHES)]
    log.advance_high_watermark(log.log_end_offset)
    assert len(log.segments) >= 4
    manager.close()
    return stored


def partition_dir(data_dir: Path) -> Path:
    return data_dir / f"{TOPIC}-0"


def segment_paths(data_dir: Path) -> list[Path]:
    return sorted(partition_dir(data_dir).glob("*.log"))


def locate(data_dir: Path, base_offset: int) -> tuple[Path, int]:
    """The segment file and byte position of the batch starting at `base_offset`."""
    for path in segment_paths(data_dir):
        for pos, header in scan(path.read_bytes()).headers:
            if header.base_offset == base_offset:
                return path, pos
    raise AssertionError(f"no batch at offset {base_offset}")


def batches_in(path: Path) -> list[BatchHeader]:
    return [header for _, header in scan(path.read_bytes()).headers]


def simulate_crash(data_dir: Path, recovery_point: int | None = None) -> None:
    """Make the next open unclean; optionally move the checkpointed recovery point back."""
    (data_dir / CLEAN_SHUTDOWN).unlink()
    if recovery_point is not None:
        checkpoint.write_offsets(data_dir / RECOVERY_POINTS, {(TOPIC, 0): recovery_point})


def flip_byte(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0xFF
    path.write_bytes(data)


def read_batches(log: PartitionLog, start: int = 0) -> list[bytes]:
    """Every batch from `start` to the log end through `read`; each must pass its CRC."""
    out: list[bytes] = []
    offset = start
    while offset < log.log_end_offset:
        data = log.read(offset, HUGE, upper_offset=log.log_end_offset).data
        result = scan(data, check_crc=True)
        assert result.error is None and result.headers, f"read at {offset}: {result.error}"
        for pos, header in result.headers:
            out.append(bytes(data[pos : pos + header.size]))
            offset = header.next_offset
    return out


def assert_appends_continue_at(log: PartitionLog, offset: int) -> None:
    """A new batch gets `offset` and reads back whole."""
    stored = append(log, 3)
    assert stored.header.base_offset == offset
    assert log.log_end_offset == offset + 3
    assert bytes(log.read(offset, HUGE, upper_offset=log.log_end_offset).data) == stored.data


# -- (a) torn active segment, (b) garbage tail ---------------------------------------------------


@pytest.mark.parametrize("cut", ["in header", "in records", "one byte short"])
def test_torn_last_batch_is_truncated_and_appends_continue(tmp_path: Path, cut: str) -> None:
    stored = write_log(tmp_path)
    last = stored[-1].header
    path, pos = locate(tmp_path, last.base_offset)
    assert path == segment_paths(tmp_path)[-1]
    keep = {"in header": 30, "in records": last.size // 2, "one byte short": last.size - 1}[cut]
    os.truncate(path, pos + keep)
    simulate_crash(tmp_path)
    with opened(tmp_path) as log:
        assert log.log_end_offset == last.base_offset
        assert path.stat().st_size == pos
        assert log.recovery.truncated_bytes == keep
        assert len(log.recovery.errors) == 1 and log.recovery.errors[0].startswith(path.name)
        assert read_batches(log) == [s.data for s in stored[:-1]]
        assert_appends_continue_at(log, last.base_offset)


GARBAGE: dict[str, Callable[[bytes], bytes]] = {
    "1 random byte": lambda last: random.Random(1).randbytes(1),
    "60 random bytes": lambda last: random.Random(60).randbytes(60),
    "5000 random bytes": lambda last: random.Random(5000).randbytes(5000),
    "zeros": lambda last: bytes(4096),  # a file extended by the crash but never written
    "replayed last batch": lambda last: last,  # whole and CRC-clean, but offsets go back
}


@pytest.mark.parametrize("kind", GARBAGE)
def test_garbage_after_last_batch_is_truncated(tmp_path: Path, kind: str) -> None:
    stored = write_log(tmp_path)
    path = segment_paths(tmp_path)[-1]
    size = path.stat().st_size
    garbage = GARBAGE[kind](stored[-1].data)
    with path.open("ab") as f:
        f.write(garbage)
    simulate_crash(tmp_path)
    with opened(tmp_path) as log:
        end = stored[-1].header.next_offset
        assert log.log_end_offset == end
        assert path.stat().st_size == size
        assert log.recovery.truncated_bytes == len(garbage)
        assert read_batches(log) == [s.data for s in stored]
        assert_appends_continue_at(log, end)


# -- (c) corrupt batch below the recovery point, (d) in the recovery range ------------------------


def middle_batch(data_dir: Path) -> tuple[Path, int, int]:
    """An old segment's batch with batches before and after it in that segment.

    Returns the segment, the batch's index in the whole log and its byte position.
    """
    path = segment_paths(data_dir)[1]
    headers = batches_in(path)
    assert len(headers) >= 3
    header = headers[len(headers) // 2]
    index = sum(len(batches_in(p)) for p in segment_paths(data_dir)[:1]) + len(headers) // 2
    return path, index, locate(data_dir, header.base_offset)[1]


CORRUPTIONS = {"record byte": HEADER_SIZE + 5, "crc field": CRC_AT}


@pytest.mark.parametrize("where", CORRUPTIONS)
def test_corrupt_batch_below_recovery_point_is_never_served(tmp_path: Path, where: str) -> None:
    stored = write_log(tmp_path)
    path, i, pos = middle_batch(tmp_path)
    bad = stored[i].header
    flip_byte(path, pos + CORRUPTIONS[where])
    with opened(tmp_path) as log:
        assert log.recovery.segments_scanned == 0  # a clean shutdown: the files are trusted
        end = log.log_end_offset
        for offset in (bad.base_offset, bad.last_offset):
            with pytest.raises(CorruptRecord) as raised:
                log.read(offset, HUGE, upper_offset=end)
            assert raised.value.offset == bad.base_offset
        segment_start = batches_in(path)[0].base_offset
        before = log.read(segment_start, HUGE, upper_offset=end).data
        first = next(j for j, s in enumerate(stored) if s.header.base_offset == segment_start)
        assert bytes(before) == b"".join(s.data for s in stored[first:i])
        assert read_batches(log, bad.next_offset) == [s.data for s in stored[i + 1 :]]


@pytest.mark.parametrize("where", CORRUPTIONS)
def test_corrupt_batch_in_recovery_range_truncates_the_log_there(
    tmp_path: Path, where: str
) -> None:
    stored = write_log(tmp_path)
    path, i, pos = middle_batch(tmp_path)
    bad = stored[i].header
    later = segment_paths(tmp_path)[2:]
    cut_bytes = path.stat().st_size - pos + sum(p.stat().st_size for p in later)
    flip_byte(path, pos + CORRUPTIONS[where])
    simulate_crash(tmp_path, recovery_point=batches_in(path)[0].base_offset)
    with opened(tmp_path) as log:
        assert log.log_end_offset == bad.base_offset
        assert path.stat().st_size == pos
        assert not any(p.exists() for p in later)
        report = log.recovery
        assert (report.segments_scanned, report.segments_deleted) == (1, len(later))
        assert report.truncated_bytes == cut_bytes
        assert len(report.errors) == 1
        assert report.errors[0].startswith(path.name) and "CRC mismatch" in report.errors[0]
        assert read_batches(log) == [s.data for s in stored[:i]]
        assert_appends_continue_at(log, bad.base_offset)


# -- (e) missing or corrupt indexes ---------------------------------------------------------------


def damage(path: Path, how: str) -> None:
    size = path.stat().st_size
    if how == "deleted":
        path.unlink()
    elif how == "odd size":
        os.truncate(path, size - 3)
    elif how == "random garbage":
        path.write_bytes(random.Random(path.name).randbytes(size))
    else:
        assert how == "0xFF garbage"
        path.write_bytes(b"\xff" * size)


@pytest.mark.parametrize("kinds", [(".index",), (".timeindex",), (".index", ".timeindex")])
@pytest.mark.parametrize("how", ["deleted", "odd size", "random garbage", "0xFF garbage"])
def test_damaged_indexes_are_rebuilt_and_lookups_stay_correct(
    tmp_path: Path, kinds: tuple[str, ...], how: str
) -> None:
    stored = write_log(tmp_path)
    index_paths = [p.with_suffix(kind) for p in segment_paths(tmp_path) for kind in kinds]
    originals = {p: p.read_bytes() for p in index_paths}
    for path in index_paths:
        damage(path, how)
    with opened(tmp_path) as log:
        assert log.recovery.segments_scanned == len(log.segments)
        assert {p: p.read_bytes() for p in index_paths} == originals
        for s in stored:
            for offset in range(s.header.base_offset, s.header.next_offset):
                assert bytes(log.read(offset, 1, upper_offset=log.log_end_offset).data) == s.data
                ts = T0 + 10 * offset
                assert log.offset_for_timestamp(ts) == (offset, ts)
                assert log.offset_for_timestamp(ts - 5) == (offset, ts)
        assert log.offset_for_timestamp(T0 + 10 * log.log_end_offset) is None


# -- (f) a huge batch length ----------------------------------------------------------------------


def set_length(path: Path, position: int, length: int) -> None:
    data = bytearray(path.read_bytes())
    struct.pack_into(">i", data, position + 8, length)
    path.write_bytes(data)


@contextmanager
def peak_allocation() -> Iterator[Callable[[], int]]:
    """Trace Python allocations; the yielded function returns the peak so far, in bytes."""
    tracemalloc.start()
    try:
        yield lambda: tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_huge_length_in_last_batch_is_a_torn_tail(tmp_path: Path) -> None:
    stored = write_log(tmp_path)
    last = stored[-1].header
    path, pos = locate(tmp_path, last.base_offset)
    set_length(path, pos, 0x7FFFFFFF)
    simulate_crash(tmp_path)
    with peak_allocation() as peak, opened(tmp_path) as log:
        assert log.log_end_offset == last.base_offset
        assert path.stat().st_size == pos
        assert read_batches(log) == [s.data for s in stored[:-1]]
        assert peak() < 16 * 1024 * 1024


def test_huge_length_below_recovery_point_is_reported_not_skipped(tmp_path: Path) -> None:
    stored = write_log(tmp_path)
    path = segment_paths(tmp_path)[1]
    headers = batches_in(path)
    bad = headers[0]
    assert path.with_suffix(".index").stat().st_size >= 16  # a later batch is indexed too
    set_length(path, 0, 0x7FFFFFFF)
    with peak_allocation() as peak, opened(tmp_path) as log:
        assert log.recovery.segments_scanned == 0
        with pytest.raises(CorruptRecord) as raised:
            log.read(bad.base_offset, HUGE, upper_offset=log.log_end_offset)
        assert raised.value.offset == bad.base_offset
        by_offset = {
            o: s for s in stored for o in range(s.header.base_offset, s.header.next_offset)
        }
        for offset in range(bad.next_offset, headers[-1].next_offset):
            try:
                data = log.read(offset, 1, upper_offset=log.log_end_offset).data
            except CorruptRecord:
                continue  # reachable only by walking over the broken batch
            assert bytes(data) == by_offset[offset].data  # never a later batch instead
        last = log.read(headers[-1].base_offset, 1, upper_offset=log.log_end_offset).data
        assert bytes(last) == by_offset[headers[-1].base_offset].data
        assert peak() < 16 * 1024 * 1024


# -- (g) rejected appends leave the log unchanged -------------------------------------------------


def snapshot(log: PartitionLog) -> tuple[int, dict[str, bytes], list[bytes]]:
    """Everything a rejected append must not change: log end, files and readable batches."""
    files = {p.name: p.read_bytes() for p in sorted(log.directory.iterdir())}
    return log.log_end_offset, files, read_batches(log)


def follower_batch(base_offset: int, count: int = 2) -> bytearray:
    """A batch as a leader stamped it: offsets from `base_offset`, epoch EPOCH."""
    data = encode_batch(records(base_offset, count), base_offset=base_offset)
    set_leader_epoch(data, 0, EPOCH)
    return data


def corrupted(data: bytearray) -> bytearray:
    out = bytearray(data)
    out[-1] ^= 0x01
    return out


FOLLOWER_APPENDS: dict[str, tuple[Callable[[int], bytearray], type[Exception]]] = {
    "bad crc": (lambda end: corrupted(follower_batch(end)), InvalidRecord),
    "torn batch": (lambda end: follower_batch(end)[:-1], InvalidRecord),
    "gap": (lambda end: follower_batch(end + 1), OffsetMismatch),
    "overlap": (lambda end: follower_batch(end - 1), OffsetMismatch),
    "bad crc in second batch": (
        lambda end: follower_batch(end) + corrupted(follower_batch(end + 2)),
        InvalidRecord,
    ),
    "gap after first batch": (
        lambda end: follower_batch(end) + follower_batch(end + 3),
        OffsetMismatch,
    ),
}


@pytest.mark.parametrize("case", FOLLOWER_APPENDS)
def test_bad_follower_append_is_rejected_and_log_unchanged(tmp_path: Path, case: str) -> None:
    write_log(tmp_path)
    make, error = FOLLOWER_APPENDS[case]
    with opened(tmp_path) as log:
        before = snapshot(log)
        with pytest.raises(error):
            log.append_as_follower(make(log.log_end_offset))
        assert snapshot(log) == before
        good = follower_batch(log.log_end_offset)
        assert log.append_as_follower(good).first_offset == before[0]


@pytest.mark.parametrize("too_large_at", [0, 1])
def test_leader_append_over_max_message_bytes_is_rejected_and_log_unchanged(
    tmp_path: Path, too_large_at: int
) -> None:
    write_log(tmp_path)
    with opened(tmp_path) as log:
        batches = [encode_batch(records(0, 2)), encode_batch(records(0, 2))]
        batches[too_large_at] = encode_batch(records(0, 30))
        assert len(batches[too_large_at]) > log.config.max_message_bytes
        data = bytearray().join(batches)
        sent = bytes(data)
        before = snapshot(log)
        with pytest.raises(RecordTooLarge):
            log.append_as_leader(data, EPOCH)
        assert snapshot(log) == before
        assert data == sent  # nothing was stamped either


# -- (h) a crash during compaction ----------------------------------------------------------------


COMPACTED = {**CONFIGS, "cleanup.policy": "compact"}


def compacted_reference(data_dir: Path, reference_dir: Path) -> Path:
    """Copy the log to `reference_dir` and compact the copy; return a segment it rewrote."""
    shutil.copytree(data_dir, reference_dir)
    manager = open_manager(reference_dir)
    try:
        assert manager.clean_logs(force=True)
    finally:
        manager.close()
    for path in segment_paths(data_dir):
        if path.read_bytes() != (partition_dir(reference_dir) / path.name).read_bytes():
            return path
    raise AssertionError("compaction rewrote nothing")


def leave_interrupted_compaction(segment: Path, cleaned: Path, state: str) -> bytes:
    """Put the files a crash in `state` leaves behind; return the .log bytes the open must keep.

    `cleaned` is the same segment in the compacted reference copy.
    """
    parts = {s: cleaned.with_suffix(s).read_bytes() for s in (".index", ".timeindex", ".log")}
    if state == "cleaned files written":
        segment.with_name(segment.name + ".cleaned").write_bytes(parts[".log"][:100])
        segment.with_suffix(".index.cleaned").write_bytes(parts[".index"])
        return segment.read_bytes()
    for suffix, data in parts.items():
        segment.with_suffix(suffix + ".swap").write_bytes(data)
    if state == "indexes swapped in":
        for suffix in (".index", ".timeindex"):
            os.replace(segment.with_suffix(suffix + ".swap"), segment.with_suffix(suffix))
    else:
        assert state == "swap files written"
    return parts[".log"]


@pytest.mark.parametrize(
    "state", ["cleaned files written", "swap files written", "indexes swapped in"]
)
def test_crash_mid_compaction_is_finished_or_discarded_on_open(tmp_path: Path, state: str) -> None:
    data_dir = tmp_path / "data"
    write_log(data_dir, COMPACTED)
    segment = compacted_reference(data_dir, tmp_path / "reference")
    cleaned = partition_dir(tmp_path / "reference") / segment.name
    expected = {p.name: p.read_bytes() for p in segment_paths(data_dir)}
    expected[segment.name] = leave_interrupted_compaction(segment, cleaned, state)
    simulate_crash(data_dir)
    with opened(data_dir) as log:
        leftovers = [p.name for p in log.directory.iterdir() if p.suffix in (".swap", ".cleaned")]
        assert leftovers == []
        assert {p.name: p.read_bytes() for p in segment_paths(data_dir)} == expected
        if state != "cleaned files written":
            assert (
                segment.with_suffix(".index").read_bytes()
                == cleaned.with_suffix(".index").read_bytes()
            )
        assert b"".join(read_batches(log)) == b"".join(expected[n] for n in sorted(expected))
