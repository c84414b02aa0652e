"""Delivery to real receivers on loopback, through an in-process gateway: every produced record
acknowledged or dead-lettered, in order, with verifiable signatures and stable ids; retries
within the policy's backoff; Retry-After honoured; poison records dead-lettered (or stopping the
partition without a dead-letter topic); 410 pausing; pause, resume and delete."""

from __future__ import annotations

import asyncio
import itertools
import socket
from typing import Any

import orjson
import pytest
from cloudevents.core.bindings.http import HTTPMessage, from_http
from cloudevents.core.formats.json import JSONFormat

from groups.subscriptions import dispatcher
from tests.api.support import Client, Start, create_topic, produce
from tests.subscriptions.receiver import (
    Attempt,
    Behaviour,
    Receiver,
    checked_in_order,
    verify,
)

# Small delays, so the policy's bounds can be checked in a test's time.
FAST = {"timeout_ms": 300, "max_attempts": 4, "min_backoff_ms": 100, "max_backoff_ms": 400}
TOLERANCE_S = 0.25  # scheduling slack on top of a delay's upper bound


async def subscribe(client: Client, url: str, **fields: Any) -> dict[str, Any]:
    doc = {"name": "s", "topic": "t", "endpoint": url, "start": "earliest", **fields}
    resp = await client.post("/v1/subscriptions", json=doc)
    assert resp.status == 201, await resp.text()
    body: dict[str, Any] = await resp.json()
    return body


async def describe(client: Client, name: str = "s") -> dict[str, Any]:
    resp = await client.get(f"/v1/subscriptions/{name}")
    assert resp.status == 200, await resp.text()
    body: dict[str, Any] = await resp.json()
    return body


async def until_described(client: Client, check: Any, timeout: float = 10.0) -> dict[str, Any]:
    """Describe until `check(doc)` holds (the dispatcher runs in this process's loop)."""
    async with asyncio.timeout(timeout):
        while not check(doc := await describe(client)):
            await asyncio.sleep(0.02)
    return doc


async def values(client: Client, n: int) -> None:
    await produce(client, [{"key": f"k{i}", "value": {"n": i}} for i in range(n)])


def fails(times: int, status: int = 500, headers: dict[str, str] | None = None) -> Behaviour:
    def behaviour(n: int, _: str) -> tuple[int, dict[str, str]]:
        return (status, headers or {}) if n <= times else (204, {})

    return behaviour


def gaps(attempts: list[Attempt]) -> list[float]:
    return [b.at - a.at for a, b in itertools.pairwise(attempts)]


async def test_every_record_delivered_in_order_signed_as_cloudevents(
    client: Client, receiver: Receiver
) -> None:
    sub = await subscribe(client, receiver.url)
    await values(client, 20)
    await receiver.until(lambda a: len(a) == 20)
    checked_in_order(receiver.attempts, list(range(20)), sub["signing_secret"])
    event = from_http(
        HTTPMessage(receiver.attempts[3].headers, receiver.attempts[3].body), JSONFormat()
    )
    assert event.get_id() == "t/0/3" and event.get_type() == "dev.sluice.record"
    assert event.get_source() == "/sluice/topics/t"
    assert event.get_data() == {"n": 3}
    assert event.get_extension("partitionkey") == "k3"
    doc = await until_described(client, lambda d: d["partitions"][0]["committed_offset"] == 20)
    assert doc["state"] == "running" and doc["delivered"] == 20 and doc["lag"] == 0
    assert doc["signing_secret"] == "********"


async def test_failures_are_retried_within_the_backoff_and_ids_stay(
    client: Client, receiver: Receiver
) -> None:
    receiver.behaviour = fails(3)
    sub = await subscribe(client, receiver.url, retry=FAST)
    await values(client, 2)
    await receiver.until(lambda a: len(receiver.acked()) == 2)
    by_offset = checked_in_order(receiver.attempts, [0, 1], sub["signing_secret"])
    first = by_offset[0]
    assert [a.status for a in first] == [500, 500, 500, 204]
    assert len({a.headers["webhook-id"] for a in first}) == 1
    for attempt_no, gap in enumerate(gaps(first), start=1):
        ceiling = min(0.4, 0.1 * 2 ** (attempt_no - 1))
        floor = max(0.1, ceiling / 2)
        assert floor <= gap <= ceiling + TOLERANCE_S, (attempt_no, gap)
    doc = await describe(client)
    assert doc["retried"] == 6 and doc["delivered"] == 2


