"""Consumer groups over HTTP, in process: join, hand-over, fetch, commit, leave, expiry, reset,
restart, and every kind of bad input."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from engine.offsets_topic import OFFSETS_TOPIC, group_key, partition_for
from groups.assignors import range_assign, round_robin_assign
from groups.coordinator import Member
from tests.api.support import (
    Client,
    Start,
    create_topic,
    gateway,
    metrics,
    now_ms,
    problem,
    produce,
    wait_until,
)

G = "/v1/groups/g"


async def join(client: Client, group: str = "g", **fields: Any) -> dict[str, Any]:
    body = {"topics": ["t"], "auto_offset_reset": "earliest", **fields}
    resp = await client.post(f"/v1/groups/{group}/members", json=body)
    assert resp.status == 201, await resp.text()
    doc: dict[str, Any] = await resp.json()
    return doc


async def poll(client: Client, member: str, group: str = "g", **params: object) -> dict[str, Any]:
    query = {"timeout_ms": "0", **{k: str(v) for k, v in params.items()}}
    resp = await client.get(f"/v1/groups/{group}/members/{member}/records", params=query)
    assert resp.status == 200, await resp.text()
    doc: dict[str, Any] = await resp.json()
    return doc


async def describe_group(client: Client, group: str = "g") -> dict[str, Any]:
    resp = await client.get(f"/v1/groups/{group}")
    assert resp.status == 200, await resp.text()
    doc: dict[str, Any] = await resp.json()
    return doc


def member_state(client: Client, member: str, group: str = "g") -> Member:
    return gateway(client).groups.groups[group].members[member]


def parked_member(client: Client, member: str, group: str = "g") -> bool:
    return member_state(client, member, group).wake is not None


def partitions(doc: dict[str, Any]) -> set[tuple[str, int]]:
    return {(a["topic"], p) for a in doc["assignment"] for p in a["partitions"]}


def seen(records: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return [(r["partition"], r["offset"]) for r in records]


async def fill(client: Client, count: int, partitions: int, first: int = 0) -> None:
    """`count` records on each partition, values first..first+count-1."""
    for p in range(partitions):
        await produce(client, [{"value": first + i} for i in range(count)], partition=p)


# -- assignment -------------------------------------------------------------------------------


def test_range_assignor_gives_the_first_members_one_more() -> None:
    subs = {"b": ["t"], "a": ["t", "u"], "c": ["t"]}
    out = range_assign(subs, {"t": 7, "u": 2})
    assert out == {
        "a": [("t", 0), ("t", 1), ("t", 2), ("u", 0), ("u", 1)],
        "b": [("t", 3), ("t", 4)],
        "c": [("t", 5), ("t", 6)],
    }


def test_round_robin_assignor_skips_members_not_subscribed() -> None:
    subs = {"a": ["t"], "b": ["t", "u"]}
    out = round_robin_assign(subs, {"t": 3, "u": 2})
    assert out == {"a": [("t", 0), ("t", 2)], "b": [("t", 1), ("u", 0), ("u", 1)]}
    assert round_robin_assign({}, {"t": 3}) == {}


def test_group_partition_is_kafkas() -> None:
    """abs(String.hashCode) % 50, values from Java 17's jshell."""
    cases = {"": 0, "a": 47, "group": 47, "my-group": 12, "ünïcode-𝄞": 25}
    for group, expected in cases.items():
        assert partition_for(group, 50) == expected
    assert partition_for("polygenelubricants", 50) == 0  # hashCode is Integer.MIN_VALUE


async def test_three_members_share_six_partitions(client: Client) -> None:
    await create_topic(client, "t", 6)
    await fill(client, 1, 6)
    a = await join(client)
    await poll(client, a["member_id"])  # a has been delivered records of all six partitions
    b = await join(client)
    c = await join(client)
    assert (a["generation"], b["generation"], c["generation"]) == (1, 2, 3)
    described = await describe_group(client)
    assert described["state"] == "Rebalancing"  # a still holds what b and c were given
    await poll(client, a["member_id"])
    described = await describe_group(client)
    assert described["state"] == "Stable"
    owners = {m["member_id"]: m["assignment"][0]["partitions"] for m in described["members"]}
    assert sorted(len(ps) for ps in owners.values()) == [2, 2, 2]
    assert sorted(p for ps in owners.values() for p in ps) == list(range(6))


async def test_round_robin_is_chosen_by_the_first_member(client: Client) -> None:
    await create_topic(client, "t", 4)
    a = await join(client, assignor="roundrobin")
    resp = await client.post(f"{G}/members", json={"topics": ["t"], "assignor": "range"})
    await problem(resp, 409, "INCONSISTENT_ASSIGNOR")
    b = await join(client)  # no preference: the group's
    assert b["assignor"] == "roundrobin"
    await poll(client, a["member_id"])
    a_now = await poll(client, a["member_id"])
    first = sorted([a["member_id"], b["member_id"]])[0]
    expected = {("t", 0), ("t", 2)} if a["member_id"] == first else {("t", 1), ("t", 3)}
    assert partitions(a_now) == expected


