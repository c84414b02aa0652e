"""Kafka transactions in shipped segments, decided from the batches alone (S3 holds no index).

Per partition, in offset order across the segments of a run: a producer's transactional
batches belong to its open transaction until its next control batch, whose COMMIT makes
them records and whose ABORT drops them. A transaction with no marker in the run is
undecided: like Kafka's last stable offset, its first offset bounds what the run may write
and how far the checkpoint moves. Each segment reports its transactional batches
(`segment_events`, headers only); the driver folds a partition's reports in order
(`decide`); writers then leave out the batches of the aborted transactions (`is_aborted`),
which is the form of Kafka's aborted-transaction index.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from engine import batch as fmt
from spark_ingest.errors import IngestError


class TxnEvent(NamedTuple):
    """A transactional batch: data of `producer_id`'s open transaction (`commit` None), or
    the marker ending it (`commit` True for COMMIT, False for ABORT)."""

    producer_id: int
    base_offset: int
    last_offset: int
    commit: bool | None


class Aborted(NamedTuple):
    """An aborted transaction: its producer's batches from `first_offset` to its ABORT
    marker at `last_offset` are no records."""

    producer_id: int
    first_offset: int
    last_offset: int


class Decisions(NamedTuple):
    """What a partition's batches decided: the aborted transactions, the first offset of the
    oldest transaction still undecided (None: none is), and how many records of the aborted
    ones lie between the run's start and that offset (left out: the audit counts them)."""

    aborted: tuple[Aborted, ...]
    first_undecided: int | None
    aborted_records: int = 0


NONE_DECIDED = Decisions((), None)


def segment_events(
    data: bytes, headers: Iterable[tuple[int, fmt.BatchHeader]], lo: int, hi: int
) -> tuple[TxnEvent, ...]:
    """The transactional batches of a scanned segment holding offsets in [lo, hi), in order;
    one bit test per other batch."""
    events: list[TxnEvent] = []
    for pos, header in headers:
        attributes = header.attributes
        if not attributes & fmt.TRANSACTIONAL_MASK:
            continue
        if header.last_offset < lo or header.base_offset >= hi:
            continue
        commit: bool | None = None
        if attributes & fmt.CONTROL_MASK:
            control = fmt.control_type(memoryview(data)[pos : pos + header.size])
            commit = control == fmt.CONTROL_COMMIT
        events.append(TxnEvent(header.producer_id, header.base_offset, header.last_offset, commit))
    return tuple(events)


def has_records(events: Iterable[TxnEvent]) -> bool:
    """Whether some event is a transactional data batch (a marker alone holds no record)."""
    return any(e.commit is None for e in events)


def decide(events: Sequence[TxnEvent], start: int = 0) -> Decisions:
    """Fold one partition's events, in offset order, of a run from offset `start`. A marker
    of a producer with no open transaction seen here (its batches lie before the run) decides
    nothing."""
    open_first: dict[int, int] = {}
    aborted: list[Aborted] = []
    for event in events:
        pid = event.producer_id
        if event.commit is None:
            open_first.setdefault(pid, event.base_offset)
            continue
        first = open_first.pop(pid, None)
        if first is not None and not event.commit:
            aborted.append(Aborted(pid, first, event.base_offset))
    first_undecided = min(open_first.values()) if open_first else None
    stop = first_undecided if first_undecided is not None else 1 << 63
    # Transactional topics are never compacted: a batch holds every offset it spans.
    left_out = sum(
        max(0, min(e.last_offset + 1, stop) - max(e.base_offset, start))
        for e in events
        if e.commit is None and is_aborted(aborted, e.producer_id, e.base_offset)
    )
    return Decisions(tuple(aborted), first_undecided, left_out)


def overlapping(
    aborted: Iterable[Aborted], base_offset: int, last_offset: int
) -> tuple[Aborted, ...]:
    """The aborted transactions with batches that may lie in [base_offset, last_offset]."""
    return tuple(
        a for a in aborted if a.first_offset <= last_offset and a.last_offset >= base_offset
    )


def is_aborted(aborted: Sequence[Aborted], producer_id: int, offset: int) -> bool:
    """Whether a transactional batch of `producer_id` at `offset` is of an aborted one."""
    for a in aborted:
        if a.producer_id == producer_id and a.first_offset <= offset <= a.last_offset:
            return True
    return False


Partition = tuple[str, int]


def aborted_to_json(aborted: dict[Partition, tuple[Aborted, ...]]) -> str:
    """`{"topic": {"partition": [[producer id, first offset, last offset], ...]}}`."""
    doc: dict[str, dict[str, list[list[int]]]] = {}
    for (topic, partition), entries in sorted(aborted.items()):
        if entries:
            doc.setdefault(topic, {})[str(partition)] = [list(a) for a in entries]
    return json.dumps(doc, separators=(",", ":"))


def aborted_from_json(text: str, option: str) -> dict[Partition, tuple[Aborted, ...]]:
    """Parse `aborted_to_json`'s form, naming `option` in any error."""
    try:
        doc = json.loads(text)
        return {
            (str(topic), int(partition)): tuple(
                Aborted(int(pid), int(first), int(last)) for pid, first, last in entries
            )
            for topic, partitions in doc.items()
            for partition, entries in partitions.items()
        }
    except (ValueError, TypeError, AttributeError) as exc:
        raise IngestError(
            f'bad {option}: expected {{"topic": {{"0": [[producer, first, last]]}}}} ({exc})'
        ) from exc
