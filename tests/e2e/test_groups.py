"""Consumer groups against a real gateway process: members sharing partitions through leaves,
joins, expiries and crashes; committed offsets across a SIGKILL; concurrent commits.

Synchronisation is by condition (an asyncio.Condition over what was delivered, or polling the
group's description with a deadline), never by sleeping a fixed time.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp
import pytest

from tests.e2e.conftest import Server, start_server

T = TypeVar("T")
DEADLINE_S = 15.0
PARTITIONS = 6


class GroupError(Exception):
    """A group request answered with an error status."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        super().__init__(f"{status} {problem.get('code')}: {problem.get('detail')}")
        self.status = status
        self.code = problem.get("code")


async def call(http: aiohttp.ClientSession, method: str, path: str, **kwargs: Any) -> Any:
    async with http.request(method, path, **kwargs) as response:
        body = await response.json(content_type=None) if response.status != 204 else None
        if response.status >= 400:
            raise GroupError(response.status, body or {})
        return body


async def create_topic(http: aiohttp.ClientSession, name: str, partitions: int) -> None:
    await call(http, "POST", "/v1/topics", json={"name": name, "partitions": partitions})


async def produce(http: aiohttp.ClientSession, topic: str, values: range, partitions: int) -> None:
    """Distinct integer values, value v to partition v % partitions, in requests of 100."""
    for start in range(values.start, values.stop, 100):
        chunk = range(start, min(start + 100, values.stop))
        records = [{"value": v, "partition": v % partitions} for v in chunk]
        await call(http, "POST", f"/v1/topics/{topic}/records", json={"records": records})


async def describe(http: aiohttp.ClientSession, group: str) -> dict[str, Any]:
    doc: dict[str, Any] = await call(http, "GET", f"/v1/groups/{group}")
    return doc


