"""The transaction coordinator over a real single node: node 0 leads `__transaction_state-0`
(alone in its ISR unless a test adds node 1, which then exists only as the fetches the test
makes for it) and topics `t` (2 partitions) and `u`. Markers, offsets commits and generation
checks go to recording fakes of the injected collaborators, which can fail or hold calls."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from engine import batch as fmt
from engine.errors import UnknownPartition, UnknownTopic
from engine.manager import LogManager
from engine.notify import ChangeNotifier
from groups.errors import GroupError
from groups.transactions import state_topic
from groups.transactions.coordinator import TransactionCoordinator
from groups.transactions.errors import (
    ConcurrentTransactions,
    InvalidTxnState,
    NotTransactionOwner,
    ProducerFenced,
    TransactionTimedOut,
)
from groups.transactions.model import AbortCause, TransactionMetadata
from groups.transactions.model import TransactionState as S
from replication.errors import InternalTopicWrite, LeaderNotAvailable
from replication.memory_store import MemoryMetadataStore
from replication.metadata import Fence, NodeInfo, PartitionState, TopicSpec
from replication.partition import Partition
from replication.replica_manager import ReplicaManager
from tests.groups.conftest import until

STATE = state_topic.STATE_TOPIC
TID = "tx"
ME = "alice"
T0, T1, U0 = ("t", 0), ("t", 1), ("u", 0)


class Collaborator:
    """A fake of an injected callable: records every attempt, holds them while `gate` is
    clear, fails the next `failures` ones (or every one with `refusal`), records successes."""

    def __init__(self) -> None:
        self.attempts: list[tuple[Any, ...]] = []
        self.done: list[tuple[Any, ...]] = []
        self.failures = 0
        self.refusal: Exception | None = None
        self.gate = asyncio.Event()
        self.gate.set()

    async def __call__(self, *args: Any) -> None:
        self.attempts.append(args)
        await self.gate.wait()
        if self.refusal is not None:
            raise self.refusal
        if self.failures:
            self.failures -= 1
            raise LeaderNotAvailable("no leader yet")
        self.done.append(args)


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


@dataclass
class Node:
    store: MemoryMetadataStore
    fence: Fence
    replicas: ReplicaManager
    clock: Clock
    markers: Collaborator = field(default_factory=Collaborator)
    offsets: Collaborator = field(default_factory=Collaborator)
    generations: Collaborator = field(default_factory=Collaborator)
    marker_calls: list[list[tuple[str, int]]] = field(default_factory=list)  # write_markers' calls
    coordinator: TransactionCoordinator = field(init=False)

    @property
    def state(self) -> Partition:
        return self.replicas.partitions[(STATE, 0)]

    def make(self, **settings: Any) -> TransactionCoordinator:
        """A coordinator in place of the current one (closed)."""
        if hasattr(self, "coordinator"):
            self.coordinator.close()
        self.coordinator = TransactionCoordinator(
            self.replicas,
            self.write_markers,
            self.offsets,
            self.generations,
            settings.pop("write_timeout_ms", 5_000),
            retry_backoff_ms=1,
            retry_backoff_max_ms=2,
            clock=self.clock,
            **settings,
        )
        return self.coordinator

    async def write_markers(
        self, partitions: list[tuple[str, int]], *rest: Any
    ) -> dict[tuple[str, int], Exception]:
        """The coordinator's markers, one `markers` call a partition, all at once."""
        self.marker_calls.append(list(partitions))
        outcomes = await asyncio.gather(
            *(self.markers(topic, p, *rest) for topic, p in partitions), return_exceptions=True
        )
        return {
            where: outcome
            for where, outcome in zip(partitions, outcomes, strict=True)
            if isinstance(outcome, Exception)
        }

    async def fresh(self, **settings: Any) -> TransactionCoordinator:
        """A new coordinator, which replays the state partition as a node that comes to lead
        it does."""
        coordinator = self.make(**settings)
        await coordinator.role_changed(self.state)
        await coordinator.loaded()
        return coordinator

    async def with_follower(self) -> None:
        """Node 1 joins the state partition's ISR: a write is durable once it fetched it."""
        old = self.store.view.partitions[(STATE, 0)]
        new = PartitionState(0, old.leader_epoch + 1, (0, 1), (0, 1), old.version)
        assert await self.store.set_partition(STATE, 0, new, self.fence)
        assert await self.replicas.applied(lambda: self.state.isr == (0, 1), 10)

    def follower_fetched(self) -> None:
        self.state.replica_fetch(1, self.state.log_end_offset, self.state.leader_epoch, 0)

    def stored(self) -> list[tuple[Any, Any]]:
        """The state partition's records, keys and values decoded (committed or not)."""
        data = self.state.log.read(0, 1 << 22, upper_offset=self.state.log_end_offset).data
        return [
            (orjson.loads(bytes(r.key)), None if r.value is None else orjson.loads(bytes(r.value)))
            for r in fmt.iter_records(data)
            if r.key is not None
        ]

    def states_stored(self, tid: str = TID) -> list[str | None]:
        return [
            None if value is None else value["state"]
            for key, value in self.stored()
            if key == ["transaction", tid]
        ]


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    store = MemoryMetadataStore()
    await store.start(NodeInfo(0, "http://node0:8080"))
    fence = await store.campaign()
    # one replica: its min.insync.replicas no more than that, as the gateway makes it
    configs = {**state_topic.TOPIC_CONFIGS, "min.insync.replicas": 1}
    spec = TopicSpec(STATE, "a" * 32, 1, 1, configs)
    await store.create_topic(fence, spec, [PartitionState(0, 1, (0,), (0,))])
    for name, count in (("t", 2), ("u", 1)):
        topic = TopicSpec(name, name.encode().hex().ljust(32, "0")[:32], count, 1, {})
        await store.create_topic(fence, topic, [PartitionState(0, 1, (0,), (0,))] * count)
    manager = LogManager(tmp_path)
    replicas = ReplicaManager(manager, store, 0, ChangeNotifier())
    node = Node(store, fence, replicas, Clock())
    node.make()
    replicas.add_role_listener(lambda p: node.coordinator.role_changed(p))
    try:
        await replicas.start()
        await node.coordinator.loaded()
        yield node
    finally:
        node.coordinator.close()
        await replicas.close()
        await store.close()
        manager.close()


