"""The fault campaign: random, seeded fault schedules against the shared cluster, each over a
fresh topic with producers of JSON, NDJSON and binary batches with acks=0, 1 and all
(Idempotency-Key retries to any node, replays through another node after a leader change),
partition consumers, pollers, group members (join, fetch, commit), a share group's consumers
(acquire; accept, release, reject, renew, let locks lapse), topic changes (create, config) and
reassignments of the topic (shrink, grow, reorder, throttle, cancel, balance, decommission dry
runs), the schema registry (registers, levels, produces framed with an id just acknowledged
into a topic that validates them) and transactions (over the topic and a side topic, with a
group's offsets; committed, aborted, timed out, zombies) read at read_committed; after each
schedule every fault is healed, every transaction must end, every partition is put back on
every node, the ISR must fill again, the share group must be done with every record, the
checker judges the whole history (see checker.py for the properties), every kind
of operation must succeed again (liveness.py), and the schedule must have injected a fault and
acknowledged records (docs/cluster.md, "The fault campaign").

CI runs a short campaign: the first 6 schedules of a fixed seed, which draw every kind of fault,
every link fault and every target (leader, follower, random node) at least once.
`pytest tests/cluster/test_campaign.py --schedules 200 --fault-seed random` runs a longer
campaign on new schedules, `--fault-seed S` repeats one; the figures are printed at the end of
the run and the full report (every violation, each failing schedule's fault timeline) is
written next to the cluster's data.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import aiohttp
import pytest

from tests.cluster.checker import Verdict, check, judge_settle
from tests.cluster.conftest import DEFAULT_FAULT_SEED, DEFAULT_SCHEDULES, SUMMARY, option
from tests.cluster.harness import (
    ETCD_PREFIX,
    LEASE_TTL_S,
    Cluster,
    LogRecord,
    PartitionState,
    WaitTimeout,
)
from tests.cluster.liveness import NotLive, probe
from tests.cluster.registryload import Registrar
from tests.cluster.schedule import (
    FAULT_WEIGHTS,
    LINK_KINDS,
    FaultLog,
    FaultRunner,
    Schedule,
    make_schedule,
)
from tests.cluster.shareload import ShareConsumers
from tests.cluster.sideload import GroupMembers, Reassigner, SideHistory, TopicAdmin
from tests.cluster.txnload import SIDE_PARTITIONS, Transactions, side_topic
from tests.cluster.workload import ATTEMPT_TIMEOUT_S, History, Workload

PARTITIONS = 3  # preferred leaders on every node
DRAIN_S = 30.0  # after healing, how long producers may still retry before it counts as stuck
FINAL_READ_S = 30.0
FINAL_READ_ATTEMPTS = 3  # reads of the final logs a late move may spoil before it counts as stuck
DETAIL_CHARS = 600  # of each violation the failure message shows
NODE_LOG_LINES = 20  # of each node's log about the topic, in the failure message


@dataclass
class Campaign:
    seed: int
    mechanism: str
    schedules: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    coordinator_faults: Counter[str] = field(default_factory=Counter)  # on the share group's
    skipped: Counter[str] = field(default_factory=Counter)
    ops: Counter[str] = field(default_factory=Counter)
    ops_by: Counter[str] = field(default_factory=Counter)
    attempts: int = 0
    acknowledged: int = 0
    acknowledged_by: Counter[str] = field(default_factory=Counter)
    lost: int = 0
    lost_allowed: Counter[str] = field(default_factory=Counter)
    replays: Counter[str] = field(default_factory=Counter)
    unreplayed: int = 0
    group: Counter[str] = field(default_factory=Counter)
    group_errors: Counter[str] = field(default_factory=Counter)
    topic_ops: Counter[str] = field(default_factory=Counter)
    reassignments: Counter[str] = field(default_factory=Counter)
    registry: Counter[str] = field(default_factory=Counter)
    share: Counter[str] = field(default_factory=Counter)
    share_errors: Counter[str] = field(default_factory=Counter)
    share_drained_s: float = 0.0  # the longest wait for a share group to finish after healing
    txn: Counter[str] = field(default_factory=Counter)
    txn_errors: Counter[str] = field(default_factory=Counter)
    txn_coordinator_faults: Counter[str] = field(default_factory=Counter)
    txn_settled_s: float = 0.0  # the longest wait for every transaction to end after healing
    reassign_refusals: Counter[str] = field(default_factory=Counter)  # "409 CODE" -> calls
    divergences: int = 0
    duplicates: int = 0
    violations: Counter[str] = field(default_factory=Counter)
    failing: list[str] = field(default_factory=list)  # report of each schedule with violations
    report: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)  # the first failing schedule's, in full

    def add(
        self,
        index: int,
        schedule: Schedule,
        faults: FaultLog,
        verdict: Verdict,
        history: History | None,
    ) -> None:
        self.schedules += 1
        self.faults.update(faults.injected)
        self.coordinator_faults.update(faults.coordinator)
        self.txn_coordinator_faults.update(faults.txn_coordinator)
        self.skipped.update(faults.skipped)
        self.ops.update(verdict.ops)
        self.ops_by.update(verdict.ops_by)
        self.attempts += verdict.attempts
        self.acknowledged += verdict.acknowledged
        self.acknowledged_by.update(verdict.acknowledged_by)
        self.lost += verdict.lost
        self.lost_allowed.update(verdict.lost_allowed)
        self.replays.update(verdict.replays)
        self.group.update(verdict.group)
        self.topic_ops.update(verdict.topic_ops)
        self.reassignments.update(verdict.reassignments)
        self.registry.update(verdict.registry)
        self.share.update(verdict.share)
        self.txn.update(verdict.txn)
        if history is not None:
            self.txn_errors.update(history.txn.errors)
            settle = history.txn.settle
            if settle is not None and settle.reached_in is not None:
                self.txn_settled_s = max(self.txn_settled_s, settle.reached_in)
            self.share_errors.update(history.share.errors)
            self.share_drained_s = max(self.share_drained_s, history.share.drained_in)
            self.unreplayed += history.unreplayed
            self.group_errors.update(history.side.group_errors)
            self.reassign_refusals.update(
                f"{op.status} {op.code}"
                for op in history.side.reassign_ops
                if op.outcome == "refused"
            )
        self.divergences += verdict.divergences
        self.duplicates += verdict.duplicates
        self.violations.update(v.kind for v in verdict.violations)
        self.report.append(f"schedule {index} ({schedule})")
        self.report += ["  " + e for e in faults.events]
        self.report += [f"  VIOLATION {v}" for v in verdict.violations]
        if verdict.violations:
            kinds = Counter(v.kind for v in verdict.violations)
            self.failing.append(
                f"schedule {index} ({schedule}): "
                + ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items()))
            )

    def figures(self, wall_s: float) -> list[str]:
        faults = ", ".join(f"{k} {n}" for k, n in sorted(self.faults.items())) or "none"
        ops = ", ".join(f"{k} {n}" for k, n in sorted(self.ops.items()))
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.violations.items())) or "none"
        r = self.reassignments
        refused = sum(n for k, n in r.items() if k.endswith(" refused"))
        unknown = sum(n for k, n in r.items() if k.endswith(" unknown"))
        lines = [
            f"fault campaign: seed {self.seed}, partitions cut by {self.mechanism}, "
            f"{wall_s:.0f} s wall time",
            f"  schedules: {self.schedules}",
            f"  faults injected: {sum(self.faults.values())} ({faults})",
            f"  produce requests: {sum(self.ops.values())} ({ops}), {self.attempts} attempts",
            "    by acks: "
            + ", ".join(f"{a} {self.ops_by[f'acks={a}']}" for a in MODES)
            + "; by format: "
            + ", ".join(f"{f} {self.ops_by[f]}" for f in ("json", "ndjson", "binary")),
            f"  records acknowledged: {self.acknowledged} ("
            + ", ".join(f"acks={a} {self.acknowledged_by[a]}" for a in MODES)
            + ")",
            f"  lost: {self.lost} (acks=all), {self.lost_allowed['1']} (acks=1, allowed), "
            f"{self.lost_allowed['0']} (acks=0, allowed)",
            f"  replays through another node after a leader change: {self.replays['sent']} "
            f"(same answer {self.replays['same answer']}, stored again after a loss "
            f"{self.replays['stored again after a loss']}; {self.unreplayed} picked saw no "
            "leader change)",
            f"  group members: {self.group['joins']} joins, {self.group['fetches']} fetches, "
            f"{self.group['commits']} commits, failed calls: {_counts(self.group_errors)}; "
            f"{self.group['committed partitions']} committed offsets read back",
            f"  topic changes: {_counts(self.topic_ops)}",
            f"  reassignments: moves started {r['started']} (completed {r['completed']}, "
            f"cancelled {r['cancelled']}), {refused} calls refused, {unknown} unanswered; "
            f"partitions put back after healing {r['restored']}",
            "    calls: "
            + _counts(Counter({k: n for k, n in r.items() if " " in k}))
            + f"; refused: {_counts(self.reassign_refusals)}",
            f"  schema registry: registers {_counts(self._registry('new'))}; again "
            f"{_counts(self._registry('again'))}; level changes {_counts(self._registry('config'))}"
            f"; validated produces {_counts(self._registry('produce'))}",
            f"    on the share group's coordinator: {_counts(self.coordinator_faults)}",
            f"  share group: {self.share['deliveries']} deliveries ({self.share['delivered again']}"
            f" again), {self.share['joins']} joins, {self.share['left to lapse']} left to lapse; "
            "acknowledgements: "
            + _counts(Counter({k[4:]: n for k, n in self.share.items() if k.startswith("ack ")}))
            + f"; failed calls: {_counts(self.share_errors)}; done at most "
            f"{self.share_drained_s:.1f} s after the final log end was known",
            f"  transactions: {self.txn['committed']} committed (commit answered), "
            f"{self.txn['aborted']} surely aborted, {self.txn['unknown']} of unknown outcome; "
            "by mode: " + _counts(self._txn("mode ")),
            "    calls: " + _counts(self._txn("", modes=False)),
            f"    reads at read_committed: {self.txn['reads']} during the faults, "
            f"{self.txn['reads final']} final; failed calls: {_counts(self.txn_errors)}; every "
            f"transaction ended at most {self.txn_settled_s:.1f} s after healing",
            f"    on a transaction coordinator: {_counts(self.txn_coordinator_faults)}",
            f"  divergences: {self.divergences}",
            f"  duplicates: {self.duplicates}",
            f"  violations by kind: {kinds}",
        ]
        if self.skipped:
            lines.append(f"  faults skipped (no target up): {dict(self.skipped)}")
        lines += ["  " + f for f in self.failing[:20]]
        return lines

    def _txn(self, prefix: str, modes: bool = True) -> Counter[str]:
        """The transaction counters under `prefix` (modes, or the calls by answer)."""
        if modes:
            return Counter(
                {k[len(prefix) :]: n for k, n in self.txn.items() if k.startswith(prefix)}
            )
        calls = ("begin ", "produce ", "offsets ", "commit ", "abort ")
        return Counter({k: n for k, n in self.txn.items() if k.startswith(calls)})

    def _registry(self, kind: str) -> Counter[str]:
        """The registry calls of one kind by outcome."""
        return Counter(
            {k.split(" ", 1)[1]: n for k, n in self.registry.items() if k.startswith(kind + " ")}
        )


MODES = ("all", "1", "0")


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{k} {n}" for k, n in sorted(counter.items())) or "none"


def _states(
    changes: list[tuple[bytes, bytes | None, int]], topic: str
) -> dict[int, list[PartitionState | None]]:
    prefix = f"{ETCD_PREFIX}/partitions/{topic}/".encode()
    out: dict[int, list[PartitionState | None]] = {p: [] for p in range(PARTITIONS)}
    for key, value, revision in changes:
        p = int(key[len(prefix) :])
        out[p].append(None if value is None else PartitionState.parse(value, revision))
    return out


def _stuck(what: str, cluster: Cluster, topic: str) -> Verdict:
    verdict = Verdict()
    states = []
    for p in range(PARTITIONS):
        try:
            states.append(str(cluster.etcd.partition(topic, p)))
        except Exception as exc:
            states.append(repr(exc))
    verdict.add("stuck", f"{what}; etcd states: {states}")
    return verdict


def _full_replicas(cluster: Cluster, topic: str) -> dict[int, tuple[int, ...]] | None:
    """Each partition's replicas, if every partition is on every node and none moves."""
    states = [cluster.etcd.partition(topic, p) for p in range(PARTITIONS)]
    if any(
        s is None or s.adding or s.removing or len(set(s.replicas)) < cluster.size for s in states
    ):
        return None
    return {p: s.replicas for p, s in enumerate(states) if s is not None}


