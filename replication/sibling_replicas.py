"""Partitions led by another node on this host (a sibling worker of `sluice serve --workers`),
read from that node's data directory instead of through it (engine.sibling_log): such a fetch
costs no hop. The leader stays the one writer and the reference; what it has not published as
committed, or what its files do not show plainly, is for it to answer (the caller forwards)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from engine.log import ReadResult, partition_dir_name
from engine.sibling_log import SiblingLogs


class SiblingReplicas:
    """The data directories of the nodes on this host, by node id; counts what it served."""

    def __init__(self, data_dirs: Mapping[int, Path]) -> None:
        self.data_dirs = dict(data_dirs)
        self.logs = SiblingLogs()
        self.served = 0  # sluice_colocated_reads_total{outcome="served"} (by the replica manager)
        self.forwarded = 0  # ... {outcome="forwarded"}: left to the leader (`note_forwarded`)

    def read(
        self,
        leader: int,
        leader_epoch: int,
        topic: str,
        partition: int,
        offset: int | str,
        max_bytes: int,
        max_records: int | None,
    ) -> tuple[int, ReadResult] | None:
        """(the offset read from, what `Partition.read` would answer there) from node
        `leader`'s files, when it leads in `leader_epoch` and they hold committed batches at
        `offset` (an offset, "earliest" or "latest") or `offset` is the high watermark (no
        data); else None."""
        directory = self.data_dirs.get(leader)
        if directory is None:
            return None
        log = self.logs.get(directory / partition_dir_name(topic, partition))
        try:
            marks = log.watermarks()
        except OSError:  # no descriptor left, say: the leader answers
            marks = None
        if marks is not None and marks.leader_epoch != leader_epoch:
            marks = None  # not (yet, or any longer) the leader: its high watermark may lag
        data = None
        if marks is not None:
            if offset == "earliest":
                offset = marks.log_start_offset
            elif offset == "latest":
                offset = marks.high_watermark
            if offset == marks.high_watermark:
                data = memoryview(b"")  # nothing there yet: an answer only if not waiting
            else:
                data = log.read(int(offset), max_bytes, max_records, marks)
        if marks is None or data is None:
            return None
        hw = marks.high_watermark
        return int(offset), ReadResult(data, hw, marks.log_start_offset, hw)

    def note_forwarded(self) -> None:
        """A fetch these files could not answer went to its leader (counted once, by the
        route: the lane that declined it first leaves it to the route)."""
        self.forwarded += 1
