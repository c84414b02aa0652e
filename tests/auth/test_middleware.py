"""The auth middleware and routes in process: 401 with a challenge, 403 that changes nothing,
filtered listings, Basic, the internal key, the admin routes, and secrets kept out of logs,
metrics and answers."""

from __future__ import annotations

import base64
import logging
from pathlib import Path

import pytest

from gateway.auth import authenticator, credentials
from tests.api.support import Client, Start, gateway, metrics, problem, sample
from tests.auth.support import bearer, binding, grant, make_basic, make_key


@pytest.fixture
async def keys(data_dir: Path) -> dict[str, str]:
    return {name: make_key(data_dir, name) for name in ("admin", "alice", "bob")}


@pytest.fixture
async def client(start: Start, keys: dict[str, str]) -> Client:
    return await start(auth=True, super_users=("admin",))


async def test_no_credentials_is_401_with_a_challenge(client: Client) -> None:
    for path in ("/v1/topics", "/v1/nowhere", "/metrics", "/readyz", "/openapi.yaml"):
        answer = await client.get(path)
        await problem(answer, 401, "UNAUTHENTICATED")
        assert answer.headers["WWW-Authenticate"] == 'Bearer realm="sluice"'
    assert (await client.get("/healthz")).status == 200


async def test_public_metrics_and_readyz_when_configured(start: Start) -> None:
    client = await start(auth=True, auth_public_metrics=True, auth_public_readyz=True)
    assert (await client.get("/metrics")).status == 200
    assert (await client.get("/readyz")).status == 200
    await problem(await client.get("/v1/cluster"), 401, "UNAUTHENTICATED")


async def test_bad_and_revoked_keys_are_401(client: Client, keys: dict[str, str]) -> None:
    for header in ("Bearer nonsense", "Bearer " + keys["alice"] + "x", "Token abc", "Bearer ",
                   "Basic " + base64.b64encode(b"alice:pw").decode()):  # fmt: skip
        answer = await client.get("/v1/topics", headers={"Authorization": header})
        await problem(answer, 401, "UNAUTHENTICATED")
    assert (await client.get("/v1/topics", headers=bearer(keys["alice"]))).status == 200
    listed = await (await client.get("/v1/auth/keys", headers=bearer(keys["admin"]))).json()
    alice = next(k for k in listed["keys"] if k["principal"] == "alice")
    revoked = await client.delete(f"/v1/auth/keys/{alice['key_id']}", headers=bearer(keys["admin"]))
    assert revoked.status == 204
    await problem(
        await client.get("/v1/topics", headers=bearer(keys["alice"])), 401, "UNAUTHENTICATED"
    )


async def test_a_denied_produce_appends_nothing(client: Client, keys: dict[str, str]) -> None:
    admin, alice = keys["admin"], keys["alice"]
    created = await client.post("/v1/topics", json={"name": "orders"}, headers=bearer(admin))
    assert created.status == 201
    body = {"records": [{"value": 1}]}
    answer = await client.post("/v1/topics/orders/records", json=body, headers=bearer(alice))
    denied = await problem(answer, 403, "ACL_DENIED")
    assert denied["principal"] == "alice" and denied["operation"] == "write"
    assert denied["resource_type"] == "topic" and denied["resource_name"] == "orders"
    offsets = await client.get("/v1/topics/orders/partitions/0/offsets", headers=bearer(admin))
    assert (await offsets.json())["offset"] == 0
    await grant(client, admin, binding("alice", "topic", "orders", "write"))
    answer = await client.post("/v1/topics/orders/records", json=body, headers=bearer(alice))
    assert answer.status == 200, await answer.text()
    # writing does not let her read, but it lets her describe (Kafka's implied describe)
    fetch = await client.get(
        "/v1/topics/orders/partitions/0/records?offset=0", headers=bearer(alice)
    )
    await problem(fetch, 403, "ACL_DENIED")
    assert (await client.get("/v1/topics/orders", headers=bearer(alice))).status == 200


