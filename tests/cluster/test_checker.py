"""The checker itself, on small made-up histories (no cluster): a clean history passes, and each
property fires on a history that breaks it. Every check of checker.py must fail a test here when
disabled: scripts/mutate_checker.py (run by test_checker_mutants.py) says which do not."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import replace

import pytest

from schemas.records import SchemaVersion
from tests.cluster.checker import Verdict, Violation, check, judge_settle
from tests.cluster.harness import NO_LEADER, LogRecord, PartitionState
from tests.cluster.registryload import RegistryHistory, RegistryOp, RegistryView, ValidatedProduce
from tests.cluster.shareload import ShareAck, ShareDelivery, ShareHistory, ShareLeave
from tests.cluster.sideload import (
    MOVES,
    PROBLEM_JSON,
    Commit,
    GroupFetch,
    Move,
    ReassignOp,
    Settle,
    SideHistory,
    TopicOp,
    TopicView,
)
from tests.cluster.txnload import MemberFetch, Txn, TxnCall, TxnHistory, TxnRead, TxnSettle
from tests.cluster.workload import Attempt, History, Observation, ProduceOp, Read, Snapshot

T0 = 1_000_000.0  # wall clock of the first attempt


def marker(op: str, created: float) -> bytes:
    return f"{op}\ndigest\n1\n2\n{int(created * 1000)}".encode()


def rec(offset: int, op: str, i: int, epoch: int = 0, mark: bytes | None = None) -> LogRecord:
    value = json.dumps({"op": op, "i": i}).encode()
    return LogRecord(offset, epoch, f"{op}#{i}".encode(), value, mark)


def attempt(outcome: str, results: list[tuple[int, int, int]] | None, wall: float) -> Attempt:
    status, code = {
        "ok": (200, None),
        "failed": (503, "NOT_ENOUGH_REPLICAS"),
        "unknown": (None, None),
    }[outcome]
    return Attempt(0, 0.0, 0.1, status, code, outcome, results, None, (wall, wall + 0.1))


def state(leader: int, epoch: int, isr: tuple[int, ...], revision: int) -> PartitionState:
    return PartitionState(leader, epoch, (0, 1), isr, revision)


def clean() -> tuple[
    History,
    dict[int, dict[int, list[LogRecord]]],
    dict[int, int],
    dict[int, list[PartitionState | None]],
]:
    """Two records of one request, acknowledged at 0; both replicas agree; clean elections."""
    history = History("t", 1)
    history.ops.append(
        ProduceOp("o1", "/p", b"{}", [(0, 0), (0, 1)], [attempt("ok", [(0, 0, 2)], T0)])
    )
    history.reads.append(
        Read(0, 0, 1, True, 1.0, 1.1, 0, [(0, "o1#0", {"op": "o1", "i": 0})], 1, 1)
    )
    history.observations += [
        Observation(0, 1, 0.5, 0.6, [row(1)]),
        Observation(0, 1, 2.0, 2.1, [row(2)]),
    ]
    log = [rec(0, "o1", 0, mark=marker("o1", T0 + 0.05)), rec(1, "o1", 1)]
    logs = {0: {0: log}, 1: {0: list(log)}}
    states: list[PartitionState | None] = [
        state(0, 0, (0, 1), 10),
        state(0, 0, (0,), 11),
        state(0, 0, (0, 1), 12),
        state(1, 1, (1,), 13),
    ]
    return history, logs, {0: 2}, {0: states}


def row(hw: int, isr: list[int] | None = None, leader: int | None = 0) -> dict[str, object]:
    return {
        "partition": 0,
        "leader": leader,
        "replicas": [0, 1],
        "isr": [0, 1] if isr is None else isr,
        "high_watermark": hw,
        "log_end_offset": hw,
    }


def kinds(verdict: Verdict) -> set[str]:
    return {v.kind for v in verdict.violations}


def named(verdict: Verdict, kind: str, detail: str) -> bool:
    """Whether the verdict has a violation of that kind whose detail says `detail`."""
    return any(v.kind == kind and detail in v.detail for v in verdict.violations)


def test_a_clean_history_passes() -> None:
    verdict = check(*clean())
    assert verdict.violations == []
    assert (verdict.acknowledged, verdict.lost, verdict.duplicates) == (2, 0, 0)


def test_anomalies_the_workload_reported_are_violations() -> None:
    """The workload and the side actors report what they saw themselves (a 416 at an offset a
    consumer had reached; a group unreadable after healing): the verdict carries them as is."""
    history, logs, end, states = clean()
    history.anomalies.append(("out-of-range", "p0: fetch at 1 answered 416"))
    history.side.anomalies.append(("not-live", "group g unreadable after healing: 503"))
    assert check(history, logs, end, states).violations == [
        Violation("out-of-range", "p0: fetch at 1 answered 416"),
        Violation("not-live", "group g unreadable after healing: 503"),
    ]


def test_a_lost_acknowledged_record() -> None:
    history, logs, _, states = clean()
    for node in logs:
        logs[node][0] = logs[node][0][:1]
    verdict = check(history, logs, {0: 1}, states)
    assert "lost" in kinds(verdict) and verdict.lost == 1


def test_an_answer_that_names_other_partitions_than_sent() -> None:
    """o1 sent a third record to p1, and the answer names p0 alone: where p1's record went, the
    client was never told."""
    history, logs, end, states = clean()
    history.ops[0].records.append((1, 2))
    verdict = check(history, logs, end, states)
    assert kinds(verdict) == {"lost"}
    assert named(verdict, "lost", "op o1: answered partitions {0}, sent {0, 1}")
    # Answered for both partitions, and stored where the answer said: fine.
    history.ops[0].attempts = [attempt("ok", [(0, 0, 2), (1, 0, 1)], T0)]
    for node in logs:
        logs[node][1] = [rec(0, "o1", 2)]
    assert check(history, logs, {0: 2, 1: 1}, states).violations == []


def test_an_answer_that_counts_other_records_than_sent() -> None:
    history, logs, end, states = clean()
    history.ops[0].attempts = [attempt("ok", [(0, 0, 3)], T0)]
    verdict = check(history, logs, end, states)
    assert kinds(verdict) == {"lost"}
    assert named(verdict, "lost", "op o1 p0: answered count 3, sent 2")


def test_acks_1_may_lose_what_it_acknowledged() -> None:
    history, logs, _, states = clean()
    history.ops = [dataclasses.replace(op, acks="1") for op in history.ops]
    for node in logs:
        logs[node][0] = logs[node][0][:1]
    verdict = check(history, logs, {0: 1}, states)
    assert "lost" not in kinds(verdict)
    assert (verdict.lost, verdict.lost_allowed["1"]) == (0, 1)


def test_a_duplicate() -> None:
    history, logs, _, states = clean()
    for node in logs:
        logs[node][0].append(rec(2, "o1", 1))
    verdict = check(history, logs, {0: 3}, states)
    assert kinds(verdict) == {"duplicate"} and verdict.duplicates == 1


def test_a_duplicate_of_a_request_sent_once_without_a_key() -> None:
    history, logs, _, states = clean()
    history.ops[0].idempotent = False
    for node in logs:
        logs[node][0].append(rec(2, "o1", 0))
    verdict = check(history, logs, {0: 3}, states)
    assert kinds(verdict) == {"duplicate"}
    assert "sent once without Idempotency-Key" in verdict.violations[0].detail


def test_replicas_that_differ_below_the_high_watermark() -> None:
    history, logs, end, states = clean()
    logs[1][0][1] = rec(1, "other", 0)
    verdict = check(history, logs, end, states)
    assert "divergence" in kinds(verdict) and verdict.divergences == 1


def test_a_read_that_changed_or_disappeared() -> None:
    history, logs, end, states = clean()
    history.reads.append(Read(0, 1, 1, False, 1.0, 1.1, 1, [(1, "o1#1", "else")], 2, 2))
    history.reads.append(Read(0, 1, 1, False, 1.0, 1.1, 2, [(2, "x#0", "gone")], 3, 3))
    assert {"divergence", "read-changed"} <= kinds(check(history, logs, end, states))


def read(offset: int, offsets: list[int], next_offset: int, hw: int) -> Read:
    """An unpinned read through node 0 at 3.0 s of clean()'s records at `offsets`."""
    found: list[tuple[int, str | None, object]] = [
        (o, f"o1#{o}", {"op": "o1", "i": o}) for o in offsets
    ]
    return Read(0, 0, 1, False, 3.0, 3.1, offset, found, next_offset, hw)


