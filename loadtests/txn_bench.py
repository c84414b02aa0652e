"""Transactions (KIP-98 over HTTP) against the same work done without them, side by side in one
run: one gateway on the first CPU and the clients on the others, then a three-node cluster.

- produce: `producers` producers, each with its own keep-alive HTTP/1.1 connection and one
  request in flight, send JSON produces of `batch` 100-byte records whose `partition` goes
  round the topic's `partitions` partitions, so each request carries records for all of them.
  Plain: those requests alone. Transactional, N batches a transaction: begin, N of the same
  requests naming `transactional_id` and `producer_epoch`, commit. A cell sends
  `cell_records` records to a fresh topic; records/s over the cell and the gateway's CPU per
  record (its /proc time), and the records a transaction appended to `__transaction_state`.
  Every cell then checks the topic holds its records and a marker per partition per
  transaction. Goal: transactional >= 0.8 x plain in records/s.
- commit latency: a three-node `LocalCluster` (etcd; replication factor 3,
  min.insync.replicas 2, as loadtests.cluster_bench starts it). One client runs `commits`
  transactions one after another through node 0 (ids taken in turn from LATENCY_IDS, so some
  are coordinated by node 0 and some forwarded): begin, one acks=all produce of `batch`
  records over `partitions` partitions, commit; each step's time and the whole (begin sent to
  commit answered), p50/p99/max. Beside each, the same produce alone, and the second produce
  of a transaction of two (its partitions added by the first).
- pipeline: exactly-once read-process-write over HTTP, done by the client. `members` members of
  one consumer group (auto_commit off, each with its own connection) each loop: a member fetch
  of up to `batch` records at isolation=read_committed, then, transactional: begin, one
  produce of the records to another topic, the group's offsets sent to the transaction
  (`POST /v1/transactions/{id}/offsets` with member_id and generation_id), commit; plain: the
  produce with an Idempotency-Key, then the member's commit of the offsets. A cell processes
  `pipeline_records` records written beforehand; records/s of each, and the gateway's CPU.
- push pipeline: the same read-process-write done by push subscriptions (ordering `partition`,
  `format: json`, read_committed) to a receiver process (`loadtests.push_receiver`) that
  answers each delivered record with one 100-byte record to the same partition of another
  topic. Exactly-once: a reply subscription (`"reply": {"topic": ...}`); the receiver answers
  200 with the records, and the gateway produces them and moves the subscription's position in
  one transaction a batch. Against: a plain subscription whose receiver produces the records
  to the gateway itself with the `webhook-id` as its `Idempotency-Key`, then answers 204. A
  cell delivers a topic written beforehand, in batches of `batch` records (`push_records`) and
  of one (`push_single_records`), from the subscription's creation to its position at the
  topic's end; records/s of each, and the gateway's CPU a record.
- `--profile`: `py-spy record -r 200` of the gateway over one more cell of each produce and
  the transactional pipeline; the top costs, over everything and in the transaction code.
- `--before DIR`: an earlier checkout's gateway (its compiled extensions in place) runs the
  produce cells too, in the same rounds.

Cells alternate over the rounds; figures are medians of the ratios taken within each round.
Every gateway runs without admission control's shedding (`--admission-target-delay-ms 0`).
Before each produce cell the page cache's dirty pages are written out (`os.sync`): a cell
writes about 330 MB, and the kernel's writeback of the cells before it otherwise lands in
whichever cell runs when it starts, moving that cell's cost of a write by a third.

    python -m loadtests.txn_bench --out DIR [--quick] [--rounds N] [--profile] [--before DIR]
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import os
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import orjson

from loadtests import consumers
from loadtests.bench import machine
from loadtests.cluster_bench import SluiceCluster
from loadtests.common import (
    cpu_seconds,
    http_json,
    progress,
    raise_fd_limit,
    separate_cpus,
    start_gateway,
    stop_on_sigterm,
)
from loadtests.consumers import Clock, RawHttp, Shared, run_workers
from loadtests.profiling import own_beside, py_spy, recording, summarize
from loadtests.ratio_cli import Stamp, chosen_plan, command, plan_options, stamp_line, utc, write
from loadtests.rows import VALUE, judged
from loadtests.subscriptions_bench import ALLOWED, Receiver, subscribe

PLAIN = 0  # batches a transaction of the plain cells: none
POLL_MS = 200  # a pipeline member's fetch wait once nothing is left
TXN_TIMEOUT_MS = 60_000
COMPLETE = b'"state":"CompleteCommit"'
PREPARED = b'"state":"PrepareCommit"'  # decided, its markers still being written
EPOCH = re.compile(rb'"producer_epoch":(\d+)')
LATENCY_IDS = 6  # transactional ids the latency client takes in turn
WARM_TRANSACTIONS = 3  # before the latency is measured: the state topic made, paths warm
COORDINATOR_WAIT_S = 120.0  # for the first begin, while __transaction_state is made
TXN_CODE = re.compile(r"\((groups/transactions/|gateway/api/transactions\.py)")
GOAL = 0.8  # transactional records/s against plain
STATE_TOPIC = "__transaction_state"  # every state change a record (two with a producer id)
# The cells measure what a produce costs, not overload: the other work on a shared machine
# can hold the loop's delay past admission control's target, which would shed produces.
NO_SHEDDING = ("--admission-target-delay-ms", "0")
PUSH_DEADLINE_S = 600.0  # for a push cell's position to reach its topic's end
PUSH_POLL_S = 0.02  # how often a push cell asks how far its subscription got
# a profile's frames from the process's start to its event loop: on every stack
ENTRY_FRAMES = re.compile(
    r"\((<frozen runpy>|gateway/__main__\.py|gateway/cli/main\.py|gateway/server\.py|"
    r"uvloop/__init__\.py|asyncio/runners\.py)\)$"
)


@dataclasses.dataclass(frozen=True)
class Plan:
    batch: int  # records a produce request
    partitions: int  # of every topic
    producers: int  # connections of the produce cells, one request in flight each
    cell_records: int  # records a produce cell sends
    per_transaction: tuple[int, ...]  # batches a transaction, one transactional cell each
    rounds: int
    commits: int  # transactions timed on the cluster
    members: int  # of the pipeline's group
    pipeline_records: int  # a pipeline cell processes
    push_records: int  # a push pipeline cell delivers in batches of `batch`
    push_single_records: int  # a push pipeline cell delivers one at a time


FULL = Plan(
    batch=1000,
    partitions=10,
    producers=8,
    cell_records=3_000_000,  # about 3 s a cell: a second-long cell followed the machine's jitter
    per_transaction=(1, 10),
    rounds=5,
    commits=200,
    members=4,
    pipeline_records=300_000,
    push_records=300_000,
    push_single_records=5_000,
)
QUICK = Plan(
    batch=100,
    partitions=10,
    producers=2,
    cell_records=4_000,
    per_transaction=(1, 10),
    rounds=1,
    commits=5,
    members=2,
    pipeline_records=2_000,
    push_records=2_000,
    push_single_records=200,
)


def spread_body(batch: int, partitions: int) -> bytes:
    """A JSON produce body of `batch` 100-byte records, their partitions round robin."""
    records = [{"value": orjson.Fragment(VALUE), "partition": i % partitions} for i in range(batch)]
    return orjson.dumps({"records": records})


# -- the clients' calls -------------------------------------------------------------------------


async def _call(
    http: RawHttp,
    target: str,
    body: bytes = b"",
    ok: int = 200,
    headers: Mapping[str, str] | None = None,
) -> bytes:
    """One POST; its answer's body, or raise with what came instead."""
    status, _, answer = await http.send("POST", target, body, headers=headers)
    if status != ok:
        raise RuntimeError(f"POST {target} -> {status} {answer[:300]!r}")
    return answer