# -- delivery and hand-over -------------------------------------------------------------------


async def test_fetch_spans_partitions_and_auto_commits_on_the_next(client: Client) -> None:
    await create_topic(client, "t", 3)
    await fill(client, 4, 3)
    a = (await join(client))["member_id"]
    first = await poll(client, a, max_records=5)
    assert len(first["records"]) == 5
    assert {r["topic"] for r in first["records"]} == {"t"}
    assert all(
        set(r) == {"topic", "partition", "offset", "timestamp", "key", "value", "headers"}
        for r in first["records"]
    )
    assert [p["committed_offset"] for p in (await describe_group(client))["partitions"]] == [
        None,
        None,
        None,
    ]
    second = await poll(client, a)
    assert len(second["records"]) == 7
    assert not set(seen(first["records"])) & set(seen(second["records"]))
    committed = {
        p["partition"]: p["committed_offset"] for p in (await describe_group(client))["partitions"]
    }
    # the second fetch committed exactly what the first delivered, and nothing of its own
    delivered = {p: o + 1 for p, o in seen(first["records"])}
    assert committed == {p: delivered.get(p) for p in range(3)}


async def test_without_auto_commit_nothing_is_committed_until_asked(client: Client) -> None:
    await create_topic(client, "t", 2)
    await fill(client, 3, 2)
    a = (await join(client, auto_commit=False))["member_id"]
    await poll(client, a)
    await poll(client, a)
    rows = (await describe_group(client))["partitions"]
    assert [p["committed_offset"] for p in rows] == [None, None]
    resp = await client.post(f"{G}/members/{a}/commit")
    assert resp.status == 200
    assert (await resp.json())["offsets"] == [
        {"topic": "t", "partition": 0, "offset": 3},
        {"topic": "t", "partition": 1, "offset": 3},
    ]
    described = await describe_group(client)
    assert described["lag"] == 0
    assert [p["committed_offset"] for p in described["partitions"]] == [3, 3]


async def test_first_fetch_waits_for_the_join_to_settle(client: Client) -> None:
    """b's first fetch waits while a still holds b's partitions, and answers with records
    once a's next fetch hands them over: nothing delivered twice."""
    await create_topic(client, "t", 2)
    await fill(client, 5, 2)
    a = (await join(client))["member_id"]
    first = await poll(client, a)
    assert len(first["records"]) == 10
    await fill(client, 5, 2, first=5)
    joined = await join(client)
    b, (moved,) = joined["member_id"], partitions(joined)
    kept = 1 - moved[1]
    waiting = asyncio.ensure_future(poll(client, b, timeout_ms=10_000))
    await wait_until(lambda: parked_member(client, b))
    a_next = await poll(client, a)  # commits a's deliveries, gives `moved` up
    b_first = await waiting
    assert partitions(a_next) == {("t", kept)}
    assert partitions(b_first) == {moved}
    assert seen(b_first["records"]) == [(moved[1], o) for o in range(5, 10)]
    assert seen(a_next["records"]) == [(kept, o) for o in range(5, 10)]


async def test_a_parked_owner_gives_partitions_up_at_once(client: Client) -> None:
    await create_topic(client, "t", 2)
    a = (await join(client))["member_id"]
    a_parked = asyncio.ensure_future(poll(client, a, timeout_ms=10_000))
    await wait_until(lambda: parked_member(client, a))
    joined = await join(client)
    b, (moved,) = joined["member_id"], partitions(joined)
    await fill(client, 2, 2)
    b_first = await poll(client, b, timeout_ms=10_000)
    a_first = await a_parked
    assert seen(b_first["records"]) == [(moved[1], 0), (moved[1], 1)]
    assert seen(a_first["records"]) == [(1 - moved[1], 0), (1 - moved[1], 1)]
    assert a_first["generation"] == b_first["generation"] == 2


async def test_leave_commits_and_the_others_take_over_at_once(client: Client) -> None:
    await create_topic(client, "t", 2)
    await fill(client, 3, 2)
    a = (await join(client))["member_id"]
    b = (await join(client))["member_id"]
    delivered = seen((await poll(client, a))["records"])
    delivered += seen((await poll(client, b))["records"])
    await fill(client, 2, 2, first=3)
    delivered += seen((await poll(client, b))["records"])
    resp = await client.delete(f"{G}/members/{b}")
    assert resp.status == 204
    rest = await poll(client, a)
    delivered += seen(rest["records"])
    assert partitions(rest) == {("t", 0), ("t", 1)}
    assert sorted(delivered) == [(p, o) for p in range(2) for o in range(5)]
    await problem(await client.delete(f"{G}/members/{b}"), 404, "UNKNOWN_MEMBER")
    await problem(await client.get(f"{G}/members/{b}/records"), 404, "UNKNOWN_MEMBER")