@pytest.mark.parametrize(
    ("bad", "detail"),
    [
        (read(0, [1], 2, 2), "from 0: offsets [1]"),  # skipped the offset asked
        (read(1, [0, 1], 2, 2), "from 1: offsets [0, 1]"),  # began before it
        (read(0, [1, 0], 1, 2), "from 0: offsets [1, 0]"),  # out of order
        (read(0, [0], 2, 2), "next_offset 2 after 0"),
        (read(0, [0, 1], 1, 2), "next_offset 1 after 1"),
        (read(0, [0, 1], 2, 1), "record 1 at or past hw 1"),
    ],
)
def test_a_read_with_wrong_offsets(bad: Read, detail: str) -> None:
    history, logs, end, states = clean()
    history.reads.append(bad)
    verdict = check(history, logs, end, states)
    assert kinds(verdict) == {"offsets"} and named(verdict, "offsets", detail), verdict
    # The same records read right: from where they begin, the next offset past the last, below
    # the high watermark; and a read at the end that found nothing.
    history.reads[-1] = read(1, [1], 2, 2)
    history.reads.append(read(2, [], 2, 2))
    assert check(history, logs, end, states).violations == []


def test_a_high_watermark_that_goes_back_within_one_run() -> None:
    history, logs, end, states = clean()
    history.observations.append(Observation(0, 1, 3.0, 3.1, [row(1)]))
    assert kinds(check(history, logs, end, states)) == {"hw-regressed"}
    # The same in a later run of the node is a restart, which may reload an older mark.
    history.observations[-1] = Observation(0, 2, 3.0, 3.1, [row(1)])
    assert check(history, logs, end, states).violations == []


def test_a_high_watermark_that_a_pinned_fetch_saw_go_back() -> None:
    """A fetch pinned to node 0 (answered by it as leader) at 3.0 s says hw 1, after node 0's
    describe said 2: node 0's high watermark went back."""
    history, logs, end, states = clean()
    history.reads.append(dataclasses.replace(read(0, [0], 1, 1), pinned=True))
    verdict = check(history, logs, end, states)
    assert kinds(verdict) == {"hw-regressed"}
    detail = "high watermark 2 (describe ending 2.10s), then 1 (pinned fetch at 3.00s)"
    assert named(verdict, "hw-regressed", f"node 0 run 1 p0: {detail}")
    # Unpinned, the answer may come from whichever node leads: it says nothing of node 0's.
    history.reads[-1].pinned = False
    assert check(history, logs, end, states).violations == []


@pytest.mark.parametrize(
    ("bad", "kind", "detail"),
    [
        (state(1, 0, (1,), 14), "epoch", "epoch fell from 1"),
        # Leader 1 in epoch 1, then leader 0 in epoch 1: a new leader in the same epoch.
        (state(0, 1, (0,), 14), "epoch", "new leader without a higher epoch"),
        (state(0, 1, (0,), 14), "leader-per-epoch", "epoch 1 had leaders [0, 1]"),
        (state(NO_LEADER, 2, (), 14), "isr", "empty ISR"),  # leaderless: no other rule fires
        (state(1, 2, (1, 5), 14), "isr", "ISR not a set within replicas"),
        (state(1, 2, (1, 1), 14), "isr", "ISR not a set within replicas"),
        (state(0, 2, (1,), 14), "isr", "the leader is not in the ISR"),
    ],
)
def test_stored_partition_states(bad: PartitionState, kind: str, detail: str) -> None:
    history, logs, end, states = clean()
    states[0].append(bad)
    verdict = check(history, logs, end, states)
    assert named(verdict, kind, detail), verdict.violations


def test_stored_partition_states_that_keep_the_rules() -> None:
    """A partition left leaderless in a new epoch, its ISR kept; then its ISR member elected in
    a higher epoch."""
    history, logs, end, states = clean()
    states[0] += [state(NO_LEADER, 2, (1,), 14), state(1, 3, (1,), 15)]
    assert check(history, logs, end, states).violations == []


@pytest.mark.parametrize(
    ("reported", "detail"),
    [
        (row(2, isr=[], leader=None), "reported p0 with ISR [] (replicas [0, 1])"),
        (row(2, isr=[0, 5]), "reported p0 with ISR [0, 5] (replicas [0, 1])"),
        (row(2, isr=[1], leader=0), "reported p0 led by 0 outside its ISR [1]"),
    ],
)
def test_an_isr_a_node_reports(reported: dict[str, object], detail: str) -> None:
    """Each node's describe of the topic, as the pollers saw it: the ISR is never empty, within
    the replicas, and holds the leader the node names."""
    history, logs, end, states = clean()
    history.observations.append(Observation(1, 1, 3.0, 3.1, [reported]))
    verdict = check(history, logs, end, states)
    assert kinds(verdict) == {"isr"}
    assert named(verdict, "isr", f"node 1 at 3.00s {detail}"), verdict.violations
    # A node that knows no leader for the moment, or names one in its ISR: fine.
    history.observations[-1:] = [
        Observation(1, 1, 3.0, 3.1, [row(2, isr=[1], leader=None)]),
        Observation(1, 1, 4.0, 4.1, [row(2, isr=[1], leader=1)]),
    ]
    assert check(history, logs, end, states).violations == []


def test_a_leader_elected_from_outside_the_isr() -> None:
    history, logs, end, states = clean()
    states[0][1:] = [state(0, 0, (0,), 11), state(1, 1, (1,), 12)]
    assert kinds(check(history, logs, end, states)) == {"unclean-leader"}
    # Node 1 left the ISR below min.insync.replicas: an eligible leader replica (KIP-966).
    states[0][1] = replace(state(0, 0, (0,), 11), elr=(1,))
    assert check(history, logs, end, states).violations == []


def test_a_log_epoch_never_stored_with_a_leader() -> None:
    history, logs, end, states = clean()
    for node in logs:
        logs[node][0][1] = dataclasses.replace(logs[node][0][1], epoch=7)
    assert "epoch" in kinds(check(history, logs, end, states))


def test_offsets_with_a_gap() -> None:
    history, logs, _, states = clean()
    for node in logs:
        logs[node][0][1] = dataclasses.replace(logs[node][0][1], offset=2)
    assert "offsets" in kinds(check(history, logs, {0: 3}, states))


def test_leader_epochs_that_go_back_along_a_log() -> None:
    history, logs, end, states = clean()
    for node in logs:
        logs[node][0][0] = dataclasses.replace(logs[node][0][0], epoch=1)
    verdict = check(history, logs, end, states)
    assert kinds(verdict) == {"offsets"}
    assert named(verdict, "offsets", "node 0 p0: leader epochs go back along the log")
    # Rising: fine.
    for node in logs:
        logs[node][0][0] = dataclasses.replace(logs[node][0][0], epoch=0)
        logs[node][0][1] = dataclasses.replace(logs[node][0][1], epoch=1)
    assert check(history, logs, end, states).violations == []


def snapshot(hw: int, records: list[LogRecord]) -> Snapshot:
    """Node 0's log read from disk at 1.5 s, below the high watermark it reported."""
    return Snapshot(0, 1, 1.5, 0, hw, records)


@pytest.mark.parametrize(
    ("hw", "offsets", "kind", "detail"),
    [
        (3, [0, 2], "offsets", "offsets not contiguous"),
        (2, [0], "lost", "the log ends at 1, below its high watermark"),
        (2, [], "lost", "the log ends at 0, below its high watermark"),
    ],
)
def test_a_log_on_disk_during_the_schedule(
    hw: int, offsets: list[int], kind: str, detail: str
) -> None:
    """A replica's log read while the faults fire: contiguous, and up to the high watermark
    its node had reported."""
    history, logs, end, states = clean()
    history.snapshots.append(snapshot(hw, [rec(o, "o1", min(o, 1)) for o in offsets]))
    verdict = check(history, logs, end, states)
    assert kinds(verdict) == {kind}
    assert named(verdict, kind, f"node 0 run 1 on disk at 1.50s (hw {hw}) p0: {detail}")
    # Up to its high watermark (nothing yet at 0), or from a later offset on: fine.
    history.snapshots[-1:] = [
        snapshot(2, logs[0][0][:2]),
        snapshot(0, []),
        snapshot(2, [rec(1, "o1", 1)]),
    ]
    assert check(history, logs, end, states).violations == []


def test_a_log_on_disk_that_differs_from_the_final_one() -> None:
    history, logs, end, states = clean()
    history.snapshots.append(snapshot(2, [logs[0][0][0], rec(1, "other", 0)]))
    verdict = check(history, logs, end, states)
    assert kinds(verdict) == {"divergence"}
    assert named(verdict, "divergence", "node 0 run 1 on disk at 1.50s (hw 2) has")


def test_an_unreadable_marker() -> None:
    history, logs, end, states = clean()
    for node in logs:
        logs[node][0][0] = dataclasses.replace(logs[node][0][0], idempotency=b"o1\ndigest")
    verdict = check(history, logs, end, states)
    assert kinds(verdict) == {"offsets"}
    assert named(verdict, "offsets", "p0 offset 0: unreadable marker")


