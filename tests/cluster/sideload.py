"""The campaign's operations besides produce and fetch, run while the faults fire: consumer
group members (join, fetch, commit) over the schedule's topic, topic changes (creating
topics, changing a config) and reassignments of the schedule's topic (shrinking a partition
to two replicas and growing it back, new orders, throttles, cancellations, balance runs and
decommission dry runs). What they did and what the cluster shows once healed goes into a
`SideHistory`, which the checker judges (checker.py: the group, topic and reassignment
rules)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import aiohttp
import httpx

from tests.cluster.harness import ETCD_PREFIX, Cluster, PartitionState

H = TypeVar("H")
PROBLEM_JSON = "application/problem+json"
CALL_TIMEOUT_S = 4.0  # the client's wait for any answer (a paused node never answers)
SESSION_TIMEOUT_MS = 10_000  # a member whose calls all fail this long is dropped and rejoins
GROUP_FETCH_WAIT_MS = 200
MEMBERS = 2
TOPIC_OPS = 5  # topic creations and config changes per schedule, at most
FINAL_READ_S = 30.0  # after healing, bound for the nodes to agree on what the topics are
RETENTION_MS = 3_600_000  # the config the changes set (each change a new, larger value)
REASSIGN_OPS = (4, 8)  # cluster-shape calls per schedule (the throttle's included)
# The reassignment throttle's range when one is set: a partition holds tens of kB by then, so
# that a throttled copy lasts long enough (a fraction of a second) for a cancel to meet it.
THROTTLE_BYTES_S = (20_000, 200_000)
CANCEL_SHARE = 0.4  # the share of grows cancelled at once (while they copy, or too late)
SETTLE_WAIT_S = 30.0  # after healing, bound of each of settle()'s waits
REASSIGNMENTS = "/v1/cluster/reassignments"


@dataclass
class GroupFetch:
    """One member fetch answered 200: the records of the schedule's topic it delivered."""

    member: str
    generation: int
    records: list[tuple[int, int, str | None, Any]]  # (partition, offset, key, value)


@dataclass
class Commit:
    """One member commit answered 200 (everything delivered to the member so far)."""

    member: str
    generation: int  # the generation the member's latest fetch answered with
    start: float
    end: float
    offsets: dict[int, int]  # partition -> committed offset


class SentOnce:
    """A call sent once, judged by its answer's status (None: no answer)."""

    status: int | None

    @property
    def outcome(self) -> str:
        """ok (2xx), refused (4xx: surely not done) or unknown (5xx or no answer)."""
        if self.status is None or self.status >= 500:
            return "unknown"
        return "ok" if self.status < 300 else "refused"


@dataclass
class TopicOp(SentOnce):
    """One topic creation or config change, sent once through one node."""

    kind: str  # create | config
    topic: str
    node: int
    start: float
    end: float
    partitions: int  # create: as requested
    retention_ms: int  # the retention.ms requested
    status: int | None = None  # None: no answer
    content_type: str | None = None
    code: str | None = None
    error: str | None = None

    def __str__(self) -> str:
        what = self.status if self.status is not None else self.error
        return (
            f"{self.kind} {self.topic} (partitions {self.partitions}, retention.ms "
            f"{self.retention_ms}) through node {self.node} at {self.start:.2f}s: "
            f"{what} {self.code or ''}".rstrip()
        )


@dataclass
class TopicView:
    """A topic as one node describes it after healing."""

    partitions: int
    retention_ms: int


MOVES = ("shrink", "grow", "reorder", "restore")  # the ReassignOp kinds that POST a plan


@dataclass(frozen=True)
class Move:
    """A partition set moving, as an answer said: its target, the replicas it adds and those
    it removes (the state stored has replicas = target + removing while it moves); None where
    the answer does not tell (a balance's "from" is the answering node's view, maybe behind)."""

    target: tuple[int, ...]
    adding: tuple[int, ...] | None = ()
    removing: tuple[int, ...] | None = ()


