"""A partition's side of tiering, synchronous (the partition layer runs it in threads, as its
leader): upload closed segments and commit them to the manifest, apply total retention to
what S3 holds. Every step is safe to repeat after a crash: objects go up before the manifest
names them, under names that depend only on their offsets."""

from __future__ import annotations

import hashlib
import io
import logging
import struct
import time
from concurrent.futures import Executor, wait
from dataclasses import dataclass

import msgspec

from engine import batch as fmt
from engine.log import PartitionLog
from engine.pacing import Pacer
from engine.segment import LogSegment
from engine.tiered.manifest import (
    Manifest,
    ManifestError,
    RemoteSegment,
    empty_manifest,
    partition_prefix,
)
from engine.tiered.remote import RemoteStorage

log = logging.getLogger(__name__)

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_CHUNK = 8 * 1024 * 1024


class StaleLeader(ManifestError):
    """A manifest written in a newer leader epoch: this node no longer leads the partition."""

    code = "STALE_LEADER"


@dataclass(frozen=True)
class SegmentUpload:
    """What one scan of a closed segment's batches yields for its upload."""

    segment: RemoteSegment
    start_position: int  # where the uploaded bytes start in the local file
    index: bytes
    time_index: bytes
    epochs: bytes


class _FileRange(io.RawIOBase):
    """Bytes [start, start + length) of a file, as a readable stream for boto3."""

    def __init__(self, segment: LogSegment, start: int, length: int) -> None:
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


def scan_segment(
    segment: LogSegment, from_offset: int, index_interval: int, pacer: Pacer | None = None
) -> SegmentUpload:
    """Checksum, count and index the segment's batches from the one starting at `from_offset`
    (a new leader's segment may straddle the manifest's end), CRC-checking each. Paced batch by
    batch (engine.pacing): a segment of small batches is millions of them, walked in a worker
    thread beside the event loop; the bytes are checked (engine/_scan.c) and hashed a read at
    a time, without the GIL."""
    pacer = Pacer() if pacer is None else pacer
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
            pacer.tick()
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


