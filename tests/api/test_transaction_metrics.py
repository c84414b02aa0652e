"""Transactions' metrics on /metrics: the ids coordinated here by state, the transactions
completed by outcome, and each transactional partition's LSO lag."""

from __future__ import annotations

import pytest

from tests.api.support import Client, create_topic, gateway, metrics, produce, sample, wait_until
from tests.api.test_transactions import begin, in_txn


async def scrape(client: Client) -> tuple[dict[str, float | None], dict[str, float | None]]:
    """(ids by state, completed transactions by outcome)."""
    samples = await metrics(client)
    states = ("Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort")
    outcomes = ("committed", "aborted", "timed_out", "fenced", "operator")
    return (
        {s: sample(samples, "sluice_transactional_ids", state=s) for s in states},
        {o: sample(samples, "sluice_transactions_total", outcome=o) for o in outcomes},
    )


async def lso_lag(client: Client, topic: str, partition: int) -> float | None:
    samples = await metrics(client)
    return sample(samples, "sluice_partition_lso_lag", topic=topic, partition=str(partition))


async def test_ids_by_state_and_transactions_by_outcome(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    await create_topic(client, "orders")
    states, outcomes = await scrape(client)
    assert set(states.values()) == {0} and set(outcomes.values()) == {0}

    for name in ("committer", "aborter", "operated"):
        await begin(client, name)
    await client.post("/v1/transactions/committer/commit", json={"producer_epoch": 0})
    await client.post("/v1/transactions/aborter/abort", json={"producer_epoch": 0})
    await client.post("/v1/transactions/operated/abort")
    await begin(client, "fenced")
    assert (await begin(client, "fenced"))["producer_epoch"] == 2  # epoch 1 fenced epoch 0
    coordinator = gateway(client).transactions
    now = coordinator.clock() + 3_600_000
    await begin(client, "late", timeout_ms=1_000)
    monkeypatch.setattr(coordinator, "clock", lambda: now)
    # an hour on: the fenced id's new transaction has run past its timeout too
    assert await coordinator.abort_timed_out() == ["fenced", "late"]
    await wait_until(
        lambda: all(m.state.complete for m in coordinator.machine.transactions.values())
    )

    states, outcomes = await scrape(client)
    assert outcomes == {"committed": 1, "aborted": 1, "timed_out": 2, "fenced": 1, "operator": 1}
    assert states == {
        "Ongoing": 0,
        "PrepareCommit": 0,
        "PrepareAbort": 0,
        "CompleteCommit": 1,
        "CompleteAbort": 4,
    }


async def test_lso_lag_of_partitions_that_held_a_transaction(client: Client) -> None:
    await create_topic(client, "orders", partitions=2)
    await produce(client, [{"value": "plain", "partition": 0}], topic="orders")
    assert await lso_lag(client, "orders", 0) is None  # never transactional: no series

    epoch = (await begin(client, "tx"))["producer_epoch"]
    records = [{"value": v, "partition": 0} for v in ("a", "b", "c")]
    await produce(client, records, topic="orders", params=in_txn(epoch))
    await produce(client, [{"value": "after", "partition": 0}], topic="orders")
    assert await lso_lag(client, "orders", 0) == 4  # the open transaction's records and after
    assert await lso_lag(client, "orders", 1) is None

    resp = await client.post("/v1/transactions/tx/commit", json={"producer_epoch": epoch})
    assert (await resp.json())["state"] == "CompleteCommit"
    assert await lso_lag(client, "orders", 0) == 0
