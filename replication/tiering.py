"""Tiering, the partition layer's side (Kafka's RemoteLogManager): each partition this node
leads uploads its closed segments and applies total retention to S3; each it follows learns
from the manifest what S3 holds, so its local retention may delete those segments too. Reads
below a leader's local log start are served from S3, at read_committed with the aborted
transactions of the segments' indexes there; a follower that starts over at its leader's local
start takes the producer state shipped with the segment before it. All S3 work runs in threads;
each segment's upload (its scan and objects) in a shipper process (engine.tiered.shipping)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from engine import batch as fmt
from engine.errors import EngineError, IsolationUnavailable
from engine.producer_state import ProducerState, consumer_view
from engine.tiered.manifest import Manifest, empty_manifest, partition_prefix, topic_prefix
from engine.tiered.reader import RemoteReader
from engine.tiered.remote import RemoteStorage, S3Location
from engine.tiered.shipping import Shipper
from engine.tiered.uploader import PartitionTier
from replication.metadata import TopicPartition
from replication.partition import Partition

log = logging.getLogger(__name__)
TopicIds = Callable[[str], str | None]  # a topic's id in the current metadata, if it exists


@dataclass(frozen=True)
class TieringSettings:
    location: S3Location
    interval_s: float = 5.0  # between passes over the tiered partitions
    follower_refresh_s: float = 30.0  # how often a follower re-reads a manifest
    max_concurrent: int = 2  # partitions uploading (or reading S3) at once
    cache_bytes: int = 32 << 20  # remote reads' LRU
    backoff_max_s: float = 30.0  # the longest wait between retries of a failing partition


@dataclass
class TieringCounters:
    segments_uploaded: int = 0
    bytes_uploaded: int = 0
    segments_deleted: int = 0
    failures: int = 0
    last_error: str | None = None
    backlog: dict[TopicPartition, tuple[int, float]] = field(default_factory=dict)


@dataclass
class _Retry:
    failures: int = 0
    not_before: float = 0.0


class TieringService:
    """Uploads, remote retention, manifest refreshes and remote reads for one node."""

    def __init__(self, storage: RemoteStorage, settings: TieringSettings) -> None:
        self.storage = storage
        self.settings = settings
        self.reader = RemoteReader(storage, settings.location.prefix, settings.cache_bytes)
        self.counters = TieringCounters()
        self._tiers: dict[TopicPartition, PartitionTier] = {}
        self._shipper = Shipper(settings.max_concurrent, settings.location)
        self._retries: dict[TopicPartition, _Retry] = {}
        self._refreshed: dict[TopicPartition, float] = {}
        self._threads = asyncio.Semaphore(settings.max_concurrent)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # Set by close(): a pass running in a thread stops at its next segment (the process
        # exits only once the thread has, and a backlog is many segments).
        self._closing = False

    def start(self, partitions: dict[TopicPartition, Partition], topic_id: TopicIds) -> None:
        """Run passes over `partitions` (the replica manager's, live) until close()."""
        self._task = asyncio.create_task(self._run(partitions, topic_id), name="tiering")

    def poke(self) -> None:
        """Run the next pass now (a segment rolled, a partition changed role)."""
        self._wake.set()

    async def close(self) -> None:
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.reader.close()
        self._shipper.close()

    async def _run(self, partitions: dict[TopicPartition, Partition], topic_id: TopicIds) -> None:
        while True:
            tiered = [
                p
                for p in list(partitions.values())
                if p.config.remote_storage_enable and not p.log.offline
            ]
            for gone in set(self._tiers) - {(p.topic, p.partition) for p in tiered}:
                self._forget(gone)
            await asyncio.gather(*(self._pass(p, topic_id) for p in tiered))
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.interval_s):
                    await self._wake.wait()

    def _forget(self, tp: TopicPartition) -> None:
        self._tiers.pop(tp, None)
        self._retries.pop(tp, None)
        self._refreshed.pop(tp, None)
        self.counters.backlog.pop(tp, None)

    async def _pass(self, partition: Partition, topic_ids: TopicIds) -> None:
        tp = (partition.topic, partition.partition)
        retry = self._retries.setdefault(tp, _Retry())
        now = time.monotonic()
        if now < retry.not_before:
            return
        topic_id = topic_ids(partition.topic)
        if topic_id is None:
            return
        tier = self._tiers.get(tp)
        if tier is None or tier.log is not partition.log:
            tier = self._tiers[tp] = PartitionTier(
                self.storage,
                self.settings.location.prefix,
                partition.log,
                topic_id,
                self._shipper.ship,
            )
        try:
            async with self._threads:
                if partition.is_leader:
                    await asyncio.to_thread(self._lead, tier, partition.leader_epoch)
                elif now - self._refreshed.get(tp, 0.0) >= self.settings.follower_refresh_s:
                    await asyncio.to_thread(tier.refresh)
                    self._refreshed[tp] = now
                    await asyncio.to_thread(partition.log.apply_retention)
        except (EngineError, OSError) as exc:  # OSError: reading a segment to upload failed
            retry.failures += 1
            delay = min(self.settings.backoff_max_s, self.settings.interval_s * 2**retry.failures)
            retry.not_before = time.monotonic() + delay
            self.counters.failures += 1
            self.counters.last_error = f"{partition.topic}-{partition.partition}: {exc}"
            log.warning("tiering %s-%d failed (retry in %.0f s): %s", *tp, delay, exc)
        else:
            retry.failures, retry.not_before = 0, 0.0
        self._note_backlog(tier)

    def _lead(self, tier: PartitionTier, leader_epoch: int) -> None:
        """One leader pass (in a thread): roll an aged segment, upload what is closed and
        committed, apply total retention, then local retention; once the service closes, no
        further segment is begun (each is committed whole or not at all)."""
        log_ = tier.log
        if tier.manifest is None or tier.manifest.leader_epoch < leader_epoch:
            tier.refresh()  # a new leader continues from what S3 holds
        log_.roll_if_aged()
        for segment in tier.pending():
            if self._closing:
                return
            remote = tier.upload(segment, leader_epoch)
            self.counters.segments_uploaded += 1
            self.counters.bytes_uploaded += remote.size
        self.counters.segments_deleted += tier.expire(leader_epoch, log_.now_ms())
        log_.apply_retention()

    def _note_backlog(self, tier: PartitionTier) -> None:
        """Records and seconds that committed data waits for S3 (the closed-segment lag)."""
        log_ = tier.log
        manifest = tier.manifest
        end = manifest.end_offset if manifest is not None else None
        uploaded_to = log_.log_start_offset if end is None else end
        lag_records = max(0, log_.high_watermark - uploaded_to)
        waiting = [
            s.rolling_base_ms
            for s in log_.segments
            if s.next_offset > uploaded_to and s.rolling_base_ms is not None
        ]
        lag_s = max(0.0, (log_.now_ms() - min(waiting)) / 1000) if waiting and lag_records else 0.0
        self.counters.backlog[(log_.topic, log_.partition)] = (lag_records, lag_s)

    def remote_bytes(self) -> dict[str, int]:
        """Bytes S3 holds per topic, by the manifests this node last read or wrote."""
        out: dict[str, int] = {}
        for tier in list(self._tiers.values()):
            if tier.manifest is not None:
                size = sum(s.size for s in tier.manifest.segments)
                out[tier.log.topic] = out.get(tier.log.topic, 0) + size
        return out

    async def delete_topic(self, topic: str) -> int:
        """Delete every object of a deleted topic (Kafka deletes its remote segments too);
        retried with backoff while S3 fails. Returns how many objects went."""
        prefix = topic_prefix(self.settings.location.prefix, topic)
        delay = self.settings.interval_s
        while True:
            try:
                keys = await asyncio.to_thread(self.storage.list_keys, prefix)
                await asyncio.to_thread(self.storage.delete, keys)
                return len(keys)
            except EngineError as exc:
                log.warning(
                    "deleting s3 objects of topic %s failed (retry in %.0f s): %s",
                    topic,
                    delay,
                    exc,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.settings.backoff_max_s)

    async def producer_state_before(
        self, partition: Partition, topic_id: str, offset: int
    ) -> tuple[int, ProducerState] | None:
        """Where a follower behind its leader's local log start `offset` starts over, and the
        producer state there (`RemoteReader.producer_state_before`, from the manifest read
        now: a follower's copy may be older than the leader's local start); None when S3 has
        none for it (nothing there, or segments uploaded without one). S3 failing raises."""
        key = partition_prefix(self.settings.location.prefix, partition.topic, partition.partition)

        def read() -> tuple[int, ProducerState] | None:
            found = self.storage.read_manifest(key + "manifest.json")
            if found is None or found[0].topic_id != topic_id:
                return None
            return self.reader.producer_state_before(found[0], offset)

        async with self._threads:
            return await asyncio.to_thread(read)

    # -- reads -------------------------------------------------------------------------------

    async def manifest(self, partition: Partition) -> Manifest:
        """The partition's manifest: as the last pass left it, else read from S3 now."""
        tier = self._tiers.get((partition.topic, partition.partition))
        if tier is not None and tier.manifest is not None and tier.log is partition.log:
            return tier.manifest
        key = partition_prefix(self.settings.location.prefix, partition.topic, partition.partition)
        found = await asyncio.to_thread(self.storage.read_manifest, key + "manifest.json")
        if found is None:
            return empty_manifest(partition.topic, partition.partition, "", -1)
        return found[0]

    async def read(self, partition: Partition, offset: int, max_bytes: int) -> memoryview:
        """Whole batches from S3 from the one holding `offset` (below the local log start)."""
        manifest = await self.manifest(partition)
        async with self._threads:
            data = await asyncio.to_thread(self.reader.read, manifest, offset, max_bytes)
        return memoryview(data)

    async def committed_view(
        self, partition: Partition, offset: int, data: memoryview
    ) -> tuple[memoryview, int]:
        """Batches read from S3 from `offset` as a read_committed consumer sees them, as the
        local read gives them, and the last stable offset they stop at: the batches below it,
        each of an aborted transaction and each control batch emptied to its header. The
        aborted transactions are those of the log's local segments and of the segments' indexes
        on S3, read after them (a segment deleted locally meanwhile is in the manifest by then).
        A transactional batch in a segment uploaded before its index was ends the answer
        before it; IsolationUnavailable when it comes first."""
        log_ = partition.log
        lso = log_.last_stable_offset
        stable = [
            (pos, h) for pos, h in fmt.scan(data, check_crc=False).headers if h.last_offset < lso
        ]
        if not stable:
            return data[:0], lso
        last_pos, last = stable[-1]
        data, end = data[: last_pos + last.size], last.next_offset
        transactional = next(
            (pos for pos, h in stable if h.is_transactional and not h.is_control), None
        )
        if transactional is None:
            return consumer_view(data, (), committed=True), lso
        local = log_.aborted_transactions(offset, end)
        manifest = await self.manifest(partition)
        async with self._threads:
            remote = await asyncio.to_thread(
                self.reader.aborted_transactions, manifest, offset, end
            )
        if remote is not None:
            return consumer_view(data, [*local, *remote], committed=True), lso
        if transactional == 0:
            raise IsolationUnavailable(
                f"offset {offset} of {partition.topic}-{partition.partition} is a transactional "
                "batch in a segment uploaded to remote storage without an aborted-transaction "
                "index: read_uncommitted reads it"
            )
        return consumer_view(data[:transactional], (), committed=True), lso

    async def offset_for_timestamp(
        self, partition: Partition, timestamp: int
    ) -> tuple[int, int] | None:
        """The first record at or after `timestamp` that only S3 holds, if any."""
        manifest = await self.manifest(partition)
        local_start = partition.log.local_log_start_offset
        start = partition.log_start_offset
        for segment in manifest.segments:
            if segment.max_timestamp < timestamp or segment.last_offset < start:
                continue
            offset = max(segment.base_offset, start)
            while offset <= segment.last_offset and offset < local_start:
                data = await self.read(partition, offset, 1 << 20)
                if not data:
                    break
                for record in fmt.iter_records(data):
                    if record.offset >= offset and record.timestamp >= timestamp:
                        return record.offset, record.timestamp
                offset = fmt.scan(data, check_crc=False).headers[-1][1].next_offset
        return None