async def _begin(http: RawHttp, transactional_id: str) -> int:
    """Begin a transaction; its producer epoch."""
    body = b'{"timeout_ms":%d}' % TXN_TIMEOUT_MS
    answer = await _call(http, f"/v1/transactions/{transactional_id}", body, 201)
    found = EPOCH.search(answer)
    if found is None:
        raise RuntimeError(f"begin answered no producer_epoch: {answer[:300]!r}")
    return int(found.group(1))


async def _commit(http: RawHttp, transactional_id: str, epoch: int) -> bool:
    """Commit; whether it was answered complete (else decided, its markers still going)."""
    body = b'{"producer_epoch":%d}' % epoch
    answer = await _call(http, f"/v1/transactions/{transactional_id}/commit", body)
    if COMPLETE in answer:
        return True
    if PREPARED in answer:
        return False
    raise RuntimeError(f"commit answered {answer[:300]!r}")


def _in(transactional_id: str, epoch: int) -> str:
    return f"transactional_id={transactional_id}&producer_epoch={epoch}"


# -- the workers (loadtests.consumers.run_workers) ----------------------------------------------


async def _produce(
    params: dict[str, Any], shared: Shared, clock: Clock, ready: Callable[[], None]
) -> int:
    """Producers sending `body` until the cell has its records: alone (`per_transaction`
    PLAIN) or `per_transaction` of them in each transaction."""
    body, per_transaction = params["body"], params["per_transaction"]
    target = f"/v1/topics/{params['topic']}/records"
    connections = [await RawHttp.open(params["url"]) for _ in params["ids"]]
    total = 0

    async def one(http: RawHttp, transactional_id: str) -> None:
        nonlocal total
        while not shared.done():
            if per_transaction == PLAIN:
                await _call(http, target, body)
                sent = params["batch"]
            else:
                epoch = await _begin(http, transactional_id)
                inside = f"{target}?{_in(transactional_id, epoch)}"
                for _ in range(per_transaction):
                    await _call(http, inside, body)
                await _commit(http, transactional_id, epoch)
                sent = params["batch"] * per_transaction
            total += sent
            clock.saw(sent)
            shared.add(sent)

    ready()
    try:
        await asyncio.gather(*(one(c, t) for c, t in zip(connections, params["ids"], strict=True)))
    finally:
        for http in connections:
            http.close()
    return total


