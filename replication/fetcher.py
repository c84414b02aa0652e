"""Follower fetching: one task per partition this node follows.

On every role change the follower first truncates its log where it diverges from the new
leader's (KIP-279: it asks the leader where its latest epoch ends, repeating with older epochs
until they agree; never to its own high watermark, the KIP-101 bug). Then it long-polls the
leader from its log end offset, appends the batches as they are (offsets and epochs kept) and
takes the leader's high watermark and log start from each answer. Its fetch offset is how the
leader learns its progress.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from engine.errors import KafkaStorageError, OffsetMismatch, OffsetOutOfRange
from replication.errors import (
    FencedLeaderEpoch,
    NotLeader,
    ReplicationError,
)
from replication.metadata import NO_LEADER, MetadataStore, PartitionState, TopicPartition
from replication.partition import Partition
from replication.replica_client import ReplicaClient
from replication.replica_state import Truncate, truncation_request, truncation_step

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FetcherSettings:
    max_bytes: int = 1024 * 1024  # replica.fetch.max.bytes
    # How long a follower's fetch parks at an idle leader. The leader answers at once when
    # records arrive, and a caught-up follower never counts as lagging, so a long wait costs
    # nothing but saves idle round trips (one partition per request: with 500 ms, a node
    # following 33 partitions spent 6% of a core doing nothing). Its high watermark may lag
    # the leader's by up to this long while nothing is produced.
    wait_ms: int = 5_000
    backoff_ms: int = 100  # replica.fetch.backoff.ms; doubles up to max_backoff_ms
    max_backoff_ms: int = 1_000


class ReplicaFetchers:
    """Starts, restarts and stops the follower task of each partition as its role changes."""

    def __init__(
        self,
        store: MetadataStore,
        client: ReplicaClient,
        node_id: int,
        settings: FetcherSettings | None = None,
    ) -> None:
        self.store = store
        self.client = client
        self.node_id = node_id
        self.settings = settings or FetcherSettings()
        self._tasks: dict[TopicPartition, asyncio.Task[None]] = {}

    async def role_changed(self, partition: Partition) -> None:
        """Follow the partition's new leader, or stop following it. An offline log (a storage
        failure) follows nobody: it would take nothing until the node restarts."""
        key = (partition.topic, partition.partition)
        old = self._tasks.pop(key, None)
        if old is not None:
            old.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await old
        state = partition.state
        if (
            partition.is_leader
            or partition.log.offline
            or state is None
            or state.leader in (NO_LEADER, self.node_id)
        ):
            return
        self._tasks[key] = asyncio.create_task(self._follow(partition, state))

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- one partition -------------------------------------------------------------------------

    def _leader_url(self, state: PartitionState) -> str | None:
        node = self.store.view.nodes.get(state.leader)
        return None if node is None else node.url

    async def _follow(self, partition: Partition, state: PartitionState) -> None:
        """Follow until the role changes; a log a storage failure took offline stops here (it
        takes nothing more until the node restarts)."""
        try:
            await self._follow_leader(partition, state)
        except KafkaStorageError as exc:
            log.error(
                "%s-%d stops following node %d: %s",
                partition.topic,
                partition.partition,
                state.leader,
                exc,
            )

    async def _follow_leader(self, partition: Partition, state: PartitionState) -> None:
        name = f"{partition.topic}-{partition.partition}"
        backoff = self.settings.backoff_ms
        truncated = False
        while partition.leader_epoch == state.leader_epoch and not partition.is_leader:
            url = self._leader_url(state)
            try:
                if url is None:
                    raise ReplicationError(f"node {state.leader} has no known URL")
                if not truncated:
                    await self._truncate(partition, state, url)
                    truncated = True
                await self._fetch_once(partition, state, url)
                backoff = self.settings.backoff_ms
            except OffsetOutOfRange as exc:
                if partition.log_end_offset < exc.log_start_offset:
                    log.info("%s: below the leader's log start %d", name, exc.log_start_offset)
                    partition.restart_at(exc.log_start_offset)
                else:
                    truncated = False
            except OffsetMismatch:
                truncated = False
            except (FencedLeaderEpoch, NotLeader):
                # The leader moved on: the view will bring the new state and restart this task.
                await self.store.wait_for(
                    lambda v: v.partition(partition.topic, partition.partition) != state,
                    self.settings.max_backoff_ms / 1000,
                )
            except ReplicationError as exc:
                log.debug("%s: fetch from node %d failed: %s", name, state.leader, exc)
                await asyncio.sleep(backoff / 1000)
                backoff = min(backoff * 2, self.settings.max_backoff_ms)

    async def _truncate(self, partition: Partition, state: PartitionState, url: str) -> None:
        """KIP-279: cut the local log where it stops agreeing with the leader's."""
        entries = partition.epoch_entries()
        asked = truncation_request(entries)
        while True:
            epoch, end = await self.client.epoch_end(
                url,
                partition.topic,
                partition.partition,
                leader_epoch=state.leader_epoch,
                epoch=asked,
            )
            step = truncation_step(entries, partition.log_end_offset, asked, epoch, end)
            if isinstance(step, Truncate):
                if step.offset < partition.log_end_offset:
                    log.info(
                        "%s-%d: truncating to %d (leader %d, epoch %d)",
                        partition.topic,
                        partition.partition,
                        step.offset,
                        state.leader,
                        state.leader_epoch,
                    )
                partition.truncate_to(step.offset)
                return
            asked = step.epoch

    async def _fetch_once(self, partition: Partition, state: PartitionState, url: str) -> None:
        answer = await self.client.fetch(
            url,
            partition.topic,
            partition.partition,
            replica=self.node_id,
            leader_epoch=state.leader_epoch,
            offset=partition.log_end_offset,
            max_bytes=self.settings.max_bytes,
            timeout_ms=self.settings.wait_ms,
        )
        if partition.leader_epoch != state.leader_epoch:
            return  # the role changed while the fetch was out: drop what it brought
        partition.append_from_leader(answer.data, answer.high_watermark, answer.log_start_offset)