async def open_with(node: Node, *partitions: tuple[str, int]) -> TransactionMetadata:
    c = node.coordinator
    meta = await c.begin(TID, 60_000, ME)
    return await c.add_partitions(TID, meta.producer_epoch, partitions, ME)


async def begun_on_two_replicas(node: Node) -> int:
    """Node 1 in the state partition's ISR, and a transaction begun once it fetched the begin;
    its epoch."""
    await node.with_follower()
    began = asyncio.create_task(node.coordinator.begin(TID, 60_000, ME))
    await until(lambda: node.states_stored() == ["Ongoing"], "the begin's write")
    node.follower_fetched()
    return (await began).producer_epoch


async def test_a_begin_is_stored_and_described(node: Node) -> None:
    c = node.coordinator
    meta = await c.begin(TID, 60_000, ME)
    assert (meta.producer_id, meta.producer_epoch, meta.state) == (0, 0, S.ONGOING)
    assert (meta.principal, meta.started_ms) == (ME, node.clock.now)
    assert c.describe(TID) == meta
    assert c.list_transactions() == [meta]
    assert c.list_transactions([S.COMPLETE_COMMIT]) == []
    assert node.stored() == [
        (["producer_ids"], {"last": 0}),
        (["transaction", TID], meta.as_dict()),
    ]
    assert c.coordinates(TID)


async def test_a_change_is_answered_only_once_every_in_sync_replica_has_it(node: Node) -> None:
    await node.with_follower()
    c = node.coordinator
    begin = asyncio.create_task(c.begin(TID, 60_000, ME))
    await until(lambda: node.states_stored() == ["Ongoing"], "the begin's write")
    for _ in range(20):
        await asyncio.sleep(0)
    assert not begin.done()
    assert TID not in c.machine.transactions  # not in effect before it is durable
    node.follower_fetched()
    assert (await begin).state is S.ONGOING