async def test_an_expired_member_is_fenced_and_its_partitions_redelivered(
    start: Start,
) -> None:
    client = await start(group_min_session_timeout_ms=50)
    await create_topic(client, "t", 2)
    await fill(client, 3, 2)
    a = (await join(client, session_timeout_ms=60_000, auto_commit=False))["member_id"]
    joined = await join(client, session_timeout_ms=100, auto_commit=False)
    b, ((_, moved),) = joined["member_id"], partitions(joined)
    await poll(client, a)
    b_got = await poll(client, b)
    assert seen(b_got["records"]) == [(moved, 0), (moved, 1), (moved, 2)]
    # b stops polling: a's fetch waits until b's session ends and b's partition moves to a
    a_got = await poll(client, a, timeout_ms=10_000)
    assert seen(a_got["records"]) == seen(b_got["records"])  # uncommitted: redelivered
    await problem(await client.get(f"{G}/members/{b}/records"), 404, "UNKNOWN_MEMBER")
    await problem(await client.post(f"{G}/members/{b}/commit"), 404, "UNKNOWN_MEMBER")
    assert [m["member_id"] for m in (await describe_group(client))["members"]] == [a]


async def test_a_member_fetching_is_never_expired(start: Start) -> None:
    client = await start(group_min_session_timeout_ms=50)
    await create_topic(client, "t", 1)
    a = (await join(client, session_timeout_ms=60))["member_id"]
    got = await poll(client, a, timeout_ms=300)  # parked for 5 sessions
    assert got["records"] == []
    assert a in gateway(client).groups.groups["g"].members


async def test_a_newer_fetch_answers_an_older_parked_one(client: Client) -> None:
    await create_topic(client, "t", 1)
    a = (await join(client))["member_id"]
    old = asyncio.ensure_future(poll(client, a, timeout_ms=10_000))
    await wait_until(lambda: parked_member(client, a))
    new = asyncio.ensure_future(poll(client, a, timeout_ms=10_000))
    assert (await old)["records"] == []
    await wait_until(lambda: parked_member(client, a))
    await fill(client, 1, 1)
    assert seen((await new)["records"]) == [(0, 0)]


async def test_auto_offset_reset(client: Client) -> None:
    await create_topic(client, "t", 1)
    await fill(client, 3, 1)
    latest = (await join(client, "late", auto_offset_reset="latest"))["member_id"]
    assert (await poll(client, latest, group="late"))["records"] == []
    await fill(client, 1, 1, first=3)
    assert seen((await poll(client, latest, group="late"))["records"]) == [(0, 3)]
    strict = (await join(client, "strict", auto_offset_reset="none"))["member_id"]
    resp = await client.get(f"/v1/groups/strict/members/{strict}/records?timeout_ms=0")
    body = await problem(resp, 409, "NO_COMMITTED_OFFSET")
    assert (body["topic"], body["partition"]) == ("t", 0)
    resp = await client.post(
        f"/v1/groups/strict/members/{strict}/commit",
        json={"offsets": [{"topic": "t", "partition": 0, "offset": 2}]},
    )
    assert resp.status == 200
    assert seen((await poll(client, strict, group="strict"))["records"]) == [(0, 2), (0, 3)]


async def test_a_committed_offset_below_the_log_start_resets(client: Client) -> None:
    await create_topic(client, "t", 1)
    await fill(client, 4, 1)
    a = (await join(client, auto_commit=False))["member_id"]
    await client.post(
        f"{G}/members/{a}/commit", json={"offsets": [{"topic": "t", "partition": 0, "offset": 1}]}
    )
    await client.delete(f"{G}/members/{a}")
    resp = await client.post("/v1/topics/t/partitions/0/delete-records", json={"before_offset": 3})
    assert resp.status == 200
    b = (await join(client))["member_id"]
    assert seen((await poll(client, b))["records"]) == [(0, 3)]


# -- commits ----------------------------------------------------------------------------------


async def test_commit_bad_input(client: Client) -> None:
    await create_topic(client, "t", 2)
    await fill(client, 2, 2)
    a = (await join(client))["member_id"]
    b = (await join(client))["member_id"]
    ((_, mine),) = partitions(await poll(client, a))  # a gives the other partition to b
    url = f"{G}/members/{a}/commit"

    def body(**item: object) -> dict[str, object]:
        return {"offsets": [{"topic": "t", "partition": mine, "offset": 1, **item}]}

    await problem(
        await client.post(url, json=body(partition=1 - mine)), 409, "PARTITION_NOT_ASSIGNED"
    )
    await problem(await client.post(url, json=body(topic="nope")), 409, "PARTITION_NOT_ASSIGNED")
    await problem(await client.post(url, json=body(offset=-1)), 400, "INVALID_PARAMETER")
    await problem(await client.post(url, json=body(offset=3)), 416, "OFFSET_OUT_OF_RANGE")
    await problem(await client.post(url, json=body(offset="1")), 400, "INVALID_PARAMETER")
    await problem(await client.post(url, json=body(offset=True)), 400, "INVALID_PARAMETER")
    await problem(await client.post(url, json=body(metadata=7)), 400, "BAD_REQUEST")
    await problem(await client.post(url, json=body(extra=1)), 400, "INVALID_REQUEST")
    await problem(await client.post(url, json={"offsets": []}), 400, "BAD_REQUEST")
    await problem(await client.post(url, json={"offsets": [1]}), 400, "BAD_REQUEST")
    await problem(await client.post(url, json={"nope": 1}), 400, "INVALID_REQUEST")
    await problem(await client.post(url, json=[1]), 400, "INVALID_JSON")
    await problem(
        await client.post(url, data=b"{", headers={"Content-Type": "application/json"}),
        400,
        "INVALID_JSON",
    )
    await problem(
        await client.post(url, data=b"x", headers={"Content-Type": "text/plain"}),
        415,
        "UNSUPPORTED_MEDIA_TYPE",
    )
    stale = {**body(), "generation": 1}
    await problem(await client.post(url, json=stale), 409, "STALE_GENERATION")
    ok = await client.post(url, json={**body(offset=2), "generation": 2})
    assert ok.status == 200, await ok.text()
    await problem(await client.post(f"{G}/members/nobody/commit"), 404, "UNKNOWN_MEMBER")
    await problem(await client.post(f"/v1/groups/none/members/{b}/commit"), 404, "UNKNOWN_MEMBER")
    assert (await describe_group(client))["partitions"][mine]["committed_offset"] == 2


