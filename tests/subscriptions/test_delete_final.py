"""A delete is final: a commit that reaches the group's coordinator after the subscription was
deleted (a dispatcher on another node, late) is refused and brings no offset back, through the
same internal route such a node uses; a commit from a node whose view is ahead of the
coordinator's waits for it instead; the route checks what it is given."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from gateway.state import GATEWAY
from groups.subscriptions import positions
from replication.metadata import ClusterView
from tests.api.support import Client, produce
from tests.subscriptions.receiver import Receiver, serve
from tests.subscriptions.test_delivery import subscribe, until_described

ROUTE = "/internal/v1/subscriptions/s/positions"


async def test_a_late_commit_after_a_delete_is_refused(client: Client) -> None:
    receiver = Receiver()
    runner = await serve(receiver)
    try:
        sub = await subscribe(client, receiver.url)
        await produce(client, [{"value": 1}, {"value": 2}])
        await until_described(client, lambda d: d["partitions"][0]["committed_offset"] == 2)
        late = {"uid": sub["group"].rsplit(".", 1)[1], "topic": "t", "partition": 0, "offset": 2}
        assert (await client.put(ROUTE, json=late)).status == 204  # while it exists
        assert (await client.delete("/v1/subscriptions/s")).status == 204
        assert (await client.get(f"/v1/groups/{sub['group']}")).status == 404
        resp = await client.put(ROUTE, json={**late, "offset": 1})
        assert resp.status == 404 and (await resp.json())["code"] == "UNKNOWN_SUBSCRIPTION"
        assert (await client.get(f"/v1/groups/{sub['group']}")).status == 404  # nothing back
        resp = await client.delete(f"{ROUTE}?uid={late['uid']}")  # a forget again: harmless
        assert resp.status == 204
    finally:
        await runner.cleanup()


async def test_an_early_commit_waits_for_the_coordinators_view(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dispatcher on a node that saw the subscription commits to a coordinator whose view
    has not yet: the commit waits for that view (not refused as if deleted, which stopped the
    dispatcher for good), and a view that stays behind answers a retriable 503."""
    receiver = Receiver()
    runner = await serve(receiver)
    try:
        sub = await subscribe(client, receiver.url)
        await until_described(client, lambda d: d["partitions"][0]["committed_offset"] == 0)
        assert client.app is not None
        store = client.app[GATEWAY].replicas.store
        current = store.view
        version = current.subscriptions["s"].version
        waiting = asyncio.Event()
        wait_for = store.wait_for

        async def spied(predicate: Callable[[ClusterView], bool], timeout: float) -> bool:
            if not predicate(store.view):
                waiting.set()
            return await wait_for(predicate, timeout)

        monkeypatch.setattr(store, "wait_for", spied)
        store.publish(replace(current, revision=version - 1, subscriptions={}))  # not seen yet
        early = {
            "uid": sub["group"].rsplit(".", 1)[1], "topic": "t", "partition": 0, "offset": 0,
            "version": version,
        }  # fmt: skip
        put = asyncio.ensure_future(client.put(ROUTE, json=early))
        waited = asyncio.ensure_future(waiting.wait())
        await asyncio.wait([put, waited], return_when=asyncio.FIRST_COMPLETED)
        assert not put.done(), put.result().status
        store.publish(current)
        assert (await put).status == 204

        monkeypatch.setattr(positions, "VIEW_WAIT_S", 0.05)
        resp = await client.put(ROUTE, json={**early, "version": store.view.revision + 1})
        assert resp.status == 503 and (await resp.json())["code"] == "METADATA_UNAVAILABLE"
    finally:
        await runner.cleanup()


async def test_a_forget_names_the_uid(client: Client) -> None:
    """A forget of another uid (a subscription deleted, then made again under the same name)
    leaves the living one's positions."""
    receiver = Receiver()
    runner = await serve(receiver)
    try:
        sub = await subscribe(client, receiver.url)
        await until_described(client, lambda d: d["partitions"][0]["committed_offset"] == 0)
        other = await client.delete(f"{ROUTE}?uid=0123abcd")  # not its uid: nothing to wait for
        assert other.status == 204
        assert (await client.get(f"/v1/groups/{sub['group']}")).status == 200
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(
    ("body", "pointer"),
    [
        ({"uid": "XYZ", "topic": "t", "partition": 0, "offset": 0}, "/uid"),
        ({"uid": "ab", "topic": 5, "partition": 0, "offset": 0}, "/topic"),
        ({"uid": "ab", "topic": "t", "partition": -1, "offset": 0}, "/partition"),
        ({"uid": "ab", "topic": "t", "partition": 0, "offset": True}, "/offset"),
        ({"uid": "ab", "topic": "t", "partition": 0}, "/offset"),
        ({"uid": "ab", "topic": "t", "partition": 0, "offset": 0, "version": "1"}, "/version"),
    ],
)
async def test_the_positions_route_checks_its_input(
    client: Client, body: dict[str, Any], pointer: str
) -> None:
    resp = await client.put(ROUTE, json=body)
    assert resp.status == 400 and resp.content_type == "application/problem+json"
    assert (await resp.json())["pointer"] == pointer
    resp = await client.delete(f"{ROUTE}?uid=not-hex")
    assert resp.status == 400 and (await resp.json())["pointer"] == "/uid"
