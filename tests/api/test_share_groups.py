"""Share groups over HTTP, in process: join, acquire under locks, acknowledge one record at a
time by its token or records by offset ranges (accept, release, reject, renew), lock expiry and
the delivery limit, long-poll, leave, expiry, reset, delete, a restart, and every kind of bad
input."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from groups.offsets_log import CoordinatorLog
from groups.share import coordinator as share_coordinator
from groups.share.partition_state import AckType
from groups.share.state_topic import STATE_TOPIC, partition_key
from replication.errors import RequestTimedOut
from tests.api.support import (
    Client,
    Start,
    create_topic,
    gateway,
    metrics,
    problem,
    produce,
    wait_until,
)

G = "/v1/share-groups/q"
NDJSON = "application/x-ndjson"


class Clock:
    """The share coordinator's wall clock, moved by the test instead of waited for."""

    def __init__(self) -> None:
        self.now = 1_800_000_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    fake = Clock()
    monkeypatch.setattr(share_coordinator, "now_ms", fake)
    yield fake


async def configure(client: Client, **configs: object) -> dict[str, Any]:
    names = {
        "reset": "share.auto.offset.reset",
        "lock_ms": "share.record.lock.duration.ms",
        "limit": "share.delivery.count.limit",
        "locks": "share.partition.max.record.locks",
    }
    body = {"configs": {names[k]: v for k, v in configs.items()}}
    resp = await client.put(f"{G}/configs", json=body)
    assert resp.status == 200, await resp.text()
    doc: dict[str, Any] = await resp.json()
    return doc


async def join(client: Client, topics: tuple[str, ...] = ("t",), **fields: Any) -> str:
    resp = await client.post(f"{G}/members", json={"topics": list(topics), **fields})
    assert resp.status == 201, await resp.text()
    member: str = (await resp.json())["member_id"]
    return member


async def acquire(client: Client, member: str, **params: object) -> list[dict[str, Any]]:
    query = {"max_records": "100", **{k: str(v) for k, v in params.items()}}
    resp = await client.post(f"{G}/members/{member}/acquire", params=query)
    assert resp.status == 200, await resp.text()
    records: list[dict[str, Any]] = (await resp.json())["records"]
    return records


async def ack(
    client: Client, member: str, *items: tuple[str, str] | tuple[str, str, int]
) -> list[dict[str, Any]]:
    acks = []
    for item in items:
        doc: dict[str, object] = {"token": item[0], "type": item[1]}
        if len(item) == 3:
            doc["delay_ms"] = item[2]
        acks.append(doc)
    resp = await client.post(f"{G}/members/{member}/acknowledge", json={"acknowledgements": acks})
    assert resp.status == 200, await resp.text()
    results: list[dict[str, Any]] = (await resp.json())["results"]
    return results


async def ack_ranges(client: Client, member: str, *items: dict[str, Any]) -> list[dict[str, Any]]:
    """Acknowledgements of offset ranges of partition t-0 (unless an item names another)."""
    acks = [{"topic": "t", "partition": 0, **item} for item in items]
    resp = await client.post(f"{G}/members/{member}/acknowledge", json={"acknowledgements": acks})
    assert resp.status == 200, await resp.text()
    results: list[dict[str, Any]] = (await resp.json())["results"]
    return results


def span(first: int, last: int, kind: str = "accept", **more: Any) -> dict[str, Any]:
    return {"first_offset": first, "last_offset": last, "type": kind, **more}


def codes(results: list[dict[str, Any]]) -> list[str]:
    return [r["problem"]["code"] if r["status"] == "refused" else "ok" for r in results]


async def describe(client: Client) -> dict[str, Any]:
    resp = await client.get(G)
    assert resp.status == 200, await resp.text()
    doc: dict[str, Any] = await resp.json()
    return doc


async def setup(client: Client, records: int = 5, partitions: int = 1, **configs: object) -> str:
    await create_topic(client, "t", partitions)
    await configure(client, reset="earliest", **configs)
    for p in range(partitions if records else 0):
        await produce(client, [{"value": i} for i in range(records)], partition=p)
    return await join(client)


# -- the happy paths ------------------------------------------------------------------------------


async def test_records_are_acquired_once_and_accepted_records_never_come_again(
    client: Client, clock: Clock
) -> None:
    member = await setup(client, 3)
    got = await acquire(client, member)
    assert [(r["offset"], r["value"], r["delivery_count"]) for r in got] == [
        (0, 0, 1),
        (1, 1, 1),
        (2, 2, 1),
    ]
    assert {r["lock_expires_at"] for r in got} == {clock.now + 30_000}
    assert got[0]["token"] == "t:0:0:1" and got[0]["topic"] == "t" and got[0]["partition"] == 0
    assert await acquire(client, member) == []  # all held
    assert codes(await ack(client, member, *[(r["token"], "accept") for r in got])) == ["ok"] * 3
    clock.now += 60_000  # well past every lock
    assert await acquire(client, member) == []
    doc = await describe(client)
    assert doc["partitions"] == [
        {
            "topic": "t",
            "partition": 0,
            "start_offset": 3,
            "end_offset": 3,
            "high_watermark": 3,
            "in_flight": 0,
            "acquired": 0,
            "available": 0,
            "acknowledged": 0,
            "archived": 0,
            "lag": 0,
        }
    ]
    assert doc["state"] == "Stable" and doc["lag"] == 0


async def test_many_members_share_one_partition_each_record_to_one_of_them(
    client: Client, clock: Clock
) -> None:
    await setup(client, 6)
    members = [await join(client) for _ in range(3)]
    taken = [await acquire(client, m, max_records=2) for m in members]
    offsets = [[r["offset"] for r in records] for records in taken]
    assert offsets == [[0, 1], [2, 3], [4, 5]]
    assert codes(await ack(client, members[0], (taken[1][0]["token"], "accept"))) == ["NOT_HOLDER"]