async def _pipeline(
    params: dict[str, Any], shared: Shared, clock: Clock, ready: Callable[[], None]
) -> int:
    """Members of one group reading `source` at read_committed and writing what they read to
    `sink`, each batch exactly once: in a transaction with the group's offsets, or (plain) a
    produce with an Idempotency-Key and then the offsets' commit."""
    url, group, sink = params["url"], params["group"], params["sink"]
    base = f"/v1/groups/{group}/members"
    join = orjson.dumps(
        {"topics": [params["source"]], "auto_offset_reset": "earliest", "auto_commit": False}
    )
    connections = [await RawHttp.open(url) for _ in range(params["members"])]
    joined = [orjson.loads(await _call(http, base, join, 201)) for http in connections]
    total = 0

    async def one(http: RawHttp, member: dict[str, Any], number: int) -> None:
        nonlocal total
        member_id, cursor = member["member_id"], member["cursor"]
        transactional_id = f"{group}-{number}"
        fetch = (
            f"{base}/{member_id}/records?isolation=read_committed"
            f"&max_records={params['batch']}&timeout_ms={POLL_MS}"
        )
        produced = 0
        while not shared.done():
            status, _, answer = await http.get(f"{fetch}&cursor={cursor}")
            if status != 200:
                raise RuntimeError(f"member fetch -> {status} {answer[:300]!r}")
            doc = orjson.loads(answer)
            cursor, generation, records = doc["cursor"], doc["generation"], doc["records"]
            if not records:
                continue
            body = orjson.dumps(
                {"records": [{"value": r["value"], "partition": r["partition"]} for r in records]}
            )
            ends = {(r["topic"], r["partition"]): r["offset"] + 1 for r in records}
            offsets = [{"topic": t, "partition": p, "offset": o} for (t, p), o in ends.items()]
            if params["transactional"]:
                epoch = await _begin(http, transactional_id)
                await _call(http, f"/v1/topics/{sink}/records?{_in(transactional_id, epoch)}", body)
                sent = {
                    "producer_epoch": epoch,
                    "group_id": group,
                    "member_id": member_id,
                    "generation_id": generation,
                    "offsets": offsets,
                }
                await _call(
                    http, f"/v1/transactions/{transactional_id}/offsets", orjson.dumps(sent)
                )
                await _commit(http, transactional_id, epoch)
            else:
                produced += 1
                key = {"Idempotency-Key": f"{member_id}-{produced}"}
                await _call(http, f"/v1/topics/{sink}/records", body, headers=key)
                commit = orjson.dumps({"offsets": offsets, "generation": generation})
                await _call(http, f"{base}/{member_id}/commit", commit)
            total += len(records)
            clock.saw(len(records))
            shared.add(len(records))

    ready()
    try:
        await asyncio.gather(
            *(one(http, m, n) for n, (http, m) in enumerate(zip(connections, joined, strict=True)))
        )
        for http, member in zip(connections, joined, strict=True):
            await http.send("DELETE", f"{base}/{member['member_id']}")
    finally:
        for http in connections:
            http.close()
    return total


consumers.WORKERS.update({"txn_produce": _produce, "txn_pipeline": _pipeline})


# -- one gateway: produce and pipeline cells ------------------------------------------------------


def _names(prefix: str) -> Iterator[str]:
    n = 0
    while True:
        n += 1
        yield f"{prefix}{n}"


NAMES = _names("t")


def cell_name(per_transaction: int) -> str:
    if per_transaction == PLAIN:
        return "plain"
    return f"transactional, {per_transaction} batch{'es' if per_transaction > 1 else ''}"


def end_offsets(url: str, topic: str) -> int:
    """The sum of the topic's partitions' high watermarks."""
    rows = http_json("GET", f"{url}/v1/topics/{topic}")["partitions"]
    return sum(int(row["high_watermark"]) for row in rows)


def new_topic(url: str, partitions: int) -> str:
    name = next(NAMES)
    http_json("POST", url + "/v1/topics", {"name": name, "partitions": partitions})
    return name


def _rates(row: dict[str, Any]) -> dict[str, Any]:
    seconds, spent, records = row["seconds"], row["server_cpu_s"], row["records"]
    return {
        "records": records,
        "seconds": seconds,
        "records_per_s": round(records / seconds) if seconds > 0 else 0,
        "server_cpu_s": spent,
        "server_cores_busy": round(spent / seconds, 2) if seconds > 0 else None,
        "server_cpu_us_per_record": round(spent / records * 1e6, 3),
        "client_cpu_s": row["generator_cpu_s"],
    }


