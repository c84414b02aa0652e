"""The checker: judges one schedule's whole history (client calls and outcomes, consumer reads,
each node's reports, the replicas' logs on disk, the partition states' history in etcd).

Properties (each violation names one):
- lost: a record acknowledged (200) with acks=all is not in the final log at the offset its
  answer gave; one ISR replica always keeps its data (a lost-unsynced fault hits one node at a
  time). acks=1 and acks=0 records (acknowledged once the leader appended them: 200, and 202
  with the offsets) may be lost, counted apart per mode, but only in a partition whose leader
  changed during the schedule (only a deposed leader's unreplicated tail is truncated).
- reordered: a request's records in one partition are not at consecutive offsets in request
  order, or a producer's request answered before its next one was sent got a later offset
  than that next one (both stored where their answers said), whatever the acks.
- refused-but-appended: records appended by an attempt that was answered with a definite
  refusal (NOT_ENOUGH_REPLICAS "appends nothing", 4xx): the request's marker in the log holds
  the clock of the node that built the batch, which falls within that attempt only; or records
  of a request whose every attempt was refused.
- duplicate: a record of one request appears more than once (with an Idempotency-Key, however
  often it was retried; without one, it was sent once).
- divergence: two replicas (or one replica at two times) differ at an offset below both high
  watermarks; consumer reads count as replicas below the leader's high watermark.
- read-changed: a record a consumer read is not in the final log at its offset.
- offsets: a replica's log is not contiguous, increasing offsets; epochs not monotonic.
- hw-regressed: a high watermark reported by one node in one run went back (describe reports of
  its own replica, and fetches pinned to it as leader, ordered in real time).
- epoch / leader-per-epoch / isr / unclean-leader: the partition states stored in etcd: epochs
  only rise, one leader per epoch, the ISR never empty, within the replicas and holding the
  leader, every new leader from the previous ISR or its eligible leader replicas (KIP-966:
  members that left it below min.insync.replicas; unclean election is off); every epoch a
  log holds was stored with a leader.
- out-of-range / idempotency-reuse: a committed offset answered 416; an identical retry (or
  replay) answered IDEMPOTENCY_KEY_REUSED.
- replay-changed: an acknowledged request sent again with its Idempotency-Key through another
  node after its partition's leader changed got other offsets than the first answer while the
  first answer's records are still stored (the replay appending them again is a duplicate).
- commit-ahead / commit-regressed: a group commit (answered, or read back after healing) is past
  the partition's final high watermark; a member's commits of a partition within one generation
  go back. Records the members were delivered count as consumer reads (divergence,
  read-changed).
- unclean-error / topic-lost / topic-mismatch / refused-but-created / config-lost: a topic
  creation or config change answered an error without a problem+json body naming its code; a
  created topic missing on a node after healing, or any topic there with other partitions than
  asked; a topic whose creation was refused (4xx) exists; a node's retention.ms after healing is
  neither the last acknowledged change nor one sent after it or left without an answer.
- reassignment-lost / reassignment-stuck / rf-not-restored / decommission-accepted /
  unclean-error: a move answered 2xx (a reassignment, or a balance's move of the schedule's
  topic) that etcd does not show completed (its first state stored after the call was sent,
  then the first that moves nothing on its target) and that no cancel of the partition sent
  after it may have undone (answered 200, or without an answer); after settling, a partition still
  moving, or on fewer nodes than the replication factor; a decommission (even a dry run)
  answered 2xx on a cluster whose widest partition spans every node; a reassignment call
  answered an error without a problem+json code. A node whose replica of a partition a
  reassignment removed (its copy deleted, maybe re-created empty) is not held to its earlier
  high watermark reports of that partition (hw-regressed, and a snapshot's log against its
  reported high watermark): the checker cannot tell which copy a report describes.
- share-not-done / share-delivered-again / share-count-regressed / share-count-over-limit /
  share-double-held: the share group (shareload.py). Once the faults stopped, every record of
  the final log is accepted or archived (each share-partition's start offset reaches the final
  log end within the bound); a record is never delivered again once an answer said it was
  done (an accept or reject answered ok, a release answered ok at the delivery limit, a
  refusal ALREADY_ACKNOWLEDGED), nor with a higher delivery count than an accept or reject
  answered ok; a record delivered by an acquire sent after another's answer has a higher
  delivery count, and none has a count outside 1..the limit; no record is held by two
  deliveries whose locks are both in force (each from its acquire, the lock's deadline minus
  its duration, to its deadline or a renewal's answered, cut where a release, accept or reject
  of it or its member's leave was sent; a few ms allowed for the clocks). Delivered records
  are consumer reads too (divergence, read-changed).
- txn-torn / txn-commit-lost / txn-aborted-read / txn-past-lso / txn-offsets / txn-hung /
  txn-refused:
  the transactions (txnload.py). Read at read_committed from the start once everything
  settled, a transaction shows all of its acknowledged records or none of them (a record of it
  shown, answered or not, means it committed), and all of them when its commit was answered
  CompleteCommit or PrepareCommit; no read at read_committed (a partition's, during the faults
  or the final one, or a group member's) shows a record of a transaction whose abort was
  answered, that was answered TRANSACTION_TIMED_OUT, or whose producer was fenced before its
  commit (a newer begin of its id answered before its commit was first sent, or no commit
  sent at all); no such partition read shows a record at or past the last stable offset its
  answer names (Sluice-Last-Stable-Offset), nor lacks that header; a group's committed offsets
  after healing are those sent by the last of its transactions that committed, never those of
  one aborted (one whose outcome is unknown may have set them); once the faults stopped,
  every partition's last stable offset reaches its high watermark and every transactional id's
  transaction is complete within the timeout, the abort timer's interval and a coordinator's
  failover. Records read at read_committed from the schedule's topic are consumer reads too
  (divergence, read-changed), a record read twice by the final read is a duplicate, and a
  transaction call answered an error without a problem+json code is unclean-error, and one
  refused as malformed (400, 404, 413, 415, 422: every call the campaign makes is well-formed,
  of an id it began, to partitions that exist) txn-refused. Reads at read_uncommitted pass
  over the transactions' markers: their offsets skip the markers only.
- registry-lost / registry-id-reused / registry-two-ids / registry-id-order /
  registry-version-order / registry-config-lost / registry-divergence / registry-refused /
  validation-refused / unclean-error: the schema registry (registryload.py). A register
  answered 200 with an id is on every node after healing, under its subject with that id and
  schema; no id names two schemas and no schema has two ids, in any answer, any node's view or
  the writer's log of `_schemas`; along that log every new id is above every id before it,
  and a register answered before another new one was sent got the lower id; a subject's
  versions are 1..n, each version whose schema was new there above the ids of the versions
  before it; a subject's level is the last acknowledged one (or one sent without an answer);
  every node shows the same subjects, versions and levels; a register or level change of
  these always valid, compatible schemas is never refused (4xx), and an error carries
  Confluent's error_code; a value framed with an acknowledged id is accepted by the topic that
  validates it within the bound after healing.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from tests.cluster.harness import NO_LEADER, LogRecord, PartitionState
from tests.cluster.registryload import RegistryHistory, RegistryOp
from tests.cluster.shareload import ShareAck, ShareDelivery, ShareHistory
from tests.cluster.sideload import PROBLEM_JSON, Move, ReassignOp, SideHistory, TopicOp
from tests.cluster.txnload import Txn, TxnCall, TxnHistory
from tests.cluster.workload import Attempt, History, ProduceOp

Content = tuple[str | None, str]  # (record key, canonical JSON of the value)


@dataclass(frozen=True)
class Violation:
    kind: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.kind}] {self.detail}"


@dataclass
class Verdict:
    violations: list[Violation] = field(default_factory=list)
    acknowledged: int = 0  # records acknowledged
    acknowledged_by: Counter[str] = field(default_factory=Counter)  # acks -> records
    lost: int = 0  # acks=all records lost
    lost_allowed: Counter[str] = field(default_factory=Counter)  # acks 0 and 1 -> records lost
    divergences: int = 0
    duplicates: int = 0  # extra copies of records
    ops: Counter[str] = field(default_factory=Counter)  # op outcomes
    ops_by: Counter[str] = field(default_factory=Counter)  # "acks=all", "json"... -> requests
    attempts: int = 0
    replays: Counter[str] = field(default_factory=Counter)  # sent, same answer, stored again...
    group: Counter[str] = field(default_factory=Counter)  # joins, fetches, commits
    topic_ops: Counter[str] = field(default_factory=Counter)  # "create ok", "config refused"...
    # "shrink ok", "cancel refused"..., and the moves: "started", "completed", "cancelled"
    reassignments: Counter[str] = field(default_factory=Counter)
    registry: Counter[str] = field(default_factory=Counter)  # "new ok", "produce accepted"...
    share: Counter[str] = field(default_factory=Counter)  # "deliveries", "ack accept ok"...
    txn: Counter[str] = field(default_factory=Counter)  # "committed", "produce ok"...

    def add(self, kind: str, detail: str) -> None:
        self.violations.append(Violation(kind, detail))


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _disk_content(record: LogRecord) -> Content:
    key = None if record.key is None else record.key.decode(errors="replace")
    value: Any = None
    if record.value is not None:
        try:
            value = json.loads(record.value)
        except ValueError:
            value = record.value.decode(errors="replace")
    return key, _canonical(value)


def _identity(content: Content) -> tuple[str, int] | None:
    """(op key, record index) of a workload record."""
    try:
        value = json.loads(content[1])
        return str(value["op"]), int(value["i"])
    except (ValueError, TypeError, KeyError):
        return None


class _Reference:
    """Per partition, the committed content at each offset, from whoever showed it first."""

    def __init__(self, verdict: Verdict) -> None:
        self.verdict = verdict
        self.seen: dict[int, dict[int, tuple[Content, str]]] = defaultdict(dict)
        self.reported: set[tuple[int, int]] = set()

    def observe(self, partition: int, offset: int, content: Content, source: str) -> None:
        known = self.seen[partition].get(offset)
        if known is None:
            self.seen[partition][offset] = (content, source)
        elif known[0] != content and (partition, offset) not in self.reported:
            self.reported.add((partition, offset))
            self.verdict.divergences += 1
            self.verdict.add(
                "divergence",
                f"p{partition} offset {offset}: {known[1]} has {known[0]}, {source} has {content}",
            )


def check(
    history: History,
    final_logs: dict[int, dict[int, list[LogRecord]]],  # node -> partition -> records
    final_end: dict[int, int],  # partition -> log end (= high watermark) once in sync
    etcd_changes: dict[int, list[PartitionState | None]],  # partition -> states in order
) -> Verdict:
    verdict = Verdict()
    verdict.attempts = sum(len(op.attempts) for op in history.ops)
    verdict.ops = Counter(op.outcome for op in history.ops)
    verdict.ops_by = Counter(f"acks={op.acks}" for op in history.ops)
    verdict.ops_by.update(op.format for op in history.ops)
    reference = _Reference(verdict)
    for kind, detail in history.anomalies + history.side.anomalies + history.txn.anomalies:
        verdict.add(kind, detail)
    removed = _removed_replicas(etcd_changes)
    _check_logs(history, final_logs, final_end, reference, removed, verdict)
    _check_reads(history, final_end, _markers(final_logs), reference, verdict)
    # Partitions whose leader changed during the schedule: only there may acks 0 and 1 lose.
    changed = {
        p for p, states in etcd_changes.items() if len({s.leader_epoch for s in states if s}) > 1
    }
    _check_ops(history, final_logs, changed, verdict)
    _check_high_watermarks(history, removed, verdict)
    _check_states(history, etcd_changes, final_logs, verdict)
    _check_group(history.side, final_end, reference, verdict)
    _check_share(history.share, final_end, reference, verdict)
    _check_transactions(history.txn, final_end, reference, verdict)
    _check_topics(history.side, verdict)
    _check_reassignments(history.side, etcd_changes, verdict)
    _check_settle(history.side, verdict)
    _check_registry(history.registry, verdict)
    return verdict


def judge_settle(side: SideHistory) -> Verdict:
    """The settle rules alone, for a schedule whose partitions were not put back on every node
    (its final logs cannot be compared: the campaign stops there)."""
    verdict = Verdict()
    _check_settle(side, verdict)
    return verdict


def _removed_replicas(
    etcd_changes: dict[int, list[PartitionState | None]],
) -> set[tuple[int, int]]:
    """(node, partition): the node's replica of the partition was removed during the schedule
    (etcd shows it among the replicas, then not): its copy was deleted, and a later move may
    have made it a new one, empty at first."""
    removed: set[tuple[int, int]] = set()
    for p, states in etcd_changes.items():
        held: set[int] = set()
        for s in states:
            if s is not None:
                removed |= {(node, p) for node in held - set(s.replicas)}
                held = set(s.replicas)
    return removed


def _check_logs(
    history: History,
    final_logs: dict[int, dict[int, list[LogRecord]]],
    final_end: dict[int, int],
    reference: _Reference,
    removed: set[tuple[int, int]],
    verdict: Verdict,
) -> None:
    # Final logs first: they are the reference the others are compared with.
    for node, partitions in sorted(final_logs.items()):
        for p, records in sorted(partitions.items()):
            offsets = [r.offset for r in records]
            if offsets != list(range(final_end[p])):
                verdict.add(
                    "offsets",
                    f"node {node} p{p}: offsets are not 0..{final_end[p] - 1} in order "
                    f"({len(offsets)} records, first {offsets[:3]}, last {offsets[-3:]})",
                )
            epochs = [r.epoch for r in records]
            if any(b < a for a, b in itertools.pairwise(epochs)):
                verdict.add("offsets", f"node {node} p{p}: leader epochs go back along the log")
            for r in records:
                reference.observe(p, r.offset, _disk_content(r), f"node {node} (final log)")
    for snap in history.snapshots:
        source = (
            f"node {snap.node} run {snap.run} on disk at {snap.time:.2f}s "
            f"(hw {snap.high_watermark})"
        )
        offsets = [r.offset for r in snap.records]
        if offsets and offsets != list(range(offsets[0], offsets[0] + len(offsets))):
            verdict.add("offsets", f"{source} p{snap.partition}: offsets not contiguous")
        # A node whose replica was removed may have reported its old copy's high watermark.
        recreated = (snap.node, snap.partition) in removed
        if (
            snap.high_watermark > 0
            and not recreated
            and (not offsets or offsets[-1] < snap.high_watermark - 1)
        ):
            verdict.add(
                "lost",
                f"{source} p{snap.partition}: the log ends at "
                f"{offsets[-1] + 1 if offsets else 0}, below its high watermark",
            )
        for r in snap.records:
            reference.observe(snap.partition, r.offset, _disk_content(r), source)


def _markers(final_logs: dict[int, dict[int, list[LogRecord]]]) -> dict[int, set[int]]:
    """Per partition, the offsets of the transactions' markers in the first node's final log
    (the others hold the same, or divergence says where not)."""
    if not final_logs:
        return {}
    partitions = final_logs[min(final_logs)]
    return {p: {r.offset for r in records if r.control} for p, records in partitions.items()}


def _check_reads(
    history: History,
    final_end: dict[int, int],
    markers: dict[int, set[int]],
    reference: _Reference,
    verdict: Verdict,
) -> None:
    """A read's records are at consecutive offsets from the one asked, but for the markers it
    passes over, below the high watermark; its next offset follows the last (or the markers
    after it)."""
    for read in history.reads:
        source = f"a read through node {read.node} at {read.start:.2f}s"
        offsets = [o for o, _, _ in read.records]
        skipped = markers.get(read.partition, set())
        stop = offsets[-1] + 1 if offsets else read.offset
        if offsets != [o for o in range(read.offset, stop) if o not in skipped]:
            verdict.add(
                "offsets",
                f"{source} p{read.partition} from {read.offset}: offsets {offsets[:5]}...",
            )
        if offsets and (
            read.next_offset <= offsets[-1]
            or not skipped.issuperset(range(offsets[-1] + 1, read.next_offset))
        ):
            verdict.add("offsets", f"{source}: next_offset {read.next_offset} after {offsets[-1]}")
        if offsets and offsets[-1] >= read.high_watermark:
            verdict.add(
                "offsets", f"{source}: record {offsets[-1]} at or past hw {read.high_watermark}"
            )
        for offset, key, value in read.records:
            if offset >= final_end[read.partition]:
                verdict.add(
                    "read-changed",
                    f"p{read.partition} offset {offset} read by {source} is past the final log "
                    f"end {final_end[read.partition]}: it disappeared",
                )
                continue
            reference.observe(read.partition, offset, (key, _canonical(value)), source)


def _check_ops(
    history: History,
    final_logs: dict[int, dict[int, list[LogRecord]]],
    changed: set[int],
    verdict: Verdict,
) -> None:
    # All final logs are equal if there is no divergence; judge against each node's anyway.
    ops = {op.key: op for op in history.ops}
    for node, partitions in sorted(final_logs.items()):
        at: dict[tuple[int, int], tuple[str, int] | None] = {}
        copies: Counter[tuple[str, int]] = Counter()
        where: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
        markers: list[tuple[int, LogRecord]] = []
        for p, records in partitions.items():
            for r in records:
                ident = _identity(_disk_content(r))
                at[(p, r.offset)] = ident
                if ident is not None:
                    copies[ident] += 1
                    where[ident].append((p, r.offset))
                if r.idempotency is not None:
                    markers.append((p, r))
        first_node = node == min(final_logs)
        for op in history.ops:
            acked = op.acked
            if acked is not None:
                if first_node:
                    verdict.acknowledged += len(op.records)
                    verdict.acknowledged_by[op.acks] += len(op.records)
                _check_acked(op, acked, at, changed, node, verdict, count=first_node)
            elif op.outcome == "failed":
                present = [i for i in range(len(op.records)) if copies[(op.key, i)]]
                if present:
                    verdict.add(
                        "refused-but-appended",
                        f"node {node}: op {op.key} had every attempt refused definitely, yet "
                        f"records {present} are in the log at "
                        f"{[where[(op.key, i)] for i in present]}; attempts: "
                        + "; ".join(map(str, op.attempts)),
                    )
        if not first_node:
            continue
        _check_order(history.ops, at, where, _built_at(markers), changed, verdict)
        for op in history.ops:
            _check_replays(op, at, verdict)
        for p, record in markers:
            _check_marker(p, record, ops, verdict)
        for ident, count in sorted(copies.items()):
            if count > 1:
                sent = ops.get(ident[0])
                attempts = sent.attempts if sent is not None else []
                if sent is not None and not sent.idempotent:
                    cause = "sent once without Idempotency-Key: the server appended it twice"
                elif len(attempts) == 1:
                    cause = "one client attempt: the server appended it twice"
                else:
                    cause = f"{len(attempts)} attempts with the same Idempotency-Key"
                verdict.duplicates += count - 1
                verdict.add(
                    "duplicate",
                    f"record {ident} is in the log {count} times at {where[ident]} ({cause}): "
                    + "; ".join(map(str, attempts)),
                )


MARKER_SLACK_S = 0.005


def _check_marker(p: int, record: LogRecord, ops: dict[str, ProduceOp], verdict: Verdict) -> None:
    """The attempt that appended a request's batch (its marker holds the clock of the node that
    built it, during that attempt) must not have been answered with a definite refusal."""
    assert record.idempotency is not None
    try:
        key, _digest, _parts, _count, created_ms = record.idempotency.decode().split("\n")
        created = int(created_ms) / 1000
    except ValueError:
        verdict.add("offsets", f"p{p} offset {record.offset}: unreadable marker")
        return
    op = ops.get(key)
    if op is None:
        return
    candidates = [
        a
        for a in op.attempts + op.replays
        if a.wall[0] - MARKER_SLACK_S <= created
        and (created <= a.wall[1] + MARKER_SLACK_S or a.outcome == "unknown")
    ]
    where = f"p{p} offset {record.offset}"
    if not candidates:
        verdict.add(
            "unattributed-append",
            f"{where}: op {key}'s batch was built at {created:.3f}, during none of its attempts: "
            + "; ".join(
                f"{a} [{a.wall[0]:.3f}, {a.wall[1]:.3f}]" for a in op.attempts + op.replays
            ),
        )
    elif all(a.outcome == "failed" for a in candidates):
        verdict.add(
            "refused-but-appended",
            f"{where}: op {key} ({op.path}) had its records appended by an attempt answered "
            + " / ".join(f"{a.status} {a.code} (node {a.node})" for a in candidates)
            + f", which promises nothing was appended. Batch built at {created:.3f}; attempts: "
            + "; ".join(f"{a} [{a.wall[0]:.3f}, {a.wall[1]:.3f}]" for a in op.attempts),
        )


def _check_acked(
    op: ProduceOp,
    acked: list[tuple[int, int, int]],
    at: dict[tuple[int, int], tuple[str, int] | None],
    changed: set[int],
    node: int,
    verdict: Verdict,
    count: bool,
) -> None:
    expected: dict[int, list[int]] = defaultdict(list)
    for p, i in op.records:
        expected[p].append(i)
    answered = {p for p, _, _ in acked}
    if answered != set(expected):
        verdict.add("lost", f"op {op.key}: answered partitions {answered}, sent {set(expected)}")
    for p, base, n in acked:
        indices = expected.get(p, [])
        if n != len(indices):
            verdict.add("lost", f"op {op.key} p{p}: answered count {n}, sent {len(indices)}")
        for k, i in enumerate(indices):
            found = at.get((p, base + k))
            if found == (op.key, i):
                continue
            if op.acks != "all" and p in changed:
                verdict.lost_allowed[op.acks] += int(count)
                continue
            if count and op.acks == "all":
                verdict.lost += 1
            why = "" if op.acks == "all" else f" (acks={op.acks}, but p{p}'s leader never changed)"
            verdict.add(
                "lost",
                f"node {node}: acknowledged record {(op.key, i)} should be at p{p} offset "
                f"{base + k}; the log has {found} there{why}. Attempts: "
                + "; ".join(map(str, op.attempts)),
            )


def _stored_as_acked(op: ProduceOp, at: dict[tuple[int, int], tuple[str, int] | None]) -> bool:
    """Whether every record of an acknowledged request is where its first answer said."""
    acked = op.acked
    if acked is None:
        return False
    indices: dict[int, list[int]] = defaultdict(list)
    for p, i in op.records:
        indices[p].append(i)
    return all(
        at.get((p, base + k)) == (op.key, i)
        for p, base, _ in acked
        for k, i in enumerate(indices.get(p, []))
    )


def _built_at(markers: list[tuple[int, LogRecord]]) -> dict[tuple[str, int], float]:
    """When each stored request's batch was built, by op key and partition (its marker's
    clock); unreadable markers are reported by _check_marker."""
    out = {}
    for p, record in markers:
        assert record.idempotency is not None
        fields = record.idempotency.decode().split("\n")
        if len(fields) == 5 and fields[4].isdigit():
            out[(fields[0], p)] = int(fields[4]) / 1000
    return out


def _restored(op: ProduceOp, p: int, built: dict[tuple[str, int], float]) -> bool:
    """Whether op's batch in p was built after its first answer: the answered append was
    lost and a later attempt or replay stored the records again (at the same offsets by
    chance, or the op would not count as stored where its answer said)."""
    answered = op.acked_attempt
    when = built.get((op.key, p))
    return answered is not None and when is not None and when > answered.wall[1] + MARKER_SLACK_S


def _check_order(
    ops: list[ProduceOp],
    at: dict[tuple[int, int], tuple[str, int] | None],
    where: dict[tuple[str, int], list[tuple[int, int]]],
    built: dict[tuple[str, int], float],
    changed: set[int],
    verdict: Verdict,
) -> None:
    """A request's records in one partition sit at consecutive offsets in request order; a
    producer's requests (sent one at a time) that are stored where their answers said got
    rising offsets in each partition. An acks=0 or 1 request whose answered append was lost
    with a leader change and stored again later is out of that order (that loss is allowed);
    otherwise the order still holds it, as the loss rules do not allow that loss."""
    # (worker, partition) -> base, op key and acks, stored again after its answer
    last: dict[tuple[int, int], tuple[int, str, bool]] = {}
    for op in sorted(ops, key=lambda o: (o.worker, o.attempts[0].start if o.attempts else 0.0)):
        per_partition: dict[int, list[int]] = defaultdict(list)
        for p, i in op.records:
            found = where.get((op.key, i))
            if found:
                per_partition[p].append(found[0][1])
        for p, offsets in sorted(per_partition.items()):
            if offsets != list(range(offsets[0], offsets[0] + len(offsets))):
                verdict.add(
                    "reordered",
                    f"op {op.key} (acks={op.acks}, {op.format}) p{p}: its records are at "
                    f"offsets {offsets}, not consecutive in request order",
                )
        acked = op.acked
        if acked is None or not _stored_as_acked(op, at):
            continue
        for p, base, _ in acked:
            if op.acks != "all" and p in changed and _restored(op, p, built):
                continue
            before = last.get((op.worker, p))
            if before is not None and before[0] >= base:
                verdict.add(
                    "reordered",
                    f"p{p}: op {op.key} (acks={op.acks}) was sent after op {before[1]} was "
                    f"answered, yet got offset {base}, not past {before[0]}"
                    + (" (stored again after its answer)" if before[2] else ""),
                )
            last[(op.worker, p)] = (base, f"{op.key} (acks={op.acks})", _restored(op, p, built))


def _check_replays(
    op: ProduceOp, at: dict[tuple[int, int], tuple[str, int] | None], verdict: Verdict
) -> None:
    """A replay of an acknowledged request gets the first answer while its records are stored
    there; it may store them again only once they were lost (acks 0 and 1)."""
    answered = [a for a in op.replays if a.results is not None]
    if op.replays:
        verdict.replays["sent"] += 1
    for attempt in op.attempts + op.replays:
        if attempt.code == "IDEMPOTENCY_KEY_REUSED":
            verdict.add(
                "idempotency-reuse",
                f"op {op.key}: the same request with its key answered {attempt}",
            )
    if not answered:
        return
    if all(a.results == op.acked for a in answered):
        verdict.replays["same answer"] += 1
    elif not _stored_as_acked(op, at):
        verdict.replays["stored again after a loss"] += 1
    else:
        verdict.add(
            "replay-changed",
            f"op {op.key} (acks={op.acks}, {op.format}): first answered {op.acked} through "
            f"node {_node(op.acked_attempt)}, still stored there, yet sent again through "
            "another node after a leader change it answered " + "; ".join(map(str, answered)),
        )


def _node(attempt: Attempt | None) -> int | None:
    return None if attempt is None else attempt.node


def _check_high_watermarks(
    history: History, removed: set[tuple[int, int]], verdict: Verdict
) -> None:
    """Per (node, run, partition): a report that started after another ended has a high
    watermark at least as high; except where a reassignment removed the node's replica (its
    reports may describe the deleted copy, then a new one)."""
    events: dict[tuple[int, int, int], list[tuple[float, float, int, str]]] = defaultdict(list)
    for obs in history.observations:
        for row in obs.rows:
            if row["high_watermark"] is not None:
                events[(obs.node, obs.run, row["partition"])].append(
                    (obs.start, obs.end, row["high_watermark"], "describe")
                )
    for read in history.reads:
        if read.pinned:
            events[(read.node, read.run, read.partition)].append(
                (read.start, read.end, read.high_watermark, "pinned fetch")
            )
    for (node, run, p), seen in sorted(events.items()):
        if (node, p) in removed:
            continue
        by_end = sorted(seen, key=lambda e: e[1])
        best: tuple[float, float, int, str] | None = None
        k = 0
        for event in sorted(seen):
            while k < len(by_end) and by_end[k][1] < event[0]:
                if best is None or by_end[k][2] > best[2]:
                    best = by_end[k]
                k += 1
            if best is not None and event[2] < best[2]:
                verdict.add(
                    "hw-regressed",
                    f"node {node} run {run} p{p}: high watermark {best[2]} ({best[3]} ending "
                    f"{best[1]:.2f}s), then {event[2]} ({event[3]} at {event[0]:.2f}s)",
                )
                break


def _check_states(
    history: History,
    etcd_changes: dict[int, list[PartitionState | None]],
    final_logs: dict[int, dict[int, list[LogRecord]]],
    verdict: Verdict,
) -> None:
    for p, states in sorted(etcd_changes.items()):
        stored = [s for s in states if s is not None]
        leaders: dict[int, set[int]] = defaultdict(set)
        prev: PartitionState | None = None
        for s in stored:
            leaders[s.leader_epoch].add(s.leader)
            where = (
                f"p{p} rev {s.revision} (epoch {s.leader_epoch}, leader {s.leader}, "
                f"isr {list(s.isr)})"
            )
            if not s.isr:
                verdict.add("isr", f"{where}: empty ISR")
            if not set(s.isr) <= set(s.replicas) or len(set(s.isr)) != len(s.isr):
                verdict.add("isr", f"{where}: ISR not a set within replicas {list(s.replicas)}")
            if s.leader != NO_LEADER and s.leader not in s.isr:
                verdict.add("isr", f"{where}: the leader is not in the ISR")
            if prev is not None:
                if s.leader_epoch < prev.leader_epoch:
                    verdict.add("epoch", f"{where}: epoch fell from {prev.leader_epoch}")
                if s.leader != prev.leader and s.leader_epoch <= prev.leader_epoch:
                    verdict.add("epoch", f"{where}: new leader without a higher epoch")
                if (
                    s.leader_epoch > prev.leader_epoch
                    and s.leader != NO_LEADER
                    and s.leader not in prev.isr
                    and s.leader not in prev.elr
                ):
                    verdict.add(
                        "unclean-leader",
                        f"{where}: leader {s.leader} was not in the ISR {list(prev.isr)} "
                        f"nor eligible {list(prev.elr)}",
                    )
            prev = s
        for epoch, who in sorted(leaders.items()):
            if len(who) > 1:
                verdict.add("leader-per-epoch", f"p{p} epoch {epoch} had leaders {sorted(who)}")
        led = {e for e, who in leaders.items() if who - {NO_LEADER}}
        for node, partitions in sorted(final_logs.items()):
            in_log = {r.epoch for r in partitions.get(p, [])}
            for epoch in sorted(in_log - led):
                verdict.add(
                    "epoch",
                    f"node {node} p{p}: the log holds epoch {epoch}, never stored with a leader",
                )
    for obs in history.observations:
        for row in obs.rows:
            isr, replicas = row["isr"], row["replicas"]
            if not isr or not set(isr) <= set(replicas):
                verdict.add(
                    "isr",
                    f"node {obs.node} at {obs.start:.2f}s reported p{row['partition']} with ISR "
                    f"{isr} (replicas {replicas})",
                )
            if row["leader"] is not None and row["leader"] not in isr:
                verdict.add(
                    "isr",
                    f"node {obs.node} at {obs.start:.2f}s reported p{row['partition']} led by "
                    f"{row['leader']} outside its ISR {isr}",
                )


def _check_group(
    side: SideHistory, final_end: dict[int, int], reference: _Reference, verdict: Verdict
) -> None:
    """Group commits never pass what was stored, and a member's commits of a partition never
    go back within one generation; delivered records are committed records."""
    verdict.group.update(joins=side.joins, fetches=len(side.fetches), commits=len(side.commits))
    for fetch in side.fetches:
        source = f"member {fetch.member} (generation {fetch.generation})"
        for p, offset, key, value in fetch.records:
            if offset >= final_end[p]:
                verdict.add(
                    "read-changed",
                    f"p{p} offset {offset} delivered to {source} is past the final log end "
                    f"{final_end[p]}: it disappeared",
                )
            else:
                reference.observe(p, offset, (key, _canonical(value)), source)
    latest: dict[tuple[str, int, int], tuple[int, float]] = {}  # member, generation, p
    for commit in side.commits:
        for p, offset in sorted(commit.offsets.items()):
            where = f"p{p}: member {commit.member} (generation {commit.generation})"
            if offset > final_end[p]:
                verdict.add(
                    "commit-ahead",
                    f"{where} committed {offset} at {commit.start:.2f}s, past the final high "
                    f"watermark {final_end[p]}",
                )
            before = latest.get((commit.member, commit.generation, p))
            if before is not None and offset < before[0]:
                verdict.add(
                    "commit-regressed",
                    f"{where} committed {offset} at {commit.start:.2f}s after {before[0]} at "
                    f"{before[1]:.2f}s",
                )
            latest[(commit.member, commit.generation, p)] = (offset, commit.start)
    for p, committed in sorted((side.final_committed or {}).items()):
        if committed is not None:
            verdict.group["committed partitions"] += 1
            if committed > final_end[p]:
                verdict.add(
                    "commit-ahead",
                    f"p{p}: group {side.group} has {committed} committed after healing, past "
                    f"the final high watermark {final_end[p]}",
                )


SKEW_MS = 5  # between the clocks of the processes on one machine


def _check_share(
    share: ShareHistory, final_end: dict[int, int], reference: _Reference, verdict: Verdict
) -> None:
    """The share group's rules (the module's docstring)."""
    if not share.group:
        return
    verdict.share.update(deliveries=len(share.deliveries), joins=share.joins)
    verdict.share.update(f"ack {a.kind} {a.code or a.status}" for a in share.acks)
    verdict.share["left to lapse"] += share.left_to_lapse
    starts = share.final_starts or {}
    for p, end in sorted(final_end.items()):
        start = starts.get(p)
        if start is None or start < end:
            verdict.add(
                "share-not-done",
                f"p{p}: share group {share.group} starts at {start} after draining, below the "
                f"final log end {end}: records neither accepted nor archived ({share.note})",
            )
    records: dict[tuple[int, int], list[ShareDelivery]] = defaultdict(list)
    for d in share.deliveries:
        if d.delivery_count > 1:
            verdict.share["delivered again"] += 1
        if not 1 <= d.delivery_count <= share.limit:
            verdict.add("share-count-over-limit", f"{d}: the delivery limit is {share.limit}")
        if d.offset >= final_end[d.partition]:
            verdict.add(
                "read-changed",
                f"{d} is past the final log end {final_end[d.partition]}: it disappeared",
            )
        else:
            reference.observe(d.partition, d.offset, (d.key, _canonical(d.value)), str(d))
        records[(d.partition, d.offset)].append(d)
    acks: dict[tuple[int, int], list[ShareAck]] = defaultdict(list)
    for a in share.acks:
        acks[(a.partition, a.offset)].append(a)
    for key, delivered in sorted(records.items()):
        _check_share_record(share, delivered, acks[key], verdict)


def _check_share_record(
    share: ShareHistory, delivered: list[ShareDelivery], acks: list[ShareAck], verdict: Verdict
) -> None:
    """One record's deliveries against each other and against its acknowledgements."""
    for a, b in itertools.permutations(delivered, 2):
        if b.start > a.end and b.delivery_count <= a.delivery_count:
            verdict.add(
                "share-count-regressed", f"{b}, sent after {a} was answered: the count fell"
            )
    done = [
        a
        for a in acks
        if (a.status == "ok" and a.kind in ("accept", "reject"))
        or (a.status == "ok" and a.kind == "release" and a.delivery_count >= share.limit)
        or a.code == "ALREADY_ACKNOWLEDGED"
    ]
    for ack in done:
        counted = ack.status == "ok" and ack.kind != "release"  # the count it was done at
        for d in delivered:
            if d.start > ack.end or (counted and d.delivery_count > ack.delivery_count):
                verdict.add("share-delivered-again", f"{d}, though done by {ack}")
    # In the order they were acquired (every lock lasts the same from its acquire).
    locks = sorted(delivered, key=lambda d: d.lock_expires_at)
    for a, b in itertools.combinations(locks, 2):
        taken = b.lock_expires_at - share.lock_ms
        held_until = _held_until(share, a, [x for x in acks if x.token == a.token])
        if taken < held_until - SKEW_MS:
            verdict.add(
                "share-double-held",
                f"{b} acquired at {taken} while {a} held it (its lock in force to {held_until})",
            )


