"""A reply subscription's dispatcher stopped mid-transaction (here: the subscription deleted)
aborts that transaction as it stops, whether its begin was answered already or still on its
way, so the reply topic's last stable offset does not wait for the transaction's timeout."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.reply_transactions import ReplyTransactions
from groups.subscriptions.dispatcher import PartitionDispatcher
from tests.api.support import Client, gateway
from tests.subscriptions.receiver import Receiver
from tests.subscriptions.test_reply_delivery import inputs, replying, subscribe

__all__ = ["replying"]
WAIT_S = 10.0  # well within the transactions' 30 s timeout


def held(monkeypatch: pytest.MonkeyPatch, method: str) -> tuple[asyncio.Event, asyncio.Event]:
    """Patch ReplyTransactions.`method`: its first call is made, then sets the first event
    and answers only once the second is set (forever, unless the caller sets it)."""
    real = getattr(ReplyTransactions, method)
    reached, release = asyncio.Event(), asyncio.Event()
    calls: list[int] = []

    async def patched(self: ReplyTransactions, *args: Any) -> Any:
        calls.append(1)
        answer = await real(self, *args)
        if len(calls) == 1:
            reached.set()
            await release.wait()
        return answer

    monkeypatch.setattr(ReplyTransactions, method, patched)
    return reached, release


async def stopping(dispatcher: PartitionDispatcher) -> None:
    """Until `dispatcher` has begun to stop."""
    async with asyncio.timeout(WAIT_S):
        while not dispatcher.stopping:
            await asyncio.sleep(0.01)


async def ended(client: Client, tid: str) -> dict[str, Any]:
    async with asyncio.timeout(WAIT_S):
        while True:
            doc: dict[str, Any] = await (await client.get(f"/v1/transactions/{tid}")).json()
            if doc["state"] != "Ongoing":
                return doc
            await asyncio.sleep(0.02)


@pytest.mark.parametrize("method", ["produce", "begin"])
async def test_a_deleted_reply_subscription_aborts_its_open_transaction(
    replying: Client, receiver: Receiver, monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    """`produce`: stopped while its replies are produced (the transaction open); `begin`:
    stopped while its begin's answer is on its way (known to the coordinator only)."""
    client = replying
    reached, release = held(monkeypatch, method)
    sub = await subscribe(client, receiver.url)
    await inputs(client, 1)
    async with asyncio.timeout(WAIT_S):
        await reached.wait()
    tid = f"{sub['group']}.0"
    [dispatcher] = gateway(client).subscriptions.dispatchers.values()
    deleting = asyncio.ensure_future(client.delete("/v1/subscriptions/s"))
    await stopping(dispatcher)
    release.set()
    assert (await deleting).status == 204
    doc = await ended(client, tid)
    assert doc["state"] == "CompleteAbort" and doc.get("abort_cause") is None
    for partition in (0, 1):  # no reader of the reply topic held back
        path = f"/v1/topics/out/partitions/{partition}/offsets"
        committed = await client.get(path, params={"isolation": "read_committed"})
        assert await committed.json() == await (await client.get(path)).json()