async def test_retry_after_is_honoured(client: Client, receiver: Receiver) -> None:
    receiver.behaviour = fails(1, 429, {"Retry-After": "1"})
    await subscribe(client, receiver.url, retry=FAST)
    await values(client, 1)
    await receiver.until(lambda a: len(receiver.acked()) == 1)
    (gap,) = gaps(receiver.attempts)
    assert 1.0 <= gap <= 1.0 + TOLERANCE_S


async def test_a_poison_record_is_dead_lettered_and_delivery_goes_on(
    client: Client, receiver: Receiver
) -> None:
    receiver.behaviour = lambda n, message_id: (400, {}) if message_id == "t/0/1" else (204, {})
    await subscribe(client, receiver.url, retry=FAST, dead_letter_topic="dlq")
    await values(client, 3)
    await receiver.until(lambda a: len(receiver.acked()) == 2)
    assert [a.ce_id for a in receiver.attempts] == ["t/0/0", "t/0/1", "t/0/2"]  # 400: not retried
    resp = await client.get("/v1/topics/dlq/partitions/0/records?offset=0&timeout_ms=0")
    (dead,) = (await resp.json())["records"]
    assert dead["key"] == "k1" and dead["value"] == {"n": 1}
    assert dead["headers"] | {"sluice-timestamp": "?"} == {
        "sluice-subscription": "s", "sluice-topic": "t", "sluice-partition": "0",
        "sluice-offset": "1", "sluice-timestamp": "?", "sluice-attempts": "1",
        "sluice-status": "400", "sluice-error": "HTTP 400: Bad Request",
    }  # fmt: skip
    doc = await until_described(client, lambda d: d["partitions"][0]["committed_offset"] == 3)
    assert doc["dead_lettered"] == 1 and doc["delivered"] == 2


@pytest.mark.parametrize("failure", ["timeout", "refused", "flapping"])
async def test_exhausted_records_are_dead_lettered(
    client: Client, receiver: Receiver, failure: str
) -> None:
    url = receiver.url
    if failure == "timeout":
        receiver.behaviour = lambda n, _: None
    elif failure == "refused":
        url = "http://127.0.0.1:9/hook"  # discard: nothing listens
    else:
        receiver.behaviour = lambda n, _: (503, {}) if n % 2 else (204, {})
    sub = await subscribe(client, url, retry=FAST, dead_letter_topic="dlq")
    await values(client, 3)
    doc = await until_described(
        client, lambda d: d["partitions"][0]["committed_offset"] == 3, timeout=20
    )
    if failure == "flapping":
        assert doc["delivered"] == 3 and doc["dead_lettered"] == 0
        checked_in_order(receiver.attempts, [0, 1, 2], sub["signing_secret"])
    else:
        assert doc["dead_lettered"] == 3 and doc["retried"] == 9
        resp = await client.get("/v1/topics/dlq/partitions/0/records?offset=0&timeout_ms=0")
        dead = (await resp.json())["records"]
        assert [d["headers"]["sluice-offset"] for d in dead] == ["0", "1", "2"]
        assert all(d["headers"]["sluice-attempts"] == "4" for d in dead)
        assert all(d["headers"]["sluice-status"] == "" for d in dead)


async def test_without_a_dead_letter_topic_a_partition_stops_until_resumed(
    client: Client, receiver: Receiver
) -> None:
    broken = True
    receiver.behaviour = lambda n, _: (422, {}) if broken else (204, {})
    sub = await subscribe(client, receiver.url, retry=FAST)
    await values(client, 2)
    doc = await until_described(client, lambda d: d["state"] == "stopped")
    row = doc["partitions"][0]
    assert row["stopped_at_offset"] == 0 and row["committed_offset"] == 0
    assert "no dead-letter topic" in row["last_error"]
    assert len(receiver.attempts) == 1
    broken = False
    resp = await client.post("/v1/subscriptions/s/resume")
    assert resp.status == 200, await resp.text()
    await receiver.until(lambda a: len(receiver.acked()) == 2)
    checked_in_order(receiver.attempts, [0, 1], sub["signing_secret"])


async def test_gone_pauses_the_subscription(client: Client, receiver: Receiver) -> None:
    receiver.behaviour = lambda n, _: (410, {})
    await subscribe(client, receiver.url, retry=FAST)
    await values(client, 2)
    doc = await until_described(client, lambda d: d["paused"])
    assert "410" in doc["pause_reason"] and doc["state"] == "paused"
    assert doc["partitions"][0]["committed_offset"] == 0
    assert len(receiver.attempts) == 1


