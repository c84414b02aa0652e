"""The campaign's transactions, run while the faults fire: transactional producers, each with
its own transactional id, begin through random nodes, produce to 1 to 5 partitions (the
schedule's topic's three and a side topic's two) through random nodes, sometimes send the
offsets of a consumer group member that reads the schedule's topic at read_committed, then
commit or abort; some let their transaction time out (a short timeout_ms), and some are
zombies: a new begin of the same id while the old holder goes on writing and tries to commit.
A reader fetches every partition at read_committed meanwhile. Once the faults stop, every
transaction must end (each partition's last stable offset reaching its high watermark) within
the timeout plus a coordinator's failover, then every partition is read at read_committed from
the start and each group's committed offsets are read back. Each call and its answer goes into
a `TxnHistory`, which the checker judges (checker.py: the transaction rules)."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from tests.cluster.harness import LEASE_TTL_S, TRANSACTION_ABORT_INTERVAL_MS, Cluster
from tests.cluster.sideload import (
    SentOnce,
    SideActor,
    call_json,
    call_json_headers,
    failed_call,
)

PRODUCERS = 3
SIDE_PARTITIONS = 2  # the side topic's: with the schedule's three, 1 to 5 partitions
TIMEOUT_MS = 6_000  # a transaction's timeout (its producer's calls may each take 4 s)
SHORT_TIMEOUT_MS = (500, 1_000)  # of a transaction left to time out
# What a producer does with a transaction, and the weights.
MODES = {"commit": 50, "abort": 15, "timeout": 12, "zombie": 23}
OFFSETS_SHARE = 0.5  # transactions that send their group member's offsets
EXTRA_PRODUCE_SHARE = 0.3  # transactions that produce once more, after their partitions
PRODUCE_TIMEOUT_MS = 2_500
ZOMBIE_BEGIN_S = (0.0, 0.4)  # when the new begin of a zombie's id is sent, after its own
WRITE_PAUSE_S = (0.02, 0.15)  # between two calls of a transaction
RETRY_PAUSE_S = (0.05, 0.2)
MEMBER_FETCH_RECORDS = 10
READ_RECORDS = 200
READ_WAIT_MS = 100
# A coordinator's failover: its node's lease runs out, a new leader is elected and loads the
# state partition (seconds).
FAILOVER_S = 3 * LEASE_TTL_S
SETTLE_POLL_S = 0.2
FINAL_READ_S = 30.0  # after healing, bound of the final reads
TXN_STATE = "__transaction_state"
OPEN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort")


@dataclass
class TxnCall(SentOnce):
    """One call of a transaction, sent once through one node: begin, produce, offsets, commit
    or abort."""

    kind: str
    tid: str
    node: int
    start: float
    end: float = 0.0
    status: int | None = None  # None: no answer
    content_type: str | None = None
    code: str | None = None
    error: str | None = None
    state: str | None = None  # begin, commit and abort: the answer's state
    epoch: int | None = None  # begin: the epoch answered
    # produce: its key (each record's value is {"tx": key, "i": i}), topic and records
    key: str = ""
    topic: str = ""
    records: list[tuple[int, int]] = field(default_factory=list)  # (partition, index)
    # offsets: the group's and what was sent, (topic, partition) -> offset
    group: str = ""
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)

    def __str__(self) -> str:
        what = self.kind
        if self.kind == "produce":
            what += f" {self.key} to {self.topic} {sorted({p for p, _ in self.records})}"
        elif self.kind == "offsets":
            what += f" of {self.group} {sorted(self.offsets.items())}"
        answer = self.status if self.status is not None else self.error
        detail = " ".join(str(x) for x in (answer, self.code, self.state) if x is not None)
        return f"{what} through node {self.node} at {self.start:.2f}-{self.end:.2f}s: {detail}"


@dataclass
class Txn:
    """One transaction: its id and epoch (as its begin answered), what its producer meant to
    do with it, and its calls."""

    tid: str
    epoch: int
    mode: str  # commit | abort | timeout | zombie (its id begun again while it writes)
    timeout_ms: int
    begun: float  # when its begin was answered
    calls: list[TxnCall] = field(default_factory=list)

    def __str__(self) -> str:
        return f"transaction {self.tid} epoch {self.epoch} ({self.mode}, begun {self.begun:.2f}s)"

    def of(self, *kinds: str) -> list[TxnCall]:
        return [c for c in self.calls if c.kind in kinds]


@dataclass
class TxnRead:
    """One partition fetch at read_committed answered 200: during the faults, or the final
    read from the start once everything settled."""

    topic: str
    partition: int
    node: int
    start: float
    offset: int
    records: list[tuple[int, str | None, Any]]  # (offset, key, value)
    next_offset: int
    high_watermark: int
    last_stable_offset: int | None  # the Sluice-Last-Stable-Offset header (None: absent)
    final: bool = False


@dataclass
class MemberFetch:
    """One fetch of a group member at read_committed answered 200."""

    group: str
    member: str
    node: int
    start: float
    records: list[tuple[str, int, int, str | None, Any]]  # (topic, partition, offset, key, value)


@dataclass
class TxnSettle:
    """After healing: whether every transaction ended within the bound, and what was seen."""

    bound_s: float
    reached_in: float | None = None  # seconds after healing; None: not within the bound
    lso: dict[tuple[str, int], tuple[int | None, int | None]] = field(default_factory=dict)
    states: dict[str, str | None] = field(default_factory=dict)  # tid -> its describe's state
    note: str = ""


@dataclass
class TxnHistory:
    topic: str = ""  # empty: no transactions ran
    side_topic: str = ""
    txns: list[Txn] = field(default_factory=list)
    begins: list[TxnCall] = field(default_factory=list)  # every begin, answered or not
    reads: list[TxnRead] = field(default_factory=list)
    fetches: list[MemberFetch] = field(default_factory=list)
    settle: TxnSettle | None = None
    # After settling: the partitions read to their high watermark at read_committed, and
    # each group's committed offsets (None: the group could not be read).
    final_read: set[tuple[str, int]] = field(default_factory=set)
    final_committed: dict[str, dict[tuple[str, int], int | None] | None] = field(
        default_factory=dict
    )
    errors: Counter[str] = field(default_factory=Counter)  # failed calls by call and answer
    anomalies: list[tuple[str, str]] = field(default_factory=list)  # (kind, detail)

    def partitions(self) -> list[tuple[str, int]]:
        if not self.topic:
            return []
        return [(self.topic, p) for p in range(3)] + [
            (self.side_topic, p) for p in range(SIDE_PARTITIONS)
        ]


def _int(value: str | None) -> int | None:
    return None if value is None or not value.lstrip("-").isdigit() else int(value)


class Transactions(SideActor[TxnHistory]):
    """PRODUCERS transactional producers (each with its group member) and a read_committed
    reader; `drain` lets the producers finish what they began and stop."""

    draining = False  # producers begin nothing more: they end what is open and stop
    give_up_at = float("inf")  # monotonic time after which calls are no longer retried

    def __init__(
        self,
        cluster: Cluster,
        side: TxnHistory,
        rng: random.Random,
        session: aiohttp.ClientSession,
        topic: str,
        clock: Callable[[], float],
    ) -> None:
        super().__init__(cluster, side, rng, session, topic, clock)
        self.side.topic = topic
        self.side.side_topic = side_topic(topic)
        self._members: dict[int, tuple[str, int] | None] = {}  # producer -> (member, generation)
        self._positions: dict[int, dict[tuple[str, int], int]] = {}
        self._producers: list[asyncio.Task[None]] = []
        self._drained = asyncio.Event()  # set with `draining`

    @staticmethod
    def ids(topic: str) -> tuple[str, ...]:
        """The transactional ids of a schedule."""
        return tuple(f"{topic}.tx{n}" for n in range(PRODUCERS))

    def start(self) -> None:
        self._producers = [asyncio.create_task(self._producer(n)) for n in range(PRODUCERS)]
        self._tasks = [*self._producers, asyncio.create_task(self._reader())]

    async def close(self) -> None:
        """Stop everything (members leave their groups) and wait."""
        self.stop_new()
        self.give_up_at = 0.0
        self.stop.set()
        results = await asyncio.gather(*self._tasks, return_exceptions=True)
        for result in results:
            if isinstance(result, Exception):
                raise result

    def _node(self) -> tuple[int, str]:
        node = self.rng.randrange(self.cluster.size)
        return node, self.cluster.url(node)

    def _loop_time(self) -> float:
        return asyncio.get_running_loop().time()

    async def _pause(self, bounds: tuple[float, float]) -> None:
        await asyncio.sleep(self.rng.uniform(*bounds))  # pacing, not a synchronisation

    # -- a producer ------------------------------------------------------------------------------

    async def _producer(self, n: int) -> None:
        tid = self.ids(self.topic)[n]
        self._positions[n] = {}
        while not self.draining:
            mode = self.rng.choices(list(MODES), weights=list(MODES.values()))[0]
            timeout = self.rng.randint(*SHORT_TIMEOUT_MS) if mode == "timeout" else TIMEOUT_MS
            txn = await self._begin(tid, mode, timeout)
            if txn is None:
                continue
            if mode == "zombie":
                await self._zombie(n, txn)
            else:
                await self._run(n, txn, mode)
            await self._pause(WRITE_PAUSE_S)
        await self._leave(n)

    async def _run(self, n: int, txn: Txn, mode: str) -> None:
        """Produce, maybe send the offsets, then end as the mode says."""
        await self._fill(txn)
        if mode != "timeout" and self.rng.random() < OFFSETS_SHARE:
            await self._send_offsets(n, txn)
        if mode == "timeout":
            wait = txn.timeout_ms / 1000 + TRANSACTION_ABORT_INTERVAL_MS / 1000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._drained.wait(), wait + self.rng.uniform(0.1, 0.5))
            if self.draining:
                return  # left to its timeout: no commit is sent
        await self._end(txn, "abort" if mode == "abort" else "commit")

    async def _zombie(self, n: int, txn: Txn) -> None:
        """The holder writes and commits while a new begin of its id is sent; the new
        holder's transaction then commits or aborts."""

        async def successor() -> Txn | None:
            await self._pause(ZOMBIE_BEGIN_S)
            if self.draining:
                return None
            mode = self.rng.choice(("commit", "commit", "abort"))
            return await self._begin(txn.tid, mode, TIMEOUT_MS)

        async def holder() -> None:
            await self._fill(txn, paced=True)
            await self._end(txn, "commit")

        new, _ = await asyncio.gather(successor(), holder())
        if new is not None:
            await self._run(n, new, new.mode)

    async def _begin(self, tid: str, mode: str, timeout_ms: int) -> Txn | None:
        """Begin (retried until answered, or until the producers drain or give up)."""
        while not self.draining and self._loop_time() < self.give_up_at:
            node, url = self._node()
            call = TxnCall("begin", tid, node, self.clock())
            self.side.begins.append(call)
            await self._send(call, f"{url}/v1/transactions/{tid}", {"timeout_ms": timeout_ms})
            if call.status == 201 and call.epoch is not None:
                txn = Txn(tid, call.epoch, mode, timeout_ms, call.end, [call])
                self.side.txns.append(txn)
                return txn
            if call.outcome == "refused" and call.code != "CONCURRENT_TRANSACTIONS":
                return None
            await self._pause(RETRY_PAUSE_S)
        return None

    async def _fill(self, txn: Txn, paced: bool = False) -> None:
        """Produce to 1 to 5 partitions (one request per topic, each sent once), sometimes
        once more to some of them."""
        chosen = self.rng.sample(self.side.partitions(), self.rng.randint(1, 5))
        by_topic: dict[str, list[int]] = {}
        for topic, p in chosen:
            by_topic.setdefault(topic, []).append(p)
        plan = list(by_topic.items())
        if self.rng.random() < EXTRA_PRODUCE_SHARE:
            topic, partitions = self.rng.choice(plan)
            plan.append((topic, self.rng.sample(partitions, 1)))
        for topic, partitions in plan:
            await self._produce(txn, topic, partitions)
            if paced:
                await self._pause(WRITE_PAUSE_S)

    async def _produce(self, txn: Txn, topic: str, partitions: list[int]) -> None:
        key = f"{txn.tid}/e{txn.epoch}/{len(txn.of('produce'))}"
        records = [(p, i) for i, p in enumerate(p for p in partitions for _ in range(2))]
        node, url = self._node()
        call = TxnCall("produce", txn.tid, node, self.clock(), key=key, topic=topic)
        call.records = records
        txn.calls.append(call)
        body = {
            "records": [
                {"key": f"{key}#{i}", "value": {"tx": key, "i": i}, "partition": p}
                for p, i in records
            ]
        }
        params = {
            "transactional_id": txn.tid,
            "producer_epoch": str(txn.epoch),
            "acks": "all",
            "timeout_ms": str(PRODUCE_TIMEOUT_MS),
        }
        await self._send(call, f"{url}/v1/topics/{topic}/records", body, params)

    async def _end(self, txn: Txn, kind: str) -> None:
        """Commit or abort, retried (a retry answers as the first) until answered with a
        state or a refusal, or until the producers give up."""
        while True:
            node, url = self._node()
            call = TxnCall(kind, txn.tid, node, self.clock())
            txn.calls.append(call)
            body = {"producer_epoch": txn.epoch}
            await self._send(call, f"{url}/v1/transactions/{txn.tid}/{kind}", body)
            settled = call.outcome == "ok" or (
                call.outcome == "refused" and call.code != "CONCURRENT_TRANSACTIONS"
            )
            if settled or self._loop_time() >= self.give_up_at:
                return
            await self._pause(RETRY_PAUSE_S)

    async def _send(
        self,
        call: TxnCall,
        url: str,
        body: dict[str, Any],
        params: dict[str, str] | None = None,
    ) -> None:
        call.status, call.content_type, doc, _, call.error = await call_json_headers(
            self.session, "POST", url, body, params
        )
        call.end = self.clock()
        if not isinstance(doc, dict):
            doc = {}
        if (call.status or 0) >= 300:
            call.code = doc.get("code")
        elif call.status is not None:
            call.state = doc.get("state")
            if call.kind == "begin":
                call.epoch = doc.get("producer_epoch")
        if call.outcome != "ok":
            self.side.errors[failed_call(call.kind, call.status, call.error)] += 1

    # -- the group member and its offsets --------------------------------------------------------

    def group(self, n: int) -> str:
        return f"{self.topic}.txg{n}"

    async def _send_offsets(self, n: int, txn: Txn) -> None:
        """The member reads on at read_committed, and its positions go into the transaction."""
        member = await self._member(n)
        if member is None:
            return
        member_id, generation = member
        node, url = self._node()
        start = self.clock()
        status, _, doc, error = await call_json(
            self.session,
            "GET",
            f"{url}/v1/groups/{self.group(n)}/members/{member_id}/records",
            params={
                "isolation": "read_committed",
                "timeout_ms": "0",
                "max_records": str(MEMBER_FETCH_RECORDS),
            },
        )
        if status != 200 or not isinstance(doc, dict):
            self.side.errors[failed_call("member fetch", status, error)] += 1
            if status == 404:
                self._members[n] = None  # dropped: join again
            return
        got = [
            (r["topic"], r["partition"], r["offset"], r["key"], r["value"]) for r in doc["records"]
        ]
        generation = doc.get("generation", generation)
        self._members[n] = (member_id, generation)
        self.side.fetches.append(MemberFetch(self.group(n), member_id, node, start, got))
        positions = self._positions[n]
        for topic, p, offset, _, _ in got:
            positions[(topic, p)] = max(positions.get((topic, p), 0), offset + 1)
        if not positions:
            return
        node, url = self._node()
        call = TxnCall("offsets", txn.tid, node, self.clock(), group=self.group(n))
        call.offsets = dict(positions)
        txn.calls.append(call)
        body = {
            "producer_epoch": txn.epoch,
            "group_id": self.group(n),
            "member_id": member_id,
            "generation_id": generation,
            "offsets": [
                {"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(positions.items())
            ],
        }
        await self._send(call, f"{url}/v1/transactions/{txn.tid}/offsets", body)

    async def _member(self, n: int) -> tuple[str, int] | None:
        """The producer's group member over the schedule's topic (joined if it has none);
        nothing commits the group's offsets but the producer's transactions."""
        member = self._members.get(n)
        if member is not None:
            return member
        _, url = self._node()
        status, _, doc, error = await call_json(
            self.session,
            "POST",
            f"{url}/v1/groups/{self.group(n)}/members",
            {
                "topics": [self.topic],
                "auto_offset_reset": "earliest",
                "auto_commit": False,
                "session_timeout_ms": 10_000,
            },
        )
        if status != 201 or not isinstance(doc, dict):
            self.side.errors[failed_call("join", status, error)] += 1
            return None
        self._members[n] = (doc["member_id"], doc["generation"])
        self._positions[n] = {}  # a new member starts from the group's committed offsets
        return self._members[n]

    async def _leave(self, n: int) -> None:
        member = self._members.get(n)
        if member is not None:
            _, url = self._node()
            await call_json(
                self.session, "DELETE", f"{url}/v1/groups/{self.group(n)}/members/{member[0]}"
            )

    # -- reads -----------------------------------------------------------------------------------

    async def _reader(self) -> None:
        """Every partition in turn at read_committed, through random nodes, until stopped."""
        positions = dict.fromkeys(self.side.partitions(), 0)
        while not self.stop.is_set():
            for topic, p in self.side.partitions():
                read = await self._read(topic, p, positions[(topic, p)], READ_WAIT_MS)
                if read is not None:
                    positions[(topic, p)] = max(positions[(topic, p)], read.next_offset)
            await asyncio.sleep(0.02)  # pacing between rounds

    async def _read(self, topic: str, p: int, offset: int, wait_ms: int) -> TxnRead | None:
        node, url = self._node()
        start = self.clock()
        status, _, doc, headers, error = await call_json_headers(
            self.session,
            "GET",
            f"{url}/v1/topics/{topic}/partitions/{p}/records",
            params={
                "offset": str(offset),
                "isolation": "read_committed",
                "timeout_ms": str(wait_ms),
                "max_records": str(READ_RECORDS),
            },
        )
        if status != 200 or not isinstance(doc, dict):
            self.side.errors[failed_call("read", status, error)] += 1
            return None
        read = TxnRead(
            topic,
            p,
            node,
            start,
            offset,
            [(r["offset"], r["key"], r["value"]) for r in doc["records"]],
            doc["next_offset"],
            doc["high_watermark"],
            _int(headers.get("sluice-last-stable-offset")),
        )
        self.side.reads.append(read)
        return read

    # -- after healing ---------------------------------------------------------------------------

    def stop_new(self) -> None:
        """The faults end: producers begin nothing more, and end what they began."""
        self.draining = True
        self._drained.set()

    def settled(self) -> str:
        """What the drain found, for the timeline."""
        settle = self.side.settle
        if settle is None:
            return "not drained"
        if settle.reached_in is None:
            return f"not every one ended within {settle.bound_s:.0f} s ({settle.note})"
        return f"every one ended {settle.reached_in:.1f} s after healing"

    async def drain(self, healed_at: float, bound_s: float) -> None:
        """The producers end what they began (retrying until `bound_s` after healing), then
        every partition's last stable offset must reach its high watermark and every id's
        transaction be complete within the timeout, the abort timer's interval and a
        coordinator's failover after healing (`healed_at`, the loop's clock)."""
        self.stop_new()
        self.give_up_at = healed_at + bound_s
        bound = TIMEOUT_MS / 1000 + TRANSACTION_ABORT_INTERVAL_MS / 1000 + FAILOVER_S
        settle = TxnSettle(bound)
        self.side.settle = settle
        await asyncio.wait(self._producers, timeout=max(0.0, self.give_up_at - self._loop_time()))
        while True:
            if await self._settled(settle):
                settle.reached_in = self._loop_time() - healed_at
                return
            if self._loop_time() > healed_at + bound:
                return
            await asyncio.sleep(SETTLE_POLL_S)  # polling the cluster, not a synchronisation

    async def _settled(self, settle: TxnSettle) -> bool:
        """Whether every partition's LSO is its high watermark and no id's transaction is open
        or completing (what was seen goes into `settle`)."""
        done = True
        for topic, p in self.side.partitions():
            node, url = self._node()
            status, _, doc, headers, error = await call_json_headers(
                self.session,
                "GET",
                f"{url}/v1/topics/{topic}/partitions/{p}/records",
                params={"offset": "latest", "isolation": "read_committed", "timeout_ms": "0"},
            )
            if status != 200:
                settle.note = f"{topic}-{p} through node {node}: {status or error} {doc}"
                return False
            lso = _int(headers.get("sluice-last-stable-offset"))
            hw = _int(headers.get("sluice-high-watermark"))
            settle.lso[(topic, p)] = (lso, hw)
            done = done and lso is not None and lso == hw
        for tid in self.ids(self.topic):
            node, url = self._node()
            status, _, doc, error = await call_json(
                self.session, "GET", f"{url}/v1/transactions/{tid}"
            )
            if status == 404:
                settle.states[tid] = None  # never begun
                continue
            if status != 200 or not isinstance(doc, dict):
                settle.note = f"describe {tid} through node {node}: {status or error} {doc}"
                return False
            settle.states[tid] = doc.get("state")
            done = done and doc.get("state") not in OPEN_STATES
        return done

    async def read_final(self) -> None:
        """Every partition at read_committed from the start to its high watermark, and each
        group's committed offsets (bounded wait for the answers)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FINAL_READ_S
        for topic, p in self.side.partitions():
            offset, end = 0, None
            while loop.time() < deadline:
                read = await self._read(topic, p, offset, 0)
                if read is None:
                    await self._pause(RETRY_PAUSE_S)
                    continue
                read.final = True
                end = read.high_watermark if end is None else end
                if read.next_offset >= end:
                    self.side.final_read.add((topic, p))
                    break
                if read.next_offset <= offset:
                    break  # held at its last stable offset
                offset = read.next_offset
            if (topic, p) not in self.side.final_read:
                self.side.anomalies.append(
                    (
                        "not-live",
                        f"{topic}-{p} not read to its high watermark {end} at read_committed "
                        f"after healing: at {offset}",
                    )
                )
        for n in range(PRODUCERS):
            self.side.final_committed[self.group(n)] = await self._committed(n, deadline)

    async def _committed(self, n: int, deadline: float) -> dict[tuple[str, int], int | None] | None:
        last = "no attempt"
        while asyncio.get_running_loop().time() < deadline:
            _, url = self._node()
            status, _, doc, error = await call_json(
                self.session, "GET", f"{url}/v1/groups/{self.group(n)}"
            )
            if status == 200 and isinstance(doc, dict):
                return {
                    (row["topic"], row["partition"]): row["committed_offset"]
                    for row in doc["partitions"]
                }
            if status == 404:
                return {}  # a group without members or offsets: nothing committed
            last = f"{status or error} {doc}"
            await self._pause(RETRY_PAUSE_S)
        self.side.anomalies.append(
            ("not-live", f"group {self.group(n)} unreadable after healing: {last}")
        )
        return None

    async def delete(self) -> None:
        """Forget the side topic (a schedule without violations)."""
        _, url = self._node()
        await call_json(self.session, "DELETE", f"{url}/v1/topics/{self.side.side_topic}")


def side_topic(topic: str) -> str:
    """The schedule's side topic, which only transactions write to."""
    return f"{topic}-tx"
