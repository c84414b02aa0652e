"""The leader's side of fetch sessions (KIP-227), in process: node 1 is a follower on paper
(partition states naming it), and the test plays it by posting session fetches as its fetcher
would. Bad bodies, session errors, full and incremental answers, the long-poll's one waiter.
Then this node as the follower of a scripted leader: what its session requests say."""

from __future__ import annotations

import asyncio
import struct
from dataclasses import replace
from typing import Any

from aiohttp import web

from engine import batch as fmt
from replication.memory_store import MemoryMetadataStore
from replication.node_contract import SESSION_FETCH, SESSION_FETCH_ROUTE
from replication.session_wire import (
    FetchPosition,
    PartitionAnswer,
    SessionFetchAnswer,
    SessionFetchRequest,
    decode_answer,
    decode_request,
    encode_answer,
    encode_request,
)
from tests.api.support import Client, create_topic, gateway, parked, problem, produce, wait_until
from tests.api.test_internal import lead_elsewhere

FOLLOWER = 1
PARTITIONS = 4


async def follow_all(client: Client, topic: str = "t") -> int:
    """Make node 1 a live follower of every partition of `topic` in a new leader epoch (outside
    the ISR); the epoch."""
    broker = gateway(client).broker
    assert isinstance(broker.store, MemoryMetadataStore)
    backend = broker.store.backend
    backend.revive(FOLLOWER)
    epoch = 0
    with backend.transaction() as revision:
        for (name, p), state in list(backend.partitions.items()):
            if name == topic:
                epoch = state.leader_epoch + 1
                backend.partitions[(name, p)] = replace(
                    state, leader_epoch=epoch, replicas=(0, FOLLOWER), isr=(0,), version=revision
                )
    replicas = gateway(client).replicas
    await wait_until(
        lambda: all(
            p.leader_epoch == epoch for (name, _), p in replicas.partitions.items() if name == topic
        )
    )
    return epoch


def request(
    epoch: int,
    offsets: dict[int, int],
    *,
    session: tuple[int, int] = (0, 0),
    wait_ms: int = 0,
    max_bytes: int = 1 << 20,
    part_max: int = 1 << 20,
    forgotten: tuple[int, ...] = (),
) -> SessionFetchRequest:
    return SessionFetchRequest(
        FOLLOWER,
        session[0],
        session[1],
        wait_ms,
        1,
        max_bytes,
        {("t", p): FetchPosition(epoch, o, part_max) for p, o in offsets.items()},
        tuple(("t", p) for p in forgotten),
    )


async def post(client: Client, body: bytes, content_type: str = SESSION_FETCH) -> object:
    return await client.post(SESSION_FETCH_ROUTE, data=body, headers={"Content-Type": content_type})


async def session_fetch(client: Client, fetch: SessionFetchRequest) -> SessionFetchAnswer:
    resp = await post(client, encode_request(fetch))
    assert resp.status == 200, await resp.text()  # type: ignore[attr-defined]
    assert resp.content_type == SESSION_FETCH  # type: ignore[attr-defined]
    return decode_answer(await resp.read())  # type: ignore[attr-defined]


def offsets_of(data: bytes | memoryview) -> list[int]:
    return [h.base_offset for _, h in fmt.scan(data, check_crc=True).headers]


async def test_bad_session_fetches_are_problems(client: Client) -> None:
    await create_topic(client, partitions=PARTITIONS)
    epoch = await follow_all(client)
    good = encode_request(request(epoch, {0: 0}))
    await problem(await post(client, good, "application/json"), 415, "UNSUPPORTED_MEDIA_TYPE")
    for body, says in [
        (b"", "ends inside the request head"),
        (b"\x02" + good[1:], "version 2"),
        (good[:-3], "ends inside"),
        (good + b"x", "1 bytes after the last part"),
        (good[:1] + struct.pack(">i", -1) + good[5:], "replica is -1"),
        (good[:25] + struct.pack(">i", 10**6) + good[29:], "at most 100000"),
        (good[:29] + struct.pack(">H", 0) + good[31:], "a topic name of 0 bytes"),
    ]:
        body_json = await problem(await post(client, body), 400, "MALFORMED_SESSION_FETCH")
        assert says in body_json["detail"], (says, body_json)
    twice = request(epoch, {0: 0})
    doubled = encode_request(twice)
    head, part, tail = doubled[:25], doubled[29:-4], doubled[-4:]
    body_json = await problem(
        await post(client, head + struct.pack(">i", 2) + part + part + tail),
        400,
        "MALFORMED_SESSION_FETCH",
    )
    assert "t-0 appears twice" in body_json["detail"]
    too_long = encode_request(replace(request(epoch, {0: 0}), max_wait_ms=10**9))
    await problem(await post(client, too_long), 400, "INVALID_PARAMETER")


