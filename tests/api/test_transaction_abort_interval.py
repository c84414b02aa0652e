"""--transaction-abort-interval-ms: how often the coordinator aborts the transactions open
past their timeout (Kafka's transaction.abort.timed.out.transaction.cleanup.interval.ms)."""

from __future__ import annotations

from tests.api.support import Start, create_topic, gateway, problem, wait_until


async def test_a_transaction_past_its_timeout_is_aborted_within_the_interval(
    start: Start,
) -> None:
    """With a 50 ms interval, a transaction with a 100 ms timeout is aborted by the cluster
    well within the wait (the default interval, 10 s, would not)."""
    client = await start(transaction_abort_interval_ms=50)
    await create_topic(client, "orders")
    resp = await client.post("/v1/transactions/tx", json={"timeout_ms": 100})
    assert resp.status == 201, await resp.text()
    epoch = (await resp.json())["producer_epoch"]
    resp = await client.post(
        "/v1/topics/orders/records",
        params={"transactional_id": "tx", "producer_epoch": str(epoch)},
        json={"records": [{"value": "late"}]},
    )
    assert resp.status == 200, await resp.text()
    coordinator = gateway(client).transactions
    await wait_until(lambda: coordinator.machine.get("tx").state.complete, timeout=3.0)
    assert coordinator.machine.get("tx").abort_cause is not None
    await problem(
        await client.post("/v1/transactions/tx/commit", json={"producer_epoch": epoch}),
        409,
        "TRANSACTION_TIMED_OUT",
    )