def test_a_batch_built_during_none_of_its_attempts() -> None:
    """o1's batch was built 5 s after its only attempt was answered."""
    history, logs, end, states = clean()
    for node in logs:
        logs[node][0][0] = rec(0, "o1", 0, mark=marker("o1", T0 + 5))
    verdict = check(history, logs, end, states)
    assert kinds(verdict) == {"unattributed-append"}
    assert named(verdict, "unattributed-append", "op o1's batch was built at 1000005.000")
    # Built after an attempt without an answer gave up: that attempt's, however late.
    history.ops[0].attempts = [attempt("unknown", None, T0 + 4), attempt("ok", [(0, 0, 2)], T0 + 6)]
    assert check(history, logs, end, states).violations == []


def test_records_appended_by_an_attempt_answered_not_enough_replicas() -> None:
    """The first attempt was refused (nothing appended, says the answer), the retry got the
    first attempt's offsets: the marker's time shows the refused attempt appended them."""
    history, logs, end, states = clean()
    op = history.ops[0]
    op.attempts = [attempt("failed", None, T0), attempt("ok", [(0, 0, 2)], T0 + 1)]
    assert kinds(check(history, logs, end, states)) == {"refused-but-appended"}
    # Appended by the retry instead: fine.
    op.attempts = [attempt("failed", None, T0 - 1), attempt("ok", [(0, 0, 2)], T0)]
    assert check(history, logs, end, states).violations == []


def test_records_of_a_request_refused_every_time() -> None:
    history, logs, end, states = clean()
    history.ops[0].attempts = [attempt("failed", None, T0 - 1)]
    assert "refused-but-appended" in kinds(check(history, logs, end, states))


# -- the operation mix: acks modes, order, replays, groups, topic changes ----------------------


def no_leader_change() -> list[PartitionState | None]:
    return [state(0, 0, (0, 1), 10), state(0, 0, (0,), 11)]


@pytest.mark.parametrize("acks", ["0", "1"])
def test_acks_0_and_1_may_lose_after_a_leader_change(acks: str) -> None:
    history, logs, _, states = clean()
    history.ops = [dataclasses.replace(op, acks=acks) for op in history.ops]
    for node in logs:
        logs[node][0] = logs[node][0][:1]
    verdict = check(history, logs, {0: 1}, states)
    assert verdict.violations == []
    assert verdict.lost_allowed == {acks: 1} and verdict.acknowledged_by == {acks: 2}


@pytest.mark.parametrize("acks", ["0", "1"])
def test_acks_0_and_1_lose_nothing_without_a_leader_change(acks: str) -> None:
    history, logs, _, _ = clean()
    history.ops = [dataclasses.replace(op, acks=acks) for op in history.ops]
    for node in logs:
        logs[node][0] = logs[node][0][:1]
    verdict = check(history, logs, {0: 1}, {0: no_leader_change()})
    assert kinds(verdict) == {"lost"} and "never changed" in verdict.violations[0].detail
    assert verdict.lost == 0  # the figure counts acks=all records


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_a_duplicate_whatever_the_acks(acks: str) -> None:
    history, logs, _, states = clean()
    history.ops = [dataclasses.replace(op, acks=acks) for op in history.ops]
    for node in logs:
        logs[node][0].append(rec(2, "o1", 1))
    assert kinds(check(history, logs, {0: 3}, states)) == {"duplicate"}


def test_a_request_stored_out_of_order() -> None:
    history, logs, end, states = clean()
    history.ops[0].acks = "0"
    history.reads.clear()
    for node in logs:
        logs[node][0] = [rec(0, "o1", 1, mark=marker("o1", T0 + 0.05)), rec(1, "o1", 0)]
    verdict = check(history, logs, end, states)
    assert "reordered" in kinds(verdict)
    assert "not consecutive in request order" in str(verdict.violations)


def test_a_later_request_of_one_producer_stored_before_an_earlier_one() -> None:
    """o1 was answered at offset 1 before o2 was sent; o2 got offset 0 and both are stored
    where their answers said."""
    history, logs, _, states = clean()
    history.reads.clear()
    history.ops = [
        ProduceOp("o1", "/p", b"{}", [(0, 0)], [attempt("ok", [(0, 1, 1)], T0)], acks="0"),
        ProduceOp("o2", "/p", b"{}", [(0, 0)], [attempt("ok", [(0, 0, 1)], T0 + 1)], acks="0"),
    ]
    history.ops[1].attempts[0] = dataclasses.replace(history.ops[1].attempts[0], start=0.5)
    for node in logs:
        logs[node][0] = [rec(0, "o2", 0), rec(1, "o1", 0)]
    assert kinds(check(history, logs, {0: 2}, states)) == {"reordered"}
    # From two producers, either order is fine.
    history.ops[1].worker = 1
    assert check(history, logs, {0: 2}, states).violations == []


@pytest.mark.parametrize("acks", ["1", "all"])
def test_an_earlier_request_lost_and_stored_again_at_its_offsets(acks: str) -> None:
    """o1 was answered at offset 1 before o2 was sent; o1's append was lost with a leader
    change, o2 got offset 0, and a replay of o1 stored it again at 1, after its answer (its
    marker says when). With acks=1 and a leader change the loss is allowed and so is that
    order; with acks=all, or without a leader change, the order still holds o1 to its
    answer."""
    history, logs, _, states = clean()
    history.reads.clear()
    history.ops = [
        ProduceOp("o1", "/p", b"{}", [(0, 0)], [attempt("ok", [(0, 1, 1)], T0)], acks=acks),
        ProduceOp("o2", "/p", b"{}", [(0, 0)], [attempt("ok", [(0, 0, 1)], T0 + 1)], acks="0"),
    ]
    history.ops[1].attempts[0] = dataclasses.replace(history.ops[1].attempts[0], start=0.5)
    history.ops[0].replays = [dataclasses.replace(attempt("ok", [(0, 1, 1)], T0 + 2), node=1)]
    for node in logs:
        logs[node][0] = [
            rec(0, "o2", 0, mark=marker("o2", T0 + 1.05)),
            rec(1, "o1", 0, mark=marker("o1", T0 + 2.05)),
        ]
    found = kinds(check(history, logs, {0: 2}, states))
    assert ("reordered" in found) == (acks == "all"), found
    steady = {0: states[0][:3]}  # no leader change: acks=1 may not lose it either
    assert "reordered" in kinds(check(history, logs, {0: 2}, steady))


def test_a_replay_after_a_leader_change_that_got_other_offsets() -> None:
    history, logs, end, states = clean()
    op = history.ops[0]
    op.replays = [dataclasses.replace(attempt("ok", [(0, 0, 2)], T0 + 2), node=1)]
    verdict = check(history, logs, end, states)
    assert verdict.violations == [] and verdict.replays == {"sent": 1, "same answer": 1}
    op.replays = [dataclasses.replace(attempt("ok", [(0, 2, 2)], T0 + 2), node=1)]
    assert kinds(check(history, logs, end, states)) == {"replay-changed"}


def test_a_replay_may_store_again_what_acks_1_lost() -> None:
    """The first answer's records were lost with a leader change; the replay stored them at new
    offsets, and its marker shows the replay appended them."""
    history, logs, _, states = clean()
    history.reads.clear()
    op = history.ops[0]
    op.acks = "1"
    op.replays = [dataclasses.replace(attempt("ok", [(0, 1, 2)], T0 + 2), node=1)]
    for node in logs:
        logs[node][0] = [
            rec(0, "other", 0),
            rec(1, "o1", 0, epoch=1, mark=marker("o1", T0 + 2.05)),
            rec(2, "o1", 1, epoch=1),
        ]
    verdict = check(history, logs, {0: 3}, states)
    assert verdict.violations == []
    assert verdict.replays["stored again after a loss"] == 1 and verdict.lost_allowed["1"] == 2


def test_an_identical_retry_answered_key_reused() -> None:
    history, logs, end, states = clean()
    reused = dataclasses.replace(
        attempt("failed", None, T0 - 1), status=422, code="IDEMPOTENCY_KEY_REUSED"
    )
    history.ops[0].attempts.insert(0, reused)
    assert kinds(check(history, logs, end, states)) == {"idempotency-reuse"}


def test_a_replay_answered_key_reused() -> None:
    """The replay (same key, same body, another node) was refused as a reuse of the key."""
    history, logs, end, states = clean()
    reused = dataclasses.replace(
        attempt("failed", None, T0 + 2), status=422, code="IDEMPOTENCY_KEY_REUSED", node=1
    )
    history.ops[0].replays = [reused]
    verdict = check(history, logs, end, states)
    assert kinds(verdict) == {"idempotency-reuse"}
    assert named(
        verdict, "idempotency-reuse", "op o1: the same request with its key answered node 1 "
    )


def with_group(history: History) -> SideHistory:
    side = SideHistory("g")
    side.fetches.append(GroupFetch("m1", 1, [(0, 0, "o1#0", {"op": "o1", "i": 0})]))
    side.commits += [Commit("m1", 1, 1.0, 1.1, {0: 1}), Commit("m1", 1, 2.0, 2.1, {0: 2})]
    side.final_committed = {0: 2}
    history.side = side
    return side