class Gateway:
    """A gateway the produce and pipeline cells run on (this tree's, or `tree`'s)."""

    def __init__(self, scratch: Path, name: str, plan: Plan, tree: Path | None = None) -> None:
        self.plan = plan
        self.process, self.url = start_gateway(
            scratch / name,
            *NO_SHEDDING,
            *ALLOWED,
            preexec=raise_fd_limit,
            log=scratch / f"{name}.log",
            tree=tree,
        )
        self.body = spread_body(plan.batch, plan.partitions)
        asyncio.run(coordinator_ready(self.url))

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(60)

    def produce_cell(self, per_transaction: int) -> dict[str, Any]:
        """`cell_records` records to a fresh topic, then checked there. Topics are kept to the
        end: deleting one would remove its files while the next cell runs."""
        plan = self.plan
        topic = new_topic(self.url, plan.partitions)
        ids = [f"{topic}-{i}" for i in range(plan.producers)]
        os.sync()  # the cells before this one written out now, not while it runs
        params = {
            "url": self.url,
            "topic": topic,
            "body": self.body,
            "batch": plan.batch,
            "per_transaction": per_transaction,
            "ids": ids,
        }
        state_before = end_offsets(self.url, STATE_TOPIC)
        row = run_workers("txn_produce", [params], plan.cell_records, self.process.pid)
        if "error" in row:
            raise RuntimeError(f"{cell_name(per_transaction)}: {row['error']}")
        out = _rates(row)
        transactions = 0
        if per_transaction != PLAIN:
            transactions = row["records"] // (plan.batch * per_transaction)
            out["transactions"] = transactions
            stored = end_offsets(self.url, STATE_TOPIC) - state_before
            out["state_records_per_transaction"] = round(stored / transactions, 2)
        held = end_offsets(self.url, topic)
        if held != row["records"] + transactions * plan.partitions:
            raise RuntimeError(
                f"{topic} holds {held} offsets for {row['records']} records and "
                f"{transactions} transactions of {plan.partitions} partitions"
            )
        return out

    def pipeline_cell(self, transactional: bool) -> dict[str, Any]:
        """A fresh group reads `pipeline_records` records from a topic written beforehand and
        writes them to another; then every offset is committed and every record written."""
        plan = self.plan
        source = self.filled(plan.pipeline_records)
        sink = new_topic(self.url, plan.partitions)
        group = next(NAMES)
        params = {
            "url": self.url,
            "group": group,
            "source": source,
            "sink": sink,
            "batch": plan.batch,
            "members": plan.members,
            "transactional": transactional,
        }
        row = run_workers("txn_pipeline", [params], plan.pipeline_records, self.process.pid)
        if "error" in row:
            raise RuntimeError(
                f"pipeline ({'transactional' if transactional else 'plain'}): {row['error']}"
            )
        out = _rates(row)
        lag = http_json("GET", f"{self.url}/v1/groups/{group}")["lag"]
        written = end_offsets(self.url, sink)
        if lag != 0 or row["records"] != plan.pipeline_records or written < row["records"]:
            raise RuntimeError(
                f"pipeline: {row['records']} records processed of {plan.pipeline_records}, "
                f"{written} offsets written, lag {lag}"
            )
        out["sink_offsets"] = written  # the records and, in transactions, the markers
        return out

    def filled(self, records: int) -> str:
        """A fresh topic holding `records` records (a multiple of `batch`) over its partitions."""
        topic = new_topic(self.url, self.plan.partitions)
        with httpx.Client(timeout=120) as client:
            for _ in range(records // self.plan.batch):
                client.post(
                    f"{self.url}/v1/topics/{topic}/records",
                    content=self.body,
                    headers={"Content-Type": "application/json"},
                ).raise_for_status()
        return topic

    def push_cell(
        self, receiver: Receiver, batch: int, records: int, exactly_once: bool
    ) -> dict[str, Any]:
        """A subscription delivers a fresh topic of `records` records to `receiver`, whose
        replies land in another topic (module docstring); timed from the subscription's
        creation until its position is at the topic's end, then the replies are checked."""
        source = self.filled(records)
        sink = new_topic(self.url, self.plan.partitions)
        fields: dict[str, Any] = {
            "ordering": "partition",
            "format": "json",
            "isolation": "read_committed",
            "batching": {"max_records": batch, "max_wait_ms": 0},
        }
        if exactly_once:
            endpoint = receiver.base + "/reply"
            fields["reply"] = {"topic": sink}
        else:
            endpoint = f"{receiver.base}/produce/{self.url.rsplit(':', 1)[1]}/{sink}"
        receiver.reset()
        cpu = cpu_seconds(self.process.pid)
        started = time.monotonic()
        name = subscribe(self.url, source, endpoint, **fields)
        self._until_delivered(name, records)
        seconds = time.monotonic() - started
        spent = cpu_seconds(self.process.pid) - cpu
        http_json("DELETE", f"{self.url}/v1/subscriptions/{name}")
        deliveries = receiver.stats()["requests"]
        held = end_offsets(self.url, sink)
        # a transaction's replies go to one partition: one marker each
        most = records + (deliveries if exactly_once else 0)
        if not records <= held <= most:
            raise RuntimeError(
                f"push pipeline: {sink} holds {held} offsets for {records} records "
                f"({deliveries} deliveries, exactly-once {exactly_once})"
            )
        return {
            "records": records,
            "seconds": round(seconds, 3),
            "records_per_s": round(records / seconds),
            "server_cpu_s": round(spent, 2),
            "server_cores_busy": round(spent / seconds, 2),
            "server_cpu_us_per_record": round(spent / records * 1e6, 3),
            "deliveries": deliveries,
            "sink_offsets": held,
        }

    def _until_delivered(self, subscription: str, records: int) -> None:
        """Once every partition's committed position adds up to `records` (bounded)."""
        deadline = time.monotonic() + PUSH_DEADLINE_S
        while True:
            rows = http_json("GET", f"{self.url}/v1/subscriptions/{subscription}")["partitions"]
            committed = [row.get("committed_offset") for row in rows]
            whole = len(rows) == self.plan.partitions and None not in committed
            if whole and sum(committed) >= records:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"push pipeline: {subscription} committed only {committed}")
            time.sleep(PUSH_POLL_S)


