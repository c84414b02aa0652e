"""A coordinator's state topic (`__share_group_state`, `__transaction_state`) is made by the
controller only: a call at another node whose view lacks it is sent to the controller
(NotController), unless the topic is in the store already, made a moment ago, with this
node's view behind (a call the controller forwarded on to this node): then it waits for the
view instead of answering a misdirected 421 that its sender can only relay."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace

import pytest

from gateway.settings import Settings
from gateway.state import Gateway
from replication.errors import NotController

TOPIC = "__share_group_state"


class LaggingStore:
    """A store holding the topic (or not) whose view gains it only when waited for."""

    def __init__(self, holds_topic: bool) -> None:
        self.holds_topic = holds_topic
        self.view = SimpleNamespace(topics={}, controller=1)
        self.waits = 0

    async def topic_exists(self, name: str) -> bool:
        return self.holds_topic and name == TOPIC

    async def wait_for(self, predicate: Callable[[object], bool], timeout: float) -> bool:
        self.waits += 1
        if self.holds_topic:
            self.view = SimpleNamespace(topics={TOPIC: object()}, controller=1)
        return predicate(self.view)


def node_with(store: LaggingStore) -> SimpleNamespace:
    """What `Gateway._state_topic_ready` reads of its gateway: node 2 of a cluster."""
    return SimpleNamespace(
        broker=SimpleNamespace(store=store),
        settings=Settings(node_id=2, cluster=("127.0.0.1:2379",)),
    )


def test_a_topic_the_store_holds_is_waited_for_in_the_view() -> None:
    store = LaggingStore(holds_topic=True)
    loaded: list[float | None] = []

    async def load(timeout_s: float | None) -> None:
        loaded.append(timeout_s)

    asyncio.run(Gateway._state_topic_ready(node_with(store), TOPIC, {}, load))  # type: ignore[arg-type]
    assert store.waits == 1 and len(loaded) == 1


def test_a_topic_not_made_yet_is_sent_to_the_controller() -> None:
    store = LaggingStore(holds_topic=False)

    async def load(timeout_s: float | None) -> None:
        raise AssertionError("nothing to load")

    with pytest.raises(NotController, match=r"the controller \(node 1\) makes it"):
        asyncio.run(Gateway._state_topic_ready(node_with(store), TOPIC, {}, load))  # type: ignore[arg-type]
    assert store.waits == 0
