"""A consumer group's Server-Sent Events (`GET /v1/topics/{topic}/events?group=NAME`): the
stream is a member of the group; streams share its partitions, commit what they were sent,
leave when they go, a Last-Event-ID takes a stream's partitions back to where it was, and
a read_committed stream sends only committed records."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import ClientResponse

from tests.api.support import Client, create_topic, gateway, problem, produce, wait_until
from tests.api.test_events import SSE, Event, data, read_events
from tests.api.test_transactions import begin, end, in_txn

G = "/v1/groups/g"


async def group_stream(
    client: Client, headers: dict[str, str] | None = None, **params: str | int
) -> ClientResponse:
    query = {"group": "g", "offset": "earliest", "heartbeat_ms": "200", **params}
    resp = await client.get(
        "/v1/topics/t/events",
        params={k: str(v) for k, v in query.items()},
        headers={**SSE, **(headers or {})},
    )
    assert resp.status == 200, await resp.text()
    return resp


async def committed(client: Client) -> dict[int, int]:
    resp = await client.get(G)
    assert resp.status == 200, await resp.text()
    doc = await resp.json()
    return {
        row["partition"]: row["committed_offset"]
        for row in doc["partitions"]
        if row["committed_offset"] is not None
    }


def members(client: Client) -> int:
    group = gateway(client).groups.groups.get("g")
    return 0 if group is None else len(group.members)


def records(got: list[Event]) -> list[dict[str, Any]]:
    return [data(e) for e in got if e["event"] == "record"]


async def test_a_stream_joins_the_group_and_commits_what_it_was_sent(client: Client) -> None:
    await create_topic(client, partitions=2)
    await produce(client, [{"key": f"k{n}", "value": n} for n in range(10)])
    resp = await group_stream(client, max_events=10)
    got = await read_events(resp, 11)
    assert got[0]["event"] == "assignment"
    assert data(got[0])["partitions"] == [0, 1] and data(got[0])["generation"] >= 1
    values = sorted(r["value"] for r in records(got))
    assert values == list(range(10))
    ends = {r["partition"]: r["offset"] + 1 for r in records(got)}
    assert got[-1]["id"] == ".".join(f"{p}-{o}" for p, o in sorted(ends.items()))
    await wait_until(lambda: members(client) == 0)  # it left when the stream ended
    assert await committed(client) == ends
    await produce(client, [{"value": 10}])
    again = await read_events(await group_stream(client, max_events=1), 2)
    assert [r["value"] for r in records(again)] == [10]  # the group goes on: nothing twice


async def test_two_streams_share_the_partitions_and_each_record_comes_once(
    client: Client,
) -> None:
    await create_topic(client, partitions=2)
    first = await group_stream(client)
    [assigned] = await read_events(first, 1)
    assert data(assigned)["partitions"] == [0, 1]
    second = await group_stream(client)
    [theirs] = await read_events(second, 1)
    ours = await read_events(first, 1)  # the rebalance reaches the first stream's member
    assert ours[0]["event"] == "assignment"
    split = (data(ours[0])["partitions"], data(theirs)["partitions"])
    assert sorted(split[0] + split[1]) == [0, 1] and split[0] and split[1]
    for n in range(8):
        await produce(client, [{"value": n}], partition=n % 2)
    a = records(await read_events(first, 4))
    b = records(await read_events(second, 4))
    assert {r["partition"] for r in a} == set(split[0])
    assert {r["partition"] for r in b} == set(split[1])
    assert sorted(r["value"] for r in a + b) == list(range(8))
    first.close()
    await wait_until(lambda: members(client) == 1)  # gone: its partitions move on
    await produce(client, [{"value": 8}], partition=split[0][0])
    rest = records(await read_events(second, 2))
    assert [r["value"] for r in rest] == [8]
    second.close()


async def test_last_event_id_takes_the_partitions_back_to_where_the_client_was(
    client: Client,
) -> None:
    """Committed past what the client got (written but lost with the connection): sought
    back, they come again; behind it (received but not committed): not sent twice."""
    await create_topic(client)
    await produce(client, [{"value": n} for n in range(6)])
    got = records(await read_events(await group_stream(client, max_events=6), 7))
    assert [r["value"] for r in got] == list(range(6))
    await wait_until(lambda: members(client) == 0)
    assert await committed(client) == {0: 6}
    lost = await group_stream(client, max_events=3, headers={"Last-Event-ID": "0-3"})
    assert [r["value"] for r in records(await read_events(lost, 4))] == [3, 4, 5]
    await wait_until(lambda: members(client) == 0)
    resp = await client.put(f"{G}/offsets", json={"topic": "t", "to": "earliest"})
    assert resp.status == 200, await resp.text()
    ahead = await group_stream(client, max_events=2, headers={"Last-Event-ID": "0-4"})
    assert [r["value"] for r in records(await read_events(ahead, 3))] == [4, 5]


async def test_filtered_records_are_skipped_and_still_committed(client: Client) -> None:
    await create_topic(client)
    await produce(client, [{"key": k, "value": n} for n, k in enumerate(["a1", "b1", "b2", "a2"])])
    got = records(await read_events(await group_stream(client, key_prefix="a", max_events=2), 3))
    assert [r["value"] for r in got] == [0, 3]
    await wait_until(lambda: members(client) == 0)
    assert await committed(client) == {0: 4}
    await produce(client, [{"key": "b3", "value": 4}, {"key": "a3", "value": 5}])
    more = records(await read_events(await group_stream(client, key_prefix="a", max_events=1), 2))
    assert [r["value"] for r in more] == [5]  # the filtered-out record before it passed


async def test_the_stream_shows_in_the_group_while_it_is_open(client: Client) -> None:
    await create_topic(client)
    resp = await group_stream(client)
    await read_events(resp, 1)
    described = await (await client.get(G)).json()
    [member] = described["members"]
    assert member["assignment"] == [{"topic": "t", "partitions": [0]}]
    resp.close()
    await wait_until(lambda: members(client) == 0)


@pytest.mark.parametrize(
    ("params", "headers", "status", "code"),
    [
        ({"group": ""}, {}, 400, "INVALID_GROUP_ID"),
        ({"group": "a/b"}, {}, 400, "INVALID_GROUP_ID"),
        ({"group": "g", "cursor": "0-1"}, {}, 400, "INVALID_PARAMETER"),
        ({"group": "g", "partitions": "0"}, {}, 400, "INVALID_PARAMETER"),
        ({"group": "g", "timestamp": "5"}, {}, 400, "INVALID_PARAMETER"),
        ({"group": "g", "offset": "7"}, {}, 400, "INVALID_PARAMETER"),
        ({"group": "g", "session_timeout_ms": "1"}, {}, 400, "INVALID_PARAMETER"),
        ({"group": "g", "isolation": "committed"}, {}, 400, "INVALID_PARAMETER"),
        ({"group": "g"}, {"Last-Event-ID": "0-x"}, 400, "INVALID_CURSOR"),
        ({"group": "g"}, {"Last-Event-ID": "5-1"}, 400, "INVALID_CURSOR"),
    ],
)
async def test_bad_group_streams_are_problems(
    client: Client, params: dict[str, str], headers: dict[str, str], status: int, code: str
) -> None:
    await create_topic(client)
    resp = await client.get("/v1/topics/t/events", params=params, headers={**SSE, **headers})
    await problem(resp, status, code)
    assert members(client) == 0


async def test_an_unknown_topic_is_a_problem_and_joins_nothing(client: Client) -> None:
    await create_topic(client)
    resp = await client.get("/v1/topics/nope/events", params={"group": "g"}, headers=SSE)
    await problem(resp, 404, "UNKNOWN_TOPIC")
    assert members(client) == 0


async def test_a_read_committed_stream_sends_only_committed_records(client: Client) -> None:
    await create_topic(client)
    epoch = (await begin(client))["producer_epoch"]
    await produce(client, [{"value": "gone"}], params=in_txn(epoch))
    await end(client, "abort", epoch)
    epoch = (await begin(client))["producer_epoch"]
    await produce(client, [{"value": "kept"}], params=in_txn(epoch))
    await produce(client, [{"value": "plain"}])
    resp = await group_stream(client, isolation="read_committed", max_events=2)
    [assigned] = await read_events(resp, 1)
    assert assigned["event"] == "assignment"
    await end(client, "commit", epoch)
    got = records(await read_events(resp, 2))
    assert [(r["value"], r["offset"]) for r in got] == [("kept", 2), ("plain", 3)]
    await wait_until(lambda: members(client) == 0)
    assert await committed(client) == {0: 4}
