"""The rolling-restart benchmark's reading of the nodes' logs: a partition is leaderless from
the moment no node leads it (a role line, a node's drain) until one does again."""

from __future__ import annotations

import datetime

from loadtests.rolling_restart import gap_summary, leaderless_gaps, leadership_events


def stamp(seconds: float) -> str:
    moment = datetime.datetime.fromtimestamp(1_800_000_000 + seconds)
    return moment.strftime("%Y-%m-%d %H:%M:%S,") + f"{moment.microsecond // 1000:03d}"


def at(seconds: float) -> float:
    return 1_800_000_000 + seconds


def test_handover_gaps_and_a_drain_while_leading() -> None:
    logs = [
        (
            0,
            [
                f"{stamp(1.0)} INFO replication.replica_manager r-0: follower of node 1 in "
                "epoch 2, ISR [1, 2]",
                f"{stamp(1.2)} INFO sluice draining: no new connections; ...",
                f"{stamp(1.3)} INFO replication.replica_manager other-0: leader in epoch 9, ISR",
            ],
        ),
        (
            1,
            [
                f"{stamp(1.05)} INFO replication.replica_manager r-0: leader in epoch 2, ISR [1]",
                f"{stamp(2.0)} INFO sluice draining: no new connections; ...",
            ],
        ),
        (
            2,
            [
                f"{stamp(0.9)} INFO replication.replica_manager r-1: leader in epoch 5, ISR [2]",
                f"{stamp(2.5)} INFO replication.replica_manager r-0: leader in epoch 3, ISR [2]",
            ],
        ),
    ]
    events = leadership_events(logs, "r")
    assert len(events) == 6  # another topic's line is not one of them
    gaps = leaderless_gaps(events, {0: 0, 1: 1}, at(0.0), at(3.0))
    # r-0: 1.0 -> 1.05 (node 0 steps down first), 2.0 -> 2.5 (node 1 drains while leading);
    # r-1: node 2 took it over before node 1 drained: no gap.
    assert [round(g, 3) for g in gaps[0]] == [0.05, 0.5]
    assert gaps[1] == []
    summary = gap_summary(gaps)
    assert summary["stretches"] == 2
    assert summary["stretch_ms"]["max"] == 500.0
    assert summary["per_partition_total_ms"]["max"] == 550.0


def test_a_partition_still_leaderless_at_the_end_counts_to_the_end() -> None:
    events = leadership_events([(0, [f"{stamp(1.0)} INFO sluice draining: x"])], "r")
    gaps = leaderless_gaps(events, {0: 0}, at(0.0), at(4.0))
    assert [round(g, 3) for g in gaps[0]] == [3.0]
