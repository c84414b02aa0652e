"""The controller: the one elected node that creates, alters and deletes topics and moves
partition leadership (off lost nodes and failed disks, and back to preferred replicas),
through the store.

Kafka's design (its ControllerEventManager): all controller work runs in one task, so two
elections or a topic change and an election never interleave. Callers' requests are queued to
that task; a change of the metadata view wakes it. The decisions themselves are plain
functions of a partition's state (`elect_leader`, `elect_preferred`; placement in
replication.placement, moves in replication.reassignment).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from engine.config import (
    TopicConfig,
    collision_key,
    merged_overrides,
    normalised_overrides,
    validate_topic_name,
)
from engine.errors import InvalidTopicName, TopicAlreadyExists, UnknownPartition, UnknownTopic
from engine.manager import check_partition_count
from replication import cluster_shape, controlled_shutdown, placement, reassignment
from replication.errors import (
    ControllerNotAvailable,
    FencedController,
    InvalidReassignment,
    MetadataUnavailable,
    NotController,
    ReassignmentInProgress,
)
from replication.metadata import (
    DECOMMISSIONING,
    MAX_PARTITIONS_PER_WRITE,
    NO_LEADER,
    REMOVED,
    ClusterView,
    Fence,
    LogEnd,
    MetadataStore,
    PartitionState,
    TopicPartition,
    TopicSpec,
    with_eligible_leaders,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
Job = Callable[[Fence], Awaitable[Any]]

TOPIC_WRITE_ATTEMPTS = 5  # compare-and-set tries of a topic record before MetadataUnavailable
VIEW_CATCH_UP_S = 5.0  # how long a write waits for this node's view to show it
LEADING_WAIT_S = 5.0  # how long a request waits for this node's election to finish
STORE_RETRY_S = 1.0  # pause before campaigning or electing again when the store is unavailable


def elect_leader(
    state: PartitionState,
    live: frozenset[int],
    unclean: bool,
    offline: frozenset[int] = frozenset(),
    restarted: frozenset[int] = frozenset(),
    crashed: frozenset[int] = frozenset(),
    log_ends: Mapping[int, LogEnd] | None = None,
) -> PartitionState | None:
    """The partition's next state when a replica it counts on is gone, else None.

    A replica is available if its node is live and does not report the partition's log
    `offline` (KIP-112: a failed disk takes only its replicas out). An ISR member in
    `restarted` (its process started after the state was stored) is available but no longer
    counts as in sync (KIP-841/903); one in `crashed` (it restarted after a crash, now or
    while the partition had no leader) may have lost what it had not fsynced. An available,
    in-sync leader keeps leading, with the others dropped from the ISR at once (Kafka's
    controller on a broker's session loss; else acks=all would wait out
    replica.lag.time.max.ms). Otherwise the first available in-sync replica leads. Failing
    that, KIP-966's rule for the last replicas standing: a restarted ISR member that had shut
    down cleanly leads alone; one that crashed, only once every ISR member is back and each
    of them crashed, as another may come back with the records it lost: then the one with
    the longest log (KIP-966's balanced recovery, on the `log_ends` their nodes reported; the
    caller says what may be lost), or with `unclean` the first of them without waiting. The
    balanced recovery also waits for the eligible leader replicas (`state.elr`: they left
    the ISR while it refused acks=all, so one may hold what the crashes lost) and weighs
    their logs with the others'. Failing that, with `unclean`, the first available eligible
    leader replica, else replica, alone; else the partition is offline with its last ISR kept
    (its crashed members recorded as `recovering`: they and the eligible leader replicas
    report their log ends), so that it comes back when an ISR member does. Every change is a
    new leader epoch."""
    available = live - offline
    in_sync = available - restarted - crashed
    if state.leader in in_sync:
        isr = tuple(r for r in state.isr if r in in_sync)
        if isr == state.isr and not state.recovering:
            return None
        return replace(state, leader_epoch=state.leader_epoch + 1, isr=isr, recovering=())
    epoch = state.leader_epoch + 1
    led = replace(state, leader_epoch=epoch, recovering=())
    clean = next((r for r in state.replicas if r in in_sync and r in state.isr), None)
    if clean is not None:
        return replace(led, leader=clean, isr=tuple(r for r in state.isr if r in in_sync))
    back = [r for r in state.replicas if r in available and r in state.isr]
    intact = [r for r in back if r not in crashed]
    survivor = intact[0] if intact else None
    if survivor is None and back and len(back) == len(state.isr):
        eligible = [r for r in state.elr if r in available]
        if len(eligible) == len(state.elr):
            survivor = longest_log(back + eligible, log_ends or {})
        if survivor is None and unclean:
            survivor = back[0]  # an unclean election does not wait for the log ends
    if survivor is not None:
        return replace(led, leader=survivor, isr=(survivor,))
    candidates = (*state.elr, *state.replicas)  # an eligible replica lost the least
    fallback = next((r for r in candidates if r in available), None) if unclean else None
    if fallback is not None:
        return replace(led, leader=fallback, isr=(fallback,))
    recovering = tuple(r for r in state.isr if r in crashed)
    if state.leader == NO_LEADER and state.recovering == recovering:
        return None
    return replace(state, leader=NO_LEADER, leader_epoch=epoch, recovering=recovering)


def longest_log(candidates: Sequence[int], log_ends: Mapping[int, LogEnd]) -> int | None:
    """The candidate whose log is longest: the greatest last leader epoch, then log end
    offset; on a tie the first in order. None until each has reported, unless it is alone."""
    if len(candidates) == 1:
        return candidates[0]
    if any(r not in log_ends for r in candidates):
        return None
    return max(candidates, key=lambda r: (log_ends[r].leader_epoch, log_ends[r].end_offset))


def elect_preferred(
    state: PartitionState,
    live: frozenset[int],
    offline: frozenset[int] = frozenset(),
    restarted: frozenset[int] = frozenset(),
) -> PartitionState | None:
    """Leadership back to the preferred replica if it is live, does not report the
    partition `offline`, is in the ISR (not `restarted` since) and is not leading."""
    preferred = state.replicas[0]
    if (
        state.leader == preferred
        or preferred not in live
        or preferred in offline
        or preferred not in state.isr
        or preferred in restarted
        or preferred in state.recovering
    ):
        return None
    return replace(state, leader=preferred, leader_epoch=state.leader_epoch + 1)


class Controller:
    """Campaigns for the controller role and, while elected, does all of its work in one task.

    `leader_imbalance_check_interval_s` is how often leadership moves back to preferred
    replicas (Kafka's auto.leader.rebalance.enable; None turns it off). Kafka checks every 300 s;
    we check every 30 s, as a scan of the view costs nothing and a restarted node gets its
    leaderships back sooner."""

    def __init__(
        self,
        store: MetadataStore,
        node_id: int,
        defaults: TopicConfig,
        *,
        leader_imbalance_check_interval_s: float | None = 30.0,
        replica_lost_timeout_s: float | None = None,
        balance_interval_s: float | None = None,
    ) -> None:
        self.store = store
        self.node_id = node_id
        self.defaults = defaults
        self.leader_imbalance_check_interval_s = leader_imbalance_check_interval_s
        # a node down this long is removed and its replicas re-created (None: never)
        self.replica_lost_timeout_s = replica_lost_timeout_s
        self.balance_interval_s = balance_interval_s  # the continuous balancer's (None: off)
        # the partitions' sizes for the planners; without one they count as empty
        self.sizes: cluster_shape.SizesProvider | None = None
        self._absent_since: dict[int, float] = {}  # node -> when this controller saw it go
        self._jobs: deque[tuple[Job, asyncio.Future[Any]]] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[Any] | None = None
        self._leading = asyncio.Event()  # set while this run holds the controller's fence
        self._closed = False

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Run the controller loop in a task of its own (see run)."""
        self._task = asyncio.create_task(self.run())

    async def run(self) -> None:
        """Campaign, lead while the fence holds, campaign again when it fails; until close()."""
        self._task = asyncio.current_task()
        self.store.add_listener(self._on_view)
        try:
            while not self._closed:
                try:
                    fence = await self.store.campaign()
                except MetadataUnavailable as exc:
                    log.warning("campaign failed, retrying in %.0f s: %s", STORE_RETRY_S, exc)
                    await asyncio.sleep(STORE_RETRY_S)
                    continue
                if not await self.store.wait_for(
                    lambda view: view.controller == self.node_id, VIEW_CATCH_UP_S
                ):
                    continue  # elected, but the view has not caught up yet: campaign again
                log.info("node %d is the controller", self.node_id)
                self._leading.set()
                try:
                    await self._lead(fence)
                except FencedController:
                    log.warning("node %d is no longer the controller", self.node_id)
                finally:
                    self._leading.clear()
                    self._fail_jobs()
        finally:
            self.store.remove_listener(self._on_view)
            self._fail_jobs()

    async def close(self) -> None:
        """Stop campaigning or leading; the store's close() gives up the election key."""
        self._closed = True
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task})
        self._fail_jobs()

    def _on_view(self, view: ClusterView) -> None:
        self._wake.set()

    async def _lead(self, fence: Fence) -> None:
        """Elect leaders wherever needed, then run one queued request or a rebalance; repeat on
        every view change. Raises FencedController once another node is the controller."""
        loop = asyncio.get_running_loop()
        next_rebalance = self._next_rebalance()
        next_balance = None if self.balance_interval_s is None else loop.time()
        self._absent_since.clear()
        serving = self.store.view.in_service()
        while True:
            self._wake.clear()
            if self.store.view.controller != self.node_id:
                raise FencedController(f"node {self.node_id} lost the controller election")
            if next_balance is not None and not self.store.view.in_service() <= serving:
                next_balance = loop.time()  # a node joined: the continuous balancer looks now
            serving = self.store.view.in_service()
            try:
                await self._elect_leaders(fence)
                await self._advance_reassignments(fence)
                await self._advance_decommissions(fence)
                if self._jobs:
                    await self._run_job(fence, *self._jobs.popleft())
                    if self._jobs:
                        self._wake.set()
                if next_rebalance is not None and loop.time() >= next_rebalance:
                    await self._rebalance(fence)
                    next_rebalance = self._next_rebalance()
                await self._heal_lost(fence)
                if next_balance is not None and loop.time() >= next_balance:
                    await self._balance_if_needed(fence)
                    next_balance = loop.time() + (self.balance_interval_s or 0.0)
            except MetadataUnavailable as exc:
                log.warning("controller pass failed, retrying in %.0f s: %s", STORE_RETRY_S, exc)
                await asyncio.sleep(STORE_RETRY_S)
                self._wake.set()
            deadlines = [
                d for d in (next_rebalance, next_balance, self._next_loss()) if d is not None
            ]
            timeout = max(0.0, min(deadlines) - loop.time()) if deadlines else None
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()

    def _next_rebalance(self) -> float | None:
        interval = self.leader_imbalance_check_interval_s
        return None if interval is None else asyncio.get_running_loop().time() + interval

    # -- requests ------------------------------------------------------------------------------

    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, object] | None = None,
    ) -> TopicSpec:
        """Create a topic, its replicas assigned round-robin over the live nodes; the stored
        record is returned once this node's view shows it."""
        return await self._submit(
            lambda fence: self._create_topic(
                fence, name, partitions, replication_factor, configs or {}
            )
        )

    async def alter_topic(
        self,
        name: str,
        *,
        partitions: int | None = None,
        configs: Mapping[str, object | None] | None = None,
    ) -> TopicSpec:
        """Grow a topic's partitions and/or change its config overrides (None removes one)."""
        return await self._submit(lambda fence: self._alter_topic(fence, name, partitions, configs))

    async def delete_topic(self, name: str) -> None:
        """Delete a topic and its partitions' states."""
        await self._submit(lambda fence: self._delete_topic(fence, name))

    async def rebalance_preferred_leaders(self) -> int:
        """Move leadership back to preferred replicas now; returns how many partitions moved."""
        return await self._submit(self._rebalance)

    async def reassign(
        self, plan: Sequence[tuple[TopicPartition, Sequence[object]]]
    ) -> dict[TopicPartition, PartitionState]:
        """Start moving partitions to new replica lists (KIP-455), all of the plan or, if any
        of it is faulty, none; returns the stored state of each partition that changed (a
        partition already on its target is left out)."""
        return await self._submit(lambda fence: self._reassign(fence, plan))

    async def cancel_reassignments(
        self, partitions: Sequence[TopicPartition] | None = None
    ) -> dict[TopicPartition, PartitionState]:
        """Put moving partitions back on their original replicas: the ones named (each must be
        moving), or every moving one; returns their stored states."""
        return await self._submit(lambda fence: self._cancel(fence, partitions))

    async def balance(self, *, dry_run: bool) -> placement.Plan:
        """Plan moves that bring every node within ±10% of the mean in replicas, preferred
        leaderships and bytes, moving as few bytes as that allows; start them unless
        `dry_run`."""
        return await self._submit(lambda fence: self._balance(fence, dry_run))

    async def decommission(self, node: int, *, dry_run: bool) -> placement.Plan:
        """Move every replica off `node` (it serves meanwhile); it is marked removed once it
        holds none."""
        return await self._submit(lambda fence: self._decommission(fence, node, dry_run))

    async def remove_node(self, node: int, *, dry_run: bool) -> placement.Plan:
        """Mark a down node removed and re-create its replicas on the others."""
        return await self._submit(lambda fence: self._remove(fence, node, dry_run))

    async def _submit(self, job: Callable[[Fence], Awaitable[T]]) -> T:
        """Queue `job` to the controller task and wait for its outcome. A node the view shows
        as controller waits (bounded) for its task to take up the role: a new run whose
        previous run's election key has not expired yet, or an election under way."""
        if self._closed or self.store.view.controller != self.node_id:
            raise self._not_controller()
        if not self._leading.is_set():
            try:
                async with asyncio.timeout(LEADING_WAIT_S):
                    await self._leading.wait()
            except TimeoutError:
                raise ControllerNotAvailable(
                    f"node {self.node_id} is being elected controller; retry shortly"
                ) from None
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._jobs.append((job, future))
        self._wake.set()
        return await future

    async def _run_job(self, fence: Fence, job: Job, future: asyncio.Future[Any]) -> None:
        """Run one request and hand its outcome to the caller; a lost fence ends the leading."""
        if future.cancelled():
            return
        try:
            result = await job(fence)
        except FencedController:
            if not future.done():
                future.set_exception(self._not_controller())
            raise
        except Exception as exc:
            if not future.done():
                future.set_exception(exc)
        else:
            if not future.done():
                future.set_result(result)

    def _fail_jobs(self) -> None:
        while self._jobs:
            _, future = self._jobs.popleft()
            if not future.done():
                future.set_exception(self._not_controller())

    def _not_controller(self) -> NotController:
        controller = self.store.view.controller
        where = "no node is" if controller is None else f"node {controller} is"
        return NotController(f"node {self.node_id} is not the controller; {where}")

    # -- topics --------------------------------------------------------------------------------

    async def _create_topic(
        self,
        fence: Fence,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: Mapping[str, object],
    ) -> TopicSpec:
        validate_topic_name(name)
        check_partition_count(partitions)
        overrides = normalised_overrides(self.defaults.with_overrides(configs), configs)
        view = self.store.view
        if name in view.topics:
            raise TopicAlreadyExists(f"topic {name!r} already exists")
        for existing in view.topics:
            if collision_key(existing) == collision_key(name):
                raise InvalidTopicName(
                    f"topic {name!r} collides with existing topic {existing!r} "
                    "('.' and '_' are interchangeable in metric names)"
                )
        nodes = _replica_nodes(view, replication_factor)
        # Each topic starts where the cluster's partitions so far leave off, so that preferred
        # leaders stay spread over the nodes as topics come and go.
        start = sum(topic.partitions for topic in view.topics.values()) % len(nodes)
        spec = TopicSpec(name, uuid.uuid4().hex, partitions, replication_factor, overrides)
        assigned = placement.assign_new(
            cluster_shape.racks_of(view, set(nodes)), start, range(partitions), replication_factor
        )
        states = [_initial_state(replicas) for replicas in assigned]
        await self.store.create_topic(fence, spec, states)
        return await self._stored(name, lambda topic: topic.topic_id == spec.topic_id)

    async def _alter_topic(
        self,
        fence: Fence,
        name: str,
        partitions: int | None,
        configs: Mapping[str, object | None] | None,
    ) -> TopicSpec:
        for _ in range(TOPIC_WRITE_ATTEMPTS):
            stored = await self._try_alter_topic(fence, name, partitions, configs)
            if stored is not None:
                return stored
        raise MetadataUnavailable(
            f"topic {name!r} changed under every one of {TOPIC_WRITE_ATTEMPTS} attempts to alter it"
        )

    async def _try_alter_topic(
        self,
        fence: Fence,
        name: str,
        partitions: int | None,
        configs: Mapping[str, object | None] | None,
    ) -> TopicSpec | None:
        """One compare-and-set of the topic's record; None if it changed since this node read it
        (after waiting for the view to show the newer record)."""
        view = self.store.view
        spec = view.topics.get(name)
        if spec is None:
            raise UnknownTopic(f"topic {name!r} does not exist")
        overrides = spec.configs
        if configs is not None:
            merged = merged_overrides(spec.configs, configs)
            overrides = normalised_overrides(self.defaults.with_overrides(merged), merged)
        new_states: dict[int, PartitionState] = {}
        if partitions is not None:
            check_partition_count(partitions, more_than=spec.partitions)
            nodes = _replica_nodes(view, spec.replication_factor)
            added = range(spec.partitions, partitions)
            racks = cluster_shape.racks_of(view, set(nodes))
            assigned = placement.assign_new(
                racks,
                _start_index(view, name, placement.rack_alternated(racks)),
                added,
                spec.replication_factor,
            )
            new_states = {p: _initial_state(r) for p, r in zip(added, assigned, strict=True)}
        total = spec.partitions if partitions is None else partitions
        if await self.store.update_topic(
            fence, replace(spec, partitions=total, configs=overrides), new_states
        ):
            return await self._stored(name, lambda topic: topic.version > spec.version)
        await self.store.wait_for(
            lambda view: view.topics.get(name, spec).version != spec.version, VIEW_CATCH_UP_S
        )
        return None

    async def _delete_topic(self, fence: Fence, name: str) -> None:
        if name not in self.store.view.topics:
            raise UnknownTopic(f"topic {name!r} does not exist")
        await self.store.delete_topic(fence, name)
        if not await self.store.wait_for(lambda v: name not in v.topics, VIEW_CATCH_UP_S):
            raise MetadataUnavailable(
                f"topic {name!r} was deleted, but this node's view still shows it"
            )

    async def _stored(self, name: str, written: Callable[[TopicSpec], bool]) -> TopicSpec:
        """The topic's record once this node's view shows the write `written` recognises."""

        def shown(view: ClusterView) -> bool:
            topic = view.topics.get(name)
            return topic is not None and written(topic)

        if not await self.store.wait_for(shown, VIEW_CATCH_UP_S):
            raise MetadataUnavailable(
                f"topic {name!r} was written, but this node's view has not shown it "
                f"within {VIEW_CATCH_UP_S:.0f} s"
            )
        return self.store.view.topics[name]

    # -- reassignment --------------------------------------------------------------------------

    async def _reassign(
        self, fence: Fence, plan: Sequence[tuple[TopicPartition, Sequence[object]]]
    ) -> dict[TopicPartition, PartitionState]:
        targets = reassignment.check_plan(self.store.view, plan)
        stored = await self._decide_and_write(
            fence,
            list(targets),
            lambda key, state: reassignment.start(
                state, targets[key], self.store.view.restarted(state)
            ),
        )
        for (topic, partition), state in stored.items():
            log.info(
                "%s-%d: reassignment to %s started (adding %s, removing %s)",
                topic,
                partition,
                list(state.target_replicas),
                list(state.adding),
                list(state.removing),
            )
        return stored

    async def _cancel(
        self, fence: Fence, partitions: Sequence[TopicPartition] | None
    ) -> dict[TopicPartition, PartitionState]:
        view = self.store.view
        if partitions is None:
            keys = list(reassignment.moving(view))
        else:
            keys = list(dict.fromkeys(partitions))
            for topic, partition in keys:
                if topic not in view.topics:
                    raise UnknownTopic(f"topic {topic!r} does not exist")
                state = view.partition(topic, partition)
                if state is None:
                    raise UnknownPartition(f"partition {topic}-{partition} does not exist")
                reassignment.cancel(
                    f"{topic}-{partition}",
                    state,
                    self._in_sync(view, topic, partition, state),
                    view.restarted(state),
                )

        def decide(key: TopicPartition, state: PartitionState) -> PartitionState | None:
            if not state.reassigning and partitions is None:
                return None  # completed meanwhile
            view = self.store.view
            return reassignment.cancel(
                f"{key[0]}-{key[1]}", state, self._in_sync(view, *key, state), view.restarted(state)
            )

        stored = await self._decide_and_write(fence, keys, decide)
        for (topic, partition), state in stored.items():
            log.info(
                "%s-%d: reassignment cancelled, back on %s, leader %d in epoch %d",
                topic,
                partition,
                list(state.replicas),
                state.leader,
                state.leader_epoch,
            )
        return stored

    # -- the cluster's shape: balance, decommission, heal ------------------------------------

    async def _sizes(self) -> Mapping[TopicPartition, int]:
        return {} if self.sizes is None else await self.sizes()

    async def _balance(self, fence: Fence, dry_run: bool) -> placement.Plan:
        view = self.store.view
        cluster_shape.check_all_up(view, "balance")
        serving = view.in_service()
        leaving = frozenset(n for n in view.live if n not in serving)
        load = cluster_shape.load(view, await self._sizes(), view.live)
        plan = placement.plan_balance(load, exclude=leaving)
        if not dry_run:
            await self._start_plan(fence, plan, "balance")
        return plan

    async def _decommission(self, fence: Fence, node: int, dry_run: bool) -> placement.Plan:
        view = self.store.view
        cluster_shape.check_decommission(view, node)
        cluster_shape.check_all_up(view, f"decommission node {node}")
        out_of_service = view.live - view.in_service() - {node}
        plan = placement.plan_decommission(
            cluster_shape.load(view, await self._sizes(), view.live | {node}),
            node,
            exclude=out_of_service,
        )
        if not dry_run:
            await self.store.set_node_state(fence, node, DECOMMISSIONING)
            log.warning("node %d is being decommissioned", node)
            await self._start_plan(fence, plan, f"decommission of node {node}")
        return plan

    async def _remove(self, fence: Fence, node: int, dry_run: bool) -> placement.Plan:
        view = self.store.view
        cluster_shape.check_remove(view, node)
        plan = placement.plan_heal(
            cluster_shape.load(view, await self._sizes(), view.live),
            {node},
            exclude=view.live - view.in_service(),
        )
        if not dry_run:
            await self.store.set_node_state(fence, node, REMOVED)
            log.warning(
                "node %d is removed: its replicas of %d partitions are re-created elsewhere",
                node,
                len(plan.targets),
            )
            await self._start_plan(fence, plan, f"heal of node {node}")
        return plan

    async def _start_plan(self, fence: Fence, plan: placement.Plan, what: str) -> None:
        """Start the plan's moves, those of partitions not moving already."""
        view = self.store.view
        moves = [
            (key, list(target))
            for key, target in plan.targets.items()
            if (state := view.partitions.get(key)) is not None and not state.reassigning
        ]
        started = await self._reassign(fence, moves) if moves else {}
        log.info(
            "%s: %d partitions moving, %d bytes to copy", what, len(started), plan.bytes_to_move
        )

    async def _advance_decommissions(self, fence: Fence) -> None:
        """A decommissioning node that holds no replica any more is removed."""
        view = self.store.view
        for node, state in sorted(view.node_states.items()):
            if state == DECOMMISSIONING and not cluster_shape.holding(view, node):
                await self.store.set_node_state(fence, node, REMOVED)
                log.warning("node %d holds no replica any more: decommissioned", node)

    def _next_loss(self) -> float | None:
        """When the first absent node will have been gone replica.lost.timeout.ms."""
        if self.replica_lost_timeout_s is None or not self._absent_since:
            return None
        return min(self._absent_since.values()) + self.replica_lost_timeout_s

    async def _heal_lost(self, fence: Fence) -> None:
        """Remove a node absent longer than replica.lost.timeout.ms (as this controller has
        seen: a new controller starts counting again) and re-create its replicas."""
        if self.replica_lost_timeout_s is None:
            return
        view = self.store.view
        now = asyncio.get_running_loop().time()
        absent = {n for n in view.nodes if n not in view.live and n not in view.node_states}
        for node in list(self._absent_since):
            if node not in absent:
                del self._absent_since[node]
        for node in sorted(absent):
            since = self._absent_since.setdefault(node, now)
            if now - since < self.replica_lost_timeout_s or not cluster_shape.holding(view, node):
                continue
            log.warning(
                "node %d has been gone %.0f s (replica.lost.timeout.ms): removing it",
                node,
                now - since,
            )
            try:
                await self._remove(fence, node, dry_run=False)
            except (InvalidReassignment, ReassignmentInProgress) as exc:
                log.warning("node %d cannot be removed yet: %s", node, exc)
                self._absent_since[node] = now  # try again a timeout later
            return

    async def _balance_if_needed(self, fence: Fence) -> None:
        """The continuous balancer (--balance auto): a balance whenever the cluster is out of
        its bands, every node is up and nothing moves."""
        try:
            plan = await self._balance(fence, dry_run=True)
        except (InvalidReassignment, ReassignmentInProgress):
            return
        if plan.targets and plan.before.worst() > plan.tolerance:
            await self._start_plan(fence, plan, "continuous balance")

    async def _advance_reassignments(self, fence: Fence) -> None:
        """Complete every move whose new replicas have all joined the ISR."""
        view = self.store.view
        changes = []
        for (topic, partition), state in reassignment.moving(view).items():
            new = reassignment.complete(
                state, self._in_sync(view, topic, partition, state), view.restarted(state)
            )
            if new is not None:
                changes.append(
                    Change.decided(view, topic, partition, state, new, self._min_insync(topic))
                )
        for first in range(0, len(changes), MAX_PARTITIONS_PER_WRITE):
            await self._write_all(fence, changes[first : first + MAX_PARTITIONS_PER_WRITE])

    def _min_insync(self, topic: str) -> int:
        """The topic's min.insync.replicas (the default if it is gone meanwhile)."""
        spec = self.store.view.topics.get(topic)
        configs = {} if spec is None else spec.configs
        return self.defaults.with_overrides(configs).min_insync_replicas

    @staticmethod
    def _in_sync(
        view: ClusterView, topic: str, partition: int, state: PartitionState
    ) -> frozenset[int]:
        """The replicas able to lead the partition now: live, its log online there, not in a
        controlled shutdown, and not restarted (or crashed) since its ISR was stored."""
        offline = view.offline_replicas(topic, partition)
        leaving = controlled_shutdown.shutting(view)
        return view.live - offline - leaving - view.restarted(state) - view.crashed(state)

    async def _decide_and_write(
        self,
        fence: Fence,
        keys: Sequence[TopicPartition],
        decide: Callable[[TopicPartition, PartitionState], PartitionState | None],
    ) -> dict[TopicPartition, PartitionState]:
        """Decide each partition's new state from the view and store the changes, up to
        MAX_PARTITIONS_PER_WRITE a transaction; a partition whose state moved meanwhile (a
        leader's ISR change) is decided again on the newer view. Returns the stored states."""
        stored: dict[TopicPartition, PartitionState] = {}
        pending = list(keys)
        for _ in range(TOPIC_WRITE_ATTEMPTS):
            view = self.store.view
            changes = []
            for key in pending:
                state = view.partitions.get(key)
                new = None if state is None else decide(key, state)
                if state is not None and new is not None:
                    changes.append(Change.decided(view, *key, state, new, self._min_insync(key[0])))
            pending = []
            for first in range(0, len(changes), MAX_PARTITIONS_PER_WRITE):
                batch = changes[first : first + MAX_PARTITIONS_PER_WRITE]
                written = await self._write_all(fence, batch)
                for change in batch:
                    key = (change.topic, change.partition)
                    if key in written:
                        stored[key] = written[key]
                    else:
                        pending.append(key)
            if not pending:
                return stored
            await self.store.wait_for(
                functools.partial(
                    _moved_on, {key: view.partitions[key].version for key in pending}
                ),
                VIEW_CATCH_UP_S,
            )
        raise MetadataUnavailable(
            f"{len(pending)} partitions changed under every one of {TOPIC_WRITE_ATTEMPTS} "
            f"attempts to write them, {len(stored)} were written"
        )

    # -- leadership ----------------------------------------------------------------------------

    async def _elect_leaders(self, fence: Fence) -> None:
        """Give every partition whose leader is not available (not live, or reporting the
        partition offline) a new leader, or take it offline; drop the unavailable replicas
        from the ISR of the others; move leaderships and ISR memberships off the nodes that
        shut down (replication.controlled_shutdown)."""
        view = self.store.view
        configs: dict[str, TopicConfig] = {}
        leaderless: list[Change] = []
        shrinks: list[Change] = []
        for (topic, partition), state in view.partitions.items():
            spec = view.topics.get(topic)
            if spec is None:
                continue
            if topic not in configs:
                configs[topic] = self.defaults.with_overrides(spec.configs)
            unclean = configs[topic].unclean_leader_election_enable
            offline = view.offline_replicas(topic, partition)
            restarted = view.restarted(state)
            new = elect_leader(
                state,
                view.live,
                unclean,
                offline,
                restarted,
                view.crashed(state),
                view.reported_log_ends(topic, partition),
            )
            new = controlled_shutdown.decide(view, (topic, partition), state, new)
            if new is not None:
                min_insync = configs[topic].min_insync_replicas
                change = Change.decided(
                    view, topic, partition, state, new, min_insync, offline, restarted
                )
                if not controlled_shutdown.shutting(view).isdisjoint(state.isr):
                    change = replace(change, leaving=controlled_shutdown.shutting(view))
                available = state.leader in view.live - offline - restarted
                moved = new.leader != state.leader  # a controlled shutdown's move: first too
                (shrinks if available and not moved else leaderless).append(change)
        # As Kafka's controller on a broker's loss: first the partitions without a leader
        # (unavailable until written), then the ISR shrinks of the others, each in as few
        # etcd transactions as its limit allows (a node may hold thousands of replicas).
        for changes in (leaderless, shrinks):
            for first in range(0, len(changes), MAX_PARTITIONS_PER_WRITE):
                await self._write_all(fence, changes[first : first + MAX_PARTITIONS_PER_WRITE])

    async def _write_all(
        self, fence: Fence, changes: Sequence[Change]
    ) -> dict[TopicPartition, PartitionState]:
        """Store the changes at once; if one of them moved meanwhile, one by one (that one
        fails alone, and the change that moved it wakes the next pass). Returns the states
        stored."""
        states = [((c.topic, c.partition), c.new) for c in changes]
        stored = await self.store.set_partitions(
            states,
            fence,
            [c.incarnations for c in changes],
            [(c.topic, c.partition) for c in changes if c.recovered],
        )
        if stored is None:
            written = {}
            for change in changes:
                state = await self._write(fence, change)
                if state is not None:
                    written[(change.topic, change.partition)] = state
            return written
        for change, state in zip(changes, stored, strict=True):
            _log_change(change, state)
        return {(c.topic, c.partition): state for c, state in zip(changes, stored, strict=True)}

    async def _rebalance(self, fence: Fence) -> int:
        """Move leadership back to preferred replicas, as many partitions per etcd
        transaction as its limit allows: a node back from a restart may prefer thousands, and
        one write each took 30 s and as many views (each a role change on every node) for the
        333 partitions a node restarted in a 1,000-partition cluster prefers (docs/cluster.md)."""
        view = self.store.view
        changes = []
        for (topic, partition), state in view.partitions.items():
            offline = view.offline_replicas(topic, partition)
            live = view.live - controlled_shutdown.shutting(view)  # none back to a leaving node
            new = elect_preferred(state, live, offline, view.restarted(state))
            if new is not None:
                changes.append(
                    Change.decided(view, topic, partition, state, new, self._min_insync(topic))
                )
        moved = 0
        for first in range(0, len(changes), MAX_PARTITIONS_PER_WRITE):
            batch = changes[first : first + MAX_PARTITIONS_PER_WRITE]
            moved += len(await self._write_all(fence, batch))
        return moved

    async def _write(self, fence: Fence, change: Change) -> PartitionState | None:
        """Store a leadership change; None if the state moved since it was read (the change
        that moved it wakes the next pass, which decides again from the newer state)."""
        topic, partition = change.topic, change.partition
        stored = await self.store.set_partition(
            topic, partition, change.new, fence, change.incarnations, change.recovered
        )
        if stored is None:
            log.info("%s-%d changed while electing; deciding again", topic, partition)
            return None
        _log_change(change, stored)
        return stored


