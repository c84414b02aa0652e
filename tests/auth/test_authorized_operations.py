"""What a caller may do, asked rather than tried (Kafka's KIP-430): `GET /v1/auth/whoami` and
the describe answers of the cluster, a topic, a group and a share group with
`include_authorized_operations=true`, for a super user, principals with a few bindings, and
with auth off (everything allowed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.api.support import Client, Start, create_topic, problem
from tests.auth.support import bearer, binding, grant, make_key

ASKED = "?include_authorized_operations=true"
PRINCIPALS = ("admin", "alice", "bob", "carol", "dave")


@pytest.fixture
async def keys(data_dir: Path) -> dict[str, str]:
    return {name: make_key(data_dir, name) for name in PRINCIPALS}


@pytest.fixture
async def client(start: Start, keys: dict[str, str]) -> Client:
    """--auth with `admin` a super user, `orders` a topic, `billing` a group with a
    committed offset and a share group with a config."""
    client = await start(auth=True, super_users=("admin",))
    admin = bearer(keys["admin"])
    created = await client.post("/v1/topics", json={"name": "orders"}, headers=admin)
    assert created.status == 201, await created.text()
    offsets = {"topic": "orders", "to": "earliest"}
    reset = await client.put("/v1/groups/billing/offsets", json=offsets, headers=admin)
    assert reset.status == 200, await reset.text()
    configs = {"configs": {"share.delivery.count.limit": 3}}
    shared = await client.put("/v1/share-groups/billing/configs", json=configs, headers=admin)
    assert shared.status == 200, await shared.text()
    return client


async def whoami(client: Client, key: str) -> dict[str, Any]:
    answer = await client.get("/v1/auth/whoami", headers=bearer(key))
    assert answer.status == 200, await answer.text()
    doc: dict[str, Any] = await answer.json()
    return doc


async def operations(client: Client, path: str, key: str) -> list[str]:
    answer = await client.get(path + ASKED, headers=bearer(key))
    assert answer.status == 200, await answer.text()
    found: list[str] = (await answer.json())["authorized_operations"]
    return found


async def test_a_super_user_may_do_everything(client: Client, keys: dict[str, str]) -> None:
    admin = keys["admin"]
    assert await whoami(client, admin) == {
        "principal": "admin",
        "auth": True,
        "super_user": True,
        "cluster_authorized_operations": ["create", "alter", "describe"],
    }
    assert await operations(client, "/v1/cluster", admin) == ["create", "alter", "describe"]
    assert await operations(client, "/v1/topics/orders", admin) == [
        "read", "write", "create", "delete", "alter", "describe",
    ]  # fmt: skip
    for group in ("/v1/groups/billing", "/v1/share-groups/billing"):
        assert await operations(client, group, admin) == ["read", "delete", "alter", "describe"]


async def test_read_on_one_topic(client: Client, keys: dict[str, str]) -> None:
    """Alice may read `orders` and nothing else: read and the describe it implies there, nothing
    on the cluster, and no other topic to describe."""
    alice = keys["alice"]
    await grant(client, keys["admin"], binding("alice", "topic", "orders", "read"))
    assert await whoami(client, alice) == {
        "principal": "alice",
        "auth": True,
        "super_user": False,
        "cluster_authorized_operations": [],
    }
    assert await operations(client, "/v1/topics/orders", alice) == ["read", "describe"]
    await create_topic_as(client, keys["admin"], "payments")
    denied = await client.get("/v1/topics/payments" + ASKED, headers=bearer(alice))
    await problem(denied, 403, "ACL_DENIED")
    await problem(await client.get("/v1/cluster" + ASKED, headers=bearer(alice)), 403, "ACL_DENIED")


async def create_topic_as(client: Client, key: str, name: str) -> None:
    answer = await client.post("/v1/topics", json={"name": name}, headers=bearer(key))
    assert answer.status == 201, await answer.text()


async def test_prefixed_bindings_and_a_group(client: Client, keys: dict[str, str]) -> None:
    bob = keys["bob"]
    await grant(
        client,
        keys["admin"],
        binding("bob", "topic", "ord", "write", pattern="prefixed"),
        binding("bob", "topic", "*", "create"),
        binding("bob", "group", "billing", "read"),
        binding("bob", "group", "bill", "delete", pattern="prefixed"),
    )
    assert await operations(client, "/v1/topics/orders", bob) == ["write", "create", "describe"]
    assert await operations(client, "/v1/groups/billing", bob) == ["read", "delete", "describe"]
    shared = await operations(client, "/v1/share-groups/billing", bob)
    assert shared == ["read", "delete", "describe"]
    assert (await whoami(client, bob))["cluster_authorized_operations"] == []


async def test_deny_wins_and_the_cluster_is_answered_without_describe(
    client: Client, keys: dict[str, str]
) -> None:
    """Carol may create topics and alter the cluster but is denied describe: whoami still says
    what she may do to the cluster, which the cluster's describe would refuse her."""
    carol = keys["carol"]
    await grant(
        client,
        keys["admin"],
        binding("carol", "cluster", "cluster", "create"),
        binding("carol", "cluster", "cluster", "alter"),
        binding("carol", "cluster", "cluster", "describe", permission="deny"),
    )
    assert (await whoami(client, carol))["cluster_authorized_operations"] == ["create", "alter"]
    await problem(await client.get("/v1/cluster" + ASKED, headers=bearer(carol)), 403, "ACL_DENIED")