def produce_rounds(
    this: Gateway, before: Gateway | None, plan: Plan
) -> dict[str, list[dict[str, Any]]]:
    """Every produce cell on each gateway, `rounds` times, alternating; each round's rows."""
    cells = [PLAIN, *plan.per_transaction]
    gateways = [("", this)] + ([(" (before)", before)] if before is not None else [])
    rows: dict[str, list[dict[str, Any]]] = {}
    for number in range(plan.rounds):
        order = [(suffix, g, c) for suffix, g in gateways for c in cells]
        for suffix, gateway, per_transaction in order if number % 2 == 0 else order[::-1]:
            name = cell_name(per_transaction) + suffix
            progress(f"round {number + 1}: produce, {name}")
            rows.setdefault(name, []).append(gateway.produce_cell(per_transaction))
    return rows


def push_size(batch: int) -> str:
    """How a push cell's records go out, as its name and figures say it."""
    return "one record" if batch == 1 else f"batches of {batch:,}"


def push_name(batch: int, exactly_once: bool) -> str:
    return f"{'exactly-once' if exactly_once else 'idempotency key'}, {push_size(batch)}"


def push_rounds(this: Gateway, receiver: Receiver, plan: Plan) -> dict[str, list[dict[str, Any]]]:
    """Both push pipelines, batched and one record at a time, `rounds` times, alternating."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for number in range(plan.rounds):
        for batch, records in ((plan.batch, plan.push_records), (1, plan.push_single_records)):
            for exactly_once in (True, False) if number % 2 == 0 else (False, True):
                name = push_name(batch, exactly_once)
                progress(f"round {number + 1}: push pipeline, {name}")
                cell = this.push_cell(receiver, batch, records, exactly_once)
                rows.setdefault(name, []).append(cell)
    return rows


def pipeline_rounds(this: Gateway, plan: Plan) -> dict[str, list[dict[str, Any]]]:
    rows: dict[str, list[dict[str, Any]]] = {}
    for number in range(plan.rounds):
        for transactional in (True, False) if number % 2 == 0 else (False, True):
            name = "transactional" if transactional else "plain"
            progress(f"round {number + 1}: pipeline, {name}")
            rows.setdefault(name, []).append(this.pipeline_cell(transactional))
    return rows


# -- the cluster: commit latency -----------------------------------------------------------------


STEPS = ("begin", "produce", "commit", "total", "produce_alone", "produce_again")
SPANS = ((0, 1), (1, 2), (2, 3), (0, 3), (3, 4), (5, 6))  # each step's times in a round


async def _timed_round(
    http: RawHttp, topic: str, body: bytes, transactional_id: str
) -> tuple[list[float], bool]:
    """A transaction of one produce (begin, produce, commit), the same produce alone, and a
    transaction of two produces: when each call was answered, and whether both commits were
    answered complete."""
    target = f"/v1/topics/{topic}/records?acks=all"
    times = [time.perf_counter()]
    epoch = await _begin(http, transactional_id)
    times.append(time.perf_counter())
    await _call(http, f"{target}&{_in(transactional_id, epoch)}", body)
    times.append(time.perf_counter())
    complete = await _commit(http, transactional_id, epoch)
    times.append(time.perf_counter())
    await _call(http, target, body)
    times.append(time.perf_counter())
    epoch = await _begin(http, transactional_id)
    inside = f"{target}&{_in(transactional_id, epoch)}"
    await _call(http, inside, body)
    times.append(time.perf_counter())
    await _call(http, inside, body)
    times.append(time.perf_counter())
    return times, await _commit(http, transactional_id, epoch) and complete


async def _timed_transactions(
    clusters: dict[str, tuple[str, str]], plan: Plan
) -> dict[str, dict[str, Any]]:
    """`commits` rounds (`_timed_round`) on each cluster (name -> URL of node 0 and topic),
    the clusters taking turns; every step's quantiles in milliseconds."""
    body = spread_body(plan.batch, plan.partitions)
    connections = {}
    for name, (url, _) in clusters.items():
        await coordinator_ready(url)
        connections[name] = await RawHttp.open(url)
    steps: dict[str, dict[str, list[float]]] = {n: {step: [] for step in STEPS} for n in clusters}
    prepared = dict.fromkeys(clusters, 0)
    try:
        for n in range(WARM_TRANSACTIONS + plan.commits):
            for name, (_, topic) in clusters.items():
                times, complete = await _timed_round(
                    connections[name], topic, body, f"latency-{n % LATENCY_IDS}"
                )
                if n < WARM_TRANSACTIONS:
                    continue
                prepared[name] += not complete
                for step, (since, until) in zip(STEPS, SPANS, strict=True):
                    steps[name][step].append((times[until] - times[since]) * 1000)
    finally:
        for http in connections.values():
            http.close()
    return {
        name: {
            **{f"{step}_ms": quantiles(times) for step, times in steps[name].items()},
            "commits_answered_prepared": prepared[name],
        }
        for name in clusters
    }


