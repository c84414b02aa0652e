"""A closed segment's upload: the scan that checks, hashes and indexes its batches, and the PUTs
of its objects (four, and its aborted-transaction index and producer snapshot when they have
entries). A node runs `ship` in processes of their own at a lower CPU priority (`Shipper`), so
that neither the scan's per-batch Python nor boto3's takes the event loop's GIL; the manifest
that commits an upload is written by the partition (engine.tiered.uploader)."""

from __future__ import annotations

import functools
import hashlib
import io
import multiprocessing
import os
import signal
import struct
import threading
import time
from collections.abc import Iterator
from concurrent.futures import BrokenExecutor, ProcessPoolExecutor, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import msgspec

from engine import batch as fmt
from engine import heap, txn_index
from engine.errors import EngineError
from engine.producer_state import SNAPSHOT_SUFFIX
from engine.segment import batch_chunks
from engine.tiered.manifest import ManifestError, RemoteSegment
from engine.tiered.remote import RemoteStorage, S3Location

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
OBJECTS_IN_FLIGHT = 4  # an upload's PUTs at once: its .log, .index, .timeindex and .epochs
# (a .txnindex and a .snapshot, small, go up as soon as one of them is done)
NICENESS = 10  # the shipper's CPU priority below the node's: requests come first
ARENAS = 2  # a shipper's malloc arenas: what its sender threads free stays reusable


class ReadableSegment(Protocol):
    """What a scan reads: a closed segment's file (a LogSegment, or a SegmentFile)."""

    @property
    def path(self) -> Path: ...

    def pread(self, length: int, position: int) -> bytes: ...

    def batch_chunks(self) -> Iterator[tuple[memoryview, list[tuple[int, fmt.BatchHeader]]]]: ...


class SegmentFile:
    """A closed segment's `.log` opened by path, for a process that has no LogSegment; the
    descriptor keeps the bytes readable even if retention deletes the file meanwhile."""

    def __init__(self, path: Path, base_offset: int, size: int) -> None:
        self.path, self.base_offset, self.size = path, base_offset, size
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)

    def pread(self, length: int, position: int) -> bytes:
        return os.pread(self._fd, length, position)

    def batch_chunks(self) -> Iterator[tuple[memoryview, list[tuple[int, fmt.BatchHeader]]]]:
        return batch_chunks(self.pread, self.size, self.base_offset, str(self.path))

    def close(self) -> None:
        os.close(self._fd)


@dataclass(frozen=True)
class SegmentUpload:
    """What one scan of a closed segment's batches yields for its upload."""

    segment: RemoteSegment
    start_position: int  # where the uploaded bytes start in the local file
    index: bytes
    time_index: bytes
    epochs: bytes


@dataclass(frozen=True)
class Shipment:
    """One closed segment to upload, from `from_offset` on (a new leader's segment may
    straddle the manifest's end); plain values, as it crosses to the shipper process."""

    location: S3Location
    key_prefix: str  # the partition's: <prefix>/<topic>/<partition>/
    path: str
    base_offset: int
    next_offset: int
    size: int
    from_offset: int
    index_interval: int
    # The aborted-transaction index of the batches uploaded (txn_index.encode: the entries
    # whose ABORT marker is among them), from the node's log; empty: none, no object.
    txn_index: bytes
    # The producer state as of the segment's end (the log's snapshot there), and how many
    # producers it holds: 0, no object; None, no snapshot known, none shipped.
    producer_snapshot: bytes
    producers: int | None


class _FileRange(io.RawIOBase):
    """Bytes [start, start + length) of a file, as a readable stream for boto3."""

    def __init__(self, segment: ReadableSegment, start: int, length: int) -> None:
        self._segment, self._position, self._end = segment, start, start + length

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        want = min(len(buffer), self._end - self._position)
        if want <= 0:
            return 0
        data = self._segment.pread(want, self._position)
        buffer[: len(data)] = data
        self._position += len(data)
        return len(data)