def test_group_commits_within_the_high_watermark() -> None:
    history, logs, end, states = clean()
    with_group(history)
    verdict = check(history, logs, end, states)
    assert verdict.violations == []
    assert verdict.group == {"joins": 0, "fetches": 1, "commits": 2, "committed partitions": 1}


def test_a_group_commit_past_the_high_watermark() -> None:
    history, logs, end, states = clean()
    side = with_group(history)
    side.commits[1].offsets = {0: 3}
    assert kinds(check(history, logs, end, states)) == {"commit-ahead"}
    side.commits[1].offsets = {0: 2}
    side.final_committed = {0: 5}
    assert kinds(check(history, logs, end, states)) == {"commit-ahead"}


def test_a_group_commit_that_goes_back_within_a_generation() -> None:
    history, logs, end, states = clean()
    side = with_group(history)
    side.commits.append(Commit("m1", 1, 3.0, 3.1, {0: 1}))
    assert kinds(check(history, logs, end, states)) == {"commit-regressed"}
    # In a later generation the partition may start again from what the group committed.
    side.commits[-1].generation = 2
    assert check(history, logs, end, states).violations == []


def test_a_delivered_record_that_changed() -> None:
    history, logs, end, states = clean()
    side = with_group(history)
    side.fetches.append(GroupFetch("m1", 1, [(0, 1, "o1#1", "else"), (0, 2, "x", "gone")]))
    assert kinds(check(history, logs, end, states)) == {"divergence", "read-changed"}


W = 1_800_000_000_000  # ms since the epoch: the coordinator's clock at the first acquire
LOCK = 1_000  # the share group's lock duration (ms)


def delivery(offset: int, count: int, at: float, taken: int, member: str = "c0") -> ShareDelivery:
    """A delivery of p0 `offset` (the clean log's record there), acquired at `at` (the test's
    clock, answered 0.1 s later) and at `taken` on the coordinator's clock."""
    value = {"op": "o1", "i": offset}
    token = f"t:0:{offset}:{count}"
    return ShareDelivery(
        member, 0, at, at + 0.1, 0, offset, f"o1#{offset}", value, count, taken + LOCK, token
    )


def ack(
    d: ShareDelivery,
    kind: str,
    at: float,
    sent: int,
    status: str = "ok",
    code: str | None = None,
    renewed_to: int | None = None,
) -> ShareAck:
    """An acknowledgement of delivery `d` sent at `at` (answered 0.1 s later), at `sent` on
    the nodes' clock."""
    return ShareAck(
        d.member,
        0,
        kind,
        d.token,
        d.partition,
        d.offset,
        d.delivery_count,
        at,
        at + 0.1,
        sent / 1000,
        status,
        code,
        renewed_to,
    )


def with_share(history: History) -> ShareHistory:
    """Offset 0 delivered and accepted; offset 1 delivered, its lock renewed, released, then
    delivered to another member, whose accept was refused (its lock lapsed) and who got it
    again after the lock's deadline and accepted it; a retry of that accept is refused as
    done already. The group is done with the log."""
    share = ShareHistory("s", lock_ms=LOCK, limit=3)
    d0 = delivery(0, 1, 1.0, W)
    d1 = delivery(1, 1, 1.0, W)
    d2 = delivery(1, 2, 1.5, W + 500, member="c1")
    d3 = delivery(1, 3, 3.0, W + 2_300, member="c1")
    share.deliveries += [d0, d1, d2, d3]
    share.acks += [
        ack(d0, "accept", 1.2, W + 200),
        ack(d1, "renew", 1.2, W + 200, renewed_to=W + 1_200),
        ack(d1, "release", 1.3, W + 300),
        ack(d2, "accept", 2.8, W + 2_250, "refused", "LOCK_EXPIRED"),
        ack(d3, "accept", 3.2, W + 2_500),
        ack(d3, "accept", 3.4, W + 2_700, "refused", "ALREADY_ACKNOWLEDGED"),
    ]
    share.final_starts = {0: 2}
    history.share = share
    return share


def test_a_share_group_that_keeps_every_rule() -> None:
    history, logs, end, states = clean()
    with_share(history)
    verdict = check(history, logs, end, states)
    assert verdict.violations == []
    assert verdict.share["deliveries"] == 4 and verdict.share["delivered again"] == 2
    assert verdict.share["ack accept ok"] == 2 and verdict.share["ack renew ok"] == 1


@pytest.mark.parametrize("starts", [None, {}, {0: 1}])
def test_a_share_group_not_done_with_the_final_log(starts: dict[int, int] | None) -> None:
    """After draining, a share-partition's start offset is unknown or below the final log
    end: records neither accepted nor archived."""
    history, logs, end, states = clean()
    with_share(history).final_starts = starts
    verdict = check(history, logs, end, states)
    assert kinds(verdict) == {"share-not-done"}


@pytest.mark.parametrize("count", [0, 4])
def test_a_delivery_count_outside_one_to_the_limit(count: int) -> None:
    history, logs, end, states = clean()
    with_share(history).deliveries.append(delivery(0, count, 0.5, W - 2_000))
    verdict = check(history, logs, end, states)
    assert named(verdict, "share-count-over-limit", f"delivery {count} to c0")


def test_a_share_delivery_that_changed_or_disappeared() -> None:
    """A delivered record is a consumer read: what it holds is the final log's record at its
    offset, below the final log end."""
    history, logs, end, states = clean()
    share = with_share(history)
    share.deliveries[0].value = {"op": "else"}
    assert kinds(check(history, logs, end, states)) == {"divergence"}
    share.deliveries[0].value = {"op": "o1", "i": 0}
    share.deliveries.append(delivery(2, 1, 3.0, W + 3_000))
    assert kinds(check(history, logs, end, states)) == {"read-changed"}


def test_a_delivery_count_that_did_not_rise() -> None:
    """Offset 1 delivered to c1 with the count of the delivery before it, by an acquire sent
    after that one was answered."""
    history, logs, end, states = clean()
    share = with_share(history)
    share.deliveries[2].delivery_count = 1
    verdict = check(history, logs, end, states)
    assert kinds(verdict) == {"share-count-regressed"}


def _accepted(d: ShareDelivery) -> ShareAck:
    return ack(d, "accept", 1.2, W + 200)


def _rejected(d: ShareDelivery) -> ShareAck:
    return ack(d, "reject", 1.2, W + 200)


def _released_at_the_limit(d: ShareDelivery) -> ShareAck:
    d.delivery_count = 3
    return ack(d, "release", 1.2, W + 200)


def _done_already(d: ShareDelivery) -> ShareAck:
    return ack(d, "accept", 1.2, W + 200, "refused", "ALREADY_ACKNOWLEDGED")


@pytest.mark.parametrize("done", [_accepted, _rejected, _released_at_the_limit, _done_already])
def test_a_record_delivered_again_once_it_was_done(
    done: Callable[[ShareDelivery], ShareAck],
) -> None:
    """Offset 0, done by an answered acknowledgement, acquired again by an acquire sent after
    that answer (its lock long after the first one's)."""
    history, logs, end, states = clean()
    share = with_share(history)
    d0 = share.deliveries[0]
    share.acks[0] = done(d0)
    again = delivery(0, 3, 2.0, W + 5_000, member="c1")
    share.deliveries.append(again)
    verdict = check(history, logs, end, states)
    assert named(verdict, "share-delivered-again", "p0 offset 0 delivery 3 to c1")


def test_a_record_delivered_again_with_a_count_past_its_accept() -> None:
    """An acquire sent before offset 0's accept was answered got it with a higher count than
    the accepted delivery's, its lock taken after the accept was sent: it was never due."""
    history, logs, end, states = clean()
    share = with_share(history)
    share.deliveries.append(delivery(0, 2, 1.15, W + 250, member="c1"))
    verdict = check(history, logs, end, states)
    assert kinds(verdict) == {"share-delivered-again"}


@pytest.mark.parametrize(
    ("status", "code"), [("refused", "LOCK_EXPIRED"), ("unknown", None), ("ok", None)]
)
def test_what_does_not_end_a_record(status: str, code: str | None) -> None:
    """An accept refused or never answered, or a release below the limit, leaves the record
    to be delivered again."""
    history, logs, end, states = clean()
    share = with_share(history)
    d0 = share.deliveries[0]
    share.acks[0] = ack(d0, "release" if status == "ok" else "accept", 1.2, W + 200, status, code)
    share.deliveries.append(delivery(0, 2, 2.0, W + 1_500, member="c1"))
    assert check(history, logs, end, states).violations == []


@pytest.mark.parametrize(
    ("taken", "held"),
    [
        (W + 250, True),  # within c0's first lock
        (W + 1_100, True),  # past it, within its renewal's (to W + 1_200)
        (W + 1_196, False),  # within the clocks' skew of the renewal's end
        (W + 1_300, False),  # after it
    ],
)
def test_a_record_held_twice_while_both_locks_are_in_force(taken: int, held: bool) -> None:
    history, logs, end, states = clean()
    share = with_share(history)
    del share.acks[2]  # c0 never releases offset 1: its lock holds until its renewal's end
    share.deliveries[2].lock_expires_at = taken + LOCK
    verdict = check(history, logs, end, states)
    assert kinds(verdict) == ({"share-double-held"} if held else set())