class PartitionTier:
    """One partition's manifest as last read or written (with its ETag), and the steps that
    change it. Not thread-safe: one step at a time per partition. `senders` runs the object
    PUTs of an upload side by side: a pool shared by the node's partitions, kept for its life
    rather than threads started for every segment."""

    def __init__(
        self,
        storage: RemoteStorage,
        prefix: str,
        log_: PartitionLog,
        topic_id: str,
        senders: Executor,
    ):
        self.storage = storage
        self.senders = senders
        self.log = log_
        self.topic_id = topic_id
        self.prefix = partition_prefix(prefix, log_.topic, log_.partition)
        self.manifest_key = self.prefix + "manifest.json"
        self.manifest: Manifest | None = None
        self._etag: str | None = None

    def key(self, segment: RemoteSegment, suffix: str) -> str:
        return f"{self.prefix}{segment.name}{suffix}"

    def refresh(self) -> Manifest:
        """Read the manifest; one of an earlier topic of the same name counts as none."""
        found = self.storage.read_manifest(self.manifest_key)
        if found is None:
            manifest, etag = None, None
        else:
            manifest, etag = found
            if manifest.topic_id != self.topic_id:
                log.warning(
                    "%s belongs to an earlier topic %s; starting over",
                    self.manifest_key,
                    manifest.topic_id,
                )
                manifest = None
        self._etag = etag
        self.manifest = manifest or empty_manifest(
            self.log.topic, self.log.partition, self.topic_id, -1
        )
        self.log.mark_uploaded(self.manifest.end_offset)
        return self.manifest

    def pending(self) -> list[LogSegment]:
        """Closed segments below the high watermark that S3 does not hold yet."""
        manifest = self.manifest or self.refresh()
        end = manifest.end_offset
        hw = self.log.high_watermark
        closed = self.log.segments[:-1]
        return [
            s
            for s in closed
            if s.next_offset <= hw and (end is None or s.next_offset > end) and not s.empty
        ]

    def upload(self, segment: LogSegment, leader_epoch: int) -> RemoteSegment:
        """Upload one closed segment (from the manifest's end on) and commit it."""
        manifest = self.manifest or self.refresh()
        self._check_epoch(manifest, leader_epoch)
        end = manifest.end_offset
        start_offset = segment.base_offset if end is None else max(end, segment.base_offset)
        interval = self.log.config.index_interval_bytes
        # The objects go up in parallel: the whole file's name is known before the scan that
        # checksums it, and the indexes as soon as the scan is done. The manifest comes last.
        pool = self.senders
        sent = []
        try:
            if start_offset == segment.base_offset:
                name = f"{segment.base_offset:020d}-{segment.next_offset - 1:020d}"
                path = str(segment.path)
                sent.append(pool.submit(self.storage.upload_file, f"{self.prefix}{name}.log", path))
                scanned = scan_segment(segment, start_offset, interval)
                if (scanned.segment.name, scanned.segment.size) != (name, segment.size):
                    raise ManifestError(f"{segment.path.name} changed while it was uploaded")
            else:  # a new leader's segment that starts before the manifest's end
                scanned = scan_segment(segment, start_offset, interval)
                body = _FileRange(segment, scanned.start_position, scanned.segment.size)
                key = self.key(scanned.segment, ".log")
                sent.append(pool.submit(self.storage.upload_stream, key, body))
            remote = scanned.segment
            for suffix, data in (
                (".index", scanned.index),
                (".timeindex", scanned.time_index),
                (".epochs", scanned.epochs),
            ):
                sent.append(pool.submit(self.storage.put, self.key(remote, suffix), data))
        finally:
            wait(sent)  # none left running if the scan failed
        for future in sent:
            future.result()
        log_start = manifest.log_start_offset if manifest.segments else remote.base_offset
        self._commit(
            manifest,
            leader_epoch,
            max(log_start, self.log.log_start_offset),
            [*manifest.segments, remote],
        )
        return remote

    def expire(self, leader_epoch: int, now_ms: int) -> int:
        """Total retention over what S3 holds (retention.ms / retention.bytes over local and
        remote, and the log start moved by DELETE records): drop segments from the manifest,
        commit it, then delete their objects and move the log's start. Returns how many."""
        manifest = self.manifest or self.refresh()
        if not manifest.segments:
            return 0
        self._check_epoch(manifest, leader_epoch)
        config = self.log.config
        start = max(manifest.log_start_offset, self.log.log_start_offset)
        local_only = [
            s for s in self.log.segments if s.base_offset >= manifest.segments[-1].next_offset
        ]
        excess = sum(s.size for s in manifest.segments) + sum(s.size for s in local_only)
        excess -= config.retention_bytes
        dropped: list[RemoteSegment] = []
        for segment in manifest.segments[:-1]:  # the newest stays: it marks where S3 ends
            expired_by_time = config.retention_ms >= 0 and segment.max_timestamp < (
                now_ms - config.retention_ms
            )
            expired_by_size = config.retention_bytes >= 0 and excess - segment.size >= 0
            below_start = segment.next_offset <= start
            if not (expired_by_time or expired_by_size or below_start):
                break
            dropped.append(segment)
            excess -= segment.size
        kept = manifest.segments[len(dropped) :]
        new_start = max(start, dropped[-1].next_offset if dropped else start)
        if not dropped and new_start == manifest.log_start_offset:
            return 0
        self._commit(manifest, leader_epoch, new_start, kept)
        self.storage.delete(
            self.key(s, suffix)
            for s in dropped
            for suffix in (".log", ".index", ".timeindex", ".epochs")
        )
        if new_start > self.log.log_start_offset:
            self.log.delete_records(min(new_start, self.log.high_watermark))
        return len(dropped)

    def _check_epoch(self, manifest: Manifest, leader_epoch: int) -> None:
        if manifest.leader_epoch > leader_epoch:
            raise StaleLeader(
                f"{self.manifest_key} was written in leader epoch {manifest.leader_epoch}, "
                f"after this node's {leader_epoch}"
            )

    def _commit(
        self,
        read: Manifest,
        leader_epoch: int,
        log_start_offset: int,
        segments: list[RemoteSegment],
    ) -> None:
        """Write the manifest read, with these segments and log start, in this epoch, if
        nobody else wrote it since; on a conflict, forget it (the next step re-reads it) and
        let ManifestConflict through."""
        manifest = msgspec.structs.replace(
            read,
            topic_id=self.topic_id,
            leader_epoch=max(read.leader_epoch, leader_epoch),
            log_start_offset=log_start_offset,
            segments=segments,
        )
        try:
            self._etag = self.storage.write_manifest(self.manifest_key, manifest, self._etag)
        except Exception:
            self.manifest = None
            raise
        self.manifest = manifest
        self.log.mark_uploaded(manifest.end_offset)
