"""ReplicaManager: this node's partitions, kept in step with the cluster metadata.

It turns every metadata view into local facts (topics created, grown, reconfigured or deleted
on disk; each partition made leader or follower in its epoch), and it is the one way in for
what the gateway and the group coordinator do to a partition: append and wait for acks, read
below the high watermark with long-polling, answer followers' fetches, and write the ISR
changes a leader decides. It reports the partitions a storage failure took offline here, for
the controller to move their leadership (KIP-112), and its replicas' log ends where a partition
waits for its crashed ISR members (KIP-966).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from engine import batch as fmt
from engine.config import TopicConfig
from engine.errors import (
    EngineError,
    LogClosed,
    OffsetMovedToTieredStorage,
    OffsetOutOfRange,
    UnknownPartition,
    UnknownTopic,
)
from engine.internal_topics import INTERNAL_TOPICS
from engine.log import AppendInfo, PartitionLog, ReadResult
from engine.manager import LogManager
from engine.notify import ChangeNotifier
from engine.producer_state import EndMarker, Isolation, ProducerIdentity, consumer_view
from replication.acks import Acks
from replication.errors import (
    InternalTopicWrite,
    LeaderChangedAfterAppend,
    LeaderNotAvailable,
    MetadataUnavailable,
    NotEnoughReplicas,
    NotEnoughReplicasAfterAppend,
    NotLeader,
    RequestTimedOut,
)
from replication.fetch_sessions import FetchSession, FetchSessions
from replication.group_commit import AppendGroups, FlushGroups
from replication.idempotency import IdempotencyIndex
from replication.isr_writes import IsrWrites
from replication.log_end_reports import LogEndReports
from replication.metadata import (
    NO_LEADER,
    REMOVED,
    ClusterView,
    MetadataStore,
    PartitionState,
    TopicPartition,
    TopicSpec,
)
from replication.partition import Partition
from replication.reassignment_throttle import ReassignmentThrottle
from replication.replica_state import LeaderState
from replication.session_wire import MAX_PARTITIONS, UNKNOWN_EPOCH, SessionFetchRequest
from replication.sibling_replicas import SiblingReplicas
from replication.tiering import TieringService

log = logging.getLogger(__name__)

TopicsListener = Callable[[set[str]], None]  # called with the names of deleted topics
RoleListener = Callable[[Partition], Awaitable[None]]
# Role changes handed to the listeners between two yields to the event loop: a view of
# thousands (a topic created, a node back) must not hold it past the lease keepalive's
# timeout (TTL/3).
ROLES_PER_TURN = 100
# How long a parked follower fetch with a new high watermark (or log start) to tell, and no
# records, waits for records to carry it. Under load they come within it and the mark rides
# with them: answered alone, each produce cost each follower a second answer (1.7 session
# fetches per acks=all request instead of about 1; docs/PERFORMANCE.md, "Cluster"). On a quiet
# partition the follower learns the mark this much later.
MARKS_LINGER_S = 0.01


@dataclass(frozen=True)
class ReplicationSettings:
    replica_lag_time_max_ms: int = 30_000  # replica.lag.time.max.ms
    leader_wait_ms: int = 5_000  # how long a request waits for a partition's leader to appear
    idempotency_window_s: float = 3600.0  # how long an Idempotency-Key is remembered
    idempotency_max_entries: int = 100_000  # keys remembered per partition


@dataclass
class ReplicationCounters:
    """What the metrics read: ISR changes stored by this node's leaders, acks=all waiters."""

    shrinks: int = 0
    expands: int = 0
    acks_waiting: int = 0


def refuse_internal(topic: str) -> None:
    """Clients never write an internal topic, whichever route their batches came by (Kafka's
    appendRecords with internalTopicsAllowed false): its coordinator appends to its own
    partitions through `Partition.append`, never through a produce's ways in."""
    if topic in INTERNAL_TOPICS:
        raise InternalTopicWrite(f"{topic!r} is an internal topic; producing to it is refused")