def _held_until(share: ShareHistory, d: ShareDelivery, acks: list[ShareAck]) -> int:
    """Until when (ms since the epoch) a delivery's lock is surely in force: its deadline, or
    a later one a renewal answered, unless a release, accept or reject of it, or its member's
    leave, was sent first. A leave sent earlier without an answer may land at any time."""
    until = max([d.lock_expires_at] + [a.lock_expires_at or 0 for a in acks if a.status == "ok"])
    for a in acks:
        if a.kind != "renew" and a.status != "refused":
            until = min(until, int(a.wall_start * 1000))
    taken = d.lock_expires_at - share.lock_ms
    for leave in share.leaves:
        if leave.member == d.member:
            sent = int(leave.wall_start * 1000)
            if sent > taken:
                until = min(until, sent)
            elif leave.status is None or leave.status >= 500:
                until = taken
    return until


COMMITTED = ("CompleteCommit", "PrepareCommit")  # the states a commit is answered with
MALFORMED = (400, 404, 413, 415, 422)  # refusals of the request itself, not of its moment


def _committed(t: Txn) -> bool:
    """Whether a commit of the transaction was answered with its decision."""
    return any(c.kind == "commit" and c.outcome == "ok" and c.state in COMMITTED for c in t.calls)


def _aborted(t: Txn, begins: list[TxnCall]) -> str | None:
    """Why the transaction surely did not commit, if it surely did not: its abort answered,
    a call answered TRANSACTION_TIMED_OUT, or its producer fenced before its commit (a begin
    of its id answered a newer epoch before its commit was first sent, or none was sent)."""
    for c in t.calls:
        if c.kind == "abort" and c.outcome == "ok":
            return f"its abort was answered {c.state}"
        if c.code == "TRANSACTION_TIMED_OUT":
            return f"its {c.kind} was answered TRANSACTION_TIMED_OUT"
    sent = min((c.start for c in t.of("commit")), default=float("inf"))
    for b in begins:
        if b.tid == t.tid and b.epoch is not None and b.epoch > t.epoch and b.end < sent:
            return (
                f"a begin of its id answered epoch {b.epoch} at {b.end:.2f}s, before its commit "
                "was sent"
            )
    if sent == float("inf"):
        return "no commit of it was sent"
    return None