def scan_segment(segment: ReadableSegment, from_offset: int, index_interval: int) -> SegmentUpload:
    """Checksum, count and index the segment's batches from the one starting at `from_offset`,
    CRC-checking each; the bytes are checked (engine/_scan.c) and hashed a read at a time."""
    digest = hashlib.sha256()
    index, time_index = bytearray(), bytearray()
    epochs: list[tuple[int, int]] = []
    start: int | None = None
    base = last = first_ts = -1
    max_ts = fmt.NO_TIMESTAMP
    records = size = since_index = 0
    position = 0
    for chunk, headers in segment.batch_chunks():
        kept = None  # where the chunk's batches to upload begin in it
        for at, header in headers:
            here = position
            position += header.size
            if header.base_offset < from_offset:
                continue
            if kept is None:
                kept = at
            if start is None:
                start, base, first_ts = here, header.base_offset, header.first_timestamp
            size += header.size
            last = header.last_offset
            if not header.is_control:
                records += header.record_count
            if header.max_timestamp > max_ts:
                max_ts = header.max_timestamp
            if not epochs or epochs[-1][0] != header.partition_leader_epoch:
                epochs.append((header.partition_leader_epoch, header.base_offset))
            if since_index >= index_interval or not index:
                index += _OFFSET_ENTRY.pack(header.base_offset - base, here - start)
                time_index += _TIME_ENTRY.pack(max_ts, header.base_offset - base)
                since_index = 0
            since_index += header.size
        if kept is not None:  # one update a read: hashlib lets go of the GIL past 2 KiB
            end, final = headers[-1]
            digest.update(chunk[kept : end + final.size])
    if start is None:
        raise ManifestError(f"{segment.path.name} has no batch at or after offset {from_offset}")
    remote = RemoteSegment(
        base_offset=base,
        last_offset=last,
        records=records,
        size=size,
        first_timestamp=first_ts,
        max_timestamp=max_ts,
        sha256=digest.hexdigest(),
        epochs=epochs,
        uploaded_ms=int(time.time() * 1000),
    )
    lines = "".join(f"{epoch} {offset}\n" for epoch, offset in epochs).encode()
    return SegmentUpload(remote, start, bytes(index), bytes(time_index), lines)


def ship(shipment: Shipment) -> RemoteSegment:
    """Scan one closed segment and put its objects (side by side, in this process's pool of
    senders); returns what the manifest is to list. Nothing is committed here."""
    segment = SegmentFile(Path(shipment.path), shipment.base_offset, shipment.size)
    storage = _storage(shipment.location)
    pool = _senders()
    prefix = shipment.key_prefix
    sent = []
    try:
        if shipment.from_offset == shipment.base_offset:
            # The whole file's name is known before the scan that checksums it: it goes up
            # while the scan runs, the indexes as soon as the scan is done.
            name = f"{shipment.base_offset:020d}-{shipment.next_offset - 1:020d}"
            sent.append(pool.submit(storage.upload_file, f"{prefix}{name}.log", shipment.path))
            scanned = scan_segment(segment, shipment.from_offset, shipment.index_interval)
            if (scanned.segment.name, scanned.segment.size) != (name, shipment.size):
                raise ManifestError(f"{segment.path.name} changed while it was uploaded")
        else:
            scanned = scan_segment(segment, shipment.from_offset, shipment.index_interval)
            body = _FileRange(segment, scanned.start_position, scanned.segment.size)
            key = f"{prefix}{scanned.segment.name}.log"
            sent.append(pool.submit(storage.upload_stream, key, body))
        aborted = len(shipment.txn_index) // txn_index.ENTRY.size
        remote = msgspec.structs.replace(
            scanned.segment, aborted_transactions=aborted, producers=shipment.producers
        )
        objects = [
            (".index", scanned.index),
            (".timeindex", scanned.time_index),
            (".epochs", scanned.epochs),
        ]
        if aborted:
            objects.append((txn_index.SUFFIX, shipment.txn_index))
        if shipment.producers:
            objects.append((SNAPSHOT_SUFFIX, shipment.producer_snapshot))
        for suffix, data in objects:
            sent.append(pool.submit(storage.put, f"{prefix}{remote.name}{suffix}", data))
    finally:
        wait(sent)  # none left running if the scan failed
        segment.close()
    for future in sent:
        future.result()
    return remote