@dataclass
class ReassignOp(SentOnce):
    """One call that changes (or plans to change) the cluster's shape, sent once through one
    node: a reassignment of one partition of the schedule's topic (shrink: drop a replica;
    grow: add the missing ones; reorder: a new preferred leader; restore: settle()'s put back
    on every node), a cancel of one, a balance, a decommission dry run or a throttle change."""

    kind: str  # shrink | grow | reorder | restore | cancel | balance | decommission | throttle
    partition: int | None  # moves and cancels: the partition of the schedule's topic
    target: tuple[int, ...]  # moves: the replicas asked; decommission: (the node,)
    node: int  # the node the call went through
    start: float
    end: float
    revision: int  # the etcd revision read just before the call was sent
    status: int | None = None  # None: no answer
    content_type: str | None = None
    code: str | None = None
    error: str | None = None
    detail: str = ""  # an error's problem detail (for the report)
    # 2xx moves and balances: the partitions of the schedule's topic the answer says were set
    # moving (a move whose partition was on its target already is left out).
    moves: dict[int, Move] = field(default_factory=dict)
    throttle: int | None = None  # throttle: the bytes/s set (None: lifted)

    def __str__(self) -> str:
        what = self.kind
        if self.partition is not None:
            what += f" p{self.partition}"
        if self.kind in MOVES:
            what += f" to {list(self.target)}"
        elif self.kind == "decommission":
            what += f" node {self.target[0]} (dry run)"
        elif self.kind == "throttle":
            what += f" {self.throttle}"
        answer = self.status if self.status is not None else self.error
        return (
            f"{what} through node {self.node} at {self.start:.2f}s (etcd rev {self.revision}): "
            f"{answer} {self.code or ''}".rstrip()
            + (f" ({self.detail})" if self.detail else "")
        )


@dataclass
class Settle:
    """settle()'s outcome: the schedule's topic's partitions in etcd once it ended."""

    ok: bool  # nothing moves and every partition is back on `replication_factor` nodes
    replication_factor: int
    states: dict[int, PartitionState | None]  # partition -> state (None: not readable)
    note: str = ""  # what it waited for in vain, if anything
    restored: int = 0  # partitions it put back on every node


@dataclass
class SideHistory:
    group: str
    joins: int = 0
    fetches: list[GroupFetch] = field(default_factory=list)
    commits: list[Commit] = field(default_factory=list)
    # Failed group calls, by call and answer: "fetch 503", "commit no answer (ClientOSError)".
    group_errors: Counter[str] = field(default_factory=Counter)
    final_committed: dict[int, int | None] | None = None  # after healing: partition -> offset
    topic_ops: list[TopicOp] = field(default_factory=list)
    # After healing, each attempted topic as each node shows it (None: the node says 404).
    final_topics: dict[str, dict[int, TopicView | None]] = field(default_factory=dict)
    reassign_ops: list[ReassignOp] = field(default_factory=list)
    settle: Settle | None = None  # None: no reassigner ran
    # At the start: the cluster's nodes and the most replicas any partition has (a partition
    # as wide as the cluster cannot lose a node: a decommission must be refused).
    nodes: int = 0
    widest: int = 0
    anomalies: list[tuple[str, str]] = field(default_factory=list)  # (kind, detail)


async def json_request(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    body: dict[str, Any] | None = None,
    params: dict[str, str] | None = None,
    timeout_s: float = CALL_TIMEOUT_S,
) -> tuple[int | None, str | None, bytes, dict[str, str], str | None]:
    """One call with a JSON body: (status, content type, answer body, headers lower-cased, and
    when there was no answer, the error that stopped it)."""
    try:
        async with session.request(
            method,
            url,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            params=params,
            timeout=aiohttp.ClientTimeout(total=timeout_s),
        ) as response:
            raw = await response.read()
            headers = {k.lower(): v for k, v in response.headers.items()}
            return response.status, response.content_type, raw, headers, None
    except (aiohttp.ClientError, TimeoutError) as exc:
        return None, None, b"", {}, f"{type(exc).__name__}: {exc}"


