"""The campaign's clients and what they record: producers of JSON, NDJSON and binary batches
with acks=0, 1 or all, retrying each request with its Idempotency-Key; replays of acknowledged
requests through another node once their partition's leader changed; partition consumers,
pollers of every node's view of the topic, and snapshots of the replicas' logs read from disk.
Every call and its outcome goes into a `History`, which the checker judges after the schedule
(group members and topic changes record theirs too: sideload.py; the share group's consumers:
shareload.py; the transactions: txnload.py)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import httpx

from engine import batch as fmt
from tests.cluster.harness import (
    ETCD_PREFIX,
    Cluster,
    LogRecord,
    PartitionState,
    read_replica_log,
)
from tests.cluster.registryload import RegistryHistory
from tests.cluster.shareload import ShareHistory
from tests.cluster.sideload import SideHistory
from tests.cluster.txnload import TxnHistory

FORWARDED_BY = "Sluice-Forwarded-By"  # a request carrying it is answered where it lands
PRODUCE_TIMEOUT_MS = 2500  # the server's wait for acks
ATTEMPT_TIMEOUT_S = 4.0  # the client's wait for any answer (a paused node never answers)
FETCH_WAIT_MS = 300
POLL_INTERVAL_S = 0.25
ACKS = ("all", "all", "1", "0")  # the produce modes and their weights
FORMATS = ("json", "json", "ndjson", "binary")  # the body formats and their weights
CONTENT_TYPES = {
    "json": "application/json",
    "ndjson": "application/x-ndjson",
    "binary": "application/vnd.sluice.record-batch",
}
REPLAY_SHARE = 0.3  # acknowledged idempotent requests sent again after a leader change
EPOCH_POLL_S = 0.1
PACING_S = 0.045  # a producer's pause between requests, at most (acks 0 and 1 answer sooner)

# Answers after which the attempt surely appended nothing: validation happens before the
# append, a retry while the first attempt runs is refused, and NOT_ENOUGH_REPLICAS is raised
# "before appending anything" (its documented contract, which the checker holds it to).
DEFINITE_STATUSES = {400, 404, 413, 415, 422}
DEFINITE_CODES = {(409, "IDEMPOTENCY_KEY_IN_FLIGHT"), (503, "NOT_ENOUGH_REPLICAS")}


def classify(status: int | None, code: str | None) -> str:
    """ok, failed (surely not appended by this attempt) or unknown (may have been appended).
    acks=0 answers 202 once the leader appended, with the offsets: ok as well."""
    if status in (200, 202):
        return "ok"
    if status is None:
        return "unknown"
    if status in DEFINITE_STATUSES or (status, code) in DEFINITE_CODES:
        return "failed"
    return "unknown"


@dataclass
class Attempt:
    node: int
    start: float
    end: float
    status: int | None  # None: no answer (timeout, refused or reset connection)
    code: str | None
    outcome: str
    results: list[tuple[int, int, int]] | None  # (partition, base offset, count) when ok
    error: str | None = None
    wall: tuple[float, float] = (0.0, 0.0)  # time.time() at start and end (the nodes' clock)

    def __str__(self) -> str:
        what = self.status if self.status is not None else self.error
        answer = f"{what} {self.code or ''} {self.results or ''}".strip()
        return f"node {self.node} {self.start:.2f}-{self.end:.2f}s: {answer}"


@dataclass
class ProduceOp:
    """One logical produce: the same path, body and Idempotency-Key on every attempt."""

    key: str
    path: str
    body: bytes
    records: list[tuple[int, int]]  # (partition, index) of each record, in request order
    attempts: list[Attempt] = field(default_factory=list)
    idempotent: bool = True  # sent with Idempotency-Key `key` (and retried); else sent once
    acks: str = "all"  # "0" and "1": the leader's append alone acknowledges; loss is allowed
    format: str = "json"  # json, ndjson or binary (the body's content type)
    worker: int = 0  # the producer that sent it, one request at a time
    # Sent again with the same key through another node than the acknowledged attempt's, after
    # the partition's leader changed: each must get the first answer and append nothing.
    replays: list[Attempt] = field(default_factory=list)

    @property
    def outcome(self) -> str:
        outcomes = {a.outcome for a in self.attempts}
        if "ok" in outcomes:
            return "ok"
        if outcomes == {"failed"}:
            return "failed"
        return "unknown"

    @property
    def acked(self) -> list[tuple[int, int, int]] | None:
        """The results of the first attempt answered 200 (202 with acks=0)."""
        return next((a.results for a in self.attempts if a.results is not None), None)

    @property
    def acked_attempt(self) -> Attempt | None:
        return next((a for a in self.attempts if a.results is not None), None)


@dataclass
class Read:
    """One consumer fetch answered 200."""

    partition: int
    node: int
    run: int
    pinned: bool  # sent with Sluice-Forwarded-By: answered by `node` itself, as leader
    start: float
    end: float
    offset: int
    records: list[tuple[int, str | None, Any]]  # (offset, key, value)
    next_offset: int
    high_watermark: int


@dataclass
class Observation:
    """One node's describe of the topic: each partition's leader and ISR in its view, and its
    own replica's high watermark and log end."""

    node: int
    run: int
    start: float
    end: float
    rows: list[dict[str, Any]]


