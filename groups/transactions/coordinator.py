"""The transaction coordinator (KIP-98): the node that leads a transactional id's partition of
`__transaction_state` keeps its state, decides its transactions and sees them through.

Every change is appended to the id's state partition and waited on every in-sync replica
before it takes effect and is answered, so the next coordinator (failover, reassignment,
shutdown) replays what was answered. A decided transaction (PrepareCommit, PrepareAbort) is
then completed in the background: a marker on every partition it wrote and, for a commit, the
consumer groups' offsets it carries, each retried with backoff until done; only then is
CompleteCommit (CompleteAbort) stored. A new coordinator completes the decided transactions
it replays, and aborts the open ones that run past their timeout, as the old one would have.

Markers and offsets go through injected callables (the partition layer's marker write, the
group coordinator's commit), so this package knows neither route.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping

from engine.errors import EngineError, UnknownPartition, UnknownTopic
from engine.offsets_topic import TopicPartition, partition_for
from engine.producer_state import ProducerIdentity
from groups.offsets_log import CoordinatorLog, partition_count
from groups.transactions import state_topic
from groups.transactions.errors import ConcurrentTransactions, TransactionError
from groups.transactions.model import (
    AbortCause,
    OffsetEntry,
    TransactionMetadata,
    TransactionState,
)
from groups.transactions.state_machine import (
    DEFAULT_MAX_TIMEOUT_MS,
    TransactionStateMachine,
    Transition,
)
from replication.partition import Partition
from replication.replica_manager import ReplicaManager, refuse_internal

ABORT_INTERVAL_MS = 10_000  # transaction.abort.timed.out.transaction.cleanup.interval.ms
EXPIRATION_MS = 7 * 24 * 3600 * 1000  # transactional.id.expiration.ms
RETRY_BACKOFF_MS = 100  # a failed marker or offsets commit, first retry
RETRY_BACKOFF_MAX_MS = 1000
logger = logging.getLogger("groups.transactions")
_ABORTED_BY = {
    None: "aborted",
    AbortCause.TIMEOUT: "timed_out",
    AbortCause.FENCED: "fenced",
    AbortCause.OPERATOR: "operator",
}
OUTCOMES = ("committed", *_ABORTED_BY.values())  # how a transaction ends, as counted

WriteMarkers = Callable[
    [list[TopicPartition], int, int, bool, int], Awaitable[Mapping[TopicPartition, Exception]]
]
"""(partitions, producer_id, producer_epoch, commit, coordinator_epoch): append a COMMIT
(ABORT) marker as each partition's leader, on every in-sync replica; the partitions where it
could not, with why."""
CommitOffsets = Callable[[str, str, int, list[OffsetEntry]], Awaitable[None]]
"""(group, member_id, generation_id, [(topic, partition, offset, metadata)]): the group
coordinator's commit of a committed transaction's offsets; raises if not done."""
CheckGeneration = Callable[[str, str, int], Awaitable[None]]
"""(group, member_id, generation_id): raises unless that member is of the group's current
generation (KIP-447: a zombie's offsets are refused when sent)."""


def now_ms() -> int:
    """Wall-clock milliseconds: transaction timeouts outlive the node that started them."""
    return int(time.time() * 1000)


def outcome(meta: TransactionMetadata) -> str:
    """How a decided transaction ends: committed, or aborted by its producer (aborted), its
    timeout (timed_out), a newer begin of its id (fenced) or an operator (operator)."""
    return "committed" if meta.state.commits else _ABORTED_BY[meta.abort_cause]


class TransactionCoordinator:
    """Every transactional id whose state partition this node leads."""

    def __init__(
        self,
        replicas: ReplicaManager,
        write_markers: WriteMarkers,
        commit_offsets: CommitOffsets,
        check_generation: CheckGeneration,
        write_timeout_ms: int,
        *,
        max_timeout_ms: int = DEFAULT_MAX_TIMEOUT_MS,
        abort_interval_ms: int = ABORT_INTERVAL_MS,
        expiration_ms: int = EXPIRATION_MS,
        retry_backoff_ms: int = RETRY_BACKOFF_MS,
        retry_backoff_max_ms: int = RETRY_BACKOFF_MAX_MS,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.replicas = replicas
        self.write_markers = write_markers
        self.commit_offsets = commit_offsets
        self.check_generation = check_generation
        self.write_timeout_ms = (
            write_timeout_ms  # a state write's wait, and an end's for its markers
        )
        self.abort_interval_ms = abort_interval_ms
        self.expiration_ms = expiration_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = retry_backoff_max_ms
        self.clock = clock
        self.machine = TransactionStateMachine(self._partition_of, max_timeout_ms)
        self.log: CoordinatorLog[TransactionMetadata] = CoordinatorLog(
            replicas,
            self._restore,
            self._replayed,
            self._unload,
            state_topic.STATE_TOPIC,
            state_topic.replay,
        )
        self.closing = False
        self._locks: dict[str, asyncio.Lock] = {}  # one change of an id at a time
        self._completions: dict[str, asyncio.Task[None]] = {}  # decided ids being completed
        self._timer: asyncio.Task[None] | None = None
        # transactions completed here by outcome (one of OUTCOMES), for the metrics
        self.outcomes: Counter[str] = Counter()

    # -- start and stop --------------------------------------------------------------------------

    async def role_changed(self, partition: Partition) -> None:
        """A state partition came to this node, moved to a new epoch, or left it."""
        await self.log.role_changed(partition)

    async def loaded(self, timeout_s: float | None = None) -> None:
        """Wait for the replays under way, at most `timeout_s`."""
        await self.log.loaded(timeout_s)

    def close(self) -> None:
        """Shutting down: replays, completions and the timer stop (a decided transaction is
        completed by the next coordinator, which replays it)."""
        self.closing = True
        self.log.close()
        for task in self._completions.values():
            task.cancel()
        if self._timer is not None:
            self._timer.cancel()

    def coordinates(self, transactional_id: str) -> bool:
        """Whether this node coordinates the id now (its partition led and loaded here)."""
        try:
            self.log.coordinator(transactional_id)
        except EngineError:
            return False
        return True

    def _partition_of(self, transactional_id: str) -> int:
        count = partition_count(self.replicas, state_topic.STATE_TOPIC)
        return partition_for(transactional_id, count)

    def _restore(self, stored: Mapping[str, TransactionMetadata]) -> None:
        """Take over state partitions as their replay left them."""
        assert isinstance(stored, state_topic.Replayed)
        for state_partition, last_counter in stored.last_counters.items():
            ids = {
                tid: meta
                for tid, meta in stored.items()
                if self._partition_of(tid) == state_partition
            }
            for tid in self.machine.restore(state_partition, ids, last_counter):
                logger.info("transaction %r: completing its %s", tid, ids[tid].state)

    def _replayed(self) -> None:
        """A partition is loaded: its decided transactions are completed, and the timer runs."""
        if self.closing:
            return
        for tid, meta in list(self.machine.transactions.items()):
            if meta.state.deciding:
                self._complete_later(tid)
        if self._timer is None:
            self._timer = asyncio.create_task(self._tick())

    def _unload(self, state_partition: int) -> None:
        """A state partition left this node: its ids are coordinated elsewhere now."""
        for tid in self.machine.unload(state_partition):
            task = self._completions.pop(tid, None)
            if task is not None:
                task.cancel()
            self._locks.pop(tid, None)

    # -- the producer's calls --------------------------------------------------------------------

    async def begin(
        self, transactional_id: str, timeout_ms: int, principal: str | None
    ) -> TransactionMetadata:
        """Begin a transaction under a new epoch (a new producer id at the first begin). An
        open transaction of the id is aborted first (its producer is fenced), and a completing
        one waited for: `ConcurrentTransactions` if that takes longer than write_timeout_ms."""
        deadline = self._deadline()
        while True:
            try:
                meta = await self._change(
                    transactional_id,
                    lambda now: self.machine.begin(transactional_id, timeout_ms, principal, now),
                )
            except ConcurrentTransactions:
                if not await self._completed(transactional_id, deadline):
                    raise
                continue
            if meta.state is TransactionState.ONGOING:
                return meta

    async def add_partitions(
        self,
        transactional_id: str,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        principal: str | None,
    ) -> TransactionMetadata:
        """Partitions the transaction writes (before its first write to each): each gets a
        marker when the transaction ends."""
        wanted = list(partitions)
        known = self.added(transactional_id, producer_epoch, wanted, principal)
        if known is not None:
            return known

        def decide(now: int) -> Transition:
            transition = self.machine.add_partitions(
                transactional_id, producer_epoch, wanted, principal, now
            )
            for topic, p in wanted:
                self._check_partition(topic, p)
            return transition

        return await self._change(transactional_id, decide)

    def added(
        self,
        transactional_id: str,
        producer_epoch: int,
        partitions: Collection[TopicPartition],
        principal: str | None,
    ) -> TransactionMetadata | None:
        """The open transaction, if `partitions` are all in it already (every produce of a
        transaction but its first to a partition), decided at once without storing anything
        while no change of the id is being stored; refused as `add_partitions` refuses
        (fenced, not open, not the owner). None: `add_partitions` must decide, under the id's
        lock, or say why this node cannot (the id coordinated elsewhere, its state partition
        loading, the state topic not made yet)."""
        try:
            self.log.coordinator(transactional_id)
        except EngineError:
            return None
        lock = self._locks.get(transactional_id)
        if lock is not None and lock.locked():
            return None
        unchanged = self.machine.add_partitions(
            transactional_id, producer_epoch, partitions, principal, self.clock()
        )
        return None if unchanged.changed else unchanged.metadata

    def producer_of(self, transactional_id: str, producer_epoch: int) -> ProducerIdentity | None:
        """Who writes in the id's open transaction at `producer_epoch`, if it is coordinated
        here: what its produces' batches are built stamped for (their partitions' add decides;
        None: unknown here)."""
        meta = self.machine.transactions.get(transactional_id)
        if (
            meta is None
            or meta.producer_epoch != producer_epoch
            or meta.state is not TransactionState.ONGOING
        ):
            return None
        return ProducerIdentity(meta.producer_id, producer_epoch)

    async def add_offsets(
        self,
        transactional_id: str,
        producer_epoch: int,
        group: str,
        member_id: str,
        generation_id: int,
        offsets: Iterable[OffsetEntry],
        principal: str | None,
    ) -> TransactionMetadata:
        """A consumer group's offsets (topic, partition, offset, metadata), committed as that
        member if the transaction commits. The member must be of the group's current
        generation now (KIP-447); `check_generation`'s refusal is raised as it is."""
        entries = list(offsets)

        def decide(now: int) -> Transition:
            return self.machine.add_offsets(
                transactional_id,
                producer_epoch,
                group,
                member_id,
                generation_id,
                entries,
                principal,
                now,
            )

        self.log.coordinator(transactional_id)
        decide(self.clock())  # refused (fenced, not open) before the group is asked
        await self.check_generation(group, member_id, generation_id)
        return await self._change(transactional_id, decide)

    async def commit(
        self, transactional_id: str, producer_epoch: int, principal: str | None
    ) -> TransactionMetadata:
        """Commit: decided once PrepareCommit is stored (never undone from then on), answered
        once complete or after write_timeout_ms (state PrepareCommit: still completing). A
        retry of a commit answers as the first."""
        return await self._end(transactional_id, producer_epoch, True, principal)

    async def abort(
        self, transactional_id: str, producer_epoch: int, principal: str | None
    ) -> TransactionMetadata:
        """Abort: ABORT markers on every partition added; answered as `commit` is."""
        return await self._end(transactional_id, producer_epoch, False, principal)

    # -- operators -------------------------------------------------------------------------------

    async def abort_by_operator(self, transactional_id: str) -> TransactionMetadata:
        """An operator aborts the id's open transaction, whatever its producer's epoch
        (kafka-transactions.sh abort); answered as `abort` is."""
        meta = await self._change(
            transactional_id, lambda now: self.machine.operator_abort(transactional_id, now)
        )
        return await self._until_complete(transactional_id, meta)

    def describe(self, transactional_id: str) -> TransactionMetadata:
        """The id's state (NotLeader names the coordinator when it is elsewhere)."""
        self.log.coordinator(transactional_id)
        return self.machine.get(transactional_id)

    def list_transactions(
        self, states: Collection[TransactionState] | None = None
    ) -> list[TransactionMetadata]:
        """The ids coordinated here (in the given states), by id."""
        return [
            meta
            for _, meta in sorted(self.machine.transactions.items())
            if states is None or meta.state in states
        ]

    async def abort_timed_out(self) -> list[str]:
        """Abort the open transactions past their timeout (the timer's pass); their ids."""
        aborted: list[str] = []
        for tid in self.machine.expired(self.clock()):
            try:
                await self._change(tid, functools.partial(self.machine.time_out, tid))
            except TransactionError:
                continue  # ended meanwhile
            except Exception as exc:
                logger.warning("transaction %r: its timeout abort failed: %s", tid, exc)
                continue
            logger.info("transaction %r: aborted, past its timeout", tid)
            aborted.append(tid)
        return aborted

    async def expire_ids(self) -> list[str]:
        """Delete the ids idle past transactional.id.expiration.ms (the timer's pass)."""
        removed: list[str] = []
        for tid in self.machine.removable(self.clock(), self.expiration_ms):
            try:
                await self._store(
                    tid,
                    functools.partial(self.machine.remove, tid, expiration_ms=self.expiration_ms),
                )
            except TransactionError:
                continue  # used again meanwhile
            except Exception as exc:
                logger.warning("transaction %r: its expiration failed: %s", tid, exc)
                continue
            self._locks.pop(tid, None)
            removed.append(tid)
        return removed

    # -- inside ----------------------------------------------------------------------------------

    async def _end(
        self, transactional_id: str, producer_epoch: int, commit: bool, principal: str | None
    ) -> TransactionMetadata:
        meta = await self._change(
            transactional_id,
            lambda now: self.machine.end(transactional_id, producer_epoch, commit, principal, now),
        )
        return await self._until_complete(transactional_id, meta)

    async def _change(
        self, transactional_id: str, decide: Callable[[int], Transition]
    ) -> TransactionMetadata:
        """Decide a transition under the id's lock, store it on every in-sync replica, then
        apply it (a decided transaction starts completing). Raised refusals, and transitions
        that change nothing, store nothing."""
        transition = await self._store(transactional_id, decide)
        assert transition.metadata is not None
        return transition.metadata

    async def _store(
        self, transactional_id: str, decide: Callable[[int], Transition]
    ) -> Transition:
        self.log.coordinator(transactional_id)
        lock = self._locks.setdefault(transactional_id, asyncio.Lock())
        async with lock:
            self.log.coordinator(transactional_id)  # it may have left while queued
            transition = decide(self.clock())
            if transition.changed:
                # no await between the decision and its append: producer id counters are
                # appended in the order they were allocated
                self.log.append(transactional_id, state_topic.records(transition))
                await self.log.durable(transactional_id, self.write_timeout_ms)
                self.log.coordinator(transactional_id)  # still ours: else the next one has it
                self.machine.apply(transition)
                if transition.metadata is not None and transition.metadata.state.complete:
                    self.outcomes[outcome(transition.metadata)] += 1
        meta = transition.metadata
        if meta is not None and meta.state.deciding:
            self._complete_later(transactional_id)
        return transition

    def _check_partition(self, topic: str, partition: int) -> None:
        refuse_internal(topic)
        spec = self.replicas.store.view.topics.get(topic)
        if spec is None:
            raise UnknownTopic(f"topic {topic!r} does not exist", topic)
        if not 0 <= partition < spec.partitions:
            raise UnknownPartition(f"{topic} has no partition {partition}")

    def _deadline(self) -> float:
        return asyncio.get_running_loop().time() + self.write_timeout_ms / 1000

    async def _until_complete(
        self, transactional_id: str, meta: TransactionMetadata
    ) -> TransactionMetadata:
        """A decided transaction's state once complete, or as it is after write_timeout_ms."""
        if not meta.state.deciding:
            return meta
        await self._completed(transactional_id, self._deadline())
        now = self.machine.transactions.get(transactional_id)
        same = now is not None and (now.producer_id, now.producer_epoch) == (
            meta.producer_id,
            meta.producer_epoch,
        )
        return now if same and now is not None else meta

    async def _completed(self, transactional_id: str, deadline: float) -> bool:
        """Wait until the id's decided transaction is complete (or `deadline`); whether it
        is (or was not decided)."""
        meta = self.machine.transactions.get(transactional_id)
        if meta is None or not meta.state.deciding:
            return True
        task = self._complete_later(transactional_id)
        left = deadline - asyncio.get_running_loop().time()
        if left > 0:
            await asyncio.wait((task,), timeout=left)
        return task.done()

    def _complete_later(self, transactional_id: str) -> asyncio.Task[None]:
        """The id's completion, started unless under way."""
        task = self._completions.get(transactional_id)
        if task is None or task.done():
            task = asyncio.create_task(self._complete(transactional_id))
            self._completions[transactional_id] = task
            task.add_done_callback(functools.partial(self._completion_ended, transactional_id))
        return task

    def _completion_ended(self, transactional_id: str, task: asyncio.Task[None]) -> None:
        if self._completions.get(transactional_id) is task:
            del self._completions[transactional_id]
        if not task.cancelled() and task.exception() is not None:
            logger.error(
                "transaction %r: completing it failed", transactional_id, exc_info=task.exception()
            )

    async def _complete(self, transactional_id: str) -> None:
        """Write every marker (and a commit's offsets), each until done, then store the
        transaction complete."""
        meta = self.machine.get(transactional_id)
        offsets = [
            self._retry(
                transactional_id,
                f"the offsets of group {group!r}",
                functools.partial(
                    self.commit_offsets,
                    group,
                    pending.member_id,
                    pending.generation_id,
                    list(pending.offsets),
                ),
            )
            for group, pending in sorted(meta.pending_offsets.items())
            if meta.state.commits
        ]
        if offsets:
            await asyncio.gather(self._mark_all(meta), *offsets)
        else:
            await self._mark_all(meta)
        await self._retry(
            transactional_id,
            "its completion",
            functools.partial(
                self._change,
                transactional_id,
                lambda now: self.machine.complete(transactional_id, now),
            ),
        )

    async def _mark_all(self, meta: TransactionMetadata) -> None:
        """Every partition's marker: all at once first, then each that failed on its own,
        with backoff, until written."""
        failed = await self._mark(meta, sorted(meta.partitions))
        if failed:
            await asyncio.gather(
                *(
                    self._retry(
                        meta.transactional_id,
                        f"the marker on {topic}-{p}",
                        functools.partial(self._mark_one, meta, topic, p),
                        failed=exc,
                    )
                    for (topic, p), exc in failed.items()
                )
            )

    async def _mark_one(self, meta: TransactionMetadata, topic: str, partition: int) -> None:
        failed = await self._mark(meta, [(topic, partition)])
        if failed:
            raise failed[(topic, partition)]

    async def _mark(
        self, meta: TransactionMetadata, partitions: list[TopicPartition]
    ) -> Mapping[TopicPartition, Exception]:
        """Markers on `partitions` that still exist (a deleted one needs none); where they
        failed, with why."""
        topics = self.replicas.store.view.topics
        existing: list[TopicPartition] = []
        for topic, partition in partitions:
            spec = topics.get(topic)
            if spec is None or partition >= spec.partitions:
                logger.info(
                    "transaction %r: %s-%d no longer exists; no marker",
                    meta.transactional_id,
                    topic,
                    partition,
                )
            else:
                existing.append((topic, partition))
        if not existing:
            return {}
        coordinator_epoch = self.log.coordinator(meta.transactional_id).leader_epoch
        return await self.write_markers(
            existing, meta.producer_id, meta.producer_epoch, meta.state.commits, coordinator_epoch
        )

    async def _retry(
        self,
        transactional_id: str,
        what: str,
        attempt: Callable[[], Awaitable[object]],
        failed: Exception | None = None,
    ) -> None:
        """Until `attempt` succeeds, with backoff (cancelled when the id leaves this node);
        `failed`: a first attempt made already failed so."""
        backoff = self.retry_backoff_ms
        while True:
            if failed is None:
                try:
                    await attempt()
                    return
                except TransactionError as exc:  # the state machine's: nothing left to do
                    logger.error("transaction %r: %s refused: %s", transactional_id, what, exc)
                    return
                except Exception as exc:
                    failed = exc
            logger.warning(
                "transaction %r: writing %s failed (%s); retrying in %d ms",
                transactional_id,
                what,
                failed,
                backoff,
            )
            failed = None
            await asyncio.sleep(backoff / 1000)
            backoff = min(backoff * 2, self.retry_backoff_max_ms)

    async def _tick(self) -> None:
        """Every abort_interval_ms: abort what timed out, delete the ids expired."""
        while True:
            await asyncio.sleep(self.abort_interval_ms / 1000)
            await self.abort_timed_out()
            await self.expire_ids()