def _txn_record(value: Any) -> tuple[str, int] | None:
    """(produce key, record index) of a transaction's record."""
    if isinstance(value, dict) and isinstance(value.get("tx"), str):
        return value["tx"], int(value.get("i", -1))
    return None


def _calls(t: Txn) -> str:
    return "; ".join(map(str, t.calls))


def _check_transactions(
    txn: TxnHistory, final_end: dict[int, int], reference: _Reference, verdict: Verdict
) -> None:
    """The transaction rules (the module's docstring)."""
    if not txn.topic:
        return
    owner: dict[str, Txn] = {}  # produce key -> its transaction
    aborted: dict[str, str] = {}  # produce key -> why its transaction surely did not commit
    for t in txn.txns:
        why = _aborted(t, txn.begins)
        fate = "committed" if _committed(t) else "aborted" if why else "unknown"
        verdict.txn[fate] += 1
        verdict.txn[f"mode {t.mode}"] += 1
        for c in t.of("produce"):
            owner[c.key] = t
            if why:
                aborted[c.key] = why
    for c in txn.begins + [c for t in txn.txns for c in t.calls if c.kind != "begin"]:
        verdict.txn[f"{c.kind} {c.code or c.outcome}"] += 1
        if (c.status or 0) >= 300 and (c.content_type != PROBLEM_JSON or not c.code):
            verdict.add(
                "unclean-error",
                f"{c.tid}: {c}: answered {c.content_type} without a problem+json code",
            )
        if c.status in MALFORMED:
            verdict.add("txn-refused", f"{c.tid}: {c}: a well-formed call refused as malformed")
    seen: Counter[tuple[str, int]] = Counter()  # records of the final read
    for read in txn.reads:
        verdict.txn["reads final" if read.final else "reads"] += 1
        source = (
            f"a read_committed fetch of {read.topic}-{read.partition} from {read.offset} "
            f"through node {read.node} at {read.start:.2f}s" + (" (final)" if read.final else "")
        )
        for offset, key, value in read.records:
            lso = read.last_stable_offset
            if lso is None or offset >= lso:
                verdict.add(
                    "txn-past-lso",
                    f"{source}: a record at {offset}; last stable offset {lso}, high watermark "
                    f"{read.high_watermark}",
                )
            if read.topic == txn.topic:
                _committed_read(read.partition, offset, key, value, source, final_end, reference)
            ident = _txn_record(value)
            if ident is not None and ident[0] in aborted:
                verdict.add(
                    "txn-aborted-read",
                    f"{source}: {ident} at {offset}, of {owner[ident[0]]}, though "
                    f"{aborted[ident[0]]}; {_calls(owner[ident[0]])}",
                )
            if ident is not None and read.final:
                seen[ident] += 1
    for fetch in txn.fetches:
        source = f"member {fetch.member} of {fetch.group} through node {fetch.node}"
        for topic, p, offset, key, value in fetch.records:
            if topic == txn.topic:
                _committed_read(p, offset, key, value, source, final_end, reference)
            ident = _txn_record(value)
            if ident is not None and ident[0] in aborted:
                verdict.add(
                    "txn-aborted-read",
                    f"{source} at {fetch.start:.2f}s: {ident} at p{p} offset {offset}, of "
                    f"{owner[ident[0]]}, though {aborted[ident[0]]}",
                )
    for ident, count in sorted(seen.items()):
        if count > 1:
            verdict.duplicates += count - 1
            verdict.add("duplicate", f"record {ident} read committed {count} times")
    for t in txn.txns:
        _check_txn_records(txn, t, seen, verdict)
    _check_txn_offsets(txn, verdict)
    settle = txn.settle
    if settle is not None and settle.reached_in is None:
        verdict.add(
            "txn-hung",
            f"{settle.bound_s:.0f} s after healing, last stable offsets and high watermarks "
            f"{sorted(settle.lso.items())}, states {sorted(settle.states.items())} "
            f"({settle.note or 'every answer read'})",
        )


