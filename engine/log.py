"""PartitionLog: one partition's ordered segments, as Kafka's UnifiedLog.

The core is synchronous. Mutations take a short lock (never held across I/O that can block for
long: fsync and cleaning run outside it), so background threads can flush, clean and apply
retention while the event loop appends and reads. Reads take no lock: the segments and their
base offsets are one immutable snapshot, replaced in a single assignment, never mutated. A read
that reaches a segment removed meanwhile waits for the change to be published, then reads the
new snapshot.

A failing filesystem is classified where it shows (`PartitionLog._failed`). A full disk
(ENOSPC, EDQUOT) refuses the request and heals by itself, as does a process out of descriptors
or memory. Anything else (EIO, EROFS, a failed fsync whatever its errno, an append that could
not be cut back) takes the partition offline, as Kafka takes a failed log directory offline:
every later append, read, flush, roll or truncation raises KafkaStorageError, and only a restart
brings it back, through recovery's CRC check. Retrying after a failed fsync could acknowledge
data the kernel has already dropped.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import accumulate
from operator import attrgetter
from pathlib import Path
from typing import NamedTuple, TypeVar

from engine import batch as fmt
from engine import file_cache, producer_state, txn_index
from engine.config import INT_MAX, TopicConfig
from engine.epoch_cache import LeaderEpochCache
from engine.errors import (
    EngineError,
    InsufficientStorage,
    InvalidRecord,
    KafkaStorageError,
    LogClosed,
    OffsetMismatch,
    OffsetMovedToTieredStorage,
    OffsetOutOfRange,
    RecordTooLarge,
    StorageError,
)
from engine.file_cache import FileCache, FileGone
from engine.fsync import FileStateUnknown
from engine.producer_state import EndMarker, Isolation, ProducerIdentity, ProducerState
from engine.segment import LogSegment
from engine.txn_index import AbortedTxn
from engine.watermarks import WatermarkFile

EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
_NOTHING_APPENDED = "nothing was appended"
_REFUSED_FROM_PRODUCERS = fmt.CONTROL_MASK | fmt.TRANSACTIONAL_MASK
# In a transaction a batch may come transactional already (built for its producer): it is
# stamped with the transaction's producer either way.
_REFUSED_IN_TRANSACTIONS = fmt.CONTROL_MASK
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

Listener = Callable[["PartitionLog"], None]
Headers = list[tuple[int, fmt.BatchHeader]]  # each batch's position in its bytes, and header
# One request of a leader's write: how many of the write's batches it holds, in order, and the
# producer whose transaction they are in (None: none).
WrittenRequest = tuple[int, ProducerIdentity | None]
_key_of = attrgetter("key")
T = TypeVar("T")
logger = logging.getLogger(__name__)

# A full disk refuses the request and heals by itself once there is space again.
_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
# The process is out of descriptors or memory: the request is refused, the files are sound.
_SHORT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})


class AppendInfo(NamedTuple):
    first_offset: int
    last_offset: int
    record_count: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    flush_due: bool  # the flush policy asks for an fsync before acknowledging


class Landings(NamedTuple):
    """What a write gave each of its produce requests (where it landed, or why not) and each
    of its markers (None: not due, written already or a newer epoch wrote since)."""

    requests: list[AppendInfo | Exception]
    markers: list[AppendInfo | Exception | None]


class ReadResult(NamedTuple):
    data: memoryview  # whole batches, each CRC-checked
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int = -1  # set by a consumer's read: below it no transaction is open


class SegmentView(NamedTuple):
    """The segments and their base offsets, published together so lock-free readers pair them."""

    segments: tuple[LogSegment, ...]
    bases: tuple[int, ...]


class RecoveryReport(NamedTuple):
    segments_scanned: int
    truncated_bytes: int
    segments_deleted: int
    errors: list[str]
    seconds: float  # how long opening (and checking) the segments took


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


class PartitionLog:
    """A partition's log: offsets, high watermark, log start, epochs, and its segments."""

    def __init__(
        self,
        directory: Path,
        topic: str,
        partition: int,
        config: TopicConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        high_watermark: int = 0,
        trust_files: bool = False,
        clock: Callable[[], float] = time.time,
        files: FileCache | None = None,
        on_offline: Listener | None = None,
        publish_watermarks: bool = False,
    ) -> None:
        """`on_offline(log)` is called once, from whichever thread met the failure, when a
        storage failure takes the log offline. With `publish_watermarks`, the watermarks are
        kept in the directory's shared file for processes that read the log (engine.sibling_log)."""
        self.directory = directory
        self.files = file_cache.shared if files is None else files
        self._on_offline = on_offline
        self.topic = topic
        self.partition = partition
        self.config = config
        self.clock = clock
        self._lock = threading.RLock()
        self._listeners: list[Listener] = []
        self._closed = False
        self._closing = False
        # Why the log went offline (None while its storage works): see `_failed`.
        self.failure: str | None = None
        self._flush_lock = threading.Lock()  # one fsync at a time (see `flush`)
        # The high watermark and the watermarks published to other processes: moved under this
        # short lock, not the log's, so that an event loop advancing the high watermark never
        # waits for a thread holding the log (a roll creating files, a retention pass).
        self._marks_lock = threading.Lock()
        directory.mkdir(parents=True, exist_ok=True)
        self.epoch_cache = LeaderEpochCache(directory / EPOCH_CHECKPOINT)
        self._view = SegmentView((), ())
        self._watermarks: WatermarkFile | None = None
        self.recovery = self._load(recovery_point, log_start_offset, trust_files)
        self.log_end_offset = self._view.segments[-1].next_offset
        local_start = self._view.segments[0].base_offset
        # A tiered log's logical start may lie below its first local segment (the rest is on S3).
        self.log_start_offset = (
            log_start_offset if config.remote_storage_enable else max(log_start_offset, local_start)
        )
        # The offset after the last one S3 holds (the manifest's end), as the tiering layer
        # learned it; local retention deletes only segments below it.
        self.remote_end_offset: int | None = None
        if self.log_end_offset < self.log_start_offset:
            # Recovery cut the log below its start (a torn batch straddled it). As Kafka's
            # LogLoader, restart empty at the log start: offsets below it are never reused.
            self._truncate_fully(self.log_start_offset)
        self.high_watermark = min(max(high_watermark, self.log_start_offset), self.log_end_offset)
        self.recovery_point = min(recovery_point, self.log_end_offset)
        if trust_files:
            self.recovery_point = self.log_end_offset
        self.epoch_cache.truncate_from_end(self.log_end_offset)
        self.epoch_cache.truncate_from_start(self.log_start_offset)
        self._unflushed_messages = 0
        self._last_flush_ms = self.now_ms()
        self._aborted: dict[int, list[AbortedTxn]] = {}  # segment base -> its aborted txns
        self.producer_state = ProducerState()
        self._rebuild_producer_state(self.log_end_offset)
        if publish_watermarks:
            self._watermarks = WatermarkFile(directory)
            self._publish()

    # -- loading -------------------------------------------------------------------------------

    def now_ms(self) -> int:
        """The log's clock in milliseconds (injectable for tests)."""
        return int(self.clock() * 1000)

    def _new_segment(self, base_offset: int) -> LogSegment:
        return LogSegment(self.directory, base_offset, self.config.index_interval_bytes, self.files)

    def _new_active_segment(self, base_offset: int) -> LogSegment:
        segment = self._new_segment(base_offset)
        segment.activate()
        return segment

    def _set_segments(self, segments: Iterable[LogSegment]) -> None:
        """Publish a new segment list in one assignment (callers hold the lock)."""
        frozen = tuple(segments)
        self._view = SegmentView(frozen, tuple(s.base_offset for s in frozen))

    def _load(
        self, recovery_point: int, log_start_offset: int, trust_files: bool
    ) -> RecoveryReport:
        """Open the segments one at a time (each closed one is sealed before the next, so the
        file cache bounds what is open); CRC-check those at or after the recovery point; cut a
        bad tail."""
        started = time.monotonic()
        finish_interrupted_swaps(self.directory)
        bases = sorted(int(p.name[:-4]) for p in self.directory.glob("*.log") if p.stem.isdigit())
        segments: list[LogSegment] = []
        scanned = truncated = deleted = 0
        errors: list[str] = []
        for i, base in enumerate(bases):
            if segments:
                segments[-1].seal()
            segment = self._new_segment(base)
            segments.append(segment)
            next_base = bases[i + 1] if i + 1 < len(bases) else None
            needs_scan = not trust_files and (next_base is None or next_base > recovery_point)
            if not needs_scan and segment.load():
                continue
            scanned += 1
            result = segment.recover()
            truncated += result.truncated_bytes
            for epoch, start in result.epochs:  # the checkpoint may not have been synced
                if epoch > self.epoch_cache.latest_epoch:
                    self.epoch_cache.assign(epoch, start)
            if result.error is not None:
                errors.append(f"{segment.path.name}: {result.error}")
                # Nothing after a corruption can be trusted: drop the later segments.
                for later_base in bases[i + 1 :]:
                    later = self._new_segment(later_base)
                    truncated += later.size
                    later.delete()
                    deleted += 1
                break
        if segments:
            segments[-1].activate()
        else:
            segments = [self._new_active_segment(log_start_offset)]
        self._set_segments(segments)
        return RecoveryReport(scanned, truncated, deleted, errors, time.monotonic() - started)

    def _rebuild_producer_state(self, end: int) -> None:
        """Producer state and aborted-transaction indexes as of `end` (the log end): the latest
        snapshot at or below it, then the transactional batches after it (index entries past
        the snapshot are rebuilt from their markers, which may not have reached the file)."""
        loaded = producer_state.load_snapshot(self.directory, end)
        segments = self._view.segments
        start, state = (segments[0].base_offset, ProducerState()) if loaded is None else loaded
        self._aborted = {}
        for segment in segments:
            path = txn_index.index_path(self.directory, segment.base_offset)
            if segment.next_offset > start:
                txn_index.truncate_from(path, start)
            entries = txn_index.read_entries(path)
            if entries:
                self._aborted[segment.base_offset] = entries
        self.producer_state = state
        for segment in segments:
            if segment.next_offset <= start or segment.empty:
                continue
            for _, header, data in segment.transactional_batches(start):
                aborted = state.apply(data, [(0, header)])
                if aborted:
                    self._record_aborted(segment.base_offset, aborted)

    def _record_aborted(self, segment_base: int, aborted: list[AbortedTxn]) -> None:
        txn_index.append_entries(txn_index.index_path(self.directory, segment_base), aborted)
        self._aborted.setdefault(segment_base, []).extend(aborted)

    def _snapshot_producers(self) -> None:
        """Write the producer state as of the log end (at a roll or a clean close), so a
        restart replays only the batches after it. A tiered log keeps those of the segments S3
        does not hold yet: each goes up with its segment (engine.tiered)."""
        kept_past = None
        if self.config.remote_storage_enable:
            kept_past = -1 if self.remote_end_offset is None else self.remote_end_offset
        producer_state.write_snapshot(
            self.directory, self.log_end_offset, self.producer_state, kept_past
        )

    # -- appends -------------------------------------------------------------------------------

    def append_as_leader(self, data: bytes | bytearray, leader_epoch: int) -> AppendInfo:
        """Append producer batches: assign offsets, stamp the epoch and the timestamp type.

        All batches in `data` are validated first and written in one call; a rejected request
        leaves the log unchanged.
        """
        buf = data if isinstance(data, bytearray) else bytearray(data)
        headers = self.check_as_leader(buf)
        return self.append_batches_as_leader(buf, headers, leader_epoch, [len(headers)])[0]

    def check_as_leader(self, data: bytes | bytearray, *, in_transaction: bool = False) -> Headers:
        """Validate producer batches as `append_as_leader` would, without appending; their
        headers, for `append_batches_as_leader` or `append_checked_in_transactions`.
        `in_transaction`: they are written in a transaction, which stamps them with its
        producer, so they may be transactional already (never control batches)."""
        refused = _REFUSED_IN_TRANSACTIONS if in_transaction else _REFUSED_FROM_PRODUCERS
        return self._validate(data, leader=True, refused=refused)

    def check_transactions_allowed(self) -> None:
        """A compacted topic refuses transactional batches (InvalidRecord): the cleaner keeps
        a key's latest record whatever its transaction's outcome."""
        if self.config.compact:
            raise InvalidRecord(
                f"{self.topic} is compacted: transactions write to topics with cleanup.policy "
                "delete only"
            )

    def append_batches_as_leader(
        self,
        buf: bytearray,
        headers: list[tuple[int, fmt.BatchHeader]],
        leader_epoch: int,
        batches: Sequence[int],
    ) -> list[AppendInfo]:
        """Append checked producer batches (`check_as_leader` of `buf`) in one write: one
        AppendInfo per request, `batches` saying how many of the batches, in order, each holds
        (requests checked together as one, or joined by `join_checked`)."""
        start, append_time, flush_due = self._stamp_and_write(buf, headers, leader_epoch)
        infos = []
        at = 0
        for n in batches:
            if n == 1:
                count = headers[at][1].record_count
            else:
                count = sum(header.record_count for _, header in headers[at : at + n])
            infos.append(AppendInfo(start, start + count - 1, count, append_time, flush_due))
            start += count
            at += n
        return infos

    def append_transactional_as_leader(
        self, data: bytes | bytearray, leader_epoch: int, producer_id: int, producer_epoch: int
    ) -> AppendInfo:
        """`append_as_leader` of batches inside the transaction of `producer_id` at
        `producer_epoch`: each becomes transactional and carries them. An older epoch is
        ProducerFenced, the epoch of a transaction this partition saw end TransactionNotOngoing
        (a late write would open a transaction no marker closes)."""
        self.check_transactions_allowed()
        buf = data if isinstance(data, bytearray) else bytearray(data)
        headers = self.check_as_leader(buf, in_transaction=True)
        producer = ProducerIdentity(producer_id, producer_epoch)
        outcome = self.append_checked_in_transactions(
            buf, headers, [(len(headers), producer)], leader_epoch
        ).requests[0]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def append_checked_in_transactions(
        self,
        buf: bytearray,
        headers: Headers,
        requests: Sequence[WrittenRequest],
        leader_epoch: int,
        markers: Sequence[EndMarker] = (),
    ) -> Landings:
        """`append_batches_as_leader` of requests some of which are inside transactions (their
        batches made transactional and carrying the producer, re-CRCed), one outcome each.
        Each of those is checked against its producer's state here as if written alone (an
        older epoch ProducerFenced, the epoch of a transaction ended here TransactionNotOngoing)
        and a refused one fails alone; the rest go in one write, but for a request of a
        producer that an earlier one of the write names at another epoch, which goes in a write
        after it and is checked then. A write's failure is the outcome of each of its requests.
        `buf` is written as it is when every request goes in the first write (and extended by
        the markers: it must be the write's own). `markers` (of producers no request names,
        each once) go at the end of the first write, those due."""
        outcomes: list[AppendInfo | Exception | None] = [None] * len(requests)
        marked: list[AppendInfo | Exception | None] = [None] * len(markers)
        waiting: Sequence[int] = range(len(requests))
        check = self.producer_state.check
        with self._lock:
            while True:
                epochs: dict[int, int] = {}  # producer id -> its epoch in this write
                joined: list[int] = []
                later: list[int] = []
                for i in waiting:
                    producer = requests[i][1]
                    if producer is not None:
                        producer_id, epoch = producer
                        if epochs.get(producer_id, epoch) != epoch:
                            later.append(i)
                            continue
                        try:
                            check(producer_id, epoch)
                        except EngineError as exc:
                            outcomes[i] = exc
                            continue
                        epochs[producer_id] = epoch
                    joined.append(i)
                if joined or markers:
                    infos: Sequence[AppendInfo | Exception]
                    try:
                        if len(joined) == len(requests):  # all of `buf`
                            infos, marked = self._write_requests(
                                buf, headers, requests, leader_epoch, markers
                            )
                        else:
                            infos, marked = self._write_requests(
                                *_chosen(buf, headers, requests, joined), leader_epoch, markers
                            )
                    except Exception as exc:  # the write failed: nothing of it was appended
                        infos = [exc] * len(joined)
                        marked = [exc] * len(markers)
                    for i, info in zip(joined, infos, strict=True):
                        outcomes[i] = info
                    markers = ()
                if not later:
                    return Landings(decided(outcomes), marked)
                waiting = later

    def _write_requests(
        self,
        buf: bytearray,
        headers: Headers,
        requests: Sequence[WrittenRequest],
        leader_epoch: int,
        markers: Sequence[EndMarker] = (),
    ) -> tuple[list[AppendInfo], list[AppendInfo | Exception | None]]:
        """Write `buf`, all of `requests`' batches in order, each transactional one's stamped
        with its producer first (in `buf` and `headers`), then the `markers` still due (None
        for one that is not: written already, or a newer epoch wrote since), in one write."""
        at = 0
        for count, producer in requests:
            if producer is not None:
                producer_id, epoch = producer
                if count != 1 or not fmt.stamped_for(headers[at][1], producer_id, epoch):
                    headers[at : at + count] = fmt.set_producers(
                        buf, headers[at : at + count], producer_id, epoch
                    )
            at += count
        counts = [count for count, _ in requests]
        marked: list[AppendInfo | Exception | None] = [None] * len(markers)
        due: list[int] = []
        if markers:
            now = self.now_ms()
            for k, (producer_id, epoch, commit, coordinator_epoch) in enumerate(markers):
                if self.producer_state.marker_due(producer_id, epoch):
                    batch, header = fmt.control_batch(
                        producer_id, epoch, commit, coordinator_epoch, now
                    )
                    headers.append((len(buf), header))
                    buf += batch
                    due.append(k)
            counts += [1] * len(due)
        if not headers:
            return [], marked
        infos = self.append_batches_as_leader(buf, headers, leader_epoch, counts)
        for k, info in zip(due, infos[len(requests) :], strict=True):
            marked[k] = info
        return infos[: len(requests)], marked

    def append_marker_as_leader(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        leader_epoch: int,
    ) -> AppendInfo | None:
        """Write the COMMIT or ABORT marker ending the transaction of `producer_id` here; None
        when it is already written (a coordinator's retry) or a newer epoch wrote since."""
        marker = EndMarker(producer_id, producer_epoch, commit, coordinator_epoch)
        outcome = self.append_checked_in_transactions(
            bytearray(), [], [], leader_epoch, [marker]
        ).markers[0]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def _stamp_and_write(
        self, buf: bytearray, headers: list[tuple[int, fmt.BatchHeader]], leader_epoch: int
    ) -> tuple[int, int, bool]:
        """Stamp checked batches with offsets from the log end and the leader's epoch, write
        them: their first offset, the append time (-1 but for LogAppendTime), flush due."""
        now = self.now_ms()
        log_append_time = self.config.log_append_time
        stamp, restamped = fmt.stamp_offset_and_epoch, fmt.restamped
        with self._lock:
            self._check_open(_NOTHING_APPENDED)
            first = offset = self.log_end_offset
            stamped: list[tuple[int, fmt.BatchHeader]] = []
            for pos, header in headers:
                stamp(buf, pos, header, offset, leader_epoch)
                max_ts = header.max_timestamp
                if log_append_time:
                    fmt.set_log_append_time(buf, pos, header, now)
                    max_ts = now
                stamped.append((pos, restamped(header, offset, leader_epoch, max_ts)))
                offset += header.last_offset_delta + 1
            # The epoch goes in first (as in Kafka), so no stamped batch outlives its entry.
            # (`_io`'s work inline, here and in `_write`: its generator costs more than a
            # marker's own write.)
            try:
                self.epoch_cache.assign(leader_epoch, first)
            except OSError as exc:
                raise self._failed(
                    "writing the leader epoch checkpoint", exc, _NOTHING_APPENDED
                ) from exc
            try:
                self._write(buf, stamped, now)
            except BaseException:
                self._drop_epochs_past_end()
                raise
            flush_due = self._note_unflushed(offset - first, now)
        self._notify()
        return first, now if log_append_time else -1, flush_due

    def append_as_follower(self, data: bytes | bytearray | memoryview) -> AppendInfo:
        """Append a leader's batches as they are; the first must start at the log end offset."""
        headers = self._validate(data, leader=False)
        now = self.now_ms()
        with self._lock:
            self._check_open(_NOTHING_APPENDED)
            expected = self.log_end_offset
            records = 0
            for _, header in headers:
                if header.base_offset != expected:
                    kind = "gap" if header.base_offset > expected else "overlap"
                    raise OffsetMismatch(
                        f"{kind}: batch starts at offset {header.base_offset}, expected {expected}"
                    )
                expected = header.next_offset
                records += header.record_count
            first = self.log_end_offset
            with self._io("writing the leader epoch checkpoint", _NOTHING_APPENDED):
                for _, header in headers:
                    if header.partition_leader_epoch != self.epoch_cache.latest_epoch:
                        self.epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
            try:
                self._write(data, headers, now)
            except BaseException:
                self._drop_epochs_past_end()
                raise
            info = AppendInfo(first, expected - 1, records, -1, self._note_unflushed(records, now))
        self._notify()
        return info

    def _validate(
        self,
        data: bytes | bytearray | memoryview,
        *,
        leader: bool,
        refused: int = _REFUSED_FROM_PRODUCERS,
    ) -> list[tuple[int, fmt.BatchHeader]]:
        result = fmt.scan(data, check_crc=True)
        if result.error is not None:
            raise InvalidRecord(result.error)
        if not result.headers:
            raise InvalidRecord("no record batch in the request")
        limit = self.config.max_message_bytes - fmt.LOG_OVERHEAD  # against `length`
        for i, (_, header) in enumerate(result.headers):
            if header.length > limit:
                raise RecordTooLarge(
                    f"batch {i} is {header.size} bytes; max.message.bytes is "
                    f"{self.config.max_message_bytes}"
                )
            if leader:
                if header.attributes & refused:
                    what = "control" if refused == fmt.CONTROL_MASK else "control and transactional"
                    raise InvalidRecord(f"batch {i}: {what} batches are refused")
                count = header.record_count
                if count == 0 or count != header.last_offset_delta + 1:
                    raise InvalidRecord(
                        f"batch {i}: {header.record_count} records but last offset delta "
                        f"{header.last_offset_delta}"
                    )
        if leader and self.config.compact:
            view = memoryview(data)
            for pos, header in result.headers:
                try:
                    keys = map(_key_of, fmt.batch_records(view[pos : pos + header.size]))
                    keyless = None in keys
                except Exception as exc:  # the C codec raises several types for bad records
                    raise InvalidRecord(f"batch {pos}: malformed records: {exc}") from exc
                if keyless:
                    raise InvalidRecord("a compacted topic needs a key on every record")
        return result.headers

    def _write(
        self,
        data: bytes | bytearray | memoryview,
        headers: list[tuple[int, fmt.BatchHeader]],
        now: int,
    ) -> None:
        last_offset = headers[-1][1].last_offset
        try:
            segment = self._maybe_roll(len(data), last_offset, now)
            segment.append(data, headers)
        except OSError as exc:
            raise self._failed("writing the log", exc, _NOTHING_APPENDED) from exc
        if segment.rolling_base_ms is None:
            segment.rolling_base_ms = now
        self.log_end_offset = segment.next_offset
        for _, header in headers:
            if header.attributes & fmt.TRANSACTIONAL_MASK:
                aborted = self.producer_state.apply(data, headers)
                if aborted:
                    with self._io("writing the aborted-transaction index"):
                        self._record_aborted(segment.base_offset, aborted)
                break

    def _note_unflushed(self, records: int, now: int) -> bool:
        self._unflushed_messages += records
        return (
            self._unflushed_messages >= self.config.flush_messages
            or now - self._last_flush_ms >= self.config.flush_ms
        )

    def needs_room(self, size: int) -> bool:
        """Whether an append of `size` bytes now would do file work beyond its write: roll the
        active segment first (full or aged: new files, whose creation can wait on the disk), or
        wait for another thread that holds the log (a roll, a flush, a retention pass). A caller
        on an event loop then calls `make_room` in a thread before it appends."""
        if not self._lock.acquire(blocking=False):
            return True
        try:
            return self._roll_due(size, self.now_ms())
        finally:
            self._lock.release()

    def make_room(self, size: int) -> None:
        """Wait for the log, then roll the active segment if an append of `size` bytes would."""
        with self._lock:
            if self._roll_due(size, self.now_ms()):
                self.roll()

    def _roll_due(self, size: int, now: int) -> bool:
        """Whether `size` more bytes go to a new segment: the active one is not empty and they
        would overflow segment.bytes, or it is older than segment.ms."""
        active = self._view.segments[-1]
        if active.empty:
            return False
        return active.size + size > self.config.segment_bytes or (
            active.rolling_base_ms is not None
            and now - active.rolling_base_ms > self.config.segment_ms
        )

    def _maybe_roll(self, size: int, last_offset: int, now: int) -> LogSegment:
        active = self._view.segments[-1]
        offsets_overflow = not active.empty and last_offset - active.base_offset > INT_MAX
        if offsets_overflow or self._roll_due(size, now):
            return self._roll()
        return active

    def _drop_epochs_past_end(self) -> None:
        """After a failed append: forget the epoch entries it added. A checkpoint that cannot be
        written then is left to recovery, which drops entries past the log end; the append's own
        error is the one raised."""
        try:
            self.epoch_cache.truncate_from_end(self.log_end_offset)
        except OSError as exc:
            self._failed("writing the leader epoch checkpoint", exc)

    def assign_epoch(self, epoch: int, start_offset: int) -> None:
        """A new leader's epoch starts at `start_offset` (KIP-101). Never raises for the disk:
        a checkpoint that cannot be written is left to recovery, which rebuilds the entries from
        the batches, and an I/O error takes the log offline, where requests then find it."""
        with self._lock:
            if self.failure is not None:
                return
            try:
                with self._io("writing the leader epoch checkpoint"):
                    self.epoch_cache.assign(epoch, start_offset)
            except StorageError as exc:
                if self.failure is None:  # going offline logged itself
                    logger.warning("%s", exc)

    def roll_if_aged(self) -> bool:
        """Roll a non-empty active segment older than segment.ms even without an append (a
        tiered log's records must reach S3 in bounded time); True if it rolled."""
        active = self._view.segments[-1]
        base = active.rolling_base_ms
        if active.empty or base is None or self.now_ms() - base <= self.config.segment_ms:
            return False
        self.roll()
        return True

    def roll(self) -> LogSegment:
        """Close the active segment and start a new one at the log end offset."""
        with self._io("rolling a new segment"):
            return self._roll()

    def _roll(self) -> LogSegment:
        with self._lock:
            self._check_open()
            old = self._view.segments[-1]
            if old.empty:
                return old
            old.flush(fsync=False)
            if self.producer_state.producers or self.config.remote_storage_enable:
                self._snapshot_producers()  # a tiered segment's goes up with it, even empty
            new = self._new_active_segment(self.log_end_offset)  # may fail: old stays active
            old.seal()
            segments, bases = self._view  # one more at the end: no walk over all of them
            self._view = SegmentView((*segments, new), (*bases, new.base_offset))
        return new

    # -- reads ---------------------------------------------------------------------------------

    def read(
        self,
        offset: int,
        max_bytes: int,
        upper_offset: int | None = None,
        min_one: bool = True,
        max_records: int | None = None,
        isolation: Isolation = Isolation.READ_UNCOMMITTED,
    ) -> ReadResult:
        """Whole batches from the one holding `offset`, below `upper_offset` (default: the HW).

        The first batch may start before `offset`; the caller skips those records. With
        `max_records`, batches the caller would not reach are not read past the first. A
        consumer's `isolation` empties the batches it must not see (`consumer_view`);
        read_committed stops at the last stable offset.
        """
        if isolation is Isolation.READ_COMMITTED:
            lso = self.last_stable_offset
            upper_offset = lso if upper_offset is None else min(upper_offset, lso)
        result = self._lock_free(
            lambda: self._read(offset, max_bytes, upper_offset, min_one, max_records)
        )
        first = self.producer_state.first_transactional
        if isolation is Isolation.RAW or first is None:
            return result
        committed = isolation is Isolation.READ_COMMITTED
        lso = self.last_stable_offset
        if not result.data:
            return result._replace(last_stable_offset=lso)
        end = fmt.scan(result.data, check_crc=False).headers[-1][1].next_offset
        if end <= first:
            return result._replace(last_stable_offset=lso)
        aborted = self.aborted_transactions(offset, end) if committed else []
        data = producer_state.consumer_view(result.data, aborted, committed)
        return result._replace(data=data, last_stable_offset=lso)

    @property
    def last_stable_offset(self) -> int:
        """The high watermark, or the first offset of the oldest open transaction if lower:
        read_committed consumers read below it. Never below the log start, as Kafka clamps it
        (the records below are gone), but on a tiered log: there the records below the start a
        follower started over at are on S3 and readable until it learns the logical start, so
        an open transaction among them must keep holding the readers back."""
        unstable = self.producer_state.first_unstable_offset()
        hw = self.high_watermark
        if unstable is None:
            return hw
        if unstable < self.log_start_offset and not self.config.remote_storage_enable:
            unstable = self.log_start_offset
        return min(unstable, hw)

    def remove_expired_producers(self, expiration_ms: int) -> int:
        """Forget the producers idle past `expiration_ms` with no transaction open here
        (Kafka's producer.id.expiration.ms), in memory and in a snapshot at the log end, so the
        state of a log written by many one-off producers does not grow forever; how many."""
        with self._lock, self._io("writing the producer-state snapshot"):
            self._check_open()
            removed = self.producer_state.remove_expired(self.now_ms(), expiration_ms)
            if removed:
                self._snapshot_producers()
            return len(removed)

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions with records in [start, end), from the segments' indexes."""
        found: list[AbortedTxn] = []
        for segment in self._view.segments:
            if segment.next_offset <= start and segment.base_offset < start:
                continue
            for entry in self._aborted.get(segment.base_offset, ()):
                if entry.last_offset >= start and entry.first_offset < end:
                    found.append(entry)
        return found

    def _read(
        self,
        offset: int,
        max_bytes: int,
        upper_offset: int | None,
        min_one: bool,
        max_records: int | None,
    ) -> ReadResult:
        if self._closed:
            raise LogClosed(f"{self.topic}-{self.partition} is closed")
        log_start, log_end, hw = self.log_start_offset, self.log_end_offset, self.high_watermark
        if offset < log_start or offset > log_end:
            raise OffsetOutOfRange(offset, log_start, log_end)
        local_start = self.local_log_start_offset
        if offset < local_start:
            raise OffsetMovedToTieredStorage(offset, local_start)
        upper = hw if upper_offset is None else min(upper_offset, log_end)
        segments, bases = self._view
        i = max(bisect_right(bases, offset) - 1, 0)
        data = memoryview(b"")
        while i < len(segments) and offset < upper:
            data = segments[i].read(offset, max_bytes, upper, min_one, max_records)
            # Move on only past a segment with nothing at or after `offset` (compaction can empty
            # one): an empty answer from one that has (a first batch over max_bytes without
            # min_one, or above the upper offset) must not skip it.
            segment = segments[i]
            if data or (not segment.empty and offset < segment.next_offset):
                break
            i += 1
        return ReadResult(data, hw, log_start, log_end)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first committed record with timestamp >= `timestamp`."""
        return self._lock_free(lambda: self._offset_for_timestamp(timestamp))

    def _offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        for segment in self._view.segments:
            if segment.max_timestamp < timestamp:
                continue
            found = segment.find_offset_by_timestamp(timestamp, self.log_start_offset)
            if found is None:
                continue
            offset, ts = found
            if offset >= self.high_watermark:
                return None
            return offset, ts
        return None

    def _lock_free(self, read: Callable[[], T]) -> T:
        """Run `read` over the current segments without the lock. If a segment it reaches went
        meanwhile (retention, truncation, compaction: all publish their new segments under the
        lock), wait for that change and read again. A failing filesystem is a StorageError: no
        descriptor left to open a closed segment with refuses this read; an I/O error takes the
        log offline (what the disk returns can no longer be trusted)."""
        while True:
            if not self._closed:  # a closed log says so (LogClosed), offline or not
                self.check_online()
            view = self._view
            try:
                return read()
            except FileGone:
                with self._lock:
                    self._check_open()
                    if self._view is view:
                        raise
            except OSError as exc:
                raise self._failed("reading the log", exc) from exc

    # -- watermarks and truncation ---------------------------------------------------------

    def advance_high_watermark(self, offset: int) -> bool:
        """Move the high watermark forward (never past the log end); True if it moved. Only
        the watermarks' lock is taken: a truncation lowers the log end first, then the high
        watermark under that lock, so that no move made meanwhile outlives it."""
        with self._marks_lock:
            target = min(offset, self.log_end_offset)
            if target <= self.high_watermark:
                return False
            self.high_watermark = target
            self._publish_held()
        self._notify()
        return True

    def truncate_to(self, offset: int) -> None:
        """Remove every batch holding an offset >= `offset` (a follower's divergent tail)."""
        with self._lock, self._io("truncating the log"):
            self._check_open()
            if offset >= self.log_end_offset:
                return
            with self._changing_files():
                self._truncate_to(offset)
        self._notify()

    def _truncate_to(self, offset: int) -> None:
        """`truncate_to` below the log end, under the lock."""
        if offset < self.log_start_offset:
            self._truncate_fully(offset)
        else:
            segments = self._view.segments
            keep = [s for s in segments if s.base_offset < offset]
            if keep:
                keep[-1].truncate_to(offset)  # opens it for appends if it was closed
            for segment in segments[len(keep) :]:
                segment.delete()
            if not keep:
                keep = [self._new_active_segment(offset)]
            self._set_segments(keep)
            self.log_end_offset = keep[-1].next_offset
            if self.log_end_offset < self.log_start_offset:
                # The cut took a batch straddling the log start: what is left lies wholly
                # below it, so the log is empty from the log start on (never below it).
                self._truncate_fully(self.log_start_offset)
        with self._marks_lock:
            self.high_watermark = min(self.high_watermark, self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.epoch_cache.truncate_from_end(self.log_end_offset)
        self._rebuild_producer_state(self.log_end_offset)

    def truncate_fully_and_start_at(
        self, offset: int, producers: ProducerState | None = None
    ) -> None:
        """Empty the log and restart it at `offset` (a follower behind the leader's log start,
        as Kafka's truncateFullyAndStartAt), with `producers` as the producer state there if
        known (a tiered partition's, from S3: the transactions open across `offset`), kept in
        a snapshot at `offset` so a restart starts from it too."""
        with self._lock, self._io("truncating the log"):
            self._check_open()
            with self._changing_files():
                self._truncate_fully(offset)
                if producers is not None:
                    self.producer_state = producers
                    self._snapshot_producers()
        self._notify()

    def _truncate_fully(self, offset: int) -> None:
        for segment in self._view.segments:
            segment.delete()
        self._set_segments([self._new_active_segment(offset)])
        self.log_start_offset = self.log_end_offset = offset
        with self._marks_lock:
            self.high_watermark = offset
        self.recovery_point = offset
        self.epoch_cache.clear()
        producer_state.delete_snapshots(self.directory)
        self.producer_state = ProducerState()
        self._aborted = {}

    def delete_records(self, before_offset: int) -> int:
        """Advance the log start offset (Kafka's DeleteRecords); returns the new log start."""
        with self._lock, self._io("deleting segments"):
            self._check_open()
            if before_offset > self.high_watermark or before_offset < 0:
                raise OffsetOutOfRange(before_offset, self.log_start_offset, self.high_watermark)
            if before_offset > self.log_start_offset:
                self.log_start_offset = before_offset
                self.epoch_cache.truncate_from_start(before_offset)
                self._delete_prefix(lambda segment, following: following <= before_offset)
                self._publish()
            return self.log_start_offset

    # -- retention -------------------------------------------------------------------------

    @property
    def local_log_start_offset(self) -> int:
        """The first offset on local disk; a tiered log holds [log start, this) on S3 only."""
        return max(self.log_start_offset, self._view.segments[0].base_offset)

    def adopt_remote_log_start(self, offset: int) -> None:
        """A tiered follower that started over at its leader's local start learns the logical
        start from the leader: the records between are on S3."""
        with self._lock:
            if self.config.remote_storage_enable and offset < self.log_start_offset:
                self.log_start_offset = offset
                self._publish()

    def mark_uploaded(self, remote_end_offset: int | None) -> None:
        """The tiering layer's word on what S3 holds: offsets below `remote_end_offset`."""
        self.remote_end_offset = remote_end_offset

    def apply_retention(self) -> int:
        """Delete closed segments past retention.ms / retention.bytes; returns how many. A
        tiered log deletes by local.retention.* instead, and only segments S3 already holds:
        its logical start moves with the remote retention (`delete_records`)."""
        config = self.config
        now = self.now_ms()
        if config.remote_storage_enable:
            return self._apply_local_retention(now)
        with self._lock, self._io("deleting segments past retention"):
            self._check_open()
            excess = self.size_bytes - config.retention_bytes

            def expired(segment: LogSegment, following: int) -> bool:
                nonlocal excess
                if following <= self.log_start_offset:  # gone: its bytes count no more
                    excess -= segment.size
                    return True
                if not config.delete:
                    return False
                if following > self.high_watermark:
                    return False
                if config.retention_ms >= 0 and segment.max_timestamp < now - config.retention_ms:
                    excess -= segment.size
                    return True
                if config.retention_bytes >= 0 and excess - segment.size >= 0:
                    excess -= segment.size
                    return True
                return False

            return self._delete_prefix(expired)

    def _apply_local_retention(self, now: int) -> int:
        retention_ms, retention_bytes = self.config.local_retention
        with self._lock, self._io("deleting segments past local retention"):
            self._check_open()
            uploaded = self.remote_end_offset
            excess = self.size_bytes - retention_bytes

            def expired(segment: LogSegment, following: int) -> bool:
                nonlocal excess
                if following <= self.log_start_offset:  # gone: its bytes count no more
                    excess -= segment.size
                    return True
                if uploaded is None or following > uploaded:
                    return False
                if retention_ms >= 0 and segment.max_timestamp < now - retention_ms:
                    excess -= segment.size
                    return True
                if retention_bytes >= 0 and excess - segment.size >= 0:
                    excess -= segment.size
                    return True
                return False

            return self._delete_prefix(expired, move_start=False)

    def _delete_prefix(
        self, deletable: Callable[[LogSegment, int], bool], *, move_start: bool = True
    ) -> int:
        """Delete the longest run of closed segments, oldest first, that `deletable` accepts.

        `deletable(segment, following_base)` sees each closed segment with the base offset of
        the segment after it (its exclusive upper offset bound).
        """
        segments = self._view.segments
        count = 0
        while count < len(segments) - 1 and deletable(
            segments[count], segments[count + 1].base_offset
        ):
            count += 1
        if not count:
            return 0
        self._set_segments(segments[count:])
        for segment in segments[:count]:
            segment.delete()
        if move_start and segments[count].base_offset > self.log_start_offset:
            self.log_start_offset = segments[count].base_offset
            self.epoch_cache.truncate_from_start(self.log_start_offset)
        self._publish()
        return count

    # -- flush, listeners, lifecycle -------------------------------------------------------

    def flush(self, up_to: int | None = None) -> None:
        """fsync segments up to `up_to` (default: everything) and advance the recovery point.

        A failed fsync takes the log offline and raises; it is never retried. fsyncs of one log
        run one at a time: of two at once on one file, the kernel may report a write-back error
        to one only, and the other would advance the recovery point over the lost data.
        """
        with self._flush_lock:
            with self._lock:
                if self._closed:
                    return
                self.check_online()
                target = self.log_end_offset if up_to is None else min(up_to, self.log_end_offset)
                pending = [s for s in self._view.segments if s.next_offset > self.recovery_point]
                with self._io("writing the indexes"):
                    for segment in pending:
                        segment.flush(fsync=False)
                self._unflushed_messages = 0
                self._last_flush_ms = self.now_ms()
            with self._io("flushing the log to disk"):
                for segment in pending:
                    segment.fsync()
                self.epoch_cache.sync()
            with self._lock:
                self.check_online()  # an append failed meanwhile: acknowledge nothing more
                self.recovery_point = max(self.recovery_point, target)

    def flush_due_by_time(self) -> bool:
        return (
            self._unflushed_messages > 0
            and self.now_ms() - self._last_flush_ms >= self.config.flush_ms
        )

    def add_listener(self, listener: Listener) -> None:
        """Call `listener(log)` after every append, high-watermark move or truncation."""
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        self._listeners.remove(listener)

    @contextlib.contextmanager
    def _changing_files(self) -> Iterator[None]:
        """Around a truncation or a swap of segment files (under the lock): readers in other
        processes learn that the files change in place (engine.watermarks, the generation)."""
        with self._marks_lock:
            if self._watermarks is not None:
                self._watermarks.layout_changing()
                self._publish_held()
        try:
            yield
        finally:
            with self._marks_lock:
                if self._watermarks is not None:
                    self._watermarks.layout_changed()
                    self._publish_held()

    def publish_leadership(self, leader_epoch: int) -> None:
        """Tell readers in other processes the epoch this process leads the log in (-1: it does
        not lead), published with the high watermark it vouches for from then on."""
        with self._lock, self._marks_lock:
            if self._watermarks is not None and self._watermarks.leader_epoch != leader_epoch:
                self._watermarks.leader_epoch = leader_epoch
                self._publish_held()

    def _publish(self) -> None:
        """Tell readers in other processes where the log now starts and is committed up to
        (callers hold the log's lock, or own the log alone)."""
        with self._marks_lock:
            self._publish_held()

    def _publish_held(self) -> None:
        """`_publish` for a caller holding the watermarks' lock (the file has one writer)."""
        if self._watermarks is not None:
            self._watermarks.publish(
                self.high_watermark, self.log_start_offset, self.local_log_start_offset
            )

    def _notify(self) -> None:
        for listener in self._listeners:
            listener(self)

    def _check_open(self, outcome: str = "") -> None:
        if self._closed:
            raise LogClosed(f"{self.topic}-{self.partition} is closed")
        self.check_online(outcome)

    # -- storage failures ------------------------------------------------------------------

    @property
    def offline(self) -> bool:
        """Whether a storage failure took the log offline (until a restart)."""
        return self.failure is not None

    def check_online(self, outcome: str = "") -> None:
        """Raise KafkaStorageError if the log is offline; `outcome` says what became of the
        request ("nothing was appended")."""
        if self.failure is not None:
            raise self._offline_error(outcome)

    def _offline_error(self, outcome: str = "") -> KafkaStorageError:
        what = f"; {outcome}" if outcome else ""
        return KafkaStorageError(
            f"{self.topic}-{self.partition} is offline after a storage failure "
            f"({self.failure}){what}; restart the node once its disk is fixed",
            self.topic,
            self.partition,
        )

    def _failed(self, action: str, exc: OSError, outcome: str = "") -> StorageError:
        """The error to raise for `exc`, met while `action`. A full disk and a process short of
        descriptors refuse the request only; anything else (EIO, EROFS, a failed fsync, a
        file left in an unknown state) takes the log offline first."""
        where = f"{self.topic}-{self.partition}"
        what = f"; {outcome}" if outcome else ""
        if not isinstance(exc, FileStateUnknown):
            if exc.errno in _DISK_FULL:
                return InsufficientStorage(f"{where}: the data directory's disk is full{what}")
            if exc.errno in _SHORT_OF_RESOURCES:
                return StorageError(f"{where}: {action} failed ({exc}){what}")
        self.go_offline(f"{action} failed: {exc}")
        return self._offline_error(outcome)

    def go_offline(self, failure: str) -> None:
        """Take the log offline for good (this run): appends, reads, flushes, rolls and
        truncations raise KafkaStorageError from now on. Waiters are woken to see it, and
        `on_offline` is called. The first failure is the one kept."""
        with self._lock:
            if self.failure is not None:
                return
            self.failure = failure
        # At shutdown the manager sums up the logs that could not be closed.
        logger.log(
            logging.DEBUG if self._closing else logging.ERROR,
            "%s-%d is offline: %s. Nothing is written or read there until a restart; fix the "
            "disk, then restart the node (recovery checks the log)",
            self.topic,
            self.partition,
            failure,
        )
        self._notify()
        if self._on_offline is not None:
            self._on_offline(self)

    @contextlib.contextmanager
    def _io(self, action: str, outcome: str = "") -> Iterator[None]:
        """Turn an OSError of the block into the StorageError `_failed` says."""
        try:
            yield
        except OSError as exc:
            raise self._failed(action, exc, outcome) from exc

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        """The current segments, oldest first: an immutable snapshot, safe to hold unlocked."""
        return self._view.segments

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._view.segments)

    def update_config(self, config: TopicConfig) -> None:
        self.config = config

    def close(self) -> None:
        """Flush everything and release file descriptors. An offline log (or one whose flush
        fails now) only lets go of its files, then raises: what they hold is for recovery to
        check at the next start."""
        error: StorageError | None = None
        self._closing = True
        try:
            self.flush()
        except StorageError as exc:
            error = exc
        with self._lock:
            if self.failure is None and error is None:
                try:
                    self._snapshot_producers()
                except OSError as exc:
                    error = self._failed("writing the producer-state snapshot", exc)
            for segment in self._view.segments:
                try:
                    segment.close(write_indexes=self.failure is None)
                except OSError as exc:
                    error = error or self._failed("closing the log", exc)
            self._closed = True
            self._close_watermarks()
        if error is not None:
            raise error

    def _close_watermarks(self) -> None:
        with self._marks_lock:
            if self._watermarks is not None:
                self._watermarks.close()
                self._watermarks = None

    def delete(self) -> None:
        """Close and remove the partition's directory."""
        with self._lock:
            with self._marks_lock:
                if self._watermarks is not None:  # odd for good: readers of it read no more
                    self._watermarks.layout_changing()
                    self._publish_held()
            for segment in self._view.segments:
                # A failed disk: what is left goes with the directory, or at the next start
                # (the manager removes partition directories no topic owns).
                with contextlib.suppress(OSError):
                    segment.delete()
            self._closed = True
            self._close_watermarks()
        shutil.rmtree(self.directory, ignore_errors=True)

    def replace_segment(self, old: LogSegment, expected_size: int) -> bool:
        """Swap in the cleaned copy of closed segment `old`; False if the log changed meanwhile.

        The cleaner has written `<name>.log.cleaned`, `.index.cleaned` and `.timeindex.cleaned`,
        complete and fsynced. They become `.swap` files (the log last: its `.swap` marks a swap
        that recovery must finish), then replace the originals (the log last again).
        """
        files = [old.index.path, old.time_index.path, old.path]
        with self._lock:
            current = self._view.segments[:-1]
            if self._closed or old not in current or old.size != expected_size:
                for path in files:
                    path.with_name(path.name + CLEANED_SUFFIX).unlink(missing_ok=True)
                return False
            self.check_online()
            old.close()  # its paths are about to name the cleaned files: never reopen them
            with self._changing_files():
                self._swap(old, files)
        return True

    def _swap(self, old: LogSegment, files: list[Path]) -> None:
        """`replace_segment`'s renames, then the cleaned segment in the old one's place."""
        try:
            for path in files:
                os.replace(
                    path.with_name(path.name + CLEANED_SUFFIX),
                    path.with_name(path.name + SWAP_SUFFIX),
                )
            for path in files:
                os.replace(path.with_name(path.name + SWAP_SUFFIX), path)
            fresh = self._new_segment(old.base_offset)
            if not fresh.load():
                fresh.recover()
            fresh.seal()
        except OSError as exc:
            # Half swapped: the next start finishes or discards it (finish_interrupted_swaps).
            self.go_offline(f"swapping in a cleaned segment failed: {exc}")
            raise self._offline_error() from exc
        self._set_segments([fresh if s is old else s for s in self._view.segments])


def join_checked(parts: Sequence[tuple[bytearray, Headers]]) -> tuple[bytearray, Headers]:
    """Checked requests (bytes and headers from `check_as_leader`) as one write's bytes and
    headers, in order."""
    if len(parts) == 1:
        return parts[0]
    buf = bytearray().join(part for part, _ in parts)
    headers: Headers = []
    shift = 0
    for part, part_headers in parts:
        headers.extend((pos + shift, header) for pos, header in part_headers)
        shift += len(part)
    return buf, headers


def decided(outcomes: Sequence[AppendInfo | Exception | None]) -> list[AppendInfo | Exception]:
    """A write's outcome per request, once every request has one (RuntimeError if one was
    left without: each request must be answered)."""
    done: list[AppendInfo | Exception] = []
    for outcome in outcomes:
        if outcome is None:
            raise RuntimeError("a request of the write was left without an outcome")
        done.append(outcome)
    return done


def _chosen(
    buf: bytearray, headers: Headers, requests: Sequence[WrittenRequest], chosen: list[int]
) -> tuple[bytearray, Headers, list[WrittenRequest]]:
    """The bytes, headers and requests of the `chosen` (indexes, ascending) of `requests`,
    whose batches `headers` of `buf` are, in order: a copy, on their own."""
    ends = list(accumulate([count for count, _ in requests], initial=0))
    parts: list[tuple[bytearray, Headers]] = []
    for i in chosen:
        first, end = ends[i], ends[i + 1]
        start = headers[first][0]
        last_pos, last = headers[end - 1]
        part_headers = [(pos - start, header) for pos, header in headers[first:end]]
        parts.append((buf[start : last_pos + last.size], part_headers))
    joined, joined_headers = join_checked(parts)
    return joined, joined_headers, [requests[i] for i in chosen]


def finish_interrupted_swaps(directory: Path) -> None:
    """Complete or discard a compaction interrupted by a crash.

    `.cleaned` files may be partial: delete them. A `.log.swap` means every file of the cleaned
    segment was complete: move it over its `.log` and drop that segment's index files and index
    swaps, which the open rebuilds. Index swaps without a log swap are discarded.
    """
    names = {p.name for p in directory.iterdir()}
    for name in names:
        if name.endswith(".log" + SWAP_SUFFIX):
            stem = name.split(".")[0]
            for suffix in (
                ".index",
                ".timeindex",
                ".index" + SWAP_SUFFIX,
                ".timeindex" + SWAP_SUFFIX,
            ):
                (directory / f"{stem}{suffix}").unlink(missing_ok=True)
            os.replace(directory / name, directory / f"{stem}.log")
    for path in directory.iterdir():
        if path.name.endswith((CLEANED_SUFFIX, SWAP_SUFFIX, ".tmp")):
            path.unlink(missing_ok=True)
