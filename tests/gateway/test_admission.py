"""The admission control's rule (gateway.api.admission), fed delays by hand: a burst sheds
nothing, a standing delay lowers the share admitted (spread evenly, never below the floor),
and so does a standing wait of pipelined produces after they were read, added to the loop's
delay; the share moves with time, not with the number of probes, faster the further the delay
is from the target, and comes back once the loop is on time; the in-progress bound holds
whatever the delay. Then its probe on a real event loop: a stall shows as the loop's delay."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest

from gateway.api import admission
from gateway.api.admission import Admission
from gateway.settings import Settings

TARGET_S = 0.005
SHARED_CORE = Path(__file__).with_name("data") / "admission-shared-core.txt"


def admission_of(max_inflight: int = 1024, target_delay_ms: int = 5) -> Admission:
    return Admission(
        Settings(
            data_dir=Path("unused"),
            admission_max_inflight=max_inflight,
            admission_target_delay_ms=target_delay_ms,
        )
    )


def decisions(control: Admission, count: int) -> list[bool]:
    """Admit `count` produces and answer each at once; whether each was admitted."""
    made = []
    for _ in range(count):
        made.append(control.admit())
        if made[-1]:
            control.done()
    return made


def stand(
    control: Admission, delay_s: float, seconds: float, start: float = 0.0, every: float = 0.001
) -> float:
    """Probes `every` so often for `seconds`, each measuring `delay_s`; the time after."""
    now = start
    while now < start + seconds:
        control.observe_delay(delay_s, now)
        now += every
    return now


class _Timer:
    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when, self.callback, self.cancelled = when, callback, False

    def cancel(self) -> None:
        self.cancelled = True


class ManualLoop:
    """The part of an event loop the admission's probe uses, with a clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.timers: list[_Timer] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[[], None]) -> _Timer:
        timer = _Timer(when, callback)
        self.timers.append(timer)
        return timer

    def pending(self) -> _Timer | None:
        live = [timer for timer in self.timers if not timer.cancelled]
        return live[-1] if live else None

    def fire(self, late_s: float = 0.0) -> float:
        """Run the pending timer `late_s` after it fell due; the period it had been armed for."""
        timer = self.pending()
        assert timer is not None
        period = timer.when - self.now
        self.timers.remove(timer)
        self.now = timer.when + late_s
        timer.callback()
        return round(period, 6)


def probed(control: Admission) -> ManualLoop:
    loop = ManualLoop()
    control.start(cast(asyncio.AbstractEventLoop, loop))
    return loop


def test_a_loop_on_time_is_probed_less_often_and_a_late_one_every_millisecond() -> None:
    """While produces arrive and the probe finds the loop on time, its period doubles up to
    PROBE_MAX_S: an idle-ish loop is not woken every millisecond to be told it is on time. The
    first late probe brings it back to PROBE_S."""
    control = admission_of()
    loop = probed(control)
    periods = []
    for _ in range(7):
        assert control.admit()
        control.done()
        periods.append(loop.fire())
    assert periods == [0.001, 0.002, 0.004, 0.008, 0.016, 0.016, 0.016]
    assert admission.PROBE_MAX_S == 0.016
    assert control.admit()
    control.done()
    loop.fire(late_s=0.003)
    assert loop.fire() == admission.PROBE_S
    assert loop.fire() == 2 * admission.PROBE_S


def test_the_probe_stops_once_no_produce_came_for_a_while_and_the_next_one_restarts_it() -> None:
    control = admission_of()
    loop = probed(control)
    assert control.admit()
    control.done()
    start, fired = loop.now, 0
    while loop.pending() is not None:
        loop.fire()
        fired += 1
    assert loop.now - start >= admission.IDLE_S
    assert fired < 12, "a quiet loop is probed a few times, not every millisecond"
    assert control.admit()
    control.done()
    assert loop.fire() == admission.PROBE_S


def test_the_time_the_loops_thread_did_not_run_is_not_its_queue() -> None:
    """The probe ran 50 ms late, but the loop's thread was on a CPU for 5 ms of it (the rest it
    waited for one, behind other processes): refusing produces would not shorten that wait.
    The same delay with the thread running throughout is the loop's own queue."""
    waiting, working = admission_of(), admission_of()
    now = 0.0
    while now < 1.0:
        waiting.observe_delay(0.050, now, ran_s=0.005)
        working.observe_delay(0.050, now, ran_s=0.051)
        now += 0.01
    assert waiting.share == 1.0
    assert working.share == admission.MIN_SHARE
    assert waiting.longest_delay_s() == 0.050, "the loop's stalls, whatever their cause"


def recorded(path: Path) -> list[tuple[float, float, float, float, float]]:
    """A probe's samples: loop time, delay, produces' wait, busy share, CPU time ran."""
    rows = []
    for line in path.read_text().splitlines():
        if line and not line.startswith("#"):
            now, delay, waited, busy, ran = map(float, line.split())
            rows.append((now, delay, waited, busy, ran))
    return rows