async def test_session_errors_ask_for_a_full_request(client: Client) -> None:
    await create_topic(client, partitions=PARTITIONS)
    epoch = await follow_all(client)
    unknown = encode_request(request(epoch, {}, session=(12345, 1)))
    await problem(await post(client, unknown), 404, "FETCH_SESSION_ID_NOT_FOUND")
    first = await session_fetch(client, request(epoch, {0: 0}))
    assert first.session_id > 0
    out_of_turn = encode_request(request(epoch, {}, session=(first.session_id, 2)))
    await problem(await post(client, out_of_turn), 409, "INVALID_FETCH_SESSION_EPOCH")
    # The session itself stands: its next request in turn is answered.
    await session_fetch(client, request(epoch, {}, session=(first.session_id, 1)))
    # A new full request replaces it: the old id is gone.
    second = await session_fetch(client, request(epoch, {0: 0}))
    assert second.session_id != first.session_id
    stale = encode_request(request(epoch, {}, session=(first.session_id, 2)))
    await problem(await post(client, stale), 404, "FETCH_SESSION_ID_NOT_FOUND")


async def test_full_then_incremental_answers(client: Client) -> None:
    await create_topic(client, partitions=PARTITIONS)
    for p in range(PARTITIONS):
        await produce(client, [{"value": p}], params={"acks": "1"}, partition=p)
    epoch = await follow_all(client)
    # Full: every partition, with its records from the offset asked and its marks.
    full = await session_fetch(client, request(epoch, dict.fromkeys(range(PARTITIONS), 0)))
    assert sorted(full.partitions) == [("t", p) for p in range(PARTITIONS)]
    for part in full.partitions.values():
        assert offsets_of(part.records) == [0]
        assert (part.high_watermark, part.log_start_offset, part.error_status) == (1, 0, 0)
    sid = full.session_id
    # Incremental, every partition caught up, no wait: nothing new, an empty answer.
    caught_up = dict.fromkeys(range(PARTITIONS), 1)
    empty = await session_fetch(client, request(epoch, caught_up, session=(sid, 1)))
    assert empty.partitions == {}
    # Records on partition 3: only it comes back, from the position the session holds.
    await produce(client, [{"value": "x"}], params={"acks": "1"}, partition=3)
    news = await session_fetch(client, request(epoch, {}, session=(sid, 2)))
    assert list(news.partitions) == [("t", 3)]
    assert offsets_of(news.partitions[("t", 3)].records) == [1]
    # Unchanged positions are not sent again: the leader still reads from them.
    again = await session_fetch(client, request(epoch, {}, session=(sid, 3)))
    assert offsets_of(again.partitions[("t", 3)].records) == [1]
    # A forgotten partition is read no more.
    await produce(client, [{"value": "y"}], params={"acks": "1"}, partition=1)
    gone = await session_fetch(client, request(epoch, {3: 2}, session=(sid, 4), forgotten=(1,)))
    assert ("t", 1) not in gone.partitions


async def test_one_parked_waiter_for_the_session_answered_by_any_partition(
    client: Client,
) -> None:
    await create_topic(client, partitions=PARTITIONS)
    epoch = await follow_all(client)
    full = await session_fetch(client, request(epoch, dict.fromkeys(range(PARTITIONS), 0)))
    before = parked(client)
    waiting = asyncio.ensure_future(
        session_fetch(client, request(epoch, {}, session=(full.session_id, 1), wait_ms=30_000))
    )
    await wait_until(lambda: parked(client) == before + 1)  # one, not one per partition
    await produce(client, [{"value": "z"}], params={"acks": "1"}, partition=2)
    answer = await asyncio.wait_for(waiting, 10)
    assert list(answer.partitions) == [("t", 2)]
    assert offsets_of(answer.partitions[("t", 2)].records) == [0]


async def test_a_new_full_request_releases_the_parked_one(client: Client) -> None:
    await create_topic(client, partitions=PARTITIONS)
    epoch = await follow_all(client)
    full = await session_fetch(client, request(epoch, {0: 0}))
    before = parked(client)
    waiting = asyncio.ensure_future(
        session_fetch(client, request(epoch, {}, session=(full.session_id, 1), wait_ms=30_000))
    )
    await wait_until(lambda: parked(client) == before + 1)
    await session_fetch(client, request(epoch, {0: 0}))
    released = await asyncio.wait_for(waiting, 10)
    assert released.partitions == {}
    assert parked(client) == before


