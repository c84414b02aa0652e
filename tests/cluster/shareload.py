"""The campaign's share group, run while the faults fire: consumers of one share group over the
schedule's topic acquire records through random nodes and do with each what a worker would:
accept it, release it (at once or after a delay), reject it, leave it until its lock lapses,
or keep it over a few calls renewing its lock, then accept it. After healing they accept
everything until the group is done with the final log (every share-partition's start offset
at its end). Each delivery and each acknowledgement, with its answer, goes into a
`ShareHistory`, which the checker judges (checker.py: the share-group rules)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tests.cluster.sideload import SideActor, call_json, failed_call

CONSUMERS = 3
LOCK_MS = 4_000  # outlives a coordinator's failover (a 2 s lease): locks held across it
DELIVERY_LIMIT = 3  # the lowest but one: records reach it and are archived
SESSION_TIMEOUT_MS = 10_000  # past any lock: a member's session never ends a lock in force
ACQUIRE_WAIT_MS = 300
MAX_RECORDS = 8
RELEASE_DELAY_MS = (50, 300)
# What a consumer does with a record it acquired, and the weights (drain: accept only).
ACTIONS = {"accept": 55, "release": 10, "reject": 5, "lapse": 12, "keep": 18}
KEEP_TURNS = (1, 3)  # later calls a kept record is renewed over, the last one accepting it
FINAL_READ_S = 30.0  # after healing, bound for the group to be done with the final log
DESCRIBE_EVERY_S = 0.25


@dataclass
class ShareDelivery:
    """One record an acquire answered 200 with."""

    member: str
    node: int
    start: float  # the campaign's clock when the acquire was sent, and when it was answered
    end: float
    partition: int
    offset: int
    key: str | None
    value: Any
    delivery_count: int
    lock_expires_at: int  # ms since the epoch, the coordinator's clock
    token: str

    def __str__(self) -> str:
        return (
            f"p{self.partition} offset {self.offset} delivery {self.delivery_count} to "
            f"{self.member} through node {self.node} at {self.start:.2f}-{self.end:.2f}s "
            f"(lock to {self.lock_expires_at})"
        )


@dataclass
class ShareAck:
    """One acknowledgement of one token, sent once in a request through one node."""

    member: str
    node: int
    kind: str  # accept | release | reject | renew
    token: str
    partition: int
    offset: int
    delivery_count: int
    start: float
    end: float
    wall_start: float  # time.time() when sent (the nodes' clock)
    status: str = "unknown"  # ok | refused | unknown (no answer, or one that promises nothing)
    code: str | None = None  # a refusal's code
    lock_expires_at: int | None = None  # a renewal's new deadline

    def __str__(self) -> str:
        answer = self.status + (f" {self.code}" if self.code else "")
        return (
            f"{self.kind} of p{self.partition} offset {self.offset} delivery "
            f"{self.delivery_count} by {self.member} through node {self.node} at "
            f"{self.start:.2f}-{self.end:.2f}s: {answer}"
        )


@dataclass
class ShareLeave:
    """A member's leave, sent once through one node: every lock it holds ends."""

    member: str
    node: int
    start: float
    wall_start: float  # time.time() when sent (the nodes' clock)
    status: int | None = None  # None: no answer


@dataclass
class ShareHistory:
    group: str = ""  # empty: no share group ran
    lock_ms: int = LOCK_MS
    limit: int = DELIVERY_LIMIT
    deliveries: list[ShareDelivery] = field(default_factory=list)
    acks: list[ShareAck] = field(default_factory=list)
    leaves: list[ShareLeave] = field(default_factory=list)
    joins: int = 0
    left_to_lapse: int = 0
    errors: Counter[str] = field(default_factory=Counter)  # failed calls by call and answer
    # After healing: each share-partition's start offset as the group's describe said last
    # (once done with the final log, or at the bound; None: never answered, `note` says why).
    final_starts: dict[int, int] | None = None
    drained_in: float = 0.0  # seconds from the final log end known to the group done
    note: str = ""


@dataclass
class _Kept:
    delivery: ShareDelivery
    turns: int