def test_a_release_without_an_answer_may_have_ended_the_lock_and_a_refused_one_did_not() -> None:
    history, logs, end, states = clean()
    share = with_share(history)
    share.deliveries[2].lock_expires_at = W + 350 + LOCK
    share.acks[2].status = "unknown"
    assert check(history, logs, end, states).violations == []
    share.acks[2].status, share.acks[2].code = "refused", "LOCK_EXPIRED"
    assert kinds(check(history, logs, end, states)) == {"share-double-held"}
    # Refused, the renewal extends nothing either: the lock ends at its first deadline.
    share.acks[1].status, share.acks[1].code = "refused", "LOCK_EXPIRED"
    share.deliveries[2].lock_expires_at = W + 1_050 + LOCK
    assert check(history, logs, end, states).violations == []


@pytest.mark.parametrize(
    ("sent", "status", "held"),
    [
        (W + 200, 204, False),  # c0 left after it acquired offset 1: its lock ended there
        (W + 200, None, False),  # ... or may have
        (W - 100, 204, True),  # it left before it acquired, and joined again: held
        (W - 100, None, False),  # a leave without an answer may land at any time later
    ],
)
def test_a_members_leave_ends_its_locks(sent: int, status: int | None, held: bool) -> None:
    history, logs, end, states = clean()
    share = with_share(history)
    del share.acks[2]  # c0 never releases offset 1
    share.deliveries[2].lock_expires_at = W + 250 + LOCK
    share.leaves.append(ShareLeave("c0", 0, 0.5, sent / 1000, status))
    verdict = check(history, logs, end, states)
    assert kinds(verdict) == ({"share-double-held"} if held else set())


def topic_op(kind: str, status: int | None, retention_ms: int, at: float) -> TopicOp:
    content_type = None if status is None else "application/json"
    if status is not None and status >= 300:
        content_type = "application/problem+json"
    return TopicOp(
        kind,
        "side",
        0,
        at,
        at + 0.1,
        2 if kind == "create" else 0,
        retention_ms,
        status,
        content_type,
        None if status is None or status < 300 else "SOME_CODE",
    )


def with_topics(history: History, *ops: TopicOp, views: list[TopicView | None]) -> SideHistory:
    side = SideHistory("g")
    side.topic_ops = list(ops)
    side.final_topics = {"side": dict(enumerate(views))}
    history.side = side
    return side


def test_topic_changes_read_back_after_healing() -> None:
    history, logs, end, states = clean()
    create = topic_op("create", 201, 100, 1.0)
    change = topic_op("config", 200, 200, 2.0)
    unanswered = topic_op("config", None, 300, 3.0)
    for final in (200, 300):  # the last acknowledged value, or one that may have landed
        with_topics(history, create, change, unanswered, views=[TopicView(2, final)] * 2)
        verdict = check(history, logs, end, states)
        assert verdict.violations == []
        assert verdict.topic_ops == {"create ok": 1, "config ok": 1, "config unknown": 1}


@pytest.mark.parametrize(
    ("ops", "views", "kind"),
    [
        # An error answered as plain JSON, without a problem+json code.
        (
            [dataclasses.replace(topic_op("create", 503, 100, 1.0), content_type="text/plain")],
            [None],
            "unclean-error",
        ),
        # A problem+json error that names no code.
        (
            [dataclasses.replace(topic_op("create", 503, 100, 1.0), code=None)],
            [None],
            "unclean-error",
        ),
        ([topic_op("create", 201, 100, 1.0)], [TopicView(2, 100), None], "topic-lost"),
        ([topic_op("create", None, 100, 1.0)], [TopicView(3, 100)], "topic-mismatch"),
        ([topic_op("create", 400, 100, 1.0)], [TopicView(2, 100)], "refused-but-created"),
        (
            [topic_op("create", 201, 100, 1.0), topic_op("config", 200, 200, 2.0)],
            [TopicView(2, 100)],
            "config-lost",
        ),
        (
            [topic_op("create", 201, 100, 1.0), topic_op("config", 400, 200, 2.0)],
            [TopicView(2, 200)],
            "config-lost",
        ),
    ],
)
def test_topic_changes_that_break_a_rule(
    ops: list[TopicOp], views: list[TopicView | None], kind: str
) -> None:
    history, logs, end, states = clean()
    with_topics(history, *ops, views=views)
    assert kind in kinds(check(history, logs, end, states))


# -- reassignments: moves complete or are cancelled, settling restores every partition ---------


def move(
    kind: str = "grow",
    target: tuple[int, ...] = (1, 0, 2),
    status: int | None = 202,
    at: float = 2.0,
    revision: int = 13,
    listed: bool = True,
) -> ReassignOp:
    """A call through node 0 at `at`, sent after etcd revision `revision`; a 2xx move of
    partition 0 (on 0 and 1) to `target` is listed as started (unless `listed` is False: the
    partition was on its target already)."""
    content_type = None if status is None else "application/json"
    if status is not None and status >= 300:
        content_type = "application/problem+json"
    partition = 0 if kind in (*MOVES, "cancel") else None
    op = ReassignOp(kind, partition, target, 0, at, at + 0.1, revision, status, content_type)
    if status is not None and status >= 300:
        op.code = "SOME_CODE"
    if kind in MOVES and status is not None and status < 300 and listed:
        adding = tuple(r for r in target if r not in (0, 1))
        op.moves = {0: Move(target, adding, tuple(r for r in (0, 1) if r not in target))}
    return op


def growing() -> list[PartitionState]:
    """clean()'s p0 (on 0 and 1, led by 1 in epoch 1 from revision 13) set moving to
    [1, 0, 2]: node 2 copies it and joins the ISR."""
    return [
        PartitionState(1, 1, (1, 0, 2), (1,), 14, adding=(2,)),
        PartitionState(1, 1, (1, 0, 2), (1, 2), 15, adding=(2,)),
    ]


COMPLETED = PartitionState(1, 2, (1, 0, 2), (1, 2), 16)
CANCELLED = PartitionState(1, 2, (0, 1), (1,), 16)  # back on its original replicas
# Then put on [1, 0, 2] by another move (settling's, say).
MOVED_AGAIN = [
    PartitionState(1, 2, (1, 0, 2), (1,), 17, adding=(2,)),
    PartitionState(1, 3, (1, 0, 2), (1, 2), 18),
]


def with_moves(history: History, *ops: ReassignOp) -> SideHistory:
    side = SideHistory("g")
    side.reassign_ops = list(ops)
    side.nodes, side.widest = 3, 3
    history.side = side
    return side


def test_a_move_that_completed_passes() -> None:
    history, logs, end, states = clean()
    with_moves(history, move())
    states[0] += [*growing(), COMPLETED]
    verdict = check(history, logs, end, states)
    assert verdict.violations == []
    assert verdict.reassignments == {"grow ok": 1, "started": 1, "completed": 1}


def test_a_shrink_that_completed_passes() -> None:
    """Node 0 removed from p0: the move's first state keeps it as removing, the next drops it."""
    history, logs, end, states = clean()
    with_moves(history, move("shrink", (1,)))
    states[0] += [
        PartitionState(1, 1, (1, 0), (1,), 14, removing=(0,)),
        PartitionState(1, 2, (1,), (1,), 15),
    ]
    verdict = check(history, logs, end, states)
    assert verdict.violations == [] and verdict.reassignments["completed"] == 1


def test_a_balance_move_is_followed_by_its_target() -> None:
    """A balance's answer tells each move's target (its "from" is the answering node's view,
    maybe behind): the move's first state is any that moves the partition to that target."""
    history, logs, end, states = clean()
    side = with_moves(history, move("balance", (), 202))
    side.reassign_ops[0].moves = {0: Move((1, 0, 2), None, None)}
    states[0] += [*growing(), COMPLETED]
    verdict = check(history, logs, end, states)
    assert verdict.violations == []
    assert verdict.reassignments["completed"] == verdict.reassignments["balance moves"] == 1
    states[0][-1] = CANCELLED  # undone, and no cancel was sent
    assert kinds(check(history, logs, end, states)) == {"reassignment-lost"}


def test_a_new_order_completes_at_once() -> None:
    """A reorder needs no copy: its first state is on the target, moving nothing."""
    history, logs, end, states = clean()
    with_moves(history, move("reorder", (1, 0)))
    states[0].append(PartitionState(1, 1, (1, 0), (1,), 14))
    verdict = check(history, logs, end, states)
    assert verdict.violations == [] and verdict.reassignments["completed"] == 1