async def _read_final_logs(
    cluster: Cluster,
    reassigner: Reassigner,
    topic: str,
    final_end: dict[int, int],
    faults: FaultLog,
) -> dict[int, dict[int, list[LogRecord]]] | None:
    """Each node's log of each partition below its final end, read while every partition is on
    every node and none changes its replicas. A move the reassigner sent without an answer may
    still land after the settle, and a replica it drops deletes its log as the checker reads
    it: then settle again and read again (bounded). None if it never held still."""
    for _ in range(FINAL_READ_ATTEMPTS):
        before = await asyncio.to_thread(_full_replicas, cluster, topic)
        if before is not None:
            logs = {
                node: {
                    p: [r for r in cluster.replica_log(node, topic, p) if r.offset < final_end[p]]
                    for p in range(PARTITIONS)
                }
                for node in range(cluster.size)
            }
            if await asyncio.to_thread(_full_replicas, cluster, topic) == before:
                return logs
        faults.events.append("a late move changed the replicas: settle and read the logs again")
        if not await reassigner.settle(PARTITIONS):
            return None
        try:
            rows = await asyncio.to_thread(cluster.wait_in_sync, topic, PARTITIONS)
        except WaitTimeout:
            return None
        if {row["partition"]: row["end"] for row in rows} != final_end:
            return None
    return None


