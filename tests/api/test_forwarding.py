"""The forwarding middleware when the node a request is routed to refuses connections: it waits
(bounded by leader_wait_ms in all) for the view to name another node, routes there, and
otherwise answers LEADER_NOT_AVAILABLE; it never calls itself again while the view still names
the dead node (that recursed until a RecursionError, a 500). When that node answers 421 (not
its own), the request is routed again once this node's view moved on."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway.api.forwarding import forwarding_middleware
from gateway.state import GATEWAY
from replication.errors import LeaderNotAvailable, NodeUnreachable, NotLeader
from replication.forward_client import Answer
from replication.memory_store import MemoryBackend, MemoryMetadataStore
from replication.metadata import NodeInfo


class Forwarder:
    """Node 1 refuses connections; node 2 answers 200, or what a test puts in `answers`."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.answers: dict[str, Callable[[], Answer]] = {}

    async def forward(self, url: str, *args: Any) -> Answer:
        self.calls.append(url)
        if url in self.answers:
            return self.answers[url]()
        if url.endswith("node1"):
            raise NodeUnreachable("connection refused", delivered=False)
        return Answer(200, {"Content-Type": "text/plain"}, b"served by node 2")


Refusals = list[BaseException]


@pytest.fixture
async def world() -> AsyncIterator[tuple[TestClient[Any, Any], MemoryBackend, list[int], Refusals]]:
    backend = MemoryBackend()
    stores = [MemoryMetadataStore(backend) for _ in range(3)]
    for node, store in enumerate(stores):
        await store.start(NodeInfo(node, f"http://node{node}"))
    leader = [1]  # whom the handler names as the leader; a test changes it
    refusals: Refusals = []

    async def handler(request: web.Request) -> web.Response:
        if leader[0] == 0:
            return web.Response(text="served by node 0")
        raise NotLeader("not here", leader[0])

    @web.middleware
    async def refused(request: web.Request, handler: Any) -> web.StreamResponse:
        """What the problem middleware would render: here the error itself, kept."""
        try:
            answer: web.StreamResponse = await handler(request)
        except Exception as exc:
            refusals.append(exc)
            return web.Response(status=503 if isinstance(exc, LeaderNotAvailable) else 500)
        return answer

    app = web.Application(middlewares=[refused, forwarding_middleware])
    app.router.add_get("/thing", handler)
    settings = SimpleNamespace(leader_wait_ms=2000, node_id=0, max_request_bytes=1 << 20)
    app[GATEWAY] = SimpleNamespace(  # type: ignore[misc]
        broker=SimpleNamespace(store=stores[0]),
        settings=settings,
        forwarder=Forwarder(),
        draining=asyncio.Event(),
    )
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        yield client, backend, leader, refusals
    finally:
        await client.close()
        for store in stores:
            await store.close()


World = tuple[TestClient[Any, Any], MemoryBackend, list[int], Refusals]


async def test_a_dead_node_still_named_is_asked_once_then_refused(world: World) -> None:
    client, backend, _, refusals = world
    backend.expire(1)  # gone from the cluster, but nobody leads in its place
    response = await client.get("/thing")
    assert response.status == 503
    assert [type(r) for r in refusals] == [LeaderNotAvailable]
    assert client.app[GATEWAY].forwarder.calls == ["http://node1"]  # not again and again


async def test_a_dead_node_is_left_for_the_one_elected_in_its_place(world: World) -> None:
    client, backend, leader, refusals = world

    async def elect_later() -> None:
        await asyncio.sleep(0.1)  # the request finds node 1 down first
        backend.expire(1)
        await asyncio.sleep(0.1)
        leader[0] = 2
        backend.revive(0)  # a new revision: the view moved on

    election = asyncio.ensure_future(elect_later())
    response = await client.get("/thing")
    await election
    assert response.status == 200 and await response.text() == "served by node 2"
    calls = client.app[GATEWAY].forwarder.calls
    assert calls[-1] == "http://node2" and calls.count("http://node1") <= 1
    assert refusals == []


MISDIRECTED = Answer(
    421,
    {"Content-Type": "application/problem+json"},
    b'{"status":421,"code":"NOT_LEADER_OR_FOLLOWER","leader":0}',
)


async def test_a_request_the_node_named_refuses_as_misdirected_is_routed_again(
    world: World,
) -> None:
    """Node 2 refuses the request as not its own: its view, newer than this node's, has this
    node lead (as a controller that made a coordinator's topic finds the coordinator is the
    node the request came from). Once this node's view moves on too, it serves the request."""
    client, backend, leader, refusals = world
    leader[0] = 2
    forwarder = client.app[GATEWAY].forwarder

    def refused_there() -> Answer:
        leader[0] = 0
        backend.revive(0)  # a new revision: this node's view moves on
        return MISDIRECTED

    forwarder.answers["http://node2"] = refused_there
    response = await client.get("/thing")
    assert response.status == 200 and await response.text() == "served by node 0"
    assert forwarder.calls == ["http://node2"] and refusals == []


async def test_a_misdirected_answer_is_passed_on_if_the_view_does_not_move(world: World) -> None:
    """Within leader_wait_ms the view never changes: the 421 is the answer, asked once."""
    client, _, leader, _ = world
    leader[0] = 2
    forwarder = client.app[GATEWAY].forwarder
    forwarder.answers["http://node2"] = lambda: MISDIRECTED
    response = await client.get("/thing")
    assert response.status == 421 and (await response.json())["leader"] == 0
    assert forwarder.calls == ["http://node2"]