async def test_concurrent_changes_of_an_id_are_made_one_after_the_other(node: Node) -> None:
    """Two adds in flight together: the second is decided on the first's outcome, so no
    partition is lost (and left without its marker)."""
    c = node.coordinator
    epoch = await begun_on_two_replicas(node)
    adds = [asyncio.create_task(c.add_partitions(TID, epoch, [tp], ME)) for tp in (T0, T1, U0)]

    def fetched_all() -> bool:
        node.follower_fetched()
        return all(a.done() for a in adds)

    await until(fetched_all, "the adds")
    assert c.describe(TID).partitions == {T0, T1, U0}


async def test_partitions_already_in_the_transaction_are_not_stored_again(node: Node) -> None:
    """Every produce of a transaction names its partitions: after the first, the add is
    answered at once, without a write to wait for on the in-sync replicas."""
    c = node.coordinator
    epoch = await begun_on_two_replicas(node)
    first = asyncio.create_task(c.add_partitions(TID, epoch, [T0, T1], ME))
    await until(lambda: len(node.states_stored()) == 2, "the first add's write")
    node.follower_fetched()
    added = await first
    # the follower fetches nothing more: a write would keep these waiting
    assert await c.add_partitions(TID, epoch, [T1, T0], ME) == added
    assert await c.add_partitions(TID, epoch, [T0], ME) == added
    assert c.added(TID, epoch, [T0], ME) == added  # at once, no coroutine
    assert c.added(TID, epoch, [T0, U0], ME) is None  # U0 is new: add_partitions stores it
    assert node.states_stored() == ["Ongoing", "Ongoing"]
    with pytest.raises(ProducerFenced):
        await c.add_partitions(TID, epoch + 1, [T0], ME)
    with pytest.raises(UnknownPartition):
        await c.add_partitions(TID, epoch, [T0, ("t", 9)], ME)


async def test_an_add_while_the_ids_change_is_stored_is_decided_on_its_outcome(
    node: Node,
) -> None:
    """Partitions already in the transaction are answered at once only while nothing of the
    id is being stored: during a commit's write an add waits for it, and is refused (the
    transaction no longer open), never answered from the state before the commit."""
    c = node.coordinator
    epoch = await begun_on_two_replicas(node)
    first = asyncio.create_task(c.add_partitions(TID, epoch, [T0], ME))
    await until(lambda: len(node.states_stored()) == 2, "the add's write")
    node.follower_fetched()
    await first
    commit = asyncio.create_task(c.commit(TID, epoch, ME))
    await until(lambda: "PrepareCommit" in node.states_stored(), "the commit's write")
    add = asyncio.create_task(c.add_partitions(TID, epoch, [T0], ME))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not add.done()  # behind the commit's write, which the follower has not fetched

    def fetched_all() -> bool:
        node.follower_fetched()
        return commit.done() and add.done()

    await until(fetched_all, "the commit and the add")
    with pytest.raises(InvalidTxnState):
        add.result()


async def test_a_commit_marks_every_partition_commits_the_offsets_and_completes(
    node: Node,
) -> None:
    c = node.coordinator
    meta = await open_with(node, T0, U0)
    epoch = meta.producer_epoch
    await c.add_offsets(TID, epoch, "g", "m1", 7, [("in", 0, 42, "md")], ME)
    assert node.generations.done == [("g", "m1", 7)]
    assert node.offsets.attempts == []  # only at commit
    done = await c.commit(TID, epoch, ME)
    assert done.state is S.COMPLETE_COMMIT
    coordinator_epoch = node.state.leader_epoch
    assert sorted(node.markers.done) == [
        ("t", 0, meta.producer_id, epoch, True, coordinator_epoch),
        ("u", 0, meta.producer_id, epoch, True, coordinator_epoch),
    ]
    assert node.offsets.done == [("g", "m1", 7, [("in", 0, 42, "md")])]
    assert node.states_stored() == [
        "Ongoing",
        "Ongoing",
        "Ongoing",
        "PrepareCommit",
        "CompleteCommit",
    ]
    # A retry of the commit is answered as the first, stored again, nothing written again.
    assert (await c.commit(TID, epoch, ME)).state is S.COMPLETE_COMMIT
    assert len(node.markers.done) == 2
    assert node.states_stored()[-1] == "CompleteCommit"
    with pytest.raises(InvalidTxnState):
        await c.abort(TID, epoch, ME)


