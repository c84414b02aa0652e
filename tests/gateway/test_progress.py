"""Progress when not on a terminal: a line per tenth of a known total, else one per interval,
one at the end, and nothing at all when not shown."""

from __future__ import annotations

import io

from gateway.cli.progress import PLAIN_EVERY_S, Progress


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_known_total_says_each_tenth_once() -> None:
    stream = io.StringIO()
    with Progress("bench", 6, unit="scenarios", stream=stream, clock=Clock()) as progress:
        progress.describe("scenario 1 of 6: produce")
        for _ in range(6):
            progress.advance(note="a cell")
    assert stream.getvalue().splitlines() == [
        "bench: scenario 1 of 6: produce",
        "bench: 1 of 6 scenarios (17%), a cell",
        "bench: 2 of 6 scenarios (33%), a cell",
        "bench: 3 of 6 scenarios (50%), a cell",
        "bench: 4 of 6 scenarios (67%), a cell",
        "bench: 5 of 6 scenarios (83%), a cell",
        "bench: 6 of 6 scenarios (100%), a cell",
    ]


def test_an_unknown_total_says_where_it_is_every_interval_and_at_the_end() -> None:
    stream, clock = io.StringIO(), Clock()
    with Progress("produce t", unit="bytes", stream=stream, clock=clock) as progress:
        for _ in range(100):
            clock.now += 1
            progress.advance(1000, "some records")
    assert stream.getvalue().splitlines() == [
        f"produce t: {n}.0 kB, some records" for n in range(10, 101, 10)
    ]
    assert PLAIN_EVERY_S == 10
    stream = io.StringIO()
    with Progress("produce t", unit="bytes", stream=stream, clock=clock) as progress:
        progress.advance(5)
    assert stream.getvalue() == "produce t: 5 bytes\n"  # the end, said once


def test_nothing_when_not_shown() -> None:
    stream = io.StringIO()
    with Progress("produce t", 10, stream=stream, show=False) as progress:
        progress.describe("typing")
        progress.advance(10)
    assert stream.getvalue() == ""