async def run_schedule(
    cluster: Cluster,
    session: aiohttp.ClientSession,
    index: int,
    seed: int,
) -> tuple[Schedule, FaultLog, Verdict, History]:
    rng = random.Random(seed)
    schedule = make_schedule(seed, PARTITIONS)
    topic = topic_of(index, seed)
    start_revision = await asyncio.to_thread(cluster.etcd.revision)
    await asyncio.to_thread(
        cluster.create_topic, topic, PARTITIONS, via=rng.randrange(cluster.size)
    )
    await asyncio.to_thread(cluster.wait_topic_everywhere, topic)
    await asyncio.to_thread(cluster.create_topic, side_topic(topic), SIDE_PARTITIONS)
    await asyncio.to_thread(cluster.wait_topic_everywhere, side_topic(topic))
    history = History(topic, PARTITIONS, side=SideHistory(f"group-{topic}"))
    history.share.group = f"share-{topic}"
    faults = FaultLog()
    workload = Workload(cluster, history, rng, session)
    members = GroupMembers(
        cluster, history.side, random.Random(seed + 2), session, topic, history.now
    )
    admin = TopicAdmin(cluster, history.side, random.Random(seed + 3), session, topic, history.now)
    reassigner = Reassigner(
        cluster, history.side, random.Random(seed + 4), session, topic, history.now
    )
    reassigner.timeline = faults.events
    registrar = Registrar(
        cluster, history.registry, random.Random(seed + 5), session, topic, history.now
    )
    share = ShareConsumers(
        cluster, history.share, random.Random(seed + 6), session, topic, history.now
    )
    txn = Transactions(cluster, history.txn, random.Random(seed + 7), session, topic, history.now)
    await asyncio.to_thread(registrar.create_topic)
    runner = FaultRunner(
        cluster,
        topic,
        random.Random(seed + 1),
        faults,
        history.now,
        PARTITIONS,
        history.share.group,
        Transactions.ids(topic),
    )

    async def snapshot_midway() -> None:
        for at in sorted(rng.uniform(1.0, 5.0) for _ in range(2)):
            await asyncio.sleep(max(0.0, at - history.now()))  # timers of the schedule
            await workload.snapshot()

    workload.start()
    members.start()
    admin.start()
    reassigner.start()
    registrar.start()
    share.start()
    txn.start()
    final_end: dict[int, int] | None = None
    stuck: Verdict | None = None
    # Its consumers accept what is left while the final reads go on, then leave.
    share_drain: asyncio.Task[None] | None = None
    try:
        await asyncio.gather(runner.run(schedule), snapshot_midway())
        workload.stop_new.set()
        share.draining = True  # from now on its consumers accept what they acquire
        txn.stop_new()  # from now on its producers end what they began, and begin nothing
        faults.events.append(f"{history.now():6.2f}s heal everything")
        await asyncio.gather(
            members.close(),
            admin.close(),
            reassigner.close(),
            registrar.close(),
            asyncio.to_thread(cluster.heal),
        )
        faults.events.append(f"{history.now():6.2f}s healed")
        healed_at = asyncio.get_running_loop().time()
        # Every partition back on every node before the final logs are read from each.
        settled = await reassigner.settle(PARTITIONS)
        workload.give_up_at = time.monotonic() + DRAIN_S
        if not settled:
            stuck = judge_settle(history.side)
        elif not await workload.producers_done(DRAIN_S + ATTEMPT_TIMEOUT_S + 1):
            stuck = _stuck(f"producers still failing {DRAIN_S:.0f} s after healing", cluster, topic)
        elif not await workload.replays_done(DRAIN_S + ATTEMPT_TIMEOUT_S + 1):
            stuck = _stuck(f"replays still failing {DRAIN_S:.0f} s after healing", cluster, topic)
        else:
            # Every transaction ends before the log ends are read: no marker lands past them.
            await txn.drain(healed_at, DRAIN_S)
            faults.events.append(f"{history.now():6.2f}s transactions: {txn.settled()}")
            try:
                rows = await asyncio.to_thread(cluster.wait_in_sync, topic, PARTITIONS)
            except WaitTimeout as exc:
                stuck = _stuck(str(exc), cluster, topic)
            else:
                final_end = {row["partition"]: row["end"] for row in rows}
                faults.events.append(f"{history.now():6.2f}s in sync, log ends {final_end}")
                workload.read_until = final_end
                share_drain = asyncio.create_task(share.drain(final_end))
                if not await workload.consumers_done(FINAL_READ_S):
                    stuck = _stuck("consumers could not read up to the log end", cluster, topic)
    except BaseException:
        await _stop_share(share, share_drain)
        raise
    finally:
        await asyncio.gather(
            members.close(),
            admin.close(),
            reassigner.close(),
            registrar.close(),
            workload.close(),
            txn.close(),
        )
    if stuck is not None or final_end is None or share_drain is None:
        await _stop_share(share, share_drain)
        await registrar.drain(0.0)
        verdict = stuck or Verdict()
        verdict.ops = Counter(op.outcome for op in history.ops)
        return schedule, faults, verdict, history
    await asyncio.gather(
        members.read_final(PARTITIONS),
        admin.read_final(),
        registrar.drain(),
        share_drain,
        txn.read_final(),
    )
    await registrar.read_final()
    faults.events.append(
        f"{history.now():6.2f}s group offsets, topics and registry read back; share group "
        f"done {share.side.drained_in:.1f} s after the log ends were known: {share.side.note}"
    )
    final_logs = await _read_final_logs(cluster, reassigner, topic, final_end, faults)
    if final_logs is None:
        verdict = _stuck(
            "partitions kept changing replicas while their logs were read", cluster, topic
        )
        verdict.ops = Counter(op.outcome for op in history.ops)
        return schedule, faults, verdict, history
    changes = await asyncio.to_thread(
        cluster.etcd.history, f"{ETCD_PREFIX}/partitions/{topic}/".encode(), start_revision + 1
    )
    verdict = check(history, final_logs, final_end, _states(changes, topic))
    if not faults.injected:
        verdict.add("no-fault", f"none of the schedule's faults was injected: {faults.events}")
    if verdict.acknowledged == 0:
        verdict.add("nothing-acknowledged", "the schedule acknowledged no record")
    try:
        faults.events += [
            f"{history.now():6.2f}s live: {d}"
            for d in await probe(cluster, session, topic, PARTITIONS)
        ]
    except NotLive as exc:
        verdict.add("not-live", str(exc))
    if not verdict.violations:
        response = await asyncio.to_thread(
            cluster.http.delete, cluster.url(0) + f"/v1/topics/{topic}"
        )
        assert response.status_code == 204, response.text
        await admin.delete()
        await share.delete()
        await txn.delete()
        await asyncio.to_thread(
            cluster.http.delete, cluster.url(0) + f"/v1/topics/{registrar.validated}"
        )
    return schedule, faults, verdict, history


