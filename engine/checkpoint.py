"""Kafka-style checkpoint files: a version line, a count line, then one entry per line.

Written to a temporary file, fsynced and renamed, so a crash leaves the old or the new file.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from engine.fsync import checked_fsync

VERSION = 0


class CheckpointError(Exception):
    """A checkpoint file that does not parse; callers fall back to the safe default."""


def write_lines(path: Path, entries: Iterable[tuple[object, ...]], *, durable: bool = True) -> None:
    """Replace the file; `durable=False` skips the fsyncs (see `sync` for doing them later)."""
    rows = [" ".join(str(field) for field in entry) for entry in entries]
    text = "\n".join([str(VERSION), str(len(rows)), *rows]) + "\n"
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="ascii") as f:
        f.write(text)
        f.flush()
        if durable:
            checked_fsync(f.fileno(), tmp)
    os.replace(tmp, path)
    if durable:
        fsync_directory(path.parent)


def sync(path: Path) -> None:
    """fsync a file written with `durable=False`, and its directory (for the rename)."""
    _fsync_path(path)
    fsync_directory(path.parent)


def read_lines(path: Path, fields: int) -> list[list[str]]:
    """Entries as lists of `fields` strings; [] when the file is absent."""
    try:
        lines = path.read_text(encoding="ascii").splitlines()
    except FileNotFoundError:
        return []
    except UnicodeDecodeError as exc:
        raise CheckpointError(f"{path}: not ASCII") from exc
    if len(lines) < 2 or lines[0] != str(VERSION) or not lines[1].isdigit():
        raise CheckpointError(f"{path}: bad header")
    rows = [line.split() for line in lines[2:]]
    if len(rows) != int(lines[1]) or any(len(row) != fields for row in rows):
        raise CheckpointError(f"{path}: expected {lines[1]} entries of {fields} fields")
    return rows


def write_offsets(path: Path, offsets: Mapping[tuple[str, int], int]) -> None:
    """Per-partition offsets, as in Kafka's recovery-point and replication checkpoints."""
    write_lines(path, ((topic, part, off) for (topic, part), off in sorted(offsets.items())))


def read_offsets(path: Path) -> dict[tuple[str, int], int]:
    try:
        return {(t, int(p)): int(o) for t, p, o in read_lines(path, 3)}
    except ValueError as exc:
        raise CheckpointError(f"{path}: {exc}") from exc


def fsync_directory(directory: Path) -> None:
    """Make renames and creations in `directory` durable."""
    _fsync_path(directory)


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        checked_fsync(fd, path)
    finally:
        os.close(fd)
