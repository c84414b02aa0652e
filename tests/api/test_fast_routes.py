"""The fast routes in process: which produces they take (tests/e2e/test_fast_routes.py compares
their answers with the Application's on a real server)."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
from multidict import CIMultiDict

from engine.batch import RecordInput, encode_batch
from gateway.api.fast_answer import FastAnswer
from gateway.api.fast_produce import FastProduce
from gateway.api.fast_routes import FastRefusal, FastRoutes
from gateway.api.fast_share import FastShareAck, FastShareAcquire
from gateway.api.fast_targets import PARTITION_ROUTE
from gateway.api.fast_transactions import FastTransaction
from gateway.auth.quotas import ANONYMOUS
from gateway.http.connections import Http1Connection, turn_answers
from gateway.http.fast_path import FAST_PATH
from tests.api.support import (
    JSON,
    PROBLEM,
    RECORD_BATCH,
    Client,
    Start,
    create_topic,
    end_offsets,
    fetch,
    fetch_all,
    gateway,
    metrics,
    problem,
    sample,
)
from tests.auth.support import bearer, binding, grant, make_key

LIMIT = 256 * 1024  # --max-request-bytes


def fast_routes_of(client: Client) -> FastRoutes:
    """The running gateway's fast routes (the connections' fast path)."""
    assert client.app is not None
    routes = client.app[FAST_PATH]
    assert isinstance(routes, FastRoutes)
    return routes


async def test_the_fast_routes_serve_bulk_produces_up_to_the_request_limit(start: Start) -> None:
    """A 1000-record produce (over 100 KB) is the routes's as a one-record one is: through the
    Application a held HTTP/2 body would be copied into a reader and out again. A body over
    --max-request-bytes is left to the Application, whose answer is 413."""
    client = await start(max_request_bytes=LIMIT)
    await create_topic(client)
    assert client.app is not None
    routes = fast_routes_of(client)
    json_body = orjson.dumps({"records": [{"value": "y" * 100} for _ in range(1000)]})
    binary = bytes(encode_batch([RecordInput(None, b"%0100d" % i) for i in range(1000)]))
    connection = object()
    for media, body in ((JSON, json_body), (RECORD_BATCH, binary)):
        assert len(body) > 100_000
        headers = CIMultiDict({"Content-Type": media})
        taken = routes.take("POST", "/v1/topics/t/records?acks=1", headers, body, connection)
        assert taken is not None and not isinstance(taken, FastRefusal)
        answer = await routes.serve(taken, connection)
        assert answer.status == 200, answer.body
    assert len(await fetch_all(client)) == 2000
    too_large = json_body + b" " * (LIMIT - len(json_body) + 1)
    headers = CIMultiDict({"Content-Type": JSON})
    assert routes.take("POST", "/v1/topics/t/records", headers, too_large, connection) is None


async def _started(
    client: Client, target: str, bodies: list[bytes], headers: dict[str, str] | None = None
) -> tuple[list[asyncio.Future[Any]], list[FastAnswer | None]]:
    """`FastRoutes.start` for each body in one loop turn; the futures it returned and the answers
    handed to `ready`, once every one has been handed (each produce has then left the
    admission's account, whatever way it was answered)."""
    assert client.app is not None
    routes = fast_routes_of(client)
    loop = asyncio.get_running_loop()
    answers: list[FastAnswer | None] = [None] * len(bodies)
    handed = [loop.create_future() for _ in bodies]

    def ready(i: int, answer: FastAnswer | None) -> None:
        answers[i] = answer
        handed[i].set_result(None)

    started = []
    for i, body in enumerate(bodies):
        taken = routes.take(
            "POST", target, CIMultiDict({"Content-Type": JSON, **(headers or {})}), body, i
        )
        assert isinstance(taken, FastProduce)
        started.append(routes.start(taken, i, functools.partial(ready, i), loop))
    assert routes.admission.inflight == len(bodies)
    await asyncio.gather(*handed)
    assert routes.admission.inflight == 0
    return started, answers


def _one(value: object) -> bytes:
    return orjson.dumps({"records": [{"value": value}]})


@pytest.mark.parametrize("acks", ["1", "all"])
async def test_plain_produces_of_one_turn_share_a_write_and_need_no_task(
    start: Start, acks: str
) -> None:
    """The common produce (one partition led here, no idempotency key) joins the turn's write
    and is answered when it lands, without a coroutine of its own (acks=all too: a leader alone
    moves the high watermark as it appends); each keeps its own consecutive offsets and answer,
    and the in-flight account is back to nothing."""
    client = await start()
    await create_topic(client)
    state = gateway(client)
    writes = state.replicas.appends.writes
    started, answers = await _started(
        client, f"/v1/topics/t/partitions/0/records?acks={acks}", [_one(i) for i in range(5)]
    )
    assert not any(isinstance(future, asyncio.Task) for future in started)
    assert state.replicas.appends.writes == writes + 1
    offsets = [orjson.loads(a.body)["results"][0]["base_offset"] for a in answers if a]
    assert offsets == [0, 1, 2, 3, 4]
    assert [r["value"] for r in await fetch_all(client)] == [0, 1, 2, 3, 4]
    assert client.app is not None
    inflight = fast_routes_of(client).inflight
    assert inflight.reserved == 0 and not inflight.by_connection


class _Recorded:
    """A connection as TurnAnswers sees it: records its answer's write in a shared list."""

    def __init__(self, name: str, events: list[str]) -> None:
        self.name, self.events = name, events

    def _send(self, data: bytes, closes: bool) -> bool:
        self.events.append(f"written {self.name} {int(data[9:12])}")
        return True

    def _fast_answered(self, written: bool) -> None:
        pass


async def test_plain_produces_are_answered_and_written_in_their_writes_pass(start: Start) -> None:
    """The answers of a turn's plain produces are made and written in the pass of its group
    commit's write (the gateway hooks `turn_sender` to it), before what was scheduled behind
    that write runs: a future's callback, and then the turn's end, would each wait for a pass
    in which every connection readable meanwhile is read."""
    client = await start()
    await create_topic(client)
    routes = fast_routes_of(client)
    loop = asyncio.get_running_loop()
    events: list[str] = []
    answers = turn_answers(loop)

    def ready(connection: str, answer: FastAnswer | None) -> None:
        assert answer is not None
        events.append(f"answered {connection}")
        answers.post(cast(Http1Connection, _Recorded(connection, events)), answer)

    headers = CIMultiDict({"Content-Type": JSON})
    for connection in ("a", "b"):
        taken = routes.take("POST", "/v1/topics/t/records?acks=1", headers, _one(1), connection)
        assert isinstance(taken, FastProduce)
        routes.start(taken, connection, functools.partial(ready, connection), loop)
    loop.call_soon(events.append, "behind the write")
    for _ in range(3):  # the write's pass and the next two: all of it has run by then
        await asyncio.sleep(0)
    assert events == [
        "answered a",
        "answered b",
        "written a 200",
        "written b 200",
        "behind the write",
    ]


async def test_produces_the_fast_routes_cannot_answer_at_once_still_take_a_task(
    start: Start,
) -> None:
    """Idempotent produces, and those to several partitions, wait in a coroutine as before,
    and answer the same."""
    client = await start()
    await create_topic(client, partitions=2)
    two = orjson.dumps({"records": [{"value": 1, "partition": 0}, {"value": 2, "partition": 1}]})
    for target, body, headers in (
        ("/v1/topics/t/partitions/0/records?acks=1", _one("x"), {"Idempotency-Key": "k-1"}),
        ("/v1/topics/t/records?acks=all", two, {}),
    ):
        started, answers = await _started(client, target, [body], headers)
        assert isinstance(started[0], asyncio.Task)
        assert answers[0] is not None and answers[0].status == 200, answers[0]


async def test_acks_all_with_too_few_in_sync_replicas_is_refused_without_a_task(
    start: Start,
) -> None:
    """min.insync.replicas above the in-sync replicas: acks=all is refused as its write is
    checked (503 NOT_ENOUGH_REPLICAS), nothing appended; acks=1 still lands beside it."""
    client = await start()
    await create_topic(client, configs={"min.insync.replicas": 2})
    started, answers = await _started(
        client, "/v1/topics/t/partitions/0/records?acks=all", [_one("x")]
    )
    assert not isinstance(started[0], asyncio.Task)
    assert answers[0] is not None and answers[0].status == 503
    assert orjson.loads(answers[0].body)["code"] == "NOT_ENOUGH_REPLICAS"
    assert await fetch_all(client) == []


async def test_a_bad_produce_fails_alone_among_the_turns_plain_ones(start: Start) -> None:
    """A body refused while it is built gets its own problem; the others of the turn land."""
    client = await start()
    await create_topic(client, configs={"max.message.bytes": 1000})
    bodies = [_one(1), _one("x" * 2000), b'{"records": 1}', _one(2)]
    _, answers = await _started(client, "/v1/topics/t/partitions/0/records?acks=1", bodies)
    assert [a.status if a else None for a in answers] == [200, 413, 400, 200]
    assert answers[1] is not None and answers[1].content_type == PROBLEM
    assert [r["value"] for r in await fetch_all(client)] == [1, 2]


async def test_a_plain_produce_whose_client_went_hands_no_answer(start: Start) -> None:
    """Cancelled before its write (the connection was lost): `ready` gets None, the in-flight
    account is released and the other requests of the turn are answered."""
    client = await start()
    await create_topic(client)
    assert client.app is not None
    routes = fast_routes_of(client)
    loop = asyncio.get_running_loop()
    got: list[FastAnswer | None] = []
    done = loop.create_future()

    def ready(answer: FastAnswer | None) -> None:
        got.append(answer)
        if len(got) == 2:
            done.set_result(None)

    headers = CIMultiDict({"Content-Type": JSON})
    target = "/v1/topics/t/partitions/0/records?acks=1"
    futures = []
    for connection in ("gone", "here"):
        taken = routes.take("POST", target, headers, _one(connection), connection)
        assert taken is not None
        futures.append(routes.start(taken, connection, ready, loop))
    futures[0].cancel()
    await done
    assert got[0] is None
    assert got[1] is not None and got[1].status == 200
    assert routes.inflight.reserved == 0 and not routes.inflight.by_connection
    assert routes.admission.inflight == 0


async def test_a_plain_produce_the_flush_policy_syncs_is_answered_after_the_fsync(
    start: Start,
) -> None:
    """flush.messages=1: the answer waits for the fsync (the recovery point passes it)."""
    client = await start()
    await create_topic(client, configs={"flush.messages": 1})
    _, answers = await _started(client, "/v1/topics/t/partitions/0/records?acks=1", [_one(7)])
    assert answers[0] is not None and answers[0].status == 200, answers[0]
    log = gateway(client).replicas.local("t", 0)
    assert log is not None and log.log.recovery_point >= 1


async def test_credentials_are_taken_once_the_application_has_checked_them(
    start: Start, data_dir: Path
) -> None:
    """With --auth, a key not seen before is the Application's to check (it may need I/O);
    once it has, the fast routes know it, until the credentials change (its revocation)."""
    keys = {name: make_key(data_dir, name) for name in ("admin", "alice")}
    client = await start(auth=True, super_users=("admin", "alice"))
    admin = bearer(keys["admin"])
    assert (await client.post("/v1/topics", json={"name": "t"}, headers=admin)).status == 201
    routes = fast_routes_of(client)
    headers = CIMultiDict({"Content-Type": JSON, **bearer(keys["alice"])})
    assert routes.take("POST", "/v1/topics/t/records", headers, _one(1), object()) is None
    assert (await client.get("/v1/topics/t", headers=bearer(keys["alice"]))).status == 200
    taken = routes.take("POST", "/v1/topics/t/records", headers, _one(1), object())
    assert isinstance(taken, FastProduce)
    listed = await (await client.get("/v1/auth/keys", headers=admin)).json()
    alice = next(k["key_id"] for k in listed["keys"] if k["principal"] == "alice")
    assert (await client.delete(f"/v1/auth/keys/{alice}", headers=admin)).status == 204
    assert routes.take("POST", "/v1/topics/t/records", headers, _one(1), object()) is None


async def test_refusals_are_taken_and_answered_at_once(start: Start, data_dir: Path) -> None:
    """No credentials at all is the fast routes' 401; a member's fetch is refused 403 for a
    topic its principal may not read, as the route refuses it."""
    keys = {name: make_key(data_dir, name) for name in ("admin", "carol")}
    client = await start(auth=True, super_users=("admin",))
    admin, carol = bearer(keys["admin"]), bearer(keys["carol"])
    assert (await client.post("/v1/topics", json={"name": "t"}, headers=admin)).status == 201
    routes = fast_routes_of(client)
    refused = routes.take("GET", "/v1/topics/t/partitions/0/records", CIMultiDict(), b"", 1)
    assert isinstance(refused, FastRefusal) and refused.answer.status == 401
    assert refused.answer.headers == (("WWW-Authenticate", 'Bearer realm="sluice"'),)
    assert routes.immediate(refused) is refused.answer  # written at once: nothing to start
    with pytest.raises(TypeError):
        routes.start(refused, 1, lambda answer: None, asyncio.get_running_loop())
    reads = [binding("carol", "group", "g", "read"), binding("carol", "topic", "t", "read")]
    await grant(client, keys["admin"], *reads)
    joined = await client.post("/v1/groups/g/members", json={"topics": ["t"]}, headers=carol)
    assert joined.status == 201, await joined.text()
    member = (await joined.json())["member_id"]
    removed = await client.delete("/v1/acls", json=reads[1], headers=admin)
    assert removed.status == 204
    target = f"/v1/groups/g/members/{member}/records?timeout_ms=0"
    route = await client.get(target, headers=carol)
    body = await problem(route, 403, "ACL_DENIED")
    taken = routes.take("GET", target, CIMultiDict(carol), b"", 1)
    assert isinstance(taken, FastRefusal)
    assert orjson.loads(taken.answer.body) == body


async def test_a_share_acquire_is_checked_and_served_as_its_route_does(
    start: Start, data_dir: Path
) -> None:
    """A share-group member's acquire and acknowledge of a group coordinated here are taken;
    an acquire is refused 403 for a topic its principal may not read, as the route refuses it;
    what the route would refuse for bad input is left to it."""
    keys = {name: make_key(data_dir, name) for name in ("admin", "dave")}
    client = await start(auth=True, super_users=("admin",))
    admin, dave = bearer(keys["admin"]), bearer(keys["dave"])
    assert (await client.post("/v1/topics", json={"name": "t"}, headers=admin)).status == 201
    reads = [binding("dave", "group", "q", "read"), binding("dave", "topic", "t", "read")]
    await grant(client, keys["admin"], *reads)
    joined = await client.post("/v1/share-groups/q/members", json={"topics": ["t"]}, headers=dave)
    assert joined.status == 201, await joined.text()
    member = (await joined.json())["member_id"]
    routes = fast_routes_of(client)
    acquire = f"/v1/share-groups/q/members/{member}/acquire?max_records=5"
    taken = routes.take("POST", acquire, CIMultiDict(dave), b"", 1)
    assert isinstance(taken, FastShareAcquire) and taken.max_records == 5
    answer = await routes.serve(taken, 1)
    assert (answer.status, orjson.loads(answer.body)) == (200, {"records": []})
    acknowledge = f"/v1/share-groups/q/members/{member}/acknowledge"
    body = orjson.dumps({"acknowledgements": [{"token": "t:0:0:1"}]})
    headers = CIMultiDict({"Content-Type": JSON, **dave})
    taken_ack = routes.take("POST", acknowledge, headers, body, 1)
    assert isinstance(taken_ack, FastShareAck)
    answer = await routes.serve(taken_ack, 1)
    assert orjson.loads(answer.body)["results"][0]["problem"]["code"] == "RECORD_NOT_ACQUIRED"
    for target, sent in (
        (acquire + "&max_records=2", b""),  # named twice
        (acquire.replace("5", "0"), b""),  # out of bounds
        (acquire, b"{}"),  # a body
        ("/v1/share-groups/q/members/nobody/acquire", b""),  # not a member here
        (acknowledge, b'{"acknowledgements": []}'),
        (acknowledge, b"[1]"),
    ):
        assert routes.take("POST", target, headers, sent, 1) is None, target
    removed = await client.delete("/v1/acls", json=reads[1], headers=admin)
    assert removed.status == 204
    body_403 = await problem(await client.post(acquire, headers=dave), 403, "ACL_DENIED")
    refused = routes.take("POST", acquire, CIMultiDict(dave), b"", 1)
    assert isinstance(refused, FastRefusal)
    assert orjson.loads(refused.answer.body) == body_403


async def test_a_delayed_quota_is_left_to_the_application(start: Start) -> None:
    """--quota-mode delay: a request over its quota waits in the Application; one within it is
    taken, its bytes charged."""
    client = await start(quota_mode="delay")
    await create_topic(client)
    await client.put(f"/v1/quotas/{ANONYMOUS}", json={"requests_per_second": 0.1})
    routes = fast_routes_of(client)
    headers = CIMultiDict({"Content-Type": JSON})
    assert isinstance(routes.take("POST", "/v1/topics/t/records", headers, _one(1), 1), FastProduce)
    assert routes.take("POST", "/v1/topics/t/records", headers, _one(2), 1) is None
    usage = gateway(client).auth.quotas.usage[ANONYMOUS]
    assert usage.requests == 1 and usage.produce_bytes == len(_one(1))
    assert usage.throttled["requests"] == 0  # counted where it is served, after its wait


async def test_an_acl_removed_refuses_the_next_request(start: Start, data_dir: Path) -> None:
    """What the fast routes remember of a principal admitted on a route goes with the ACLs
    it was admitted under."""
    keys = {name: make_key(data_dir, name) for name in ("admin", "bob")}
    client = await start(auth=True, super_users=("admin",))
    admin = bearer(keys["admin"])
    assert (await client.post("/v1/topics", json={"name": "t"}, headers=admin)).status == 201
    write = binding("bob", "topic", "t", "write")
    await grant(client, keys["admin"], write)
    assert (await client.get("/v1/topics/t", headers=bearer(keys["bob"]))).status == 200
    routes = fast_routes_of(client)
    headers = CIMultiDict({"Content-Type": JSON, **bearer(keys["bob"])})
    for _ in range(2):  # checked, then remembered
        taken = routes.take("POST", "/v1/topics/t/records", headers, _one(1), 1)
        assert isinstance(taken, FastProduce)
    assert (await client.delete("/v1/acls", json=write, headers=admin)).status == 204
    refused = routes.take("POST", "/v1/topics/t/records", headers, _one(1), 1)
    assert isinstance(refused, FastRefusal) and refused.answer.status == 403


async def test_a_refused_produce_is_counted_at_once_its_bytes_made_once_a_second(
    start: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A produce the admission refuses is counted under its route in the first latency bucket
    (nothing timed); its answer, per origin when CORS is on, is one object whose HTTP/1.1
    bytes are made again only when the Date or its CORS headers change, and are a fresh
    answer's."""
    client = await start(admission_max_inflight=0, cors_origins=("https://app.example",))
    await create_topic(client, "t")
    routes = fast_routes_of(client)
    target = "/v1/topics/t/partitions/0/records"
    origin = CIMultiDict({"Origin": "https://app.example"})
    refused = [routes.take("POST", target, origin, b"{}", 1) for _ in range(2)]
    other = routes.take("POST", target, CIMultiDict(), b"{}", 1)
    assert isinstance(refused[0], FastRefusal) and isinstance(other, FastRefusal)
    assert refused[0] is refused[1] and refused[0] is not other
    answers = [routes.immediate(refused[0]), routes.immediate(refused[1])]
    answer = answers[0]
    assert answer is not None and answer is answers[1] and answer.status == 503
    assert ("Access-Control-Allow-Origin", "https://app.example") in answer.cors
    labels = {"route": PARTITION_ROUTE, "method": "POST", "status": "503"}
    scraped = await metrics(client)
    assert sample(scraped, "sluice_http_requests_total", **labels) == 2
    first_bucket = sample(
        scraped, "sluice_http_request_duration_seconds_bucket", le="0.0005", **labels
    )
    assert first_bucket == 2
    assert sample(scraped, "sluice_http_request_duration_seconds_sum", **labels) == 0.0

    texts = iter(["Sat, 28 Nov 2026 07:00:01 GMT", "Sat, 28 Nov 2026 07:00:02 GMT"])
    second = next(texts)  # one str all second, as aiohttp's clock gives
    monkeypatch.setattr("gateway.api.fast_answer.rfc822_formatted_time", lambda: second)
    first = answer.http1()
    assert answer.http1() is first and b"Date: Sat, 28 Nov 2026 07:00:01 GMT\r\n" in first
    second = next(texts)
    later = answer.http1()
    assert later is not first and b"07:00:02 GMT" in later
    fresh = FastAnswer(answer.status, answer.content_type, answer.body, answer.headers, answer.cors)
    assert later == fresh.http1()
    answer.cors = ()
    assert b"Access-Control" not in answer.http1()
    fields = answer.h2_headers()  # HTTP/2's header list too, made once a second
    assert answer.h2_headers() is fields and (b"date", b"Sat, 28 Nov 2026 07:00:02 GMT") in fields
    fresh.cors = ()
    assert fields == fresh.h2_headers()  # a fresh answer's fields
    second = "Sat, 28 Nov 2026 07:00:03 GMT"
    later_fields = answer.h2_headers()
    assert later_fields is not fields and (b"date", second.encode()) in later_fields


def _in_txn(name: str, epoch: int, target: str = "/v1/topics/t/records") -> str:
    return f"{target}?transactional_id={name}&producer_epoch={epoch}"


async def _begin(client: Client, name: str, headers: dict[str, str] | None = None) -> int:
    begun = await client.post(f"/v1/transactions/{name}", json={}, headers=headers)
    assert begun.status == 201, await begun.text()
    epoch: int = (await begun.json())["producer_epoch"]
    return epoch


async def _fast_refusal_like_the_routes(
    client: Client, target: str, body: bytes, status: int, code: str
) -> None:
    """The fast routes take `target`'s produce and refuse it as its route does, problem+json
    and all, writing nothing."""
    routes = fast_routes_of(client)
    before = await end_offsets(client)
    headers = CIMultiDict({"Content-Type": JSON})
    taken = routes.take("POST", target, headers, body, 1)
    assert isinstance(taken, FastProduce) and taken.produce.transaction is not None
    answer = await routes.serve(taken, 1)
    assert (answer.status, answer.content_type) == (status, PROBLEM), answer.body
    assert await end_offsets(client) == before
    through_route = await problem(
        await client.post(target, data=body, headers=headers), status, code
    )
    assert orjson.loads(answer.body) == through_route
    assert await end_offsets(client) == before


async def test_a_produce_in_a_transaction_coordinated_here_is_taken(start: Start) -> None:
    """A produce naming a transaction this node coordinates is the fast routes' (not the
    Application's): its partitions are added to the transaction, its batches written inside
    it, read_committed readers see them once it commits."""
    client = await start()
    await create_topic(client, partitions=2)
    epoch = await _begin(client, "tx")
    routes = fast_routes_of(client)
    body = orjson.dumps(
        {"records": [{"value": "a", "partition": 0}, {"value": "b", "partition": 1}]}
    )
    headers = CIMultiDict({"Content-Type": JSON})
    _, answers = await _started(client, _in_txn("tx", epoch), [body])
    assert answers[0] is not None and answers[0].status == 200, answers[0]
    assert orjson.loads(answers[0].body)["results"] == [
        {"partition": 0, "base_offset": 0, "count": 1},
        {"partition": 1, "base_offset": 0, "count": 1},
    ]
    one = routes.take(
        "POST", _in_txn("tx", epoch, "/v1/topics/t/partitions/0/records"), headers, _one("c"), 1
    )
    assert isinstance(one, FastProduce)
    assert (await routes.serve(one, 1)).status == 200
    described = await (await client.get("/v1/transactions/tx")).json()
    assert described["partitions"] == [
        {"topic": "t", "partition": 0},
        {"topic": "t", "partition": 1},
    ]
    assert (await fetch(client, "t", 0, isolation="read_committed"))["records"] == []
    assert (
        await client.post("/v1/transactions/tx/commit", json={"producer_epoch": epoch})
    ).status == 200
    committed = await fetch(client, "t", 0, isolation="read_committed")
    assert [r["value"] for r in committed["records"]] == ["a", "c"]


async def test_transactional_produces_the_fast_routes_leave_to_their_route(start: Start) -> None:
    """What the route refuses for its input (an Idempotency-Key, an epoch out of bounds or
    without its id, an id that is not one) is left to it, to say why."""
    client = await start()
    await create_topic(client)
    epoch = await _begin(client, "tx")
    routes = fast_routes_of(client)
    headers = CIMultiDict({"Content-Type": JSON})
    keyed = CIMultiDict({"Content-Type": JSON, "Idempotency-Key": "k"})
    assert routes.take("POST", _in_txn("tx", epoch), keyed, _one(1), 1) is None
    for target in (
        _in_txn("tx", 2**15),
        "/v1/topics/t/records?producer_epoch=0",
        "/v1/topics/t/records?transactional_id=tx",
        "/v1/topics/t/records?transactional_id=tx&producer_epoch=",
        "/v1/topics/t/records?transactional_id=&producer_epoch=0",
        _in_txn("x" * 250, 0),
    ):
        assert routes.take("POST", target, headers, _one(1), 1) is None, target


async def test_fast_transactional_produces_refused_as_their_route_refuses_them(
    start: Start,
) -> None:
    """A zombie's produce (an epoch a newer begin fenced), one to a transaction no longer open
    and one to an id never begun are taken and refused as the route refuses them, writing
    nothing."""
    client = await start()
    await create_topic(client)
    old = await _begin(client, "tx")
    new = await _begin(client, "tx")
    await _fast_refusal_like_the_routes(client, _in_txn("tx", old), _one(1), 409, "PRODUCER_FENCED")
    committed = await client.post("/v1/transactions/tx/commit", json={"producer_epoch": new})
    assert committed.status == 200
    await _fast_refusal_like_the_routes(
        client, _in_txn("tx", new), _one(2), 409, "INVALID_TXN_STATE"
    )
    await _fast_refusal_like_the_routes(
        client, _in_txn("nobody", 0), _one(3), 404, "UNKNOWN_TRANSACTIONAL_ID"
    )


async def test_a_transactional_produce_needs_write_on_its_transactional_id(
    start: Start, data_dir: Path
) -> None:
    """With --auth the fast routes check write on the produce's transactional id, as its
    route does (403 ACL_DENIED, the same problem, nothing written); granted, it is written
    under the principal that began the transaction."""
    keys = {name: make_key(data_dir, name) for name in ("admin", "erin")}
    client = await start(auth=True, super_users=("admin",))
    admin, erin = bearer(keys["admin"]), bearer(keys["erin"])
    assert (await client.post("/v1/topics", json={"name": "t"}, headers=admin)).status == 201
    await grant(client, keys["admin"], binding("erin", "topic", "t", "write"))
    allowed = binding("erin", "transactional_id", "tx", "write")
    await grant(client, keys["admin"], allowed)
    epoch = await _begin(client, "tx", erin)
    assert (await client.delete("/v1/acls", json=allowed, headers=admin)).status == 204
    target = _in_txn("tx", epoch)
    headers = CIMultiDict({"Content-Type": JSON, **erin})
    through_route = await problem(
        await client.post(target, data=_one(1), headers=headers), 403, "ACL_DENIED"
    )
    assert through_route["resource_type"] == "transactional_id"
    routes = fast_routes_of(client)
    refused = routes.take("POST", target, headers, _one(1), 1)
    assert isinstance(refused, FastRefusal)
    assert (refused.answer.status, refused.answer.content_type) == (403, PROBLEM)
    assert orjson.loads(refused.answer.body) == through_route
    log = gateway(client).replicas.local("t", 0)
    assert log is not None and log.log_end_offset == 0
    await grant(client, keys["admin"], allowed)
    taken = routes.take("POST", target, headers, _one(1), 1)
    assert isinstance(taken, FastProduce) and taken.principal == "erin"
    assert (await routes.serve(taken, 1)).status == 200
    assert log.log_end_offset == 1


async def test_transaction_calls_coordinated_here_are_taken(start: Start) -> None:
    """A begin, commit or producer's abort is the fast routes' once this node coordinates its
    id (not before `__transaction_state` exists: the Application makes it); an operator's
    abort (no epoch: alter on the cluster) and a body the route would refuse are left to it."""
    client = await start()
    routes = fast_routes_of(client)
    headers = CIMultiDict({"Content-Type": JSON})
    assert routes.take("POST", "/v1/transactions/tx", headers, b"{}", 1) is None
    epoch = await _begin(client, "tx")
    begin = routes.take("POST", "/v1/transactions/tx", CIMultiDict(), b"", 1)
    assert isinstance(begin, FastTransaction) and (begin.action, begin.value) == ("begin", 60_000)
    begun = await routes.serve(begin, 1)
    assert begun.status == 201
    new_epoch = orjson.loads(begun.body)["producer_epoch"]
    assert new_epoch > epoch  # the open transaction aborted, its producer fenced
    ended = orjson.dumps({"producer_epoch": new_epoch})
    commit = routes.take("POST", "/v1/transactions/tx/commit", headers, ended, 1)
    assert isinstance(commit, FastTransaction) and commit.value == new_epoch
    assert orjson.loads((await routes.serve(commit, 1)).body)["state"] == "CompleteCommit"
    for target, body in (
        ("/v1/transactions/tx/abort", b"{}"),  # an operator's
        ("/v1/transactions/tx/abort", b'{"producer_epoch":-1}'),
        ("/v1/transactions/tx/commit", b'{"producer_epoch":true}'),
        ("/v1/transactions/tx", b'{"timeout_ms":1,"x":1}'),
        ("/v1/transactions/tx", b"[]"),
        ("/v1/transactions/tx/offsets", ended),
        ("/v1/transactions/t%78/commit", ended),
        ("/v1/transactions/tx", b"{" + b" " * 2000 + b"}"),
    ):
        assert routes.take("POST", target, headers, body, 1) is None, (target, body)
    text = CIMultiDict({"Content-Type": "text/plain"})
    assert routes.take("POST", "/v1/transactions/tx/commit", text, ended, 1) is None


async def test_a_transaction_call_needs_write_on_its_transactional_id(
    start: Start, data_dir: Path
) -> None:
    """With --auth a begin taken by the fast routes is refused as its route refuses it (403
    ACL_DENIED, the same problem) without write on the id; granted, the transaction is the
    principal's."""
    keys = {name: make_key(data_dir, name) for name in ("admin", "erin")}
    client = await start(auth=True, super_users=("admin",))
    admin, erin = bearer(keys["admin"]), bearer(keys["erin"])
    await _begin(client, "made", admin)  # `__transaction_state` made
    headers = CIMultiDict({"Content-Type": JSON, **erin})
    through_route = await problem(
        await client.post("/v1/transactions/tx", data=b"{}", headers=headers), 403, "ACL_DENIED"
    )
    routes = fast_routes_of(client)
    refused = routes.take("POST", "/v1/transactions/tx", headers, b"{}", 1)
    assert isinstance(refused, FastRefusal)
    assert orjson.loads(refused.answer.body) == through_route
    await grant(client, keys["admin"], binding("erin", "transactional_id", "tx", "write"))
    taken = routes.take("POST", "/v1/transactions/tx", headers, b"{}", 1)
    assert isinstance(taken, FastTransaction) and taken.principal == "erin"
    assert orjson.loads((await routes.serve(taken, 1)).body)["principal"] == "erin"