def _committed_read(
    p: int,
    offset: int,
    key: str | None,
    value: Any,
    source: str,
    final_end: dict[int, int],
    reference: _Reference,
) -> None:
    """A record of the schedule's topic read at read_committed is a consumer read: in the
    final log at its offset."""
    if offset >= final_end[p]:
        reference.verdict.add(
            "read-changed",
            f"{source}: p{p} offset {offset} is past the final log end {final_end[p]}: it "
            "disappeared",
        )
    else:
        reference.observe(p, offset, (key, _canonical(value)), source)


def _check_txn_records(
    txn: TxnHistory, t: Txn, seen: Counter[tuple[str, int]], verdict: Verdict
) -> None:
    """The final read shows all of the transaction's acknowledged records or none, and all
    once its commit was answered (judged where every partition it wrote was read)."""
    produces = t.of("produce")
    if not {(c.topic, p) for c in produces for p, _ in c.records} <= txn.final_read:
        return
    acked = {(c.key, i) for c in produces if c.outcome == "ok" for _, i in c.records}
    shown = {(c.key, i) for c in produces for _, i in c.records if seen[(c.key, i)]}
    missing = sorted(acked - shown)
    if shown and missing:
        verdict.add(
            "txn-torn",
            f"{t}: the final read shows {sorted(shown)}, not {missing}; {_calls(t)}",
        )
    if missing and _committed(t):
        verdict.add(
            "txn-commit-lost",
            f"{t}: its commit was answered, yet the final read lacks {missing}; {_calls(t)}",
        )


