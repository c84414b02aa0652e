"""Push in queue mode: from produce to first delivery at half the maximum sustained rate.

One gateway on the first CPU; the receiver (`loadtests.push_receiver`, 204 at once, its own
process) and this process, the producer, on the others. A queue-mode subscription (`mode:
queue`, `concurrency.max_requests` MAX_REQUESTS, one record a request, binary CloudEvents) on a
topic of PARTITIONS partitions. The producer sends one record a produce, open loop: each produce
at its scheduled time t0 + i/rate over CONNECTIONS keep-alive connections without waiting for
the answers before the next (as `loadtests.openloop`: a slow gateway does not slow the offered
load), to the partitions in turn, each record carrying its scheduled send time in a header
(`sent`, wall-clock ms, which the subscription passes on as the CloudEvents extension
`ce-sent`); the receiver takes arrival - scheduled of every delivery.

- backlog: a new subscription delivers `backlog` records from the earliest (nothing produced
  meanwhile): records/s from its creation to the last arrival, the median of `rounds`; the
  ceiling of the search below;
- maximum sustained: open-loop produce at a rate for `probe_seconds` to a new topic and
  subscription, from 0.8 of the backlog's rate down by a fifth each time, until every produce
  was answered 2xx and every record arrived within KEEP_UP_S of its send (delivery kept pace
  with the produce); then once halfway to the rate above it;
- latency: the same at half the maximum sustained rate for `seconds`: p50 / p99 / p99.9 / max
  from the scheduled send to the first delivery (a 2xx accepts a record: its first delivery
  is its only one, which the receiver's record of the offsets checks). Goal: p99 <= 20 ms;
- the machine over the latency cell's seconds: its own stalls (`loadtests.machine_stalls`: a
  sleeper per CPU at real-time priority) and how long the gateway's threads waited for a CPU
  (its event loop's run-queue time, /proc/<pid>/schedstat: the other work on its CPU, which
  the sleepers at real-time priority do not see).

    python -m loadtests.queue_push_bench [--quick] [--rounds N] [--seconds S] [--rate R]
        [--out DIR] [--profile]

`--rate` skips the backlog and the search and produces at R records/s; `--profile` records
the gateway with py-spy over the latency cell (its collapsed stacks beside the report).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop

from loadtests import machine_stalls, openloop
from loadtests.bench import machine
from loadtests.common import (
    cpu_seconds,
    http_json,
    progress,
    raise_fd_limit,
    runqueue_wait_seconds,
    separate_cpus,
    stop_on_sigterm,
)
from loadtests.profiling import own_beside, py_spy, recording, summarize
from loadtests.ratio_cli import Stamp, chosen_plan, command, plan_options, stamp_line, write
from loadtests.rows import VALUE
from loadtests.subscriptions_bench import (
    PARTITIONS,
    Receiver,
    fill,
    gateway,
    subscribe,
    subscription_cell,
)

MAX_REQUESTS = 64
QUEUE = {"mode": "queue", "ordering": "none", "concurrency": {"max_requests": MAX_REQUESTS}}
CONNECTIONS = 4  # the producer's, each with produces in flight
WARM_UP = 200  # records delivered before the latency cell's clock starts
GOAL_P99_MS = 20.0
KEEP_UP_S = 1.0  # a rate is sustained if every record arrived within this of its send
SEARCH_START, SEARCH_STEP = 0.8, 0.8  # of the backlog's rate; each probe's below the last
MAX_PROBES = 10
SHARE_CODE = re.compile(r"\((groups/subscriptions/|groups/share/|gateway/api/fast_share\.py)")


@dataclasses.dataclass(frozen=True)
class Plan:
    backlog: int  # records the backlog's subscription delivers
    rounds: int
    probe_seconds: float  # of each probe of the search
    seconds: float  # of the latency cell's open-loop produce
    warm_up_seconds: float  # each new stream's WARM_UP records are produced over this long


FULL = Plan(backlog=30_000, rounds=3, probe_seconds=10.0, seconds=30.0, warm_up_seconds=2.0)
QUICK = Plan(backlog=300, rounds=1, probe_seconds=0.5, seconds=1.0, warm_up_seconds=0.5)


def produce_request(topic: str, partition: int, scheduled_ms: float) -> bytes:
    """One record, its scheduled send time in header `sent`; acks=1 (the default)."""
    body = b'{"records":[{"value":%s,"headers":{"sent":"%.3f"}}]}' % (VALUE, scheduled_ms)
    return (
        b"POST /v1/topics/%s/partitions/%d/records HTTP/1.1\r\nHost: bench\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
        % (topic.encode(), partition, len(body))
    ) + body


async def produce(port: int, topic: str, rate: float, seconds: float) -> dict[str, Any]:
    """`rate` one-record produces a second for `seconds`, each at its scheduled time, the
    partitions in turn; how late the sends went out and the produces' answers."""
    done = await openloop.send_on_schedule(
        port,
        openloop.http_answer,
        CONNECTIONS,
        rate,
        seconds,
        lambda i, scheduled_ms: produce_request(topic, i % PARTITIONS, scheduled_ms),
    )
    return {
        "sent": done.sent,
        "answered": len(done.answers),
        "failures": done.failures,
        "achieved_rate": done.achieved_rate,
        "sends_ended": done.sends_ended,
        "produce_answer": openloop.percentiles(done.answers),
        "send_late": openloop.percentiles(done.late),
    }