async def test_a_released_record_comes_again_with_its_delivery_counted(
    client: Client, clock: Clock
) -> None:
    member = await setup(client, 2)
    first = await acquire(client, member, max_records=1)
    assert codes(await ack(client, member, (first[0]["token"], "release"))) == ["ok"]
    again = await acquire(client, member, max_records=1)
    assert (again[0]["offset"], again[0]["delivery_count"], again[0]["token"]) == (0, 2, "t:0:0:2")
    # The first delivery's token is over: refused, nothing changed.
    assert codes(await ack(client, member, (first[0]["token"], "accept"))) == ["DELIVERED_AGAIN"]
    assert codes(await ack(client, member, (again[0]["token"], "accept"))) == ["ok"]


async def test_a_release_with_a_delay_keeps_the_record_back_until_it_is_due(
    client: Client, clock: Clock
) -> None:
    member = await setup(client, 2)
    first = await acquire(client, member, max_records=1)
    assert codes(await ack(client, member, (first[0]["token"], "release", 5_000))) == ["ok"]
    # Offset 0 waits; the record behind it is delivered meanwhile.
    assert [r["offset"] for r in await acquire(client, member)] == [1]
    clock.now += 4_999
    assert await acquire(client, member) == []
    clock.now += 1
    assert [(r["offset"], r["delivery_count"]) for r in await acquire(client, member)] == [(0, 2)]


async def test_a_lapsed_lock_gives_the_record_back_and_its_holder_can_no_longer_accept(
    client: Client, clock: Clock
) -> None:
    member = await setup(client, 1, lock_ms=2_000)
    got = await acquire(client, member)
    clock.now += 2_000
    assert codes(await ack(client, member, (got[0]["token"], "accept"))) == ["LOCK_EXPIRED"]
    other = await join(client)
    again = await acquire(client, other)
    assert (again[0]["offset"], again[0]["delivery_count"]) == (0, 2)


async def test_renew_keeps_a_record_for_long_work(client: Client, clock: Clock) -> None:
    member = await setup(client, 1, lock_ms=2_000)
    got = await acquire(client, member)
    clock.now += 1_500
    results = await ack(client, member, (got[0]["token"], "renew"))
    assert codes(results) == ["ok"] and results[0]["lock_expires_at"] == clock.now + 2_000
    clock.now += 1_500  # past the first lock, within the renewed one
    assert await acquire(client, await join(client)) == []
    assert codes(await ack(client, member, (got[0]["token"], "accept"))) == ["ok"]


async def test_a_rejected_record_is_archived_and_never_delivered_again(
    client: Client, clock: Clock
) -> None:
    member = await setup(client, 2)
    got = await acquire(client, member, max_records=1)
    assert codes(await ack(client, member, (got[0]["token"], "reject"))) == ["ok"]
    clock.now += 60_000
    assert [r["offset"] for r in await acquire(client, member)] == [1]
    doc = await describe(client)
    assert doc["partitions"][0]["start_offset"] == 1  # offset 0 is done: archived
    assert doc["partitions"][0]["acquired"] == 1


async def test_a_record_that_always_fails_is_archived_at_the_delivery_limit_while_the_rest_go_on(
    client: Client, clock: Clock
) -> None:
    member = await setup(client, 4, limit=3)
    accepted = []
    deliveries = 0
    for _ in range(10):
        got = await acquire(client, member)
        if not got:
            break
        for r in got:
            if r["offset"] == 0:  # the poison record: released every time
                deliveries += 1
                assert r["delivery_count"] == deliveries
                assert codes(await ack(client, member, (r["token"], "release"))) == ["ok"]
            else:
                accepted.append(r["offset"])
                assert codes(await ack(client, member, (r["token"], "accept"))) == ["ok"]
    assert deliveries == 3 and sorted(accepted) == [1, 2, 3]
    doc = await describe(client)
    assert doc["partitions"][0]["start_offset"] == 4 and doc["lag"] == 0


async def test_a_lowered_delivery_limit_archives_a_record_given_back_that_many_times(
    client: Client, clock: Clock
) -> None:
    member = await setup(client, 2, limit=5)
    for delivery in (1, 2):
        got = await acquire(client, member, max_records=1)
        assert (got[0]["offset"], got[0]["delivery_count"]) == (0, delivery)
        assert codes(await ack(client, member, (got[0]["token"], "release"))) == ["ok"]
    await configure(client, limit=2)
    # Offset 0 had its 2 deliveries: archived, never a third; offset 1 comes.
    assert [(r["offset"], r["delivery_count"]) for r in await acquire(client, member)] == [(1, 1)]
    (window,) = (await describe(client))["partitions"]
    assert (window["start_offset"], window["archived"]) == (1, 0)
    scraped = await metrics(client)
    assert scraped[("sluice_share_records_total", frozenset({("event", "archived")}))] == 1


async def test_records_across_partitions_and_topics_are_acquired_in_turn(
    client: Client, clock: Clock
) -> None:
    await create_topic(client, "t", 2)
    await create_topic(client, "u", 1)
    await configure(client, reset="earliest")
    for p in range(2):
        await produce(client, [{"value": p}], partition=p)
    await produce(client, [{"value": "u"}], topic="u", partition=0)
    member = await join(client, ("t", "u"))
    got = await acquire(client, member)
    assert sorted((r["topic"], r["partition"]) for r in got) == [("t", 0), ("t", 1), ("u", 0)]


