"""Admission control of the produce routes: past what a worker can serve, a share of the
produces is answered 503 with Retry-After at once rather than queued behind the others.

Requests wait in two places. Those that arrive while the event loop is busy wait in the kernel
until it reads them, for the length of the loop iteration they arrived in; a timer re-armed every
`PROBE_S` while produces arrive runs once an iteration at its start, so how late it runs measures
the iteration before (the loop's delay; its longest is a metric: the loop's stalls, whatever their
cause). While it finds the loop on time its period doubles, up to `PROBE_MAX_S`: a loop with room
to spare is not woken every millisecond to be told so, and the first late probe brings the period
back. Of the loop's delay the rule counts only as much as the loop's thread ran on a CPU since the
probe was armed: the time it waited for one (other processes on the core, a stalled machine,
another thread holding the GIL) is no queue of the loop's own, which refusing produces would
shorten. And a request pipelined behind others on its connection waits, after it was read, for
theirs to be answered, one an iteration: past capacity that backlog grows in the connections while
iterations stay short. The queueing delay the rule follows is the loop's delay plus a moving
average of how long the produces taken had waited since they were read (`WAITED_WEIGHT` each): a
pipelined request waits for both, first in the kernel, then in its connection. The wait counts only
while the loop's thread keeps `BUSY_FLOOR` of its core busy: with room to spare, a produce waits
for the one ahead to finish elsewhere (a replica, the disk), which refusing would not shorten. As
CoDel tells a standing queue from a burst, only a queueing delay above `admission_target_delay_ms`
for `INTERVAL_S` lowers the share of produces admitted; from then on, and whenever the delay is
below the target, the share moves by the ratio of the target to the delay (at most halved or
doubled) every `ADJUST_S` of time, not of probes: a loop's iterations grow long under load, and a
step a probe would then slow the rule down just when it is needed. The further from the target, the
faster it moves, so the share swings less far past what the loop serves than fixed steps made it.
It never falls below `MIN_SHARE`: in a flood a refusal costs about half a produce, so at 150% of
capacity about a third of the produces fits the loop, and at twice the capacity refusing alone
fills it, where a lower share would only give up goodput. The refused ones are spread evenly (every
n-th, not at random) and cost only their answer. With `admission_max_wait_ms`, while the share is
lowered, a request pipelined behind others on its connection that has waited that long since it was
read (its sojourn time, as CoDel's) is refused too: it and those behind it would be answered late.
Off by default: it trades goodput for latency (docs/PERFORMANCE.md, "Overload"). Whatever the
delay, at most `admission_max_inflight` produces are in progress at once, so memory stays bounded.
Fetches are not shed: a parked long-poll costs nothing, and the parked ones are bounded by
--max-parked-fetches.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import math
import time
from collections.abc import Awaitable, Callable, Iterable

from aiohttp import web
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from gateway.api.fast_targets import PARTITION_ROUTE, TOPIC_ROUTE
from gateway.api.rest_proxy import fast as rest_proxy
from gateway.api.rest_proxy.v3 import RECORDS as V3_RECORDS_ROUTE
from gateway.http.problem import Problem
from gateway.settings import Settings

PROBE_S = 0.001
PROBE_MAX_S = 0.016  # the probe's longest period, while it finds the loop on time
INTERVAL_S = 0.1  # the delay above target this long: a standing queue, not a burst
ADJUST_S = 0.05  # the share is multiplied by target / delay (within RATIOS) each this long
RATIOS = (0.5, 2.0)
ADJUST_MAX_S = 0.1  # a probe after a longer gap moves the share as if this long had passed
MIN_SHARE = 0.1
CREDIT_ROUNDING = 1e-9  # ten additions of a share of 0.1 fall short of 1 by a rounding
WAITED_WEIGHT = 1 / 64  # of each produce's wait in the moving average the probe reads
BUSY_FLOOR = 0.9  # the loop's share of its core below which produces' waits are not its queue
DELAY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0)
LONGEST_SLOT_S = 10.0
LONGEST_SLOTS = 6
IDLE_S = 0.1  # this long without a produce, the probe stops until the next produce
RETRY_AFTER_S = "1"
PRODUCE_ROUTES = frozenset(
    {
        TOPIC_ROUTE,
        PARTITION_ROUTE,
        rest_proxy.TOPIC_ROUTE,
        rest_proxy.PARTITION_ROUTE,
        V3_RECORDS_ROUTE,
    }
)


class Admission:
    """One worker's admission of produces: those in progress, the share admitted, and the
    event loop's delay that share follows."""

    def __init__(self, settings: Settings) -> None:
        self.max_inflight = settings.admission_max_inflight
        self.target_s = settings.admission_target_delay_ms / 1000
        self.max_wait_s = settings.admission_max_wait_ms / 1000
        self.share = 1.0  # of the produces arriving, the share admitted
        self.inflight = 0
        self.admitted = 0
        self.shed = 0
        self.shed_waited = 0  # of those shed, refused for having waited past the target
        self.delay_s = 0.0  # the last probe's
        self.delays = [0] * (len(DELAY_BUCKETS_S) + 1)  # probes per delay bucket (+Inf last)
        self.delay_sum_s = 0.0
        self._longest = [0.0] * LONGEST_SLOTS  # the longest delay of each LONGEST_SLOT_S
        self._longest_slot = 0
        self._credit = 0.0  # admissions owed at `share`: every n-th produce is refused
        self._above_since: float | None = None
        self._observed_at = -math.inf  # loop time of the last delay observed
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._due = 0.0
        self._period = PROBE_S
        self._seen = 0
        self._produced_at = 0.0  # loop time of the last probe that found new produces
        self.waited_s = 0.0  # how long the produces taken lately waited (a moving average)
        self.busy = 0.0  # the loop thread's share of a core over the last `INTERVAL_S` or so
        self._cpu_at = (0.0, 0.0)  # (loop time, the thread's CPU time) when the probe was armed

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Serve on this loop: its delay is probed while produces arrive."""
        self._loop = loop

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def admit(self, waited_s: float = 0.0) -> bool:
        """Whether one more produce may start now; True counts it in progress until `done`.
        `waited_s`: how long it waited after it was read; past `admission_max_wait_ms` while
        the share is lowered (the delay stood above target: a queue, not a burst), it is
        refused: its client has waited long already, and those behind it wait for it too."""
        if self._timer is None and self.target_s and self._loop is not None:
            self._wake()
        self.waited_s += (waited_s - self.waited_s) * WAITED_WEIGHT
        if self.max_wait_s and waited_s > self.max_wait_s and self.share < 1.0:
            self.shed += 1
            self.shed_waited += 1
            return False
        if self.share < 1.0:
            self._credit += self.share
            if self._credit < 1.0 - CREDIT_ROUNDING:
                self.shed += 1
                return False
            self._credit -= 1.0
        if self.inflight >= self.max_inflight:
            self.shed += 1
            return False
        self.inflight += 1
        self.admitted += 1
        return True

    def done(self) -> None:
        """An admitted produce was answered (or its client went)."""
        self.inflight -= 1

    def refusal(self) -> Problem:
        """The answer to a produce not admitted."""
        return Problem(
            503,
            "SERVER_OVERLOADED",
            f"this server is past its capacity: nothing was appended; retry after "
            f"{RETRY_AFTER_S} s",
            headers={"Retry-After": RETRY_AFTER_S},
        )

    def observe_delay(
        self,
        delay_s: float,
        now: float,
        waited_s: float = 0.0,
        busy: float = 1.0,
        ran_s: float = math.inf,
    ) -> None:
        """Follow one measure of the queueing delay: the loop's delay, up to `ran_s` (its
        thread's CPU time since the probe was armed: waiting for a CPU or for the GIL is not
        the loop's own queue), plus how long the produces taken lately had waited after they
        were read (`waited_s`) while the loop keeps its core busy (`busy`, at least
        `BUSY_FLOOR`; with room to spare, a wait is for the requests ahead to finish elsewhere,
        a replica or the disk, and refusing would not shorten it). Once it has stood above
        target for `INTERVAL_S`, or whenever it is below, the share admitted moves by target /
        delay for the time since the last measure. The loop's whole delay is kept as the
        loop's stalls."""
        self.delay_s = delay_s
        self.delays[bisect.bisect_left(DELAY_BUCKETS_S, delay_s)] += 1
        self.delay_sum_s += delay_s
        slot = int(now / LONGEST_SLOT_S)
        if slot != self._longest_slot:
            for stale in range(
                self._longest_slot + 1, min(slot, self._longest_slot + LONGEST_SLOTS) + 1
            ):
                self._longest[stale % LONGEST_SLOTS] = 0.0
            self._longest_slot = slot
        index = slot % LONGEST_SLOTS
        self._longest[index] = max(self._longest[index], delay_s)
        if not self.target_s:
            return
        elapsed = min(ADJUST_MAX_S, now - self._observed_at)
        self._observed_at = now
        own_s = min(delay_s, ran_s)
        queued_s = own_s + waited_s if busy >= BUSY_FLOOR else own_s
        if queued_s > self.target_s:
            if self._above_since is None:
                self._above_since = now
            if now - self._above_since < INTERVAL_S:
                return
        else:
            self._above_since = None
            if self.share == 1.0:
                return
        low, high = RATIOS
        ratio = min(high, max(low, self.target_s / queued_s)) if queued_s else high
        self.share = min(1.0, max(MIN_SHARE, self.share * ratio ** (elapsed / ADJUST_S)))
        if self.share == 1.0:
            self._credit = 0.0

    def longest_delay_s(self) -> float:
        """The longest delay probed in the last minute or so (LONGEST_SLOTS slots)."""
        return max(self._longest)

    def _wake(self) -> None:
        """The first produce since the probe stopped starts it again, at its shortest period."""
        assert self._loop is not None
        now = self._loop.time()
        self._produced_at, self._period = now, PROBE_S
        self._arm(now, time.thread_time())

    def _arm(self, now: float, cpu: float) -> None:
        assert self._loop is not None
        self._cpu_at = (now, cpu)
        self._due = now + self._period
        self._timer = self._loop.call_at(self._due, self._probe)

    def _probe(self) -> None:
        assert self._loop is not None
        now = self._loop.time()
        cpu = time.thread_time()
        then, cpu_then = self._cpu_at
        if now > then:
            weight = min(1.0, (now - then) / INTERVAL_S)
            self.busy += (min(1.0, (cpu - cpu_then) / (now - then)) - self.busy) * weight
        delay_s = max(0.0, now - self._due)
        self.observe_delay(delay_s, now, self.waited_s, self.busy, cpu - cpu_then)
        seen = self.admitted + self.shed
        if seen != self._seen:
            self._seen, self._produced_at = seen, now
        elif now - self._produced_at >= IDLE_S:  # nothing to protect until the next produce
            self._timer = None
            self._rest()
            return
        on_time = delay_s < PROBE_S
        self._period = min(PROBE_MAX_S, self._period * 2) if on_time else PROBE_S
        self._arm(now, cpu)

    def _rest(self) -> None:
        """No produce for `IDLE_S`: none waits, so the next are all admitted (the share does
        not wait for probes to raise it, nor the wait's average for produces)."""
        self.share, self._credit, self.waited_s, self._above_since = 1.0, 0.0, 0.0, None


