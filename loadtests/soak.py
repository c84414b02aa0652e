"""A soak: a mixed workload held at 70% of the measured maximum, reported interval by interval.

    python -m loadtests.soak --minutes 10 --out DIR            # one node
    python -m loadtests.soak --minutes 10 --cluster --out DIR  # etcd and three nodes
    python -m loadtests.soak --minutes 10 --out DIR -- --stall-report-ms 10  # node options

On a fresh gateway (or a 3-node cluster, every topic replicated 3 times) with tiered storage
on a local `moto_server`:

- calibration: the most the node(s) take end to end, in the soak's own shape: first the
  produce mix closed loop (64 requests in flight, a connection each) for a few seconds, with
  every consumer below running, until the group and the checked stream have read it all;
  then the same mix open loop over all the connections at rising shares of that rate, a few
  seconds each, while every answer is 2xx and the p99 stays within STEP_P99_MS (open loop,
  with requests spread over many connections, a request costs the node more than closed
  loop: 70% of the closed-loop rate saturated one node). The highest rate held is the
  maximum; the soak offers `--share` (0.7) of it, or `--rate` requests/s;
- producers, open loop (latency counts from each request's scheduled send time, so a slow
  server cannot slow the offered load; each request goes on an idle one of 256 connections,
  so that none waits behind another's answer while one is free): JSON and binary bodies of
  one and five records into a tiered topic, every record keyed by a unique
  sequence number, and JSON batches into a topic whose short `retention.ms` deletes segments
  as the tiering passes ship them;
- a consumer group (two members long-polling and committing, a third joining and leaving each
  interval) whose records are tallied by sequence: every acknowledged record must be consumed
  exactly once by the group, none lost, none twice;
- a push subscription to `loadtests.push_receiver`: every offset delivered (at least once);
- two SSE streams, one checked for gaps and repeats per partition, one filtered by key.

Each interval reports every node's RSS (the process and its children, tiering's shipper
processes; the mean of samples every 5 s, so that it spans the node's heap trims rather than
falling at one phase of them), open files (/proc/PID/fd),
event-loop tasks (`sluice_event_loop_tasks`) and CPU, and the produces' p50/p99 and errors.
The summary gives the errors, the exactly-once check, RSS growth after warm-up (%), open-file
and task drift, p99 drift (%). DIR gets soak.json, soak.md and soak.png; the exit status is 1
on any error, or any record lost, duplicated or not delivered.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import math
import multiprocessing
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import matplotlib.pyplot as plt
import orjson
import uvloop

from engine.batch import RecordInput, encode_batch
from gateway.workers.local_cluster import LocalCluster
from loadtests.common import (
    MotoServer,
    cpu_seconds,
    http_json,
    progress,
    start_gateway,
    stop_on_sigterm,
    tree_rss_bytes,
)
from loadtests.openloop import Answers, connect, http_answer, percentiles
from loadtests.report import _save, _table
from loadtests.rolling_restart import machine
from loadtests.rows import MEDIA
from loadtests.subscriptions_bench import ALLOWED, Receiver
from loadtests.tier_bench import CREDENTIALS

TOPIC = "soak"  # the checked topic: tiered, every record keyed by its sequence
EXPIRING = "soak-expiring"  # short retention: segments deleted as they age
PARTITIONS = 4
GROUP = "soak-check"
SUBSCRIPTION = "soak-push"
NODES = 3
CONNECTIONS = 256  # the producers' connections, spread over the nodes, open all along
CALIBRATE_IN_FLIGHT = 64
# The open-loop steps of the calibration, as shares of the closed-loop rate; a step holds
# while every answer is 2xx (a node past its capacity sheds 503s) and the p99 stays within this.
CALIBRATE_STEPS = (0.4, 0.55, 0.7, 0.85, 1.0)
STEP_P99_MS = 50.0
BATCH = 5  # records in a small-batch request
PAD = "x" * 80  # a record's value is about 100 bytes
# One request in ten goes to the expiring topic; the rest are JSON and binary, one record or
# a small batch, into the checked topic.
MIX = ("json", "binary", "json", "binary", "json-batch", "binary-batch", "json", "binary",
       "expiring", "json")  # fmt: skip
CHECKED_CONFIGS = {
    "remote.storage.enable": True,
    "segment.bytes": 256 << 10,
    "segment.ms": 10_000,  # rolled by age too, so that even a short run ships segments
    "local.retention.ms": 30_000,  # local copies go once shipped: late readers read S3
}
EXPIRING_CONFIGS = {
    "remote.storage.enable": True,
    "segment.bytes": 64 << 10,
    "segment.ms": 5_000,
    "retention.ms": 10_000,
}
TIERING_INTERVAL_S = 1.0
RSS_SAMPLE_S = 5.0
MAX_DEFAULT_WARMUP_S = 600.0  # the longest default warm-up (see default_warmup_s)
PRODUCE_TIMEOUT_MS = 10_000
ANSWER_DRAIN_S = 30.0  # after the last send, the producers wait this long for answers
CONSUME_DRAIN_S = 180.0  # then the consumers get this long to read everything
MEMBER_POLL_MS = 1000
SESSION_TIMEOUT_MS = 30_000
MAX_RECORDS = 2000
SSE_HEARTBEAT_MS = 5000
CHECK_POLL_S = 0.2
RETRIED = frozenset({421, 503})
RETRY_BACKOFF_S = 0.1  # Kafka's retry.backoff.ms
RETRY_FOR_S = 30.0
SHOWN = 10  # error examples kept


@dataclass(frozen=True)
class Plan:
    """What the producer and consumer processes need to know."""

    urls: tuple[str, ...]
    rate: float | None  # requests/s; None: `share` of the calibrated rate
    share: float
    calibrate_seconds: float
    seconds: float
    interval: float

    @property
    def ports(self) -> list[int]:
        return [int(url.rsplit(":", 1)[1]) for url in self.urls]


# -- producers ------------------------------------------------------------------------------------


def record_value(seq: int) -> bytes:
    return orjson.dumps({"seq": seq, "pad": PAD})


def request_for(kind: str, seq: int, n: int) -> tuple[bytes, int]:
    """The HTTP/1.1 request of the `n`th send of `kind`, and the sequence numbers it uses
    (from `seq` on; none for the expiring topic)."""
    records = BATCH if kind.endswith("batch") or kind == "expiring" else 1
    if kind == "expiring":
        body = orjson.dumps({"records": [{"value": {"pad": PAD}}] * records})
        path, media, records = f"/v1/topics/{EXPIRING}/records", MEDIA["json"], 0
    elif kind.startswith("json"):
        rows = [
            {"key": f"s{s}", "value": orjson.Fragment(record_value(s))}
            for s in range(seq, seq + records)
        ]
        body = orjson.dumps({"records": rows})
        path, media = f"/v1/topics/{TOPIC}/records", MEDIA["json"]
    else:
        batch = [RecordInput(f"s{s}".encode(), record_value(s)) for s in range(seq, seq + records)]
        body = bytes(encode_batch(batch))
        path = f"/v1/topics/{TOPIC}/partitions/{n % PARTITIONS}/records"
        media = MEDIA["binary"]
    head = (
        f"POST {path}?timeout_ms={PRODUCE_TIMEOUT_MS} HTTP/1.1\r\nHost: soak\r\n"
        f"Content-Type: {media}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body, records


@dataclass
class Tally:
    """What one kind of client saw: records, and its errors with the first few examples."""

    requests: int = 0
    records: int = 0
    errors: int = 0
    examples: list[str] = field(default_factory=list)
    retries: dict[str, int] = field(default_factory=dict)  # retried answers, by status

    def retried(self, status: int) -> None:
        self.retries[str(status)] = self.retries.get(str(status), 0) + 1

    def fail(self, what: str) -> None:
        self.errors += 1
        if len(self.examples) < SHOWN:
            self.examples.append(f"{time.strftime('%H:%M:%S')} {what[:300]}")


@dataclass
class Bucket(Tally):
    """The produces answered in one interval: how late each went out and its latency."""

    latencies: list[float] = field(default_factory=list)
    late: list[float] = field(default_factory=list)
    shed: int = 0  # 503s while calibrating: what past the maximum looks like, not errors

    def summary(self) -> dict[str, Any]:
        figures = percentiles(self.latencies)
        return {
            "requests": len(self.latencies),
            "records_acked": self.records,
            "errors": self.errors,
            "shed": self.shed,
            "error_examples": self.examples,
            "p50_ms": figures.get("p50_ms"),
            "p99_ms": figures.get("p99_ms"),
            "max_ms": figures.get("max_ms"),
            "send_late_p99_ms": percentiles(self.late).get("p99_ms"),
        }


class Producers:
    """The soak's requests, each on an idle connection of CONNECTIONS (pipelined behind the
    shortest queue when none is): closed loop to calibrate, then open loop on a clock; what
    each answer says, by interval. The connections stay open from the calibration to the
    end, so that the nodes' open files and tasks change only by their own doing."""

    def __init__(self, plan: Plan, results: Any, shared: Any, stop: Any) -> None:
        self.plan = plan
        self.results = results
        self.shared = shared  # what the consumers have read (Consumers.shared)
        self.stop = stop  # set once the soak has sampled the nodes for the last time
        self.bucket = Bucket()
        self.acked = bytearray()  # 1 at each acknowledged sequence number
        self.pending: list[deque[tuple[float, int, int]]] = []
        self.connections: list[Answers] = []
        self.idle: deque[int] = deque()  # least recently used first
        self.sent = 0
        self.seq = 0
        self.closed_loop_until = 0.0  # while calibrating, each answer sends the next request
        self.calibrating = False

    async def slot(self) -> int:
        """A connection for the next request: the one idle longest (so that every connection
        stays in use, none closed by the node's keep-alive timeout), else the one with the
        fewest requests waiting; one that closed is replaced (its requests failed)."""
        if self.idle:
            slot = self.idle.popleft()
        else:
            slot = min(range(CONNECTIONS), key=lambda i: len(self.pending[i]))
        if self.connections[slot].lost.done():
            while self.pending[slot]:
                self.pending[slot].popleft()
                self.bucket.fail("connection closed before the answer")
            self.connections[slot] = await self.connect(slot)
        return slot

    def send(self, slot: int, scheduled: float) -> None:
        """The next request of the mix on connection `slot`, due at `scheduled` (epoch s)."""
        request, records = request_for(MIX[self.sent % len(MIX)], self.seq, self.sent)
        if len(self.acked) < self.seq + records:
            self.acked.extend(bytes(1 << 16))
        self.pending[slot].append((scheduled * 1000, self.seq, records))
        transport = self.connections[slot].transport
        assert transport is not None
        transport.write(request)
        self.seq += records
        self.sent += 1

    def answered(self, slot: int, status: int, body: bytes) -> None:
        scheduled, seq, records = self.pending[slot].popleft()
        now = time.time()
        self.bucket.latencies.append(now * 1000 - scheduled)
        if 200 <= status < 300:
            self.bucket.records += records
            self.acked[seq : seq + records] = b"\1" * records
        elif status == 503 and self.calibrating:
            self.bucket.shed += 1
        else:
            self.bucket.fail(body.decode(errors="replace"))
        if now < self.closed_loop_until:
            self.send(slot, now)
        elif not self.pending[slot]:
            self.idle.append(slot)

    async def connect(self, slot: int) -> Answers:
        port = self.plan.ports[slot % len(self.plan.ports)]
        return await connect(port, http_answer, functools.partial(self.answered, slot))

    async def answers(self) -> None:
        """Wait (at most ANSWER_DRAIN_S) until every request sent has its answer."""
        deadline = time.monotonic() + ANSWER_DRAIN_S
        while any(self.pending) and time.monotonic() < deadline:
            await asyncio.sleep(CHECK_POLL_S)

    def report(self, kind: str = "bucket", **extra: Any) -> None:
        in_flight = sum(len(waiting) for waiting in self.pending)
        doc = {**self.bucket.summary(), "in_flight": in_flight, **extra}
        self.results.put((kind, doc))
        self.bucket = Bucket()

    async def calibrate(self) -> float:
        """The most the node(s) take end to end in the soak's shape: the mix closed loop,
        CALIBRATE_IN_FLIGHT requests in flight (a connection each), for `calibrate_seconds`,
        then until the group and the checked stream have read every record (requests/s over
        the whole time); then open loop at CALIBRATE_STEPS of that rate, `calibrate_seconds`
        each, until a step is shed or its p99 passes STEP_P99_MS. The highest rate held."""
        self.calibrating = True
        slots = [await self.slot() for _ in range(CALIBRATE_IN_FLIGHT)]
        started = time.time()
        self.closed_loop_until = started + self.plan.calibrate_seconds
        for slot in slots:
            self.send(slot, started)
        await asyncio.sleep(self.plan.calibrate_seconds)  # the measuring window
        await self.answers()
        await self.consumed()
        closed_loop = len(self.bucket.latencies) / (time.time() - started)
        calibration = self.bucket.summary()
        steps = []
        maximum = CALIBRATE_STEPS[0] * closed_loop  # if even the first step is not held
        for share in CALIBRATE_STEPS:
            self.bucket = Bucket()
            rate = share * closed_loop
            await self.offer(rate, self.plan.calibrate_seconds)
            await self.answers()
            step = {"share": share, "rate": round(rate, 1), **self.bucket.summary()}
            step["held"] = (
                step["errors"] == 0 and step["shed"] == 0 and (step["p99_ms"] or 0) <= STEP_P99_MS
            )
            steps.append(step)
            calibration["errors"] += step["errors"]
            if not step["held"]:
                break
            maximum = rate
        await self.consumed()
        self.calibrating = False
        self.bucket = Bucket()
        self.report("calibrated", **calibration, rate=maximum, closed_loop=closed_loop, steps=steps)
        return maximum

    async def consumed(self) -> None:
        """Wait (at most CONSUME_DRAIN_S) until the group and the checked stream have read
        every record sent."""
        deadline = time.monotonic() + CONSUME_DRAIN_S
        while min(self.shared[0], self.shared[1]) < self.seq and time.monotonic() < deadline:
            await asyncio.sleep(CHECK_POLL_S)

    async def offer(self, rate: float, seconds: float, interval: float | None = None) -> int:
        """Send `rate` requests/s for `seconds` on a clock (open loop), each on `slot()`; with
        `interval`, report each interval's answers as it ends (the last is the caller's). The
        number sent."""
        intervals = math.ceil(seconds / interval) if interval else 1
        total = int(rate * seconds)
        step = 1.0 / rate
        start = time.time() + 0.05
        boundary, sent = 1, 0
        while sent < total:
            now = time.time()
            if interval and boundary < intervals and now >= start + boundary * interval:
                self.report()
                boundary += 1
            due = start + sent * step
            if due > now:
                await asyncio.sleep(max(due - now, 0.001))  # the loop's timers tick in ms
                continue
            while sent < total and start + sent * step <= now:
                scheduled = start + sent * step
                self.bucket.late.append((now - scheduled) * 1000)
                self.send(await self.slot(), scheduled)
                sent += 1
        return sent

    async def run(self) -> None:
        plan = self.plan
        self.pending = [deque() for _ in range(CONNECTIONS)]
        self.connections = [await self.connect(slot) for slot in range(CONNECTIONS)]
        self.idle = deque(range(CONNECTIONS))
        rate = plan.rate or plan.share * await self.calibrate()
        self.results.put(("started", {"rate": rate}))
        sent = await self.offer(rate, plan.seconds, plan.interval)
        await self.answers()
        for slot, connection in enumerate(self.connections):
            if self.pending[slot] and connection.transport is not None:
                connection.transport.abort()  # no late answer to a request counted as failed
            while self.pending[slot]:
                self.pending[slot].popleft()
                self.bucket.fail("no answer within the drain")
        self.report()  # sampled with every other connection still open
        self.results.put(("done", {"sent": sent, "acked": bytes(self.acked[: self.seq])}))
        while not self.stop.is_set():
            await asyncio.sleep(CHECK_POLL_S)  # a multiprocessing Event cannot be awaited
        for connection in self.connections:
            if connection.transport is not None:
                connection.transport.close()