async def test_an_abort_marks_every_partition_added_and_commits_no_offsets(node: Node) -> None:
    c = node.coordinator
    meta = await open_with(node, T0, T1)
    await c.add_offsets(TID, meta.producer_epoch, "g", "m1", 7, [("in", 0, 42, "")], ME)
    done = await c.abort(TID, meta.producer_epoch, ME)
    assert done.state is S.COMPLETE_ABORT
    assert sorted(m[:5] for m in node.markers.done) == [
        ("t", 0, meta.producer_id, 0, False),
        ("t", 1, meta.producer_id, 0, False),
    ]
    assert node.offsets.attempts == []
    with pytest.raises(InvalidTxnState):
        await c.commit(TID, meta.producer_epoch, ME)


async def test_failed_markers_and_offsets_are_retried_until_written(node: Node) -> None:
    c = node.coordinator
    meta = await open_with(node, T0, T1)
    await c.add_offsets(TID, meta.producer_epoch, "g", "m1", 7, [("in", 0, 1, "")], ME)
    node.markers.failures = 5
    node.offsets.failures = 3
    done = await c.commit(TID, meta.producer_epoch, ME)
    assert done.state is S.COMPLETE_COMMIT
    assert len(node.markers.attempts) == 7 and len(node.markers.done) == 2
    assert len(node.offsets.attempts) == 4 and len(node.offsets.done) == 1


async def test_markers_go_out_together_and_only_the_failed_are_retried(node: Node) -> None:
    c = node.coordinator
    meta = await open_with(node, T0, T1, U0)
    node.markers.failures = 1  # the first marker written (t-0) fails once
    done = await c.commit(TID, meta.producer_epoch, ME)
    assert done.state is S.COMPLETE_COMMIT
    assert node.marker_calls == [[T0, T1, U0], [T0]]
    assert sorted(m[:2] for m in node.markers.done) == [T0, T1, U0]


async def test_a_decided_commit_stays_prepared_until_every_marker_is_written(node: Node) -> None:
    c = await node.fresh(write_timeout_ms=50)
    meta = await open_with(node, T0)
    node.markers.gate.clear()
    answered = await c.commit(TID, meta.producer_epoch, ME)
    assert answered.state is S.PREPARE_COMMIT  # decided; answered after write_timeout_ms
    assert c.describe(TID).state is S.PREPARE_COMMIT
    assert node.states_stored()[-1] == "PrepareCommit"
    with pytest.raises(ConcurrentTransactions):  # the next transaction waits for it
        await c.begin(TID, 60_000, ME)
    with pytest.raises(InvalidTxnState):
        await c.abort_by_operator(TID)
    node.markers.gate.set()
    await until(lambda: c.describe(TID).state is S.COMPLETE_COMMIT, "the completion")
    assert node.states_stored()[-1] == "CompleteCommit"
    assert (await c.begin(TID, 60_000, ME)).producer_epoch == 1


async def test_a_begin_waits_for_the_previous_transaction_to_complete(node: Node) -> None:
    c = node.coordinator
    meta = await open_with(node, T0)
    node.markers.failures = 3
    committing = asyncio.create_task(c.commit(TID, meta.producer_epoch, ME))
    await until(lambda: c.describe(TID).state is S.PREPARE_COMMIT, "the decision")
    began = await c.begin(TID, 60_000, ME)
    assert (began.state, began.producer_epoch) == (S.ONGOING, 1)
    assert len(node.markers.done) == 1
    assert (await committing).state is S.COMPLETE_COMMIT