async def test_acl_changes_apply_at_once(client: Client, keys: dict[str, str]) -> None:
    admin, bob = keys["admin"], keys["bob"]
    assert (await client.post("/v1/topics", json={"name": "t"}, headers=bearer(admin))).status
    path = "/v1/topics/t/partitions/0/records?offset=0&timeout_ms=0"
    await problem(await client.get(path, headers=bearer(bob)), 403, "ACL_DENIED")
    read = binding("bob", "topic", "t", "read")
    await grant(client, admin, read)
    assert (await client.get(path, headers=bearer(bob))).status == 200
    no = binding("bob", "topic", "t", "read", permission="deny")
    await grant(client, admin, no)
    await problem(await client.get(path, headers=bearer(bob)), 403, "ACL_DENIED")
    removed = await client.delete("/v1/acls", json=no, headers=bearer(admin))
    assert removed.status == 204
    assert (await client.get(path, headers=bearer(bob))).status == 200
    again = await client.delete("/v1/acls", json=no, headers=bearer(admin))
    await problem(again, 404, "ACL_NOT_FOUND")


async def test_a_group_event_stream_needs_read_on_the_group(
    client: Client, keys: dict[str, str]
) -> None:
    admin, bob = keys["admin"], keys["bob"]
    assert (await client.post("/v1/topics", json={"name": "t"}, headers=bearer(admin))).status
    await grant(client, admin, binding("bob", "topic", "t", "read"))
    path = "/v1/topics/t/events?group=g&max_events=1&offset=earliest"
    sse = {**bearer(bob), "Accept": "text/event-stream"}
    await problem(await client.get(path, headers=sse), 403, "ACL_DENIED")
    assert gateway(client).groups.groups.get("g") is None  # refused before it joined
    await grant(client, admin, binding("bob", "group", "g", "read"))
    produced = await client.post(
        "/v1/topics/t/records", json={"records": [{"value": 1}]}, headers=bearer(admin)
    )
    assert produced.status == 200
    answer = await client.get(path, headers=sse)
    assert answer.status == 200
    assert b'"value":1' in await answer.read()


async def test_listings_show_only_what_the_principal_may_describe(
    client: Client, keys: dict[str, str]
) -> None:
    admin, alice = keys["admin"], keys["alice"]
    for name in ("team-a.orders", "team-a.users", "team-b.orders"):
        created = await client.post("/v1/topics", json={"name": name}, headers=bearer(admin))
        assert created.status == 201
    await grant(
        client,
        admin,
        binding("alice", "topic", "team-a.", "read", pattern="prefixed"),
        binding("alice", "group", "team-a.", "read", pattern="prefixed"),
        binding("admin", "group", "*", "read"),
    )
    listed = await (await client.get("/v1/topics", headers=bearer(alice))).json()
    assert [t["name"] for t in listed["topics"]] == ["team-a.orders", "team-a.users"]
    everything = await (await client.get("/v1/topics", headers=bearer(admin))).json()
    assert len(everything["topics"]) == 3
    for group in ("team-a.billing", "team-b.billing"):
        joined = await client.post(
            f"/v1/groups/{group}/members", json={"topics": ["team-a.orders"]}, headers=bearer(admin)
        )
        assert joined.status == 201, await joined.text()
    groups = await (await client.get("/v1/groups", headers=bearer(alice))).json()
    assert [g["group"] for g in groups["groups"]] == ["team-a.billing"]


async def test_a_group_member_needs_read_on_its_topics(
    client: Client, keys: dict[str, str]
) -> None:
    admin, alice = keys["admin"], keys["alice"]
    for name in ("mine", "theirs"):
        assert (await client.post("/v1/topics", json={"name": name}, headers=bearer(admin))).ok
    await grant(
        client,
        admin,
        binding("alice", "group", "g", "read"),
        binding("alice", "topic", "mine", "read"),
    )
    members = "/v1/groups/g/members"
    refused = await client.post(members, json={"topics": ["mine", "theirs"]}, headers=bearer(alice))
    body = await problem(refused, 403, "ACL_DENIED")
    assert body["resource_name"] == "theirs"
    joined = await client.post(members, json={"topics": ["mine"]}, headers=bearer(alice))
    member = (await joined.json())["member_id"]
    fetched = await client.get(f"{members}/{member}/records?timeout_ms=0", headers=bearer(alice))
    assert fetched.status == 200
    commit = {"offsets": [{"topic": "theirs", "partition": 0, "offset": 0}]}
    answer = await client.post(f"{members}/{member}/commit", json=commit, headers=bearer(alice))
    await problem(answer, 403, "ACL_DENIED")
    # the ACL is withdrawn while she is a member: her next fetch is refused
    await client.delete("/v1/acls", json=binding("alice", "topic", "mine", "read"),
                        headers=bearer(admin))  # fmt: skip
    fetched = await client.get(f"{members}/{member}/records?timeout_ms=0", headers=bearer(alice))
    await problem(fetched, 403, "ACL_DENIED")