def _producer_main(plan: Plan, results: Any, shared: Any, stop: Any) -> None:
    try:
        uvloop.run(Producers(plan, results, shared, stop).run())
    except BaseException as error:  # the soak reads every outcome from the queue
        results.put(("error", f"producers: {type(error).__name__}: {error}"))


# -- consumers ------------------------------------------------------------------------------------


class Consumers:
    """The group's members and the SSE streams, until `stop` is set; `shared` holds the
    group's distinct records, the checked stream's records, the errors and the group's records
    delivered again so far (each row shows when repeats began)."""

    def __init__(self, plan: Plan, stop: Any, shared: Any) -> None:
        self.plan = plan
        self.stop = stop
        self.shared = shared
        self.counts = bytearray()  # times the group delivered each sequence number (max 255)
        self.group = Tally()
        self.joins = 0
        self.sse = Tally()
        self.filtered = Tally()
        self.gaps = 0
        self.repeats = 0
        self.stopping = asyncio.Event()

    def consumed(self, key: str | None) -> None:
        if key is None or not key.startswith("s") or not key[1:].isdigit():
            self.group.fail(f"a record without a sequence: key {key!r}")
            return
        seq = int(key[1:])
        if seq >= len(self.counts):
            self.counts.extend(bytes(seq - len(self.counts) + (1 << 16)))
        if self.counts[seq] == 0:
            self.shared[0] += 1
        else:
            self.shared[3] += 1
        self.counts[seq] = min(255, self.counts[seq] + 1)

    async def call(
        self, http: aiohttp.ClientSession, method: str, url: str, body: Any = None
    ) -> Any:
        """One group request: its JSON answer, or None once counted as an error. A 503 or 421
        (a leader not elected yet, a node that disagrees for a moment) is retried after
        RETRY_BACKOFF_S for up to RETRY_FOR_S, and counted apart, as a client would."""
        self.group.requests += 1
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RETRY_FOR_S
        while True:
            try:
                async with http.request(method, url, json=body) as answer:
                    data = await answer.read()
                    if answer.status // 100 == 2:
                        return orjson.loads(data) if data else {}
                    failure = f"{method} {url} -> {answer.status} {data[:200]!r}"
                    if answer.status in RETRIED and loop.time() < deadline:
                        self.group.retried(answer.status)
                        await asyncio.sleep(RETRY_BACKOFF_S)
                        continue
            except (aiohttp.ClientError, TimeoutError) as error:
                failure = f"{method} {url}: {error!r}"
            self.group.fail(failure)
            self.shared[2] += 1
            return None

    async def member(self, http: aiohttp.ClientSession, url: str, churn: bool) -> None:
        """Join, long-poll and commit what each fetch brought; the churning member leaves after
        half an interval and joins again after another half."""
        base = f"{url}/v1/groups/{GROUP}/members"
        join = {
            "topics": [TOPIC],
            "auto_offset_reset": "earliest",
            "auto_commit": False,
            "session_timeout_ms": SESSION_TIMEOUT_MS,
        }
        loop = asyncio.get_running_loop()
        while not self.stopping.is_set():
            joined = await self.call(http, "POST", base, join)
            if joined is None:
                await self.pause(1.0)
                continue
            self.joins += 1
            member, cursor = joined["member_id"], joined["cursor"]
            leave_at = loop.time() + self.plan.interval / 2 if churn else math.inf
            while not self.stopping.is_set() and loop.time() < leave_at:
                doc = await self.call(
                    http,
                    "GET",
                    f"{base}/{member}/records?timeout_ms={MEMBER_POLL_MS}"
                    f"&max_records={MAX_RECORDS}&cursor={cursor}",
                )
                if doc is None:
                    break  # an error: the member leaves and joins again
                cursor = doc["cursor"]
                for record in doc["records"]:
                    self.consumed(record["key"])
                self.group.records += len(doc["records"])
                if (
                    doc["records"]
                    and await self.call(http, "POST", f"{base}/{member}/commit") is None
                ):
                    break
            await self.call(http, "DELETE", f"{base}/{member}")
            if churn:
                await self.pause(self.plan.interval / 2)

    async def pause(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self.stopping.wait()

    async def stream(self, http: aiohttp.ClientSession, url: str, tally: Tally, query: str) -> None:
        """Follow the checked topic as SSE from its start; reconnect with Last-Event-ID after a
        drop (counted as an error). A stream refused 503 or 421 as it opens (a leader not
        elected yet, a node whose view differs for a moment) is opened again after
        RETRY_BACKOFF_S for up to RETRY_FOR_S and counted apart, as the group's requests are.
        Unless filtered, every partition's offsets must follow one another: a jump is a gap, a
        step back a repeat."""
        checked = "key_prefix" not in query
        expected = [0] * PARTITIONS
        last_id: str | None = None
        loop = asyncio.get_running_loop()
        retry_until = loop.time() + RETRY_FOR_S
        while not self.stopping.is_set():
            headers = {"Accept": "text/event-stream"}
            if last_id is not None:
                headers["Last-Event-ID"] = last_id
            target = (
                f"{url}/v1/topics/{TOPIC}/events?offset=earliest"
                f"&heartbeat_ms={SSE_HEARTBEAT_MS}{query}"
            )
            event = ""
            tally.requests += 1
            try:
                async with http.get(
                    target, headers=headers, timeout=aiohttp.ClientTimeout()
                ) as answer:
                    if answer.status in RETRIED and loop.time() < retry_until:
                        tally.retried(answer.status)
                        await self.pause(RETRY_BACKOFF_S)
                        continue
                    if answer.status != 200:
                        raise RuntimeError(f"status {answer.status}")
                    retry_until = loop.time() + RETRY_FOR_S
                    async for raw in answer.content:
                        line = raw.rstrip(b"\r\n")
                        if line.startswith(b"event: "):
                            event = line[7:].decode()
                        elif line.startswith(b"id: "):
                            last_id = line[4:].decode()
                        elif line.startswith(b"data: ") and event == "record":
                            tally.records += 1
                            if checked:
                                self.check_order(orjson.loads(line[6:]), expected)
                        elif line.startswith(b"data: "):
                            tally.fail(f"SSE {event}: {line[6:300].decode(errors='replace')}")
                            self.shared[2] += 1
                raise RuntimeError("the stream ended")
            except (aiohttp.ClientError, RuntimeError, TimeoutError) as error:
                if self.stopping.is_set():
                    return
                tally.fail(f"SSE {query or 'all'}: {error!r}")
                self.shared[2] += 1
                await self.pause(1.0)

    def check_order(self, record: dict[str, Any], expected: list[int]) -> None:
        partition, offset = record["partition"], record["offset"]
        if offset > expected[partition]:
            self.gaps += offset - expected[partition]
        elif offset < expected[partition]:
            self.repeats += 1
        expected[partition] = max(expected[partition], offset + 1)
        self.shared[1] += 1

    async def watch_stop(self) -> None:
        while not self.stop.is_set():
            await asyncio.sleep(CHECK_POLL_S)  # a multiprocessing Event cannot be awaited
        self.stopping.set()

    async def run(self) -> dict[str, Any]:
        urls = self.plan.urls
        timeout = aiohttp.ClientTimeout(total=MEMBER_POLL_MS / 1000 + 60)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            tasks = [
                asyncio.create_task(self.member(http, urls[i % len(urls)], churn=i == 2))
                for i in range(3)
            ]
            streams = [
                asyncio.create_task(self.stream(http, urls[0], self.sse, "")),
                asyncio.create_task(self.stream(http, urls[-1], self.filtered, "&key_prefix=s7")),
            ]
            await self.watch_stop()
            await asyncio.gather(*tasks)
            for task in streams:
                task.cancel()
            await asyncio.gather(*streams, return_exceptions=True)
        return {
            "counts": bytes(self.counts),
            "group": {
                "requests": self.group.requests,
                "records": self.group.records,
                "joins": self.joins,
                "retries": self.group.retries,
                "errors": self.group.errors,
                "error_examples": self.group.examples,
            },
            "sse": {
                "records": self.sse.records,
                "filtered_records": self.filtered.records,
                "gaps": self.gaps,
                "repeats": self.repeats,
                "retries": {
                    status: self.sse.retries.get(status, 0) + self.filtered.retries.get(status, 0)
                    for status in sorted({*self.sse.retries, *self.filtered.retries})
                },
                "errors": self.sse.errors + self.filtered.errors,
                "error_examples": self.sse.examples + self.filtered.examples,
            },
        }


def _consumer_main(plan: Plan, stop: Any, shared: Any, results: Any) -> None:
    try:
        results.put(("consumed", uvloop.run(Consumers(plan, stop, shared).run())))
    except BaseException as error:  # the soak reads every outcome from the queue
        results.put(("error", f"consumers: {type(error).__name__}: {error}"))


# -- the nodes --------------------------------------------------------------------------------


class Nodes:
    """The gateway under test: one process, or etcd and three cluster nodes."""

    def __init__(self, work: Path, cluster: bool, options: Sequence[str]) -> None:
        self.cluster: LocalCluster | None = None
        self.cpu: dict[str, tuple[float, float]] = {}  # node -> (when, its CPU seconds) last
        self.rss: dict[str, list[int]] = {}  # node -> its RSS samples since the last row
        self._sampling = threading.Event()
        if cluster:
            self.cluster = LocalCluster(work, NODES, node_options=options)
            self.cluster.start()
            self.urls = [node.url for node in self.cluster.nodes]
            self.pids = {str(n.node_id): n.process.pid for n in self.cluster.nodes if n.process}
        else:
            self.process, url = start_gateway(work / "data", *options, log=work / "gateway.log")
            self.urls, self.pids = [url], {"0": self.process.pid}

    def start_sampling(self) -> None:
        """Start sampling RSS (after the load processes are forked: no thread to fork with)."""
        threading.Thread(target=self._sample_rss, daemon=True, name="rss").start()

    def _sample_rss(self) -> None:
        """Every RSS_SAMPLE_S, each node's RSS: a row's figure is their mean, which spans the
        node's heap-trim cycles instead of falling at one phase of them."""
        while not self._sampling.wait(RSS_SAMPLE_S):
            for node, pid in self.pids.items():
                with contextlib.suppress(OSError):  # a node stopped meanwhile
                    self.rss.setdefault(node, []).append(tree_rss_bytes(pid))

    def stop(self) -> None:
        self._sampling.set()
        if self.cluster is not None:
            self.cluster.stop()
        else:
            self.process.terminate()
            self.process.wait(timeout=60)

    def create_topic(self, name: str, configs: dict[str, Any]) -> None:
        doc: dict[str, Any] = {"name": name, "partitions": PARTITIONS, "configs": dict(configs)}
        if self.cluster is not None:
            doc["replication_factor"] = NODES
            doc["configs"]["min.insync.replicas"] = 2
        http_json("POST", f"{self.urls[0]}/v1/topics", doc)
        deadline = time.monotonic() + 60
        while not all(
            p["leader"] is not None and len(p["isr"]) == len(p["replicas"])
            for p in http_json("GET", f"{self.urls[0]}/v1/topics/{name}")["partitions"]
        ):
            if time.monotonic() > deadline:
                raise RuntimeError(f"topic {name}: no full ISR within 60 s")
            time.sleep(CHECK_POLL_S)

    def high_watermarks(self, topic: str) -> dict[int, int]:
        """Each partition's high watermark, the highest any node knows (a follower's may lag)."""
        ends: dict[int, int] = {}
        for url in self.urls:
            for row in http_json("GET", f"{url}/v1/topics/{topic}")["partitions"]:
                ends[row["partition"]] = max(ends.get(row["partition"], 0), row["high_watermark"])
        return ends

    def sample(self) -> dict[str, dict[str, float]]:
        """Each node's mean RSS (MiB) and CPU (% of one core: on a shared machine, what the node
        got) since the last sample, its open files and event-loop tasks now."""
        out: dict[str, dict[str, float]] = {
            "rss_mib": {}, "open_files": {}, "sockets": {}, "tasks": {}, "cpu_pct": {}
        }  # fmt: skip
        now = time.monotonic()
        for (node, pid), url in zip(self.pids.items(), self.urls, strict=True):
            used = cpu_seconds(pid)
            then, before = self.cpu.get(node, (now, used))
            self.cpu[node] = (now, used)
            out["cpu_pct"][node] = (
                round(100 * (used - before) / (now - then), 1) if now > then else 0.0
            )
            samples = self.rss.pop(node, None) or [tree_rss_bytes(pid)]
            out["rss_mib"][node] = round(sum(samples) / len(samples) / 2**20, 1)
            out["open_files"][node], out["sockets"][node] = descriptors(pid)
            out["tasks"][node] = scrape(url)["sluice_event_loop_tasks"]
        return out

    def totals(self, *names: str) -> dict[str, float]:
        """The named metrics summed over every node."""
        sums = dict.fromkeys(names, 0.0)
        for url in self.urls:
            for name, value in scrape(url).items():
                if name in sums:
                    sums[name] += value
        return sums


def descriptors(pid: int) -> tuple[int, int]:
    """A process's open descriptors, and how many of them are sockets (the rest are files,
    pipes and the event loop's own)."""
    folder = f"/proc/{pid}/fd"
    fds = os.listdir(folder)
    sockets = 0
    for fd in fds:
        with contextlib.suppress(OSError):  # closed while we looked
            sockets += os.readlink(f"{folder}/{fd}").startswith("socket:")
    return len(fds), sockets


def scrape(url: str) -> dict[str, float]:
    """A node's /metrics, each metric's samples summed over their labels."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    sums: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            name = name.split("{", 1)[0]
            sums[name] = sums.get(name, 0.0) + float(value)
    return sums


# -- the run --------------------------------------------------------------------------------


def default_warmup_s(run_s: float) -> float:
    """A third of the run, at most `MAX_DEFAULT_WARMUP_S`: under the soak's load the node's
    allocator arenas settle about ten minutes in (docs/PERFORMANCE.md, "30 minutes, one node"),
    and a short run keeps two thirds of its rows to judge."""
    return min(run_s / 3, MAX_DEFAULT_WARMUP_S)


def drift(rows: list[dict[str, Any]], warmup_s: float, interval_s: float) -> dict[str, Any]:
    """After the warm-up: RSS growth (%), open-file and task drift per node, from the sample
    taken at the warm-up's end to the last; p99 drift (%), the last third of the intervals
    that began after the warm-up against their first third. RSS growth from the first row
    too, so that the warm-up's own growth is in the report."""
    ended = min(len(rows) - 1, max(0, round(warmup_s / interval_s) - 1))
    first, last = rows[ended], rows[-1]
    after = rows[ended + 1 :] or rows[-1:]
    share = max(1, len(after) // 3)

    def mean_p99(part: list[dict[str, Any]]) -> float:
        values = [r["p99_ms"] for r in part if r["p99_ms"] is not None]
        return sum(values) / len(values) if values else 0.0

    early, late = mean_p99(after[:share]), mean_p99(after[-share:])

    def growth(since: dict[str, Any]) -> dict[str, float]:
        return {
            n: round(100 * (last["rss_mib"][n] - v) / v, 1) for n, v in since["rss_mib"].items()
        }

    return {
        "from_s": first["t_s"],
        "rss_growth_pct": growth(first),
        "rss_growth_from_first_row_pct": growth(rows[0]),
        "open_files_drift": {n: last["open_files"][n] - v for n, v in first["open_files"].items()},
        "tasks_drift": {n: last["tasks"][n] - v for n, v in first["tasks"].items()},
        "p99_drift_pct": round(100 * (late - early) / early, 1) if early else None,
    }


def check(acked: bytes, counts: bytes) -> dict[str, int]:
    """Every acknowledged sequence consumed exactly once: the lost and the duplicates."""
    counts = counts.ljust(len(acked), b"\0")
    lost = sum(1 for a, c in zip(acked, counts, strict=False) if a and not c)
    duplicates = sum(c - 1 for c in counts if c > 1)
    return {
        "acknowledged": acked.count(1),
        "consumed": len(counts) - counts.count(0),
        "lost": lost,
        "duplicates": duplicates,
        "unacknowledged_consumed": sum(
            1 for a, c in zip(acked, counts, strict=False) if c and not a
        ),
    }


def drain(nodes: Nodes, receiver: Receiver, shared: Any) -> dict[str, Any]:
    """Wait until the group, the checked stream and the subscription have every record of the
    checked topic (or CONSUME_DRAIN_S passed); what the subscription delivered."""
    deadline = time.monotonic() + CONSUME_DRAIN_S
    while True:
        ends = nodes.high_watermarks(TOPIC)
        total = sum(ends.values())
        got = http_json("GET", receiver.base + "/stats?covered")
        covered = {
            int(where.rsplit("/", 1)[1]): ranges
            for where, ranges in got["covered"].items()
            if where.startswith(f"{TOPIC}/")
        }
        pushed = sum(last - first + 1 for ranges in covered.values() for first, last in ranges)
        if (
            shared[0] >= total and shared[1] >= total and pushed >= total
        ) or time.monotonic() > deadline:
            break
        time.sleep(CHECK_POLL_S)
    return {
        "records_in_topic": total,
        "delivered": pushed,
        "missing": total - pushed,
        "redelivered": got["records"] - pushed,
        "ranges": {str(p): covered.get(p, []) for p in sorted(ends)},
    }


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    os.environ.update(CREDENTIALS)  # moto takes any key; the gateway's boto3 needs one
    with contextlib.ExitStack() as stack:
        moto = MotoServer()
        stack.callback(moto.close)
        receiver = Receiver()
        stack.callback(receiver.close)
        options = ["--s3-endpoint", moto.url, "--s3-bucket", moto.new_bucket(),
                   "--tiering-interval", str(TIERING_INTERVAL_S), *ALLOWED,
                   *args.gateway_args]  # fmt: skip
        nodes = Nodes(work, args.cluster, options)
        stack.callback(nodes.stop)
        nodes.create_topic(TOPIC, CHECKED_CONFIGS)
        nodes.create_topic(EXPIRING, EXPIRING_CONFIGS)
        http_json(
            "POST",
            f"{nodes.urls[0]}/v1/subscriptions",
            {"name": SUBSCRIPTION, "topic": TOPIC, "endpoint": receiver.url, "start": "earliest",
             "batching": {"max_records": 500, "max_wait_ms": 100}},
        )  # fmt: skip
        plan = Plan(
            tuple(nodes.urls),
            args.rate,
            args.share,
            args.calibrate_seconds,
            args.seconds,
            args.interval,
        )
        context = multiprocessing.get_context("fork")
        results = context.Queue()
        stop = context.Event()
        # The group's distinct records, the stream's, errors, the group's records delivered again.
        shared = context.Array("q", 4)
        processes = [
            context.Process(target=_producer_main, args=(plan, results, shared, stop), daemon=True),
            context.Process(target=_consumer_main, args=(plan, stop, shared, results), daemon=True),
        ]
        for process in processes:
            process.start()
            stack.callback(process.kill)
        nodes.start_sampling()
        started = time.monotonic()
        rows: list[dict[str, Any]] = []
        calibration: dict[str, Any] | None = None
        rate = args.rate
        produced: dict[str, Any] | None = None
        while produced is None:
            calibrating_s = args.calibrate_seconds * (1 + len(CALIBRATE_STEPS)) + CONSUME_DRAIN_S
            kind, doc = results.get(timeout=args.interval + calibrating_s + ANSWER_DRAIN_S + 120)
            if kind == "error":
                raise RuntimeError(doc)
            if kind == "calibrated":
                calibration = doc
                held = ", ".join(
                    f"{step['rate']:,.0f}/s {'held' if step['held'] else 'not held'} "
                    f"(p99 {step['p99_ms']} ms, {step['shed']} shed)"
                    for step in doc["steps"]
                )
                progress(
                    f"calibration: {doc['closed_loop']:,.0f} requests/s closed loop; open loop "
                    f"{held}: maximum {doc['rate']:,.0f} requests/s"
                )
                continue
            if kind == "started":
                rate, started = doc["rate"], time.monotonic()
                nodes.sample()  # where each node's CPU is counted from
                progress(f"soak: {rate:,.0f} requests/s for {args.seconds:.0f} s")
                continue
            if kind == "done":
                produced = doc
                continue
            row = {"t_s": round(time.monotonic() - started, 1), **doc, **nodes.sample()}
            row["group_consumed"], row["consumer_errors"] = shared[0], shared[2]
            row["group_repeats"] = shared[3]
            row["load_avg"] = round(os.getloadavg()[0], 2)
            rows.append(row)
            progress(
                f"{row['t_s']:7.0f} s  p50 {row['p50_ms']} p99 {row['p99_ms']} ms, errors "
                f"{row['errors']}+{shared[2]}, RSS {row['rss_mib']}, files {row['open_files']}, "
                f"tasks {row['tasks']}, CPU {row['cpu_pct']} %, in flight {row['in_flight']}, "
                f"load {row['load_avg']}, group repeats {row['group_repeats']}"
            )
        push = drain(nodes, receiver, shared)
        stop.set()
        kind, consumed = results.get(timeout=120)
        if kind == "error":
            raise RuntimeError(consumed)
        metrics = nodes.totals(
            "sluice_tier_segments_uploaded_total",
            "sluice_tier_segments_deleted_total",
            "sluice_tier_failures_total",
        )
        expiring = http_json("GET", f"{nodes.urls[0]}/v1/topics/{EXPIRING}")["partitions"]
        subscription = http_json("GET", f"{nodes.urls[0]}/v1/subscriptions/{SUBSCRIPTION}")
    once = check(produced["acked"], consumed.pop("counts"))
    sse = consumed["sse"]
    errors = {
        "produce": sum(r["errors"] for r in rows) + (calibration or {}).get("errors", 0),
        "group": consumed["group"]["errors"],
        "sse": sse["errors"],
        "tiering": int(metrics["sluice_tier_failures_total"]),
    }
    summary = {
        "errors": sum(errors.values()),
        "errors_by_kind": errors,
        "exactly_once": {**once, "ok": once["lost"] == 0 and once["duplicates"] == 0},
        "push": {**push, "state": subscription.get("state"), "ok": push["missing"] == 0},
        "sse": {
            **sse,
            "ok": sse["gaps"] == 0
            and sse["repeats"] == 0
            and sse["records"] >= push["records_in_topic"],
        },
        "group": consumed["group"],
        "retention": {
            "expiring_records_deleted": sum(p["log_start_offset"] for p in expiring),
        },
        "tiering": {
            "segments_uploaded": int(metrics["sluice_tier_segments_uploaded_total"]),
            "remote_segments_deleted": int(metrics["sluice_tier_segments_deleted_total"]),
        },
        "rate": {
            "closed_loop_requests_s": None
            if calibration is None
            else round(calibration["closed_loop"], 1),
            "calibrated_requests_s": None if calibration is None else round(calibration["rate"], 1),
            "target_requests_s": round(rate or 0.0, 1),
            "achieved_requests_s": round(produced["sent"] / args.seconds, 1),
            "records_acknowledged": once["acknowledged"],
        },
        **drift(rows, args.warmup, args.interval),
    }
    summary["passed"] = (
        summary["errors"] == 0
        and summary["exactly_once"]["ok"]
        and summary["push"]["ok"]
        and summary["sse"]["ok"]
    )
    return {
        **machine(),
        "cpu": cpu_model(),
        "command": "python -m loadtests.soak " + " ".join(sys.argv[1:]),
        "mode": f"cluster of {NODES}" if args.cluster else "one node",
        "seconds": args.seconds,
        "interval_s": args.interval,
        "summary": summary,
        "calibration": calibration,
        "rows": rows,
    }


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


# -- the report ---------------------------------------------------------------------------------


def plot(doc: dict[str, Any], path: Path) -> None:
    """RSS, open files and tasks per node, p50/p99 per interval."""
    rows = doc["rows"]
    minutes = [r["t_s"] / 60 for r in rows]
    figure, axes = plt.subplots(2, 2, figsize=(11, 7), sharex=True)
    for ax, key, title in (
        (axes[0][0], "rss_mib", "RSS (MiB)"),
        (axes[0][1], "open_files", "open files"),
        (axes[1][0], "tasks", "event-loop tasks"),
    ):
        for node in rows[0][key]:
            ax.plot(minutes, [r[key][node] for r in rows], marker="o", label=f"node {node}")
        ax.set_title(title)
        ax.legend(fontsize="small")
    latency = axes[1][1]
    for key in ("p50_ms", "p99_ms"):
        latency.plot(minutes, [r[key] for r in rows], marker="o", label=key.split("_")[0])
    latency.set_title("produce latency (ms, from the scheduled send)")
    latency.set_yscale("log")
    latency.legend(fontsize="small")
    for ax in axes[1]:
        ax.set_xlabel("minutes")
    figure.suptitle(
        f"soak: {doc['mode']}, {doc['summary']['rate']['target_requests_s']:,} requests/s"
    )
    _save(figure, path)


def calibration_lines(calibration: dict[str, Any] | None) -> list[str]:
    """The calibration's open-loop steps, one line (none with `--rate`)."""
    if calibration is None:
        return []
    steps = "; ".join(
        f"{step['rate']:,.0f}/s p99 {step['p99_ms']} ms, {step['shed']} shed: "
        f"{'held' if step['held'] else 'not held'}"
        for step in calibration["steps"]
    )
    return [f"- calibration: {calibration['closed_loop']:,.0f}/s closed loop; open loop {steps}"]


def markdown(doc: dict[str, Any]) -> str:
    s = doc["summary"]
    once, push, sse = s["exactly_once"], s["push"], s["sse"]
    lines = [
        f"# Soak: {doc['mode']}, {doc['seconds'] / 60:.1f} minutes",
        "",
        f"{doc['date']}, {doc['cpu']} ({doc['machine']}), {doc['load']}.",
        f"Command: `{doc['command']}`.",
        "",
        f"- **{'passed' if s['passed'] else 'FAILED'}**; errors: {s['errors']} "
        f"{s['errors_by_kind']}",
        f"- rate: {s['rate']}",
        *calibration_lines(doc.get("calibration")),
        f"- exactly once (group): {once['acknowledged']:,} acknowledged, {once['lost']} lost, "
        f"{once['duplicates']} duplicates, {once['unacknowledged_consumed']} consumed but not "
        "acknowledged",
        f"- push: {push['delivered']:,} of {push['records_in_topic']:,} delivered, "
        f"{push['missing']} missing, {push['redelivered']} redelivered",
        f"- SSE: {sse['records']:,} records, {sse['gaps']} gaps, {sse['repeats']} repeats",
        f"- retention: {s['retention']['expiring_records_deleted']:,} records deleted; tiering: "
        f"{s['tiering']['segments_uploaded']:,} segments uploaded, "
        f"{s['tiering']['remote_segments_deleted']:,} deleted from S3",
        f"- after warm-up (from {s['from_s']} s): RSS growth {s['rss_growth_pct']} %, open files "
        f"drift {s['open_files_drift']}, tasks drift {s['tasks_drift']}, p99 drift "
        f"{s['p99_drift_pct']} %; RSS growth from the first row "
        f"{s['rss_growth_from_first_row_pct']} %",
        "",
        "![soak](soak.png)",
        "",
    ]
    columns = ["t_s", "requests", "records_acked", "errors", "p50_ms", "p99_ms", "send_late_p99_ms",
               "in_flight", "rss_mib", "open_files", "sockets", "tasks", "cpu_pct", "load_avg",
               "group_consumed", "group_repeats"]  # fmt: skip
    flat = [
        {k: (" / ".join(map(str, v.values())) if isinstance(v, dict) else v) for k, v in r.items()}
        for r in doc["rows"]
    ]
    return "\n".join(lines + _table(flat, columns)) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--minutes", type=float, default=10.0)
    length.add_argument("--seconds", type=float, help="the length in seconds instead (short runs)")
    parser.add_argument("--interval", type=float, default=60.0, help="seconds per report row")
    parser.add_argument(
        "--warmup",
        type=float,
        help="seconds before drift counts (default: a third of the run, at most "
        f"{MAX_DEFAULT_WARMUP_S:.0f})",
    )
    parser.add_argument("--cluster", action="store_true", help="etcd and three nodes")
    parser.add_argument("--rate", type=float, help="requests/s (skips the calibration)")
    parser.add_argument("--share", type=float, default=0.7, help="of the calibrated maximum")
    parser.add_argument("--calibrate-seconds", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=Path("soak-out"))
    parser.add_argument(
        "gateway_args", nargs="*", help="options for every node (after --: --stall-report-ms 10)"
    )
    args = parser.parse_args()
    stop_on_sigterm()
    if args.seconds is None:
        args.seconds = args.minutes * 60
    if args.warmup is None:
        args.warmup = default_warmup_s(args.seconds)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="soak-") as scratch:
        work = Path(scratch)
        try:
            doc = run(args, work)
        finally:
            for log in work.glob("*.log"):  # the nodes' logs: why it failed, the stalls reported
                shutil.copy(log, args.out)
    passed = doc["summary"]["passed"]
    (args.out / "soak.json").write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    (args.out / "soak.md").write_text(markdown(doc))
    plot(doc, args.out / "soak.png")
    print(orjson.dumps(doc["summary"], option=orjson.OPT_INDENT_2).decode())
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
