"""A partition's side of tiering, synchronous (the partition layer runs it in threads, as its
leader): upload closed segments and commit them to the manifest, apply total retention to
what S3 holds. Every step is safe to repeat after a crash: objects go up before the manifest
names them, under names that depend only on their offsets."""

from __future__ import annotations

import logging
from collections.abc import Callable

import msgspec

from engine import producer_state, txn_index
from engine.log import PartitionLog
from engine.producer_state import ProducerState
from engine.segment import LogSegment
from engine.tiered.manifest import (
    Manifest,
    ManifestError,
    RemoteSegment,
    empty_manifest,
    partition_prefix,
)
from engine.tiered.remote import RemoteStorage
from engine.tiered.shipping import Shipment

log = logging.getLogger(__name__)
Ship = Callable[[Shipment], RemoteSegment]  # uploads a segment's objects, commits nothing


class StaleLeader(ManifestError):
    """A manifest written in a newer leader epoch: this node no longer leads the partition."""

    code = "STALE_LEADER"


class PartitionTier:
    """One partition's manifest as last read or written (with its ETag), and the steps that
    change it. Not thread-safe: one step at a time per partition. `ship` uploads a segment's
    objects (engine.tiered.shipping: in a node, `Shipper.ship`, in a process of its own; `ship`
    itself in this one); the manifest that commits them is written here."""

    def __init__(
        self,
        storage: RemoteStorage,
        prefix: str,
        log_: PartitionLog,
        topic_id: str,
        ship: Ship,
    ):
        self.storage = storage
        self.ship = ship
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
        aborted = [  # those whose ABORT marker is among the uploaded batches, as Kafka ships
            entry
            for entry in self.log.aborted_transactions(start_offset, segment.next_offset)
            if entry.last_offset < segment.next_offset
        ]
        snapshot, producers = self._producer_snapshot(segment)
        shipment = Shipment(
            location=self.storage.location,
            key_prefix=self.prefix,
            path=str(segment.path),
            base_offset=segment.base_offset,
            next_offset=segment.next_offset,
            size=segment.size,
            from_offset=start_offset,
            index_interval=self.log.config.index_interval_bytes,
            txn_index=txn_index.encode(aborted),
            producer_snapshot=snapshot,
            producers=producers,
        )
        remote = self.ship(shipment)
        log_start = manifest.log_start_offset if manifest.segments else remote.base_offset
        self._commit(
            manifest,
            leader_epoch,
            max(log_start, self.log.log_start_offset),
            [*manifest.segments, remote],
        )
        return remote

    def _producer_snapshot(self, segment: LogSegment) -> tuple[bytes, int | None]:
        """The log's producer-state snapshot as of the segment's end (written as it rolled,
        kept until it goes up), and how many producers it holds; (b"", None) for a segment
        closed without one (before snapshots were kept for upload, or lost in a crash)."""
        data = producer_state.read_snapshot(self.log.directory, segment.next_offset)
        if data is not None:
            try:
                return data, len(ProducerState.decode(data).producers)
            except (ValueError, KeyError, TypeError):
                pass
        log.warning(
            "%s-%d: no producer-state snapshot at %d: segment %d goes to S3 without one",
            self.log.topic,
            self.log.partition,
            segment.next_offset,
            segment.base_offset,
        )
        return b"", None

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
        self.storage.delete(self.key(s, suffix) for s in dropped for suffix in s.suffixes)
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