async def _stop_share(share: ShareConsumers, drain: asyncio.Task[None] | None) -> None:
    """The share group's consumers stop (a drain under way ends with them)."""
    await share.close()
    if drain is not None:
        await asyncio.gather(drain, return_exceptions=True)


async def run_campaign(cluster: Cluster, campaign: Campaign, schedules: range) -> None:
    seeds = schedule_seeds(campaign.seed)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        for index in range(schedules.stop):
            schedule_seed = next(seeds)
            if index not in schedules:
                continue
            history: History | None = None
            try:
                schedule, faults, verdict, history = await run_schedule(
                    cluster, session, index, schedule_seed
                )
            except Exception as exc:  # the schedule could not run to its end: say so, go on
                schedule = make_schedule(schedule_seed, PARTITIONS)
                faults = FaultLog()
                verdict = Verdict()
                verdict.add("error", f"{type(exc).__name__}: {exc}")
            campaign.add(index, schedule, faults, verdict, history)
            if verdict.violations and not campaign.evidence:
                campaign.evidence = await asyncio.to_thread(
                    _evidence, cluster, index, schedule, faults, verdict, schedule_seed
                )
            if any(v.kind in ("stuck", "error") for v in verdict.violations):
                await asyncio.to_thread(cluster.heal)  # if even this fails, the campaign stops