async def call_json_headers(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    body: dict[str, Any] | None = None,
    params: dict[str, str] | None = None,
) -> tuple[int | None, str | None, Any, dict[str, str], str | None]:
    """(status, content type, JSON answer or None, headers lower-cased, error name when there
    was no answer)."""
    status, content_type, raw, headers, error = await json_request(
        session, method, url, body, params
    )
    doc: Any = None
    with contextlib.suppress(ValueError):
        doc = json.loads(raw) if raw else None
    return status, content_type, doc, headers, None if error is None else error.split(":", 1)[0]


async def call_json(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    body: dict[str, Any] | None = None,
    params: dict[str, str] | None = None,
) -> tuple[int | None, str | None, Any, str | None]:
    """(status, content type, JSON answer or None, error name when there was no answer)."""
    status, content_type, doc, _, error = await call_json_headers(
        session, method, url, body, params
    )
    return status, content_type, doc, error


def failed_call(call: str, status: int | None, error: str | None) -> str:
    """How a group call failed, for the report: its answer's status, or why there was none."""
    return f"{call} {status}" if status is not None else f"{call} no answer ({error})"


class SideActor(Generic[H]):
    """What the side loads' actors act with: the cluster, the history they record into, their
    random source and HTTP session, the schedule's topic and clock; `stop` ends them."""

    def __init__(
        self,
        cluster: Cluster,
        side: H,
        rng: random.Random,
        session: aiohttp.ClientSession,
        topic: str,
        clock: Callable[[], float],
    ) -> None:
        self.cluster = cluster
        self.side = side
        self.rng = rng
        self.session = session
        self.topic = topic
        self.clock = clock
        self.stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []


class GroupMembers(SideActor[SideHistory]):
    """Members of one group over the schedule's topic, each fetching and committing through
    random nodes until told to stop, joining again when the group dropped them."""

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._member()) for _ in range(MEMBERS)]

    async def close(self) -> None:
        """Stop the members (each leaves the group) and wait for them."""
        self.stop.set()
        results = await asyncio.gather(*self._tasks, return_exceptions=True)
        for result in results:
            if isinstance(result, Exception):
                raise result

    def _base(self) -> str:
        node = self.rng.randrange(self.cluster.size)
        return f"{self.cluster.url(node)}/v1/groups/{self.side.group}/members"

    async def _member(self) -> None:
        member: str | None = None
        generation = 0
        while not self.stop.is_set():
            if member is None:
                status, _, doc, error = await call_json(
                    self.session,
                    "POST",
                    self._base(),
                    {
                        "topics": [self.topic],
                        "auto_offset_reset": "earliest",
                        "auto_commit": False,
                        "session_timeout_ms": SESSION_TIMEOUT_MS,
                    },
                )
                if status == 201 and isinstance(doc, dict):
                    member, generation = doc["member_id"], doc["generation"]
                    self.side.joins += 1
                else:
                    self.side.group_errors[failed_call("join", status, error)] += 1
            else:
                member, generation = await self._fetch_and_commit(member, generation)
            await asyncio.sleep(self.rng.uniform(0.05, 0.15))  # pacing between calls
        if member is not None:
            await call_json(self.session, "DELETE", f"{self._base()}/{member}")

    async def _fetch_and_commit(self, member: str, generation: int) -> tuple[str | None, int]:
        """One fetch, then one commit of what was delivered; (member or None to join again,
        the generation the fetch answered with)."""
        status, _, doc, error = await call_json(
            self.session,
            "GET",
            f"{self._base()}/{member}/records",
            params={"timeout_ms": str(GROUP_FETCH_WAIT_MS), "max_records": "100"},
        )
        if status == 200 and isinstance(doc, dict):
            generation = doc["generation"]
            self.side.fetches.append(
                GroupFetch(
                    member,
                    generation,
                    [
                        (r["partition"], r["offset"], r["key"], r["value"])
                        for r in doc["records"]
                        if r["topic"] == self.topic
                    ],
                )
            )
        else:
            self.side.group_errors[failed_call("fetch", status, error)] += 1
            return (None if status == 404 else member), generation
        start = self.clock()
        status, _, doc, error = await call_json(
            self.session, "POST", f"{self._base()}/{member}/commit"
        )
        if status == 200 and isinstance(doc, dict):
            offsets = {
                o["partition"]: o["offset"] for o in doc["offsets"] if o["topic"] == self.topic
            }
            self.side.commits.append(Commit(member, generation, start, self.clock(), offsets))
        else:
            self.side.group_errors[failed_call("commit", status, error)] += 1
        return (None if status == 404 else member), generation

    async def read_final(self, partitions: int) -> None:
        """After healing: the group's committed offsets (bounded wait for an answer)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FINAL_READ_S
        last = "no attempt"
        while loop.time() < deadline:
            node = self.rng.randrange(self.cluster.size)
            status, _, doc, error = await call_json(
                self.session, "GET", f"{self.cluster.url(node)}/v1/groups/{self.side.group}"
            )
            if status == 200 and isinstance(doc, dict):
                committed: dict[int, int | None] = dict.fromkeys(range(partitions))
                for row in doc["partitions"]:
                    if row["topic"] == self.topic:
                        committed[row["partition"]] = row["committed_offset"]
                self.side.final_committed = committed
                return
            if status == 404 and not any(commit.offsets for commit in self.side.commits):
                self.side.final_committed = dict.fromkeys(range(partitions))
                return  # no commit stored an offset: a group left empty is forgotten
            last = f"{status or error} {doc}"
            await asyncio.sleep(0.1)  # pause between retries, not a synchronisation
        self.side.anomalies.append(
            ("not-live", f"group {self.side.group} unreadable after healing: {last}")
        )


class TopicAdmin(SideActor[SideHistory]):
    """Creates topics and changes their retention.ms through random nodes during the faults,
    each call sent once; after healing, reads what every node shows of them; their names
    start with the schedule's topic."""

    _retention: dict[str, int]  # the last retention.ms requested, per topic

    def start(self) -> None:
        self._retention = {}
        self._tasks = [asyncio.create_task(self._run())]

    async def close(self) -> None:
        self.stop.set()
        await asyncio.gather(*self._tasks)

    async def _run(self) -> None:
        for n in range(TOPIC_OPS):
            with contextlib.suppress(TimeoutError):
                # The pacing of the schedule's topic calls (ends early when told to stop).
                await asyncio.wait_for(self.stop.wait(), self.rng.uniform(0.3, 1.2))
            if self.stop.is_set():
                return
            if not self._retention or self.rng.random() < 0.4:
                await self._create(f"{self.topic}-t{n}")
            else:
                await self._change(self.rng.choice(sorted(self._retention)))

    async def _send(self, op: TopicOp, method: str, path: str, body: dict[str, Any]) -> None:
        status, content_type, doc, error = await call_json(
            self.session, method, self.cluster.url(op.node) + path, body
        )
        op.end = self.clock()
        op.status, op.content_type, op.error = status, content_type, error
        if isinstance(doc, dict) and status is not None and status >= 300:
            op.code = doc.get("code")
        self.side.topic_ops.append(op)

    async def _create(self, name: str) -> None:
        partitions = self.rng.randint(1, 2)
        self._retention[name] = RETENTION_MS
        op = TopicOp(
            "create",
            name,
            self.rng.randrange(self.cluster.size),
            self.clock(),
            0.0,
            partitions,
            RETENTION_MS,
        )
        body = {
            "name": name,
            "partitions": partitions,
            "replication_factor": self.rng.choice((2, 3)),
            "configs": {"retention.ms": RETENTION_MS},
        }
        await self._send(op, "POST", "/v1/topics", body)

    async def _change(self, name: str) -> None:
        self._retention[name] += 1000
        value = self._retention[name]
        op = TopicOp(
            "config", name, self.rng.randrange(self.cluster.size), self.clock(), 0.0, 0, value
        )
        await self._send(op, "PATCH", f"/v1/topics/{name}", {"configs": {"retention.ms": value}})

    async def read_final(self) -> None:
        """After healing: each attempted topic as every node shows it, once they agree (or
        what each showed last when they do not agree within the bound)."""
        names = sorted({op.topic for op in self.side.topic_ops if op.kind == "create"})
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FINAL_READ_S
        for name in names:
            while True:
                views = await self._views(name)
                agreed = (
                    len(views) == self.cluster.size
                    and len({json.dumps(v and vars(v)) for v in views.values()}) == 1
                )
                if agreed or loop.time() >= deadline:
                    break
                await asyncio.sleep(0.1)  # pause between reads, not a synchronisation
            self.side.final_topics[name] = views
            if len(views) < self.cluster.size:
                answered = sorted(views)
                self.side.anomalies.append(
                    ("not-live", f"topic {name}: only nodes {answered} answered after healing")
                )

    async def _views(self, name: str) -> dict[int, TopicView | None]:
        views: dict[int, TopicView | None] = {}
        for node in range(self.cluster.size):
            status, _, doc, _ = await call_json(
                self.session, "GET", f"{self.cluster.url(node)}/v1/topics/{name}"
            )
            if status == 404:
                views[node] = None
            elif status == 200 and isinstance(doc, dict):
                views[node] = TopicView(len(doc["partitions"]), doc["configs"]["retention.ms"])
        return views

    async def delete(self) -> None:
        """Delete the topics that exist (after a schedule without violations)."""
        for name, views in self.side.final_topics.items():
            if any(v is not None for v in views.values()):
                await call_json(self.session, "DELETE", f"{self.cluster.url(0)}/v1/topics/{name}")