@pytest.mark.parametrize("answer", [200, None, 503])
@pytest.mark.parametrize("after", [[CANCELLED], [CANCELLED, *MOVED_AGAIN], []])
def test_a_move_cancelled_after_it_passes(answer: int | None, after: list[PartitionState]) -> None:
    """A cancel sent after the move, answered 200 or left without an answer (it may have
    landed): the move need not complete."""
    history, logs, end, states = clean()
    with_moves(history, move(), move("cancel", (), answer, at=3.0))
    states[0] += growing() + after
    verdict = check(history, logs, end, states)
    assert verdict.violations == []
    assert verdict.reassignments["cancelled"] == 1


def test_a_move_on_its_target_already_is_not_followed() -> None:
    """A 202 whose list leaves the partition out (it was on its target): nothing to complete."""
    history, logs, end, states = clean()
    with_moves(history, move(listed=False))
    assert check(history, logs, end, states).violations == []


@pytest.mark.parametrize(
    ("ops", "more", "fate"),
    [
        ([move()], growing(), "still moving at rev 15"),  # never cancelled
        ([move()], [], "never stored"),
        ([move(), move("cancel", (), 200, at=3.0)], [], "never stored"),  # nothing to cancel
        ([move(revision=16)], [*growing(), COMPLETED], "never stored"),  # stored before sent
        ([move(target=(1, 2, 0))], [*growing(), COMPLETED], "never stored"),  # another order
        ([move()], [*growing(), CANCELLED], "ended on [0, 1] at rev 16"),  # undone, no cancel
        ([move(), move("cancel", (), 409, at=3.0)], [*growing(), CANCELLED], "ended on"),
        ([move("cancel", (), 200, at=1.0), move()], [*growing(), CANCELLED], "ended on"),
        # Undone without a cancel, then on the target by another move: not this one's doing.
        ([move()], [*growing(), CANCELLED, *MOVED_AGAIN], "ended on [0, 1] at rev 16"),
        # On the target, but never through this move's first state (adding node 2): another's.
        ([move()], [PartitionState(1, 1, (1, 0, 2), (1, 2), 14)], "never stored"),
        # A shrink of which etcd shows a new order only, or its target without node 0 ever
        # being removed (another move's end).
        ([move("shrink", (1,))], [PartitionState(1, 1, (1, 0), (1,), 14)], "never stored"),
        ([move("shrink", (1,))], [PartitionState(1, 2, (1,), (1,), 14)], "never stored"),
    ],
)
def test_a_move_accepted_and_never_completed(
    ops: list[ReassignOp], more: list[PartitionState], fate: str
) -> None:
    history, logs, end, states = clean()
    with_moves(history, *ops)
    states[0] += more
    verdict = check(history, logs, end, states)
    assert kinds(verdict) == {"reassignment-lost"}, verdict.violations
    kind = next(op.kind for op in ops if op.kind in MOVES)
    assert named(verdict, "reassignment-lost", f"p0: {kind} p0 to "), verdict.violations
    assert named(verdict, "reassignment-lost", fate), verdict.violations


@pytest.mark.parametrize(
    ("content_type", "code"),
    [("text/plain", "SOME_CODE"), ("application/problem+json", None)],
)
def test_a_reassignment_call_failing_without_a_problem_code(
    content_type: str, code: str | None
) -> None:
    history, logs, end, states = clean()
    failed = dataclasses.replace(move(status=503), content_type=content_type, code=code)
    with_moves(history, failed)
    verdict = check(history, logs, end, states)
    assert kinds(verdict) == {"unclean-error"}
    assert named(verdict, "unclean-error", "grow p0 to [1, 0, 2] through node 0 at 2.00s")
    # A problem+json naming its code: fine, whatever the status.
    with_moves(history, move(status=409), move("balance", (), 400), move("cancel", (), 503))
    assert check(history, logs, end, states).violations == []


def test_a_decommission_accepted_while_a_partition_spans_every_node() -> None:
    history, logs, end, states = clean()
    side = with_moves(history, move("decommission", (2,), 200))
    verdict = check(history, logs, end, states)
    assert kinds(verdict) == {"decommission-accepted"}
    assert named(verdict, "decommission-accepted", "decommission node 2 (dry run)")
    # Refused, or on a cluster where every partition could do without a node: fine.
    side.reassign_ops = [move("decommission", (2,), 400)]
    assert check(history, logs, end, states).violations == []
    side.reassign_ops, side.widest = [move("decommission", (2,), 200)], 2
    assert check(history, logs, end, states).violations == []


def full(revision: int, **moving: tuple[int, ...]) -> PartitionState:
    return PartitionState(0, 3, (0, 1, 2), (0, 1, 2), revision, **moving)


def test_settled_partitions_pass() -> None:
    history, logs, end, states = clean()
    side = with_moves(history)
    side.settle = Settle(True, 3, {0: full(20), 1: full(21)}, restored=1)
    verdict = check(history, logs, end, states)
    assert verdict.violations == [] and verdict.reassignments["restored"] == 1
    assert judge_settle(side).violations == []


@pytest.mark.parametrize(
    ("final", "kind"),
    [
        (None, "reassignment-stuck"),
        (full(20, adding=(2,)), "reassignment-stuck"),
        (full(20, removing=(2,)), "reassignment-stuck"),
        (PartitionState(0, 3, (0, 1), (0, 1), 20), "rf-not-restored"),
    ],
)
def test_a_partition_left_moving_or_short_after_settling(
    final: PartitionState | None, kind: str
) -> None:
    history, logs, end, states = clean()
    side = with_moves(history)
    side.settle = Settle(False, 3, {0: final, 1: full(21)}, "waited in vain")
    verdict = check(history, logs, end, states)
    assert kinds(verdict) == {kind}
    assert named(verdict, kind, "p0 after settling (waited in vain)")
    assert kinds(judge_settle(side)) == {kind}


def removed_and_back(node: int) -> list[PartitionState]:
    """After clean()'s states (led by 1, ISR [1]): `node` taken off p0, then put back."""
    if node == 0:
        return [
            PartitionState(1, 2, (1,), (1,), 14),
            PartitionState(1, 2, (1, 0), (1,), 15, adding=(0,)),
            PartitionState(1, 3, (1, 0), (1, 0), 16),
        ]
    return [
        PartitionState(1, 1, (0, 1), (1, 0), 14),
        PartitionState(0, 2, (0,), (0,), 15),
        PartitionState(0, 2, (0, 1), (0,), 16, adding=(1,)),
        PartitionState(0, 3, (0, 1), (0, 1), 17),
    ]


def test_a_replica_removed_and_made_again_starts_its_high_watermark_over() -> None:
    """Node 0 said hw 2 for p0, a reassignment took p0 off it (its copy deleted) and put it
    back: the new copy's hw starts from 0, and its log on disk may be behind what the old copy
    reported. Only that node's reports of that partition are spared."""
    history, logs, end, states = clean()
    history.observations.append(Observation(0, 1, 3.0, 3.1, [row(1)]))
    history.snapshots.append(snapshot(2, []))
    states[0] += removed_and_back(0)
    assert check(history, logs, end, states).violations == []
    states[0][4:] = removed_and_back(1)  # another node's replica removed: node 0 is held
    assert kinds(check(history, logs, end, states)) == {"hw-regressed", "lost"}


# -- the schema registry: ids unique and in the writer's order, registrations kept ------------


def schema(n: int) -> str:
    return json.dumps({"type": "record", "name": "R", "fields": [{"name": f"f{n}", "type": "int"}]})


def reg_op(
    kind: str, subject: str, text: str, at: float, status: int | None, schema_id: int | None
) -> RegistryOp:
    op = RegistryOp(kind, subject, text, 0, at, at + 0.1, status, schema_id)
    if status is not None and status >= 300:
        op.error_code = status * 100 + 1
    return op


def with_registry(history: History) -> RegistryHistory:
    """s's schemas 1 and 2 registered (ids 1, 2), schema 1 again under v (same id), s's level
    set to FULL, schema 3 sent to v without an answer and landed (id 3); a value framed with
    id 1 refused by a node that lagged, then accepted; two nodes agree on it all."""
    reg = history.registry
    reg.subjects = ["s", "v"]
    reg.ops = [
        reg_op("new", "s", schema(1), 0.0, 200, 1),
        reg_op("new", "s", schema(2), 0.2, 200, 2),
        reg_op("again", "v", schema(1), 0.4, 200, 1),
        reg_op("config", "s", "FULL", 0.6, 200, None),
        reg_op("new", "v", schema(3), 0.8, None, None),
    ]
    reg.produces = [
        ValidatedProduce(1, 0.5, [(0, 0.6, "422 not registered"), (1, 1.0, "200")], True)
    ]
    for node in (0, 1):
        reg.views[node] = RegistryView(
            {
                "s": {1: (1, schema(1)), 2: (2, schema(2))},
                "v": {1: (1, schema(1)), 2: (3, schema(3))},
            },
            {"s": "FULL", "v": None},
        )
    reg.log = [
        SchemaVersion("s", 1, 1, "AVRO", schema(1), (), False),
        SchemaVersion("s", 2, 2, "AVRO", schema(2), (), False),
        SchemaVersion("v", 1, 1, "AVRO", schema(1), (), False),
        SchemaVersion("v", 2, 3, "AVRO", schema(3), (), False),
    ]
    return reg


