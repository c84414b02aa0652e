"""A read_committed subscription starting at `latest` starts at the last stable offset: the
records of a transaction open when it was made are delivered once that transaction commits.
The partition reader's `latest` is the level's, read here or from a leader elsewhere."""

from __future__ import annotations

import pytest

from engine.producer_state import Isolation
from groups.partition_reader import PartitionReader
from replication.forward_client import ForwardClient
from tests.api.support import Client, gateway, produce
from tests.subscriptions.receiver import Receiver
from tests.subscriptions.test_isolation import (
    delivered,
    end,
    subscribe,
    transaction,
    until_committed,
)


async def open_transaction(client: Client) -> int:
    """ "open" in a transaction left open at offset 0, "after" plainly behind it: the last
    stable offset is 0, the high watermark 2. The transaction's epoch."""
    epoch = await transaction(client, "a")
    await produce(
        client, [{"value": "open"}], params={"transactional_id": "a", "producer_epoch": str(epoch)}
    )
    await produce(client, [{"value": "after"}])
    return epoch


async def test_a_read_committed_subscription_from_latest_delivers_the_open_transaction(
    client: Client, receiver: Receiver
) -> None:
    epoch = await open_transaction(client)
    await subscribe(client, receiver.url, start="latest", isolation="read_committed")
    await until_committed(client, 0)
    await end(client, "a", "commit", epoch)
    await until_committed(client, 3)
    assert delivered(receiver) == ["open", "after"]


@pytest.mark.parametrize("elsewhere", [False, True])
async def test_the_readers_latest_is_the_levels(client: Client, elsewhere: bool) -> None:
    await open_transaction(client)
    forwarder = ForwardClient(99)
    reader = PartitionReader(gateway(client).replicas, forwarder)
    if elsewhere:  # the leader asked over HTTP, as another node's reader asks it
        url = str(client.make_url("")).rstrip("/")
        reader._leader_url = lambda topic, partition: url  # type: ignore[method-assign]
    try:
        assert await reader.offset("t", 0, "latest", Isolation.READ_COMMITTED) == 0
        assert await reader.offset("t", 0, "latest") == 2
    finally:
        await forwarder.close()