async def coordinator_ready(url: str) -> None:
    """Once a transaction can begin: the first transactional call makes `__transaction_state`,
    which its cells should not pay for."""
    http = await RawHttp.open(url)
    try:
        await _first_begin(http, "warm")
    finally:
        http.close()


async def _first_begin(http: RawHttp, transactional_id: str) -> None:
    """Begin (and abort) once, retrying while the cluster makes `__transaction_state`."""
    deadline = time.monotonic() + COORDINATOR_WAIT_S
    while True:
        status, _, answer = await http.send("POST", f"/v1/transactions/{transactional_id}", b"{}")
        if status == 201:
            epoch = int(orjson.loads(answer)["producer_epoch"])
            body = b'{"producer_epoch":%d}' % epoch
            await _call(http, f"/v1/transactions/{transactional_id}/abort", body)
            return
        # while the topic is made: no leader yet (503, 504), or not loaded at the leader a
        # node forwarded to (421)
        if status not in (421, 503, 504) or time.monotonic() > deadline:
            raise RuntimeError(f"the first begin -> {status} {answer[:300]!r}")
        await asyncio.sleep(0.2)


def quantiles(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {
        "p50": round(_nearest(ordered, 0.5), 2),
        "p99": round(_nearest(ordered, 0.99), 2),
        "max": round(ordered[-1], 2),
        "mean": round(statistics.fmean(ordered), 2),
    }


def _nearest(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.5) - 1))]


def commit_latency(scratch: Path, plan: Plan, before: Path | None) -> dict[str, dict[str, Any]]:
    """The latency section on a cluster of this tree (and one of `before`'s), stopped after."""
    trees = {"this tree": None} | ({} if before is None else {"before": before})
    with contextlib.ExitStack() as stack:
        clusters: dict[str, tuple[str, str]] = {}
        for name, tree in trees.items():
            cluster = SluiceCluster(scratch / f"cluster-{len(clusters)}")
            for node in cluster.local.nodes:
                node.extra += NO_SHEDDING
                if tree is not None:  # `python -m gateway` there imports its code
                    node.wrapper = ["env", f"--chdir={tree}"]
            cluster.start()
            stack.callback(cluster.stop)
            topic, _ = cluster.topic("latency", plan.partitions)
            clusters[name] = (cluster.url(0), topic)
        return asyncio.run(_timed_transactions(clusters, plan))


# -- figures and the report ----------------------------------------------------------------------


def _ratios(top: list[dict[str, Any]], bottom: list[dict[str, Any]], key: str) -> list[float]:
    return [round(t[key] / b[key], 3) for t, b in zip(top, bottom, strict=True) if b[key]]


def _median_of(ratios: list[float]) -> float:
    return round(statistics.median(ratios), 3)


