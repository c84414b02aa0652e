"""What to read: offset maps, per-partition ranges, and the segment tasks that cover them.

Offsets are half-open: a range [start, end) reads offsets start..end-1, and a checkpoint
holds the next offset to read. Planning is a pure function of the manifests and the offsets,
so the same inputs always give the same tasks in the same order.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from spark_ingest.errors import IngestError
from spark_ingest.manifest import Manifest, check_topic, segment_key
from spark_ingest.transactions import Aborted

Offsets = dict[str, dict[int, int]]


def parse_offsets(text: str, option: str) -> Offsets:
    """Parse `{"topic": {"partition": offset}}` JSON, naming `option` in any error."""
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise IngestError(f"bad {option}: not JSON ({exc})") from exc
    return offsets_from_json(obj, option)


def offsets_from_json(obj: object, what: str) -> Offsets:
    """Validate an already-decoded offset map (as stored in checkpoints)."""
    example = '{"orders": {"0": 123}}'
    if not isinstance(obj, dict):
        raise IngestError(f"bad {what}: expected an object like {example}")
    offsets: Offsets = {}
    for topic, partitions in obj.items():
        check_topic(topic)
        if not isinstance(partitions, dict):
            raise IngestError(f"bad {what}: topic {topic!r} must map partitions to offsets")
        for partition, offset in partitions.items():
            if not (isinstance(partition, str) and partition.isdigit()):
                raise IngestError(f"bad {what}: partition {partition!r} of {topic!r} is no number")
            if type(offset) is not int or offset < 0:
                raise IngestError(
                    f"bad {what}: offset {offset!r} of {topic}/{partition} is no int >= 0"
                )
            offsets.setdefault(topic, {})[int(partition)] = offset
    return offsets


def offsets_to_json(offsets: Mapping[str, Mapping[int, int]]) -> dict[str, dict[str, int]]:
    """The JSON form of an offset map, sorted for byte-stable output."""
    return {
        topic: {str(p): offsets[topic][p] for p in sorted(offsets[topic])}
        for topic in sorted(offsets)
    }


@dataclass(frozen=True)
class SegmentTask:
    """Read one segment object, keeping its data records with offsets in [lo, hi) but those
    of the `aborted` transactions."""

    topic: str
    partition: int
    key: str
    size: int
    sha256: str
    base_offset: int
    last_offset: int
    lo: int
    hi: int
    aborted: tuple[Aborted, ...] = ()


def segment_tasks(
    manifests: Iterable[Manifest],
    prefix: str,
    start: Offsets,
    end: Offsets,
    *,
    apply_log_start: bool = True,
) -> list[SegmentTask]:
    """One task per manifest segment that holds offsets in a partition's [start, end).

    A partition reads from `start` (default: its earliest offset) and, with `apply_log_start`,
    never below the manifest's log_start_offset; up to `end` (default: its newest segment's end).
    """
    tasks: list[SegmentTask] = []
    for m in manifests:
        lo = start.get(m.topic, {}).get(m.partition, 0)
        if apply_log_start:
            lo = max(lo, m.log_start_offset)
        hi = end.get(m.topic, {}).get(m.partition, m.end_offset)
        for s in m.segments:
            if s.last_offset >= lo and s.base_offset < hi:
                key = segment_key(prefix, m.topic, m.partition, s.base_offset, s.last_offset)
                tasks.append(
                    SegmentTask(
                        m.topic,
                        m.partition,
                        key,
                        s.size,
                        s.sha256,
                        s.base_offset,
                        s.last_offset,
                        lo,
                        hi,
                    )
                )
    return tasks


@dataclass(frozen=True)
class Range:
    """The offsets [start, end) of one partition a run ingests."""

    topic: str
    partition: int
    start: int
    end: int


@dataclass(frozen=True)
class Gap:
    """Offsets [start, end) that will never be ingested, and why."""

    topic: str
    partition: int
    start: int
    end: int
    reason: str


def plan_ranges(
    manifests: Iterable[Manifest], committed: Offsets, initial: Offsets
) -> tuple[list[Range], list[Gap]]:
    """Ranges from each partition's checkpoint (else `initial`, else 0) to its manifest's end.

    Offsets deleted before they were ingested (the log start or the first segment is above
    the checkpoint) become gaps. A partition whose checkpoint is past its manifest's end (the
    topic was recreated?) gets an empty range and a gap explaining it, and is left where it is.
    """
    ranges: list[Range] = []
    gaps: list[Gap] = []
    for m in manifests:
        done = committed.get(m.topic, {}).get(m.partition)
        begin = initial.get(m.topic, {}).get(m.partition, 0) if done is None else done
        available = m.first_available
        if available > begin:
            gaps.append(
                Gap(m.topic, m.partition, begin, available, "deleted (retention) before ingest")
            )
            begin = available
        if begin > m.end_offset:
            gaps.append(
                Gap(
                    m.topic,
                    m.partition,
                    m.end_offset,
                    begin,
                    "checkpoint is past the manifest's end (topic recreated?): not read",
                )
            )
            continue
        ranges.append(Range(m.topic, m.partition, begin, m.end_offset))
    return ranges, gaps