@dataclass(frozen=True)
class Change:
    """A partition's state as read, and the one the controller decided; `offline`: the
    replicas reporting the partition offline, `restarted`: the ISR members whose process
    started since (both named in the log if they caused it); `incarnations`: the new ISR's
    incarnations the decision assumed (the write's guard, KIP-903); `unclean_recovery`:
    every ISR member restarted after a crash, and the new leader is one of them or an eligible
    leader replica; `log_ends`: the log ends its ISR members and eligible leader replicas
    reported meanwhile (named in the log);
    `leaving`: the nodes in a controlled shutdown when it was decided (named in the log)."""

    topic: str
    partition: int
    old: PartitionState
    new: PartitionState
    offline: frozenset[int] = frozenset()
    restarted: frozenset[int] = frozenset()
    incarnations: Mapping[int, int] = field(default_factory=dict)
    unclean_recovery: bool = False
    log_ends: Mapping[int, LogEnd] = field(default_factory=dict)
    leaving: frozenset[int] = frozenset()

    @property
    def recovered(self) -> bool:
        """Whether the change ends the partition's recovery (its log ends go with it)."""
        return bool(self.old.recovering) and not self.new.recovering

    @classmethod
    def decided(
        cls,
        view: ClusterView,
        topic: str,
        partition: int,
        old: PartitionState,
        new: PartitionState,
        min_insync: int,
        offline: frozenset[int] = frozenset(),
        restarted: frozenset[int] = frozenset(),
    ) -> Change:
        """A change decided on `view`, guarded by the incarnations it saw, with the eligible
        leader replicas that follow from its ISR (the topic's `min_insync`)."""
        crashed = view.crashed(old)
        unclean_recovery = new.leader in crashed or (bool(crashed) and new.leader in old.elr)
        return cls(
            topic,
            partition,
            old,
            with_eligible_leaders(old, new, min_insync),
            offline,
            restarted,
            {r: view.registered.get(r, 0) for r in new.isr},
            unclean_recovery,
            view.reported_log_ends(topic, partition) if unclean_recovery else {},
        )