async def until(probe: Callable[[], Awaitable[T | None]], what: str) -> T:
    """Poll `probe` until it returns something other than None; fail after DEADLINE_S."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while True:
        found = await probe()
        if found is not None:
            return found
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def committed(doc: dict[str, Any]) -> dict[tuple[str, int], int | None]:
    return {(row["topic"], row["partition"]): row["committed_offset"] for row in doc["partitions"]}


@dataclass
class Tally:
    """Every record processed by any member, in order, and a condition to wait on its size."""

    processed: list[tuple[str, int, int, int]] = field(default_factory=list)  # member, p, o, v
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def add(self, member_id: str, records: list[dict[str, Any]]) -> None:
        self.processed.extend((member_id, r["partition"], r["offset"], r["value"]) for r in records)
        async with self.changed:
            self.changed.notify_all()

    async def reach(self, predicate: Callable[[], bool], what: str) -> None:
        async with self.changed:
            try:
                await asyncio.wait_for(self.changed.wait_for(predicate), DEADLINE_S)
            except TimeoutError:
                raise AssertionError(f"timed out waiting for {what}") from None

    def values(self) -> collections.Counter[int]:
        return collections.Counter(v for _, _, _, v in self.processed)

    def distinct(self) -> int:
        return len({v for _, _, _, v in self.processed})


@dataclass
class Member:
    """One group member as a client sees it."""

    http: aiohttp.ClientSession
    group: str
    member_id: str
    joined: dict[str, Any]

    @property
    def path(self) -> str:
        return f"/v1/groups/{self.group}/members/{self.member_id}"

    async def fetch(self, timeout_ms: int = 100, max_records: int = 5) -> list[dict[str, Any]]:
        params = {"timeout_ms": timeout_ms, "max_records": max_records}
        answer = await call(self.http, "GET", f"{self.path}/records", params=params)
        records: list[dict[str, Any]] = answer["records"]
        return records

    async def commit(self, offsets: list[dict[str, Any]] | None = None, **extra: Any) -> Any:
        if offsets is None and not extra:
            return await call(self.http, "POST", f"{self.path}/commit")
        body = {**({"offsets": offsets} if offsets is not None else {}), **extra}
        return await call(self.http, "POST", f"{self.path}/commit", json=body)

    async def leave(self) -> None:
        await call(self.http, "DELETE", self.path)


async def join(http: aiohttp.ClientSession, group: str, topic: str, **options: Any) -> Member:
    body = {"topics": [topic], "auto_offset_reset": "earliest", **options}
    joined = await call(http, "POST", f"/v1/groups/{group}/members", json=body)
    return Member(http, group, joined["member_id"], joined)


async def poll(member: Member, tally: Tally, stop: asyncio.Event, manual: bool = False) -> None:
    """A well-behaved consumer: fetch, process every record, (commit,) until told to stop.

    It stops only between batches, so everything it was delivered has been processed."""
    while not stop.is_set():
        records = await member.fetch()
        await tally.add(member.member_id, records)
        if manual and records:
            await member.commit()


async def drained(members: list[Member]) -> None:
    """A last fetch per member commits what the previous one delivered; it must bring nothing."""
    for member in members:
        assert await member.fetch(timeout_ms=0) == []


def fully_committed(doc: dict[str, Any], per_partition: int) -> None:
    assert doc["lag"] == 0
    assert [row["committed_offset"] for row in doc["partitions"]] == [per_partition] * len(
        doc["partitions"]
    )
    assert all(row["log_end_offset"] == per_partition for row in doc["partitions"])


@pytest.mark.parametrize("assignor", ["range", "roundrobin"])
async def test_members_come_and_go_and_every_record_is_delivered_once(
    server: Server, assignor: str
) -> None:
    """Three members share six partitions; one leaves, another joins, records keep coming."""
    total = 1200
    async with aiohttp.ClientSession(server.url) as http:
        await create_topic(http, "t", PARTITIONS)
        await produce(http, "t", range(total // 2), PARTITIONS)
        members = [await join(http, "g", "t", assignor=assignor) for _ in range(3)]
        first = await describe(http, "g")
        assert first["assignor"] == assignor and first["state"] == "Stable"
        assert sorted(len(m["assignment"][0]["partitions"]) for m in first["members"]) == [2, 2, 2]
        tally = Tally()
        stops = [asyncio.Event() for _ in members]
        tasks = [
            asyncio.create_task(poll(m, tally, s)) for m, s in zip(members, stops, strict=True)
        ]

        await tally.reach(lambda: len(tally.processed) >= total // 6, "a sixth delivered")
        stops[0].set()
        await tasks[0]
        await members[0].leave()  # auto_commit: what it processed is committed as it goes

        await tally.reach(lambda: len(tally.processed) >= total // 3, "a third delivered")
        newcomer = await join(http, "g", "t")
        assert newcomer.joined["assignor"] == assignor
        members.append(newcomer)
        stops.append(asyncio.Event())
        tasks.append(asyncio.create_task(poll(newcomer, tally, stops[-1])))
        await produce(http, "t", range(total // 2, total), PARTITIONS)

        await tally.reach(lambda: tally.distinct() == total, "every record delivered")
        for stop in stops:
            stop.set()
        await asyncio.gather(*tasks)

        counts = tally.values()
        assert sorted(counts) == list(range(total))
        assert max(counts.values()) == 1, "a record was delivered twice"
        assert {member for member, *_ in tally.processed} == {m.member_id for m in members}
        await drained(members[1:])
        doc = await describe(http, "g")
        assert doc["state"] == "Stable"
        assert {m["member_id"] for m in doc["members"]} == {m.member_id for m in members[1:]}
        assert {row["owner"] for row in doc["partitions"]} <= {m.member_id for m in members[1:]}
        fully_committed(doc, total // PARTITIONS)

        for member in members[1:]:
            await member.leave()
        empty = await describe(http, "g")
        assert empty["state"] == "Empty" and empty["members"] == []
        fully_committed(empty, total // PARTITIONS)


async def test_expired_and_crashed_members_lose_nothing(server: Server) -> None:
    """One member stops polling and expires, one dies halfway through a batch, one joins late:
    every record is processed, and the duplicates are exactly what the two failed members had
    processed without committing."""
    total = 600
    async with aiohttp.ClientSession(server.url) as http:
        await create_topic(http, "t", PARTITIONS)
        await produce(http, "t", range(total), PARTITIONS)
        options = {"session_timeout_ms": 1000}
        auto = await join(http, "g", "t", **options)
        manual = await join(http, "g", "t", auto_commit=False, **options)
        stalled = await join(http, "g", "t", **options)
        crashing = await join(http, "g", "t", **options)
        tally = Tally()
        stop = asyncio.Event()
        survivors = [
            asyncio.create_task(poll(auto, tally, stop)),
            asyncio.create_task(poll(manual, tally, stop, manual=True)),
        ]

        async def fail(member: Member, keep: Callable[[int], int]) -> list[int]:
            """Process two batches (committed by the next fetch), then a part of the third,
            then nothing more: what it processed of the third is what gets redelivered."""
            batches = 0
            while True:
                records = await member.fetch()
                if not records:
                    continue
                batches += 1
                if batches == 3:
                    done = records[: keep(len(records))]
                    await tally.add(member.member_id, done)
                    return [r["value"] for r in done]
                await tally.add(member.member_id, records)

        uncommitted = await fail(stalled, lambda n: n) + await fail(crashing, lambda n: n // 2)
        assert uncommitted, "the failed members were delivered nothing"

        async def both_expired() -> dict[str, Any] | None:
            doc = await describe(http, "g")
            ids = {m["member_id"] for m in doc["members"]}
            return doc if not ids & {stalled.member_id, crashing.member_id} else None

        after = await until(both_expired, "the stalled and the crashed member to expire")
        assert {m["member_id"] for m in after["members"]} == {auto.member_id, manual.member_id}

        late = await join(http, "g", "t", **options)
        survivors.append(asyncio.create_task(poll(late, tally, stop)))
        await tally.reach(lambda: tally.distinct() == total, "every record delivered")
        stop.set()
        await asyncio.gather(*survivors)

        counts = tally.values()
        assert sorted(counts) == list(range(total)), "a record was lost"
        duplicates = sorted(v for v, n in counts.items() for _ in range(n - 1))
        print(f"\n{len(duplicates)} duplicates of {total} records after an expiry and a crash")
        assert duplicates == sorted(uncommitted)
        await drained([auto, late])  # the manual member committed after each batch
        fully_committed(await describe(http, "g"), total // PARTITIONS)


async def test_committed_offsets_and_members_survive_sigkill(server: Server) -> None:
    """Commit, deliver more without committing, kill -9, restart on the same data: the offsets
    are there, and the member carries on with its old id from the committed offsets."""
    total = 90
    async with aiohttp.ClientSession(server.url) as http:
        await create_topic(http, "t", 3)
        await produce(http, "t", range(total), 3)
        member = await join(http, "g", "t", auto_commit=False, session_timeout_ms=60_000)
        first = await member.fetch(max_records=20)
        assert len(first) == 20
        await member.commit()
        second = await member.fetch(max_records=20)
        assert len(second) == 20
        await call(http, "PUT", "/v1/groups/idle/offsets", json={"topic": "t", "to": 7})
        before = await describe(http, "g")
        before_idle = await describe(http, "idle")
        assert sum(o or 0 for o in committed(before).values()) == 20
    server.kill()

    again = start_server(server.data_dir)
    try:
        async with aiohttp.ClientSession(again.url) as http:
            after = await describe(http, "g")
            assert committed(after) == committed(before)
            assert after["members"] == before["members"]
            assert after["generation"] == before["generation"]
            assert committed(await describe(http, "idle")) == committed(before_idle)
            member.http = http
            tally = Tally()
            await tally.add(member.member_id, first + second)
            while tally.distinct() < total:
                records = await member.fetch(timeout_ms=0, max_records=20)
                assert records, "the member stopped short of the end after the restart"
                await tally.add(member.member_id, records)
                await member.commit()
            counts = tally.values()
            assert sorted(counts) == list(range(total))
            duplicates = sorted(v for v, n in counts.items() for _ in range(n - 1))
            assert duplicates == sorted(r["value"] for r in second)
            fully_committed(await describe(http, "g"), total // 3)
    finally:
        assert again.stop() == 0


async def test_members_consuming_through_a_sigkill_lose_nothing(server: Server) -> None:
    """Three auto-commit members are fetching when the gateway is killed; after the restart
    they go on with their old ids. Auto-commits reach the log within a second, so much may
    come again, but nothing is lost."""
    total = 1200
    async with aiohttp.ClientSession(server.url) as http:
        await create_topic(http, "t", PARTITIONS)
        await produce(http, "t", range(total), PARTITIONS)
        members = [await join(http, "g", "t", session_timeout_ms=60_000) for _ in range(3)]
        tally = Tally()
        stop = asyncio.Event()

        async def consume(member: Member) -> None:
            while not stop.is_set():
                try:
                    records = await member.fetch()
                except aiohttp.ClientError:
                    await asyncio.sleep(0.01)  # the gateway is down: retry (at its new address)
                    continue
                await tally.add(member.member_id, records)

        tasks = [asyncio.create_task(consume(m)) for m in members]
        await tally.reach(lambda: len(tally.processed) >= total // 2, "half delivered")
        server.kill()
        again = start_server(server.data_dir)
        try:
            async with aiohttp.ClientSession(again.url) as fresh:
                for member in members:
                    member.http = fresh
                await tally.reach(lambda: tally.distinct() == total, "every record delivered")
                stop.set()
                await asyncio.gather(*tasks)
                counts = tally.values()
                assert sorted(counts) == list(range(total)), "a record was lost"
                duplicates = sum(n - 1 for n in counts.values())
                print(f"\n{duplicates} duplicates of {total} records across a SIGKILL")
                await drained(members)
                fully_committed(await describe(fresh, "g"), total // PARTITIONS)
        finally:
            assert again.stop() == 0


async def test_concurrent_commits_all_land(server: Server) -> None:
    """Three members commit at once, each repeatedly and in parallel bursts, while others try
    to commit partitions they do not own: describe shows every owner's last commit."""
    per_partition = 10
    async with aiohttp.ClientSession(server.url) as http:
        await create_topic(http, "t", PARTITIONS)
        await produce(http, "t", range(per_partition * PARTITIONS), PARTITIONS)
        members = [await join(http, "g", "t", auto_commit=False) for _ in range(3)]
        doc = await describe(http, "g")
        assert doc["state"] == "Stable"
        owner = {row["partition"]: row["owner"] for row in doc["partitions"]}
        by_id = {m.member_id: m for m in members}
        mine = {
            m.member_id: sorted(p for p, o in owner.items() if o == m.member_id) for m in members
        }
        final = {p: per_partition - p for p in range(PARTITIONS)}

        async def burst(member: Member) -> None:
            """One request per partition, all in flight together."""
            answers = await asyncio.gather(
                *(
                    member.commit([{"topic": "t", "partition": p, "offset": 1}])
                    for p in mine[member.member_id]
                )
            )
            assert all(a["offsets"][0]["offset"] == 1 for a in answers)

        async def repeated(member: Member) -> None:
            """Commit after commit, the last one at each partition's final offset."""
            for offset in range(2, per_partition + 1):
                offsets = [
                    {"topic": "t", "partition": p, "offset": min(offset, final[p])}
                    for p in mine[member.member_id]
                ]
                answer = await member.commit(offsets, generation=doc["generation"])
                assert answer["offsets"] == offsets

        async def trespass(member: Member) -> None:
            for p, o in owner.items():
                if o != member.member_id:
                    with pytest.raises(GroupError) as refused:
                        await member.commit([{"topic": "t", "partition": p, "offset": 0}])
                    assert refused.value.code == "PARTITION_NOT_ASSIGNED"

        await asyncio.gather(*(burst(m) for m in members), *(trespass(m) for m in members))
        assert set(committed(await describe(http, "g")).values()) == {1}
        await asyncio.gather(*(repeated(m) for m in members), *(trespass(m) for m in members))

        doc = await describe(http, "g")
        assert {row["partition"]: row["committed_offset"] for row in doc["partitions"]} == final
        assert {row["partition"]: row["lag"] for row in doc["partitions"]} == {
            p: per_partition - final[p] for p in range(PARTITIONS)
        }
        assert doc["lag"] == sum(per_partition - o for o in final.values())
        assert {row["partition"]: row["owner"] for row in doc["partitions"]} == owner
        assert set(by_id) == {m["member_id"] for m in doc["members"]}