def test_registry_history_that_keeps_every_rule() -> None:
    history, logs, end, states = clean()
    with_registry(history)
    verdict = check(history, logs, end, states)
    assert verdict.violations == []
    assert verdict.registry == {
        "new ok": 2,
        "new unknown": 1,
        "again ok": 1,
        "config ok": 1,
        "produce accepted": 1,
        "produce attempts": 2,
    }


def _refused(reg: RegistryHistory) -> None:
    reg.ops[1] = reg_op("new", "s", schema(2), 0.2, 422, None)
    reg.views = {}


def _unclean(reg: RegistryHistory) -> None:
    reg.ops[4].status = 503


def _never_accepted(reg: RegistryHistory) -> None:
    reg.produces[0].accepted = False


def _id_reused(reg: RegistryHistory) -> None:
    reg.log[3] = SchemaVersion("v", 2, 2, "AVRO", schema(3), (), False)


def _two_ids(reg: RegistryHistory) -> None:
    reg.ops[2].schema_id = 4


def _log_out_of_order(reg: RegistryHistory) -> None:
    reg.log = [reg.log[1], reg.log[0]]


def _answered_out_of_order(reg: RegistryHistory) -> None:
    reg.ops[0].schema_id, reg.ops[1].schema_id = 2, 1
    reg.log = []
    reg.views = {}


def _lost(reg: RegistryHistory) -> None:
    reg.views[1].versions["s"] = {1: (1, schema(1))}


def _version_gap(reg: RegistryHistory) -> None:
    for view in reg.views.values():
        view.versions["s"] = {1: (1, schema(1)), 3: (2, schema(2))}


def _new_id_below(reg: RegistryHistory) -> None:
    for view in reg.views.values():
        view.versions["s"] = {1: (2, schema(2)), 2: (1, schema(1))}


def _level_lost(reg: RegistryHistory) -> None:
    for view in reg.views.values():
        view.levels["s"] = "BACKWARD"


def _level_without_a_set(reg: RegistryHistory) -> None:
    for view in reg.views.values():
        view.levels["v"] = "NONE"


def _views_differ(reg: RegistryHistory) -> None:
    reg.views[1].versions["v"][3] = (5, schema(5))


def _unreadable(reg: RegistryHistory) -> None:
    reg.views[1] = RegistryView(error="s versions: 503")


def _leaderless(reg: RegistryHistory) -> None:
    reg.log, reg.log_error = [], "_schemas-0 has no leader"


@pytest.mark.parametrize(
    ("breaks", "kind"),
    [
        (_refused, "registry-refused"),
        (_unclean, "unclean-error"),
        (_never_accepted, "validation-refused"),
        (_id_reused, "registry-id-reused"),
        (_two_ids, "registry-two-ids"),
        (_log_out_of_order, "registry-id-order"),
        (_answered_out_of_order, "registry-id-order"),
        (_lost, "registry-lost"),
        (_version_gap, "registry-version-order"),
        (_new_id_below, "registry-version-order"),
        (_level_lost, "registry-config-lost"),
        (_level_without_a_set, "registry-config-lost"),
        (_views_differ, "registry-divergence"),
        (_unreadable, "not-live"),
        (_leaderless, "not-live"),
    ],
)
def test_registry_histories_that_break_a_rule(
    breaks: Callable[[RegistryHistory], None], kind: str
) -> None:
    history, logs, end, states = clean()
    breaks(with_registry(history))
    assert kind in kinds(check(history, logs, end, states))


def tcall(
    kind: str,
    start: float,
    status: int | None = 200,
    *,
    code: str | None = None,
    state: str | None = None,
    epoch: int | None = None,
    tid: str = "t.tx0",
) -> TxnCall:
    """A transaction call answered `status` (a refusal as problem+json with `code`)."""
    content_type = None if status is None else "application/json"
    if status is not None and status >= 300:
        content_type = PROBLEM_JSON
    return TxnCall(
        kind,
        tid,
        0,
        start,
        start + 0.05,
        status,
        content_type,
        code,
        state=state,
        epoch=epoch,
    )


def tproduce(
    key: str, records: list[tuple[int, int]], start: float, status: int | None = 200
) -> TxnCall:
    call = tcall("produce", start, status)
    call.key, call.topic, call.records = key, "t-tx", records
    return call


def toffsets(offset: int, start: float, status: int | None = 200) -> TxnCall:
    call = tcall("offsets", start, status)
    call.group, call.offsets = "g", {("t", 0): offset}
    return call


def tvalue(key: str, i: int) -> tuple[str, dict[str, object]]:
    return f"{key}#{i}", {"tx": key, "i": i}


def tread(
    partition: int,
    records: list[tuple[int, str, int]],
    next_offset: int,
    lso: int | None,
    final: bool = True,
    topic: str = "t-tx",
) -> TxnRead:
    """A read_committed read from 0 showing (offset, produce key, index) records."""
    shown: list[tuple[int, str | None, object]] = [(o, *tvalue(key, i)) for o, key, i in records]
    return TxnRead(topic, partition, 0, 4.0, 0, shown, next_offset, next_offset, lso, final)


C, A = "t.tx0/e0/0", "t.tx0/e1/0"  # the committed and the aborted transaction's produces


def with_txn(history: History) -> TxnHistory:
    """Two transactions of one id: epoch 0 writes one record to each side partition and
    offset 1 of the group, and commits; epoch 1 writes to side partition 0 and offset 2, and
    aborts. The final read at read_committed shows the committed records alone (the markers
    and the aborted record passed over), a member read the campaign's records, the group has
    offset 1 committed, and everything settled at once."""
    txn = TxnHistory("t", "t-tx")
    committed = Txn(
        "t.tx0",
        0,
        "commit",
        6_000,
        0.15,
        [
            tcall("begin", 0.1, 201, state="Ongoing", epoch=0),
            tproduce(C, [(0, 0), (1, 1)], 0.2),
            toffsets(1, 0.3),
            tcall("commit", 0.4, state="CompleteCommit"),
        ],
    )
    aborted = Txn(
        "t.tx0",
        1,
        "abort",
        6_000,
        0.55,
        [
            tcall("begin", 0.5, 201, state="Ongoing", epoch=1),
            tproduce(A, [(0, 0)], 0.6),
            toffsets(2, 0.7),
            tcall("abort", 0.8, state="CompleteAbort"),
        ],
    )
    txn.txns += [committed, aborted]
    txn.begins += [committed.calls[0], aborted.calls[0]]
    txn.reads += [
        tread(0, [(0, C, 0)], 1, 1, final=False),
        tread(0, [(0, C, 0)], 4, 4),
        tread(1, [(0, C, 1)], 2, 2),
    ]
    plain: list[tuple[int, str | None, object]] = [
        (0, "o1#0", {"op": "o1", "i": 0}),
        (1, "o1#1", {"op": "o1", "i": 1}),
    ]
    txn.reads.append(TxnRead("t", 0, 0, 4.0, 0, plain, 2, 2, 2, True))
    txn.fetches.append(MemberFetch("g", "m", 0, 0.25, [("t", 0, 0, "o1#0", plain[0][2])]))
    txn.final_read = {("t-tx", 0), ("t-tx", 1)}
    txn.final_committed = {"g": {("t", 0): 1}}
    txn.settle = TxnSettle(13.0, reached_in=0.5)
    history.txn = txn
    return txn


def test_transactions_that_keep_every_rule() -> None:
    history, logs, end, states = clean()
    with_txn(history)
    verdict = check(history, logs, end, states)
    assert verdict.violations == []
    assert (verdict.txn["committed"], verdict.txn["aborted"]) == (1, 1)
    assert verdict.txn["produce ok"] == 2 and verdict.txn["reads final"] == 3


def test_a_committed_transaction_read_in_part() -> None:
    """The final read shows one of the two records of the transaction whose commit was
    answered: torn, and its commit lost; whatever its answer, torn; with none shown, only an
    answered commit is lost. A record whose produce went unanswered may be missing."""
    history, logs, end, states = clean()
    txn = with_txn(history)
    del txn.reads[2].records[0]
    assert kinds(check(history, logs, end, states)) == {"txn-torn", "txn-commit-lost"}
    commit = txn.txns[0].calls[-1]
    commit.status, commit.state = None, None
    assert kinds(check(history, logs, end, states)) == {"txn-torn"}
    txn.reads[1].records.clear()
    assert check(history, logs, end, states).violations == []  # unknown: none shown
    commit.status, commit.state = 200, "PrepareCommit"
    assert kinds(check(history, logs, end, states)) == {"txn-commit-lost"}
    txn.reads[1] = tread(0, [(0, C, 0)], 4, 4)
    txn.reads[2] = tread(1, [], 2, 2)
    txn.txns[0].calls[1].status = None  # its produce went unanswered: it may not have landed
    assert check(history, logs, end, states).violations == []


