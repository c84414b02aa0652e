"""The wake-up probe exchanges every message and leaves the caller's CPU affinity as it was."""

from __future__ import annotations

import os

import pytest

from loadtests import wakeup_cost


@pytest.mark.parametrize(("in_flight", "pinned"), [(1, False), (64, True)])
def test_every_message_comes_back(in_flight: int, pinned: bool) -> None:
    allowed = os.sched_getaffinity(0)
    row = wakeup_cost.exchange(in_flight, 500, pinned)
    assert (row.in_flight, row.pinned, row.messages) == (in_flight, pinned, 500)
    assert row.wall_us > 0 and row.cpu_us >= 0
    assert os.sched_getaffinity(0) == allowed
