"""Reply subscriptions (exactly-once functions), through an in-process gateway and a real
receiver on loopback that answers records: each batch's replies and the position past it are
committed in one transaction, so the reply topic read at read_committed holds each reply
exactly once, through a 5xx before the 2xx, replies the reply topic refuses, a commit that
fails, a commit whose answer is lost, and a node that stops between the endpoint's answer and
the commit and starts again; dead letters and records filtered out move the position in
transactions too; bad specs are refused."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
import pytest

from gateway.reply_transactions import OwnApiTransactions, ReplyTransactions
from groups.transactions.coordinator import TransactionCoordinator
from replication.errors import NodeUnreachable
from tests.api.support import Client, Start, create_topic, fetch, gateway, produce
from tests.auth.support import bearer, binding, grant, make_key
from tests.subscriptions.receiver import Receiver

FAST = {"timeout_ms": 2000, "max_attempts": 3, "min_backoff_ms": 50, "max_backoff_ms": 100}


def echo(body: bytes) -> tuple[bytes, str]:
    """A function's answer: one reply per record it was given, `{"echo": value}`."""
    records = orjson.loads(body)["records"]
    replies = [{"key": r["key"], "value": {"echo": r["value"]}} for r in records]
    return orjson.dumps({"records": replies}), "application/json"


def answered(n: int, message_id: str) -> tuple[int, dict[str, str]]:
    return 200, {}  # 204 would carry no body


async def bound(client: Client) -> Client:
    """The node's own URL where the test server listens (what `serve` tells the broker)."""
    await gateway(client).broker.bound(str(client.make_url("")).rstrip("/"))
    return client


@pytest.fixture
async def replying(client: Client, receiver: Receiver) -> Client:
    await create_topic(client, "out", partitions=2)
    receiver.behaviour = answered
    receiver.reply = echo
    return await bound(client)


async def subscribe(client: Client, url: str, **fields: Any) -> dict[str, Any]:
    doc = {
        "name": "s",
        "topic": "t",
        "endpoint": url,
        "start": "earliest",
        "format": "json",
        "reply": {"topic": "out"},
        "retry": FAST,
        **fields,
    }
    resp = await client.post("/v1/subscriptions", json=doc)
    assert resp.status == 201, await resp.text()
    body: dict[str, Any] = await resp.json()
    return body


async def until_committed(client: Client, offset: int, timeout: float = 20.0) -> dict[str, Any]:
    async with asyncio.timeout(timeout):
        while True:
            doc: dict[str, Any] = await (await client.get("/v1/subscriptions/s")).json()
            rows = doc["partitions"]
            if rows and rows[0]["committed_offset"] == offset:
                return doc
            await asyncio.sleep(0.02)


async def replies(client: Client, isolation: str = "read_committed") -> list[Any]:
    """The reply topic's values, both partitions, ordered by what they echo."""
    found = []
    for partition in (0, 1):
        doc = await fetch(client, "out", partition, isolation=isolation, max_records=1000)
        found += [r["value"] for r in doc["records"]]
    return sorted(found, key=orjson.dumps)


async def inputs(client: Client, n: int) -> list[Any]:
    await produce(client, [{"key": f"k{i}", "value": i} for i in range(n)])
    return sorted(({"echo": i} for i in range(n)), key=orjson.dumps)


async def test_each_reply_is_committed_once_with_the_position(
    replying: Client, receiver: Receiver
) -> None:
    client = replying
    sub = await subscribe(client, receiver.url, batching={"max_records": 4, "max_wait_ms": 50})
    expected = await inputs(client, 10)
    doc = await until_committed(client, 10)
    assert await replies(client) == expected
    assert await replies(client, "read_uncommitted") == expected  # nothing aborted either
    assert doc["delivered"] == 10 and doc["state"] == "running"
    tid = f"{sub['group']}.0"
    txn = await (await client.get(f"/v1/transactions/{tid}")).json()
    assert txn["state"] == "CompleteCommit"
    keyed = await fetch(client, "out", 0, max_records=1000)
    assert all(r["key"].startswith("k") for r in keyed["records"])