async def test_creating_topics_needs_create_on_the_topic_or_cluster(
    start: Start, keys: dict[str, str]
) -> None:
    client = await start(auth=True, super_users=("admin",), auto_create_topics=True)
    admin, alice, bob = keys["admin"], keys["alice"], keys["bob"]
    await grant(
        client,
        admin,
        binding("alice", "topic", "alice.", "create", pattern="prefixed"),
        binding("alice", "topic", "alice.", "write", pattern="prefixed"),
        binding("bob", "cluster", "cluster", "create"),
    )
    mine = await client.post("/v1/topics", json={"name": "alice.x"}, headers=bearer(alice))
    assert mine.status == 201
    other = await client.post("/v1/topics", json={"name": "bob.x"}, headers=bearer(alice))
    await problem(other, 403, "ACL_DENIED")
    assert (await client.post("/v1/topics", json={"name": "b"}, headers=bearer(bob))).status == 201
    body = {"records": [{"value": 1}]}
    auto = await client.post("/v1/topics/alice.auto/records", json=body, headers=bearer(alice))
    assert auto.status == 200, await auto.text()


async def test_basic_auth_is_checked_once_then_remembered(
    start: Start, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = make_basic(data_dir, "carol")
    client = await start(auth=True, auth_basic=True, super_users=("carol",))
    calls: list[str] = []
    real = credentials.verify_basic

    def counted(record: object, given: str) -> bool:
        calls.append(given)
        return real(record, given)  # type: ignore[arg-type]

    monkeypatch.setattr(authenticator, "verify_basic", counted)
    login = {"Authorization": "Basic " + base64.b64encode(f"carol:{secret}".encode()).decode()}
    for _ in range(3):
        assert (await client.get("/v1/cluster", headers=login)).status == 200
    assert len(calls) == 1
    wrong = {"Authorization": "Basic " + base64.b64encode(b"carol:guess").decode()}
    answer = await client.get("/v1/cluster", headers=wrong)
    await problem(answer, 401, "UNAUTHENTICATED")
    assert answer.headers["WWW-Authenticate"] == (
        'Bearer realm="sluice", Basic realm="sluice", charset="UTF-8"'
    )


async def test_the_principal_header_is_trusted_only_with_the_internal_key(
    start: Start, data_dir: Path, tmp_path: Path
) -> None:
    alice = make_key(data_dir, "alice")
    internal = tmp_path / "internal.key"
    internal.write_text("0123456789abcdef0123456789abcdef\n")
    client = await start(auth=True, internal_key_file=internal)
    spoofed = {**bearer(alice), "Sluice-Principal": "sluice:internal"}
    await problem(await client.get("/v1/cluster", headers=spoofed), 403, "ACL_DENIED")
    node = bearer("0123456789abcdef0123456789abcdef")
    assert (await client.get("/v1/cluster", headers=node)).status == 200
    on_behalf = {**node, "Sluice-Principal": "alice"}
    await problem(await client.get("/v1/cluster", headers=on_behalf), 403, "ACL_DENIED")
    replica = "/internal/v1/replicas/__consumer_offsets/0/epoch-end?leader_epoch=0&epoch=0"
    await problem(await client.get(replica, headers=bearer(alice)), 403, "INTERNAL_ONLY")
    assert (await client.get(replica, headers=node)).status == 200


async def test_verified_headers_are_remembered_until_credentials_or_node_keys_change(
    start: Start, data_dir: Path, tmp_path: Path
) -> None:
    """What `Authenticator.known` answers without I/O (the fast routes' authentication): an API
    key, a Basic login and a node's key once checked, the node's principal per request; all
    forgotten when any credential changes, or the node keys do (SIGHUP)."""
    admin, alice = make_key(data_dir, "admin"), make_key(data_dir, "alice")
    secret = make_basic(data_dir, "bob")
    internal = tmp_path / "internal.key"
    internal.write_text("0123456789abcdef0123456789abcdef\n")
    client = await start(
        auth=True, auth_basic=True, super_users=("admin",), internal_key_file=internal
    )
    known = gateway(client).auth.authenticator.known
    basic = "Basic " + base64.b64encode(f"bob:{secret}".encode()).decode()
    node = "Bearer 0123456789abcdef0123456789abcdef"
    headers = {f"Bearer {alice}": "alice", basic: "bob", node: "sluice:internal"}
    assert all(known(header, None) is None for header in headers)
    for header in headers:
        assert (await client.get("/v1/topics", headers={"Authorization": header})).status == 200
    assert {header: known(header, None) for header in headers} == headers
    assert known(node, "alice") == "alice" and known(f"Bearer {alice}", "x") == "alice"
    made = await client.post("/v1/auth/keys", json={"principal": "carol"}, headers=bearer(admin))
    assert made.status == 201
    assert all(known(header, None) is None for header in headers)
    assert (await client.get("/v1/topics", headers={"Authorization": node})).status == 200
    internal.write_text("fedcba9876543210fedcba9876543210\n")
    await gateway(client).auth.reload()
    assert known(node, None) is None
    await problem(
        await client.get("/v1/topics", headers={"Authorization": node}), 401, "UNAUTHENTICATED"
    )


async def test_keys_through_the_admin_route(client: Client, keys: dict[str, str]) -> None:
    admin, alice = keys["admin"], keys["alice"]
    refused = await client.post("/v1/auth/keys", json={"principal": "x"}, headers=bearer(alice))
    await problem(refused, 403, "SUPER_USER_ONLY")
    made = await client.post("/v1/auth/keys", json={"principal": "dave"}, headers=bearer(admin))
    assert made.status == 201
    doc = await made.json()
    assert doc["principal"] == "dave" and doc["type"] == "api-key"
    await grant(client, admin, binding("dave", "cluster", "cluster", "describe"))
    assert (await client.get("/v1/cluster", headers=bearer(doc["secret"]))).status == 200
    listed = await (await client.get("/v1/auth/keys", headers=bearer(admin))).json()
    assert doc["secret"] not in str(listed)
    bad = await client.post("/v1/auth/keys", json={"principal": "a:b"}, headers=bearer(admin))
    await problem(bad, 400, "INVALID_PRINCIPAL")


async def test_keys_route_is_off_without_auth(start: Start) -> None:
    client = await start()
    answer = await client.post("/v1/auth/keys", json={"principal": "x"})
    await problem(answer, 403, "AUTH_DISABLED")
    added = await client.post("/v1/acls", json=binding("a", "topic", "t", "read"))
    assert added.status == 201  # bindings can be prepared before auth is turned on
    assert (await client.post("/v1/acls", json=binding("a", "topic", "t", "read"))).status == 200
    listed = await (await client.get("/v1/acls?principal=a")).json()
    assert listed == {"acls": [binding("a", "topic", "t", "read")]}
    await problem(await client.post("/v1/acls", json={"principal": "a"}), 400, "INVALID_ACL")


async def test_acls_survive_a_restart(start: Start, keys: dict[str, str]) -> None:
    client = await start(auth=True, super_users=("admin",))
    await grant(client, keys["admin"], binding("alice", "cluster", "cluster", "describe"))
    await client.close()
    again = await start(auth=True, super_users=("admin",))
    assert (await again.get("/v1/cluster", headers=bearer(keys["alice"]))).status == 200


async def test_a_key_made_offline_while_running_is_accepted(
    client: Client, data_dir: Path, keys: dict[str, str]
) -> None:
    await grant(client, keys["admin"], binding("*", "cluster", "cluster", "describe"))
    late = make_key(data_dir, "late")
    assert (await client.get("/v1/cluster", headers=bearer(late))).status == 200


async def test_cors_preflights_are_not_authenticated(client: Client) -> None:
    preflight = {"Origin": "https://app.test", "Access-Control-Request-Method": "POST"}
    answer = await client.options("/v1/topics", headers=preflight)
    assert answer.status != 401
    await problem(await client.options("/v1/topics"), 401, "UNAUTHENTICATED")


async def test_refusals_are_counted_and_secrets_stay_out_of_logs(
    start: Start, data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    admin = make_key(data_dir, "admin")
    client = await start(auth=True, super_users=("admin",), auth_public_metrics=True)
    caplog.set_level(logging.DEBUG)
    secret = "sluice_deadbeef0000_" + "s" * 43
    answer = await client.get("/v1/cluster", headers=bearer(secret))
    assert secret not in await answer.text()
    alice = make_key(data_dir, "alice")
    await client.get("/v1/cluster", headers=bearer(alice))
    made = await client.post("/v1/auth/keys", json={"principal": "e"}, headers=bearer(admin))
    new_secret = (await made.json())["secret"]
    samples = await metrics(client)
    for status in ("401", "403"):
        count = sample(
            samples, "sluice_http_requests_total", route="/v1/cluster", method="GET", status=status
        )
        assert count == 1
    scraped = await (await client.get("/metrics")).text()
    for value in (secret, alice, admin, new_secret):
        assert value not in caplog.text and value not in scraped