async def test_answers_are_bounded_per_partition_and_in_all(client: Client) -> None:
    await create_topic(client, partitions=PARTITIONS)
    for p in range(PARTITIONS):
        for _ in range(3):
            await produce(client, [{"value": "v" * 200}], params={"acks": "1"}, partition=p)
    epoch = await follow_all(client)
    everything = dict.fromkeys(range(PARTITIONS), 0)
    # In all: the first batch of the first partition always comes whole (Kafka's rule, so that
    # a batch larger than the limits still moves); nothing past the limit after it.
    capped = await session_fetch(client, request(epoch, everything, max_bytes=10))
    assert [offsets_of(p.records) for p in capped.partitions.values()] == [[0], [], [], []]
    one = len(capped.partitions[("t", 0)].records)  # a batch's size: all are alike
    # Per partition: up to its own limit.
    per = await session_fetch(client, request(epoch, everything, part_max=2 * one))
    assert [len(offsets_of(p.records)) for p in per.partitions.values()] == [2] * PARTITIONS
    # In all: what is left after the first partitions, whole batches only.
    wide = await session_fetch(client, request(epoch, everything, max_bytes=3 * one + one // 2))
    assert [len(offsets_of(p.records)) for p in wide.partitions.values()] == [3, 0, 0, 0]
    # The partition that brought records goes last: the next answer starts with the others.
    sid = wide.session_id
    turn = await session_fetch(client, request(epoch, {}, session=(sid, 1), max_bytes=10))
    assert [k for k, p in turn.partitions.items() if p.records] == [("t", 1)]


async def test_a_partition_refused_comes_back_as_its_problem(client: Client) -> None:
    await create_topic(client, partitions=2)
    epoch = await follow_all(client)
    answer = await session_fetch(client, request(epoch, {0: 0, 1: 99}))
    ok, bad = answer.partitions[("t", 0)], answer.partitions[("t", 1)]
    assert ok.error_status == 0
    assert bad.error_status == 416 and b"OFFSET_OUT_OF_RANGE" in bad.error_body
    stale = await session_fetch(client, request(epoch - 1, {0: 0}))
    assert stale.partitions[("t", 0)].error_status == 409


class ScriptedLeader:
    """Node 1 as a leader of partitions this node follows: it answers epoch queries (nothing
    to truncate) and session fetches by `script` (one answer per request, then it parks), and
    keeps every session request it took."""

    def __init__(self, script: list[tuple[int, int]]) -> None:
        self.script = script  # (status, session id) per request
        self.requests: list[SessionFetchRequest] = []
        self.release = asyncio.Event()

    async def answer(self, request: web.BaseRequest) -> web.StreamResponse:
        if request.path.endswith("/epoch-end"):
            return web.json_response({"epoch": -1, "end_offset": -1})
        fetch = decode_request(await request.read())
        self.requests.append(fetch)
        if len(self.requests) > len(self.script):
            await self.release.wait()  # parked, as an idle leader would
            return web.Response(status=503)
        status, session = self.script[len(self.requests) - 1]
        if status != 200:
            code = "FETCH_SESSION_ID_NOT_FOUND"
            body = {"title": "gone", "status": status, "detail": code, "code": code}
            return web.json_response(body, status=status, content_type="application/problem+json")
        parts = {key: PartitionAnswer(0, 0) for key in fetch.partitions}
        answer = b"".join(encode_answer(SessionFetchAnswer(session, parts)))
        return web.Response(body=answer, content_type=SESSION_FETCH)


async def test_a_follower_sends_one_full_request_then_starts_over_on_a_session_error(
    client: Client, aiohttp_raw_server: Any
) -> None:
    leader = ScriptedLeader([(200, 7), (404, 0), (200, 8)])
    server = await aiohttp_raw_server(leader.answer)
    await create_topic(client, partitions=3)
    try:
        await lead_elsewhere(client, str(server.make_url("")).rstrip("/"), (1,))
        await wait_until(lambda: len(leader.requests) == 4, timeout=10)
        first, second, third, fourth = leader.requests
        assert first.full and list(first.partitions) == [("t", 1)]
        assert first.partitions[("t", 1)].fetch_offset == 0
        # Nothing changed: the next request of session 7 names no partition.
        assert (second.session_id, second.session_epoch, second.partitions) == (7, 1, {})
        # The leader lost the session: a full request again, then session 8 goes on.
        assert third.full and list(third.partitions) == [("t", 1)]
        assert (fourth.session_id, fourth.session_epoch) == (8, 1)
        # A partition joins while a request is parked: it is given up for a full one with both.
        await lead_elsewhere(client, str(server.make_url("")).rstrip("/"), (1, 2))
        await wait_until(lambda: len(leader.requests) == 5, timeout=10)
        fifth = leader.requests[4]
        assert fifth.full and sorted(fifth.partitions) == [("t", 1), ("t", 2)]
        assert all(r.replica == 0 for r in leader.requests)
    finally:
        leader.release.set()