async def test_pause_stops_new_requests_and_resume_goes_on(
    client: Client, receiver: Receiver
) -> None:
    sub = await subscribe(client, receiver.url)
    await values(client, 1)
    await receiver.until(lambda a: len(a) == 1)
    resp = await client.post("/v1/subscriptions/s/pause")
    doc = await resp.json()
    assert resp.status == 200 and doc["state"] == "paused" and doc["paused"] is True
    await produce(client, [{"value": 1}, {"value": 2}])
    with pytest.raises(TimeoutError):  # a bounded look for what must not come
        await receiver.until(lambda a: len(a) > 1, timeout=1.0)
    resp = await client.post("/v1/subscriptions/s/resume")
    assert (await resp.json())["state"] != "paused"
    await receiver.until(lambda a: len(a) == 3)
    checked_in_order(receiver.attempts, [0, 1, 2], sub["signing_secret"])


async def test_delete_stops_and_forgets_the_position(client: Client, receiver: Receiver) -> None:
    sub = await subscribe(client, receiver.url)
    await values(client, 2)
    await until_described(client, lambda d: d["partitions"][0]["committed_offset"] == 2)
    assert (await client.get(f"/v1/groups/{sub['group']}")).status == 200
    resp = await client.delete("/v1/subscriptions/s")
    assert resp.status == 204
    assert (await client.get("/v1/subscriptions/s")).status == 404
    assert (await client.get(f"/v1/groups/{sub['group']}")).status == 404
    assert (await (await client.get("/v1/subscriptions")).json()) == {"subscriptions": []}
    again = await subscribe(client, receiver.url)  # the same name starts afresh
    assert again["group"] != sub["group"]
    await receiver.until(lambda a: len(a) == 4)