class ShareConsumers(SideActor[ShareHistory]):
    """CONSUMERS members of the schedule's share group, each acquiring and acknowledging
    through random nodes until told to stop; `drain` makes them accept everything."""

    draining = False  # its consumers accept whatever they acquire
    leaving = False  # each leaves the group once (releasing what it holds) and joins again

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._run())]

    async def close(self) -> None:
        """Stop the consumers (each leaves the group) and wait for them."""
        self.stop.set()
        results = await asyncio.gather(*self._tasks, return_exceptions=True)
        for result in results:
            if isinstance(result, Exception):
                raise result

    def _url(self, path: str = "") -> tuple[int, str]:
        node = self.rng.randrange(self.cluster.size)
        return node, f"{self.cluster.url(node)}/v1/share-groups/{self.side.group}{path}"

    async def _run(self) -> None:
        configs = {
            "share.auto.offset.reset": "earliest",
            "share.record.lock.duration.ms": self.side.lock_ms,
            "share.delivery.count.limit": self.side.limit,
        }
        while not self.stop.is_set():
            _, url = self._url("/configs")
            status, _, _, error = await call_json(self.session, "PUT", url, {"configs": configs})
            if status == 200:
                break
            self.side.errors[failed_call("configs", status, error)] += 1
            await asyncio.sleep(0.1)  # pause between retries, not a synchronisation
        else:
            return
        await asyncio.gather(*(self._consumer(f"c{i}") for i in range(CONSUMERS)))

    async def _consumer(self, member: str) -> None:
        joined = False
        kept: list[_Kept] = []
        left = False
        while not self.stop.is_set():
            if self.leaving and not left:
                await self._leave(member)
                kept.clear()
                left, joined = True, False
            elif not joined:
                joined = await self._join(member)
            else:
                joined = await self._turn(member, kept)
            await asyncio.sleep(self.rng.uniform(0.02, 0.1))  # pacing between calls
        if joined:
            await self._leave(member)

    async def _leave(self, member: str) -> None:
        """Leave the group: what the member holds is released at once."""
        node, url = self._url(f"/members/{member}")
        leave = ShareLeave(member, node, self.clock(), time.time())
        self.side.leaves.append(leave)
        leave.status, _, _, _ = await call_json(self.session, "DELETE", url)

    async def _join(self, member: str) -> bool:
        """Join with the member's own id (joining again keeps what it holds)."""
        _, url = self._url("/members")
        body = {
            "topics": [self.topic],
            "member_id": member,
            "session_timeout_ms": SESSION_TIMEOUT_MS,
        }
        status, _, _, error = await call_json(self.session, "POST", url, body)
        if status == 201:
            self.side.joins += 1
            return True
        self.side.errors[failed_call("join", status, error)] += 1
        return False

    async def _turn(self, member: str, kept: list[_Kept]) -> bool:
        """One acquire, then the acknowledgements of what it brought and of the records kept
        from earlier turns; False when the group no longer knows the member."""
        got = await self._acquire(member)
        if got is None:
            return False
        due: list[tuple[ShareDelivery, str, int]] = []  # (delivery, type, delay_ms)
        still = []
        for k in kept:
            k.turns -= 1
            if k.turns <= 0 or self.draining:
                due.append((k.delivery, "accept", 0))
            else:
                due.append((k.delivery, "renew", 0))
                still.append(k)
        kept[:] = still
        for d in got:
            action = "accept" if self.draining else self._action()
            if action == "keep":
                kept.append(_Kept(d, self.rng.randint(*KEEP_TURNS)))
            elif action == "lapse":
                self.side.left_to_lapse += 1
            elif action == "release" and self.rng.random() < 0.5:
                due.append((d, "release", self.rng.randint(*RELEASE_DELAY_MS)))
            else:
                due.append((d, action, 0))
        if due:
            cut = self.rng.randint(1, len(due))
            for part in (due[:cut], due[cut:]):
                if part and not await self._acknowledge(member, part):
                    return False
        return True

    def _action(self) -> str:
        return self.rng.choices(list(ACTIONS), weights=list(ACTIONS.values()))[0]

    async def _acquire(self, member: str) -> list[ShareDelivery] | None:
        node, url = self._url(f"/members/{member}/acquire")
        params = {
            "max_records": str(self.rng.randint(1, MAX_RECORDS)),
            "timeout_ms": str(ACQUIRE_WAIT_MS),
        }
        start = self.clock()
        status, _, doc, error = await call_json(self.session, "POST", url, None, params)
        if status != 200 or not isinstance(doc, dict):
            self.side.errors[failed_call("acquire", status, error)] += 1
            return None if status == 404 else []
        end = self.clock()
        got = [
            ShareDelivery(
                member,
                node,
                start,
                end,
                r["partition"],
                r["offset"],
                r["key"],
                r["value"],
                r["delivery_count"],
                r["lock_expires_at"],
                r["token"],
            )
            for r in doc["records"]
            if r["topic"] == self.topic
        ]
        self.side.deliveries += got
        return got

    async def _acknowledge(
        self, member: str, due: list[tuple[ShareDelivery, str, int]], again: bool = True
    ) -> bool:
        """One acknowledge request; an accept without an answer is sent once more, through
        another node. False when the group no longer knows the member."""
        node, url = self._url(f"/members/{member}/acknowledge")
        items: list[dict[str, Any]] = []
        acks = []
        for d, kind, delay in due:
            item: dict[str, Any] = {"token": d.token, "type": kind}
            if delay:
                item["delay_ms"] = delay
            items.append(item)
            acks.append(
                ShareAck(
                    member,
                    node,
                    kind,
                    d.token,
                    d.partition,
                    d.offset,
                    d.delivery_count,
                    self.clock(),
                    0.0,
                    time.time(),
                )
            )
        status, _, doc, error = await call_json(
            self.session, "POST", url, {"acknowledgements": items}
        )
        end = self.clock()
        for ack in acks:
            ack.end = end
        self.side.acks += acks
        if status == 200 and isinstance(doc, dict):
            for ack, result in zip(acks, doc["results"], strict=True):
                ack.status = result["status"]
                if ack.status == "refused":
                    ack.code = result["problem"]["code"]
                ack.lock_expires_at = result.get("lock_expires_at")
            return True
        self.side.errors[failed_call("acknowledge", status, error)] += 1
        if status == 404:  # the member is unknown: nothing of the request took effect
            for ack in acks:
                ack.status, ack.code = "refused", "UNKNOWN_MEMBER"
            return False
        retry = [(d, kind, 0) for d, kind, _ in due if kind == "accept"]
        if again and retry:
            return await self._acknowledge(member, retry, again=False)
        return True

    async def drain(self, final_end: dict[int, int]) -> None:
        """After healing: each consumer leaves the group and joins again, so that what it
        holds (records it left to lapse, acquires whose answers were lost) comes again at once;
        they accept everything until every share-partition's start offset reached the final
        log end (read from the group's describe), then leave."""
        self.draining = self.leaving = True
        self.side.note = "no describe answered"
        loop = asyncio.get_running_loop()
        began = loop.time()
        deadline = began + FINAL_READ_S
        while loop.time() < deadline and not self.stop.is_set() and not self._tasks[0].done():
            _, url = self._url()
            status, _, doc, error = await call_json(self.session, "GET", url)
            if status == 200 and isinstance(doc, dict):
                starts = {
                    row["partition"]: row["start_offset"]
                    for row in doc["partitions"]
                    if row["topic"] == self.topic
                }
                self.side.final_starts = starts
                self.side.note = f"start offsets {starts}, lag {doc['lag']}"
                if all(starts.get(p, -1) >= end for p, end in final_end.items()):
                    self.side.drained_in = loop.time() - began
                    break
            else:
                self.side.note = f"describe: {status or error} {doc}"
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), DESCRIBE_EVERY_S)
        await self.close()

    async def delete(self) -> None:
        """Forget the group (a schedule without violations: its topic goes too)."""
        _, url = self._url()
        await call_json(self.session, "DELETE", url)