class ReplicaManager:
    """The partitions this node holds, their roles, and every operation on them."""

    def __init__(
        self,
        manager: LogManager,
        store: MetadataStore,
        node_id: int,
        notifier: ChangeNotifier,
        settings: ReplicationSettings | None = None,
        tiering: TieringService | None = None,
        *,
        report_offline: bool = True,
    ) -> None:
        """`report_offline`: tell the store which partitions went offline here (a single
        node has no other replica to lead them: its offline partitions keep answering
        KAFKA_STORAGE_ERROR until a restart)."""
        self.manager = manager
        self.store = store
        self.node_id = node_id
        self.notifier = notifier
        self.settings = settings or ReplicationSettings()
        self.tiering = tiering  # S3, when the node has a bucket
        self.partitions: dict[TopicPartition, Partition] = {}
        self.counters = ReplicationCounters()
        self._topics_listeners: list[TopicsListener] = []
        self._role_listeners: list[RoleListener] = []
        self._pending: ClusterView | None = None
        self._applying: asyncio.Task[None] | None = None
        self._applied = asyncio.Event()
        self._isr_task: asyncio.Task[None] | None = None
        self._isr_writes: set[TopicPartition] = set()
        self._tasks: set[asyncio.Future[object]] = set()
        self._report_offline = report_offline
        self._reported: frozenset[TopicPartition] = frozenset()
        self.siblings: SiblingReplicas | None = None  # the other nodes on this host
        self._closing = False
        self.appends = AppendGroups()  # produces of one loop turn: one write per partition
        self.flushes = FlushGroups()
        self.sessions = FetchSessions(MAX_PARTITIONS)  # followers' fetch sessions, as leader
        self.throttle = ReassignmentThrottle()
        self.isr_changes = IsrWrites(store)  # this turn's ISR changes, stored together
        self.log_ends = LogEndReports(store)
        self._log_ends_task: asyncio.Task[None] | None = None
        self._session_waiters: dict[int, asyncio.Future[None]] = {}  # one per session

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Take up the roles of the current view, then follow every change. Views are applied
        one at a time: one that arrives while the first is applied (reading the logs'
        idempotency markers can take a while) waits for it, as every later one does."""
        self._log_ends_task = asyncio.create_task(self.log_ends.run())
        self._applying = first = asyncio.create_task(self._apply(self.store.view))
        self.store.add_listener(self._view_changed)
        if self._report_offline:
            self._loop = asyncio.get_running_loop()
            self.manager.add_offline_listener(self._log_offline)
        await first
        if self._pending is not None and self._applying is first:
            self._applying = asyncio.create_task(self._apply_pending())
        self._isr_task = asyncio.create_task(self._check_isr_every())

    async def close(self) -> None:
        self._closing = True
        self.store.remove_listener(self._view_changed)
        if self._report_offline:
            self.manager.remove_offline_listener(self._log_offline)
        tasks: list[asyncio.Future[Any]] = [*self._tasks]
        background = [t for t in (self._isr_task, self._log_ends_task) if t is not None]
        tasks.extend(t for t in (self._applying, *background) if t is not None)
        for task in background:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def add_topics_listener(self, listener: TopicsListener) -> None:
        """Call `listener(deleted)` after topics were created, grown or deleted locally."""
        self._topics_listeners.append(listener)

    def add_role_listener(self, listener: RoleListener) -> None:
        """Await `listener(partition)` after a partition on this node changed role or epoch."""
        self._role_listeners.append(listener)

    # -- applying the metadata -----------------------------------------------------------------

    def _view_changed(self, view: ClusterView) -> None:
        self._pending = view
        if self._applying is None or self._applying.done():
            self._applying = asyncio.create_task(self._apply_pending())

    async def _apply_pending(self) -> None:
        while self._pending is not None and not self._closing:
            view, self._pending = self._pending, None
            try:
                await self._apply(view)
            except Exception:
                log.exception("applying cluster metadata revision %d failed", view.revision)

    async def applied(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait until `predicate()` holds after a view was applied; False on timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            self._applied.clear()
            try:
                async with asyncio.timeout(remaining):
                    await self._applied.wait()
            except TimeoutError:
                return predicate()
        return True

    async def _apply(self, view: ClusterView) -> None:
        deleted, left = await self._apply_topics(view)
        hosted = [
            (key, state)
            for key, state in view.partitions.items()
            if self.node_id in state.replicas and key[0] in self.manager.topics
        ]
        changed = await self._drop_removed({key for key, _ in hosted})
        new = [self._new_partition(*key) for key, _ in hosted if key not in self.partitions]
        if new:
            await asyncio.to_thread(_rebuild_idempotency, new)
            for partition in new:
                self.partitions[(partition.topic, partition.partition)] = partition
        first = {(partition.topic, partition.partition) for partition in new}
        for i, (key, state) in enumerate(hosted, 1):
            if i % ROLES_PER_TURN == 0:
                await asyncio.sleep(0)  # let the loop breathe (the lease's keepalive)
            if self._take(self.partitions[key], state):
                changed.append(self.partitions[key])
                # A partition's first role (at start-up, or its topic created or grown here)
                # is in the summary below; a later change (a failover) is news: a line each.
                (log.debug if key in first else log.info)(_role(self.partitions[key]))
        self.log_ends.update(
            {
                key: (state.version, self.partitions[key].log_end(self.store.registration))
                for key, state in hosted
                if state.leader == NO_LEADER
                and state.recovering
                and (self.node_id in state.recovering or self.node_id in state.elr)
                and not self.partitions[key].log.offline
            }
        )
        if first:
            log.info(
                "took up %d partitions: %s",
                len(first),
                _roles([p for p in changed if (p.topic, p.partition) in first]),
            )
        if left and self._report_offline:
            self._report()  # a deleted topic's offline logs are gone with it
        if left or changed:
            for topics_listener in self._topics_listeners:
                topics_listener(deleted)
        for i, partition in enumerate(changed, 1):
            for role_listener in self._role_listeners:
                await role_listener(partition)
            if i % ROLES_PER_TURN == 0:
                await asyncio.sleep(0)  # listeners may not suspend: let the loop breathe
        self._applied.set()

    async def _drop_removed(self, hosted: set[TopicPartition]) -> list[Partition]:
        """Stop serving and following the partitions a reassignment took off this node (its
        topic still has replicas here) and delete their records; returns them, for the role
        listeners."""
        removed = [key for key in self.partitions if key not in hosted]
        dropped = []
        for key in removed:
            partition = self.partitions.pop(key)
            partition.make_follower(PartitionState(NO_LEADER, partition.leader_epoch, (), ()))
            self.notifier.wake(partition.log)
            if not partition.log.offline:
                await asyncio.to_thread(partition.log.truncate_fully_and_start_at, 0)
            log.info("%s-%d: no longer a replica here; its records were deleted", *key)
            dropped.append(partition)
        return dropped

    def _log_offline(self, log_: PartitionLog) -> None:
        """The engine's word that a log went offline, from whichever thread met the failure."""
        self._loop.call_soon_threadsafe(self._report)

    def _report(self) -> None:
        """Report this node's offline partitions to the store if they changed (the whole
        set: a report is idempotent)."""
        offline = frozenset((log_.topic, log_.partition) for log_ in self.manager.offline_logs())
        if self._closing or offline == self._reported:
            return
        went = ", ".join(f"{t}-{p}" for t, p in sorted(offline - self._reported))
        self._reported = offline
        log.warning(
            "node %d reports its offline partitions to the controller (%d now)%s",
            self.node_id,
            len(offline),
            f"; newly offline: {went}" if went else "",
        )
        self.store.report_offline(offline)

    def _new_partition(self, topic: str, partition: int) -> Partition:
        settings = self.settings
        index = IdempotencyIndex(settings.idempotency_window_s, settings.idempotency_max_entries)
        return Partition(self.manager.log(topic, partition), self.node_id, index)

    async def _apply_topics(self, view: ClusterView) -> tuple[set[str], set[str]]:
        """Create, grow, reconfigure and delete local topics to match the view's; returns the
        names deleted from the cluster, and the names whose local files went here: those and
        the topics this node no longer holds a replica of (moved away: the topic, and what
        groups committed on it, lives on elsewhere)."""
        manager = self.manager
        hosted = {t for (t, _), s in view.partitions.items() if self.node_id in s.replicas}
        deleted: set[str] = set()
        left: set[str] = set()
        for name in list(manager.topics):
            spec = view.topics.get(name)
            gone = spec is None or manager.topics[name].topic_id != spec.topic_id
            if gone or name not in hosted:
                await self._delete_local(name)
                left.add(name)
                if gone:
                    deleted.add(name)
        for name in sorted(hosted):
            spec = view.topics.get(name)
            if spec is None:
                continue
            topic = manager.topics.get(name)
            if topic is None:
                await asyncio.to_thread(
                    manager.create_topic,
                    name,
                    spec.partitions,
                    dict(spec.configs),
                    topic_id=spec.topic_id,
                )
                deleted.discard(name)
                continue
            if dict(topic.overrides) != dict(spec.configs):
                changes: dict[str, object | None] = {k: None for k in topic.overrides}
                changes.update(spec.configs)
                manager.alter_topic_configs(name, changes)
            if len(topic.partitions) < spec.partitions:
                await asyncio.to_thread(manager.add_partitions, name, spec.partitions)
        return deleted, left

    async def _delete_local(self, name: str) -> None:
        topic = self.manager.topics[name]
        for log_ in topic.partitions:
            partition = self.partitions.pop((name, log_.partition), None)
            if partition is not None:
                partition.make_follower(PartitionState(NO_LEADER, partition.leader_epoch, (), ()))
        await asyncio.to_thread(self.manager.delete_topic, name)
        for log_ in topic.partitions:
            self.notifier.unwatch(log_)

    def _take(self, partition: Partition, state: PartitionState) -> bool:
        """Adopt `state`; True if the role or the epoch changed.

        A leadership stored before this process registered was given to its previous
        incarnation, whose unsynced writes may be lost: it is not taken up (the partition
        waits leaderless here) until the controller decides again (KIP-841)."""
        if state.leader == self.node_id and state.version < self.store.registration:
            state = replace(state, leader=NO_LEADER)
        current = partition.state
        if current is not None and state.leader_epoch < current.leader_epoch:
            return False  # an older view than the one applied
        if (
            current is not None
            and state.leader_epoch == current.leader_epoch
            and state.leader == current.leader
        ):
            if state.version > current.version:
                # Its own ISR change, or a move's start: the version its next write compares
                # against, and the ISR it holds.
                partition.update_state(state)
                self.notifier.wake(partition.log)
            return False
        if state.leader == self.node_id:
            partition.make_leader(state)
        else:
            partition.make_follower(state)
        self.notifier.wake(partition.log)
        return True

    # -- lookups -------------------------------------------------------------------------------

    def topic(self, name: str) -> TopicSpec:
        spec = self.store.view.topics.get(name)
        if spec is None:
            raise UnknownTopic(f"topic {name!r} does not exist", name)
        return spec

    def topic_config(self, name: str) -> TopicConfig:
        local = self.manager.topics.get(name)
        if local is not None:
            return local.config
        return self.manager.defaults.with_overrides(self.topic(name).configs)

    def check_partition(self, topic: str, partition: int) -> TopicSpec:
        spec = self.topic(topic)
        if not 0 <= partition < spec.partitions:
            raise UnknownPartition(
                f"topic {topic!r} has partitions 0..{spec.partitions - 1}; "
                f"{partition} does not exist"
            )
        return spec

    def state(self, topic: str, partition: int) -> PartitionState:
        self.check_partition(topic, partition)
        state = self.store.view.partition(topic, partition)
        if state is None:
            raise LeaderNotAvailable(f"{topic}-{partition} has no state yet")
        return state

    def check_enough_replicas(self, topic: str, partition: int) -> None:
        """acks=all's check for a partition led elsewhere, on the stored ISR (the leader stores
        an ISR change before it acts on it)."""
        state = self.state(topic, partition)
        required = self.topic_config(topic).min_insync_replicas
        if len(state.isr) < required:
            raise NotEnoughReplicas(
                f"{topic}-{partition} has {len(state.isr)} in-sync replicas {list(state.isr)}; "
                f"min.insync.replicas is {required}; nothing was appended"
            )

    def offline_partitions(self) -> list[tuple[str, int, str]]:
        """This node's partitions a storage failure took offline (until a restart): topic,
        partition and the failure."""
        offline = self.manager.offline_logs()
        return [(log_.topic, log_.partition, log_.failure or "") for log_ in offline]

    def local(self, topic: str, partition: int) -> Partition | None:
        """This node's replica of the partition, if it holds one."""
        return self.partitions.get((topic, partition))

    def leading(self, topic: str, partition: int) -> Partition | None:
        """This node's replica if it leads the partition now: `leader`'s common case, without
        a coroutine (a produce on the hot path asks for it first)."""
        local = self.partitions.get((topic, partition))
        return local if local is not None and local.is_leader else None

    async def leader(self, topic: str, partition: int) -> Partition:
        """This node's replica, which must lead the partition: waits (bounded) while a new
        leader is being elected or the view is being applied. NotLeader names the leader."""
        local = self.leading(topic, partition)
        if local is not None:  # the common case, at once
            return local
        state = self.state(topic, partition)

        def settled() -> bool:
            local = self.partitions.get((topic, partition))
            leader = self.store.view.partitions.get((topic, partition), state).leader
            return (local is not None and local.is_leader) or leader not in (
                NO_LEADER,
                self.node_id,
            )

        await self.applied(settled, self.settings.leader_wait_ms / 1000)
        state = self.state(topic, partition)
        local = self.partitions.get((topic, partition))
        if local is not None and local.is_leader:
            return local
        if state.leader not in (NO_LEADER, self.node_id):
            raise NotLeader(
                f"node {state.leader} leads {topic}-{partition}, not node {self.node_id}",
                state.leader,
            )
        raise LeaderNotAvailable(
            f"{topic}-{partition} has no leader now (epoch {state.leader_epoch}); retry shortly"
        )

    async def confirm_leadership(self, leader: Partition) -> None:
        """Check with the store, not the view, that this node still leads `leader`'s
        partition in its epoch: a node cut off from the store (or just resumed from a pause)
        may lead in its own view only, while a newer leader has committed past this log's end.
        Raises NotLeader (naming the newer leader) or LeaderNotAvailable; else returns."""
        topic, partition = leader.topic, leader.partition
        timeout_s = self.settings.leader_wait_ms / 1000
        try:
            stored = await self.store.read_partition(topic, partition, timeout_s)
        except MetadataUnavailable as exc:
            raise LeaderNotAvailable(
                f"node {self.node_id} cannot confirm that it still leads {topic}-{partition} "
                f"({exc}); retry shortly"
            ) from None
        if stored is None:
            raise UnknownTopic(f"topic {topic!r} was deleted", topic=topic)
        if stored.leader == self.node_id and stored.leader_epoch == leader.leader_epoch:
            return
        if stored.leader in (NO_LEADER, self.node_id):
            raise LeaderNotAvailable(
                f"{topic}-{partition} is in epoch {stored.leader_epoch} now; retry shortly"
            )
        raise NotLeader(
            f"node {stored.leader} leads {topic}-{partition} in epoch {stored.leader_epoch}, "
            f"not node {self.node_id}",
            stored.leader,
        )

    # -- produce -------------------------------------------------------------------------------

    async def append(
        self, topic: str, partition: int, data: bytes | bytearray, acks: Acks, timeout_ms: int
    ) -> AppendInfo:
        """Append producer batches as leader and honour acks (one partition's whole produce,
        forwarded by another node's produce front: a client's, so never an internal topic)."""
        refuse_internal(topic)
        leader = await self.leader(topic, partition)
        info = await self.appends.append(leader, data, acks)
        await self.acknowledge(leader, info, acks, timeout_ms)
        return info

    async def append_transactional(
        self,
        topic: str,
        partition: int,
        data: bytes | bytearray,
        acks: Acks,
        timeout_ms: int,
        producer: ProducerIdentity,
    ) -> AppendInfo:
        """`append` inside `producer`'s transaction, on the partition led here (the caller
        added the partition to the transaction at its coordinator first, KIP-890)."""
        refuse_internal(topic)
        leader = await self.leader(topic, partition)
        info = await self.appends.append(leader, data, acks, producer=producer)
        await self.acknowledge(leader, info, acks, timeout_ms)
        return info

    async def write_marker(
        self,
        topic: str,
        partition: int,
        producer: ProducerIdentity,
        commit: bool,
        coordinator_epoch: int,
        timeout_ms: int,
    ) -> None:
        """End `producer`'s transaction on a partition led here: its COMMIT or ABORT marker
        (internal topics too: a transaction's offsets), on every in-sync replica before this
        returns. Written once: a coordinator's retry waits for the first one to commit."""
        leader = await self.leader(topic, partition)
        marker = EndMarker(producer.producer_id, producer.epoch, commit, coordinator_epoch)
        info = await self.appends.mark(leader, marker)
        await self.wait_committed(leader, marked_through(leader, info), timeout_ms)

    async def acknowledge(
        self, leader: Partition, info: AppendInfo, acks: Acks, timeout_ms: int
    ) -> None:
        """After `leader.append`: acks 0 and 1 return at once (after an fsync the flush policy
        asks for, with 1), all once the high watermark passes the last record."""
        if info.flush_due:
            await self._flush(leader, info.last_offset, acks, timeout_ms)
        if acks is Acks.ALL:
            self.counters.acks_waiting += 1
            try:
                await self.wait_committed(leader, info.last_offset, timeout_ms)
            finally:
                self.counters.acks_waiting -= 1

    async def _flush(self, partition: Partition, offset: int, acks: Acks, timeout_ms: int) -> None:
        flushing = self.flushes.flush_through(partition, offset)
        if acks is Acks.NONE:
            self._background(flushing)
            return
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                await flushing
        except TimeoutError:
            raise RequestTimedOut(
                "the records were appended but not yet flushed within timeout_ms; "
                "they may still become durable"
            ) from None

    def committed(self, partition: Partition, last_offset: int) -> bool:
        """Whether acks=all's wait for `last_offset` would end at once, acknowledged: the high
        watermark passed it with min.insync.replicas in sync (a leader alone moves the high
        watermark as it appends)."""
        return (
            partition.high_watermark > last_offset
            and len(partition.isr) >= partition.config.min_insync_replicas
        )

    async def wait_committed(self, partition: Partition, last_offset: int, timeout_ms: int) -> None:
        """Wait until the high watermark passes `last_offset` (Kafka's acks=all)."""
        deadline = time.monotonic() + timeout_ms / 1000
        name = f"{partition.topic}-{partition.partition}"
        while True:
            if partition.high_watermark > last_offset:
                required = partition.config.min_insync_replicas
                if len(partition.isr) < required:
                    raise NotEnoughReplicasAfterAppend(
                        f"{name}: the records are committed by {list(partition.isr)}, fewer "
                        f"than min.insync.replicas={required}; they may be kept"
                    )
                return
            # The log went offline after the append: its high watermark will not move again.
            partition.log.check_online(
                "the records were appended before it and are not acknowledged"
            )
            if not partition.is_leader:
                raise LeaderChangedAfterAppend(
                    f"{name}: this node stopped leading before the records were replicated; "
                    "they may still be committed by the new leader (a retry with an "
                    "Idempotency-Key appends them at most once)"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.notifier.closing:
                raise RequestTimedOut(
                    f"{name}: not every in-sync replica had the records within timeout_ms; "
                    "they may still be committed"
                )
            await self.notifier.wait(partition.log, remaining)

    # -- consume -------------------------------------------------------------------------------

    async def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int,
        min_bytes: int,
        timeout_ms: int,
        max_records: int | None = None,
        counted: bool = True,
        isolation: Isolation = Isolation.READ_UNCOMMITTED,
    ) -> ReadResult:
        """Read from `offset` below the high watermark (read_committed: the last stable
        offset); with less than `min_bytes` there, park until more is committed or `timeout_ms`
        passes. A parked request costs one future (`counted` False: the server's own reader,
        not a client's parked fetch)."""
        leader = await self.leader(topic, partition)
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            if not leader.is_leader:  # deleted, or led elsewhere since the fetch parked
                leader = await self.leader(topic, partition)
            result, tiered = await self._read_committed(
                leader, offset, max_bytes, max_records=max_records, isolation=isolation
            )
            remaining = deadline - time.monotonic()
            if tiered or len(result.data) >= min_bytes or remaining <= 0 or self.notifier.closing:
                return result
            if max_records is not None and covers(result.data, offset + max_records):
                return result
            await self.notifier.wait(leader.log, remaining, counted)

    async def _read_committed(
        self,
        leader: Partition,
        offset: int,
        max_bytes: int,
        *,
        min_one: bool = True,
        max_records: int | None = None,
        isolation: Isolation = Isolation.READ_UNCOMMITTED,
    ) -> tuple[ReadResult, bool]:
        """A consumer's read of a partition led here, below the high watermark, and whether it
        came from S3 (below the local log start; answered as it is). A deleted topic is
        UnknownTopic; an offset past the log end is out of range only once the store confirms
        this node still leads (a deposed leader's log may be behind the new one's)."""
        try:
            read = leader.read(
                offset, max_bytes, min_one=min_one, max_records=max_records, isolation=isolation
            )
            return read, False
        except OffsetMovedToTieredStorage as exc:
            read = await self._read_tiered(leader, offset, max_bytes, exc, isolation)
            return read, bool(read.data)  # none below the last stable offset: wait as locally
        except LogClosed:
            raise UnknownTopic(f"topic {leader.topic!r} was deleted") from None
        except OffsetOutOfRange as exc:
            if exc.offset > exc.log_end_offset:
                await self.confirm_leadership(leader)
            raise

    def read_replica_for(self, topic: str, partition: int, client_rack: str) -> int | None:
        """KIP-392's choice for a consumer in `client_rack`: the leader if it stands there,
        else an in-sync replica there that is live with its log online (this node first);
        None: no replica stands there, the leader serves."""
        view = self.store.view
        state = view.partitions.get((topic, partition))
        if state is None or state.leader == NO_LEADER:
            return None
        offline = view.offline_replicas(topic, partition)
        there = [
            r
            for r in (state.leader, self.node_id, *state.isr)
            if r in state.isr
            and r in view.live
            and r not in offline
            and (node := view.nodes.get(r)) is not None
            and node.rack == client_rack
        ]
        return there[0] if there else None

    async def fetch_in_sync(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_bytes: int,
        min_bytes: int,
        timeout_ms: int,
        max_records: int | None = None,
        isolation: Isolation = Isolation.READ_UNCOMMITTED,
    ) -> ReadResult:
        """`fetch` served by this node's replica while it is in the ISR, leader or follower
        (KIP-392), below its own high watermark. An offset past its log end, or a replica
        fallen out of sync, is NotLeader naming the leader: the consumer's fetch goes there."""
        local = self._hosted(topic, partition)
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            if offset > local.log_end_offset:
                leader = None if local.leader == NO_LEADER else local.leader
                raise NotLeader(f"node {self.node_id} is behind offset {offset}", leader)
            try:
                result = local.read_in_sync(
                    offset, max_bytes, max_records=max_records, isolation=isolation
                )
            except OffsetMovedToTieredStorage:
                raise NotLeader(
                    f"offset {offset} of {topic}-{partition} is on S3: the leader reads it",
                    None if local.leader == NO_LEADER else local.leader,
                ) from None
            except LogClosed:
                raise UnknownTopic(f"topic {topic!r} was deleted") from None
            remaining = deadline - time.monotonic()
            if len(result.data) >= min_bytes or remaining <= 0 or self.notifier.closing:
                return result
            if max_records is not None and covers(result.data, offset + max_records):
                return result
            await self.notifier.wait(local.log, remaining)

    def fetch_from_sibling(
        self,
        topic: str,
        partition: int,
        offset: int | str,
        max_bytes: int,
        min_bytes: int,
        timeout_ms: int,
        max_records: int | None = None,
    ) -> tuple[int, ReadResult] | None:
        """`fetch` of a partition another node on this host leads, from its files, when they
        answer it as that node would without waiting: (the offset read from, the read); else
        None (the caller forwards)."""
        if self.siblings is None:
            return None
        view = self.store.view.partitions.get((topic, partition))
        if view is None or view.leader in (NO_LEADER, self.node_id):
            return None
        found = self.siblings.read(
            view.leader, view.leader_epoch, topic, partition, offset, max_bytes, max_records
        )
        if found is None:
            return None
        start, result = found
        enough = len(result.data) >= min_bytes or timeout_ms <= 0
        if not enough and not (
            max_records is not None and covers(result.data, start + max_records)
        ):
            return None  # the leader would wait for more
        if holds_transactional(result.data):
            return None  # its control batches are the leader's to hide
        self.siblings.served += 1
        return found

    async def _read_tiered(
        self,
        leader: Partition,
        offset: int,
        max_bytes: int,
        exc: OffsetMovedToTieredStorage,
        isolation: Isolation,
    ) -> ReadResult:
        """Batches below the local log start, from S3; where S3 has nothing there (a gap from
        before tiering was on), the first local batches. Control batches are emptied, and for a
        read_committed reader the aborted transactions' batches, below the last stable offset
        (`TieringService.committed_view`)."""
        if self.tiering is None:
            raise OffsetOutOfRange(offset, exc.local_log_start_offset, leader.log_end_offset)
        log_ = leader.log
        if max_bytes <= 0:  # a many-partition answer already full: S3 is not asked
            return ReadResult(
                memoryview(b""), log_.high_watermark, log_.log_start_offset, log_.log_end_offset
            )
        data = await self.tiering.read(leader, offset, max_bytes)
        if not data:
            return leader.read(log_.local_log_start_offset, max_bytes, isolation=isolation)
        lso = -1
        if isolation is Isolation.READ_COMMITTED:
            data, lso = await self.tiering.committed_view(leader, offset, data)
        elif isolation is not Isolation.RAW:
            data = consumer_view(data, (), committed=False)
        return ReadResult(
            data, log_.high_watermark, log_.log_start_offset, log_.log_end_offset, lso
        )

    async def offset_for_timestamp(
        self, leader: Partition, timestamp: int
    ) -> tuple[int, int] | None:
        """(offset, timestamp) of the first committed record at or after `timestamp`: on S3
        first for a tiered partition, then on local disk."""
        if self.tiering is not None and leader.config.remote_storage_enable:
            found = await self.tiering.offset_for_timestamp(leader, timestamp)
            if found is not None:
                return found
        return await asyncio.to_thread(leader.offset_for_timestamp, timestamp)

    async def wait_any(
        self,
        partitions: Iterable[Partition],
        timeout: float,
        also: asyncio.Future[None] | None = None,
    ) -> bool:
        """Park until any of the partitions changes, or `also` resolves; False on timeout."""
        return await self.notifier.wait_any((p.log for p in partitions), timeout, also)

    # -- followers -----------------------------------------------------------------------------

    async def replica_fetch(
        self,
        topic: str,
        partition: int,
        *,
        replica: int,
        leader_epoch: int,
        offset: int,
        max_bytes: int,
        timeout_ms: int,
    ) -> tuple[ReadResult, Partition]:
        """A follower's long-poll of one partition: batches from `offset` up to the log end,
        answered as soon as there are any. A high watermark that moved alone waits for the next
        answer, as in Kafka; the fetch sessions followers use answer it MARKS_LINGER_S on."""
        leader = self._hosted(topic, partition)
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            result, expand = leader.replica_fetch(replica, offset, leader_epoch, max_bytes)
            if expand is not None:
                self._background(self.change_isr(leader, expand, leader.leader_state))
            remaining = deadline - time.monotonic()
            if result.data or remaining <= 0 or self.notifier.closing:
                return result, leader
            await self.notifier.wait(leader.log, remaining)

    async def session_fetch(
        self, request: SessionFetchRequest
    ) -> tuple[int, dict[TopicPartition, ReadResult | EngineError]]:
        """A follower node's one fetch for all it follows here (KIP-227): (the session id, each
        partition's batches and marks or its error). Answers as soon as any partition has
        records or an error (a full request at once, bringing every partition), or the records
        reach `min_bytes`, or `max_wait_ms` passes; and MARKS_LINGER_S after a partition's
        high watermark or log start is not what the follower was last sent, records or not. So
        a follower learns a high watermark within that and a round trip of its move, and
        serves its rack's consumers what is committed then (KIP-392), not at the end of its
        wait. One parked waiter for the whole session, woken by any change of its partitions'
        logs (an append, a high watermark move); a newer full request of the same follower
        releases it. A consumer's request (replica -1) is read as `consumer_fetch` reads it,
        with no session (id 0)."""
        if request.consumer:
            return 0, await self.consumer_fetch(request)
        session = self.sessions.take(request)
        released = self._session_waiters.pop(request.replica, None)
        if released is not None and not released.done():
            released.set_result(None)
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._session_waiters[request.replica] = waiter
        deadline = time.monotonic() + request.max_wait_ms / 1000
        told_by = math.inf  # when the marks not yet sent must go, records or not
        try:
            while True:
                found, size, errors, held_s = self._session_round(session, request)
                now = time.monotonic()
                remaining = deadline - now
                if not self.sessions.current(session):
                    return session.id, {}  # replaced: its follower gave this request up
                if told_by == math.inf and _marks_moved(session, found):
                    told_by = now + MARKS_LINGER_S
                if (
                    request.full
                    or errors
                    or (size and size >= request.min_bytes)
                    or now >= told_by
                    or remaining <= 0
                    or self.notifier.closing
                ):
                    return session.id, self._answered(session, found, request.full)
                logs = [p.log for key, _ in session if (p := self.partitions.get(key))]
                wait_s = min(remaining, held_s, told_by - now)
                await self.notifier.wait_any(logs, wait_s, waiter)
                if self._session_waiters.get(request.replica) is not waiter:
                    return session.id, {}  # a newer request of the follower took over
                if waiter.done():  # a log woke it: a fresh one for the next park
                    waiter = asyncio.get_running_loop().create_future()
                    self._session_waiters[request.replica] = waiter
        finally:
            if self._session_waiters.get(request.replica) is waiter:
                del self._session_waiters[request.replica]

    async def consumer_fetch(
        self, request: SessionFetchRequest
    ) -> dict[TopicPartition, ReadResult | EngineError]:
        """A consumer's one fetch for many partitions led here (Kafka's FetchRequest with
        replica -1; the group coordinator's for its members): each partition's committed
        batches from its offset, or its error. Answers as soon as any partition fails or the
        records reach `min_bytes`, else when `max_wait_ms` passes, with one parked waiter for
        all. Notes nothing of followers, the ISR or fetch sessions."""
        deadline = time.monotonic() + request.max_wait_ms / 1000
        while True:
            found, size, errors = await self._consumer_round(request)
            remaining = deadline - time.monotonic()
            if errors or size >= request.min_bytes or remaining <= 0 or self.notifier.closing:
                return found
            logs = [p.log for key in request.partitions if (p := self.partitions.get(key))]
            await self.notifier.wait_any(logs, remaining)

    async def _consumer_round(
        self, request: SessionFetchRequest
    ) -> tuple[dict[TopicPartition, ReadResult | EngineError], int, bool]:
        """Read every partition of a consumer's request in its order, within each one's
        max_bytes and the request's in all (the first batch read comes whole, as in Kafka;
        once the answer is full the rest read nothing): (the results, the bytes read, whether
        any partition failed)."""
        found: dict[TopicPartition, ReadResult | EngineError] = {}
        size = 0
        errors = False
        for key, position in request.partitions.items():
            room = max(min(position.max_bytes, request.max_bytes - size), 0)
            try:
                leader = self._hosted(*key)
                if position.leader_epoch != UNKNOWN_EPOCH:
                    leader.check_epoch(position.leader_epoch)
                result, _ = await self._read_committed(
                    leader,
                    position.fetch_offset,
                    room,
                    min_one=size == 0,
                    isolation=request.isolation,
                )
            except EngineError as exc:
                found[key] = exc
                errors = True
                continue
            size += len(result.data)
            found[key] = result
        return found, size, errors

    def _session_round(
        self, session: FetchSession, request: SessionFetchRequest
    ) -> tuple[dict[TopicPartition, ReadResult | EngineError], int, bool, float]:
        """Note the follower's position in every partition of the session and read what each
        has from it, within each one's max_bytes and the request's in all (the first
        partition with records may exceed them by one batch, as in Kafka), and for a replica a
        reassignment adds, within the reassignment throttle: (the results, the bytes read,
        whether any partition failed, how long the throttle holds records back: inf if not)."""
        found: dict[TopicPartition, ReadResult | EngineError] = {}
        size = 0
        errors = False
        now = time.monotonic()
        bucket = self.throttle.configure(self.store.view.reassignment_throttle, now)
        held_s = math.inf
        for key, part in session:
            position = part.position
            room = max(min(position.max_bytes, request.max_bytes - size), 0)
            try:
                leader = self._hosted(*key)
                throttled = bucket is not None and leader.copying_to(session.replica)
                if bucket is not None and throttled:
                    room = min(room, bucket.available(now))
                result, expand = leader.replica_fetch(
                    session.replica,
                    position.fetch_offset,
                    position.leader_epoch,
                    room,
                    min_one=size == 0 and room > 0,
                )
            except EngineError as exc:
                found[key] = exc
                errors = True
                continue
            if bucket is not None and throttled:
                bucket.spend(len(result.data))
                if not result.data and position.fetch_offset < result.log_end_offset:
                    held_s = bucket.wait_s(now)
            if expand is not None:
                self._background(self.change_isr(leader, expand, leader.leader_state))
            size += len(result.data)
            found[key] = ReadResult(
                result.data, leader.high_watermark, leader.log_start_offset, result.log_end_offset
            )
        return found, size, errors, held_s

    @staticmethod
    def _answered(
        session: FetchSession,
        found: dict[TopicPartition, ReadResult | EngineError],
        full: bool,
    ) -> dict[TopicPartition, ReadResult | EngineError]:
        """What the answer carries: everything in a full one, else the partitions with records,
        errors or marks the follower has not been sent; noted as sent."""
        answer: dict[TopicPartition, ReadResult | EngineError] = {}
        for key, outcome in found.items():
            part = session.partitions[key]
            if isinstance(outcome, EngineError):
                answer[key] = outcome
                continue
            hw, start = outcome.high_watermark, outcome.log_start_offset
            if full or outcome.data or part.news(hw, start):
                answer[key] = outcome
                session.answered(key, hw, start)
            if outcome.data:
                session.to_back(key)
        return answer

    def epoch_end(
        self, topic: str, partition: int, leader_epoch: int, epoch: int
    ) -> tuple[int, int]:
        """KIP-279's answer to a follower of `leader_epoch` asking where `epoch` ends."""
        leader = self._hosted(topic, partition)
        leader.check_epoch(leader_epoch)
        return leader.end_offset_for_epoch(epoch)

    def _hosted(self, topic: str, partition: int) -> Partition:
        local = self.partitions.get((topic, partition))
        if local is None:
            self.check_partition(topic, partition)
            raise NotLeader(f"node {self.node_id} holds no replica of {topic}-{partition}")
        return local

    def _background(self, work: Awaitable[object]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- the ISR -------------------------------------------------------------------------------

    async def _check_isr_every(self) -> None:
        interval = self.settings.replica_lag_time_max_ms / 2000
        while True:
            await asyncio.sleep(interval)
            for partition in list(self.partitions.values()):
                proposal = partition.shrink_proposal(self.settings.replica_lag_time_max_ms)
                if proposal is not None:
                    await self.change_isr(partition, proposal)

    async def change_isr(
        self, partition: Partition, isr: tuple[int, ...], proposed_by: LeaderState | None = None
    ) -> bool:
        """Write a leader's ISR change to the store; the leader adopts it only once stored.
        `proposed_by`: the leader state that proposed it, when the write runs later (a
        follower's fetch proposes an expansion): a proposal of an earlier epoch or replica
        list is dropped (the follower's next fetch proposes again if it still holds)."""
        key = (partition.topic, partition.partition)
        leading = partition.leader_state
        if (
            leading is None
            or key in self._isr_writes
            or (proposed_by is not None and leading is not proposed_by)
        ):
            return False
        joining = set(isr) - set(leading.isr)
        if not self.store.view.shutting_down.isdisjoint(joining):
            return False  # a node in a controlled shutdown does not rejoin (Kafka's rule)
        if any(self.store.view.node_states.get(r) == REMOVED for r in joining):
            return False  # a removed node that came back rejoins no ISR
        if not joining <= self.store.view.live:
            # Its lease lapsed (KIP-841's fenced broker): the controller would drop it again,
            # each time in a new epoch; it rejoins once registered again.
            return False
        new = partition.isr_state(isr)
        registered = self.store.view.registered
        carried = {r: registered.get(r, 0) for r in leading.isr if r in isr and r != self.node_id}
        if any(revision > new.version for revision in carried.values()):
            return False  # a member restarted: the controller drops it first (KIP-903)
        shrinking = len(isr) < len(leading.isr)  # the view may show the write before it returns
        leading.begin_isr_change(isr)
        self._isr_writes.add(key)
        try:
            stored = await self.isr_changes.write(key, new, carried)
        except Exception:
            leading.isr_change_failed()
            log.exception("%s-%d: ISR change to %s failed", key[0], key[1], list(isr))
            return False
        finally:
            self._isr_writes.discard(key)
        if stored is None or partition.leader_state is not leading:
            leading.isr_change_failed()
            return False
        log.info("%s-%d: ISR is now %s", key[0], key[1], list(isr))
        if shrinking:
            self.counters.shrinks += 1
        else:
            self.counters.expands += 1
        partition.stored_isr(stored)
        self.notifier.wake(partition.log)
        return True


def _marks_moved(
    session: FetchSession, found: dict[TopicPartition, ReadResult | EngineError]
) -> bool:
    """Whether a partition read for the session has a high watermark or log start its follower
    was not sent (noted as sent when answered: a mark that stays put answers once)."""
    for key, outcome in found.items():
        if isinstance(outcome, ReadResult) and session.partitions[key].news(
            outcome.high_watermark, outcome.log_start_offset
        ):
            return True
    return False


def _role(partition: Partition) -> str:
    """`orders-0: leader in epoch 3, ISR [0, 1]`, `... follower of node 2 ...` or `... no
    leader ...`."""
    state = partition.state
    assert state is not None
    if state.leader == partition.node_id:
        role = "leader"
    elif state.leader == NO_LEADER:
        role = "no leader"
    else:
        role = f"follower of node {state.leader}"
    where = f"{partition.topic}-{partition.partition}"
    return f"{where}: {role} in epoch {state.leader_epoch}, ISR {list(state.isr)}"


def _roles(partitions: list[Partition]) -> str:
    """`leader of orders[0-2,5], t[0]; follower of orders[3-4]`: partitions by role, then
    topic, consecutive numbers as ranges."""
    roles = ("leader of", "follower of", "no leader for")
    by_role: dict[str, dict[str, list[int]]] = {role: {} for role in roles}
    for p in partitions:
        role = roles[0] if p.leader == p.node_id else roles[2 if p.leader == NO_LEADER else 1]
        by_role[role].setdefault(p.topic, []).append(p.partition)
    return "; ".join(
        f"{role} " + ", ".join(f"{t}[{_spans(sorted(ns))}]" for t, ns in sorted(topics.items()))
        for role, topics in by_role.items()
        if topics
    )


def _spans(numbers: list[int]) -> str:
    """[0, 1, 2, 5] -> `0-2,5`."""
    spans: list[list[int]] = []
    for n in numbers:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def _rebuild_idempotency(partitions: list[Partition]) -> None:
    for partition in partitions:
        partition.rebuild_idempotency()


def holds_transactional(data: memoryview) -> bool:
    """Whether any batch in `data` belongs to a transaction (data or marker)."""
    headers = fmt.scan(data, check_crc=False).headers
    return any(h.attributes & fmt.TRANSACTIONAL_MASK for _, h in headers)


def covers(data: memoryview, end_offset: int) -> bool:
    """Whether the batches reach `end_offset`: all the records the caller asked for are there."""
    headers = fmt.scan(data, check_crc=False).headers
    return bool(headers) and headers[-1][1].next_offset >= end_offset


def marked_through(leader: Partition, info: AppendInfo | None) -> int:
    """The offset the high watermark must pass for a marker written on `leader` (`info`;
    None: written there before) to be on every in-sync replica (`wait_committed`)."""
    return leader.log_end_offset - 1 if info is None else info.last_offset