def api_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The calls made through the node's own API from now on: each one's path, sans query."""
    paths: list[str] = []
    real = OwnApiTransactions._call

    async def recorded(self: OwnApiTransactions, path: str, body: Any) -> dict[str, Any]:
        paths.append(path.partition("?")[0])
        return await real(self, path, body)

    monkeypatch.setattr(OwnApiTransactions, "_call", recorded)
    return paths


async def state_topic_made(client: Client) -> None:
    """`__transaction_state` made, as any first transactional call makes it."""
    resp = await client.post("/v1/transactions/first", json={})
    assert resp.status == 201, await resp.text()


def coordinated_elsewhere(monkeypatch: pytest.MonkeyPatch, methods: tuple[str, ...]) -> None:
    """While one of ReplyTransactions' `methods` runs, this node sees the transactional ids as
    coordinated by another (as a cluster node does that does not lead their state partition)."""
    elsewhere: list[bool] = []
    coordinates = TransactionCoordinator.coordinates
    monkeypatch.setattr(
        TransactionCoordinator,
        "coordinates",
        lambda self, tid: not elsewhere and coordinates(self, tid),
    )
    for method in methods:
        real = getattr(ReplyTransactions, method)

        async def patched(self: ReplyTransactions, *args: Any, real: Any = real) -> Any:
            elsewhere.append(True)
            try:
                return await real(self, *args)
            finally:
                elsewhere.pop()

        monkeypatch.setattr(ReplyTransactions, method, patched)


async def test_a_transaction_coordinated_here_is_made_in_process(
    replying: Client, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node coordinates every id and leads the reply topic: once `__transaction_state`
    exists (the first transactional call makes it, through the API), none of a transaction's
    calls goes through the node's own API."""
    client = replying
    await state_topic_made(client)
    paths = api_calls(monkeypatch)
    await subscribe(client, receiver.url)
    expected = await inputs(client, 3)
    await until_committed(client, 3)
    assert await replies(client) == expected
    assert await replies(client, "read_uncommitted") == expected
    assert paths == []


@pytest.mark.parametrize(
    "methods",
    [("begin", "produce", "send_offsets", "commit"), ("produce", "commit")],
    ids=["every-call", "produce-and-commit"],
)
async def test_calls_for_a_coordinator_elsewhere_go_through_the_api(
    replying: Client, receiver: Receiver, monkeypatch: pytest.MonkeyPatch, methods: tuple[str, ...]
) -> None:
    """A call whose id this node does not coordinate goes through the node's own API (which
    forwards it to the coordinator), and a transaction begun one way is ended the other:
    every reply committed once, and only those calls made through the API."""
    client = replying
    await state_topic_made(client)
    paths = api_calls(monkeypatch)
    coordinated_elsewhere(monkeypatch, methods)
    sub = await subscribe(client, receiver.url)
    expected = await inputs(client, 2)
    await until_committed(client, 2)
    assert await replies(client) == expected
    assert await replies(client, "read_uncommitted") == expected
    tid = quote(f"{sub['group']}.0", safe="")
    by_method = {
        "begin": f"/v1/transactions/{tid}",
        "produce": "/v1/topics/out/records",
        "send_offsets": f"/v1/transactions/{tid}/offsets",
        "commit": f"/v1/transactions/{tid}/commit",
    }
    assert paths == [by_method[m] for m in methods] * 2


async def test_a_5xx_then_a_2xx_replies_once(replying: Client, receiver: Receiver) -> None:
    client = replying
    receiver.behaviour = lambda n, _: (503, {}) if n == 1 else (200, {})
    await subscribe(client, receiver.url)
    expected = await inputs(client, 3)
    doc = await until_committed(client, 3)
    assert [a.status for a in receiver.attempts] == [503, 200, 503, 200, 503, 200]
    assert await replies(client) == expected
    assert doc["retried"] == 3 and doc["delivered"] == 3