async def test_a_change_of_bindings_shows_at_once(client: Client, keys: dict[str, str]) -> None:
    dave = keys["dave"]
    assert (await whoami(client, dave))["cluster_authorized_operations"] == []
    await grant(client, keys["admin"], binding("dave", "cluster", "cluster", "describe"))
    assert (await whoami(client, dave))["cluster_authorized_operations"] == ["describe"]
    assert await operations(client, "/v1/cluster", dave) == ["describe"]


async def test_asked_only_when_asked(client: Client, keys: dict[str, str]) -> None:
    admin = bearer(keys["admin"])
    for path in (
        "/v1/cluster",
        "/v1/topics/orders",
        "/v1/groups/billing",
        "/v1/share-groups/billing",
    ):
        plain = await client.get(path, headers=admin)
        assert "authorized_operations" not in await plain.json(), path
        declined = await client.get(f"{path}?include_authorized_operations=false", headers=admin)
        assert "authorized_operations" not in await declined.json(), path
        wrong = await client.get(f"{path}?include_authorized_operations=yes", headers=admin)
        refused = await problem(wrong, 400, "INVALID_PARAMETER")
        assert "include_authorized_operations" in refused["detail"], path


async def test_whoami_needs_credentials(client: Client) -> None:
    await problem(await client.get("/v1/auth/whoami"), 401, "UNAUTHENTICATED")


async def test_with_auth_off_everything_is_allowed(start: Start) -> None:
    client = await start()
    await create_topic(client, "orders")
    offsets = {"topic": "orders", "to": "earliest"}
    assert (await client.put("/v1/groups/billing/offsets", json=offsets)).status == 200
    answer = await client.get("/v1/auth/whoami")
    assert answer.status == 200
    assert await answer.json() == {
        "principal": "ANONYMOUS",
        "auth": False,
        "super_user": False,
        "cluster_authorized_operations": ["create", "alter", "describe"],
    }
    for path, expected in (
        ("/v1/cluster", ["create", "alter", "describe"]),
        ("/v1/topics/orders", ["read", "write", "create", "delete", "alter", "describe"]),
        ("/v1/groups/billing", ["read", "delete", "alter", "describe"]),
    ):
        described = await client.get(path + ASKED)
        assert (await described.json())["authorized_operations"] == expected, path
