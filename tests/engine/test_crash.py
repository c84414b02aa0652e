"""Crash tests: a child process appending batches is SIGKILLed, then the log is recovered.

Each cycle starts `crash_child` on the same data directory, reads its acknowledgements line by
line, kills it after a random number of them (it may be mid-append), reopens the log in this
process (which must take the unclean-shutdown path) and checks that every acknowledged batch
survived byte for byte in a contiguous, CRC-clean log. The manager is then closed cleanly and
the next cycle's child appends after whatever survived.
"""

from __future__ import annotations

import hashlib
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import NamedTuple

from engine.batch import read_header, scan
from engine.log import PartitionLog
from engine.manager import LogManager
from tests.engine.crash_child import TOPIC

REPO = Path(__file__).resolve().parents[2]
CHILD_TIMEOUT = 60.0  # seconds: a watchdog against a hung child, never used to synchronise
READ_BYTES = 256 * 1024


class Ack(NamedTuple):
    """One acknowledged (or stored) batch: its offsets and the sha256 of its bytes."""

    base_offset: int
    last_offset: int
    digest: str


class ChildRun(NamedTuple):
    ready_offset: int  # the log end offset the child saw on opening
    acks: list[Ack]


def parse_ack(line: str) -> Ack:
    kind, base, last, digest = line.split()
    assert kind == "ack", line
    return Ack(int(base), int(last), digest)


def kill_points(rng: random.Random, cycles: int) -> list[int]:
    """Acknowledgements to wait for before each kill: a few, some and many, in turn."""
    ranges = ((0, 2), (3, 60), (60, 400))
    return [rng.randint(*ranges[i % len(ranges)]) for i in range(cycles)]


def run_child(data_dir: Path, seed: int, epoch: int, kill_after: int, flush: bool) -> ChildRun:
    """Start crash_child, SIGKILL it after `kill_after` acks and return every ack it printed."""
    command = [sys.executable, "-m", "tests.engine.crash_child", str(data_dir), str(seed)]
    command += [str(epoch), *(["--flush"] if flush else [])]
    stderr_path = data_dir.parent / f"child-{epoch}.stderr"
    with stderr_path.open("wb") as stderr:
        proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=stderr, text=True)
    assert proc.stdout is not None
    watchdog = threading.Timer(CHILD_TIMEOUT, proc.kill)
    watchdog.start()
    try:
        ready = proc.stdout.readline()
        assert ready.startswith("ready "), stderr_path.read_text()
        lines: list[str] = []
        while len(lines) < kill_after:
            line = proc.stdout.readline()
            assert line.endswith("\n"), f"child died early:\n{stderr_path.read_text()}"
            lines.append(line)
        proc.kill()
        proc.wait()
        lines += proc.stdout.readlines()  # acknowledged before the kill landed
    finally:
        watchdog.cancel()
        proc.kill()
        proc.wait()
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL, stderr_path.read_text()
    acks = [parse_ack(line) for line in lines if line.endswith("\n")]
    return ChildRun(int(ready.split()[1]), acks)


def digest(data: memoryview | bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def walk(log: PartitionLog) -> dict[int, Ack]:
    """Read the whole log through `read`; every batch must pass its CRC and follow the last."""
    stored: dict[int, Ack] = {}
    offset = log.log_start_offset
    end = log.log_end_offset
    while offset < end:
        data = log.read(offset, READ_BYTES, upper_offset=end).data
        result = scan(data, check_crc=True)
        assert result.error is None, f"read at offset {offset}: {result.error}"
        assert result.headers, f"read at offset {offset} returned nothing before {end}"
        for pos, header in result.headers:
            assert header.base_offset == offset, f"batch at {header.base_offset}, expected {offset}"
            stored[offset] = Ack(offset, header.last_offset, digest(data[pos : pos + header.size]))
            offset = header.next_offset
    return stored


def assert_segment_files_clean(log: PartitionLog) -> None:
    """Each segment file holds only whole CRC-clean batches: recovery cut any torn tail."""
    for segment in log.segments:
        raw = segment.path.read_bytes()
        result = scan(raw, check_crc=True)
        assert result.error is None, f"{segment.path.name}: {result.error}"
        assert result.valid_bytes == len(raw)


def assert_acknowledged_batches_stored(log: PartitionLog, acks: list[Ack]) -> None:
    """Each ack's batch reads back at its base offset with the acknowledged bytes."""
    for ack in acks:
        data = log.read(ack.base_offset, 1, upper_offset=log.log_end_offset).data
        header = read_header(data)
        stored = Ack(header.base_offset, header.last_offset, digest(data[: header.size]))
        assert stored == ack


def run_cycles(data_dir: Path, seed: int, cycles: int, flush: bool) -> None:
    """Kill a child `cycles` times; after each kill recover and check every ack so far."""
    rng = random.Random(seed)
    acked: dict[int, Ack] = {}
    log_end = 0
    for epoch, kill_after in enumerate(kill_points(rng, cycles)):
        run = run_child(data_dir, rng.getrandbits(32), epoch, kill_after, flush)
        assert run.ready_offset == log_end, "the child's clean open lost or invented batches"
        assert len(run.acks) >= kill_after
        acked.update((ack.base_offset, ack) for ack in run.acks)
        manager = LogManager(data_dir)
        try:
            assert not manager.had_clean_shutdown
            log = manager.log(TOPIC, 0)
            assert log.recovery.segments_scanned >= 1  # at least the active segment
            assert log.log_start_offset == 0
            stored = walk(log)
            missing = {base: ack for base, ack in acked.items() if stored.get(base) != ack}
            assert not missing, f"cycle {epoch}: acknowledged batches lost or changed: {missing}"
            assert_acknowledged_batches_stored(log, run.acks)
            assert_segment_files_clean(log)
            log_end = log.log_end_offset
        finally:
            manager.close()


def test_sigkill_mid_append_keeps_every_acknowledged_batch(tmp_path: Path) -> None:
    run_cycles(tmp_path / "data", seed=20240611, cycles=24, flush=False)


def test_sigkill_with_fsync_per_append_keeps_every_acknowledged_batch(tmp_path: Path) -> None:
    run_cycles(tmp_path / "data", seed=777, cycles=6, flush=True)
