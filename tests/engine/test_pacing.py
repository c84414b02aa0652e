"""A paced pass works `share` of the time: after each slice of work it sleeps the rest."""

from __future__ import annotations

import pytest

from engine.pacing import Pacer


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_it_sleeps_after_a_slice_so_that_work_is_its_share() -> None:
    clock = Clock()
    pacer = Pacer(share=0.25, slice_s=0.002, clock=clock, sleep=clock.sleep)
    pacer.tick()  # the first unit starts the slice
    for _ in range(3):
        clock.now += 0.0009
        pacer.tick()
    # 2.7 ms of work: past the slice at the third tick, then three times as long asleep.
    assert clock.slept == [pytest.approx(0.0081)]
    clock.now += 0.001
    pacer.tick()  # a new slice began after the rest: 1 ms is within it
    assert len(clock.slept) == 1


def test_a_whole_share_never_sleeps() -> None:
    clock = Clock()
    pacer = Pacer(share=1.0, slice_s=0.001, clock=clock, sleep=clock.sleep)
    for _ in range(10):
        pacer.tick()
        clock.now += 0.01
    assert clock.slept == []


@pytest.mark.parametrize("share", [0.0, -0.5, 1.5])
def test_a_share_outside_zero_to_one_is_refused(share: float) -> None:
    with pytest.raises(ValueError, match="share"):
        Pacer(share=share)
