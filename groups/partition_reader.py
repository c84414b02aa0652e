"""Committed records of any partition of the cluster, read wherever it is led: here (the
partition layer's long-poll, tiered offsets included), from a sibling worker's files, or from
its leader over the node-to-node routes, at either isolation level. What a reader that is not
a group member needs: a Server-Sent Events stream, the push subscriptions, the share groups."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from engine.errors import OffsetOutOfRange
from engine.producer_state import Isolation
from groups import remote
from replication.errors import LeaderNotAvailable, NotLeader
from replication.fetch_limits import latest_offset
from replication.forward_client import ForwardClient
from replication.metadata import NO_LEADER
from replication.replica_manager import ReplicaManager

# The leader of a partition moved while a read was on its way: try the new one this often.
LEADER_MOVES = 3


@dataclass(frozen=True, slots=True)
class PartitionRead:
    """Whole batches read at `position` (the first may begin below it), and the leader's
    high watermark then."""

    position: int
    data: memoryview
    high_watermark: int


class PartitionReader:
    """Reads committed batches of any partition, long-polling where it is led."""

    def __init__(self, replicas: ReplicaManager, forwarder: ForwardClient) -> None:
        self.replicas = replicas
        self.forwarder = forwarder

    async def read(
        self,
        topic: str,
        partition: int,
        position: int,
        max_bytes: int,
        timeout_ms: int,
        counted: bool = True,
        isolation: Isolation = Isolation.READ_UNCOMMITTED,
    ) -> PartitionRead:
        """Batches from `position`, waiting up to `timeout_ms` for the first one; raises
        OffsetOutOfRange with the leader's bounds, LeaderNotAvailable while none leads.
        `counted` False: the server's own follower, not among the parked fetches here.
        `isolation` read_committed: below the last stable offset, aborted batches emptied."""
        for _ in range(LEADER_MOVES):
            url = self._leader_url(topic, partition)
            if url is None:
                try:
                    got = await self.replicas.fetch(
                        topic, partition, position, max_bytes, 1, timeout_ms,
                        counted=counted, isolation=isolation,
                    )  # fmt: skip
                except NotLeader:
                    continue
                return PartitionRead(position, got.data, got.high_watermark)
            if isolation is not Isolation.READ_COMMITTED:  # the LSO is the leader's to know
                beside = self.replicas.fetch_from_sibling(
                    topic, partition, position, max_bytes, 1, timeout_ms
                )
                if beside is not None:
                    return PartitionRead(position, beside[1].data, beside[1].high_watermark)
            found = await remote.fetch(
                self.forwarder, url, topic, partition, position, max_bytes, timeout_ms, isolation
            )
            return PartitionRead(position, found.data, found.high_watermark)
        raise LeaderNotAvailable(f"the leader of {topic}-{partition} keeps moving; retry shortly")

    async def offset(
        self,
        topic: str,
        partition: int,
        at: Literal["earliest", "latest"] | int,
        isolation: Isolation = Isolation.READ_UNCOMMITTED,
    ) -> int:
        """The partition's log start (`earliest`), its latest offset for a reader at
        `isolation` (`latest`: the last stable offset at read_committed, else the high
        watermark), or the first offset at or after a timestamp in ms below that (that latest
        offset if none is)."""
        for _ in range(LEADER_MOVES):
            url = self._leader_url(topic, partition)
            if url is not None:
                return await remote.offset(self.forwarder, url, topic, partition, at, isolation)
            try:
                leader = await self.replicas.leader(topic, partition)
            except NotLeader:
                continue
            if at == "earliest":
                return leader.log_start_offset
            if at == "latest":
                return latest_offset(leader, isolation)
            found = await self.replicas.offset_for_timestamp(leader, at)
            latest = latest_offset(leader, isolation)
            return latest if found is None or found[0] >= latest else found[0]
        raise LeaderNotAvailable(f"the leader of {topic}-{partition} keeps moving; retry shortly")

    def _leader_url(self, topic: str, partition: int) -> str | None:
        """The URL of the node that leads the partition; None when this node does."""
        replicas = self.replicas
        state = replicas.state(topic, partition)
        if state.leader == replicas.node_id:
            return None
        if state.leader == NO_LEADER:
            raise LeaderNotAvailable(f"{topic}-{partition} has no leader; retry shortly")
        node = replicas.store.view.nodes.get(state.leader)
        if node is None:
            raise LeaderNotAvailable(f"the leader of {topic}-{partition} is not known yet")
        return node.url


def out_of_range_start(exc: OffsetOutOfRange) -> int:
    """Where a reader whose position fell out of the log goes on: the log start when it fell
    below it (retention deleted what it had not read), the log end when it is past it."""
    return exc.log_start_offset if exc.offset < exc.log_start_offset else exc.log_end_offset