async def test_concurrent_commits_all_land(client: Client) -> None:
    await create_topic(client, "t", 4)
    await fill(client, 50, 4)
    members = [(await join(client, auto_commit=False))["member_id"] for _ in range(4)]
    for m in members:
        await poll(client, m)  # settle: each owns one partition
    owned = {m: next(iter(partitions(await poll(client, m)))) for m in members}

    async def commit(member: str, offset: int) -> int:
        topic, p = owned[member]
        resp = await client.post(
            f"{G}/members/{member}/commit",
            json={"offsets": [{"topic": topic, "partition": p, "offset": offset}]},
        )
        return resp.status

    statuses = await asyncio.gather(*(commit(m, o) for o in range(1, 51) for m in members))
    assert set(statuses) == {200}
    burst = [p["committed_offset"] for p in (await describe_group(client))["partitions"]]
    assert all(1 <= offset <= 50 for offset in burst)  # one of each member's, never a mix-up
    # concurrent requests land in any order; a commit after the burst is the one that stays
    assert set(await asyncio.gather(*(commit(m, 50) for m in members))) == {200}
    described = await describe_group(client)
    assert [p["committed_offset"] for p in described["partitions"]] == [50, 50, 50, 50]
    assert described["lag"] == 0


# -- offsets reset, views ---------------------------------------------------------------------


async def test_reset_offsets(client: Client) -> None:
    await create_topic(client, "t", 2)
    await fill(client, 4, 2)
    url = f"{G}/offsets"
    resp = await client.put(url, json={"topic": "t", "to": "latest"})
    assert resp.status == 200
    assert (await resp.json())["offsets"] == [
        {"topic": "t", "partition": 0, "offset": 4},
        {"topic": "t", "partition": 1, "offset": 4},
    ]
    resp = await client.put(url, json={"topic": "t", "partitions": [1], "to": 2})
    assert (await resp.json())["offsets"] == [{"topic": "t", "partition": 1, "offset": 2}]
    resp = await client.put(url, json={"topic": "t", "to": {"timestamp": now_ms() + 60_000}})
    assert [o["offset"] for o in (await resp.json())["offsets"]] == [4, 4]
    resp = await client.put(url, json={"topic": "t", "to": {"timestamp": 0}})
    assert [o["offset"] for o in (await resp.json())["offsets"]] == [0, 0]
    resp = await client.put(url, json={"topic": "t", "to": "earliest", "partitions": [0]})
    assert resp.status == 200
    await problem(await client.put(url, json={"topic": "t", "to": 5}), 416, "OFFSET_OUT_OF_RANGE")
    for bad in ("first", -1, True, None, 1.5, {"timestamp": -1}, {"ts": 1}):
        resp = await client.put(url, json={"topic": "t", "to": bad})
        assert resp.status == 400, bad
    await problem(
        await client.put(url, json={"topic": "t", "partitions": [7], "to": 0}),
        404,
        "UNKNOWN_PARTITION",
    )
    await problem(
        await client.put(url, json={"topic": "t", "partitions": [], "to": 0}), 400, "BAD_REQUEST"
    )
    await problem(await client.put(url, json={"topic": "nope", "to": 0}), 404, "UNKNOWN_TOPIC")
    await problem(await client.put(url, json={"to": 0}), 400, "INVALID_TOPIC_NAME")
    a = (await join(client))["member_id"]
    await problem(await client.put(url, json={"topic": "t", "to": 0}), 409, "GROUP_NOT_EMPTY")
    expected = [(p, o) for p in range(2) for o in range(4)]  # both back at 0
    assert seen((await poll(client, a))["records"]) == expected


