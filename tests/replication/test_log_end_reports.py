"""A node's log ends for the partitions that wait for them (replication.log_end_reports): in
batches, each guarded by its state's version; one whose state moved is reported again once the
view shows the newer state, and a store outage is retried."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace

from replication.errors import MetadataUnavailable
from replication.log_end_reports import LogEndReports
from replication.memory_store import MemoryMetadataStore
from replication.metadata import (
    MAX_PARTITIONS_PER_WRITE,
    NO_LEADER,
    LogEnd,
    NodeInfo,
    PartitionState,
    TopicPartition,
    TopicSpec,
)

PARTITIONS = 100
TIMEOUT = 5.0


class CountingStore(MemoryMetadataStore):
    """Counts its report writes; the first `outages` of them fail as etcd down would."""

    def __init__(self, outages: int = 0) -> None:
        super().__init__()
        self.batches: list[int] = []
        self.outages = outages

    async def report_log_ends(self, reports: Sequence[tuple[TopicPartition, int, LogEnd]]) -> bool:
        if self.outages:
            self.outages -= 1
            raise MetadataUnavailable("etcd is down")
        self.batches.append(len(reports))
        return await super().report_log_ends(reports)


async def recovering(store: CountingStore) -> dict[TopicPartition, tuple[int, LogEnd]]:
    """Every partition of topic t waits for node 0's report: what is due, by partition."""
    await store.start(NodeInfo(0, "http://node0:8080"), clean_start=False)
    fence = await store.campaign()
    waiting = PartitionState(NO_LEADER, 1, (0, 1), (0, 1), recovering=(0, 1))
    await store.create_topic(
        fence, TopicSpec("t", "t" * 32, PARTITIONS, 2, {}), [waiting] * PARTITIONS
    )
    return {
        key: (state.version, LogEnd(0, key[1], store.registration))
        for key, state in store.view.partitions.items()
    }


async def reported(store: CountingStore, count: int) -> None:
    assert await store.wait_for(lambda view: len(view.log_ends) == count, TIMEOUT)


async def test_reports_go_in_batches_and_each_once() -> None:
    store = CountingStore()
    due = await recovering(store)
    reports = LogEndReports(store)
    task = asyncio.create_task(reports.run())
    try:
        reports.update(due)
        await reported(store, PARTITIONS)
        assert store.batches == [MAX_PARTITIONS_PER_WRITE, PARTITIONS - MAX_PARTITIONS_PER_WRITE]
        assert store.view.reported_log_ends("t", 7) == {0: due[("t", 7)][1]}
        version, end = due[("t", 7)]
        longer = replace(end, end_offset=999)
        reports.update({**due, ("t", 7): (version, longer)})  # only partition 7's is new
        assert await store.wait_for(
            lambda view: view.reported_log_ends("t", 7) == {0: longer}, TIMEOUT
        )
        assert store.batches == [MAX_PARTITIONS_PER_WRITE, PARTITIONS - MAX_PARTITIONS_PER_WRITE, 1]
    finally:
        task.cancel()
        await store.close()


async def test_a_report_whose_state_moved_fails_alone_and_is_written_for_the_newer_state() -> None:
    store = CountingStore()
    due = await recovering(store)
    moved = store.view.partitions[("t", 3)]
    stored = await store.set_partition("t", 3, replace(moved, recovering=(1, 0)))
    assert stored is not None
    reports = LogEndReports(store)
    task = asyncio.create_task(reports.run())
    try:
        reports.update(due)
        await reported(store, PARTITIONS - 1)
        assert ("t", 3) not in store.view.log_ends
        reports.update({**due, ("t", 3): (stored.version, due[("t", 3)][1])})  # its next view
        await reported(store, PARTITIONS)
    finally:
        task.cancel()
        await store.close()


async def test_a_store_outage_is_retried() -> None:
    store = CountingStore(outages=2)
    due = await recovering(store)
    reports = LogEndReports(store)
    task = asyncio.create_task(reports.run())
    try:
        reports.update(due)
        await reported(store, PARTITIONS)
        assert store.outages == 0
    finally:
        task.cancel()
        await store.close()