def test_a_gateway_below_capacity_on_a_shared_core_refuses_nothing() -> None:
    """The samples a real gateway's probe took at a fifth of its maximum while two CPU-bound
    processes shared its core: the loop ran tens of milliseconds late while its thread ran a
    few of them, and the rule, counting the whole delay, refused four produces in ten. Fed to
    the rule with the gateway's defaults, they lower nothing now."""
    samples = recorded(SHARED_CORE)
    assert len(samples) == 500
    control = Admission(Settings(data_dir=Path("unused")))
    whole = Admission(Settings(data_dir=Path("unused")))
    lowest = 1.0
    for now, delay_s, waited_s, busy, ran_s in samples:
        control.observe_delay(delay_s, now, waited_s, busy, ran_s)
        whole.observe_delay(delay_s, now, waited_s, busy)
        assert control.share == 1.0, now
        lowest = min(lowest, whole.share)
    assert all(decisions(control, 1000))
    assert lowest == admission.MIN_SHARE, "the whole delay (its wait for the core) lowered it"


def test_a_burst_shorter_than_the_interval_sheds_nothing() -> None:
    control = admission_of()
    stand(control, 0.050, admission.INTERVAL_S - 0.01)
    assert control.share == 1.0
    assert all(decisions(control, 100))


def test_a_standing_delay_lowers_the_share_evenly_down_to_the_floor() -> None:
    control = admission_of()
    now = stand(control, 0.050, admission.INTERVAL_S + 0.002)
    assert admission.MIN_SHARE < control.share < 1.0
    stand(control, 0.050, 1.0, now)
    assert control.share == admission.MIN_SHARE
    made = decisions(control, 100)
    assert made.count(True) == 100 * admission.MIN_SHARE
    admitted_at = [i for i, taken in enumerate(made) if taken]
    gaps = {b - a for a, b in itertools.pairwise(admitted_at)}
    assert gaps == {round(1 / admission.MIN_SHARE)}, "every n-th one admitted, evenly"
    assert control.shed == 100 - control.admitted


def test_a_standing_wait_of_pipelined_produces_lowers_the_share_with_the_loop_on_time() -> None:
    """Produces that waited behind others on their connections (a backlog the loop's delay
    does not show) count as queueing delay; a few fresh ones among them do not end it."""
    control = admission_of()
    now = 0.0
    for probe in range(400):
        for taken in range(20):
            fresh = taken == 0 and probe % 2  # one read just now, in every other probe
            if control.admit(0.0 if fresh else 0.040):
                control.done()
        control.observe_delay(0.001, now, control.waited_s)
        now += 0.001
    assert control.waited_s > TARGET_S
    assert control.share == admission.MIN_SHARE
    for _ in range(300):  # the backlog drained: produces are taken as they are read
        for _ in range(20):
            if control.admit(0.0):
                control.done()
        control.observe_delay(0.001, now, control.waited_s)
        now += 0.001
    assert control.waited_s < TARGET_S / 2
    assert control.share == 1.0


def test_waits_behind_slow_requests_on_a_loop_with_room_lower_nothing() -> None:
    """Produces that waited behind others finishing elsewhere (a replica's acknowledgement, an
    fsync) while the loop kept well under its core: refusing would not shorten their wait."""
    control = admission_of()
    now = 0.0
    for _ in range(300):
        if control.admit(0.050):
            control.done()
        control.observe_delay(0.0005, now, control.waited_s, busy=0.3)
        now += 0.001
    assert control.waited_s > TARGET_S
    assert control.share == 1.0
    for _ in range(110):  # the same waits with the loop's core busy: its own queue
        control.observe_delay(0.0005, now, control.waited_s, busy=admission.BUSY_FLOOR)
        now += 0.001
    assert control.share < 1.0


def test_the_loops_delay_and_the_wait_after_the_read_add_up() -> None:
    """Each below the target, together above it: a pipelined request waited for both, while
    the loop's core was busy; with room to spare, the wait is not the loop's."""
    busy, idle = admission_of(), admission_of()
    now = 0.0
    for _ in range(300):
        for control in (busy, idle):
            if control.admit(TARGET_S * 0.6):
                control.done()
        busy.observe_delay(TARGET_S * 0.6, now, busy.waited_s, busy=admission.BUSY_FLOOR)
        idle.observe_delay(TARGET_S * 0.6, now, idle.waited_s, busy=0.3)
        now += 0.001
    assert busy.share < 1.0
    assert idle.share == 1.0


def test_the_share_moves_with_time_not_with_the_number_of_probes() -> None:
    """A loop whose iterations grow long under load probes less often: the share falls as
    far over the same time as it does probed every millisecond."""
    often, seldom = admission_of(), admission_of()
    stand(often, TARGET_S * 1.2, 0.3)
    stand(seldom, TARGET_S * 1.2, 0.3, every=0.04)
    assert admission.MIN_SHARE < often.share < 1.0
    assert seldom.share == pytest.approx(often.share, rel=0.25)