@dataclass
class Snapshot:
    """A replica's log read from disk, kept below the high watermark that node reported just
    before (a high watermark never goes back, so that part is committed and must not change)."""

    node: int
    run: int
    time: float
    partition: int
    high_watermark: int
    records: list[LogRecord]


@dataclass
class History:
    topic: str
    partitions: int
    t0: float = field(default_factory=time.monotonic)
    ops: list[ProduceOp] = field(default_factory=list)
    reads: list[Read] = field(default_factory=list)
    observations: list[Observation] = field(default_factory=list)
    snapshots: list[Snapshot] = field(default_factory=list)
    anomalies: list[tuple[str, str]] = field(default_factory=list)  # (kind, detail)
    fetch_errors: int = 0
    side: SideHistory = field(default_factory=lambda: SideHistory(""))
    registry: RegistryHistory = field(default_factory=RegistryHistory)
    share: ShareHistory = field(default_factory=ShareHistory)
    txn: TxnHistory = field(default_factory=TxnHistory)
    unreplayed: int = 0  # acknowledged requests picked for a replay whose leader never changed

    def now(self) -> float:
        return time.monotonic() - self.t0


def record_value(op_key: str, index: int) -> dict[str, Any]:
    return {"op": op_key, "i": index}


def encode_body(form: str, entries: list[dict[str, Any]]) -> bytes:
    """A produce body in `form`: JSON; NDJSON (values only, so the records have no key); or one
    Kafka RecordBatch v2 whose values are the same JSON texts."""
    if form == "json":
        return json.dumps({"records": entries}).encode()
    if form == "ndjson":
        return b"".join(json.dumps(e["value"]).encode() + b"\n" for e in entries)
    return bytes(
        fmt.encode_batch(
            fmt.RecordInput(e["key"].encode(), json.dumps(e["value"]).encode()) for e in entries
        )
    )


@dataclass
class _Replay:
    """An acknowledged request to send again once a leader epoch of its partitions rose past
    `epochs`, read by a poll that began after the answer (`acked_at`)."""

    op: ProduceOp
    acked_at: float
    epochs: dict[int, int] | None = None