def _check_txn_offsets(txn: TxnHistory, verdict: Verdict) -> None:
    """Each group's committed offsets after healing: per partition, what the last of its
    transactions that committed sent, or what one of unknown outcome after it sent; never
    what an aborted one sent."""
    for group, committed in sorted(txn.final_committed.items()):
        if committed is None:
            continue  # unreadable: an anomaly says so
        allowed: dict[tuple[str, int], set[int | None]] = defaultdict(lambda: {None})
        told: dict[tuple[str, int], list[str]] = defaultdict(list)
        for t in sorted(txn.txns, key=lambda t: t.begun):
            fate = (
                "committed"
                if _committed(t)
                else "aborted"
                if _aborted(t, txn.begins)
                else "unknown"
            )
            for c in t.of("offsets"):
                if c.group != group or c.outcome == "refused":
                    continue
                for tp, offset in c.offsets.items():
                    told[tp].append(f"{offset} by {t} ({fate}, the call {c.outcome})")
                    if fate == "committed" and c.outcome == "ok":
                        allowed[tp] = {offset}
                    elif fate != "aborted":
                        allowed[tp].add(offset)
        for tp in sorted(set(allowed) | set(committed)):
            if committed.get(tp) not in allowed[tp]:
                verdict.add(
                    "txn-offsets",
                    f"group {group} has {committed.get(tp)} committed for {tp[0]}-{tp[1]}, "
                    f"expected one of {sorted(allowed[tp], key=str)}; sent: "
                    + ("; ".join(told[tp]) or "none"),
                )


