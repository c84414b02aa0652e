"""The partitions of a coordinator's internal topic this node leads (`__consumer_offsets` for
consumer groups, `__share_group_state` for share groups): which are replayed, and the appends.

A node coordinates the groups of such a partition it leads once it has replayed it; every
group change is appended there before it is answered (`durable` waits for the replicas).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Generic, TypeVar

from engine import offsets_topic
from engine.errors import EngineError
from engine.offsets_topic import CommittedLog, StoredGroup
from groups.errors import GroupError
from replication.acks import Acks
from replication.errors import LeaderNotAvailable, NotLeader
from replication.metadata import NO_LEADER
from replication.partition import Partition
from replication.replica_manager import ReplicaManager

REPLAY_WAIT_MS = 30_000  # how long a new coordinator waits for its offsets log to commit
logger = logging.getLogger("groups.coordinator")  # every part logs as the coordinator
Stored = TypeVar("Stored")  # what a replay gives per group


def partition_count(replicas: ReplicaManager, topic: str = offsets_topic.OFFSETS_TOPIC) -> int:
    """The coordinator topic's partition count; until the controller has created the topic, no
    node can coordinate a group (Kafka's COORDINATOR_NOT_AVAILABLE)."""
    spec = replicas.store.view.topics.get(topic)
    if spec is None:
        raise GroupError(
            "COORDINATOR_NOT_AVAILABLE",
            f"{topic} does not exist yet (the controller creates it once enough nodes are "
            "alive); retry shortly",
        )
    return spec.partitions


def local_leader(replicas: ReplicaManager, topic: str, p: int) -> Partition:
    """This node's replica of a partition the group reads or commits; it must lead it."""
    partition = replicas.leading(topic, p)
    if partition is not None:
        return partition
    state = replicas.state(topic, p)
    if state.leader not in (NO_LEADER, replicas.node_id):
        raise NotLeader(f"node {state.leader} leads {topic}-{p}", state.leader)
    raise LeaderNotAvailable(f"{topic}-{p} has no leader on this node yet; retry shortly")


class CoordinatorLog(Generic[Stored]):
    """Replays of a coordinator topic's partitions led here, and each group's appends to its
    own partition (the one `offsets_topic.partition_for` names, as Kafka chooses)."""

    def __init__(
        self,
        replicas: ReplicaManager,
        restore: Callable[[Mapping[str, Stored]], None],
        replayed: Callable[[], None],
        unload: Callable[[int], None],
        topic: str,
        replay: Callable[[Iterable[CommittedLog]], Mapping[str, Stored]],
    ) -> None:
        self.replicas = replicas
        self.topic = topic
        self._replay = replay
        self._restore = restore  # a replay's groups, to take over
        self._replayed = replayed  # after a replay: the topics may have changed meanwhile
        self._unload = unload  # an offsets partition left this node: drop its groups
        # offsets partition -> the leader epoch its groups were replayed in: until then a new
        # leader knows none of them, and must not answer as if they had no offsets
        self._loaded: dict[int, int] = {}
        self._loads: dict[int, asyncio.Task[None]] = {}  # offsets partition -> its replay
        self._written: dict[str, tuple[Partition, int]] = {}  # each group's last write

    async def role_changed(self, partition: Partition) -> None:
        """An offsets partition came to this node (replay its groups from the log, in the
        background), moved to a new epoch while led here since its replay (keep its groups),
        or left it (its groups are coordinated elsewhere now; their parked fetches answer)."""
        if partition.topic != self.topic:
            return
        previous = self._loads.pop(partition.partition, None)
        if previous is not None:
            previous.cancel()
        if partition.is_leader:
            epoch = partition.leader_epoch
            if partition.partition in self._loaded:
                # Led here since its replay: every change since went through this node's
                # log, so the groups in memory are the log's. A replay would replace them
                # under their members: positions lost, parked fetches and session timers
                # left on the replaced groups, and a commit answered while it ran missing.
                self._loaded[partition.partition] = epoch
                return
            # Not awaited: the node applies its next views only after its role listeners
            # return, and the view shrinking this partition's ISR to what is alive may be
            # the one that lets its high watermark reach the log end the replay waits for.
            load = asyncio.create_task(self._load(partition, epoch))
            self._loads[partition.partition] = load
            load.add_done_callback(functools.partial(self._loaded_by, partition.partition))
            return
        self._loaded.pop(partition.partition, None)
        self._unload(partition.partition)

    async def _load(self, partition: Partition, epoch: int) -> None:
        """Replay an offsets partition's groups once its log is all committed: a new leader's
        high watermark trails its log until the followers fetch from it, and the log is the
        truth from now on. Only for the epoch it was started in."""
        end = partition.log_end_offset
        if partition.high_watermark < end:
            with contextlib.suppress(EngineError):
                await self.replicas.wait_committed(partition, end - 1, REPLAY_WAIT_MS)
        stored = await asyncio.to_thread(self._replay, [partition])
        if partition.is_leader and partition.leader_epoch == epoch:
            self._restore(stored)
            self._loaded[partition.partition] = epoch
            self._replayed()

    async def loaded(self, timeout_s: float | None = None) -> None:
        """Wait for the replays under way (a starting node answers for its groups once the
        offsets partitions it leads are replayed, as Kafka's coordinator loads on start), at
        most `timeout_s`; at once when none is, as on every call to a loaded coordinator.
        Neither a timeout nor a cancelled wait stops a replay."""
        if self._loads:
            await asyncio.wait(list(self._loads.values()), timeout=timeout_s)

    def _loaded_by(self, offsets_partition: int, load: asyncio.Task[None]) -> None:
        """A replay ended: forget it, and say why if it failed."""
        if self._loads.get(offsets_partition) is load:
            del self._loads[offsets_partition]
        if not load.cancelled() and load.exception() is not None:
            logger.error(
                "replaying %s-%d failed; its groups answer 503 until its next leader change",
                self.topic,
                offsets_partition,
                exc_info=load.exception(),
            )

    def coordinator(self, name: str) -> Partition:
        """The partition holding group `name`, which this node must lead: NotLeader names the
        node that does (the gateway forwards there)."""
        topic = self.topic
        p = offsets_topic.partition_for(name, partition_count(self.replicas, topic))
        partition = local_leader(self.replicas, topic, p)
        if self._loaded.get(p) != partition.leader_epoch:
            raise LeaderNotAvailable(
                f"{topic}-{p} is being loaded by its new leader (the coordinator of group "
                f"{name!r}); retry shortly"
            )
        return partition

    def append(self, group: str, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Append to the group's partition (`durable` waits for its replicas). With fewer
        in-sync replicas than the topic's min.insync.replicas nothing is appended
        (NotEnoughReplicas), as Kafka's coordinators append with acks=all: a change refused
        then is not on the leader's log for a new coordinator to find."""
        partition = self.coordinator(group)
        limit = partition.config.max_message_bytes
        info = partition.append(offsets_topic.encode(records, limit), Acks.ALL)
        self._written[group] = (partition, info.last_offset)

    async def durable(self, name: str, timeout_ms: int) -> None:
        """Wait until the group's last write is on every in-sync replica of its
        partition (Kafka's offsets.commit.required.acks=-1), so that a new coordinator
        replays it: a commit or a join is answered only then."""
        written = self._written.pop(name, None)
        if written is not None:
            partition, last_offset = written
            await self.replicas.wait_committed(partition, last_offset, timeout_ms)

    def close(self) -> None:
        """Shutting down: the replays under way stop."""
        for load in self._loads.values():
            load.cancel()


class OffsetsLog(CoordinatorLog[StoredGroup]):
    """The consumer groups' `__consumer_offsets` partitions led here."""

    def __init__(
        self,
        replicas: ReplicaManager,
        restore: Callable[[Mapping[str, StoredGroup]], None],
        replayed: Callable[[], None],
        unload: Callable[[int], None],
    ) -> None:
        super().__init__(
            replicas,
            restore,
            replayed,
            unload,
            offsets_topic.OFFSETS_TOPIC,
            offsets_topic.replay,
        )
