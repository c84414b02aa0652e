"""A partition's transactional producers, as Kafka's ProducerStateManager: which transactions
are open on it (their first offsets bound the last stable offset), each producer's latest
epoch (older ones are fenced), and the aborted transactions its markers completed.

Built from the batch headers of every append, leader's and follower's alike, so each replica
knows the same. A snapshot (`<offset>.snapshot`, JSON) is written at each segment roll; a
restart or a truncation loads the latest one at or below its offset and replays the batches
after it. A producer idle past producer.id.expiration.ms with no transaction open here is
forgotten (`remove_expired`), as Kafka's, so one-off producers do not pile up.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import orjson

from engine import batch as fmt
from engine.errors import ProducerFenced, TransactionNotOngoing
from engine.txn_index import AbortedTxn


class Isolation(enum.Enum):
    """What a read returns: the batches as stored (replication, tiering), or what a consumer
    sees (Kafka's isolation.level): every record below the high watermark, or only those of
    committed transactions below the last stable offset. Control batches reach no consumer."""

    RAW = "raw"
    READ_UNCOMMITTED = "read_uncommitted"
    READ_COMMITTED = "read_committed"


class ProducerIdentity(NamedTuple):
    """Who writes in a transaction: the producer id its transactional id was given, and the
    epoch of this transaction (bumped by each begin, fencing the ones before)."""

    producer_id: int
    epoch: int


class EndMarker(NamedTuple):
    """A COMMIT or ABORT marker to write on a partition, ending the transaction of
    `producer_id` at `epoch` there (Kafka's EndTransactionMarker)."""

    producer_id: int
    epoch: int
    commit: bool
    coordinator_epoch: int


SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOTS_KEPT = 2
EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms (Kafka's default: a day)


UNKNOWN_TIMESTAMP = -1  # an entry from a snapshot written before timestamps were kept


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    first_offset: int | None  # of its open transaction here; None when none is open
    ended: bool  # a marker of `epoch` was written: that transaction is over here
    # The max timestamp of its last batch here; once its transaction ended, that of the marker,
    # stamped with the leader's clock when written.
    last_timestamp: int = UNKNOWN_TIMESTAMP


class ProducerState:
    """The transactional producers of one partition log."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction
        # The first offset holding a transactional batch (None: never one), so reads of a log
        # that never had a transaction skip every filter.
        self.first_transactional: int | None = None

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction; the LSO cannot pass it."""
        return min(self.ongoing.values()) if self.ongoing else None

    def check(self, producer_id: int, epoch: int) -> None:
        """Whether a transactional batch of `producer_id` at `epoch` may be appended now: not
        of an older epoch (fenced), nor of the epoch whose transaction ended here, nor of a
        newer epoch while an older one's transaction is still open here (a coordinator aborts
        that one, markers and all, before a begin under the next epoch is answered; a write
        that finds it open would merge two transactions under one marker)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if epoch < entry.epoch:
            raise ProducerFenced(
                f"producer {producer_id} epoch {epoch} is fenced: epoch {entry.epoch} holds "
                "its transactional id now"
            )
        if epoch == entry.epoch and entry.ended:
            raise TransactionNotOngoing(
                f"the transaction of producer {producer_id} epoch {epoch} has ended"
            )
        if epoch > entry.epoch and entry.first_offset is not None:
            raise TransactionNotOngoing(
                f"producer {producer_id} epoch {epoch}: the transaction of its epoch "
                f"{entry.epoch} is still open here (from offset {entry.first_offset}) with no "
                "marker; it must end before a newer epoch writes"
            )

    def marker_due(self, producer_id: int, epoch: int) -> bool:
        """Whether a marker of `producer_id` at `epoch` still has to be written here (not
        when one was, or a newer epoch wrote here since: a coordinator's retry is a no-op)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return True
        return epoch > entry.epoch or (epoch == entry.epoch and not entry.ended)

    def apply(
        self, data: bytes | bytearray | memoryview, headers: Iterable[tuple[int, fmt.BatchHeader]]
    ) -> list[AbortedTxn]:
        """Take appended batches into account; the aborted transactions they completed."""
        aborted: list[AbortedTxn] = []
        view = memoryview(data)
        producers = self.producers
        for pos, header in headers:
            attributes = header.attributes
            if not attributes & fmt.TRANSACTIONAL_MASK:
                continue
            pid = header.producer_id
            if attributes & fmt.CONTROL_MASK:
                commit = fmt.control_type(view[pos : pos + header.size]) == fmt.CONTROL_COMMIT
                first = self.ongoing.pop(pid, None)
                self.producers[pid] = ProducerEntry(
                    header.producer_epoch, None, True, header.max_timestamp
                )
                if not commit and first is not None:
                    unstable = self.first_unstable_offset()
                    lso = header.base_offset + 1 if unstable is None else unstable
                    aborted.append(AbortedTxn(pid, first, header.base_offset, lso))
                continue
            if self.first_transactional is None:
                self.first_transactional = header.base_offset
            entry = producers.get(pid)
            if entry is None or entry.ended:
                producers[pid] = ProducerEntry(
                    header.producer_epoch, header.base_offset, False, header.max_timestamp
                )
                self.ongoing[pid] = header.base_offset
            else:  # its transaction is open here: it keeps its first offset
                # (comparisons, not max(): this runs for every batch of every transaction)
                if header.producer_epoch > entry.epoch:
                    entry.epoch = header.producer_epoch
                if header.max_timestamp > entry.last_timestamp:
                    entry.last_timestamp = header.max_timestamp
        return aborted

    def remove_expired(self, now_ms: int, expiration_ms: int) -> list[int]:
        """Forget the producers with no transaction open here whose last batch is
        `expiration_ms` old (Kafka's producer.id.expiration.ms); their ids. A later write of
        one is a new producer's. An entry without a timestamp (an older snapshot's) starts
        its wait now."""
        expired = []
        for pid, entry in self.producers.items():
            if entry.first_offset is not None:
                continue
            if entry.last_timestamp == UNKNOWN_TIMESTAMP:
                entry.last_timestamp = now_ms
            elif now_ms - entry.last_timestamp >= expiration_ms:
                expired.append(pid)
        for pid in expired:
            del self.producers[pid]
        return expired

    # -- snapshots -----------------------------------------------------------------------------

    def encode(self) -> bytes:
        return orjson.dumps(
            {
                "producers": [
                    [pid, e.epoch, e.first_offset, e.ended, e.last_timestamp]
                    for pid, e in self.producers.items()
                ],
                "first_transactional": self.first_transactional,
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> ProducerState:
        doc = orjson.loads(data)
        state = cls()
        for pid, epoch, first, ended, *last in doc["producers"]:
            state.producers[pid] = ProducerEntry(epoch, first, ended, *last)
            if first is not None:
                state.ongoing[pid] = first
        state.first_transactional = doc["first_transactional"]
        return state


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def snapshot_offsets(directory: Path) -> list[int]:
    """The offsets of the snapshots in `directory`, ascending."""
    return sorted(
        int(p.name[: -len(SNAPSHOT_SUFFIX)])
        for p in directory.glob("*" + SNAPSHOT_SUFFIX)
        if p.name[: -len(SNAPSHOT_SUFFIX)].isdigit()
    )


def write_snapshot(
    directory: Path, offset: int, state: ProducerState, kept_past: int | None = None
) -> None:
    """The state as of `offset` (every batch below it applied), written whole or not at all;
    older snapshots past the last SNAPSHOTS_KEPT go, but those past `kept_past` stay (a
    tiered log's at the ends of the segments not uploaded yet, each to go up with its
    segment)."""
    path = snapshot_path(directory, offset)
    tmp = path.with_suffix(SNAPSHOT_SUFFIX + ".tmp")
    tmp.write_bytes(state.encode())
    os.replace(tmp, path)
    for old in snapshot_offsets(directory)[:-SNAPSHOTS_KEPT]:
        if kept_past is None or old <= kept_past:
            snapshot_path(directory, old).unlink(missing_ok=True)


def read_snapshot(directory: Path, offset: int) -> bytes | None:
    """The bytes of the snapshot as of exactly `offset`, None if there is none; nothing is
    deleted (a reader beside the log: tiering)."""
    try:
        return snapshot_path(directory, offset).read_bytes()
    except FileNotFoundError:
        return None


def load_snapshot(directory: Path, at_most: int) -> tuple[int, ProducerState] | None:
    """The latest readable snapshot at or below `at_most`, with its offset; later ones (past a
    truncation) are deleted."""
    for offset in reversed(snapshot_offsets(directory)):
        path = snapshot_path(directory, offset)
        if offset > at_most:
            path.unlink(missing_ok=True)
            continue
        try:
            return offset, ProducerState.decode(path.read_bytes())
        except (OSError, ValueError, KeyError, TypeError):
            path.unlink(missing_ok=True)
    return None


def delete_snapshots(directory: Path) -> None:
    for offset in snapshot_offsets(directory):
        snapshot_path(directory, offset).unlink(missing_ok=True)


def consumer_view(data: memoryview, aborted: Sequence[AbortedTxn], committed: bool) -> memoryview:
    """`data` (whole batches) as a consumer sees it: each control batch, and with `committed`
    each batch of an aborted transaction, emptied to its header (no records, its offsets kept,
    as Kafka's cleaner leaves empty batches), so readers skip it without decoding it and a
    consumer's next offset still moves past it. `data` itself when nothing changes."""
    result = fmt.scan(data, check_crc=False)
    out: bytearray | None = None
    kept = 0
    for pos, header in result.headers:
        attributes = header.attributes
        if not attributes & fmt.TRANSACTIONAL_MASK:
            continue
        drop = bool(attributes & fmt.CONTROL_MASK) or (
            committed and _aborted_at(aborted, header.producer_id, header.base_offset)
        )
        if not drop:
            continue
        if out is None:
            out = bytearray()
        out += data[kept:pos]
        out += fmt.empty_batch(header)
        kept = pos + header.size
    if out is None:
        return data
    out += data[kept:]
    return memoryview(out)


def _aborted_at(aborted: Sequence[AbortedTxn], producer_id: int, offset: int) -> bool:
    return any(
        a.producer_id == producer_id and a.first_offset <= offset <= a.last_offset for a in aborted
    )