def topic_of(index: int, seed: int) -> str:
    """The topic a schedule runs on (new for each)."""
    return f"campaign-{index}-{seed}"


def _evidence(
    cluster: Cluster,
    index: int,
    schedule: Schedule,
    faults: FaultLog,
    verdict: Verdict,
    seed: int,
) -> list[str]:
    """A failing schedule's account for the failure message (CI keeps no files): its
    timeline, its violations and what each node logged about its topic last."""
    topic = topic_of(index, seed)
    lines = [f"schedule {index} ({schedule}), in full:"]
    lines += ["  " + e for e in faults.events]
    lines += [f"  VIOLATION {str(v)[:DETAIL_CHARS]}" for v in verdict.violations]
    for node in cluster.nodes:
        path = node.data_dir.parent / f"node-{node.node_id}.log"
        try:
            text = path.read_text(errors="replace")
        except OSError as exc:
            lines.append(f"  node {node.node_id}'s log: {exc}")
            continue
        about = [line for line in text.splitlines() if topic in line][-NODE_LOG_LINES:]
        lines.append(f"  node {node.node_id}'s last {len(about)} log lines about {topic}:")
        lines += ["    " + line for line in about]
    return lines


def schedule_seeds(seed: int) -> Iterator[int]:
    """The seeds of a campaign's schedules, in order, drawn from the campaign's own."""
    rng = random.Random(seed)
    while True:
        yield rng.randrange(2**31)


