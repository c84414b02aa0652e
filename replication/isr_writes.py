"""ISR changes written together (Kafka's AlterPartition carries many partitions): the changes
a node's leaders decide in one event-loop turn go to the store in transactions of up to
MAX_PARTITIONS_PER_WRITE instead of one each. A node back from a restart rejoins the ISR of
thousands of partitions at once; one transaction each kept etcd busy enough, on this shared
machine, for lease keepalives to time out (docs/PERFORMANCE.md "Cluster scale").

Each change stays a compare-and-set on its own version: a batch is all or none, and one that
fails is written again change by change, so only the changes that lost their race fail.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from replication.metadata import (
    MAX_PARTITIONS_PER_WRITE,
    MetadataStore,
    PartitionState,
    TopicPartition,
)

Pending = list[
    tuple[
        TopicPartition,
        PartitionState,
        Mapping[int, int],
        "asyncio.Future[PartitionState | None]",
    ]
]


class IsrWrites:
    """Collects the ISR changes of the current loop turn and stores them in batches."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self._pending: Pending = []
        self._writing: set[asyncio.Task[None]] = set()

    def write(
        self, key: TopicPartition, state: PartitionState, incarnations: Mapping[int, int]
    ) -> asyncio.Future[PartitionState | None]:
        """The stored state (None if its version moved meanwhile, or a member of
        `incarnations` restarted: MetadataStore.set_partition), once this turn's changes
        are written; the store's error if the write failed."""
        loop = asyncio.get_running_loop()
        if not self._pending:
            loop.call_soon(self._flush)
        done: asyncio.Future[PartitionState | None] = loop.create_future()
        self._pending.append((key, state, incarnations, done))
        return done

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        for first in range(0, len(pending), MAX_PARTITIONS_PER_WRITE):
            task = asyncio.create_task(
                self._store(pending[first : first + MAX_PARTITIONS_PER_WRITE])
            )
            self._writing.add(task)
            task.add_done_callback(self._writing.discard)

    async def _store(self, batch: Pending) -> None:
        try:
            states = [(key, state) for key, state, _, _ in batch]
            stored = await self.store.set_partitions(states, None, [g for _, _, g, _ in batch])
            outcomes: list[PartitionState | BaseException | None]
            if stored is not None:
                outcomes = list(stored)
            elif len(batch) == 1:
                outcomes = [None]
            else:
                outcomes = list(
                    await asyncio.gather(
                        *(
                            self.store.set_partition(*key, state, incarnations=guard)
                            for key, state, guard, _ in batch
                        ),
                        return_exceptions=True,
                    )
                )
        except Exception as exc:
            outcomes = [exc] * len(batch)
        for (_, _, _, done), outcome in zip(batch, outcomes, strict=True):
            if done.cancelled():
                continue
            if isinstance(outcome, BaseException):
                done.set_exception(outcome)
            else:
                done.set_result(outcome)