ADMISSION = web.AppKey("admission", Admission)


@web.middleware
async def admission_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """The produces the fast routes leave to the Application, admitted as theirs are."""
    resource = request.match_info.route.resource
    if request.method != "POST" or resource is None or resource.canonical not in PRODUCE_ROUTES:
        return await handler(request)
    admission = request.app[ADMISSION]
    if not admission.admit():
        raise admission.refusal()
    try:
        return await handler(request)
    finally:
        admission.done()


class AdmissionCollector(Collector):
    """The admission's counts and state, read at scrape time: what was admitted and shed, the
    limit in force, and the event loop's delay (the longest since the previous scrape shows
    the loop's stalls, whatever their cause)."""

    def __init__(self, admission: Admission) -> None:
        self.admission = admission

    def collect(self) -> Iterable[Metric]:
        admission = self.admission
        return [
            CounterMetricFamily(
                "sluice_admission_admitted",
                "Produces admitted by the admission control",
                value=admission.admitted,
            ),
            CounterMetricFamily(
                "sluice_admission_shed",
                "Produces answered 503 SERVER_OVERLOADED: past the admission limit",
                value=admission.shed,
            ),
            CounterMetricFamily(
                "sluice_admission_shed_waited",
                "Of the produces shed, those that had waited past --admission-max-wait-ms after "
                "they were read (pipelined behind others while the loop's delay stood above it)",
                value=admission.shed_waited,
            ),
            GaugeMetricFamily(
                "sluice_admission_inflight", "Produces in progress", value=admission.inflight
            ),
            GaugeMetricFamily(
                "sluice_admission_waited_seconds",
                "How long the produces taken lately had waited after they were read, pipelined "
                "behind others on their connection (a moving average)",
                value=admission.waited_s,
            ),
            GaugeMetricFamily(
                "sluice_admission_share",
                "The share of produces admitted now: below 1 while the queueing delay (the "
                "event loop's, or the produces' wait after they were read) stays above the "
                "admission target",
                value=admission.share,
            ),
            HistogramMetricFamily(
                "sluice_event_loop_delay_seconds",
                "How late the event loop ran its probe (while produces arrive: every "
                "millisecond while the loop is late, up to every 16 ms while it is on time): "
                "the queueing delay a request sees, and the loop's stalls",
                buckets=[
                    *zip(
                        map(str, DELAY_BUCKETS_S),
                        itertools.accumulate(admission.delays),
                        strict=False,
                    ),
                    ("+Inf", sum(admission.delays)),
                ],
                sum_value=admission.delay_sum_s,
            ),
            GaugeMetricFamily(
                "sluice_event_loop_delay_max_seconds",
                "The longest event loop delay probed in the last minute",
                value=admission.longest_delay_s(),
            ),
        ]