class ShipperFailed(EngineError):
    """The process uploading a segment ended before it had (killed, out of memory): the
    upload is retried as any failed one, by a process started in its place."""

    code = "REMOTE_STORAGE_UNAVAILABLE"


class Shipper:
    """The node's shipper processes, kept for its life: fresh interpreters at NICENESS below
    the node, started at once with their S3 client made, so that neither their start nor their
    imports fall among the requests of a first upload. A pool that lost a process is replaced
    by the next upload."""

    def __init__(self, processes: int, location: S3Location) -> None:
        self._processes, self._location = processes, location
        self._lock = threading.Lock()
        self._closed = False
        self._pool = self._started()

    def ship(self, shipment: Shipment) -> RemoteSegment:
        """`ship(shipment)` in a shipper process, waited for (by a worker thread)."""
        with self._lock:
            if self._closed:
                raise ShipperFailed("the node is stopping: no upload begins")
            try:
                future = self._pool.submit(_ship_and_trim, shipment)
            except BrokenExecutor:
                self._pool.shutdown(wait=False)
                self._pool = self._started()
                future = self._pool.submit(_ship_and_trim, shipment)
        try:
            return future.result()
        except BrokenExecutor as exc:
            name = os.path.basename(shipment.path)
            raise ShipperFailed(f"the process uploading {name} ended: {exc}") from None

    def close(self) -> None:
        """Stop taking uploads; the one in progress is finished, none waiting is begun."""
        with self._lock:
            self._closed = True
            self._pool.shutdown(wait=False, cancel_futures=True)

    def _started(self) -> ProcessPoolExecutor:
        pool = ProcessPoolExecutor(
            self._processes,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_start,
            initargs=(self._location,),
        )
        for _ in range(self._processes):  # each finds no idle process: one starts for each
            pool.submit(int)
        return pool


def _start(location: S3Location) -> None:
    """A shipper process's start: below the node's CPU priority, its malloc arenas capped,
    deaf to the signals sent to the node's process group (its node ends it), gone with its node
    however that ends, its client made."""
    os.nice(NICENESS)
    heap.limit_arenas(ARENAS)  # before any thread of its own starts
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    node = multiprocessing.parent_process()
    if node is not None:
        threading.Thread(target=_end_with, args=(node,), name="node-watch", daemon=True).start()
    _storage(location)


def _ship_and_trim(shipment: Shipment) -> RemoteSegment:
    """`ship` in a shipper process, then its freed heap handed back to the system: an upload's
    buffers (a segment's reads, boto3's) would otherwise stay in its RSS."""
    try:
        return ship(shipment)
    finally:
        heap.trim()


def _end_with(node: multiprocessing.process.BaseProcess) -> None:
    """End this process once its node has ended: a node killed (SIGKILL, the OOM killer)
    closes no queue, and the process would otherwise wait on it for ever."""
    node.join()
    os._exit(1)


@functools.cache
def _storage(location: S3Location) -> RemoteStorage:
    """This process's client for `location`, made once (a boto3 client costs milliseconds); a
    shipper runs one upload at a time, so no two threads make it at once."""
    return RemoteStorage(location)


@functools.cache
def _senders() -> ThreadPoolExecutor:
    """This process's pool for an upload's objects, made once: no thread starts per segment."""
    return ThreadPoolExecutor(OBJECTS_IN_FLIGHT, thread_name_prefix="s3-upload")