async def test_a_begin_fences_the_open_transaction_of_its_id(node: Node) -> None:
    c = node.coordinator
    zombie = await open_with(node, T0, U0)
    await c.add_offsets(TID, 0, "g", "m1", 7, [("in", 0, 1, "")], ME)
    new = await c.begin(TID, 60_000, ME)
    assert (new.state, new.producer_id, new.producer_epoch) == (S.ONGOING, zombie.producer_id, 2)
    # the zombie's transaction was aborted under epoch 1: its late writes are refused there
    assert sorted(m[:5] for m in node.markers.done) == [
        ("t", 0, zombie.producer_id, 1, False),
        ("u", 0, zombie.producer_id, 1, False),
    ]
    assert node.offsets.attempts == []
    assert node.states_stored() == [
        "Ongoing",
        "Ongoing",
        "Ongoing",
        "PrepareAbort",
        "CompleteAbort",
        "Ongoing",
    ]
    for late in (
        c.commit(TID, 0, ME),
        c.abort(TID, 0, ME),
        c.add_partitions(TID, 0, [T1], ME),
        c.add_offsets(TID, 0, "g", "m1", 7, [], ME),
    ):
        with pytest.raises(ProducerFenced):
            await late
    assert node.generations.attempts == [("g", "m1", 7)]  # the zombie's group not asked
    assert c.describe(TID) == new


async def test_another_principal_neither_fences_nor_ends_the_transaction(node: Node) -> None:
    c = node.coordinator
    meta = await open_with(node, T0)
    with pytest.raises(NotTransactionOwner):
        await c.begin(TID, 60_000, "mallory")
    with pytest.raises(NotTransactionOwner):
        await c.commit(TID, meta.producer_epoch, "mallory")
    assert c.describe(TID) == meta


async def test_offsets_of_a_stale_generation_are_refused_when_sent(node: Node) -> None:
    c = node.coordinator
    meta = await open_with(node, T0)
    node.generations.refusal = GroupError("STALE_GENERATION", "generation 7 is not current")
    with pytest.raises(GroupError) as refused:
        await c.add_offsets(TID, meta.producer_epoch, "g", "m1", 7, [("in", 0, 1, "")], ME)
    assert refused.value.code == "STALE_GENERATION"
    assert c.describe(TID).pending_offsets == {}
    assert (await c.commit(TID, meta.producer_epoch, ME)).state is S.COMPLETE_COMMIT
    assert node.offsets.attempts == []


async def test_partitions_that_do_not_exist_or_are_internal_are_refused(node: Node) -> None:
    c = node.coordinator
    meta = await c.begin(TID, 60_000, ME)
    for tp, error in (
        (("nope", 0), UnknownTopic),
        (("t", 2), UnknownPartition),
        ((STATE, 0), InternalTopicWrite),
    ):
        with pytest.raises(error):
            await c.add_partitions(TID, meta.producer_epoch, [T0, tp], ME)
    assert c.describe(TID).partitions == frozenset()


async def test_a_deleted_topics_partitions_get_no_marker(node: Node) -> None:
    c = node.coordinator
    meta = await open_with(node, T0, U0)
    await node.store.delete_topic(node.fence, "u")
    assert await node.replicas.applied(lambda: "u" not in node.store.view.topics, 10)
    assert (await c.commit(TID, meta.producer_epoch, ME)).state is S.COMPLETE_COMMIT
    assert [m[:2] for m in node.markers.done] == [("t", 0)]


async def test_the_timer_aborts_a_transaction_past_its_timeout(node: Node) -> None:
    c = await node.fresh(abort_interval_ms=1)
    meta = await c.begin(TID, 1000, ME)
    await c.add_partitions(TID, meta.producer_epoch, [T0], ME)
    for _ in range(20):
        await asyncio.sleep(0.002)
    assert c.describe(TID).state is S.ONGOING
    node.clock.now += 1000
    await until(lambda: c.describe(TID).state is S.COMPLETE_ABORT, "the timeout's abort")
    assert c.describe(TID).abort_cause is AbortCause.TIMEOUT
    assert [m[:5] for m in node.markers.done] == [("t", 0, meta.producer_id, 0, False)]
    with pytest.raises(TransactionTimedOut):
        await c.commit(TID, meta.producer_epoch, ME)
    with pytest.raises(TransactionTimedOut):
        await c.add_partitions(TID, meta.producer_epoch, [T1], ME)
    assert (await c.abort(TID, meta.producer_epoch, ME)).state is S.COMPLETE_ABORT