def test_the_default_campaign_draws_every_kind_of_fault() -> None:
    """CI's short campaign still draws each fault the schedules know, each link fault, each
    target of a node fault, and kills whose node comes back before its lease runs out and
    after."""
    seeds = itertools.islice(schedule_seeds(DEFAULT_FAULT_SEED), DEFAULT_SCHEDULES)
    steps = [step for seed in seeds for step in make_schedule(seed, PARTITIONS).steps]
    assert {step.kind for step in steps} == set(FAULT_WEIGHTS)
    assert {step.link for step in steps if step.kind == "link"} == set(LINK_KINDS)
    node_faults = ("sigkill", "sigstop", "lose-unsynced")
    targets = {step.target for step in steps if step.kind in node_faults}
    assert targets == {"random", "leader", "follower"}
    kills = ("sigkill", "controller-kill", "lose-unsynced")
    back = {step.duration > LEASE_TTL_S for step in steps if step.kind in kills}
    assert back == {False, True}


def test_fault_campaign(cluster: Cluster, request: pytest.FixtureRequest) -> None:
    schedules = int(str(option(request.config, "schedules", DEFAULT_SCHEDULES)))
    given = str(option(request.config, "fault_seed", DEFAULT_FAULT_SEED))
    seed = random.SystemRandom().randrange(2**31) if given == "random" else int(given)
    cluster.heal()
    campaign = Campaign(seed, cluster.topology.mechanism)
    started = time.monotonic()
    report = cluster.workdir / "campaign-report.txt"
    first = int(str(option(request.config, "from_schedule", 0)))
    try:
        asyncio.run(run_campaign(cluster, campaign, range(first, schedules)))
    finally:
        report.write_text("\n".join(campaign.report) + "\n")
        SUMMARY.extend(campaign.figures(time.monotonic() - started))
        SUMMARY.append(f"  full report: {report}")
    assert campaign.schedules == len(range(first, schedules))
    assert not campaign.violations, (
        f"{sum(campaign.violations.values())} violations over {schedules} schedules "
        f"(seed {seed}; rerun with --fault-seed {seed}): {dict(campaign.violations)}; "
        f"see {report}\n" + "\n".join(campaign.failing[:20] + campaign.evidence)
    )