async def test_partitions_not_read_yet_count_in_the_lag(client: Client, clock: Clock) -> None:
    member = await setup(client, 3, partitions=2)
    await acquire(client, member, max_records=1)  # the first partition's window only
    doc = await describe(client)
    assert [(p["partition"], p["start_offset"], p["lag"]) for p in doc["partitions"]] == [
        (0, 0, 3),
        (1, 0, 3),
    ]
    assert doc["lag"] == 6


async def test_latest_starts_after_what_is_there_when_first_read(client: Client) -> None:
    await create_topic(client)
    await produce(client, [{"value": "old"}])
    member = await join(client)
    assert await acquire(client, member) == []  # the default: latest
    await produce(client, [{"value": "new"}])
    assert [r["value"] for r in await acquire(client, member)] == ["new"]


async def test_a_parked_acquire_answers_as_soon_as_a_record_arrives(client: Client) -> None:
    member = await setup(client, 0)
    waiting = asyncio.ensure_future(acquire(client, member, timeout_ms=30_000))
    share = gateway(client).share_groups
    await wait_until(lambda: bool(share.groups["q"].parked))
    await produce(client, [{"value": "late"}])
    got = await asyncio.wait_for(waiting, 10)
    assert [r["value"] for r in got] == ["late"]


async def test_a_parked_acquire_answers_when_a_record_is_released(
    client: Client, clock: Clock
) -> None:
    member = await setup(client, 1)
    held = await acquire(client, member)
    other = await join(client)
    waiting = asyncio.ensure_future(acquire(client, other, timeout_ms=30_000))
    share = gateway(client).share_groups
    await wait_until(lambda: bool(share.groups["q"].parked))
    await ack(client, member, (held[0]["token"], "release"))
    got = await asyncio.wait_for(waiting, 10)
    assert [(r["offset"], r["delivery_count"]) for r in got] == [(0, 2)]


