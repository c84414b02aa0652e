"""This node's log ends for the partitions that wait, leaderless, for their crashed ISR members
(KIP-966's balanced recovery): the controller elects the member with the longest log once each
has reported. After a power cut thousands of partitions may wait at once, so the reports go to
the store in transactions of up to MAX_PARTITIONS_PER_WRITE, from one background task.

Each report is guarded by the version of the partition's state that asked for it: one whose
state moved meanwhile fails, and is written again when the view shows the newer state.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from replication.errors import MetadataUnavailable
from replication.metadata import MAX_PARTITIONS_PER_WRITE, LogEnd, MetadataStore, TopicPartition

log = logging.getLogger(__name__)

RETRY_S = 0.1  # the first pause before reporting again while the store is unavailable; doubles
RETRY_MAX_S = 2.0

Report = tuple[TopicPartition, int, LogEnd]  # (partition, version of its state, log end)


class LogEndReports:
    """Keeps the store's reports of this node in step with the partitions that wait for them."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self._due: dict[TopicPartition, tuple[int, LogEnd]] = {}
        self._stored: dict[TopicPartition, LogEnd] = {}  # what this process reported
        self._changed = asyncio.Event()

    def update(self, due: Mapping[TopicPartition, tuple[int, LogEnd]]) -> None:
        """The partitions that wait for this node's report now, each with the version of the
        state that asks for it and this replica's log end."""
        self._due = dict(due)
        self._stored = {key: end for key, end in self._stored.items() if key in self._due}
        self._changed.set()

    async def run(self) -> None:
        """Report what is due whenever it changes, retrying with backoff while the store is
        unavailable; until cancelled."""
        backoff = RETRY_S
        while True:
            await self._changed.wait()
            self._changed.clear()
            due = [
                (key, version, end)
                for key, (version, end) in self._due.items()
                if self._stored.get(key) != end
            ]
            try:
                for first in range(0, len(due), MAX_PARTITIONS_PER_WRITE):
                    await self._report(due[first : first + MAX_PARTITIONS_PER_WRITE])
            except MetadataUnavailable as exc:
                if backoff == RETRY_S:
                    log.warning("cannot report this node's log ends yet: %s", exc)
                self._changed.set()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, RETRY_MAX_S)
            else:
                backoff = RETRY_S

    async def _report(self, batch: list[Report]) -> None:
        """Store the batch at once; if a state moved meanwhile, one report at a time (those
        whose state moved wait for the view that shows it)."""
        if await self.store.report_log_ends(batch):
            stored = batch
        elif len(batch) == 1:
            stored = []
        else:
            stored = [report for report in batch if await self.store.report_log_ends([report])]
        self._stored.update((key, end) for key, _, end in stored if key in self._due)