def _moved_on(versions: Mapping[TopicPartition, int], view: ClusterView) -> bool:
    """Whether the view shows each partition at another version than `versions` (or gone)."""
    return all(
        (state := view.partitions.get(key)) is None or state.version != version
        for key, version in versions.items()
    )


def _log_change(change: Change, stored: PartitionState) -> None:
    old = change.old
    failed = sorted(change.offline & {old.leader, *old.isr})
    restarted = sorted(change.restarted)
    notes = []
    if failed:
        notes.append(f"nodes {failed} report its log offline")
    if restarted:
        notes.append(f"nodes {restarted} restarted")
    leaving = sorted(change.leaving & {old.leader, *old.isr})
    if leaving:
        notes.append(f"nodes {leaving} shutting down")
    if change.unclean_recovery:
        ends = change.log_ends
        logs = ", ".join(
            f"node {r} at {ends[r].end_offset} in epoch {ends[r].leader_epoch}"
            for r in (*old.isr, *old.elr)
            if r in ends
        )
        lost = (
            f" (log ends: {logs}): records acknowledged past its end are lost"
            if logs
            else ": what it had acknowledged but not fsynced is lost"
        )
        notes.append(
            f"every in-sync replica restarted after a crash, node {stored.leader} leads{lost} "
            "(KIP-966's unclean recovery)"
        )
    log.log(
        logging.WARNING if failed or change.unclean_recovery else logging.INFO,
        "%s-%d: leader %d -> %d in epoch %d, isr %s%s",
        change.topic,
        change.partition,
        old.leader,
        stored.leader,
        stored.leader_epoch,
        list(stored.isr),
        f" ({'; '.join(notes)})" if notes else "",
    )


def _replica_nodes(view: ClusterView, replication_factor: object) -> list[int]:
    """The nodes to place replicas on (live, in service), sorted; checks the replication factor
    against them."""
    nodes = sorted(view.in_service())
    placement.checked_replication_factor(replication_factor, len(nodes), "live nodes")
    return nodes


def _start_index(view: ClusterView, topic: str, nodes: Sequence[int]) -> int:
    """Where a topic's round-robin starts: the first node at or above partition 0's preferred
    leader (Kafka's rule when it adds partitions)."""
    first = view.partition(topic, 0)
    if first is None:
        return 0
    return next((i for i, node in enumerate(nodes) if node >= first.replicas[0]), 0)


def _initial_state(replicas: tuple[int, ...]) -> PartitionState:
    """A new partition: led by its preferred replica in epoch 0, every replica in sync."""
    return PartitionState(leader=replicas[0], leader_epoch=0, replicas=replicas, isr=replicas)