async def test_abort_timed_out_leaves_transactions_within_their_timeout(node: Node) -> None:
    c = node.coordinator
    await c.begin("late", 1000, ME)
    node.clock.now += 500
    await c.begin("early", 1000, ME)
    node.clock.now += 500
    assert await c.abort_timed_out() == ["late"]
    assert c.describe("early").state is S.ONGOING


async def test_an_operator_aborts_whatever_the_epoch(node: Node) -> None:
    c = node.coordinator
    meta = await open_with(node, T0)
    done = await c.abort_by_operator(TID)
    assert (done.state, done.abort_cause) == (S.COMPLETE_ABORT, AbortCause.OPERATOR)
    assert [m[:5] for m in node.markers.done] == [("t", 0, meta.producer_id, 0, False)]
    with pytest.raises(InvalidTxnState, match="by an operator"):
        await c.commit(TID, meta.producer_epoch, ME)


async def test_idle_ids_expire_and_their_producer_id_is_never_given_again(node: Node) -> None:
    c = await node.fresh(expiration_ms=1000)
    await c.begin("other", 60_000, ME)  # open: never expires
    first = await c.begin(TID, 60_000, ME)  # the last producer id given
    await c.commit(TID, first.producer_epoch, ME)
    node.clock.now += 999
    assert await c.expire_ids() == []
    node.clock.now += 1
    assert await c.expire_ids() == [TID]
    assert node.states_stored()[-1] is None  # a tombstone
    assert [m.transactional_id for m in c.list_transactions()] == ["other"]
    c = await node.fresh()  # replayed: the tombstone and the counter
    again = await c.begin(TID, 60_000, ME)
    assert again.producer_id not in (first.producer_id, c.describe("other").producer_id)


async def test_a_new_coordinator_completes_what_was_decided_and_leaves_the_open(
    node: Node,
) -> None:
    """Failover: the old coordinator decided a commit and an abort but wrote none of their
    markers; a fresh coordinator replaying the log writes them, commits the offsets and
    stores them complete. An open transaction waits for its producer or its timeout."""
    c = await node.fresh(write_timeout_ms=20)
    node.markers.gate.clear()
    node.offsets.gate.clear()
    committed = await open_with(node, T0)
    await c.add_offsets(TID, 0, "g", "m1", 7, [("in", 0, 3, "")], ME)
    assert (await c.commit(TID, 0, ME)).state is S.PREPARE_COMMIT
    aborted = await c.begin("ab", 60_000, ME)
    await c.add_partitions("ab", 0, [T1], ME)
    assert (await c.abort("ab", 0, ME)).state is S.PREPARE_ABORT
    open_ = await c.begin("open", 60_000, ME)
    await c.add_partitions("open", 0, [U0], ME)
    c.close()  # the old coordinator is gone, its markers never written
    node.markers, node.offsets = Collaborator(), Collaborator()
    c = await node.fresh()
    await until(
        lambda: (
            [m.state for m in c.list_transactions()]
            == [S.COMPLETE_ABORT, S.ONGOING, S.COMPLETE_COMMIT]
        ),
        "the completions",
    )
    assert sorted(m[:5] for m in node.markers.done) == [
        ("t", 0, committed.producer_id, 0, True),
        ("t", 1, aborted.producer_id, 0, False),
    ]
    assert node.offsets.done == [("g", "m1", 7, [("in", 0, 3, "")])]
    assert c.describe("open").partitions == {U0}
    assert c.describe("open").started_ms == open_.started_ms
    # the producers go on with the new coordinator: a commit retried is answered as done
    assert (await c.commit(TID, 0, ME)).state is S.COMPLETE_COMMIT
    assert (await c.commit("open", 0, ME)).state is S.COMPLETE_COMMIT
    assert [m[:2] for m in node.markers.done[-1:]] == [("u", 0)]
    node.clock.now += 60_000
    assert await c.abort_timed_out() == []


async def test_producer_ids_are_unique_across_coordinators(node: Node) -> None:
    given = set()
    for round_ in range(3):
        c = await node.fresh()
        for i in range(3):
            given.add((await c.begin(f"id-{round_}-{i}", 60_000, ME)).producer_id)
    assert len(given) == 9
