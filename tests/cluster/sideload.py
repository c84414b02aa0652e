"""The campaign's operations besides produce and fetch, run while the faults fire: consumer
group members (join, fetch, commit) over the schedule's topic, and topic changes (creating
topics, changing a config). What they did and what the cluster shows once healed goes into a
`SideHistory`, which the checker judges (checker.py: the group and topic rules)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from tests.cluster.harness import Cluster

PROBLEM_JSON = "application/problem+json"
CALL_TIMEOUT_S = 4.0  # the client's wait for any answer (a paused node never answers)
SESSION_TIMEOUT_MS = 10_000  # a member whose calls all fail this long is dropped and rejoins
GROUP_FETCH_WAIT_MS = 200
MEMBERS = 2
TOPIC_OPS = 5  # topic creations and config changes per schedule, at most
FINAL_READ_S = 30.0  # after healing, bound for the nodes to agree on what the topics are
RETENTION_MS = 3_600_000  # the config the changes set (each change a new, larger value)


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


@dataclass
class TopicOp:
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

    @property
    def outcome(self) -> str:
        """ok (2xx), refused (4xx: surely not done) or unknown (5xx or no answer)."""
        if self.status is None or self.status >= 500:
            return "unknown"
        return "ok" if self.status < 300 else "refused"

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
    anomalies: list[tuple[str, str]] = field(default_factory=list)  # (kind, detail)


async def json_request(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    body: dict[str, Any] | None = None,
    params: dict[str, str] | None = None,
    timeout_s: float = CALL_TIMEOUT_S,
) -> tuple[int | None, str | None, bytes, str | None]:
    """One call with a JSON body: (status, content type, answer body, and when there was no
    answer, the error that stopped it)."""
    try:
        async with session.request(
            method,
            url,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            params=params,
            timeout=aiohttp.ClientTimeout(total=timeout_s),
        ) as response:
            return response.status, response.content_type, await response.read(), None
    except (aiohttp.ClientError, TimeoutError) as exc:
        return None, None, b"", f"{type(exc).__name__}: {exc}"


async def _call(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    body: dict[str, Any] | None = None,
    params: dict[str, str] | None = None,
) -> tuple[int | None, str | None, Any, str | None]:
    """(status, content type, JSON answer or None, error name when there was no answer)."""
    status, content_type, raw, error = await json_request(session, method, url, body, params)
    doc: Any = None
    with contextlib.suppress(ValueError):
        doc = json.loads(raw) if raw else None
    return status, content_type, doc, None if error is None else error.split(":", 1)[0]


def failed_call(call: str, status: int | None, error: str | None) -> str:
    """How a group call failed, for the report: its answer's status, or why there was none."""
    return f"{call} {status}" if status is not None else f"{call} no answer ({error})"


class SideActor:
    """What the side load's actors act with: the cluster, the history they record into, their
    random source and HTTP session, the schedule's topic and clock; `stop` ends them."""

    def __init__(
        self,
        cluster: Cluster,
        side: SideHistory,
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


class GroupMembers(SideActor):
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
                status, _, doc, error = await _call(
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
            await _call(self.session, "DELETE", f"{self._base()}/{member}")

    async def _fetch_and_commit(self, member: str, generation: int) -> tuple[str | None, int]:
        """One fetch, then one commit of what was delivered; (member or None to join again,
        the generation the fetch answered with)."""
        status, _, doc, error = await _call(
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
        status, _, doc, error = await _call(self.session, "POST", f"{self._base()}/{member}/commit")
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
            status, _, doc, error = await _call(
                self.session, "GET", f"{self.cluster.url(node)}/v1/groups/{self.side.group}"
            )
            if status == 200 and isinstance(doc, dict):
                committed: dict[int, int | None] = dict.fromkeys(range(partitions))
                for row in doc["partitions"]:
                    if row["topic"] == self.topic:
                        committed[row["partition"]] = row["committed_offset"]
                self.side.final_committed = committed
                return
            if status == 404 and not self.side.commits:
                self.side.final_committed = dict.fromkeys(range(partitions))
                return  # no commit ever succeeded: the group may never have been stored
            last = f"{status or error} {doc}"
            await asyncio.sleep(0.1)  # pause between retries, not a synchronisation
        self.side.anomalies.append(
            ("not-live", f"group {self.side.group} unreadable after healing: {last}")
        )


class TopicAdmin(SideActor):
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
        status, content_type, doc, error = await _call(
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
            status, _, doc, _ = await _call(
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
                await _call(self.session, "DELETE", f"{self.cluster.url(0)}/v1/topics/{name}")