def test_a_partition_not_read_to_its_end_is_not_judged() -> None:
    history, logs, end, states = clean()
    txn = with_txn(history)
    del txn.reads[2].records[0]
    txn.final_read.discard(("t-tx", 1))
    assert check(history, logs, end, states).violations == []


def _timed_out(txn: TxnHistory) -> None:
    txn.txns[1].calls[-1] = tcall("commit", 0.8, 409, code="TRANSACTION_TIMED_OUT")


def _fenced(txn: TxnHistory) -> None:
    """A begin of epoch 3 answered before the holder's commit was sent."""
    txn.txns[1].calls[-1] = tcall("commit", 0.8, None)
    txn.begins.append(tcall("begin", 0.7, 201, state="Ongoing", epoch=3))


def _never_committed(txn: TxnHistory) -> None:
    del txn.txns[1].calls[-1]


@pytest.mark.parametrize("why", [lambda txn: None, _timed_out, _fenced, _never_committed])
@pytest.mark.parametrize("where", ["final", "during", "member"])
def test_a_record_of_an_aborted_transaction_read_committed(
    why: Callable[[TxnHistory], None], where: str
) -> None:
    """Aborted (answered), timed out, fenced before its commit or never committed: its record
    is read at read_committed by the final read, a read during the faults, or a member."""
    history, logs, end, states = clean()
    txn = with_txn(history)
    why(txn)
    if where == "member":
        txn.fetches[0].records.append(("t-tx", 0, 2, *tvalue(A, 0)))
    else:
        txn.reads[0].last_stable_offset = 4
        txn.reads[1 if where == "final" else 0].records.append((2, *tvalue(A, 0)))
    verdict = check(history, logs, end, states)
    assert kinds(verdict) == {"txn-aborted-read"}, verdict


def test_a_commit_sent_before_the_newer_begin_was_answered_may_have_committed() -> None:
    history, logs, end, states = clean()
    txn = with_txn(history)
    txn.txns[1].calls[-1] = tcall("commit", 0.8, None)
    txn.begins.append(tcall("begin", 0.78, 201, state="Ongoing", epoch=3))  # answered 0.83
    txn.reads[1].records.append((2, *tvalue(A, 0)))
    txn.final_committed["g"] = {("t", 0): 2}
    assert check(history, logs, end, states).violations == []


@pytest.mark.parametrize("lso", [None, 0])
def test_a_record_at_or_past_the_last_stable_offset(lso: int | None) -> None:
    """A read_committed answer without its last stable offset, or a record at it."""
    history, logs, end, states = clean()
    txn = with_txn(history)
    txn.reads[0].last_stable_offset = lso
    assert kinds(check(history, logs, end, states)) == {"txn-past-lso"}


@pytest.mark.parametrize(
    ("committed", "ok"),
    [
        ({("t", 0): 1}, True),
        ({("t", 0): 2}, False),  # the aborted transaction's
        ({("t", 0): None}, False),  # the committed one's lost
        ({("t", 0): 1, ("t", 1): 5}, False),  # never sent
        ({}, False),
    ],
)
def test_a_groups_offsets_are_the_committed_transactions(
    committed: dict[tuple[str, int], int | None], ok: bool
) -> None:
    history, logs, end, states = clean()
    with_txn(history).final_committed["g"] = committed
    verdict = check(history, logs, end, states)
    assert kinds(verdict) == (set() if ok else {"txn-offsets"})


def test_offsets_of_a_transaction_of_unknown_outcome_may_be_committed() -> None:
    """Its commit unanswered, the aborted one's offset 2 may be the group's; so may the
    earlier 1. An offsets call without an answer in a committed transaction, the same."""
    history, logs, end, states = clean()
    txn = with_txn(history)
    txn.txns[1].calls[-1] = tcall("commit", 0.8, None)
    for offset in (1, 2):
        txn.final_committed["g"] = {("t", 0): offset}
        assert check(history, logs, end, states).violations == []
    txn.final_committed["g"] = {("t", 0): None}
    assert kinds(check(history, logs, end, states)) == {"txn-offsets"}
    history, logs, end, states = clean()
    txn = with_txn(history)
    txn.txns[0].calls[2].status = None
    for maybe in (None, 1):
        txn.final_committed["g"] = {("t", 0): maybe}
        assert check(history, logs, end, states).violations == []


def test_a_transaction_that_never_ended() -> None:
    history, logs, end, states = clean()
    with_txn(history).settle = TxnSettle(13.0, lso={("t-tx", 0): (2, 4)}, note="held")
    verdict = check(history, logs, end, states)
    assert kinds(verdict) == {"txn-hung"} and named(verdict, "txn-hung", "(2, 4)")


def test_a_transactions_record_read_committed_twice() -> None:
    history, logs, end, states = clean()
    with_txn(history).reads[2].records.append((1, *tvalue(C, 1)))
    verdict = check(history, logs, end, states)
    assert kinds(verdict) == {"duplicate"} and verdict.duplicates == 1


@pytest.mark.parametrize("call", ["begin", "commit"])
@pytest.mark.parametrize(
    ("content_type", "code"),
    [("application/json", "COORDINATOR_NOT_AVAILABLE"), (PROBLEM_JSON, None)],
)
def test_a_transaction_call_answered_an_unclean_error(
    call: str, content_type: str, code: str | None
) -> None:
    history, logs, end, states = clean()
    txn = with_txn(history)
    bad = tcall(call, 0.9, 503)
    bad.content_type, bad.code = content_type, code
    if call == "begin":
        txn.begins.append(bad)
    else:
        txn.txns[0].calls.append(bad)
    assert kinds(check(history, logs, end, states)) == {"unclean-error"}


@pytest.mark.parametrize(("status", "code"), [(400, "INVALID_PARAMETER"), (404, "UNKNOWN_TOPIC")])
def test_a_transaction_call_refused_as_malformed(status: int, code: str) -> None:
    """The campaign's calls are well-formed: a commit refused 400 (its body lost on the way)
    or a produce refused 404 is the cluster's fault; a refusal of the moment is not."""
    history, logs, end, states = clean()
    txn = with_txn(history)
    txn.txns[0].calls.append(tcall("commit", 0.45, status, code=code))
    assert kinds(check(history, logs, end, states)) == {"txn-refused"}
    txn.txns[0].calls[-1] = tcall("commit", 0.45, 409, code="CONCURRENT_TRANSACTIONS")
    assert check(history, logs, end, states).violations == []


@pytest.mark.parametrize("source", ["read", "member"])
def test_a_record_read_committed_that_changed_or_disappeared(source: str) -> None:
    """A record of the schedule's topic read at read_committed is a consumer read."""
    history, logs, end, states = clean()
    txn = with_txn(history)
    txn.reads[3].last_stable_offset = 3
    records = txn.reads[3].records if source == "read" else txn.fetches[0].records
    old = records[0]
    records[0] = (*old[:-1], {"op": "else"})
    assert kinds(check(history, logs, end, states)) == {"divergence"}
    records[0] = (*old[:-3], 2, *old[-2:])
    assert kinds(check(history, logs, end, states)) == {"read-changed"}


def test_transaction_anomalies_are_violations() -> None:
    history, logs, end, states = clean()
    with_txn(history).anomalies.append(("not-live", "t-tx-1 not read"))
    assert check(history, logs, end, states).violations == [
        Violation("not-live", "t-tx-1 not read")
    ]


def test_a_read_uncommitted_passes_over_the_markers() -> None:
    """Markers at offsets 1 and 3: a read from 0 shows 0 and 2 and goes on at 4; skipping
    a record that is not a marker, or a next offset at or before the last, is wrong."""
    history, _, _, states = clean()
    log = [
        rec(0, "o1", 0, mark=marker("o1", T0 + 0.05)),
        LogRecord(1, 0, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", None, True),
        rec(2, "o1", 1),
        LogRecord(3, 0, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", None, True),
    ]
    logs = {0: {0: log}, 1: {0: list(log)}}
    history.ops[0].attempts[0].results = [(0, 0, 1)]
    history.ops[0].records = [(0, 0)]
    history.reads[0] = read(0, [0, 2], 4, 4)
    history.reads[0].records[1] = (2, "o1#1", {"op": "o1", "i": 1})
    assert check(history, logs, {0: 4}, states).violations == []
    history.reads[0].next_offset = 2
    assert named(check(history, logs, {0: 4}, states), "offsets", "next_offset 2 after 2")
    history.reads[0].next_offset = 4
    history.reads[0].records = history.reads[0].records[1:]
    history.reads[0].offset = 1
    assert check(history, logs, {0: 4}, states).violations == []
    history.reads[0].offset = 0
    assert named(check(history, logs, {0: 4}, states), "offsets", "from 0: offsets [2]")