def _check_topics(side: SideHistory, verdict: Verdict) -> None:
    """Topic changes succeed or fail with a problem+json error; once healed, every node shows
    the topics created with the partitions asked and the last acknowledged config."""
    by_topic: dict[str, list[TopicOp]] = defaultdict(list)
    for op in side.topic_ops:
        verdict.topic_ops[f"{op.kind} {op.outcome}"] += 1
        by_topic[op.topic].append(op)
        if (op.status or 0) >= 300 and (op.content_type != PROBLEM_JSON or not op.code):
            verdict.add(
                "unclean-error",
                f"{op}: answered {op.content_type} without a problem+json code",
            )
    for name, views in sorted(side.final_topics.items()):
        ops = by_topic[name]
        create = next(op for op in ops if op.kind == "create")
        history = "; ".join(map(str, ops))
        # The last acknowledged value, or one never answered (it may have landed, even late).
        acked = [op.retention_ms for op in ops if op.outcome == "ok"]
        allowed = {op.retention_ms for op in ops if op.outcome == "unknown"} | set(acked[-1:])
        for node, view in sorted(views.items()):
            where = f"topic {name} on node {node} after healing"
            if view is None:
                if create.outcome == "ok":
                    verdict.add("topic-lost", f"{where}: absent; {history}")
                continue
            if create.outcome == "refused":
                verdict.add("refused-but-created", f"{where}: exists; {history}")
            if view.partitions != create.partitions:
                verdict.add("topic-mismatch", f"{where}: {view.partitions} partitions; {history}")
            if view.retention_ms not in allowed:
                verdict.add(
                    "config-lost",
                    f"{where}: retention.ms {view.retention_ms}, expected one of "
                    f"{sorted(allowed)}; {history}",
                )


