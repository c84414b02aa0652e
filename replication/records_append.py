"""A produce's appends, from built batches to its acknowledgement (Kafka's
`ReplicaManager.appendRecords`): each partition's leader found (here, or another node's URL),
acks=all's ISR check on every partition before any append, the appends of this loop turn
joined into one write per partition, the flush policy, the wait for the high watermark, and a
leader elsewhere given the batches once (again after a failover, if it never saw them).

The produce front only turns bodies into batches and picks partitions; what happens to a
request once its batches exist is decided here, once."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from dataclasses import dataclass

from engine.log import AppendInfo
from engine.producer_state import ProducerIdentity
from replication.acks import Acks
from replication.errors import LeaderNotAvailable, NodeUnreachable, NotLeader, PartiallyAppended
from replication.forward_client import ForwardClient, RemoteError
from replication.forwarded_appends import ForwardedAppends
from replication.metadata import ClusterView
from replication.partition import Partition
from replication.replica_manager import ReplicaManager, refuse_internal

Landed = dict[int, tuple[int, int]]  # partition -> (base offset, record count)
LandedThen = Callable[[Partition, "asyncio.Future[AppendInfo]"], None]


@dataclass
class PartitionBatch:
    """What one partition receives: encoded batches and their record count."""

    partition: int
    data: bytearray
    count: int


class RecordsAppender:
    """Appends a produce's batches on their leaders and honours its acks: a client's way in."""

    def __init__(self, replicas: ReplicaManager, forwarder: ForwardClient) -> None:
        self.replicas = replicas
        self.forwarder = forwarder
        self.forwarded = ForwardedAppends(forwarder)

    def append_now(
        self, topic: str, item: PartitionBatch, acks: Acks, then: LandedThen
    ) -> asyncio.Future[AppendInfo] | None:
        """The common produce's append, joining this loop turn's write without a coroutine:
        a partition led here. Its landing, which `then` gets with the leader in the write's own
        pass (`AppendGroups.append`; `replicas.acknowledge` follows when the landing's
        `flush_due`, or for acks=all unless `replicas.committed` already holds); None for any
        other, which `append_records` takes."""
        refuse_internal(topic)
        leader = self.replicas.leading(topic, item.partition)
        if leader is None:
            return None
        return self.replicas.appends.append(
            leader, item.data, acks, functools.partial(then, leader)
        )

    async def append_records(
        self,
        topic: str,
        batches: list[PartitionBatch],
        acks: Acks,
        timeout_ms: int,
        landed: Landed,
        *,
        may_forward: bool = True,
        joinable: bool = True,
        producer: ProducerIdentity | None = None,
    ) -> None:
        """Append every partition's batches in this loop turn's writes, then honour acks.

        Each partition's (base offset, count) goes into `landed` as soon as it is appended, so
        an idempotent retry after a failure part-way never appends a partition twice.
        `may_forward`: a partition led elsewhere goes to its leader (else NotLeader);
        `joinable`: forwarded batches may share an internal append with this turn's others
        (not an idempotent request's, whose marker the leader answers a retry by, nor a
        transaction's); `producer`: the batches are written inside its transaction, its epoch
        checked by each leader.
        """
        refuse_internal(topic)
        replicas = self.replicas
        local: list[tuple[PartitionBatch, Partition]] = []
        remote: list[tuple[PartitionBatch, str]] = []
        for item in batches:
            try:
                leader = replicas.leading(topic, item.partition)
                if leader is None:
                    leader = await replicas.leader(topic, item.partition)
                local.append((item, leader))
            except NotLeader as exc:
                # The batches are built: each goes to its leader as it is (the leader need not
                # parse the body again), once.
                node = replicas.store.view.nodes.get(-1 if exc.leader is None else exc.leader)
                if node is None or not may_forward:
                    raise
                remote.append((item, node.url))
        if acks is Acks.ALL:
            # Every partition's ISR first: a refused request appends nothing anywhere.
            for _, leader in local:
                leader.check_enough_replicas()
            for item, _ in remote:
                replicas.check_enough_replicas(topic, item.partition)
        if len(local) == 1 and not remote:
            # The common case, without gather's tasks: one partition, led here.
            item, leader = local[0]
            info = await replicas.appends.append(leader, item.data, acks, producer=producer)
            landed[item.partition] = (info.first_offset, item.count)
            if info.flush_due or acks is Acks.ALL:
                await replicas.acknowledge(leader, info, acks, timeout_ms)
            return
        # Every local partition's append joins this loop turn's write before any is awaited.
        appending = [
            replicas.appends.append(leader, i.data, acks, producer=producer) for i, leader in local
        ]
        landings = await asyncio.gather(*appending, return_exceptions=True)
        failed: list[tuple[int, BaseException]] = []
        acknowledging: list[tuple[Partition, AppendInfo]] = []
        for (item, leader), landing in zip(local, landings, strict=True):
            if isinstance(landing, BaseException):
                failed.append((item.partition, landing))
                continue
            landed[item.partition] = (landing.first_offset, item.count)
            acknowledging.append((leader, landing))
        partitions = [leader.partition for leader, _ in acknowledging] + [
            item.partition for item, _ in remote
        ]
        outcomes = await asyncio.gather(
            *(replicas.acknowledge(p, info, acks, timeout_ms) for p, info in acknowledging),
            *(
                self._forward(topic, item, url, acks, timeout_ms, landed, joinable, producer)
                for item, url in remote
            ),
            return_exceptions=True,
        )
        failed += [(p, o) for p, o in zip(partitions, outcomes, strict=True) if o is not None]
        _raise_failures(failed, landed)

    async def append_transactional(
        self,
        topic: str,
        batches: list[PartitionBatch],
        acks: Acks,
        timeout_ms: int,
        landed: Landed,
        producer: ProducerIdentity,
    ) -> None:
        """`append_records` inside `producer`'s transaction: each partition's batches on its
        leader, here (in this loop turn's write) or forwarded once; the leaders check the
        producer's epoch."""
        await self.append_records(
            topic, batches, acks, timeout_ms, landed, joinable=False, producer=producer
        )

    async def _forward(
        self,
        topic: str,
        item: PartitionBatch,
        url: str,
        acks: Acks,
        timeout_ms: int,
        landed: Landed,
        joinable: bool,
        producer: ProducerIdentity | None,
    ) -> None:
        try:
            if joinable:
                base = await self.forwarded.append(
                    url, topic, item.partition, item.data, item.count, acks, timeout_ms
                )
            else:
                base = await self.forwarder.produce_batches(
                    url, topic, item.partition, item.data, acks, timeout_ms, producer
                )
        except NodeUnreachable as exc:
            if exc.delivered:
                raise
            # The leader is down and never saw the batches: once the cluster has another
            # leader (bounded wait), append there instead.
            leader = await self._next_leader(topic, item.partition, url)
            if isinstance(leader, str):
                base = await self.forwarder.produce_batches(
                    leader, topic, item.partition, item.data, acks, timeout_ms, producer
                )
            else:
                info = await self.replicas.appends.append(
                    leader, item.data, acks, producer=producer
                )
                # Recorded before the acks: if they fail, the answer must still say that
                # this partition has the records.
                landed[item.partition] = (info.first_offset, item.count)
                await self.replicas.acknowledge(leader, info, acks, timeout_ms)
                return
        landed[item.partition] = (base, item.count)

    async def _next_leader(self, topic: str, partition: int, dead_url: str) -> Partition | str:
        """The partition's leader once it is no longer the node at `dead_url`: this node's
        replica, or another node's URL. LeaderNotAvailable if none comes in time."""
        store = self.replicas.store

        def moved(view: ClusterView) -> bool:
            state = view.partition(topic, partition)
            if state is None or state.leader not in view.live:
                return False
            node = view.nodes.get(state.leader)
            return node is not None and node.url != dead_url

        if not await store.wait_for(moved, self.replicas.settings.leader_wait_ms / 1000):
            raise LeaderNotAvailable(f"{topic}-{partition}: its leader is down; retry shortly")
        try:
            return await self.replicas.leader(topic, partition)
        except NotLeader as exc:
            node = store.view.nodes.get(-1 if exc.leader is None else exc.leader)
            if node is None:
                raise
            return node.url


def _raise_failures(failed: list[tuple[int, BaseException]], landed: Landed) -> None:
    """What a produce's failed partitions mean for its client, if any failed: a possible
    append elsewhere first (the answer must not be a refusal), then a refusal that must not
    hide the partitions holding records."""
    if not failed:
        return
    unknown = [o for p, o in failed if p not in landed and _may_have_appended(o)]
    if unknown:
        raise unknown[0]
    refused = [p for p, _ in failed if p not in landed]
    if refused and landed:
        raise PartiallyAppended(dict(landed), refused, failed[0][1])
    raise failed[0][1]


# What a leader elsewhere answers when it appended nothing, besides a 4xx.
_REMOTE_REFUSALS = frozenset({"NOT_ENOUGH_REPLICAS", "LEADER_NOT_AVAILABLE"})


def _may_have_appended(failure: BaseException) -> bool:
    """Whether a partition's batch may be in another node's log although its forward failed:
    that node went silent after the batch reached it, or answered short of a refusal (timed
    out waiting for acks, the ISR shrank after the append, a fault)."""
    if isinstance(failure, NodeUnreachable):
        return failure.delivered
    if isinstance(failure, RemoteError):
        return failure.status >= 500 and failure.code not in _REMOTE_REFUSALS
    return False
