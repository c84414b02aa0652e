"""Leader-epoch cache: epoch -> first offset written in that epoch (KIP-101 / KIP-279).

A follower asks the leader for the end offset of its latest epoch and truncates to it, so that
logs never diverge below the high watermark.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from engine import checkpoint

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCache:
    """Ordered (epoch, start offset) entries persisted in `leader-epoch-checkpoint`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.unsynced = False  # written by `assign` without fsync; `sync` makes it durable
        try:
            rows = checkpoint.read_lines(path, 2)
            self.entries = [EpochEntry(int(e), int(o)) for e, o in rows]
        except (checkpoint.CheckpointError, ValueError):
            self.entries = []

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` starts at `start_offset`; a no-op for the latest epoch. As in
        Kafka, entries that conflict (an epoch >= it, or starting at or after it) go: a
        demoted leader's empty epoch must not outlive the older-epoch records copied after it."""
        if epoch < 0 or (self.entries and epoch == self.entries[-1].epoch):
            return
        kept = [e for e in self.entries if e.epoch < epoch and e.start_offset < start_offset]
        kept.append(EpochEntry(epoch, start_offset))
        # On the append path: no fsync here (milliseconds on the event loop). The log's flush
        # syncs the file before its recovery point passes `start_offset`, and recovery above the
        # recovery point rebuilds the entries from the batches, as Kafka's recoverSegment does.
        self._store(kept, durable=False)

    def sync(self) -> None:
        """Make what `assign` wrote durable (from the log's flush, off the event loop)."""
        if self.unsynced:
            self.unsynced = False
            checkpoint.sync(self.path)

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest epoch <= `epoch`, the offset where it ends); KIP-279's answer to a follower.

        The latest epoch ends at the log end offset; an epoch older than every entry has no
        answer: (UNDEFINED_EPOCH, UNDEFINED_OFFSET).
        """
        if not self.entries or epoch < self.entries[0].epoch:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if epoch >= self.entries[-1].epoch:
            return self.entries[-1].epoch, log_end_offset
        for i in range(len(self.entries) - 1, -1, -1):
            if self.entries[i].epoch <= epoch:
                return self.entries[i].epoch, self.entries[i + 1].start_offset
        return UNDEFINED_EPOCH, UNDEFINED_OFFSET

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch in which `offset` was written, as far as the cache knows."""
        found = UNDEFINED_EPOCH
        for entry in self.entries:
            if entry.start_offset > offset:
                break
            found = entry.epoch
        return found

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs that start at or after `end_offset` (after a log truncation)."""
        kept = [e for e in self.entries if e.start_offset < end_offset]
        if kept != self.entries:
            self._store(kept)

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop epochs wholly below a new log start; the one spanning it starts there instead."""
        below = [e for e in self.entries if e.start_offset <= start_offset]
        if not below or (len(below) == 1 and below[0].start_offset == start_offset):
            return
        spanning = EpochEntry(below[-1].epoch, start_offset)
        self._store([spanning, *self.entries[len(below) :]])

    def clear(self) -> None:
        self._store([])

    def _store(self, entries: list[EpochEntry], *, durable: bool = True) -> None:
        self.entries = entries
        checkpoint.write_lines(self.path, entries, durable=durable)
        self.unsynced = not durable