def _check_reassignments(
    side: SideHistory,
    etcd_changes: dict[int, list[PartitionState | None]],
    verdict: Verdict,
) -> None:
    """Every move answered 2xx completes, or a cancel sent after it undid it; reassignment
    calls fail with a problem+json error; a decommission is refused while a partition spans
    every node."""
    cancels: dict[int, list[ReassignOp]] = defaultdict(list)
    for op in side.reassign_ops:
        verdict.reassignments[f"{op.kind} {op.outcome}"] += 1
        if op.kind == "cancel" and op.partition is not None and op.outcome != "refused":
            cancels[op.partition].append(op)  # answered 200, or it may have landed
        if (op.status or 0) >= 300 and (op.content_type != PROBLEM_JSON or not op.code):
            verdict.add(
                "unclean-error", f"{op}: answered {op.content_type} without a problem+json code"
            )
        if op.kind == "decommission" and op.outcome == "ok" and side.widest >= side.nodes > 0:
            verdict.add(
                "decommission-accepted",
                f"{op}: a partition spans all {side.nodes} nodes ({side.widest} replicas), so "
                "no node can leave: the plan must be refused",
            )
    for op in side.reassign_ops:
        for p, move in sorted(op.moves.items()):
            verdict.reassignments["started"] += 1
            if op.kind == "balance":
                verdict.reassignments["balance moves"] += 1
            fate = _fate(etcd_changes.get(p, []), op.revision, move)
            if fate == "completed":
                verdict.reassignments["completed"] += 1
            elif fate != NEVER_STORED and any(c.start > op.start for c in cancels[p]):
                verdict.reassignments["cancelled"] += 1
            else:
                verdict.add(
                    "reassignment-lost",
                    f"p{p}: {op} set it moving to {list(move.target)} (adding "
                    f"{move.adding}, removing {move.removing}); etcd: {fate}, and no cancel of "
                    "it followed",
                )


NEVER_STORED = "the move was never stored"  # no cancel can explain that


def _fate(states: list[PartitionState | None], revision: int, move: Move) -> str:
    """What etcd shows of a move answered as started, the call sent after `revision`: its
    first state (replicas = target + removing, its adding and removing), then the first state
    that moves nothing from there: "completed" when that is on the target."""
    after = [s for s in states if s is not None and s.revision > revision]
    began = next(
        (
            i
            for i, s in enumerate(after)
            if s.replicas == move.target + s.removing
            and move.adding in (None, s.adding)
            and move.removing in (None, s.removing)
        ),
        None,
    )
    if began is None:
        return NEVER_STORED
    end = next((s for s in after[began:] if not s.adding and not s.removing), None)
    if end is None:
        return f"still moving at rev {after[-1].revision}"
    if end.replicas == move.target:
        return "completed"
    return f"it ended on {list(end.replicas)} at rev {end.revision}"


