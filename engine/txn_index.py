"""The aborted-transaction index of a segment (`<base offset>.txnindex`), in Kafka's format.

One 34-byte entry per transaction whose ABORT marker lies in the segment: int16 version (0),
int64 producer id, int64 first offset, int64 last offset (the marker's), int64 last stable
offset once it completed. A read_committed reader asks which aborted transactions overlap the
range it read, and leaves their records out without decoding them. The files are small (one
entry per abort) and read whole. A tiered segment's index goes to S3 beside it, in the same
format (`<name>.txnindex`, engine.tiered).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import NamedTuple

ENTRY = struct.Struct(">hqqqq")
SUFFIX = ".txnindex"
_VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # the ABORT marker's offset
    last_stable_offset: int


def index_path(directory: Path, base_offset: int) -> Path:
    return directory / f"{base_offset:020d}{SUFFIX}"


def encode(entries: list[AbortedTxn]) -> bytes:
    """Entries as an index file holds them."""
    return b"".join(ENTRY.pack(_VERSION, *entry) for entry in entries)


def decode(data: bytes) -> list[AbortedTxn]:
    """The entries of an index's bytes; a torn last entry is ignored."""
    whole = len(data) - len(data) % ENTRY.size
    return [AbortedTxn(*fields[1:]) for fields in ENTRY.iter_unpack(memoryview(data)[:whole])]


def read_entries(path: Path) -> list[AbortedTxn]:
    """The entries of an index file (none if it does not exist)."""
    try:
        return decode(path.read_bytes())
    except FileNotFoundError:
        return []


def append_entries(path: Path, entries: list[AbortedTxn]) -> None:
    """Add entries at the end of the index (made if missing). Not fsynced: recovery rebuilds
    the entries past the producer-state snapshot from the markers in the log."""
    data = encode(entries)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def truncate_from(path: Path, offset: int) -> None:
    """Drop the entries whose marker is at or past `offset` (a truncated or re-read tail)."""
    entries = read_entries(path)
    kept = [e for e in entries if e.last_offset < offset]
    if len(kept) == len(entries):
        return
    if not kept:
        path.unlink(missing_ok=True)
        return
    tmp = path.with_suffix(SUFFIX + ".tmp")
    tmp.write_bytes(encode(kept))
    os.replace(tmp, path)
