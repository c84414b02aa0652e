"""Random fault schedules (seeded) and their execution against the running cluster.

A schedule is a few faults, each starting at a time within the first seconds and lasting a
while; its target is resolved when it fires (a random node that is up, the current leader of a
partition, the controller), so the schedule stays meaningful whatever happened before it.
Every fault is undone at its end (restart, SIGCONT, link healed); the campaign heals whatever
remains before checking. A fault that hits the share group's coordinator (the node leading its
state partition), or a transactional id's, says so, and is counted apart.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from engine.internal_topics import SHARE_GROUP_STATE, TRANSACTION_STATE
from engine.offsets_topic import partition_for
from tests.cluster.harness import (
    ETCD_PREFIX,
    LEASE_TTL_S,
    NO_LEADER,
    REPLICA_LAG_TIME_MAX_MS,
    Cluster,
)
from tests.cluster.netfaults import LinkFault
from tests.cluster.powercut import lose_unsynced

PAST_TIMEOUTS_S = max(LEASE_TTL_S, REPLICA_LAG_TIME_MAX_MS / 1000) + 0.5
FLAP_WAIT_S = 10.0  # bound of a leader-flap round's wait for the next leader


@dataclass(frozen=True)
class FaultStep:
    """kind: sigkill | lose-unsynced | sigstop | link | controller-kill | controller-stop |
    leader-flap.
    target (node faults): random | leader | follower. partition: for leader/follower/flap."""

    at: float
    kind: str
    duration: float
    target: str = "random"
    partition: int = 0
    link: str = ""  # link fault kind
    rounds: int = 0  # leader-flap rounds

    def __str__(self) -> str:
        what = self.kind
        if self.kind in ("sigkill", "lose-unsynced", "sigstop"):
            what += f" {self.target}"
        if self.kind == "link":
            what += f" {self.link}"
        if self.kind == "leader-flap":
            what += f" x{self.rounds}"
        return f"{what} @{self.at:.1f}s for {self.duration:.1f}s"


@dataclass
class Schedule:
    seed: int
    steps: list[FaultStep]

    def __str__(self) -> str:
        return f"seed {self.seed}: " + ", ".join(map(str, self.steps))


LINK_KINDS = ("cut", "blackhole", "one-way", "isolate", "etcd")


# Fault kinds and their weights in a schedule.
FAULT_WEIGHTS = {
    "sigkill": 3,
    "sigstop": 3,
    "link": 4,
    "controller-kill": 1,
    "controller-stop": 1,
    "leader-flap": 1,
    "lose-unsynced": 2,
}


def make_schedule(seed: int, partitions: int) -> Schedule:
    """A seeded schedule of 2 to 4 faults drawn by FAULT_WEIGHTS."""
    rng = random.Random(seed)
    kinds = list(FAULT_WEIGHTS)
    steps = []
    for _ in range(rng.choice((2, 2, 3, 3, 4))):
        kind = rng.choices(kinds, weights=[FAULT_WEIGHTS[k] for k in kinds])[0]
        at = rng.uniform(0.3, 3.5)
        partition = rng.randrange(partitions)
        target = rng.choice(("random", "leader", "leader", "follower"))
        if kind in ("sigkill", "controller-kill", "lose-unsynced"):
            # A restart before the lease runs out (the node comes back in the same epoch) or after.
            duration = rng.uniform(0.3, 3.5)
        elif kind in ("sigstop", "controller-stop"):
            duration = rng.uniform(PAST_TIMEOUTS_S, PAST_TIMEOUTS_S + 1.0)
        elif kind == "link":
            duration = rng.uniform(1.0, 3.5)
        else:
            duration = 0.0
        steps.append(
            FaultStep(
                at,
                kind,
                duration,
                target=target,
                partition=partition,
                link=rng.choice(LINK_KINDS),
                rounds=rng.randint(2, 3),
            )
        )
    return Schedule(seed, sorted(steps, key=lambda s: s.at))


@dataclass
class FaultLog:
    injected: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    coordinator: Counter[str] = field(default_factory=Counter)  # the injected that hit it
    txn_coordinator: Counter[str] = field(default_factory=Counter)  # ... a transaction's
    events: list[str] = field(default_factory=list)


class FaultRunner:
    """Runs a schedule's steps concurrently against the cluster of one topic."""

    def __init__(
        self,
        cluster: Cluster,
        topic: str,
        rng: random.Random,
        log: FaultLog,
        clock: Callable[[], float],
        partitions: int,
        share_group: str = "",
        transactional_ids: tuple[str, ...] = (),
    ) -> None:
        self.cluster = cluster
        self.topic = topic
        self.partitions = partitions
        self.share_group = share_group
        self.transactional_ids = transactional_ids
        self.rng = rng
        self.log = log
        self.clock = clock
        self.busy: set[int] = set()  # nodes a running step is acting on

    def _note(self, text: str) -> None:
        self.log.events.append(f"{self.clock():6.2f}s {text}")

    async def run(self, schedule: Schedule) -> None:
        await asyncio.gather(*(self._step(step) for step in schedule.steps))

    async def _step(self, step: FaultStep) -> None:
        await asyncio.sleep(step.at)  # a timer of the schedule, not a synchronisation
        if step.kind in ("sigkill", "sigstop"):
            node = await self._target(step.target, step.partition)
            await self._node_fault(step.kind, node, step.duration, step.kind)
        elif step.kind == "lose-unsynced":
            node = await self._target(step.target, step.partition)
            if node is not None and self.busy:
                node = None  # one node loses its tail at a time (docs/cluster.md says why)
            await self._node_fault("sigkill", node, step.duration, step.kind)
        elif step.kind in ("controller-kill", "controller-stop"):
            node = await self._controller()
            signal = "sigkill" if step.kind == "controller-kill" else "sigstop"
            await self._node_fault(signal, node, step.duration, "controller-loss")
        elif step.kind == "link":
            await self._link_fault(step)
        elif step.kind == "leader-flap":
            await self._flap(step)

    def _available(self) -> list[int]:
        return [i for i in range(self.cluster.size) if self.cluster.up(i) and i not in self.busy]

    async def _target(self, rule: str, partition: int) -> int | None:
        candidates = self._available()
        if rule == "random":
            return self.rng.choice(candidates) if candidates else None
        state = await asyncio.to_thread(self.cluster.etcd.partition, self.topic, partition)
        if state is None:
            return None
        if rule == "leader":
            return state.leader if state.leader in candidates else None
        followers = [r for r in state.replicas if r != state.leader and r in candidates]
        return self.rng.choice(followers) if followers else None

    async def _controller(self) -> int | None:
        for i in self._available():
            try:
                view = await asyncio.to_thread(self.cluster.view, i)
            except Exception:
                continue
            controller = view.get("controller")
            return controller if controller in self._available() else None
        return None

    async def _node_fault(self, signal: str, node: int | None, duration: float, kind: str) -> None:
        if node is None:
            self.log.skipped[kind] += 1
            self._note(f"{kind}: no node to fault")
            return
        self.busy.add(node)
        try:
            name = kind if kind != signal else signal.upper()
            self.log.injected[name] += 1
            label = kind + await self._coordinating(name, (node,))
            if signal == "sigkill":
                self._note(f"SIGKILL node {node} ({label})")
                self.cluster.kill(node)
                if kind == "lose-unsynced":
                    cut = await asyncio.to_thread(
                        lose_unsynced,
                        self.cluster.nodes[node].data_dir,
                        self.topic,
                        self.partitions,
                    )
                    self._note(f"node {node} lost its unsynced tail: {cut}")
                await asyncio.sleep(duration)
                if not self.cluster.running(node):
                    self._note(f"restart node {node}")
                    await asyncio.to_thread(self.cluster.restart, node)
            else:
                self._note(f"SIGSTOP node {node} ({label})")
                self.cluster.pause(node)
                await asyncio.sleep(duration)
                self._note(f"SIGCONT node {node}")
                self.cluster.resume(node)
        finally:
            self.busy.discard(node)

    async def _coordinating(self, kind: str, nodes: tuple[int, ...]) -> str:
        """Whether a fault of `kind` on `nodes` hits the share group's coordinator or a
        transactional id's: counted, and said in the timeline (what to add to the fault's
        note)."""
        note = ""
        if self.share_group:
            coordinator = await asyncio.to_thread(
                self._coordinator, SHARE_GROUP_STATE, self.share_group
            )
            if coordinator in nodes:
                self.log.coordinator[kind] += 1
                note += f", the share group's coordinator {coordinator}"
        hit = []
        for tid in self.transactional_ids:
            coordinator = await asyncio.to_thread(self._coordinator, TRANSACTION_STATE, tid)
            if coordinator in nodes:
                hit.append(f"{tid}'s {coordinator}")
        if hit:
            self.log.txn_coordinator[kind] += 1
            note += ", the transaction coordinator of " + ", ".join(hit)
        return note

    def _coordinator(self, state_topic: str, key: str) -> int | None:
        """The leader of `key`'s partition of a coordinator's state topic (None before the
        topic is made)."""
        prefix = f"{ETCD_PREFIX}/partitions/{state_topic}/"
        try:
            kvs, _ = self.cluster.etcd.range(prefix.encode())
            if not kvs:
                return None
            p = partition_for(key, len(kvs))
            state = self.cluster.etcd.partition(state_topic, p)
        except (httpx.HTTPError, OSError, ValueError, KeyError):
            return None
        return None if state is None else state.leader

    async def _link_fault(self, step: FaultStep) -> None:
        size = self.cluster.size
        leader = await self._target("leader", step.partition)
        a = leader if leader is not None and self.rng.random() < 0.6 else self.rng.randrange(size)
        if step.link in ("isolate", "etcd"):
            fault = LinkFault(step.link, a)
        else:
            b = self.rng.choice([n for n in range(size) if n != a])
            fault = (
                LinkFault(step.link, a, b)
                if self.rng.random() < 0.5
                else LinkFault(step.link, b, a)
            )
        self.log.injected[f"partition:{step.link}"] += 1
        nodes = (fault.a,) if fault.b is None else (fault.a, fault.b)
        on = await self._coordinating(f"partition:{step.link}", nodes)
        self._note(f"network fault {fault}{on}")
        await asyncio.to_thread(self.cluster.topology.apply, fault)
        await asyncio.sleep(step.duration)
        self._note(f"heal {fault}")
        await asyncio.to_thread(self.cluster.topology.revert, fault)

    async def _flap(self, step: FaultStep) -> None:
        """Back-to-back leader changes: stop the leader until another is elected, resume it, and
        at once do the same to the new leader."""
        p = step.partition
        for _ in range(step.rounds):
            state = await asyncio.to_thread(self.cluster.etcd.partition, self.topic, p)
            if state is None or state.leader == NO_LEADER or state.leader not in self._available():
                self.log.skipped["leader-flap"] += 1
                self._note("leader-flap: no leader to stop")
                return
            old, epoch = state.leader, state.leader_epoch
            self.busy.add(old)
            try:
                self.log.injected["leader-flap"] += 1
                on = await self._coordinating("leader-flap", (old,))
                self._note(f"leader-flap: SIGSTOP leader {old} of p{p} (epoch {epoch}){on}")
                self.cluster.pause(old)
                loop = asyncio.get_running_loop()
                deadline = loop.time() + FLAP_WAIT_S
                while loop.time() < deadline:
                    now = await asyncio.to_thread(self.cluster.etcd.partition, self.topic, p)
                    if now is not None and now.leader_epoch > epoch:
                        self._note(
                            f"leader-flap: p{p} epoch {now.leader_epoch} leader {now.leader}"
                        )
                        break
                    await asyncio.sleep(0.05)
            finally:
                self._note(f"leader-flap: SIGCONT node {old}")
                self.cluster.resume(old)
                self.busy.discard(old)