async def test_a_stopping_dispatcher_commits_what_was_acknowledged(
    client: Client, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commits are coalesced, and a dispatcher that stops (here: its delivery settings
    change) commits what was acknowledged first, so the next one does not send it again."""
    monkeypatch.setattr(dispatcher, "COMMIT_INTERVAL_S", 3600.0)  # no commit on the clock

    def behaviour(n: int, message_id: str) -> tuple[int, dict[str, str]] | None:
        return None if message_id == "t/0/10" and n == 1 else (204, {})  # 10 hangs, once

    receiver.behaviour = behaviour
    retry = {**FAST, "timeout_ms": 60_000}
    await subscribe(client, receiver.url, ordering="none", retry=retry)
    await values(client, 20)
    # Everything but 10 acknowledged; 10 holds the position, in flight, and no commit is due
    # (the first acknowledgement's, at most).
    doc = await until_described(client, lambda d: d["partitions"][0]["delivered"] == 19)
    assert doc["partitions"][0]["committed_offset"] < 10
    changed = await client.patch("/v1/subscriptions/s", json={"retry": {"max_attempts": 5}})
    assert changed.status == 200, await changed.text()
    await receiver.until(lambda a: len(a) == 30)  # 20, then 10 to 19 again from 10
    await client.post("/v1/subscriptions/s/pause")  # paused, nothing in flight: a commit
    await until_described(client, lambda d: d["partitions"][0]["committed_offset"] == 20)
    offsets = [a.offset for a in receiver.attempts]
    assert sorted(o for o in offsets if o < 10) == list(range(10))  # none sent again
    assert offsets.count(10) == 2


async def test_pipelined_requests_are_all_delivered_and_a_hung_one_is_retried(
    client: Client, receiver: Receiver
) -> None:
    """Eight requests to a connection: sixteen in flight go on two connections; a request
    that hangs holds back those behind it on its connection (the receiver answers them in
    order), its timeout fails them all, and each is sent again with the same ids."""

    def behaviour(n: int, message_id: str) -> tuple[int, dict[str, str]] | None:
        return None if message_id == "t/0/50" and n == 1 else (204, {})

    receiver.behaviour = behaviour
    concurrency = {"max_in_flight": 16, "max_requests": 16, "adaptive": False, "pipeline": 8}
    sub = await subscribe(
        client, receiver.url, ordering="none", concurrency=concurrency, retry=FAST
    )
    await values(client, 200)
    await receiver.until(lambda a: {x.offset for x in receiver.acked()} == set(range(200)))
    for attempt in receiver.attempts:
        verify(sub["signing_secret"], attempt)
        assert attempt.headers["webhook-id"] == attempt.ce_id
    assert [a.status for a in receiver.attempts if a.offset == 50][:2] == [0, 204]
    # The connection the hung request was on went away, and one replaced it.
    assert 2 <= len(receiver.peers) <= 3
    doc = await until_described(client, lambda d: d["partitions"][0]["committed_offset"] == 200)
    assert doc["delivered"] == 200 and doc["retried"] >= 1


@pytest.mark.parametrize("fmt", ["structured", "batch", "json"])
async def test_formats(client: Client, receiver: Receiver, fmt: str) -> None:
    fields: dict[str, Any] = {"format": "json" if fmt == "json" else "structured"}
    if fmt != "structured":
        fields["batching"] = {"max_records": 10, "max_wait_ms": 200}
    sub = await subscribe(client, receiver.url, **fields)
    await produce(
        client, [{"key": "a", "value": {"n": 0}}, {"value": "text", "headers": {"kind": "x"}}]
    )
    await receiver.until(lambda a: sum(_count(x, fmt) for x in receiver.acked()) == 2)
    first = receiver.attempts[0]
    assert first.headers["webhook-id"] == ("t/0/0" if fmt == "structured" else "t/0/0-1")
    verify(sub["signing_secret"], first)
    body = orjson.loads(first.body)
    if fmt == "structured":
        assert first.headers["content-type"] == "application/cloudevents+json"
        event = from_http(HTTPMessage(first.headers, first.body), JSONFormat())
        assert event.get_id() == "t/0/0" and event.get_data() == {"n": 0}
    elif fmt == "batch":
        assert first.headers["content-type"] == "application/cloudevents-batch+json"
        assert [e["id"] for e in body] == ["t/0/0", "t/0/1"]
        assert body[0]["data"] == {"n": 0} and body[0]["partitionkey"] == "a"
        assert body[1]["kind"] == "x" and body[1]["data"] == "text"
    else:
        assert body["topic"] == "t" and body["partition"] == 0
        assert [r["offset"] for r in body["records"]] == [0, 1]
        assert body["records"][1]["headers"] == {"kind": "x"}


def _count(attempt: Attempt, fmt: str) -> int:
    if fmt == "structured":
        return 1
    body = orjson.loads(attempt.body)
    return len(body) if fmt == "batch" else len(body["records"])


async def test_filters_skip_records_and_advance_the_position(
    client: Client, receiver: Receiver
) -> None:
    await subscribe(
        client, receiver.url, filter={"key_prefix": "eu-", "headers": {"kind": "order"}}
    )
    await produce(client, [
        {"key": "eu-1", "value": 1, "headers": {"kind": "order"}},
        {"key": "us-1", "value": 2, "headers": {"kind": "order"}},
        {"key": "eu-2", "value": 3},
        {"key": "eu-3", "value": 4, "headers": {"kind": "order"}},
    ])  # fmt: skip
    await until_described(client, lambda d: d["partitions"][0]["committed_offset"] == 4)
    assert [a.ce_id for a in receiver.attempts] == ["t/0/0", "t/0/3"]


async def test_credentials_are_sent_and_never_shown(client: Client, receiver: Receiver) -> None:
    await subscribe(client, receiver.url, auth={"bearer": "tok-123456"})
    await values(client, 1)
    await receiver.until(lambda a: len(a) == 1)
    assert receiver.attempts[0].headers["authorization"] == "Bearer tok-123456"
    text = await (await client.get("/v1/subscriptions/s")).text()
    listed = await (await client.get("/v1/subscriptions")).text()
    assert "tok-123456" not in text + listed and '"bearer":"********"' in text


async def test_endpoint_host_refused_at_connect_when_a_name_resolves_to_loopback(
    start: Start, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name is allowed as a URL, and refused when it resolves to loopback: a name of this
    test's own, resolved to 127.0.0.1 here (the machine's names differ from one to another,
    and `localhost` is refused as a URL already)."""
    name = "loopback.sluice.test"
    resolve = socket.getaddrinfo

    def resolved_here(host: bytes | str | None, *args: Any, **kwargs: Any) -> Any:
        return resolve("127.0.0.1" if host == name else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolved_here)
    client = await start(subscription_allowed_hosts=())
    await create_topic(client, "t")
    url = receiver.url.replace("127.0.0.1", name)
    await subscribe(client, url, retry=FAST)
    await values(client, 1)
    doc = await until_described(client, lambda d: d["state"] == "stopped")
    assert "loopback or link-local addresses only" in doc["partitions"][0]["last_error"]
    assert receiver.attempts == []
