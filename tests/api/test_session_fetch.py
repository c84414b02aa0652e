"""The leader's side of fetch sessions (KIP-227), in process: node 1 is a follower on paper
(partition states naming it), and the test plays it by posting session fetches as its fetcher
would. Bad bodies, session errors, full and incremental answers, the long-poll's one waiter.
A consumer's request (replica -1, a group coordinator's): committed batches only, no session,
no follower progress, each partition's problem in its part, one waiter for all. Then this node
as the follower of a scripted leader: what its session requests say."""

from __future__ import annotations

import asyncio
import struct
from dataclasses import replace
from typing import Any

import orjson
from aiohttp import web

from engine import batch as fmt
from replication.memory_store import MemoryMetadataStore
from replication.node_contract import SESSION_FETCH, SESSION_FETCH_ROUTE
from replication.session_wire import (
    FetchPosition,
    PartitionAnswer,
    SessionFetchAnswer,
    SessionFetchRequest,
    consumer_request,
    decode_answer,
    decode_request,
    encode_answer,
    encode_request,
)
from tests.api.support import (
    Client,
    Start,
    create_topic,
    gateway,
    parked,
    problem,
    produce,
    wait_until,
)
from tests.api.test_internal import lead_elsewhere

FOLLOWER = 1
PARTITIONS = 4


async def follow_all(client: Client, topic: str = "t", *, in_isr: bool = False) -> int:
    """Make node 1 a live follower of every partition of `topic` in a new leader epoch (outside
    the ISR unless `in_isr`: then nothing appended after is committed until it fetches); the
    epoch."""
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
                    state,
                    leader_epoch=epoch,
                    replicas=(0, FOLLOWER),
                    isr=(0, FOLLOWER) if in_isr else (0,),
                    version=revision,
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


def consumer(
    offsets: dict[tuple[str, int], int],
    *,
    wait_ms: int = 0,
    max_bytes: int = 1 << 20,
    part_max: int | None = None,
) -> SessionFetchRequest:
    """A group coordinator's request for `offsets` (each partition within `part_max`, if
    given, rather than `max_bytes`)."""
    request = consumer_request(offsets, wait_ms, max_bytes)
    if part_max is None:
        return request
    parts = {key: replace(at, max_bytes=part_max) for key, at in request.partitions.items()}
    return replace(request, partitions=parts)


async def test_a_consumer_reads_committed_batches_only_and_leaves_no_trace(client: Client) -> None:
    await create_topic(client, partitions=2)
    for p in range(2):
        await produce(client, [{"value": p}], params={"acks": "1"}, partition=p)
    await follow_all(client, in_isr=True)
    for p in range(2):  # appended, not committed: the follower in the ISR has not fetched it
        await produce(client, [{"value": "later"}], params={"acks": "1"}, partition=p)
    replicas = gateway(client).replicas
    leaders = [replicas.partitions[("t", p)] for p in range(2)]
    assert [(p.high_watermark, p.log_end_offset) for p in leaders] == [(1, 2), (1, 2)]

    def progress() -> list[object]:
        return [
            (p.high_watermark, p.isr, {r: replace(f) for r, f in p.leader_state.followers.items()})
            for p in leaders
            if p.leader_state is not None
        ]

    before = progress()
    assert len(before) == 2
    answer = await session_fetch(client, consumer({("t", 0): 0, ("t", 1): 0}))
    assert answer.session_id == 0
    for p in range(2):
        part = answer.partitions[("t", p)]
        assert offsets_of(part.records) == [0]  # the record at 1 is above the high watermark
        assert (part.high_watermark, part.log_start_offset, part.error_status) == (1, 0, 0)
    # At the high watermark: nothing yet, and no error.
    caught_up = await session_fetch(client, consumer({("t", 0): 1}))
    assert caught_up.partitions[("t", 0)] == PartitionAnswer(1, 0, b"")
    assert len(replicas.sessions) == 0
    assert progress() == before


async def test_a_consumers_partition_refused_comes_back_as_its_problem(client: Client) -> None:
    await create_topic(client, partitions=3)
    for p in range(2):
        await produce(client, [{"value": p}], params={"acks": "1"}, partition=p)
    await lead_elsewhere(client, "http://127.0.0.1:9", (2,))
    answer = await session_fetch(
        client,
        consumer({("t", 0): 0, ("t", 1): 5, ("t", 2): 0, ("t", 7): 0, ("nope", 0): 0}),
    )
    assert offsets_of(answer.partitions[("t", 0)].records) == [0]
    out_of_range = answer.partitions[("t", 1)]
    assert out_of_range.error_status == 416
    problem_doc = orjson.loads(out_of_range.error_body)
    assert problem_doc["code"] == "OFFSET_OUT_OF_RANGE"
    assert (problem_doc["offset"], problem_doc["log_start_offset"]) == (5, 0)
    assert problem_doc["log_end_offset"] == 1
    not_leader = orjson.loads(answer.partitions[("t", 2)].error_body)
    assert (not_leader["code"], not_leader["leader"]) == ("NOT_LEADER_OR_FOLLOWER", FOLLOWER)
    assert answer.partitions[("t", 7)].error_status == 404
    assert answer.partitions[("nope", 0)].error_status == 404


async def test_a_consumers_answer_is_bounded_per_partition_and_in_all(client: Client) -> None:
    await create_topic(client, partitions=PARTITIONS)
    for p in range(PARTITIONS):
        for _ in range(3):
            await produce(client, [{"value": "v" * 200}], params={"acks": "1"}, partition=p)
    everything = {("t", p): 0 for p in range(PARTITIONS)}
    capped = await session_fetch(client, consumer(everything, max_bytes=10))
    assert [offsets_of(p.records) for p in capped.partitions.values()] == [[0], [], [], []]
    one = len(capped.partitions[("t", 0)].records)
    per = consumer(everything, part_max=2 * one)
    answer = await session_fetch(client, per)
    assert [len(offsets_of(p.records)) for p in answer.partitions.values()] == [2] * PARTITIONS
    wide = await session_fetch(client, consumer(everything, max_bytes=3 * one + one // 2))
    assert [len(offsets_of(p.records)) for p in wide.partitions.values()] == [3, 0, 0, 0]


async def test_a_consumers_long_poll_is_one_waiter_answered_by_any_partition(
    client: Client,
) -> None:
    await create_topic(client, partitions=PARTITIONS)
    before = parked(client)
    waiting = asyncio.ensure_future(
        session_fetch(client, consumer({("t", p): 0 for p in range(PARTITIONS)}, wait_ms=30_000))
    )
    await wait_until(lambda: parked(client) == before + 1)  # one, not one per partition
    await produce(client, [{"value": "z"}], params={"acks": "1"}, partition=2)
    answer = await asyncio.wait_for(waiting, 10)
    assert [key for key, part in answer.partitions.items() if part.records] == [("t", 2)]
    assert sorted(answer.partitions) == [("t", p) for p in range(PARTITIONS)]
    assert parked(client) == before


async def test_a_consumers_long_poll_is_refused_when_too_many_are_parked(start: Start) -> None:
    client = await start(max_parked_fetches=0)
    await create_topic(client)
    waiting = encode_request(consumer({("t", 0): 0}, wait_ms=1000))
    await problem(await post(client, waiting), 503, "TOO_MANY_WAITING_FETCHES")
    at_once = await session_fetch(client, consumer({("t", 0): 0}))
    assert at_once.partitions[("t", 0)].error_status == 0


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