class Workload:
    """Producers, consumers and pollers over one topic, driven until told to stop."""

    def __init__(
        self,
        cluster: Cluster,
        history: History,
        rng: random.Random,
        session: aiohttp.ClientSession,
        producers: int = 4,
        keyless: float = 0.15,
    ) -> None:
        self.cluster = cluster
        self.history = history
        self.rng = rng
        self.session = session
        self.producers = producers
        self.keyless = keyless  # the share of requests sent once without Idempotency-Key
        self.stop_new = asyncio.Event()  # producers start no new request
        self.stop_polls = asyncio.Event()
        self.give_up_at = float("inf")  # monotonic time after which producers stop retrying
        self.read_until: dict[int, int] | None = None  # consumers stop at these offsets
        self.positions = dict.fromkeys(range(history.partitions), 0)
        self.leader_hint: dict[int, int] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._producer_tasks: list[asyncio.Task[None]] = []
        self._consumer_tasks: list[asyncio.Task[None]] = []
        self._out_of_range: set[tuple[int, int]] = set()
        self._to_replay: list[_Replay] = []
        self._replay_tasks: list[asyncio.Task[None]] = []
        self._replays_closed = asyncio.Event()

    def start(self) -> None:
        self._producer_tasks = [
            asyncio.create_task(self._producer(w)) for w in range(self.producers)
        ]
        self._consumer_tasks = [
            asyncio.create_task(self._consumer(p)) for p in range(self.history.partitions)
        ]
        self._tasks = [
            *self._producer_tasks,
            *self._consumer_tasks,
            *(asyncio.create_task(self._poller(i)) for i in range(self.cluster.size)),
            asyncio.create_task(self._replayer()),
        ]

    async def producers_done(self, timeout: float) -> bool:
        done, _ = await asyncio.wait(self._producer_tasks, timeout=timeout)
        return len(done) == len(self._producer_tasks)

    async def consumers_done(self, timeout: float) -> bool:
        done, _ = await asyncio.wait(self._consumer_tasks, timeout=timeout)
        return len(done) == len(self._consumer_tasks)

    async def close(self) -> None:
        self.stop_new.set()
        self.stop_polls.set()
        self.give_up_at = 0.0
        self._replays_closed.set()
        tasks = self._tasks + self._replay_tasks
        for task in tasks:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for result in results:
            if isinstance(result, Exception):
                raise result

    def _url(self, node: int) -> str:
        return self.cluster.url(node)

    # -- producers ---------------------------------------------------------------------------------

    def _new_op(self, worker: int, n: int) -> ProduceOp:
        key = f"{self.history.topic}/w{worker}/{n}"
        topic = self.history.topic
        parts = self.history.partitions
        form = self.rng.choice(FORMATS)
        if form == "json" and parts > 1 and self.rng.random() < 0.25:
            # One request to several partitions: each partition gets its own batch.
            chosen = [p % parts for p in range(self.rng.randint(2, 3))]
            path = f"/v1/topics/{topic}/records"
            entries = [
                {"key": f"{key}#{i}", "value": record_value(key, i), "partition": p}
                for i, p in enumerate(chosen)
            ]
        else:
            p = self.rng.randrange(parts)
            chosen = [p] * self.rng.randint(1, 3)
            path = f"/v1/topics/{topic}/partitions/{p}/records"
            entries = [
                {"key": f"{key}#{i}", "value": record_value(key, i)} for i in range(len(chosen))
            ]
        acks = self.rng.choice(ACKS)
        path += f"?acks={acks}&timeout_ms={PRODUCE_TIMEOUT_MS}"
        idempotent = self.rng.random() >= self.keyless
        records = [(p, i) for i, p in enumerate(chosen)]
        return ProduceOp(
            key, path, encode_body(form, entries), records, [], idempotent, acks, form, worker
        )

    async def _producer(self, worker: int) -> None:
        n = 0
        while not self.stop_new.is_set():
            op = self._new_op(worker, n)
            n += 1
            self.history.ops.append(op)
            while op.outcome != "ok" and time.monotonic() < self.give_up_at:
                op.attempts.append(await self._send(op, self.rng.randrange(self.cluster.size)))
                if not op.idempotent:
                    break  # without an Idempotency-Key a retry could duplicate: sent once
                if op.outcome != "ok":
                    await asyncio.sleep(self.rng.uniform(0.05, 0.2))  # retry backoff
            if op.outcome == "ok" and op.idempotent and self.rng.random() < REPLAY_SHARE:
                self._to_replay.append(_Replay(op, self.history.now()))
            if not self.stop_new.is_set():
                await asyncio.sleep(self.rng.uniform(0.0, PACING_S))  # pacing between requests

    async def _send(self, op: ProduceOp, node: int) -> Attempt:
        start = self.history.now()
        status: int | None = None
        code: str | None = None
        results: list[tuple[int, int, int]] | None = None
        error: str | None = None
        headers = {"Content-Type": CONTENT_TYPES[op.format]}
        if op.idempotent:
            headers["Idempotency-Key"] = op.key
        wall_start = time.time()
        try:
            async with self.session.post(
                self._url(node) + op.path,
                data=op.body,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=ATTEMPT_TIMEOUT_S),
            ) as response:
                raw = await response.read()
                status = response.status
                with contextlib.suppress(ValueError):
                    doc = json.loads(raw)
                    if status in (200, 202):
                        results = [
                            (r["partition"], r["base_offset"], r["count"]) for r in doc["results"]
                        ]
                    elif isinstance(doc, dict):
                        code = doc.get("code")
        except (aiohttp.ClientError, TimeoutError) as exc:
            error = type(exc).__name__
        outcome = classify(status, code)
        if outcome == "ok" and results is None:
            outcome, error = "unknown", f"unparsable {status} answer"
        return Attempt(
            node,
            start,
            self.history.now(),
            status,
            code,
            outcome,
            results,
            error,
            (wall_start, time.time()),
        )

    # -- replays across a leader change ------------------------------------------------------------

    async def _replayer(self) -> None:
        """Polls the partitions' leader epochs in etcd; sends each acknowledged request picked for
        a replay again once an epoch of its partitions rose past the one read after its answer."""
        prefix = f"{ETCD_PREFIX}/partitions/{self.history.topic}/".encode()
        while not self._replays_closed.is_set():
            start = self.history.now()
            epochs = await self._epochs(prefix)
            if len(epochs) == self.history.partitions:
                waiting = []
                for replay in self._to_replay:
                    parts = {p for p, _ in replay.op.records}
                    if replay.epochs is None:
                        if start > replay.acked_at:  # this poll began after the answer
                            replay.epochs = {p: epochs[p] for p in parts}
                        waiting.append(replay)
                    elif any(epochs[p] > replay.epochs[p] for p in parts):
                        self._replay_tasks.append(asyncio.create_task(self._replay(replay.op)))
                    else:
                        waiting.append(replay)
                self._to_replay = waiting
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._replays_closed.wait(), EPOCH_POLL_S)

    async def _epochs(self, prefix: bytes) -> dict[int, int]:
        """Each partition's leader epoch in etcd (none when etcd did not answer)."""
        try:
            kvs, _ = await asyncio.to_thread(self.cluster.etcd.range, prefix)
        except (httpx.HTTPError, OSError, ValueError, KeyError):
            return {}
        return {
            int(base64.b64decode(kv["key"]).rsplit(b"/", 1)[1]): PartitionState.parse(
                base64.b64decode(kv["value"]), 0
            ).leader_epoch
            for kv in kvs
        }

    async def _replay(self, op: ProduceOp) -> None:
        """The request again, through a node other than the acknowledged attempt's, until it
        is answered (or the producers give up)."""
        acked = op.acked_attempt
        assert acked is not None
        others = [n for n in range(self.cluster.size) if n != acked.node]
        while time.monotonic() < self.give_up_at:
            attempt = await self._send(op, self.rng.choice(others))
            op.replays.append(attempt)
            if attempt.outcome != "unknown":
                return
            await asyncio.sleep(self.rng.uniform(0.05, 0.2))  # retry backoff

    async def replays_done(self, timeout: float) -> bool:
        """Stop picking replays (those whose leader never changed are counted) and wait for
        the ones under way."""
        self._replays_closed.set()
        self.history.unreplayed = len(self._to_replay)
        self._to_replay = []
        if not self._replay_tasks:
            return True
        done, _ = await asyncio.wait(self._replay_tasks, timeout=timeout)
        return len(done) == len(self._replay_tasks)

    # -- consumers ---------------------------------------------------------------------------------

    async def _consumer(self, partition: int) -> None:
        history = self.history
        while True:
            target = self.read_until
            if target is not None and self.positions[partition] >= target[partition]:
                return
            pinned = self.rng.random() < 0.5
            node = self.leader_hint.get(partition, 0) if pinned else None
            if node is None:
                node = self.rng.randrange(self.cluster.size)
            run = self.cluster.runs[node]
            offset = self.positions[partition]
            headers = {FORWARDED_BY: "client"} if pinned else {}
            start = history.now()
            try:
                async with self.session.get(
                    f"{self._url(node)}/v1/topics/{history.topic}/partitions/{partition}/records",
                    params={"offset": str(offset), "timeout_ms": str(FETCH_WAIT_MS)},
                    headers=headers,
                    timeout=aiohttp.ClientTimeout(total=3.0),
                ) as response:
                    raw = await response.read()
                    status = response.status
            except (aiohttp.ClientError, TimeoutError):
                history.fetch_errors += 1
                await asyncio.sleep(0.05)
                continue
            end = history.now()
            doc = json.loads(raw) if raw else {}
            if status == 200:
                records = [(r["offset"], r["key"], r["value"]) for r in doc["records"]]
                if self.cluster.runs[node] == run:
                    history.reads.append(
                        Read(
                            partition,
                            node,
                            run,
                            pinned,
                            start,
                            end,
                            offset,
                            records,
                            doc["next_offset"],
                            doc["high_watermark"],
                        )
                    )
                    self.positions[partition] = max(offset, doc["next_offset"])
                continue
            history.fetch_errors += 1
            if status == 421 and isinstance(doc.get("leader"), int):
                self.leader_hint[partition] = doc["leader"]
            elif status == 416 and (partition, offset) not in self._out_of_range:
                self._out_of_range.add((partition, offset))
                history.anomalies.append(
                    (
                        "out-of-range",
                        f"p{partition}: fetch at {offset}, which a consumer had reached, through "
                        f"node {node} answered 416 ({doc.get('detail')})",
                    )
                )
            elif pinned:
                self.leader_hint.pop(partition, None)
            await asyncio.sleep(0.05)

    # -- pollers -----------------------------------------------------------------------------------

    async def _poller(self, node: int) -> None:
        history = self.history
        while not self.stop_polls.is_set():
            run = self.cluster.runs[node]
            start = history.now()
            with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError, KeyError):
                async with self.session.get(
                    f"{self._url(node)}/v1/topics/{history.topic}",
                    timeout=aiohttp.ClientTimeout(total=1.0),
                ) as response:
                    if response.status == 200:
                        doc = await response.json()
                        if self.cluster.runs[node] == run:
                            history.observations.append(
                                Observation(node, run, start, history.now(), doc["partitions"])
                            )
                            for row in doc["partitions"]:
                                if row["leader"] is not None:
                                    self.leader_hint[row["partition"]] = row["leader"]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop_polls.wait(), POLL_INTERVAL_S)

    # -- snapshots ---------------------------------------------------------------------------------

    async def snapshot(self, final_end: dict[int, int] | None = None) -> None:
        """Read every replica's log from disk, each below the high watermark its node reported
        last in its current run (or below `final_end` once the cluster is in sync)."""
        history = self.history
        for node in range(self.cluster.size):
            run = self.cluster.runs[node]
            for p in range(history.partitions):
                if final_end is not None:
                    hw = final_end[p]
                else:
                    seen = [
                        o.rows[p]["high_watermark"]
                        for o in history.observations
                        if o.node == node
                        and o.run == run
                        and o.rows[p]["high_watermark"] is not None
                    ]
                    if not seen:
                        continue
                    hw = seen[-1]
                if not self.cluster.running(node):
                    continue  # a dead node's files may be cut by a lost-unsynced fault
                data_dir = self.cluster.nodes[node].data_dir
                records = await asyncio.to_thread(read_replica_log, data_dir, history.topic, p)
                if not self.cluster.running(node) or self.cluster.runs[node] != run:
                    continue  # killed while read: the files may have been cut meanwhile
                history.snapshots.append(
                    Snapshot(node, run, history.now(), p, hw, [r for r in records if r.offset < hw])
                )
