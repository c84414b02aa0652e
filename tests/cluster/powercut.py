"""The lost-unsynced-writes fault: what a power cut does to a stopped node's files.

SIGKILL keeps the page cache, so a killed node finds on restart everything it wrote, synced
or not. After the kill this cuts each segment of a topic at the node's recovery point (the
offset below which the node fsynced the log, from its `recovery-point-offset-checkpoint`,
itself written durably): batches at or above it are dropped, as the kernel would drop pages
that never reached the disk. The checkpoint may lag the last fsync, so the cut can take more
than a real power cut would, never less (docs/cluster.md, "Lost unsynced writes").
"""

from __future__ import annotations

import os
from pathlib import Path

from engine import batch as fmt
from engine.checkpoint import read_offsets

RECOVERY_POINTS = "recovery-point-offset-checkpoint"


def recovery_point(data_dir: Path, topic: str, partition: int) -> int:
    """The offset below which the node says partition's log is fsynced (0 if never)."""
    return read_offsets(data_dir / RECOVERY_POINTS).get((topic, partition), 0)


def cut_at(directory: Path, offset: int) -> int:
    """Truncate the segment files in `directory` before the first batch at or after `offset`;
    returns how many bytes were dropped."""
    dropped = 0
    for path in sorted(directory.glob("*.log")):
        data = path.read_bytes()
        keep = 0
        if int(path.stem) < offset:
            scan = fmt.scan(data, check_crc=False)
            keep = next(
                (pos for pos, header in scan.headers if header.base_offset >= offset),
                len(data),
            )
        if keep < len(data):
            os.truncate(path, keep)
            dropped += len(data) - keep
    return dropped


def lose_unsynced(data_dir: Path, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    """Drop every partition's unsynced tail; per partition (recovery point, bytes dropped)."""
    out = {}
    for p in range(partitions):
        directory = data_dir / f"{topic}-{p}"
        point = recovery_point(data_dir, topic, p)
        out[p] = (point, cut_at(directory, point) if directory.is_dir() else 0)
    return out