async def test_list_and_describe(client: Client) -> None:
    await create_topic(client, "t", 2)
    await fill(client, 3, 2)
    await problem(await client.get(G), 404, "UNKNOWN_GROUP")
    assert (await (await client.get("/v1/groups")).json()) == {"groups": []}
    a = (await join(client))["member_id"]
    await poll(client, a, max_records=2)
    await poll(client, a, max_records=1)
    described = await describe_group(client)
    assert described["group"] == "g"
    assert described["state"] == "Stable"
    assert described["generation"] == 1
    assert described["members"] == [
        {
            "member_id": a,
            "topics": ["t"],
            "session_timeout_ms": 45_000,
            "assignment": [{"topic": "t", "partitions": [0, 1]}],
        }
    ]
    rows = {p["partition"]: p for p in described["partitions"]}
    assert sum(1 for p in rows.values() if p["committed_offset"] is not None) >= 1
    assert described["lag"] == sum(p["lag"] or 0 for p in rows.values())
    assert all(p["log_end_offset"] == 3 and p["owner"] == a for p in rows.values())
    listed = await (await client.get("/v1/groups")).json()
    assert listed == {"groups": [{"group": "g", "state": "Stable", "members": 1}]}
    await client.delete(f"{G}/members/{a}")
    assert (await describe_group(client))["state"] == "Empty"


# -- bad input at join and fetch --------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({}, 400, "BAD_REQUEST"),
        ({"topics": []}, 400, "BAD_REQUEST"),
        ({"topics": "t"}, 400, "BAD_REQUEST"),
        ({"topics": [1]}, 400, "INVALID_TOPIC_NAME"),
        ({"topics": ["bad name"]}, 400, "INVALID_TOPIC_NAME"),
        ({"topics": ["nope"]}, 404, "UNKNOWN_TOPIC"),
        ({"topics": ["t"], "session_timeout_ms": 10}, 400, "INVALID_PARAMETER"),
        ({"topics": ["t"], "session_timeout_ms": 10**12}, 400, "INVALID_PARAMETER"),
        ({"topics": ["t"], "session_timeout_ms": "1000"}, 400, "INVALID_PARAMETER"),
        ({"topics": ["t"], "auto_offset_reset": "smallest"}, 400, "INVALID_PARAMETER"),
        ({"topics": ["t"], "auto_offset_reset": ["earliest"]}, 400, "INVALID_PARAMETER"),
        ({"topics": ["t"], "auto_commit": "yes"}, 400, "INVALID_PARAMETER"),
        ({"topics": ["t"], "assignor": "sticky"}, 400, "INVALID_PARAMETER"),
        ({"topics": ["t"], "assignor": {}}, 400, "INVALID_PARAMETER"),
        ({"topics": ["t"], "client_id": "x"}, 400, "INVALID_REQUEST"),
    ],
)
async def test_join_bad_input(client: Client, body: dict[str, Any], status: int, code: str) -> None:
    await create_topic(client, "t", 1)
    await problem(await client.post(f"{G}/members", json=body), status, code)
    assert (
        gateway(client).groups.groups.get("g") is None
        or not gateway(client).groups.groups["g"].members
    )


async def test_join_bad_requests(client: Client) -> None:
    await create_topic(client, "t", 1)
    await problem(
        await client.post(f"{G}/members", data=b"{", headers={"Content-Type": "application/json"}),
        400,
        "INVALID_JSON",
    )
    await problem(await client.post(f"{G}/members", data=b"{}"), 415, "UNSUPPORTED_MEDIA_TYPE")
    long_id = "g" * 256
    await problem(
        await client.post(f"/v1/groups/{long_id}/members", json={"topics": ["t"]}),
        400,
        "INVALID_GROUP_ID",
    )
    await problem(await client.get("/v1/groups/%01"), 400, "INVALID_GROUP_ID")


async def test_fetch_bad_input(client: Client) -> None:
    await create_topic(client, "t", 1)
    a = (await join(client))["member_id"]
    url = f"{G}/members/{a}/records"
    for params in (
        {"max_records": "0"},
        {"max_bytes": "x"},
        {"timeout_ms": "-1"},
        {"min_bytes": "1e3"},
        {"timeout_ms": str(10**9)},
    ):
        await problem(await client.get(url, params=params), 400, "INVALID_PARAMETER")
    await problem(await client.get(url, headers={"Accept": "text/csv"}), 406, "NOT_ACCEPTABLE")
    await problem(await client.get(f"{G}/members/nobody/records"), 404, "UNKNOWN_MEMBER")
    await problem(await client.get(f"/v1/groups/other/members/{a}/records"), 404, "UNKNOWN_MEMBER")


# -- topics change under a group --------------------------------------------------------------


async def test_new_partitions_are_assigned(client: Client) -> None:
    await create_topic(client, "t", 1)
    a = (await join(client))["member_id"]
    generation = (await poll(client, a))["generation"]
    resp = await client.patch("/v1/topics/t", json={"partitions": 3})
    assert resp.status == 200
    await produce(client, [{"value": 1}], partition=2)
    got = await poll(client, a, timeout_ms=5_000)
    assert partitions(got) == {("t", 0), ("t", 1), ("t", 2)}
    assert got["generation"] == generation + 1
    assert seen(got["records"]) == [(2, 0)]