@pytest.mark.parametrize(
    "refused",
    [{"value": 1, "surprise": True}, {"value": "x" * 4000}],
    ids=["unknown-field", "over-max-message-bytes"],
)
async def test_replies_the_topic_refuses_fail_the_attempt(
    replying: Client, receiver: Receiver, refused: dict[str, Any]
) -> None:
    """The first answer's record is one the produce refuses (a field the produce API does not
    know; a record over the reply topic's max.message.bytes): the produce is refused, the
    transaction aborted, the batch retried; the second answer's is committed."""
    client = replying
    resp = await client.patch("/v1/topics/out", json={"configs": {"max.message.bytes": 2048}})
    assert resp.status == 200, await resp.text()
    answered = 0

    def reply(body: bytes) -> tuple[bytes, str]:
        nonlocal answered
        answered += 1
        if answered == 1:
            return orjson.dumps({"records": [refused]}), "application/json"
        return echo(body)

    receiver.reply = reply
    await subscribe(client, receiver.url)
    expected = await inputs(client, 1)
    doc = await until_committed(client, 1)
    assert await replies(client) == expected
    # asked again: a refusal of the records, not a failed call retried with the same replies
    assert len(receiver.attempts) == 2 and doc["retried"] == 1


async def test_cloudevents_replies_are_records_of_the_structured_mode(
    replying: Client, receiver: Receiver
) -> None:
    def reply(body: bytes) -> tuple[bytes, str]:
        events = [
            {"specversion": "1.0", "id": f"r{e['id']}", "source": "/fn", "type": "done",
             "partitionkey": "pk", "data": e["data"]}
            for e in orjson.loads(body)
        ]  # fmt: skip
        return orjson.dumps(events), "application/cloudevents-batch+json"

    client = replying
    receiver.reply = reply
    await subscribe(client, receiver.url, format="structured",
                    batching={"max_records": 2, "max_wait_ms": 50})  # fmt: skip
    await produce(client, [{"value": {"n": 1}}, {"value": {"n": 2}}])
    await until_committed(client, 2)
    found = []
    for partition in (0, 1):
        doc = await fetch(client, "out", partition, isolation="read_committed")
        found += doc["records"]
    assert sorted(r["value"]["data"]["n"] for r in found) == [1, 2]
    assert {r["key"] for r in found} == {"pk"}
    assert {r["headers"]["content-type"] for r in found} == {
        "application/cloudevents+json; charset=UTF-8"
    }
    assert {r["value"]["id"] for r in found} == {"rt/0/0", "rt/0/1"}


def failing_once(
    monkeypatch: pytest.MonkeyPatch,
    method: str,
    how: Callable[[Callable[..., Awaitable[None]], tuple[Any, ...]], Awaitable[None]],
) -> list[int]:
    """Patch ReplyTransactions.`method` so that its first call goes `how`; the calls made."""
    real = getattr(ReplyTransactions, method)
    calls: list[int] = []

    async def patched(self: ReplyTransactions, *args: Any) -> None:
        calls.append(1)
        if len(calls) == 1:
            await how(lambda *a: real(self, *a), args)
            return
        await real(self, *args)

    monkeypatch.setattr(ReplyTransactions, method, patched)
    return calls


