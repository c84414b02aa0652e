"""In-process gateways (as tests/api) for the subscription tests; `client` is one that may
deliver to loopback receivers, with the topic `t` and the dead-letter topic `dlq`; `receiver`
is such a receiver."""

from collections.abc import AsyncIterator

import pytest

from tests.api.conftest import data_dir, start
from tests.api.support import Client, Start, create_topic
from tests.subscriptions.receiver import Receiver, serve

__all__ = ["client", "data_dir", "receiver", "start"]


@pytest.fixture
async def client(start: Start) -> Client:
    client = await start(subscription_allowed_hosts=("127.0.0.1",))
    await create_topic(client, "t")
    await create_topic(client, "dlq")
    return client


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    """A receiver on loopback that answers as its behaviour says (204 by default)."""
    got = Receiver()
    runner = await serve(got)
    yield got
    await runner.cleanup()
