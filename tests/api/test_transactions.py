"""Transactions over HTTP, in process: records to several partitions of several topics and a
group's offsets committed together or not at all, read_committed readers (partition fetches
and group members), fencing, timeouts, an operator's abort, and every kind of bad input."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.support import (
    Client,
    create_topic,
    end_offsets,
    fetch,
    gateway,
    problem,
    produce,
    wait_until,
)

T = "/v1/transactions/tx"


async def begin(client: Client, name: str = "tx", **body: object) -> dict[str, Any]:
    resp = await client.post(f"/v1/transactions/{name}", json=body)
    assert resp.status == 201, await resp.text()
    doc: dict[str, Any] = await resp.json()
    return doc


async def end(client: Client, how: str, epoch: int | None, status: int = 200) -> dict[str, Any]:
    body = {} if epoch is None else {"producer_epoch": epoch}
    resp = await client.post(f"{T}/{how}", json=body)
    assert resp.status == status, await resp.text()
    doc: dict[str, Any] = await resp.json(content_type=None)
    return doc


def in_txn(epoch: int, name: str = "tx") -> dict[str, str]:
    return {"transactional_id": name, "producer_epoch": str(epoch)}


async def values(client: Client, topic: str, partition: int, isolation: str) -> list[object]:
    doc = await fetch(client, topic, partition, isolation=isolation, max_records=1000)
    return [r["value"] for r in doc["records"]]


@pytest.fixture
async def topics(client: Client) -> Client:
    await create_topic(client, "orders", partitions=2)
    await create_topic(client, "audit")
    return client


async def test_a_commit_shows_every_partition_of_every_topic_at_once(topics: Client) -> None:
    client = topics
    txn = await begin(client, timeout_ms=30_000)
    assert (txn["state"], txn["producer_epoch"], txn["timeout_ms"]) == ("Ongoing", 0, 30_000)
    epoch = txn["producer_epoch"]
    await produce(
        client,
        [{"value": "o0", "partition": 0}, {"value": "o1", "partition": 1}],
        topic="orders",
        params=in_txn(epoch),
    )
    await produce(client, [{"value": "a"}], topic="audit", params=in_txn(epoch))
    await produce(client, [{"value": "plain"}], topic="audit")
    assert await values(client, "orders", 0, "read_committed") == []
    assert await values(client, "audit", 0, "read_committed") == []  # held by the open one
    assert await values(client, "audit", 0, "read_uncommitted") == ["a", "plain"]
    described = await (await client.get(T)).json()
    assert described["partitions"] == [
        {"topic": "audit", "partition": 0},
        {"topic": "orders", "partition": 0},
        {"topic": "orders", "partition": 1},
    ]
    done = await end(client, "commit", epoch)
    assert done["state"] == "CompleteCommit"
    assert await values(client, "orders", 0, "read_committed") == ["o0"]
    assert await values(client, "orders", 1, "read_committed") == ["o1"]
    assert await values(client, "audit", 0, "read_committed") == ["a", "plain"]
    assert await values(client, "audit", 0, "read_uncommitted") == ["a", "plain"]  # no marker
    # A retried commit answers as the first; an abort after it is refused.
    assert (await end(client, "commit", epoch))["state"] == "CompleteCommit"
    await problem(
        await client.post(f"{T}/abort", json={"producer_epoch": epoch}), 409, "INVALID_TXN_STATE"
    )


async def test_an_abort_is_never_read_committed_and_readers_move_past_it(topics: Client) -> None:
    client = topics
    epoch = (await begin(client))["producer_epoch"]
    await produce(client, [{"value": "gone", "partition": 0}], topic="orders", params=in_txn(epoch))
    assert (await end(client, "abort", epoch))["state"] == "CompleteAbort"
    await produce(client, [{"value": "after", "partition": 0}], topic="orders")
    doc = await fetch(client, "orders", 0, isolation="read_committed", max_records=1)
    assert doc["records"] == [] and doc["next_offset"] == 1  # past the aborted batch
    assert await values(client, "orders", 0, "read_committed") == ["after"]
    assert await values(client, "orders", 0, "read_uncommitted") == ["gone", "after"]
    await problem(
        await client.post(f"{T}/commit", json={"producer_epoch": epoch}), 409, "INVALID_TXN_STATE"
    )


async def test_a_read_committed_answer_names_the_last_stable_offset(topics: Client) -> None:
    client = topics
    await produce(client, [{"value": "before", "partition": 0}], topic="orders")
    epoch = (await begin(client))["producer_epoch"]
    await produce(client, [{"value": "open", "partition": 0}], topic="orders", params=in_txn(epoch))
    resp = await client.get(
        "/v1/topics/orders/partitions/0/records",
        params={"isolation": "read_committed", "timeout_ms": "0"},
        headers={"Accept": "application/x-ndjson"},
    )
    assert resp.status == 200
    assert resp.headers["Sluice-Last-Stable-Offset"] == "1"
    assert resp.headers["Sluice-High-Watermark"] == "2"
    assert (await resp.text()).count("\n") == 1


async def test_a_new_begin_fences_the_previous_holder(topics: Client) -> None:
    client = topics
    old = (await begin(client))["producer_epoch"]
    await produce(
        client, [{"value": "zombie-1", "partition": 0}], topic="orders", params=in_txn(old)
    )
    new = (await begin(client))["producer_epoch"]
    assert new > old
    before = await end_offsets(client, "orders")
    resp = await client.post(
        "/v1/topics/orders/records",
        params=in_txn(old),
        json={"records": [{"value": "zombie-2", "partition": 0}]},
    )
    await problem(resp, 409, "PRODUCER_FENCED")
    assert await end_offsets(client, "orders") == before  # nothing written
    await problem(
        await client.post(f"{T}/commit", json={"producer_epoch": old}), 409, "PRODUCER_FENCED"
    )
    await produce(client, [{"value": "new", "partition": 0}], topic="orders", params=in_txn(new))
    await end(client, "commit", new)
    # The fenced transaction was aborted by the begin that fenced it.
    assert await values(client, "orders", 0, "read_committed") == ["new"]


async def test_offsets_take_effect_if_and_only_if_the_transaction_commits(topics: Client) -> None:
    client = topics
    resp = await client.post(
        "/v1/groups/g/members", json={"topics": ["orders"], "auto_offset_reset": "earliest"}
    )
    member = await resp.json()
    offsets = {
        "group_id": "g",
        "member_id": member["member_id"],
        "generation_id": member["generation"],
        "offsets": [{"topic": "orders", "partition": 0, "offset": 5}],
    }

    async def committed() -> list[object]:
        doc = await (await client.get("/v1/groups/g")).json()
        return [p["committed_offset"] for p in doc["partitions"] if p["partition"] == 0]

    epoch = (await begin(client))["producer_epoch"]
    resp = await client.post(f"{T}/offsets", json={"producer_epoch": epoch, **offsets})
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["pending_offsets"][0]["offsets"][0]["offset"] == 5
    await end(client, "abort", epoch)
    assert await committed() in ([], [None])
    epoch = (await begin(client))["producer_epoch"]
    resp = await client.post(f"{T}/offsets", json={"producer_epoch": epoch, **offsets})
    assert resp.status == 200, await resp.text()
    await end(client, "commit", epoch)
    assert await committed() == [5]
    stale = {**offsets, "generation_id": member["generation"] + 7}
    epoch = (await begin(client))["producer_epoch"]
    resp = await client.post(f"{T}/offsets", json={"producer_epoch": epoch, **stale})
    await problem(resp, 409, "STALE_GENERATION")


async def test_offsets_of_a_group_without_members_are_sent_without_a_generation(
    topics: Client,
) -> None:
    """Both member_id and generation_id left out: no generation to check (a push
    subscription's group has no member), committed iff the transaction commits."""
    client = topics
    offsets = {"group_id": "lone", "offsets": [{"topic": "orders", "partition": 1, "offset": 3}]}

    async def committed() -> list[object]:
        resp = await client.get("/v1/groups/lone")
        if resp.status == 404:
            return []
        doc = await resp.json()
        return [p["committed_offset"] for p in doc["partitions"] if p["partition"] == 1]

    epoch = (await begin(client))["producer_epoch"]
    resp = await client.post(f"{T}/offsets", json={"producer_epoch": epoch, **offsets})
    assert resp.status == 200, await resp.text()
    (pending,) = (await resp.json())["pending_offsets"]
    assert pending == {"group_id": "lone", **offsets} | {
        "offsets": [{"topic": "orders", "partition": 1, "offset": 3, "metadata": ""}]
    }
    await end(client, "abort", epoch)
    assert await committed() in ([], [None])
    epoch = (await begin(client))["producer_epoch"]
    resp = await client.post(f"{T}/offsets", json={"producer_epoch": epoch, **offsets})
    assert resp.status == 200, await resp.text()
    await end(client, "commit", epoch)
    assert await committed() == [3]


async def test_a_transaction_past_its_timeout_is_aborted_by_the_cluster(
    topics: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = topics
    coordinator = gateway(client).transactions
    now = [coordinator.clock()]
    monkeypatch.setattr(coordinator, "clock", lambda: now[0])
    epoch = (await begin(client, timeout_ms=1_000))["producer_epoch"]
    await produce(client, [{"value": "late", "partition": 0}], topic="orders", params=in_txn(epoch))
    now[0] += 1_001
    assert await coordinator.abort_timed_out() == ["tx"]
    await wait_until(lambda: coordinator.machine.get("tx").state.complete)
    described = await (await client.get(T)).json()
    assert (described["state"], described["abort_cause"]) == ("CompleteAbort", "timeout")
    resp = await client.post(
        "/v1/topics/orders/records",
        params=in_txn(epoch),
        json={"records": [{"value": "x", "partition": 0}]},
    )
    await problem(resp, 409, "TRANSACTION_TIMED_OUT")
    await problem(
        await client.post(f"{T}/commit", json={"producer_epoch": epoch}),
        409,
        "TRANSACTION_TIMED_OUT",
    )
    assert await values(client, "orders", 0, "read_committed") == []


async def test_an_operator_aborts_a_hanging_transaction(topics: Client) -> None:
    client = topics
    epoch = (await begin(client))["producer_epoch"]
    await produce(client, [{"value": "hang", "partition": 0}], topic="orders", params=in_txn(epoch))
    aborted = await end(client, "abort", None)
    assert (aborted["state"], aborted["abort_cause"]) == ("CompleteAbort", "operator")
    await produce(client, [{"value": "next", "partition": 0}], topic="orders")
    assert await values(client, "orders", 0, "read_committed") == ["next"]


async def test_list_shows_transactions_by_state(topics: Client) -> None:
    client = topics
    await begin(client, "a")
    epoch = (await begin(client, "b"))["producer_epoch"]
    await client.post("/v1/transactions/b/commit", json={"producer_epoch": epoch})
    listed = await (await client.get("/v1/transactions")).json()
    assert [(t["transactional_id"], t["state"]) for t in listed["transactions"]] == [
        ("a", "Ongoing"),
        ("b", "CompleteCommit"),
    ]
    ongoing = await (await client.get("/v1/transactions", params={"state": "Ongoing"})).json()
    assert [t["transactional_id"] for t in ongoing["transactions"]] == ["a"]
    await problem(
        await client.get("/v1/transactions", params={"state": "Open"}), 400, "INVALID_PARAMETER"
    )


@pytest.mark.parametrize(
    ("params", "headers", "status", "code"),
    [
        ({"transactional_id": "never"}, {}, 400, "INVALID_PARAMETER"),  # no epoch
        ({"producer_epoch": "0"}, {}, 400, "INVALID_PARAMETER"),  # no id
        (
            {"transactional_id": "never", "producer_epoch": "0"},
            {},
            404,
            "UNKNOWN_TRANSACTIONAL_ID",
        ),
        ({"transactional_id": "tx", "producer_epoch": "x"}, {}, 400, "INVALID_PARAMETER"),
        ({"transactional_id": "tx", "producer_epoch": "40000"}, {}, 400, "INVALID_PARAMETER"),
        (
            {"transactional_id": "a\x01b", "producer_epoch": "0"},
            {},
            400,
            "INVALID_TRANSACTIONAL_ID",
        ),
        (
            {"transactional_id": "tx", "producer_epoch": "0"},
            {"Idempotency-Key": "k"},
            400,
            "INVALID_PARAMETER",
        ),
    ],
)
async def test_a_bad_transactional_produce_is_refused_and_writes_nothing(
    topics: Client, params: dict[str, str], headers: dict[str, str], status: int, code: str
) -> None:
    client = topics
    await begin(client)
    resp = await client.post(
        "/v1/topics/orders/records",
        params=params,
        headers=headers,
        json={"records": [{"value": 1, "partition": 0}]},
    )
    await problem(resp, status, code)
    assert await end_offsets(client, "orders") == [0, 0]


async def test_a_produce_to_a_transaction_not_open_or_to_an_internal_topic_is_refused(
    topics: Client,
) -> None:
    client = topics
    epoch = (await begin(client))["producer_epoch"]
    await end(client, "commit", epoch)
    resp = await client.post(
        "/v1/topics/orders/records",
        params=in_txn(epoch),
        json={"records": [{"value": 1, "partition": 0}]},
    )
    await problem(resp, 409, "INVALID_TXN_STATE")
    epoch = (await begin(client))["producer_epoch"]
    resp = await client.post(
        "/v1/topics/__consumer_offsets/records",
        params=in_txn(epoch),
        json={"records": [{"value": 1}]},
    )
    await problem(resp, 403, "INTERNAL_TOPIC")
    assert await end_offsets(client, "orders") == [0, 0]


@pytest.mark.parametrize(
    ("path", "body", "status", "code"),
    [
        ("", {"timeout_ms": 0}, 400, "INVALID_PARAMETER"),
        ("", {"timeout_ms": 900_001}, 400, "INVALID_TRANSACTION_TIMEOUT"),
        ("", {"timeout_ms": "1"}, 400, "INVALID_PARAMETER"),
        ("", {"timeout": 1}, 400, "INVALID_REQUEST"),
        ("", [], 400, "INVALID_JSON"),
        ("/commit", {}, 400, "INVALID_PARAMETER"),
        ("/commit", {"producer_epoch": -1}, 400, "INVALID_PARAMETER"),
        ("/commit", {"producer_epoch": True}, 400, "INVALID_PARAMETER"),
        ("/offsets", {"producer_epoch": 0}, 400, "INVALID_PARAMETER"),
        (
            "/offsets",
            {
                "producer_epoch": 0,
                "group_id": "g",
                "member_id": "m",
                "offsets": [{"topic": "orders", "partition": 0, "offset": 1}],
            },
            400,
            "INVALID_PARAMETER",
        ),
        (
            "/offsets",
            {
                "producer_epoch": 0,
                "group_id": "g",
                "generation_id": 1,
                "offsets": [{"topic": "orders", "partition": 0, "offset": 1}],
            },
            400,
            "INVALID_PARAMETER",
        ),
        (
            "/offsets",
            {
                "producer_epoch": 0,
                "group_id": "g",
                "member_id": "m",
                "generation_id": 1,
                "offsets": [{"topic": "orders", "partition": 0, "offset": -1}],
            },
            400,
            "INVALID_PARAMETER",
        ),
        (
            "/offsets",
            {
                "producer_epoch": 0,
                "group_id": "g",
                "member_id": "m",
                "generation_id": 1,
                "offsets": [{"topic": "orders", "partition": 0, "offset": 1}] * 2,
            },
            400,
            "INVALID_PARAMETER",
        ),
    ],
)
async def test_bad_transaction_calls_are_refused(
    topics: Client, path: str, body: object, status: int, code: str
) -> None:
    resp = await topics.post(f"{T}{path}", json=body)
    await problem(resp, status, code)


async def test_unknown_transactional_ids_and_bad_isolation(topics: Client) -> None:
    client = topics
    await problem(await client.get("/v1/transactions/nobody"), 404, "UNKNOWN_TRANSACTIONAL_ID")
    await problem(
        await client.post("/v1/transactions/nobody/commit", json={"producer_epoch": 0}),
        404,
        "UNKNOWN_TRANSACTIONAL_ID",
    )
    resp = await client.get(
        "/v1/topics/orders/partitions/0/records", params={"isolation": "serializable"}
    )
    await problem(resp, 400, "INVALID_PARAMETER")


async def test_a_group_member_reading_committed_sees_only_committed_records(
    topics: Client,
) -> None:
    client = topics
    resp = await client.post(
        "/v1/groups/rc/members", json={"topics": ["audit"], "auto_offset_reset": "earliest"}
    )
    member = (await resp.json())["member_id"]
    epoch = (await begin(client))["producer_epoch"]
    await produce(client, [{"value": "aborted"}], topic="audit", params=in_txn(epoch))
    await end(client, "abort", epoch)
    epoch = (await begin(client))["producer_epoch"]
    await produce(client, [{"value": "kept"}], topic="audit", params=in_txn(epoch))

    async def poll(isolation: str) -> list[object]:
        resp = await client.get(
            f"/v1/groups/rc/members/{member}/records",
            params={"timeout_ms": "0", "isolation": isolation},
        )
        assert resp.status == 200, await resp.text()
        return [r["value"] for r in (await resp.json())["records"]]

    assert await poll("read_committed") == []  # "kept" is not committed yet
    await end(client, "commit", epoch)
    assert await poll("read_committed") == ["kept"]
