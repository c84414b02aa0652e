"""A transaction's COMMIT or ABORT markers, written on each partition it touched wherever that
partition is led now (Kafka's TransactionMarkerChannelManager): here through the replica
manager, elsewhere through the leader's internal markers route."""

from __future__ import annotations

from engine.producer_state import ProducerIdentity
from replication.errors import LeaderNotAvailable, NotLeader
from replication.forward_client import ForwardClient
from replication.replica_manager import ReplicaManager

MARKER_TIMEOUT_MS = 10_000  # a marker's wait for the partition's in-sync replicas


class MarkerWriter:
    """Writes markers on partitions led here or on another node."""

    def __init__(self, replicas: ReplicaManager, forwarder: ForwardClient) -> None:
        self.replicas = replicas
        self.forwarder = forwarder

    async def write(
        self,
        topic: str,
        partition: int,
        producer: ProducerIdentity,
        commit: bool,
        coordinator_epoch: int,
    ) -> None:
        """Write the marker and wait until every in-sync replica has it; raises when it could
        not (the coordinator retries: a marker already written is not written twice)."""
        try:
            await self.replicas.write_marker(
                topic, partition, producer, commit, coordinator_epoch, MARKER_TIMEOUT_MS
            )
            return
        except NotLeader as exc:
            node = self.replicas.store.view.nodes.get(-1 if exc.leader is None else exc.leader)
            if node is None:
                raise LeaderNotAvailable(f"{topic}-{partition} has no leader now") from exc
        await self.forwarder.write_marker(
            node.url, topic, partition, producer, commit, coordinator_epoch, MARKER_TIMEOUT_MS
        )