async def test_deleting_a_topic_drops_its_offsets(client: Client) -> None:
    await create_topic(client, "t", 1)
    await create_topic(client, "u", 1)
    await produce(client, [{"value": 1}], topic="u")
    a = (await join(client, topics=["t", "u"]))["member_id"]
    await poll(client, a)
    await client.post(f"{G}/members/{a}/commit")
    assert {p["topic"] for p in (await describe_group(client))["partitions"]} == {"t", "u"}
    assert (await client.delete("/v1/topics/u")).status == 204
    got = await poll(client, a)
    assert partitions(got) == {("t", 0)}
    described = await describe_group(client)
    assert {p["topic"] for p in described["partitions"]} == {"t"}
    assert ("u", 0) not in gateway(client).groups.groups["g"].offsets


# -- the internal topic and restarts ----------------------------------------------------------


async def test_offsets_topic_is_internal_and_readable(client: Client) -> None:
    await create_topic(client, "t", 1)
    await fill(client, 2, 1)
    a = (await join(client))["member_id"]
    await poll(client, a)
    await client.post(f"{G}/members/{a}/commit")
    assert "__consumer_offsets" not in [
        t["name"] for t in (await (await client.get("/v1/topics")).json())["topics"]
    ]
    listed = await (await client.get("/v1/topics?internal=true")).json()
    assert {"name": OFFSETS_TOPIC, "partitions": 50} in listed["topics"]
    base = f"/v1/topics/{OFFSETS_TOPIC}"
    partition = partition_for("g", 50)
    resp = await client.get(f"{base}/partitions/{partition}/records?timeout_ms=0")
    records = (await resp.json())["records"]
    assert records[-1]["key"] == '["offset","g","t",0]'
    assert records[-1]["value"]["offset"] == 2
    await problem(
        await client.post(f"{base}/records", json={"records": [{"value": 1}]}),
        403,
        "INTERNAL_TOPIC",
    )
    await problem(await client.delete(base), 403, "INTERNAL_TOPIC")
    await problem(await client.patch(base, json={"partitions": 60}), 403, "INTERNAL_TOPIC")
    await problem(
        await client.post(f"{base}/partitions/0/delete-records", json={"before_offset": 0}),
        403,
        "INTERNAL_TOPIC",
    )
    await problem(await client.get("/v1/topics?internal=yes"), 400, "INVALID_PARAMETER")


async def test_groups_survive_a_restart(start: Start) -> None:
    """Offsets, generation and members come back; a member carries on with its id from the
    committed offsets (what was delivered but not committed comes again)."""
    client = await start()
    await create_topic(client, "t", 2)
    await fill(client, 3, 2)
    a = (await join(client, auto_commit=False))["member_id"]
    joined = await join(client, auto_commit=False)
    b, (b_partition,) = joined["member_id"], partitions(joined)
    a_partition = 1 - b_partition[1]
    await poll(client, a)
    await poll(client, b)
    await client.post(
        f"{G}/members/{a}/commit",
        json={"offsets": [{"topic": "t", "partition": a_partition, "offset": 2}]},
    )
    before = await describe_group(client)
    await client.close()
    client = await start()
    after = await describe_group(client)
    assert after == before
    again = await poll(client, a)
    assert seen(again["records"]) == [(a_partition, 2)]
    assert seen((await poll(client, b))["records"]) == [(b_partition[1], o) for o in range(3)]
    c = (await join(client))["member_id"]
    assert (await describe_group(client))["generation"] == before["generation"] + 1
    assert c != a


async def test_group_size_is_bounded(start: Start) -> None:
    client = await start(group_max_members=2)
    await create_topic(client, "t", 1)
    await join(client)
    await join(client)
    await problem(
        await client.post(f"{G}/members", json={"topics": ["t"]}), 409, "GROUP_MAX_SIZE_REACHED"
    )
    assert len((await describe_group(client))["members"]) == 2


async def test_group_metadata_must_fit_one_record(client: Client) -> None:
    """A member whose group record would pass max.message.bytes is refused, nothing changed."""
    names = [f"topic-{i:03d}-{'x' * 200}" for i in range(100)]
    for name in names:
        await create_topic(client, name, 1)
    resp = await client.patch(
        f"/v1/topics/{OFFSETS_TOPIC}", json={"configs": {"max.message.bytes": 20_000}}
    )
    assert resp.status == 200, await resp.text()
    await join(client, topics=names[:10])
    resp = await client.post(f"{G}/members", json={"topics": names})
    await problem(resp, 413, "GROUP_METADATA_TOO_LARGE")
    described = await describe_group(client)
    assert (len(described["members"]), described["generation"]) == (1, 1)