def median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The median round by records/s, with every round's records/s and CPU per record."""
    ordered = sorted(rows, key=lambda r: r["records_per_s"])
    return {
        **ordered[(len(ordered) - 1) // 2],
        "rounds_records_per_s": [r["records_per_s"] for r in rows],
        "rounds_server_cpu_us_per_record": [r["server_cpu_us_per_record"] for r in rows],
    }


def figures(doc: dict[str, Any], plan: Plan) -> list[dict[str, Any]]:
    """Within each round, transactional against plain (and this tree against --before's);
    the median over the rounds, with every round's."""
    produce, pipeline, push = doc["produce_rounds"], doc["pipeline_rounds"], doc["push_rounds"]
    out: list[dict[str, Any]] = []

    def add(name: str, ratios: list[float], target: float | None = None) -> None:
        value = _median_of(ratios)
        row = {"figure": name, "value": value, "rounds": ratios, "target": target, "met": None}
        if target is not None:
            row.update(judged([(name, value, target)])[0])
        out.append(row)

    for per_transaction in plan.per_transaction:
        name = cell_name(per_transaction)
        txn, plain = produce[name], produce["plain"]
        add(f"produce, {name} / plain, records/s", _ratios(txn, plain, "records_per_s"), GOAL)
        add(
            f"produce, {name} / plain, gateway CPU a record",
            _ratios(txn, plain, "server_cpu_us_per_record"),
        )
    for name in [n for n in produce if n.endswith(" (before)")]:
        now = produce[name.removesuffix(" (before)")]
        add(
            f"produce, {name.removesuffix(' (before)')}: this tree / before, records/s",
            _ratios(now, produce[name], "records_per_s"),
        )
        add(
            f"produce, {name.removesuffix(' (before)')}: this tree / before, gateway CPU a record",
            _ratios(now, produce[name], "server_cpu_us_per_record"),
        )
    add(
        "pipeline, transactional / plain, records/s",
        _ratios(pipeline["transactional"], pipeline["plain"], "records_per_s"),
    )
    add(
        "pipeline, transactional / plain, gateway CPU a record",
        _ratios(pipeline["transactional"], pipeline["plain"], "server_cpu_us_per_record"),
    )
    for batch in (plan.batch, 1):
        once, keyed = (push[push_name(batch, e)] for e in (True, False))
        size = push_size(batch)
        add(
            f"push pipeline, {size}: exactly-once / idempotency key, records/s",
            _ratios(once, keyed, "records_per_s"),
        )
        add(
            f"push pipeline, {size}: exactly-once / idempotency key, gateway CPU a record",
            _ratios(once, keyed, "server_cpu_us_per_record"),
        )
    return out


def _n(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)


def markdown(doc: dict[str, Any]) -> str:
    meta, plan = doc["meta"], doc["meta"]["plan"]
    lines = [
        f"# Transactions, {meta['date']}",
        "",
        stamp_line(meta, meta["cpus"]) + f"; {plan['rounds']} rounds, the median shown.",
        "",
        f"## Produce: {plan['producers']} producers, {plan['batch']:,} records a request over "
        f"{plan['partitions']} partitions, {plan['cell_records']:,} records a cell",
        "",
        "| cell | records/s | gateway CPU µs a record | gateway cores busy | transactions "
        "| state records a transaction | client CPU s | rounds (records/s) "
        "| rounds (µs a record) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in doc["produce"].items():
        lines.append(
            f"| {name} | {_n(row['records_per_s'])} | {row['server_cpu_us_per_record']} | "
            f"{row['server_cores_busy']} | {_n(row.get('transactions', ''))} | "
            f"{row.get('state_records_per_transaction', '')} | "
            f"{row['client_cpu_s']} | {row['rounds_records_per_s']} | "
            f"{row['rounds_server_cpu_us_per_record']} |"
        )
    lines += [
        "",
        f"## Pipeline: {plan['members']} members, batches of up to {plan['batch']:,}, "
        f"{plan['pipeline_records']:,} records a cell",
        "",
        "| cell | records/s | gateway CPU µs a record | gateway cores busy | client CPU s "
        "| rounds (records/s) |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in doc["pipeline"].items():
        lines.append(
            f"| {name} | {_n(row['records_per_s'])} | {row['server_cpu_us_per_record']} | "
            f"{row['server_cores_busy']} | {row['client_cpu_s']} | "
            f"{row['rounds_records_per_s']} |"
        )
    lines += [
        "",
        f"## Push pipeline: {plan['partitions']} partitions, {plan['push_records']:,} records in "
        f"batches of {plan['batch']:,}, {plan['push_single_records']:,} one at a time",
        "",
        "| cell | records/s | gateway CPU µs a record | gateway cores busy | deliveries "
        "| reply topic offsets | rounds (records/s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, row in doc["push"].items():
        lines.append(
            f"| {name} | {_n(row['records_per_s'])} | {row['server_cpu_us_per_record']} | "
            f"{row['server_cores_busy']} | {_n(row['deliveries'])} | {_n(row['sink_offsets'])} "
            f"| {row['rounds_records_per_s']} |"
        )
    lines += ["", "| figure (median of the rounds' ratios) | value | rounds | goal | met |"]
    lines.append("|---|---|---|---|---|")
    for f in doc["figures"]:
        goal = "" if f["target"] is None else f">= {f['target']}"
        met = "" if f["met"] is None else "yes" if f["met"] else "no"
        lines.append(f"| {f['figure']} | {f['value']} | {f['rounds']} | {goal} | {met} |")
    latency = doc["latency"]
    lines += [
        "",
        f"## Commit latency: 3 nodes, replication factor 3, min.insync.replicas 2; "
        f"{plan['commits']} transactions of one {plan['batch']:,}-record produce over "
        f"{plan['partitions']} partitions (acks=all), through node 0",
        "",
        "| step | " + " | ".join(f"{name}: p50, p99, max ms" for name in latency) + " |",
        "|---|" + "---|" * len(latency),
    ]
    labels = {
        "produce": "produce (adds its partitions)",
        "total": "begin sent → commit answered",
        "produce_alone": "the produce alone",
        "produce_again": "a second produce in a transaction (its partitions in it)",
    }
    for step in STEPS:
        cells = [latency[name][f"{step}_ms"] for name in latency]
        lines.append(
            f"| {labels.get(step, step)} | "
            + " | ".join(f"{q['p50']}, {q['p99']}, {q['max']}" for q in cells)
            + " |"
        )
    prepared = ", ".join(f"{n} {row['commits_answered_prepared']}" for n, row in latency.items())
    lines += [
        "",
        f"Commits answered PrepareCommit (decided, markers still going): {prepared}.",
        "",
    ]
    for name, summary in doc.get("profile", {}).items():
        lines += [
            f"## Profile: {name} ({summary['samples']} samples, "
            f"{summary['cell']['server_cpu_us_per_record']} µs of gateway CPU a record while "
            "sampled)",
            "",
            *own_beside(summary, "code", "transaction code, inclusive %"),
            "",
            "| inclusive % (below the event loop) | function |",
            "|---|---|",
        ]
        lines += [
            f"| {share} | `{frame}` |"
            for frame, share in summary["inclusive"]
            if not ENTRY_FRAMES.search(frame)
        ]
        lines.append("")
    return "\n".join(lines)


def profile(this: Gateway, plan: Plan, out: Path) -> dict[str, Any]:
    """One more cell of each produce and the transactional pipeline under py-spy; where the
    samples fell."""
    summaries: dict[str, Any] = {}
    cells: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        (f"produce, {cell_name(n)}", functools.partial(this.produce_cell, n))
        for n in (PLAIN, *plan.per_transaction)
    ]
    cells.append(("pipeline, transactional", functools.partial(this.pipeline_cell, True)))
    for name, cell in cells:
        progress(f"profiling: {name}")
        raw = out / f"transactions-profile-{re.sub(r'[^a-z0-9]+', '-', name).strip('-')}.txt"
        with recording(this.process.pid, raw):
            row = cell()
        summaries[name] = {"cell": row, **summarize(raw.read_text(), TXN_CODE)}
    return summaries


def run(
    plan: Plan, scratch: Path, out: Path, profiled: bool, before: Path | None
) -> dict[str, Any]:
    everywhere = os.sched_getaffinity(0)
    doc: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        this = Gateway(scratch, "gateway", plan)
        stack.callback(this.close)
        old = None
        if before is not None:
            old = Gateway(scratch, "before", plan, before)
            stack.callback(old.close)
        pids = [this.process.pid] + ([] if old is None else [old.process.pid])
        doc["cpus"] = separate_cpus(*pids)
        doc["produce_rounds"] = produce_rounds(this, old, plan)
        doc["pipeline_rounds"] = pipeline_rounds(this, plan)
        receiver = Receiver()  # started here: on the clients' CPUs
        stack.callback(receiver.close)
        doc["push_rounds"] = push_rounds(this, receiver, plan)
        if profiled:
            doc["profile"] = profile(this, plan, out)
    os.sched_setaffinity(0, everywhere)  # the cluster's nodes may run on every CPU
    progress(f"commit latency: {plan.commits} transactions on three nodes")
    doc["latency"] = commit_latency(scratch, plan, before)
    doc["produce"] = {name: median_row(rows) for name, rows in doc["produce_rounds"].items()}
    doc["pipeline"] = {name: median_row(rows) for name, rows in doc["pipeline_rounds"].items()}
    doc["push"] = {name: median_row(rows) for name, rows in doc["push_rounds"].items()}
    doc["figures"] = figures(doc, plan)
    return doc


def main() -> None:
    parser = plan_options(__doc__ or "", f"default {FULL.rounds}")
    parser.add_argument(
        "--profile", action="store_true", help="py-spy the gateway over one more cell of each kind"
    )
    parser.add_argument(
        "--before", type=Path, help="an earlier checkout whose gateway runs the produce cells too"
    )
    args = parser.parse_args()
    stop_on_sigterm()
    plan = chosen_plan(args, QUICK, FULL)
    if args.profile:
        py_spy()
    raise_fd_limit()
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = Stamp()
    with tempfile.TemporaryDirectory(prefix="sluice-txn-bench-") as scratch:
        doc = run(plan, Path(scratch), args.out, args.profile, args.before)
    doc["meta"] = stamp.meta(
        command("loadtests.txn_bench", parser, args),
        date=utc(stamp.started),
        ended=utc(),
        commit=stamp.commit,
        plan=dataclasses.asdict(plan),
        machine=machine(),
        cpus=doc.pop("cpus"),
    )
    write(args.out, "transactions", doc, markdown(doc))


if __name__ == "__main__":
    main()
