"""ISR changes of one loop turn stored together (replication.isr_writes), each still a
compare-and-set on its own version."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

from replication.isr_writes import IsrWrites
from replication.memory_store import MemoryMetadataStore
from replication.metadata import (
    MAX_PARTITIONS_PER_WRITE,
    Fence,
    NodeInfo,
    PartitionState,
    TopicPartition,
    TopicSpec,
)

PARTITIONS = 100


async def started() -> MemoryMetadataStore:
    store = MemoryMetadataStore()
    await store.start(NodeInfo(0, "http://node0:8080"))
    fence = await store.campaign()
    spec = TopicSpec("t", "t" * 32, PARTITIONS, 2, {})
    await store.create_topic(fence, spec, [PartitionState(0, 0, (0, 1), (0,))] * PARTITIONS)
    return store


async def test_one_turns_changes_go_in_batches() -> None:
    store = await started()
    batches: list[int] = []
    set_partitions = store.set_partitions

    async def counted(
        states: Sequence[tuple[TopicPartition, PartitionState]],
        fence: Fence | None = None,
        incarnations: Sequence[Mapping[int, int]] = (),
        recovered: Collection[TopicPartition] = (),
    ) -> list[PartitionState] | None:
        batches.append(len(states))
        return await set_partitions(states, fence, incarnations, recovered)

    store.set_partitions = counted  # type: ignore[method-assign]  # counts the store's writes
    writes = IsrWrites(store)
    view = store.view
    changes = [
        writes.write(key, replace(state, isr=(0, 1)), {}) for key, state in view.partitions.items()
    ]
    stored = await asyncio.gather(*changes)
    assert batches == [MAX_PARTITIONS_PER_WRITE, PARTITIONS - MAX_PARTITIONS_PER_WRITE]
    assert all(s is not None and s.isr == (0, 1) for s in stored)
    assert all(state.isr == (0, 1) for state in store.view.partitions.values())
    await store.close()


async def test_a_change_that_lost_its_race_fails_alone() -> None:
    store = await started()
    writes = IsrWrites(store)
    view = store.view
    stale = view.partitions[("t", 3)]
    assert await store.set_partition("t", 3, replace(stale, isr=(0, 1))) is not None
    changes = [
        writes.write(("t", p), replace(view.partitions[("t", p)], isr=(0, 1)), {}) for p in range(5)
    ]
    stored = await asyncio.gather(*changes)
    assert [s is None for s in stored] == [False, False, False, True, False]
    await store.close()


async def test_a_change_keeping_a_restarted_member_fails_alone() -> None:
    """KIP-903 in a batch: the change whose guard names an incarnation of node 1 that is no
    longer current fails; the others are stored."""
    store = await started()
    writes = IsrWrites(store)
    view = store.view
    stale = {1: view.registered.get(1, 0) + 1}
    changes = [
        writes.write(
            ("t", p), replace(view.partitions[("t", p)], isr=(0, 1)), stale if p == 2 else {}
        )
        for p in range(4)
    ]
    stored = await asyncio.gather(*changes)
    assert [s is None for s in stored] == [False, False, True, False]
    await store.close()