class Reassigner(SideActor[SideHistory]):
    """Changes the shape of the schedule's topic through random nodes during the faults, each
    call sent once: shrinks a partition to two replicas (a replica removed: its copy deleted)
    and grows it back (the new replica copies the partition as a follower), gives partitions a
    new order (a new preferred leader), sets the reassignment throttle before some moves and
    lifts it later, cancels moves it started, runs balances and decommission dry runs (never a
    real decommission: the three nodes hold partitions replicated three ways). After healing,
    `settle()` puts every partition back on every node, so that the final logs can be read
    from each."""

    replication_factor = 3  # the schedule's topic's, and what settle() restores
    timeline: list[str] | None = None  # where each call is noted (the schedule's fault log)

    def start(self) -> None:
        self._started: set[int] = set()  # partitions this actor set moving
        self._throttled = False
        self._tasks = [asyncio.create_task(self._run())]

    async def close(self) -> None:
        self.stop.set()
        await asyncio.gather(*self._tasks)

    def _note(self, text: str) -> None:
        if self.timeline is not None:
            self.timeline.append(f"{self.clock():6.2f}s {text}")

    async def _range(self, prefix: bytes) -> tuple[list[dict[str, Any]], int] | None:
        try:
            return await asyncio.to_thread(self.cluster.etcd.range, prefix)
        except (httpx.HTTPError, OSError, ValueError, KeyError):
            return None

    async def _states(self) -> tuple[dict[int, PartitionState], int] | None:
        """The topic's partition states in etcd and the revision they were read at (None when
        etcd did not answer)."""
        prefix = f"{ETCD_PREFIX}/partitions/{self.topic}/".encode()
        read = await self._range(prefix)
        if read is None:
            return None
        kvs, revision = read
        states = {
            int(base64.b64decode(kv["key"])[len(prefix) :]): PartitionState.parse(
                base64.b64decode(kv["value"]), int(kv["mod_revision"])
            )
            for kv in kvs
        }
        return states, revision

    async def _survey(self) -> None:
        """The cluster's size and its widest partition (the groups topic's, replicated on
        every node), for the checker's decommission rule."""
        self.side.nodes = self.cluster.size
        read = await self._range(f"{ETCD_PREFIX}/partitions/".encode())
        if read is not None:
            self.side.widest = max(
                (
                    len(set(PartitionState.parse(base64.b64decode(kv["value"]), 0).replicas))
                    for kv in read[0]
                ),
                default=0,
            )

    async def _run(self) -> None:
        await self._survey()
        for _ in range(self.rng.randint(*REASSIGN_OPS)):
            with contextlib.suppress(TimeoutError):
                # The pacing of the calls (ends early when told to stop).
                await asyncio.wait_for(self.stop.wait(), self.rng.uniform(0.3, 1.0))
            if self.stop.is_set():
                return
            await self._step()

    async def _step(self) -> None:
        read = await self._states()
        if read is None:
            return  # etcd did not answer: nothing to base a move on this turn
        states, revision = read
        idle = {p: s for p, s in sorted(states.items()) if not s.adding and not s.removing}
        full = [p for p, s in idle.items() if len(s.replicas) >= self.replication_factor]
        short = [p for p, s in idle.items() if len(s.replicas) < self.replication_factor]
        moving = sorted(p for p in self._started if p in states and p not in idle)
        weights = {
            "shrink": 3 if full else 0,
            "grow": 4 if short else 0,
            "reorder": 1 if idle else 0,
            "cancel": 3 if moving else 0,
            "balance": 1,
            "decommission": 1,
            "lift": 1 if self._throttled else 0,
        }
        kind = self.rng.choices(list(weights), weights=list(weights.values()))[0]
        if kind == "shrink":
            p = self.rng.choice(full)
            drop = self.rng.choice(idle[p].replicas)
            await self._move("shrink", p, tuple(r for r in idle[p].replicas if r != drop), revision)
        elif kind == "grow":
            p = self.rng.choice(short)
            missing = [n for n in range(self.cluster.size) if n not in idle[p].replicas]
            self.rng.shuffle(missing)
            if not self._throttled and self.rng.random() < 0.5:
                await self._throttle(self.rng.randint(*THROTTLE_BYTES_S))
            await self._move("grow", p, idle[p].replicas + tuple(missing), revision)
            if p in self._started and self.rng.random() < CANCEL_SHARE:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stop.wait(), self.rng.uniform(0.05, 0.3))
                await self._cancel(p)
        elif kind == "reorder":
            p = self.rng.choice(list(idle))
            replicas = idle[p].replicas
            turn = self.rng.randrange(1, len(replicas)) if len(replicas) > 1 else 0
            await self._move("reorder", p, replicas[turn:] + replicas[:turn], revision)
        elif kind == "cancel":
            await self._cancel(self.rng.choice(moving))
        elif kind == "balance":
            op = self._op("balance", None, (), revision)
            doc = await self._send(op, "POST", "/v1/cluster/balance")
            if op.outcome == "ok" and isinstance(doc, dict):
                for row in doc.get("moves", []):
                    target = tuple(row["replicas"])
                    if row["topic"] == self.topic and target != tuple(row["from"]):
                        op.moves[row["partition"]] = Move(target, None, None)
                self._started |= set(op.moves)
        elif kind == "decommission":
            node = self.rng.randrange(self.cluster.size)
            op = self._op("decommission", None, (node,), revision)
            await self._send(
                op, "POST", f"/v1/cluster/nodes/{node}/decommission", params={"dry_run": "true"}
            )
        else:
            await self._throttle(None)

    async def _cancel(self, p: int) -> None:
        read = await self._states()
        op = self._op("cancel", p, (), read[1] if read is not None else -1)
        await self._send(op, "DELETE", f"{REASSIGNMENTS}/{self.topic}/{p}")

    def _op(self, kind: str, p: int | None, target: tuple[int, ...], revision: int) -> ReassignOp:
        node = self.rng.randrange(self.cluster.size)
        return ReassignOp(kind, p, target, node, self.clock(), 0.0, revision)

    async def _send(
        self,
        op: ReassignOp,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        params: dict[str, str] | None = None,
    ) -> Any:
        status, content_type, doc, error = await call_json(
            self.session, method, self.cluster.url(op.node) + path, body, params
        )
        op.end = self.clock()
        op.status, op.content_type, op.error = status, content_type, error
        if isinstance(doc, dict) and status is not None and status >= 300:
            op.code = doc.get("code")
            op.detail = str(doc.get("detail", ""))[:160]
        self.side.reassign_ops.append(op)
        self._note(f"reassigner: {op}")
        return doc

    async def _move(self, kind: str, p: int, target: tuple[int, ...], revision: int) -> None:
        op = self._op(kind, p, target, revision)
        body = {
            "version": 1,
            "partitions": [{"topic": self.topic, "partition": p, "replicas": list(target)}],
        }
        doc = await self._send(op, "POST", REASSIGNMENTS, body)
        if op.outcome == "ok" and isinstance(doc, dict):
            for row in doc.get("reassignments", []):
                if row["topic"] == self.topic and row["partition"] == p:
                    # The target asked (an answer naming another is the checker's to find).
                    op.moves[p] = Move(target, tuple(row["adding"]), tuple(row["removing"]))
            self._started |= set(op.moves)

    async def _throttle(self, rate: int | None) -> ReassignOp:
        read = await self._states()
        op = self._op("throttle", None, (), read[1] if read is not None else -1)
        op.throttle = rate
        await self._send(op, "PUT", f"{REASSIGNMENTS}/throttle", {"bytes_per_second": rate})
        if op.outcome == "ok":
            self._throttled = rate is not None
        return op

    # -- after healing -----------------------------------------------------------------------

    async def _wait(
        self, partitions: int, done: Callable[[PartitionState], bool]
    ) -> dict[int, PartitionState] | None:
        """The topic's states once every partition's satisfies `done` (None after the bound)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SETTLE_WAIT_S
        while True:
            read = await self._states()
            if read is not None:
                states = read[0]
                if len(states) == partitions and all(done(s) for s in states.values()):
                    return states
            if loop.time() >= deadline:
                return None
            await asyncio.sleep(0.1)  # pause between reads, not a synchronisation

    async def settle(self, partitions: int) -> bool:
        """After healing: lift the throttle, wait (bounded) until no partition of the topic
        moves, put every partition on fewer nodes than the replication factor back on all of
        them (each plan sent until accepted, bounded) and wait until those moves complete.
        Records what it found (`side.settle`); True when every partition is back in full."""
        rf, size = self.replication_factor, self.cluster.size
        loop = asyncio.get_running_loop()
        notes: list[str] = []
        deadline = loop.time() + SETTLE_WAIT_S
        while (await self._throttle(None)).outcome != "ok" and loop.time() < deadline:
            await asyncio.sleep(0.2)  # retry pause
        if self._throttled:
            notes.append("the throttle could not be lifted")
        restored = 0
        idle = await self._wait(partitions, lambda s: not s.adding and not s.removing)
        if idle is None:
            notes.append(f"partitions still moving {SETTLE_WAIT_S:.0f} s after healing")
        else:
            for p, state in sorted(idle.items()):
                if len(set(state.replicas)) < rf:
                    restored += await self._restore(p, state, size)
            full = await self._wait(
                partitions,
                lambda s: not s.adding and not s.removing and len(set(s.replicas)) >= rf,
            )
            if full is None:
                notes.append(f"partitions not back on {rf} nodes within {SETTLE_WAIT_S:.0f} s")
        read = await self._states()
        final: dict[int, PartitionState | None] = dict.fromkeys(range(partitions))
        if read is not None:
            final.update(read[0])
        ok = all(
            s is not None and not s.adding and not s.removing and len(set(s.replicas)) >= rf
            for s in final.values()
        )
        self.side.settle = Settle(ok, rf, final, "; ".join(notes), restored)
        self._note(f"reassigner settled: {'ok' if ok else 'NOT settled'} {'; '.join(notes)}")
        return ok

    async def _restore(self, p: int, state: PartitionState, size: int) -> int:
        """Put partition p back on every node; 1 once a plan for it was accepted."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SETTLE_WAIT_S
        while loop.time() < deadline:
            read = await self._states()
            if read is not None:
                states, revision = read
                state = states.get(p, state)
                if state.adding or state.removing:
                    await asyncio.sleep(0.1)  # a late move: wait for it (bounded)
                    continue
                if len(set(state.replicas)) >= self.replication_factor:
                    return 0  # an earlier attempt without an answer landed
                missing = tuple(n for n in range(size) if n not in state.replicas)
                await self._move("restore", p, state.replicas + missing, revision)
                if self.side.reassign_ops[-1].outcome == "ok":
                    return 1
            await asyncio.sleep(0.2)  # retry pause: 421, 503, 409 or no answer
        return 0