async def test_a_static_member_rejoins_without_a_rebalance(client: Client) -> None:
    """instance_id (Kafka's group.instance.id) names the member; joining again with it is a
    restarted client: same partitions, same generation, uncommitted records again."""
    await create_topic(client, "t", 2)
    await create_topic(client, "u", 1)
    await fill(client, 2, 2)
    first = await join(client, instance_id="worker-1", auto_commit=False)
    other = await join(client, instance_id="worker-2")
    assert (first["member_id"], other["member_id"]) == ("worker-1", "worker-2")
    await poll(client, "worker-2")
    delivered = await poll(client, "worker-1")
    assert len(delivered["records"]) == 2
    parked = asyncio.ensure_future(poll(client, "worker-1", timeout_ms=10_000))
    await wait_until(lambda: parked_member(client, "worker-1"))
    again = await join(client, instance_id="worker-1", auto_commit=False)
    assert (await parked)["records"] == []  # the old process's fetch ends
    assert again["generation"] == other["generation"]
    assert partitions(again) == partitions(delivered)
    assert seen((await poll(client, "worker-1"))["records"]) == seen(delivered["records"])
    moved = await join(client, instance_id="worker-1", topics=["t", "u"])
    assert moved["generation"] == other["generation"] + 1
    assert ("u", 0) in partitions(moved)
    for bad in ("", "a/b", "x" * 256, 7, "tab\there"):
        resp = await client.post(f"{G}/members", json={"topics": ["t"], "instance_id": bad})
        await problem(resp, 400, "INVALID_PARAMETER")


async def test_auto_commits_reach_the_log_in_time_and_at_shutdown(start: Start) -> None:
    client = await start()
    await create_topic(client, "t", 1)
    await fill(client, 3, 1)
    a = (await join(client))["member_id"]
    await poll(client, a)
    offsets_log = gateway(client).broker.manager.log(OFFSETS_TOPIC, partition_for("g", 50))
    end = offsets_log.log_end_offset
    await poll(client, a)  # commits 3, in memory at once, in the log within a second
    assert (await describe_group(client))["partitions"][0]["committed_offset"] == 3
    assert offsets_log.log_end_offset == end
    await wait_until(lambda: offsets_log.log_end_offset > end)
    await fill(client, 2, 1, first=3)
    await poll(client, a)
    await poll(client, a)  # commits 5 in memory; a clean shutdown writes it
    await client.close()
    client = await start()
    assert (await describe_group(client))["partitions"][0]["committed_offset"] == 5


async def test_a_member_waiting_for_partitions_counts_as_parked(client: Client) -> None:
    await create_topic(client, "t", 2)
    await fill(client, 1, 2)
    a = (await join(client))["member_id"]
    await poll(client, a)  # a was delivered offset 0 of both and has not committed them
    joined = await join(client)  # b owns nothing until a fetches again
    b, ((_, moved),) = joined["member_id"], partitions(joined)
    waiting = asyncio.ensure_future(poll(client, b, timeout_ms=10_000))
    await wait_until(lambda: parked_member(client, b))
    assert gateway(client).notifier.parked == 1
    await fill(client, 1, 2, first=1)
    await poll(client, a)  # commits, gives `moved` up: b wakes
    assert seen((await waiting)["records"]) == [(moved, 1)]
    assert gateway(client).notifier.parked == 0


async def test_group_metrics(client: Client) -> None:
    await create_topic(client, "t", 2)
    await fill(client, 3, 2)
    a = (await join(client, auto_commit=False))["member_id"]
    await poll(client, a, max_records=4)
    await client.post(f"{G}/members/{a}/commit")
    scraped = await metrics(client)
    group = frozenset({("group", "g")})
    assert scraped[("sluice_group_members", group)] == 1
    assert scraped[("sluice_group_generation", group)] == 1
    assert scraped[("sluice_group_lag", group)] == 2


async def test_unreadable_group_metadata_keeps_the_offsets(start: Start) -> None:
    """A group record a newer or broken writer left behind costs the members, not offsets."""
    client = await start()
    await create_topic(client, "t", 1)
    await fill(client, 2, 1)
    resp = await client.put(f"{G}/offsets", json={"topic": "t", "to": 1})
    assert resp.status == 200
    coordinator = gateway(client).groups
    coordinator.log.append("g", [(group_key("g"), b'{"generation": 3, "members": [{"id": 1}]}')])
    await client.close()
    client = await start()
    described = await describe_group(client)
    assert described["members"] == []
    assert described["partitions"][0]["committed_offset"] == 1


async def test_sessions_stop_running_out_at_shutdown(client: Client) -> None:
    """Once shutdown begins no member expires, so a restart finds every member."""
    await create_topic(client, "t", 1)
    a = (await join(client))["member_id"]
    gateway(client).groups.close()
    await poll(client, a)  # a request that ends during the drain
    assert member_state(client, a).expiry is None


async def test_a_lost_answer_is_delivered_again_when_the_cursor_says_so(client: Client) -> None:
    """Positions live on the server: a client that echoes the cursor of the last answer it
    received gets a lost answer's records again, and auto-commit never commits them."""
    await create_topic(client, "t", 1)
    await fill(client, 10, 1)
    joined = await join(client)
    a, cursor = joined["member_id"], joined["cursor"]

    async def offsets(cursor: int) -> tuple[list[int], int]:
        got = await poll(client, a, max_records=2, cursor=cursor)
        return [r["offset"] for r in got["records"]], got["cursor"]

    async def committed() -> int | None:
        value: int | None = (await describe_group(client))["partitions"][0]["committed_offset"]
        return value

    first, c1 = await offsets(cursor)
    assert (first, c1) == ([0, 1], (cursor + 1) % 2**31)
    assert (await offsets(c1))[0] == [2, 3]  # this answer is lost on the way
    again, c3 = await offsets(c1)
    assert again == [2, 3]
    assert await committed() == 2
    # the answers after c3 are lost twice in a row: back to the committed offset
    assert (await offsets(c3))[0] == [4, 5]
    assert (await offsets(c3))[0] == [4, 5]
    assert await committed() == 4
    assert (await offsets(c3))[0] == [4, 5]
    for bad in ("-1", "x", str(2**31)):
        resp = await client.get(f"{G}/members/{a}/records", params={"cursor": bad})
        await problem(resp, 400, "INVALID_PARAMETER")