def backlog(url: str, pid: int, receiver: Receiver, plan: Plan) -> dict[str, Any]:
    """The backlog delivered by a new queue-mode subscription, `rounds` times; the median."""
    fill(url, "backlog", plan.backlog)
    rows = []
    for number in range(plan.rounds):
        progress(f"backlog, round {number + 1}: {plan.backlog:,} records")
        rows.append(subscription_cell(url, pid, receiver, "backlog", plan.backlog, **QUEUE))
    ordered = sorted(rows, key=lambda r: r["records_per_s"])
    return {
        **ordered[(len(ordered) - 1) // 2],
        "rounds_records_per_s": [r["records_per_s"] for r in rows],
    }


class Stream:
    """A new topic, a queue-mode subscription delivering it to the receiver, and the
    dispatcher running (WARM_UP records, produced over `warm_up_s`, delivered); `close`
    deletes both."""

    def __init__(self, url: str, receiver: Receiver, warm_up_s: float) -> None:
        self.url, self.receiver = url, receiver
        self.port = int(url.rsplit(":", 1)[1])
        self.topic = f"push-{time.monotonic_ns() % 10**12}"
        http_json("POST", url + "/v1/topics", {"name": self.topic, "partitions": PARTITIONS})
        self.name = subscribe(url, self.topic, receiver.url, **QUEUE)  # earliest: none skipped
        receiver.reset()
        uvloop.run(produce(self.port, self.topic, WARM_UP / warm_up_s, warm_up_s))
        receiver.until(WARM_UP)
        receiver.reset()

    def produce(self, rate: float, seconds: float) -> dict[str, Any]:
        return uvloop.run(produce(self.port, self.topic, rate, seconds))

    def close(self) -> None:
        http_json("DELETE", f"{self.url}/v1/subscriptions/{self.name}")
        http_json("DELETE", f"{self.url}/v1/topics/{self.topic}")


def probe(
    url: str, pid: int, receiver: Receiver, rate: float, seconds: float, warm_up_s: float
) -> dict[str, Any]:
    """Whether delivery keeps pace with an open-loop produce at `rate` for `seconds`; how long
    the gateway's event loop waited for a CPU meanwhile."""
    stream = Stream(url, receiver, warm_up_s)
    try:
        waited, started = runqueue_wait_seconds(pid), time.monotonic()
        produced = stream.produce(rate, seconds)
        by = produced["sends_ended"] + KEEP_UP_S
        while (got := receiver.stats())["records"] < produced["sent"] and time.monotonic() < by:
            time.sleep(0.02)
        waited, wall = runqueue_wait_seconds(pid) - waited, time.monotonic() - started
    finally:
        stream.close()
    kept = (
        produced["answered"] == produced["sent"]
        and not produced["failures"]
        and got["records"] >= produced["sent"]
        and got["last_at"] <= by
    )
    progress(
        f"probe {rate:.0f} records/s: {got['records']:,} of {produced['sent']:,} delivered "
        f"in time, produce p99 {produced['produce_answer'].get('p99_ms')} ms, the gateway's "
        f"loop {waited:.1f} s of {wall:.1f} s waiting for a CPU"
        + ("" if kept else " (fell behind)")
    )
    return {
        "rate": round(rate),
        "sent": produced["sent"],
        "answered": produced["answered"],
        "delivered_in_time": got["records"],
        "produce_p99_ms": produced["produce_answer"].get("p99_ms"),
        "gateway_run_queue_s": round(waited, 2),
        "wall_s": round(wall, 2),
        "kept_up": kept,
    }


def sustained(url: str, pid: int, receiver: Receiver, ceiling: float, plan: Plan) -> dict[str, Any]:
    """The highest probed rate that delivery kept pace with, searched down from the backlog's
    rate (`ceiling`), then once halfway back up."""
    seconds, warm_up_s = plan.probe_seconds, plan.warm_up_seconds
    probes: list[dict[str, Any]] = []
    rate = ceiling * SEARCH_START
    failed = ceiling
    for _ in range(MAX_PROBES):
        probes.append(probe(url, pid, receiver, rate, seconds, warm_up_s))
        if probes[-1]["kept_up"]:
            break
        failed, rate = rate, rate * SEARCH_STEP
    else:
        raise RuntimeError(f"delivery kept pace with none of {[p['rate'] for p in probes]}")
    best = rate
    middle = (rate + failed) / 2
    probes.append(probe(url, pid, receiver, middle, seconds, warm_up_s))
    if probes[-1]["kept_up"]:
        best = middle
    return {"records_per_s": round(best), "probes": probes}


def latency(
    url: str,
    pid: int,
    receiver: Receiver,
    rate: float,
    plan: Plan,
    cpus: list[int],
    profile: Path | None,
) -> dict[str, Any]:
    """Open-loop produce at `rate` for `plan.seconds` to a new topic a queue-mode subscription
    delivers; the delays at the receiver, the gateway's CPU, its waits for one, and the
    machine's stalls over the same seconds."""
    seconds = plan.seconds
    stream = Stream(url, receiver, plan.warm_up_seconds)
    try:
        with machine_stalls.Probes(cpus) as probes:
            with recording(pid, profile) if profile is not None else contextlib.nullcontext():
                cpu, waited = cpu_seconds(pid), runqueue_wait_seconds(pid)
                started = time.monotonic()
                produced = stream.produce(rate, seconds)
                got = receiver.until(produced["sent"])
                ended = time.monotonic()
                spent, waited = cpu_seconds(pid) - cpu, runqueue_wait_seconds(pid) - waited
            stalls = probes.window(started, ended)
        delays = receiver.stats(latencies=True)["latencies_ms"]
        covered = http_json("GET", receiver.base + "/stats?covered")["covered"]
    finally:
        stream.close()
    spans = list(covered.values())
    once = (
        got["requests"] == produced["sent"]
        and all(len(ranges) == 1 for ranges in spans)
        and sum(last - first + 1 for ((first, last),) in spans) == produced["sent"]
    )
    figures = openloop.percentiles(delays)
    produced.pop("sends_ended")
    return {
        "rate": round(rate),
        "seconds": seconds,
        **produced,
        "delivered": got["records"],
        "requests": got["requests"],
        "each_once": once,
        "latency": figures,
        "mean_ms": round(statistics.fmean(delays), 3) if delays else None,
        "over_20ms": sum(1 for d in delays if d > GOAL_P99_MS),
        "gateway_cpu_s": round(spent, 2),
        "gateway_cores_busy": round(spent / (ended - started), 2),
        "gateway_run_queue_s": round(waited, 2),
        "wall_s": round(ended - started, 2),
        "stalls": stalls,
        "met": figures.get("p99_ms", float("inf")) <= GOAL_P99_MS,
    }


def run(plan: Plan, scratch: Path, rate: float | None, out: Path | None) -> dict[str, Any]:
    cpus = sorted(os.sched_getaffinity(0))  # before the gateway and this process are placed
    with gateway(scratch, "queue-push") as (process, url):
        doc: dict[str, Any] = {"cpus": separate_cpus(process.pid)}
        receiver = Receiver()  # on this process's CPUs, away from the gateway's
        try:
            if rate is None:
                doc["backlog"] = backlog(url, process.pid, receiver, plan)
                ceiling = doc["backlog"]["records_per_s"]
                doc["sustained"] = sustained(url, process.pid, receiver, ceiling, plan)
                rate = doc["sustained"]["records_per_s"] / 2
            progress(f"latency: {rate:.0f} records/s for {plan.seconds} s")
            raw = None if out is None else out / "queue-push-profile.txt"
            doc["latency"] = latency(url, process.pid, receiver, rate, plan, cpus, raw)
            if raw is not None:
                doc["profile"] = summarize(raw.read_text(), SHARE_CODE)
        finally:
            receiver.close()
    return doc


def markdown(doc: dict[str, Any]) -> str:
    meta, lat = doc["meta"], doc["latency"]
    figures = lat["latency"]
    lines = [
        f"# Push in queue mode, {meta['date']}",
        "",
        stamp_line(meta, doc["cpus"])
        + f". A queue-mode subscription, max_requests {MAX_REQUESTS}, {PARTITIONS} partitions, "
        "100-byte values, the receiver answering 204 at once.",
        "",
    ]
    if "backlog" in doc:
        top, search = doc["backlog"], doc["sustained"]
        tried = ", ".join(
            f"{p['rate']:,}"
            + ("" if p["kept_up"] else " (fell behind)")
            + f" [its loop {p['gateway_run_queue_s']} s of {p['wall_s']} s waiting for a CPU]"
            for p in search["probes"]
        )
        lines += [
            f"Backlog: {top['records']:,} records delivered at {top['records_per_s']:,} "
            f"records/s (rounds {top['rounds_records_per_s']}), the gateway "
            f"{top['server_cores_busy']} cores busy, {_shown(top['records_per_server_cpu_s'])} "
            "records per gateway CPU-second.",
            "",
            f"Maximum sustained (produce and delivery at once): {search['records_per_s']:,} "
            f"records/s; probed {tried}.",
            "",
        ]
    lines += [
        f"Latency, one record a produce at {lat['rate']:,} records/s (achieved "
        f"{lat['achieved_rate']:,}) for {lat['seconds']} s, {lat['sent']:,} records, "
        f"{lat['delivered']:,} delivered ({'each once' if lat['each_once'] else 'NOT each once'}"
        f"), the gateway {lat['gateway_cores_busy']} cores busy, its event loop "
        f"{lat['gateway_run_queue_s']} s waiting for a CPU (run queue) in "
        f"{lat['wall_s']} s:",
        "",
        "| from the scheduled send to the receiver | p50 | p99 | p99.9 | max | mean "
        "| over 20 ms | goal: p99 <= 20 ms |",
        "|---|---|---|---|---|---|---|---|",
        f"| first delivery | {figures['p50_ms']} | {figures['p99_ms']} | {figures['p999_ms']} "
        f"| {figures['max_ms']} | {lat['mean_ms']} | {lat['over_20ms']} "
        f"| {'met' if lat['met'] else 'not met'} |",
        f"| the produce's answer | {lat['produce_answer']['p50_ms']} "
        f"| {lat['produce_answer']['p99_ms']} | {lat['produce_answer']['p999_ms']} "
        f"| {lat['produce_answer']['max_ms']} | | | |",
        f"| the send's own lateness | {lat['send_late']['p50_ms']} "
        f"| {lat['send_late']['p99_ms']} | {lat['send_late']['p999_ms']} "
        f"| {lat['send_late']['max_ms']} | | | |",
        "",
        "The machine's own stalls over the same seconds (a sleeper per CPU"
        + (" at real-time priority" if all(c["realtime"] for c in lat["stalls"].values())
           else ", NOT at real-time priority: its figures include the CPU's other work")
        + "):",
        "",
        "| CPU | longest ms | over 1 ms | over 3 ms | over 10 ms |",
        "|---|---|---|---|---|",
        *(
            f"| {cpu} | {s['max_ms']} | {s['over_1ms']} | {s['over_3ms']} | {s['over_10ms']} |"
            for cpu, s in lat["stalls"].items()
        ),
        "",
    ]  # fmt: skip
    if "profile" in doc:
        summary = doc["profile"]
        lines += [
            f"## Profile of the gateway over the latency cell ({summary['samples']} samples)",
            "",
            *own_beside(summary, "inclusive", "inclusive %"),
            "",
        ]
    return "\n".join(lines)


def _shown(value: Any) -> str:
    return "not measured" if value is None else f"{value:,}"


def main() -> None:
    parser = plan_options(__doc__ or "", f"of the maximum; default {FULL.rounds}")
    parser.add_argument("--seconds", type=float, help=f"of the latency; default {FULL.seconds}")
    parser.add_argument("--rate", type=float, help="records/s of the latency cell (no maximum)")
    parser.add_argument("--profile", action="store_true", help="py-spy the gateway's latency")
    args = parser.parse_args()
    stop_on_sigterm()
    plan = chosen_plan(args, QUICK, FULL)
    if args.seconds is not None:
        plan = dataclasses.replace(plan, seconds=args.seconds)
    if args.profile:
        py_spy()
    raise_fd_limit()
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = Stamp()
    with tempfile.TemporaryDirectory(prefix="sluice-queue-push-") as scratch:
        doc = run(plan, Path(scratch), args.rate, args.out if args.profile else None)
    doc["meta"] = stamp.meta(
        command("loadtests.queue_push_bench", parser, args),
        commit=stamp.commit,
        plan=dataclasses.asdict(plan),
        machine=machine(),
    )
    write(args.out, "queue-push", doc, markdown(doc))


if __name__ == "__main__":
    main()