async def test_a_record_wakes_one_parked_acquire_not_all(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    member = await setup(client, 0)
    share = gateway(client).share_groups
    members = [member] + [await join(client) for _ in range(4)]
    parked = []
    for m in members:  # one after another: the first waits longest
        parked.append(asyncio.ensure_future(share.acquire("q", m, 1, 1 << 20, 30_000)))
        await wait_until(lambda: len(share.groups["q"].parked) == len(parked))
    passes: list[str] = []
    acquire_pass = share._acquire_pass

    async def counted(group: Any, member: Any, *limits: int) -> Any:
        passes.append(member.member_id)
        return await acquire_pass(group, member, *limits)

    monkeypatch.setattr(share, "_acquire_pass", counted)
    await produce(client, [{"value": "one"}])
    done, waiting = await asyncio.wait(parked, return_when=asyncio.FIRST_COMPLETED)
    # The longest parked took it, and only it looked.
    assert [t.result()[0].value for t in done] == [b'"one"'] and parked[0] in done
    assert passes == [members[0]]
    assert len(share.groups["q"].parked) == 4
    for task in waiting:
        task.cancel()


async def test_records_keep_coming_to_the_parked_after_one_was_served(client: Client) -> None:
    first = await setup(client, 0)
    share = gateway(client).share_groups
    second = await join(client)
    served = asyncio.ensure_future(share.acquire("q", first, 1, 1 << 20, 30_000))
    await wait_until(lambda: len(share.groups["q"].parked) == 1)
    waiting = asyncio.ensure_future(share.acquire("q", second, 1, 1 << 20, 30_000))
    await wait_until(lambda: len(share.groups["q"].parked) == 2)
    await produce(client, [{"value": "one"}])
    assert [r.offset for r in await asyncio.wait_for(served, 10)] == [0]
    # The first consumer does not come back: the partition is still watched for the second.
    await produce(client, [{"value": "two"}])
    assert [r.offset for r in await asyncio.wait_for(waiting, 10)] == [1]


async def test_a_woken_acquire_whose_client_went_passes_its_wake_on(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = await setup(client, 0)
    share = gateway(client).share_groups
    second = await join(client)
    gone = asyncio.ensure_future(share.acquire("q", first, 1, 1 << 20, 30_000))
    await wait_until(lambda: len(share.groups["q"].parked) == 1)
    waiting = asyncio.ensure_future(share.acquire("q", second, 1, 1 << 20, 30_000))
    await wait_until(lambda: len(share.groups["q"].parked) == 2)
    group = share.groups["q"]
    wake = group.wake

    def woken_then_gone(*args: Any, **kwargs: Any) -> int:
        woken = wake(*args, **kwargs)
        if woken and not gone.cancelling():
            gone.cancel()  # woken for the new record, its client gone before it looked
        return woken

    monkeypatch.setattr(group, "wake", woken_then_gone)
    await produce(client, [{"value": "one"}])
    got = await asyncio.wait_for(waiting, 10)
    assert [r.offset for r in got] == [0]
    with pytest.raises(asyncio.CancelledError):
        await gone


async def test_room_made_in_a_full_window_wakes_a_parked_acquire(
    client: Client, clock: Clock
) -> None:
    holder = await setup(client, 101, locks=100)
    share = gateway(client).share_groups
    held = await share.acquire("q", holder, 1_000, 1 << 30, 0)
    assert len(held) == 100  # the window is full
    other = await join(client)
    waiting = asyncio.ensure_future(share.acquire("q", other, 1, 1 << 20, 30_000))
    await wait_until(lambda: len(share.groups["q"].parked) == 1)
    await share.acknowledge("q", holder, [(held[0].token, AckType.ACCEPT, 0)])
    got = await asyncio.wait_for(waiting, 10)
    assert [r.offset for r in got] == [100]


async def test_parked_acquires_count_against_the_parked_fetches_limit(start: Start) -> None:
    client = await start(max_parked_fetches=2)
    first = await setup(client, 0)
    second = await join(client)
    share = gateway(client).share_groups
    notifier = gateway(client).notifier
    parked = []
    for member in (first, second):
        waiting = acquire(client, member, max_records=1, timeout_ms=30_000)
        parked.append(asyncio.ensure_future(waiting))
        await wait_until(lambda: len(share.groups["q"].parked) == len(parked))
    # Each parked acquire counts once (its partition's watch is the server's own wait).
    assert notifier.parked == 2
    third = await join(client)
    resp = await client.post(f"{G}/members/{third}/acquire", params={"timeout_ms": "1000"})
    await problem(resp, 503, "TOO_MANY_WAITING_FETCHES")
    assert resp.headers["Retry-After"] == "1"
    long_poll = await client.get("/v1/topics/t/partitions/0/records", params={"timeout_ms": "1000"})
    await problem(long_poll, 503, "TOO_MANY_WAITING_FETCHES")
    assert await acquire(client, third) == []  # one that does not wait is served
    await produce(client, [{"value": 1}, {"value": 2}])
    assert sorted(len(records) for records in await asyncio.gather(*parked)) == [1, 1]
    assert notifier.parked == 0


async def test_ndjson_acquire_and_acknowledge(client: Client, clock: Clock) -> None:
    member = await setup(client, 2)
    resp = await client.post(
        f"{G}/members/{member}/acquire", params={"max_records": "2"}, headers={"Accept": NDJSON}
    )
    assert resp.status == 200 and resp.content_type == NDJSON
    lines = [orjson.loads(line) for line in (await resp.read()).splitlines()]
    assert [r["offset"] for r in lines] == [0, 1]
    body = b"".join(orjson.dumps({"token": r["token"]}) + b"\n" for r in lines)
    resp = await client.post(
        f"{G}/members/{member}/acknowledge", data=body, headers={"Content-Type": NDJSON}
    )
    assert resp.status == 200, await resp.text()
    assert [r["status"] for r in (await resp.json())["results"]] == ["ok", "ok"]


# -- acknowledgements of offset ranges -------------------------------------------------------------


async def test_records_acknowledged_by_an_offset_range_never_come_again(
    client: Client, clock: Clock
) -> None:
    member = await setup(client, 5)
    assert len(await acquire(client, member)) == 5
    results = await ack_ranges(client, member, span(0, 4))
    assert results == [
        {
            "topic": "t",
            "partition": 0,
            "first_offset": 0,
            "last_offset": 4,
            "type": "accept",
            "status": "ok",
        }
    ]
    clock.now += 60_000  # past every lock
    assert await acquire(client, member) == []
    part = (await describe(client))["partitions"][0]
    assert (part["start_offset"], part["in_flight"], part["lag"]) == (5, 0, 0)


async def test_ranges_release_reject_and_renew_as_tokens_do(client: Client, clock: Clock) -> None:
    member = await setup(client, 6, lock_ms=10_000)
    assert len(await acquire(client, member)) == 6
    results = await ack_ranges(
        client,
        member,
        span(0, 1, "release"),
        span(2, 2, "reject"),
        span(3, 4, "release", delay_ms=5_000),
        span(5, 5, "renew"),
    )
    assert codes(results) == ["ok"] * 4
    assert results[3]["lock_expires_at"] == clock.now + 10_000
    assert "lock_expires_at" not in results[0]
    again = await acquire(client, member)
    assert [(r["offset"], r["delivery_count"]) for r in again] == [(0, 2), (1, 2)]
    clock.now += 5_000
    assert [(r["offset"], r["delivery_count"]) for r in await acquire(client, member)] == [
        (3, 2),
        (4, 2),
    ]
    part = (await describe(client))["partitions"][0]
    assert (part["archived"], part["acquired"]) == (1, 5)  # 2 rejected


async def test_a_refused_range_says_why_and_changes_nothing(client: Client, clock: Clock) -> None:
    await setup(client, 6, lock_ms=2_000)
    a, b = await join(client), await join(client)
    assert len(await acquire(client, a, max_records=3)) == 3  # 0 to 2
    assert len(await acquire(client, b, max_records=1)) == 1  # 3
    assert codes(await ack_ranges(client, a, span(1, 1))) == ["ok"]
    before = (await describe(client))["partitions"]
    results = await ack_ranges(
        client,
        a,
        span(2, 3),  # 3 is b's
        span(0, 1),  # 1 accepted already
        span(4, 5),  # never acquired
        span(0, 0, partition=1),  # a partition with no record acquired
        {"topic": "other", "partition": 0, **span(0, 0)},  # a topic the member does not read
    )
    assert codes(results) == [
        "NOT_HOLDER",
        "ALREADY_ACKNOWLEDGED",
        "RECORD_NOT_ACQUIRED",
        "RECORD_NOT_ACQUIRED",
        "RECORD_NOT_ACQUIRED",
    ]
    assert "offset 3" in results[0]["problem"]["detail"]
    assert results[0]["problem"]["status"] == 409
    assert results[0]["first_offset"] == 2 and results[0]["last_offset"] == 3
    assert (await describe(client))["partitions"] == before
    clock.now += 2_000  # every lock lapsed
    assert codes(await ack_ranges(client, a, span(2, 2))) == ["LOCK_EXPIRED"]
    assert (await describe(client))["partitions"][0]["acknowledged"] == 1


async def test_tokens_and_ranges_mix_and_a_refused_token_among_consecutive_ones_stands_alone(
    client: Client, clock: Clock
) -> None:
    member = await setup(client, 6)
    got = await acquire(client, member)
    assert codes(await ack(client, member, (got[1]["token"], "release"))) == ["ok"]
    acks = [{"token": r["token"]} for r in got[:3]]  # 0 and 2 still held, 1 given back
    acks.append({"topic": "t", "partition": 0, "first_offset": 3, "last_offset": 5})
    body = b"".join(orjson.dumps(a) + b"\n" for a in acks)
    resp = await client.post(
        f"{G}/members/{member}/acknowledge", data=body, headers={"Content-Type": NDJSON}
    )
    assert resp.status == 200, await resp.text()
    results = (await resp.json())["results"]
    assert codes(results) == ["ok", "LOCK_EXPIRED", "ok", "ok"]
    assert [r.get("token") for r in results] == ["t:0:0:1", "t:0:1:1", "t:0:2:1", None]
    part = (await describe(client))["partitions"][0]
    assert (part["start_offset"], part["available"], part["acknowledged"]) == (1, 1, 4)


@pytest.mark.parametrize(
    ("item", "detail"),
    [
        ({"topic": "t", "partition": 0, "first_offset": 1}, "last_offset missing"),
        ({"topic": "t", "first_offset": 1, "last_offset": 1}, "partition missing"),
        ({"topic": "t", "partition": 0, "first_offset": 3, "last_offset": 2}, "between 3"),
        ({"topic": "t", "partition": -1, "first_offset": 0, "last_offset": 0}, "partition must be"),
        ({"topic": "t", "partition": 0, "first_offset": -1, "last_offset": 0}, "first_offset must"),
        ({"topic": "t", "partition": 0, "first_offset": "0", "last_offset": 0}, "integer"),
        ({"topic": 5, "partition": 0, "first_offset": 0, "last_offset": 0}, "topic's name"),
        ({"topic": "t", "partition": 0, "first_offset": 0, "last_offset": 0, "x": 1}, "fields x;"),
        (
            {"topic": "t", "partition": 0, "first_offset": 0, "last_offset": 0, "token": "t"},
            "unknown",
        ),
        (
            {"topic": "t", "partition": 0, "first_offset": 0, "last_offset": 0, "delay_ms": 1},
            "release",
        ),
        (
            {"topic": "t", "partition": 0, "first_offset": 0, "last_offset": 0, "type": "x"},
            "one of",
        ),
    ],
)
async def test_malformed_ranges_are_refused_whole(
    client: Client, item: dict[str, Any], detail: str
) -> None:
    member = await setup(client, 1)
    await acquire(client, member)
    good = {"topic": "t", "partition": 0, "first_offset": 0, "last_offset": 0}
    body = {"acknowledgements": [good, item]}
    resp = await client.post(f"{G}/members/{member}/acknowledge", json=body)
    assert resp.status == 400, await resp.text()
    assert detail in (await resp.json())["detail"]
    assert (await describe(client))["partitions"][0]["acquired"] == 1  # the good one too: none


# -- members ------------------------------------------------------------------------------------


async def test_a_member_that_leaves_gives_back_what_it_holds(client: Client, clock: Clock) -> None:
    member = await setup(client, 2)
    await acquire(client, member)
    resp = await client.delete(f"{G}/members/{member}")
    assert resp.status == 200 and (await resp.json()) == {"released": 2}
    other = await join(client)
    assert [(r["offset"], r["delivery_count"]) for r in await acquire(client, other)] == [
        (0, 2),
        (1, 2),
    ]
    await problem(await client.post(f"{G}/members/{member}/acquire"), 404, "UNKNOWN_MEMBER")


async def test_a_member_whose_session_runs_out_gives_back_what_it_holds(start: Start) -> None:
    client = await start(group_min_session_timeout_ms=100)
    await setup(client, 1)
    member = await join(client, session_timeout_ms=100)
    assert len(await acquire(client, member)) == 1
    share = gateway(client).share_groups
    await join(client)  # keeps the group alive
    await wait_until(lambda: member not in share.groups["q"].members, timeout=10)
    window = share.groups["q"].partitions[("t", 0)]
    await wait_until(lambda: not window.held_by(member))


# -- operations ------------------------------------------------------------------------------


async def test_reset_and_delete_need_an_empty_group(client: Client, clock: Clock) -> None:
    member = await setup(client, 3)
    got = await acquire(client, member)
    await ack(client, member, *[(r["token"], "accept") for r in got])
    reset = {"topic": "t", "to": "earliest"}
    await problem(await client.put(f"{G}/offsets", json=reset), 409, "GROUP_NOT_EMPTY")
    await problem(await client.delete(G), 409, "GROUP_NOT_EMPTY")
    await client.delete(f"{G}/members/{member}")
    resp = await client.put(f"{G}/offsets", json=reset)
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["offsets"] == [{"topic": "t", "partition": 0, "start_offset": 0}]
    member = await join(client)
    assert [r["offset"] for r in await acquire(client, member)] == [0, 1, 2]
    await client.delete(f"{G}/members/{member}")
    resp = await client.put(f"{G}/offsets", json={"topic": "t", "to": 2})
    assert (await resp.json())["offsets"][0]["start_offset"] == 2
    await problem(
        await client.put(f"{G}/offsets", json={"topic": "t", "to": 9}), 416, "OFFSET_OUT_OF_RANGE"
    )
    assert (await client.delete(G)).status == 204
    await problem(await client.get(G), 404, "UNKNOWN_GROUP")
    listed = await (await client.get("/v1/share-groups")).json()
    assert listed == {"share_groups": []}


async def test_a_refused_reset_or_an_emptied_group_leaves_no_group_behind(client: Client) -> None:
    await create_topic(client)
    resp = await client.put(f"{G}/offsets", json={"topic": "nosuch", "to": "earliest"})
    await problem(resp, 404, "UNKNOWN_TOPIC")
    resp = await client.put(f"{G}/offsets", json={"topic": "t", "partitions": [5], "to": 0})
    await problem(resp, 404, "UNKNOWN_PARTITION")
    await problem(await client.get(G), 404, "UNKNOWN_GROUP")
    await problem(await client.delete(G), 404, "UNKNOWN_GROUP")
    member = await join(client)  # no configs, never acquired
    await client.delete(f"{G}/members/{member}")
    await problem(await client.get(G), 404, "UNKNOWN_GROUP")
    assert await (await client.get("/v1/share-groups")).json() == {"share_groups": []}


async def test_list_describes_each_group(client: Client) -> None:
    await setup(client, 0)
    listed = await (await client.get("/v1/share-groups")).json()
    assert listed == {"share_groups": [{"group": "q", "state": "Stable", "members": 1}]}


async def test_state_survives_a_restart_with_deliveries_counted_and_accepts_kept(
    start: Start, clock: Clock
) -> None:
    client = await start()
    member = await setup(client, 3)
    got = await acquire(client, member)
    await ack(client, member, (got[0]["token"], "accept"), (got[1]["token"], "release"))
    await client.close()
    client = await start()
    # The member and its lock on offset 2 came back with the state topic.
    assert codes(await ack(client, member, (got[2]["token"], "accept"))) == ["ok"]
    again = await acquire(client, member)
    assert [(r["offset"], r["delivery_count"]) for r in again] == [(1, 2)]
    doc = await describe(client)
    assert doc["configs"] == {"share.auto.offset.reset": "earliest"}
    assert [m["member_id"] for m in doc["members"]] == [member]


async def test_a_restarted_node_answers_once_it_has_replayed_its_share_groups(
    start: Start, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call that comes while the state partition is being replayed waits for the replay,
    rather than answering 503 LEADER_NOT_AVAILABLE because it came first: the replay here is
    held until such a call waits for it."""
    client = await start()
    await setup(client, 3)
    await client.close()
    gate = asyncio.Event()
    replay, wait = CoordinatorLog._load, CoordinatorLog.loaded

    async def held_replay(self: CoordinatorLog[Any], partition: Any, epoch: int) -> None:
        if self.topic == STATE_TOPIC:  # the consumer groups' replay is awaited as the node starts
            await gate.wait()
        await replay(self, partition, epoch)

    async def waited(self: CoordinatorLog[Any], timeout_s: float | None = None) -> None:
        if self.topic == STATE_TOPIC:
            gate.set()
        await wait(self, timeout_s)

    monkeypatch.setattr(CoordinatorLog, "_load", held_replay)
    monkeypatch.setattr(CoordinatorLog, "loaded", waited)
    client = await start()
    doc = await describe(client)
    assert [p["partition"] for p in doc["partitions"]] == [0]


async def test_a_stored_window_whose_runs_overlap_is_skipped_on_replay(
    start: Start, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    client = await start()
    member = await setup(client, 3)
    got = await acquire(client, member)
    await ack(client, member, (got[0]["token"], "accept"))
    share = gateway(client).share_groups
    # A later record of the window that no coordinator would write: runs out of order.
    bad = {"start": 1, "end": 3, "runs": [[2, 2, 0, 1, None, 0], [1, 1, 0, 1, None, 0]]}
    share.log.append("q", [(partition_key("q", "t", 0), orjson.dumps(bad))])
    await share.log.durable("q", 5_000)
    await client.close()
    client = await start()
    # The window is the last one stored that can be restored: offsets 1 and 2 still held.
    (window,) = (await describe(client))["partitions"]
    assert (window["start_offset"], window["acquired"], window["available"]) == (1, 2, 0)
    assert any(
        "skipped an unreadable record" in r.getMessage() and "out of order" in r.getMessage()
        for r in caplog.records
    )


async def test_the_state_topic_is_internal(client: Client) -> None:
    await setup(client, 0)
    resp = await client.post(f"/v1/topics/{STATE_TOPIC}/records", json={"records": [{"value": 1}]})
    await problem(resp, 403, "INTERNAL_TOPIC")
    await problem(await client.delete(f"/v1/topics/{STATE_TOPIC}"), 403, "INTERNAL_TOPIC")
    resp = await client.post(f"{G}/members", json={"topics": [STATE_TOPIC]})
    await problem(resp, 403, "INTERNAL_TOPIC")
    names = [t["name"] for t in (await (await client.get("/v1/topics")).json())["topics"]]
    assert STATE_TOPIC not in names


async def test_a_deleted_topic_takes_its_share_partitions_with_it(
    client: Client, clock: Clock
) -> None:
    member = await setup(client, 1)
    await acquire(client, member)
    assert (await client.delete("/v1/topics/t")).status == 204
    share = gateway(client).share_groups
    await wait_until(lambda: not share.groups["q"].partitions)
    assert (await describe(client))["partitions"] == []


async def test_an_acknowledgement_retried_after_a_failed_write_is_written_again(
    client: Client, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    member = await setup(client, 1)
    got = await acquire(client, member)
    share = gateway(client).share_groups
    durable = share.log.durable
    waits: list[str] = []

    async def failing_once(name: str, timeout_ms: int) -> None:
        waits.append(name)
        if len(waits) == 1:
            raise RequestTimedOut("not on every in-sync replica within the timeout")
        await durable(name, timeout_ms)

    monkeypatch.setattr(share.log, "durable", failing_once)
    body = {"acknowledgements": [{"token": got[0]["token"], "type": "accept"}]}
    path = f"{G}/members/{member}/acknowledge"
    await problem(await client.post(path, json=body), 504, "REQUEST_TIMED_OUT")
    # Its retry is not answered from memory: the window is written and waited for again.
    assert codes(await ack(client, member, (got[0]["token"], "accept"))) == ["ALREADY_ACKNOWLEDGED"]
    assert waits == ["q", "q"]


async def test_the_changes_of_concurrent_requests_go_out_in_one_append(
    client: Client, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    await setup(client, 4, partitions=2)
    share = gateway(client).share_groups
    members = [await join(client) for _ in range(4)]
    appended: list[list[bytes]] = []
    append = share.log.append

    def counted(group: str, records: list[tuple[bytes, bytes | None]]) -> None:
        appended.append([key for key, _ in records])
        append(group, records)

    monkeypatch.setattr(share.log, "append", counted)
    got = await asyncio.gather(*(share.acquire("q", m, 2, 1 << 20, 0) for m in members))
    # Four acquires of one turn: one append, each window in it once.
    assert sorted(len(records) for records in got) == [2, 2, 2, 2]
    assert len(appended) == 1 and len(appended[0]) == 2
    acks = [
        share.acknowledge("q", m, [(r.token, AckType.ACCEPT, 0) for r in records])
        for m, records in zip(members, got, strict=True)
    ]
    results = await asyncio.gather(*acks)
    assert all(r.refused is None for answered in results for r in answered)
    assert len(appended) == 2 and len(appended[1]) == 2
    assert [p["start_offset"] for p in (await describe(client))["partitions"]] == [4, 4]


async def test_a_join_that_changes_nothing_writes_nothing(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    await setup(client, 0)
    share = gateway(client).share_groups
    await join(client, member_id="worker-1", session_timeout_ms=30_000)
    appended: list[str] = []
    append = share.log.append

    def counted(group: str, records: list[tuple[bytes, bytes | None]]) -> None:
        appended.append(group)
        append(group, records)

    monkeypatch.setattr(share.log, "append", counted)
    await join(client, member_id="worker-1", session_timeout_ms=30_000)
    assert appended == []
    await join(client, member_id="worker-1", session_timeout_ms=40_000)  # its settings changed
    assert appended == ["q"]


async def test_a_member_heard_from_within_its_session_stays(start: Start) -> None:
    client = await start(group_min_session_timeout_ms=100)
    await setup(client, 0)
    member = await join(client, session_timeout_ms=1_000)
    share = gateway(client).share_groups
    for _ in range(6):  # 1.5 s in all, never a whole session without a word
        await asyncio.sleep(0.25)
        assert await acquire(client, member) == []
    assert member in share.groups["q"].members
    await wait_until(lambda: member not in share.groups["q"].members, timeout=10)


# -- bad input -----------------------------------------------------------------------------------


async def test_each_refused_acknowledgement_says_why_and_changes_nothing(
    client: Client, clock: Clock
) -> None:
    member = await setup(client, 2)
    got = await acquire(client, member, max_records=1)
    before = (await describe(client))["partitions"]
    results = await ack(
        client,
        member,
        ("nonsense", "accept"),
        ("t:0:x:1", "accept"),
        ("t:0:1:1", "accept"),  # never acquired
        ("t:0:0:7", "accept"),  # a delivery that never was
        ("zz:0:0:1", "accept"),  # a topic the member does not read
        (got[0]["token"], "accept"),
        (got[0]["token"], "accept"),  # twice
    )
    assert codes(results) == [
        "INVALID_TOKEN",
        "INVALID_TOKEN",
        "RECORD_NOT_ACQUIRED",
        "DELIVERED_AGAIN",
        "RECORD_NOT_ACQUIRED",
        "ok",
        "ALREADY_ACKNOWLEDGED",
    ]
    problem_doc = results[0]["problem"]
    assert problem_doc["status"] == 409 and problem_doc["type"].endswith("/invalid-token")
    after = (await describe(client))["partitions"]
    assert after[0]["acknowledged"] == 0 and after[0]["start_offset"] == 1  # only the accept
    assert before[0]["start_offset"] == 0


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (b"{", "JSON"),
        (b"[]", "object"),
        (b'{"acknowledgements": 1}', "list"),
        (b'{"acknowledgements": []}', "1 to"),
        (b'{"acknowledgements": [1]}', "object"),
        (b'{"acknowledgements": [{"type": "accept"}]}', "token"),
        (b'{"acknowledgements": [{"token": 5}]}', "token"),
        (b'{"acknowledgements": [{"token": "t:0:0:1", "type": "maybe"}]}', "type"),
        (b'{"acknowledgements": [{"token": "t:0:0:1", "type": {}}]}', "type"),
        (b'{"acknowledgements": [{"token": "t:0:0:1", "delay_ms": 5}]}', "release"),
        (
            b'{"acknowledgements": [{"token": "t:0:0:1", "type": "release", "delay_ms": -1}]}',
            "delay",
        ),
        (b'{"acknowledgements": [{"token": "t:0:0:1", "extra": 1}]}', "unknown"),
        (b'{"acks": []}', "unknown"),
    ],
)
async def test_malformed_acknowledgements_are_refused_whole(
    client: Client, body: bytes, detail: str
) -> None:
    member = await setup(client, 0)
    resp = await client.post(
        f"{G}/members/{member}/acknowledge", data=body, headers={"Content-Type": "application/json"}
    )
    assert resp.status == 400, await resp.text()
    assert detail in (await resp.json())["detail"]


async def test_too_many_acknowledgements_are_refused(client: Client) -> None:
    member = await setup(client, 0)
    acks = [{"token": f"t:0:{i}:1"} for i in range(1_001)]
    resp = await client.post(f"{G}/members/{member}/acknowledge", json={"acknowledgements": acks})
    await problem(resp, 400, "BAD_REQUEST")


@pytest.mark.parametrize(
    "params",
    [
        {"max_records": "0"},
        {"max_records": "1001"},
        {"max_records": "x"},
        {"timeout_ms": "-1"},
        {"max_bytes": "0"},
    ],
)
async def test_acquire_limits_are_checked(client: Client, params: dict[str, str]) -> None:
    member = await setup(client, 0)
    resp = await client.post(f"{G}/members/{member}/acquire", params=params)
    await problem(resp, 400, "INVALID_PARAMETER")


async def test_an_acquire_with_a_body_is_refused(client: Client) -> None:
    member = await setup(client, 0)
    resp = await client.post(f"{G}/members/{member}/acquire", json={"max_records": 5})
    await problem(resp, 400, "BAD_REQUEST")


@pytest.mark.parametrize(
    ("configs", "detail"),
    [
        ({"share.delivery.count.limit": 1}, "between 2 and 10"),
        ({"share.delivery.count.limit": "3"}, "integer"),
        ({"share.record.lock.duration.ms": 10}, "between"),
        ({"share.partition.max.record.locks": True}, "integer"),
        ({"share.auto.offset.reset": "sometime"}, "by_duration"),
        ({"share.auto.offset.reset": "by_duration:P"}, "by_duration"),
        ({"group.share.unknown": 1}, "unknown config"),
    ],
)
async def test_bad_configs_are_refused(
    client: Client, configs: dict[str, object], detail: str
) -> None:
    resp = await client.put(f"{G}/configs", json={"configs": configs})
    body = await problem(resp, 400, "INVALID_CONFIG")
    assert detail in body["detail"]


async def test_configs_can_be_unset_and_by_duration_is_accepted(client: Client) -> None:
    doc = await configure(client, reset="by_duration:PT1H30M", limit=3)
    assert doc["configs"] == {
        "share.auto.offset.reset": "by_duration:PT1H30M",
        "share.delivery.count.limit": 3,
    }
    resp = await client.put(f"{G}/configs", json={"configs": {"share.delivery.count.limit": None}})
    assert (await resp.json())["configs"] == {"share.auto.offset.reset": "by_duration:PT1H30M"}


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"topics": []}, 400, "BAD_REQUEST"),
        ({"topics": "t"}, 400, "BAD_REQUEST"),
        ({"topics": ["bad name!"]}, 400, "INVALID_TOPIC_NAME"),
        ({"topics": ["t"], "assignor": "range"}, 400, "INVALID_REQUEST"),
        ({"topics": ["t"], "session_timeout_ms": 1}, 400, "INVALID_PARAMETER"),
        ({"topics": ["nope"]}, 404, "UNKNOWN_TOPIC"),
    ],
)
async def test_bad_joins_are_refused(
    client: Client, body: dict[str, object], status: int, code: str
) -> None:
    await create_topic(client)
    await problem(await client.post(f"{G}/members", json=body), status, code)


async def test_a_member_may_choose_its_id_and_join_again_holding_what_it_held(
    client: Client, clock: Clock
) -> None:
    await setup(client, 2)
    member = await join(client, member_id="worker-1")
    assert member == "worker-1"
    got = await acquire(client, member, max_records=1)
    assert await join(client, member_id="worker-1") == "worker-1"  # a restarted client
    assert codes(await ack(client, member, (got[0]["token"], "accept"))) == ["ok"]
    assert len((await describe(client))["members"]) == 2  # setup's and worker-1
    resp = await client.post(f"{G}/members", json={"topics": ["t"], "member_id": "a/b"})
    await problem(resp, 400, "INVALID_PARAMETER")


async def test_unknown_groups_members_and_bad_group_ids(client: Client) -> None:
    await problem(await client.get(G), 404, "UNKNOWN_GROUP")
    await problem(await client.delete(f"{G}/members/nobody"), 404, "UNKNOWN_GROUP")
    await setup(client, 0)
    await problem(await client.post(f"{G}/members/nobody/acquire"), 404, "UNKNOWN_MEMBER")
    resp = await client.post(
        f"{G}/members/nobody/acknowledge", json={"acknowledgements": [{"token": "t:0:0:1"}]}
    )
    await problem(resp, 404, "UNKNOWN_MEMBER")
    await problem(await client.get("/v1/share-groups/" + "x" * 256), 400, "INVALID_GROUP_ID")


async def test_metrics_count_what_happened_to_records(client: Client, clock: Clock) -> None:
    member = await setup(client, 3, limit=2)
    got = await acquire(client, member)
    await ack(client, member, (got[0]["token"], "accept"), (got[1]["token"], "reject"))
    await ack(client, member, (got[2]["token"], "renew"), (got[2]["token"], "release"))
    again = await acquire(client, member)
    clock.now += 60_000
    await acquire(client, member)  # the lapsed lock of the second delivery: archived
    assert [r["delivery_count"] for r in again] == [2]
    scraped = await metrics(client)

    def value(name: str, **labels: str) -> float:
        return scraped[(name, frozenset(labels.items()))]

    events = {
        "acquired": 4,
        "accepted": 1,
        "rejected": 1,
        "released": 1,
        "renewed": 1,
        "lock_expired": 1,
        "redelivered": 1,
        "archived": 2,
    }
    for event, count in events.items():
        assert value("sluice_share_records_total", event=event) == count, event
    assert value("sluice_share_group_members", group="q") == 1
    assert value("sluice_share_group_records", group="q", state="acquired") == 0
