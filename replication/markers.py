"""A transaction's COMMIT or ABORT markers, written on each partition it touched wherever that
partition is led now (Kafka's TransactionMarkerChannelManager): here through the replica
manager, elsewhere through the leader's internal markers route."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence

from engine.log import AppendInfo
from engine.offsets_topic import TopicPartition
from engine.producer_state import EndMarker, ProducerIdentity
from replication.errors import LeaderNotAvailable, NotLeader
from replication.forward_client import ForwardClient
from replication.partition import Partition
from replication.replica_manager import ReplicaManager, marked_through

MARKER_TIMEOUT_MS = 10_000  # a marker's wait for the partition's in-sync replicas


class MarkerWriter:
    """Writes markers on partitions led here or on another node."""

    def __init__(self, replicas: ReplicaManager, forwarder: ForwardClient) -> None:
        self.replicas = replicas
        self.forwarder = forwarder

    async def write_all(
        self,
        partitions: Sequence[TopicPartition],
        producer: ProducerIdentity,
        commit: bool,
        coordinator_epoch: int,
    ) -> dict[TopicPartition, Exception]:
        """Write the marker on every partition and wait until their in-sync replicas have
        them: those led here in this loop turn's writes to them (with the produces that
        arrive meanwhile), without a task each, the others concurrently. The
        partitions whose marker could not be written, with why (the coordinator retries them:
        a marker already written is not written twice)."""
        failed: dict[TopicPartition, Exception] = {}
        marking: list[tuple[TopicPartition, Partition, asyncio.Future[AppendInfo | None]]] = []
        elsewhere: list[TopicPartition] = []
        end = EndMarker(producer.producer_id, producer.epoch, commit, coordinator_epoch)
        for topic, partition in partitions:
            leader = self.replicas.leading(topic, partition)
            if leader is None:
                elsewhere.append((topic, partition))
            else:
                marking.append(
                    ((topic, partition), leader, self.replicas.appends.mark(leader, end))
                )
        waits: list[tuple[TopicPartition, Awaitable[None]]] = []
        for where, leader, marked in marking:
            try:
                last = marked_through(leader, await marked)
            except Exception as exc:
                failed[where] = exc
                continue
            if not self.replicas.committed(leader, last):
                waits.append((where, self.replicas.wait_committed(leader, last, MARKER_TIMEOUT_MS)))
        waits += [
            ((topic, partition), self.write(topic, partition, producer, commit, coordinator_epoch))
            for topic, partition in elsewhere
        ]
        if waits:
            outcomes = await asyncio.gather(*(wait for _, wait in waits), return_exceptions=True)
            for (where, _), outcome in zip(waits, outcomes, strict=True):
                if isinstance(outcome, Exception):
                    failed[where] = outcome
                elif isinstance(outcome, BaseException):
                    raise outcome
        return failed

    async def write(
        self,
        topic: str,
        partition: int,
        producer: ProducerIdentity,
        commit: bool,
        coordinator_epoch: int,
    ) -> None:
        """Write the marker and wait until every in-sync replica has it; raises when it could
        not."""
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