async def test_a_commit_that_fails_is_aborted_and_done_again(
    replying: Client, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first commit fails (the coordinator's node unreachable): that transaction is
    aborted (its replies stay in the log, never read committed) and the next one commits
    the same replies, without asking the endpoint again."""

    async def unreachable(_: Callable[..., Awaitable[None]], __: tuple[Any, ...]) -> None:
        raise NodeUnreachable("the coordinator's node went", delivered=False)

    calls = failing_once(monkeypatch, "commit", unreachable)
    client = replying
    await subscribe(client, receiver.url)
    expected = await inputs(client, 1)
    await until_committed(client, 1)
    assert await replies(client) == expected
    assert await replies(client, "read_uncommitted") == expected * 2
    assert len(calls) == 2 and len(receiver.attempts) == 1


async def test_a_commit_whose_answer_is_lost_is_not_done_twice(
    replying: Client, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first commit goes through but its answer is lost: the next transaction finds the
    position moved, and delivery goes on from it (nothing delivered or replied twice)."""

    async def lost(commit: Callable[..., Awaitable[None]], args: tuple[Any, ...]) -> None:
        await commit(*args)
        raise NodeUnreachable("the answer was lost")

    failing_once(monkeypatch, "commit", lost)
    client = replying
    await subscribe(client, receiver.url)
    expected = await inputs(client, 3)
    await until_committed(client, 3)
    assert await replies(client) == expected
    assert await replies(client, "read_uncommitted") == expected
    assert len(receiver.attempts) == 3


async def test_a_node_stopped_before_the_commit_neither_loses_nor_repeats_replies(
    start: Start, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node stops while the first batch's replies are produced and its commit hangs;
    started again, its dispatcher's begin aborts the open transaction, the batch is delivered
    again, and each reply is read committed once."""
    hanging = asyncio.Event()

    async def hang(_: Callable[..., Awaitable[None]], __: tuple[Any, ...]) -> None:
        hanging.set()
        await asyncio.Event().wait()

    failing_once(monkeypatch, "commit", hang)
    client = await bound(await start(subscription_allowed_hosts=("127.0.0.1",)))
    await create_topic(client, "t")
    await create_topic(client, "out", partitions=2)
    receiver.behaviour = answered
    receiver.reply = echo
    await subscribe(client, receiver.url, batching={"max_records": 2, "max_wait_ms": 50})
    expected = await inputs(client, 2)
    async with asyncio.timeout(10):
        await hanging.wait()
    await client.close()
    client = await bound(await start(subscription_allowed_hosts=("127.0.0.1",)))
    await until_committed(client, 2)
    assert await replies(client) == expected
    assert await replies(client, "read_uncommitted") == sorted(expected * 2, key=orjson.dumps)
    assert len(receiver.acked()) == 2  # the batch, delivered again after the restart


async def test_dead_letters_and_filtered_records_move_the_position(
    replying: Client, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In transactions of their own: past the start, no position is committed otherwise."""
    client = replying
    positions = gateway(client).subscriptions.positions
    plain: list[int] = []
    commit = positions.commit

    async def counted(sub: Any, partition: int, offset: int) -> None:
        plain.append(offset)
        await commit(sub, partition, offset)

    monkeypatch.setattr(positions, "commit", counted)
    receiver.behaviour = lambda _, message_id: (400, {}) if message_id.endswith("/1") else (200, {})
    await subscribe(client, receiver.url, dead_letter_topic="dlq", filter={"key_prefix": "k"})
    await produce(client, [{"key": "k0", "value": 0}, {"key": "k1", "value": 1}])
    await produce(client, [{"key": "x", "value": 9}, {"key": "k3", "value": 3}])
    await until_committed(client, 4)
    await produce(client, [{"key": "x", "value": 9}])  # only filtered out past the position
    await until_committed(client, 5)
    assert await replies(client) == [{"echo": 0}, {"echo": 3}]
    dead = await fetch(client, "dlq", 0)
    assert [r["value"] for r in dead["records"]] == [1]
    assert plain == [0]  # the start


@pytest.mark.parametrize(
    ("fields", "status", "code", "pointer"),
    [
        ({"mode": "queue"}, 400, "INVALID_SUBSCRIPTION", "/mode"),
        ({"ordering": "key"}, 400, "INVALID_SUBSCRIPTION", "/ordering"),
        ({"ordering": "none"}, 400, "INVALID_SUBSCRIPTION", "/ordering"),
        ({"reply": {"topic": "t"}}, 400, "INVALID_SUBSCRIPTION", "/reply/topic"),
        ({"reply": {"topic": "compacted"}}, 400, "INVALID_SUBSCRIPTION", "/reply/topic"),
        ({"reply": {"topic": "__consumer_offsets"}}, 400, "INVALID_SUBSCRIPTION", "/reply/topic"),
        ({"reply": {"topic": "nowhere"}}, 404, "UNKNOWN_TOPIC", None),
        ({"reply": {"topic": "a/b"}}, 400, "INVALID_TOPIC_NAME", "/reply/topic"),
        ({"reply": {"topik": "out"}}, 400, "INVALID_SUBSCRIPTION", "/reply"),
        ({"reply": "out"}, 400, "INVALID_SUBSCRIPTION", "/reply"),
    ],
)
async def test_bad_reply_specs_are_refused(
    replying: Client,
    receiver: Receiver,
    fields: dict[str, Any],
    status: int,
    code: str,
    pointer: str | None,
) -> None:
    client = replying
    await create_topic(client, "compacted", configs={"cleanup.policy": "compact"})
    doc = {"name": "s", "topic": "t", "endpoint": receiver.url, "reply": {"topic": "out"}}
    resp = await client.post("/v1/subscriptions", json=doc | fields)
    assert resp.status == status, await resp.text()
    problem = await resp.json()
    assert problem["code"] == code
    if pointer is not None:
        assert problem["pointer"] == pointer
    resp = await client.post("/v1/subscriptions", json={**doc, "name": "ok"})
    assert resp.status == 201, await resp.text()
    resp = await client.patch("/v1/subscriptions/ok", json={"ordering": "none"})
    assert resp.status == 400 and (await resp.json())["pointer"] == "/ordering"


async def test_with_auth_a_reply_takes_write_on_its_topic_and_the_nodes_key(
    start: Start, data_dir: Path, tmp_path: Path, receiver: Receiver
) -> None:
    """Creating one needs Write on the reply topic, and a node with an internal key (its
    transactions are made as the internal principal); with both, replies are committed."""
    admin_key = make_key(data_dir, "admin")
    admin, user = bearer(admin_key), bearer(make_key(data_dir, "user"))
    settings: dict[str, Any] = {
        "auth": True, "super_users": ("admin",), "subscription_allowed_hosts": ("127.0.0.1",),
    }  # fmt: skip
    client = await start(**settings)
    for topic in ("t", "out"):
        assert (await client.post("/v1/topics", json={"name": topic}, headers=admin)).status == 201
    await grant(client, admin_key, binding("user", "topic", "t", "read"))
    doc = {"name": "s", "topic": "t", "endpoint": receiver.url, "start": "earliest",
           "format": "json", "reply": {"topic": "out"}}  # fmt: skip
    resp = await client.post("/v1/subscriptions", json=doc, headers=user)
    assert resp.status == 403, await resp.text()
    await grant(client, admin_key, binding("user", "topic", "out", "write"))
    resp = await client.post("/v1/subscriptions", json=doc, headers=user)
    assert resp.status == 400 and (await resp.json())["pointer"] == "/reply"
    await client.close()
    key = tmp_path / "internal.key"
    key.write_text("reply-test-internal-key-0123456789\n")
    client = await bound(await start(**settings, internal_key_file=key))
    resp = await client.post("/v1/subscriptions", json=doc, headers=user)
    assert resp.status == 201, await resp.text()
    receiver.behaviour, receiver.reply = answered, echo
    records = {"records": [{"key": "k", "value": 7}]}
    assert (await client.post("/v1/topics/t/records", json=records, headers=admin)).status == 200
    async with asyncio.timeout(20):
        while True:
            resp = await client.get(
                "/v1/topics/out/partitions/0/records",
                params={"isolation": "read_committed", "timeout_ms": "0"},
                headers=admin,
            )
            values = [r["value"] for r in (await resp.json())["records"]]
            if values:
                break
            await asyncio.sleep(0.02)
    assert values == [{"echo": 7}]
