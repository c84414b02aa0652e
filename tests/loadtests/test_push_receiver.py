"""The push receiver's record of what was delivered: offset ranges per partition, merged."""

from __future__ import annotations

import time

from loadtests.push_receiver import Counts, cover


def test_cover_merges_adjacent_and_overlapping_ranges() -> None:
    ranges: list[list[int]] = []
    for first, last in [(10, 19), (0, 4), (30, 30), (5, 9), (18, 25), (27, 28), (26, 26)]:
        cover(ranges, first, last)
    assert ranges == [[0, 28], [30, 30]]
    cover(ranges, 0, 40)
    assert ranges == [[0, 40]]


def test_arrivals_cover_batches_and_single_records_per_partition() -> None:
    counts = Counts()
    for message_id in ["t/0/0-99", "t/1/0", "t/0/100-149", "t/1/1", "t/0/50-60", "t/1/3"]:
        counts.arrived(message_id, None)
    assert counts.records == 150 + 11 + 3
    assert counts.covered == {"t/0": [[0, 149]], "t/1": [[0, 1], [3, 3]]}


def test_a_delay_is_taken_from_the_sent_header_when_there_is_one() -> None:
    counts = Counts()
    counts.arrived("t/0/0", "2000-01-01T00:00:00.000Z", time.time() * 1000 - 5)
    counts.arrived("t/0/1", "2000-01-01T00:00:00.000Z")
    from_sent, from_time = counts.latencies_ms
    assert 5 <= from_sent < 60_000  # the producer's send time, not the record's timestamp
    assert from_time > 20 * 365 * 86_400_000