def test_the_share_comes_back_faster_the_further_below_the_target() -> None:
    near, far = admission_of(), admission_of()
    for control in (near, far):
        now = stand(control, 0.050, 1.0)
        assert control.share == admission.MIN_SHARE
        now = stand(control, TARGET_S, 0.5, now)  # at the target: held
        assert control.share == admission.MIN_SHARE
    stand(near, TARGET_S * 0.75, 0.1, now)
    stand(far, 0.0, 0.1, now)
    assert admission.MIN_SHARE < near.share < far.share < 1.0
    stand(far, 0.0, 0.1, now + 0.1)
    assert far.share == 1.0
    assert all(decisions(far, 100))


def test_at_most_the_limit_is_in_progress_whatever_the_delay() -> None:
    control = admission_of(max_inflight=3)
    assert [control.admit() for _ in range(5)] == [True, True, True, False, False]
    assert control.inflight == 3 and control.shed == 2
    control.done()
    assert control.admit()
    assert not control.admit()


def test_a_target_of_zero_turns_the_delay_rule_off() -> None:
    control = admission_of(target_delay_ms=0)
    stand(control, 5.0, 2.0)
    assert control.share == 1.0
    loop = asyncio.new_event_loop()
    try:
        control.start(loop)
        assert control.admit()
        assert control._timer is None  # nothing probes the loop
    finally:
        loop.close()


def test_the_delays_are_counted_and_the_longest_is_kept_for_a_minute() -> None:
    control = admission_of()
    control.observe_delay(0.0004, 1.0)
    control.observe_delay(0.030, 2.0)
    control.observe_delay(0.002, 3.0)
    assert sum(control.delays) == 3
    assert control.delays[0] == 1  # <= 1 ms
    assert control.delays[admission.DELAY_BUCKETS_S.index(0.05)] == 1
    assert control.longest_delay_s() == 0.030
    control.observe_delay(0.001, 2.0 + admission.LONGEST_SLOT_S * admission.LONGEST_SLOTS)
    assert control.longest_delay_s() == 0.001


async def test_a_stall_of_the_loop_shows_as_its_delay() -> None:
    """The probe runs while produces arrive: a callback blocking the loop for 50 ms is
    measured as the delay of the probe that fell due meanwhile."""
    control = admission_of()
    control.start(asyncio.get_running_loop())
    assert control.admit()
    control.done()
    probed = asyncio.get_running_loop().create_future()
    original = control.observe_delay

    def watched(
        delay_s: float, now: float, waited_s: float = 0.0, busy: float = 1.0, ran_s: float = 0.0
    ) -> None:
        original(delay_s, now, waited_s, busy, ran_s)
        if delay_s >= 0.04 and not probed.done():
            probed.set_result(delay_s)

    control.observe_delay = watched  # type: ignore[method-assign]
    asyncio.get_running_loop().call_soon(time.sleep, 0.05)  # the stall
    try:
        async with asyncio.timeout(10):
            delay = await probed
    finally:
        control.stop()
    assert delay == pytest.approx(0.05, abs=0.03)
    assert control.longest_delay_s() >= 0.04
    assert control.busy < 0.5  # the stall slept: the loop's thread used little of its core


async def test_after_a_quiet_spell_every_produce_is_admitted_again() -> None:
    """A flood that stops at once leaves the share lowered and the wait's average high; once
    no produce came for `IDLE_S`, the probe stops and the next produces are all admitted,
    whatever came before."""
    control = admission_of()
    control.start(asyncio.get_running_loop())
    rested = asyncio.get_running_loop().create_future()
    original = control._rest

    def watched() -> None:
        original()
        if not rested.done():
            rested.set_result(None)

    control._rest = watched  # type: ignore[method-assign]
    assert control.admit()
    control.done()
    control.share, control.waited_s = admission.MIN_SHARE, 0.200
    try:
        async with asyncio.timeout(10):
            await rested
    finally:
        control.stop()
    assert control._timer is None
    assert control.share == 1.0 and control.waited_s == 0.0
    assert all(decisions(control, 20))
    control.stop()  # the produces armed the probe again


def test_a_produce_that_waited_past_the_limit_is_refused_only_while_a_queue_stands() -> None:
    control = Admission(
        Settings(data_dir=Path("unused"), admission_target_delay_ms=5, admission_max_wait_ms=10)
    )
    assert control.admit(waited_s=1.0), "a burst: the share is whole, nothing is refused"
    control.done()
    stand(control, 0.050, 1.0)
    control._credit = 10.0  # the share's own refusals owe nothing yet
    assert not control.admit(waited_s=0.011)
    assert control.admit(waited_s=0.009)
    assert (control.shed, control.shed_waited, control.inflight) == (1, 1, 1)


def test_without_a_wait_limit_nothing_is_refused_for_its_wait() -> None:
    control = admission_of()
    stand(control, 0.050, 1.0)
    control._credit = 10.0
    assert control.admit(waited_s=60.0) and control.shed_waited == 0