def _check_settle(side: SideHistory, verdict: Verdict) -> None:
    """After settling, nothing moves and every partition is back on every node."""
    settle = side.settle
    if settle is None:
        return
    verdict.reassignments["restored"] += settle.restored
    for p, s in sorted(settle.states.items()):
        where = f"p{p} after settling ({settle.note or 'settled'})"
        if s is None or s.adding or s.removing:
            verdict.add("reassignment-stuck", f"{where}: still moving or unreadable: {s}")
        elif len(set(s.replicas)) < settle.replication_factor:
            verdict.add(
                "rf-not-restored",
                f"{where}: replicas {list(s.replicas)}, fewer than the replication factor "
                f"{settle.replication_factor}",
            )


def _schema_key(text: str) -> str:
    """A schema text in one form (the registry may store it reformatted)."""
    try:
        return _canonical(json.loads(text))
    except ValueError:
        return text


def _check_registry(reg: RegistryHistory, verdict: Verdict) -> None:
    """The schema registry's rules (the module's docstring): ids unique, never reused, in the
    writer's order; acknowledged registrations and levels kept on every node."""
    for op in reg.ops:
        verdict.registry[f"{op.kind} {op.outcome}"] += 1
        if op.outcome == "refused":
            verdict.add("registry-refused", f"{op}: a valid, compatible schema or level refused")
        if (op.status or 0) >= 300 and op.error_code is None:
            verdict.add("unclean-error", f"registry {op}: answered without an error_code")
    for produce in reg.produces:
        verdict.registry["produce " + ("accepted" if produce.accepted else "refused")] += 1
        verdict.registry["produce attempts"] += len(produce.attempts)
        if not produce.accepted:
            verdict.add(
                "validation-refused",
                f"a value framed with id {produce.schema_id} (acknowledged at "
                f"{produce.acked_at:.2f}s) was never accepted; attempts: "
                + "; ".join(f"node {n} at {t:.2f}s: {a}" for n, t, a in produce.attempts[-5:]),
            )
    # Every (id, schema) pair shown anywhere: the answers, each node's view, the writer's log.
    pairs: list[tuple[int, str, str]] = [
        (op.schema_id, op.text, str(op)) for op in reg.ops if op.schema_id is not None
    ]
    for node, view in sorted(reg.views.items()):
        for subject, versions in sorted(view.versions.items()):
            pairs += [
                (schema_id, text, f"node {node}: {subject} version {v}")
                for v, (schema_id, text) in sorted(versions.items())
            ]
    pairs += [
        (r.schema_id, r.text, f"the writer's log: {r.subject} version {r.version}") for r in reg.log
    ]
    _check_ids(pairs, verdict)
    _check_writer_order(reg, verdict)
    home = {_schema_key(op.text): op.subject for op in reg.ops if op.kind == "new"}
    for node, view in sorted(reg.views.items()):
        if view.error is not None:
            verdict.add(
                "not-live", f"node {node}'s registry unreadable after healing: {view.error}"
            )
        _check_registry_view(reg, node, view.versions, home, verdict)
        _check_levels(reg.ops, node, view.levels, verdict)
    if reg.log_error is not None:
        verdict.add("not-live", f"the writer's log unreadable after healing: {reg.log_error}")
    shown = {node: (v.versions, v.levels) for node, v in reg.views.items() if v.error is None}
    if len({json.dumps(s, sort_keys=True) for s in shown.values()}) > 1:
        verdict.add("registry-divergence", f"the nodes' views differ after healing: {shown}")


def _check_ids(pairs: list[tuple[int, str, str]], verdict: Verdict) -> None:
    """No id names two schemas; no schema has two ids."""
    by_id: dict[int, tuple[str, str]] = {}
    by_text: dict[str, tuple[int, str]] = {}
    for schema_id, text, source in pairs:
        key = _schema_key(text)
        named = by_id.setdefault(schema_id, (key, source))
        if named[0] != key:
            verdict.add(
                "registry-id-reused",
                f"id {schema_id} is {named[0]} ({named[1]}) and {text} ({source})",
            )
        given = by_text.setdefault(key, (schema_id, source))
        if given[0] != schema_id:
            verdict.add(
                "registry-two-ids",
                f"{text} has id {given[0]} ({given[1]}) and id {schema_id} ({source})",
            )


def _check_writer_order(reg: RegistryHistory, verdict: Verdict) -> None:
    """Ids rise in the order the writer gave them: along its log, and in real time (a new
    schema acknowledged before another's register was sent has the lower id)."""
    highest = 0
    seen: set[int] = set()
    for r in reg.log:
        if r.schema_id not in seen and r.schema_id <= highest:
            verdict.add(
                "registry-id-order",
                f"the writer's log gives {r.subject} version {r.version} the new id "
                f"{r.schema_id}, not above {highest} given before it",
            )
        seen.add(r.schema_id)
        highest = max(highest, r.schema_id)
    new = sorted(
        (
            (op.start, op.end, op.schema_id, op)
            for op in reg.ops
            if op.kind == "new" and op.schema_id is not None
        ),
        key=lambda row: row[0],
    )
    for first, second in itertools.combinations(new, 2):
        (_, end, earlier_id, earlier), (start, _, later_id, later) = first, second
        if end < start and earlier_id >= later_id:
            verdict.add(
                "registry-id-order",
                f"{earlier} was answered before {later} was sent, yet has the higher id",
            )


def _check_registry_view(
    reg: RegistryHistory,
    node: int,
    versions: dict[str, dict[int, tuple[int, str]]],
    home: dict[str, str],
    verdict: Verdict,
) -> None:
    """One node's view holds every acknowledged register; its versions are 1..n, and each
    version whose schema was new in the subject has an id above the earlier versions'."""
    for op in reg.ops:
        if op.kind == "config" or op.schema_id is None:
            continue
        shown = versions.get(op.subject, {}).values()
        if (op.schema_id, _schema_key(op.text)) not in {(i, _schema_key(t)) for i, t in shown}:
            verdict.add(
                "registry-lost",
                f"node {node} after healing: {op}, yet {op.subject} has {sorted(shown)}",
            )
    for subject, found in sorted(versions.items()):
        if sorted(found) != list(range(1, len(found) + 1)):
            verdict.add(
                "registry-version-order", f"node {node}: {subject} has versions {sorted(found)}"
            )
        below = 0
        for version, (schema_id, text) in sorted(found.items()):
            if home.get(_schema_key(text)) == subject and schema_id <= below:
                verdict.add(
                    "registry-version-order",
                    f"node {node}: {subject} version {version} has the new id {schema_id}, "
                    f"not above {below} of an earlier version",
                )
            below = max(below, schema_id)


def _check_levels(
    ops: list[RegistryOp], node: int, levels: dict[str, str | None], verdict: Verdict
) -> None:
    """A subject's level after healing is its last acknowledged one, or one sent without an
    answer (it may have landed, even late); none if none was acknowledged."""
    for subject, level in sorted(levels.items()):
        sets = [op for op in ops if op.kind == "config" and op.subject == subject]
        acked = [op.text for op in sets if op.outcome == "ok"]
        allowed: set[str | None] = {op.text for op in sets if op.outcome == "unknown"}
        allowed |= set(acked[-1:]) if acked else {None}
        if level not in allowed:
            verdict.add(
                "registry-config-lost",
                f"node {node}: {subject} has level {level}, expected one of "
                f"{sorted(map(str, allowed))}; " + "; ".join(map(str, sets)),
            )