async def test_requests_renew_the_session(start: Start) -> None:
    """Back-to-back fetches keep a member with a 200 ms session for far longer than that; a
    static member rejoining with a shorter session expires by the shorter one."""
    client = await start(group_min_session_timeout_ms=50)
    await create_topic(client, "t", 1)
    a = (await join(client, session_timeout_ms=200))["member_id"]
    for _ in range(6):
        await poll(client, a, timeout_ms=100)
    assert a in gateway(client).groups.groups["g"].members
    await join(client, instance_id="s", session_timeout_ms=60_000)
    await join(client, instance_id="s", session_timeout_ms=100)
    members = gateway(client).groups.groups["g"].members
    await wait_until(lambda: "s" not in members, timeout=5)


async def test_a_topic_made_again_is_assigned_again(client: Client) -> None:
    """A group keeps reading a deleted topic's name: when the topic is created again, the next
    fetch carries its partitions (the rebalance comes from the create, not from polling)."""
    await create_topic(client, "t", 1)
    await create_topic(client, "u", 1)
    a = (await join(client, topics=["t", "u"]))["member_id"]
    await poll(client, a)
    assert (await client.delete("/v1/topics/u")).status == 204
    assert partitions(await poll(client, a)) == {("t", 0)}
    await create_topic(client, "u", 2)
    await produce(client, [{"value": 1}], topic="u", partition=1)
    got = await poll(client, a, timeout_ms=5_000)
    assert partitions(got) == {("t", 0), ("u", 0), ("u", 1)}
    assert seen(got["records"]) == [(1, 0)]


async def test_an_empty_group_is_deleted_for_good(start: Start) -> None:
    client = await start()
    await create_topic(client, "t", 2)
    await fill(client, 2, 2)
    member = (await join(client, auto_commit=False))["member_id"]
    await poll(client, member)
    await client.post(
        f"{G}/members/{member}/commit",
        json={"offsets": [{"topic": "t", "partition": 0, "offset": 1}]},
    )
    busy = await client.delete(G)
    body = await problem(busy, 409, "GROUP_NOT_EMPTY")
    assert "1 active members" in body["detail"]
    assert (await client.delete(f"{G}/members/{member}")).status == 204
    assert (await client.delete(G)).status == 204
    await problem(await client.get(G), 404, "UNKNOWN_GROUP")
    await problem(await client.delete(G), 404, "UNKNOWN_GROUP")
    await client.close()
    client = await start()  # the replay of __consumer_offsets forgets it too
    await problem(await client.get(G), 404, "UNKNOWN_GROUP")
    assert (await (await client.get("/v1/groups")).json())["groups"] == []
    again = await join(client, auto_offset_reset="earliest")
    assert (await describe_group(client))["generation"] == 1
    assert again["member_id"]


async def test_a_group_cannot_consume_an_internal_topic(client: Client) -> None:
    await create_topic(client, "t")
    response = await client.post(f"{G}/members", json={"topics": ["t", "__consumer_offsets"]})
    await problem(response, 403, "INTERNAL_TOPIC")
    await problem(await client.get(G), 404, "UNKNOWN_GROUP")


async def test_offsets_of_empty_groups_expire(start: Start) -> None:
    """Kafka's offsets.retention.minutes: old offsets of a group without members go (with
    tombstones, so a restart forgets them too); a group with members keeps its own."""
    client = await start()
    await create_topic(client, "t", 2)
    for name in ("idle", "busy"):
        member = (await join(client, group=name, auto_commit=False))["member_id"]
        committed = await client.post(
            f"/v1/groups/{name}/members/{member}/commit",
            json={"offsets": [{"topic": "t", "partition": 0, "offset": 0}]},
        )
        assert committed.status == 200, await committed.text()
        if name == "idle":
            assert (await client.delete(f"/v1/groups/{name}/members/{member}")).status == 204
    groups = gateway(client).groups
    later = groups.groups["idle"].offsets[("t", 0)].commit_timestamp + 60_001
    assert groups.expire_offsets(later - 2, retention_ms=60_000) == 0  # not old enough yet
    assert groups.expire_offsets(later, retention_ms=60_000) == 1
    await problem(await client.get("/v1/groups/idle"), 404, "UNKNOWN_GROUP")
    assert (await describe_group(client, "busy"))["partitions"][0]["committed_offset"] == 0
    await client.close()
    client = await start()
    await problem(await client.get("/v1/groups/idle"), 404, "UNKNOWN_GROUP")
