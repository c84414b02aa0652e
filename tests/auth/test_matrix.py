"""The authorization matrix, generated from openapi/openapi.yaml: every operation called with
no credentials, as a principal without ACLs, and as a principal holding exactly the ACLs the
operation needs. Refusals must be the statuses and problems the contract declares."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import jsonschema_rs
import pytest
import yaml

from engine import batch as fmt
from gateway.auth.acl import CLUSTER
from gateway.auth.route_operations import access
from openapi import SPEC
from replication.node_contract import SESSION_FETCH
from replication.session_wire import SessionFetchRequest, encode_request
from tests.api.support import Client, Start
from tests.auth.support import bearer, binding, grant, make_key

CONTRACT: dict[str, Any] = yaml.safe_load(SPEC.read_text())
METHODS = ("get", "put", "post", "patch", "delete")
OPERATIONS = sorted(
    (method.upper(), path)
    for path, item in CONTRACT["paths"].items()
    for method in METHODS
    if method in item
)
INTERNAL_KEY = "matrix-internal-key-0123456789abcdef"
TOPIC, GROUP, INSTANCE, SUBSCRIPTION = "m-topic", "m-group", "m-instance", "m-hook"
V2 = "application/vnd.kafka.v2+json"
JSON = "application/json"
V2_JSON = "application/vnd.kafka.json.v2+json"
V2_REFUSED = {401: 40101, 403: 40301}  # the REST Proxy's error_code of a refusal
REGISTRY = "/schema-registry"
SR_JSON = "application/vnd.schemaregistry.v1+json"  # the registry's answers, errors too
SUBJECT = "m-subject"
TRANSACTIONAL_ID = "m-txn"
SHARER = "m-sharer"  # a member of the share group GROUP
EMPTY_SHARE = "m-empty-share"  # a share group without members
SCHEMA = {"schema": '{"type": "record", "name": "M", "fields": [{"name": "a", "type": "int"}]}'}


@dataclass(frozen=True)
class Sample:
    """A request that reaches the operation's handler once authorized."""

    params: dict[str, str] = field(default_factory=dict)
    query: str = ""
    json: Any = None
    data: bytes | None = None
    content_type: str | None = None
    also: tuple[tuple[str, str, str], ...] = ()  # what the handler checks on top


BATCH = bytes(fmt.encode_batch([fmt.RecordInput(None, b"1", [], None)]))
ACL = binding("m-someone", "topic", TOPIC, "read")
READ_TOPIC = (("topic", TOPIC, "read"),)
REPLICA = "replica=0&leader_epoch=0&offset=0&max_bytes=1024&timeout_ms=0"
SAMPLES: dict[tuple[str, str], Sample] = {
    ("GET", "/v1/topics"): Sample(),
    ("POST", "/v1/topics"): Sample(json={"name": "m-new"}, also=(("topic", "m-new", "create"),)),
    ("GET", "/v1/topics/{topic}"): Sample(),
    ("PATCH", "/v1/topics/{topic}"): Sample(json={"configs": {}}),
    ("DELETE", "/v1/topics/{topic}"): Sample(params={"topic": "m-doomed"}),
    ("POST", "/v1/topics/{topic}/records"): Sample(json={"records": [{"value": 1}]}),
    ("POST", "/v1/topics/{topic}/partitions/{partition}/records"): Sample(
        json={"records": [{"value": 1}]}
    ),
    ("GET", "/v1/topics/{topic}/partitions/{partition}/records"): Sample(
        query="offset=0&timeout_ms=0"
    ),
    ("GET", "/v1/topics/{topic}/partitions/{partition}/offsets"): Sample(),
    ("GET", "/v1/topics/{topic}/events"): Sample(query="offset=earliest&max_events=1"),
    ("POST", "/v1/topics/{topic}/partitions/{partition}/delete-records"): Sample(
        json={"before_offset": 0}
    ),
    ("GET", "/v1/groups"): Sample(),
    ("GET", "/v1/groups/{group}"): Sample(),
    ("DELETE", "/v1/groups/{group}"): Sample(params={"group": "m-empty"}),
    ("PUT", "/v1/groups/{group}/offsets"): Sample(
        params={"group": "m-empty"}, json={"topic": TOPIC, "to": "earliest"}, also=READ_TOPIC
    ),
    ("POST", "/v1/groups/{group}/members"): Sample(json={"topics": [TOPIC]}, also=READ_TOPIC),
    ("GET", "/v1/groups/{group}/members/{member}/records"): Sample(
        query="timeout_ms=0", also=READ_TOPIC
    ),
    ("POST", "/v1/groups/{group}/members/{member}/commit"): Sample(also=READ_TOPIC),
    ("DELETE", "/v1/groups/{group}/members/{member}"): Sample(),
    ("GET", "/v1/share-groups"): Sample(),
    ("GET", "/v1/share-groups/{group}"): Sample(),
    ("DELETE", "/v1/share-groups/{group}"): Sample(params={"group": EMPTY_SHARE}),
    ("PUT", "/v1/share-groups/{group}/configs"): Sample(
        json={"configs": {"share.delivery.count.limit": 3}}
    ),
    ("PUT", "/v1/share-groups/{group}/offsets"): Sample(
        params={"group": EMPTY_SHARE}, json={"topic": TOPIC, "to": "earliest"}, also=READ_TOPIC
    ),
    ("POST", "/v1/share-groups/{group}/members"): Sample(json={"topics": [TOPIC]}, also=READ_TOPIC),
    ("DELETE", "/v1/share-groups/{group}/members/{member}"): Sample(params={"member": SHARER}),
    ("POST", "/v1/share-groups/{group}/members/{member}/acquire"): Sample(
        params={"member": SHARER}, also=READ_TOPIC
    ),
    ("POST", "/v1/share-groups/{group}/members/{member}/acknowledge"): Sample(
        params={"member": SHARER}, json={"acknowledgements": [{"token": f"{TOPIC}:0:0:1"}]}
    ),
    ("GET", "/v1/transactions"): Sample(),
    ("POST", "/v1/transactions/{transactional_id}"): Sample(json={"timeout_ms": 60_000}),
    ("GET", "/v1/transactions/{transactional_id}"): Sample(),
    ("POST", "/v1/transactions/{transactional_id}/offsets"): Sample(
        json={
            "producer_epoch": 0,
            "group_id": GROUP,
            "member_id": "m-nobody",
            "generation_id": 1,
            "offsets": [{"topic": TOPIC, "partition": 0, "offset": 0}],
        },
        also=(("group", GROUP, "read"), ("topic", TOPIC, "read")),
    ),
    ("POST", "/v1/transactions/{transactional_id}/commit"): Sample(json={"producer_epoch": 0}),
    ("POST", "/v1/transactions/{transactional_id}/abort"): Sample(json={"producer_epoch": 0}),
    ("POST", "/v1/subscriptions"): Sample(
        json={"name": "m-new", "topic": TOPIC, "endpoint": "https://example.com/hook"},
        also=READ_TOPIC,
    ),
    ("GET", "/v1/subscriptions"): Sample(),
    ("GET", "/v1/subscriptions/{name}"): Sample(also=(("topic", TOPIC, "describe"),)),
    ("PATCH", "/v1/subscriptions/{name}"): Sample(json={"format": "json"}, also=READ_TOPIC),
    ("DELETE", "/v1/subscriptions/{name}"): Sample(also=READ_TOPIC),
    ("POST", "/v1/subscriptions/{name}/pause"): Sample(also=READ_TOPIC),
    ("POST", "/v1/subscriptions/{name}/resume"): Sample(also=READ_TOPIC),
    ("GET", "/v1/cluster"): Sample(),
    ("GET", "/v1/traffic"): Sample(),
    ("GET", "/v1/cluster/reassignments"): Sample(),
    ("POST", "/v1/cluster/reassignments"): Sample(
        json={"partitions": [{"topic": TOPIC, "partition": 0, "replicas": [0]}]}
    ),
    ("DELETE", "/v1/cluster/reassignments"): Sample(),
    ("DELETE", "/v1/cluster/reassignments/{topic}/{partition}"): Sample(),
    ("PUT", "/v1/cluster/reassignments/throttle"): Sample(json={"bytes_per_second": 1000}),
    ("POST", "/v1/cluster/balance"): Sample(query="dry_run=true"),
    ("POST", "/v1/cluster/nodes/{node}/decommission"): Sample(
        params={"node": "0"}, query="dry_run=true"
    ),
    ("POST", "/v1/cluster/nodes/{node}/remove"): Sample(params={"node": "0"}, query="dry_run=true"),
    ("GET", "/console"): Sample(),
    ("GET", "/console/"): Sample(),
    ("GET", "/console/{asset}"): Sample(params={"asset": "app.js"}),
    ("GET", "/v1/acls"): Sample(),
    ("POST", "/v1/acls"): Sample(json=ACL),
    ("DELETE", "/v1/acls"): Sample(json=ACL),
    ("GET", "/v1/quotas"): Sample(),
    ("GET", "/v1/quotas/{principal}"): Sample(params={"principal": "m-someone"}),
    ("PUT", "/v1/quotas/{principal}"): Sample(
        params={"principal": "m-someone"}, json={"requests_per_second": 1000}
    ),
    ("DELETE", "/v1/quotas/{principal}"): Sample(params={"principal": "m-someone"}),
    ("GET", "/v1/auth/whoami"): Sample(),
    ("GET", "/v1/auth/keys"): Sample(),
    ("POST", "/v1/auth/keys"): Sample(json={"principal": "m-made"}),
    ("DELETE", "/v1/auth/keys/{key_id}"): Sample(),
    # Confluent REST Proxy v2: its own error body (error_code 40101, 40301; see V2 below).
    ("GET", "/topics"): Sample(),
    ("GET", "/topics/{topic}"): Sample(),
    ("POST", "/topics/{topic}"): Sample(json={"records": [{"value": 1}]}, content_type=V2_JSON),
    ("GET", "/topics/{topic}/partitions"): Sample(),
    ("GET", "/topics/{topic}/partitions/{partition}"): Sample(),
    ("POST", "/topics/{topic}/partitions/{partition}"): Sample(
        json={"records": [{"value": 1}]}, content_type=V2_JSON
    ),
    ("GET", "/topics/{topic}/partitions/{partition}/offsets"): Sample(),
    ("GET", "/brokers"): Sample(),
    ("POST", "/consumers/{group}"): Sample(
        json={"name": "m-made", "format": "json"}, content_type=V2
    ),
    ("DELETE", "/consumers/{group}/instances/{instance}"): Sample(),
    ("POST", "/consumers/{group}/instances/{instance}/subscription"): Sample(
        json={"topics": [TOPIC]}, content_type=V2, also=READ_TOPIC
    ),
    ("GET", "/consumers/{group}/instances/{instance}/subscription"): Sample(),
    ("DELETE", "/consumers/{group}/instances/{instance}/subscription"): Sample(),
    ("GET", "/consumers/{group}/instances/{instance}/records"): Sample(
        query="timeout=0", also=READ_TOPIC
    ),
    ("POST", "/consumers/{group}/instances/{instance}/offsets"): Sample(also=READ_TOPIC),
    ("GET", "/consumers/{group}/instances/{instance}/offsets"): Sample(
        json={"partitions": [{"topic": TOPIC, "partition": 0}]}, content_type=V2, also=READ_TOPIC
    ),
    ("POST", "/consumers/{group}/instances/{instance}/positions"): Sample(
        json={"offsets": [{"topic": TOPIC, "partition": 0, "offset": 0}]},
        content_type=V2,
        also=READ_TOPIC,
    ),
    ("POST", "/consumers/{group}/instances/{instance}/positions/beginning"): Sample(
        json={"partitions": [{"topic": TOPIC, "partition": 0}]}, content_type=V2, also=READ_TOPIC
    ),
    ("POST", "/consumers/{group}/instances/{instance}/positions/end"): Sample(
        json={"partitions": [{"topic": TOPIC, "partition": 0}]}, content_type=V2, also=READ_TOPIC
    ),
    ("POST", "/consumers/{group}/instances/{instance}/assignments"): Sample(
        json={"partitions": [{"topic": TOPIC, "partition": 0}]}, content_type=V2, also=READ_TOPIC
    ),
    ("GET", "/consumers/{group}/instances/{instance}/assignments"): Sample(),
    # Confluent REST Proxy v3: {"error_code": <status>, "message"} in application/json.
    ("GET", "/v3/clusters"): Sample(),
    ("GET", "/v3/clusters/{cluster_id}"): Sample(),
    ("GET", "/v3/clusters/{cluster_id}/topics"): Sample(),
    ("GET", "/v3/clusters/{cluster_id}/topics/{topic}"): Sample(),
    ("POST", "/v3/clusters/{cluster_id}/topics/{topic}/records"): Sample(
        json={"value": {"data": 1}}, content_type="application/json"
    ),
    # Confluent Schema Registry: Confluent's error body (error_code 40101, 40301).
    ("GET", REGISTRY): Sample(),
    ("GET", f"{REGISTRY}/subjects"): Sample(),
    ("POST", f"{REGISTRY}/subjects/{{subject}}"): Sample(json=SCHEMA),
    ("DELETE", f"{REGISTRY}/subjects/{{subject}}"): Sample(),
    ("GET", f"{REGISTRY}/subjects/{{subject}}/versions"): Sample(),
    ("POST", f"{REGISTRY}/subjects/{{subject}}/versions"): Sample(json=SCHEMA),
    ("GET", f"{REGISTRY}/subjects/{{subject}}/versions/{{version}}"): Sample(),
    ("DELETE", f"{REGISTRY}/subjects/{{subject}}/versions/{{version}}"): Sample(),
    ("GET", f"{REGISTRY}/subjects/{{subject}}/versions/{{version}}/schema"): Sample(),
    ("GET", f"{REGISTRY}/subjects/{{subject}}/versions/{{version}}/referencedby"): Sample(),
    ("GET", f"{REGISTRY}/schemas"): Sample(),
    ("GET", f"{REGISTRY}/schemas/types"): Sample(),
    ("GET", f"{REGISTRY}/schemas/ids/{{id}}"): Sample(),
    ("GET", f"{REGISTRY}/schemas/ids/{{id}}/schema"): Sample(),
    ("GET", f"{REGISTRY}/schemas/ids/{{id}}/subjects"): Sample(),
    ("GET", f"{REGISTRY}/schemas/ids/{{id}}/versions"): Sample(),
    ("GET", f"{REGISTRY}/config"): Sample(),
    ("PUT", f"{REGISTRY}/config"): Sample(json={"compatibility": "BACKWARD"}),
    ("DELETE", f"{REGISTRY}/config"): Sample(),
    ("GET", f"{REGISTRY}/config/{{subject}}"): Sample(query="defaultToGlobal=true"),
    ("PUT", f"{REGISTRY}/config/{{subject}}"): Sample(json={"compatibility": "NONE"}),
    ("DELETE", f"{REGISTRY}/config/{{subject}}"): Sample(),
    ("GET", f"{REGISTRY}/mode"): Sample(),
    ("PUT", f"{REGISTRY}/mode"): Sample(json={"mode": "READWRITE"}),
    ("GET", f"{REGISTRY}/mode/{{subject}}"): Sample(query="defaultToGlobal=true"),
    ("PUT", f"{REGISTRY}/mode/{{subject}}"): Sample(json={"mode": "READWRITE"}),
    ("DELETE", f"{REGISTRY}/mode/{{subject}}"): Sample(),
    ("POST", f"{REGISTRY}/compatibility/subjects/{{subject}}/versions"): Sample(json=SCHEMA),
    ("POST", f"{REGISTRY}/compatibility/subjects/{{subject}}/versions/{{version}}"): Sample(
        json=SCHEMA
    ),
    ("GET", "/healthz"): Sample(),
    ("GET", "/readyz"): Sample(),
    ("GET", "/metrics"): Sample(),
    ("GET", "/openapi.yaml"): Sample(),
    ("GET", "/internal/v1/replicas/{topic}/{partition}/records"): Sample(query=REPLICA),
    ("POST", "/internal/v1/replicas/fetch"): Sample(
        data=encode_request(SessionFetchRequest(1, 0, 0, 0, 1, 1024, {})),
        content_type=SESSION_FETCH,
    ),
    ("GET", "/internal/v1/replicas/{topic}/{partition}/epoch-end"): Sample(
        query="leader_epoch=0&epoch=0"
    ),
    ("POST", "/internal/v1/partitions/{topic}/{partition}/append"): Sample(
        query="acks=1", data=BATCH, content_type="application/vnd.sluice.record-batch"
    ),
    ("POST", "/internal/v1/partitions/{topic}/{partition}/markers"): Sample(
        json={
            "producer_id": 1,
            "producer_epoch": 0,
            "commit": False,
            "coordinator_epoch": 0,
            "timeout_ms": 1000,
        }
    ),
    ("POST", "/internal/v1/groups/{group}/transaction-offsets"): Sample(
        json={"member_id": "m-nobody", "generation_id": 0, "offsets": None}
    ),
    ("GET", "/internal/v1/ready"): Sample(),
    ("GET", "/internal/v1/reassignments/replicas"): Sample(),
    ("GET", "/internal/v1/partition-sizes"): Sample(),
    ("GET", "/internal/v1/metrics"): Sample(),
    ("GET", "/internal/v1/auth/refresh"): Sample(),
    ("GET", "/internal/v1/subscriptions/{name}/partitions"): Sample(),
    ("PUT", "/internal/v1/subscriptions/{name}/positions"): Sample(
        json={"uid": "0badcafe", "topic": TOPIC, "partition": 0, "offset": 0}
    ),
    ("DELETE", "/internal/v1/subscriptions/{name}/positions"): Sample(query="uid=0badcafe"),
}


def test_every_contract_operation_has_a_sample() -> None:
    assert set(SAMPLES) == set(OPERATIONS)


def _declared(method: str, path: str, status: int) -> dict[str, Any] | None:
    """The response the contract declares for this status (its $ref followed)."""
    response = CONTRACT["paths"][path][method.lower()]["responses"].get(str(status))
    if response is not None and "$ref" in response:
        response = CONTRACT["components"]["responses"][response["$ref"].rsplit("/", 1)[1]]
    return cast(dict[str, Any] | None, response)


def _check_declared(method: str, path: str, status: int, body: Any) -> None:
    response = _declared(method, path, status)
    assert response is not None, f"{method} {path} does not declare {status}"
    content = response["content"]
    schema = next(
        (
            content[t]["schema"]
            for t in ("application/problem+json", V2, JSON, SR_JSON)
            if t in content
        ),
        None,
    )
    assert schema is not None, f"{method} {path} declares no error body for {status}"
    validator = jsonschema_rs.Draft202012Validator({**schema, "components": CONTRACT["components"]})
    error = next(validator.iter_errors(body), None)
    assert error is None, (method, path, status, error and error.message)


async def _world(start: Start, data_dir: Path, tmp_path: Path) -> tuple[Client, dict[str, str]]:
    """A gateway with auth on, its topics (one record in TOPIC), a group with two members,
    and keys."""
    keys = {name: make_key(data_dir, name) for name in ("admin", "mallory", "right", "doomed")}
    internal = tmp_path / "internal.key"
    internal.write_text(INTERNAL_KEY)
    client = await start(auth=True, super_users=("admin",), internal_key_file=internal)
    admin = bearer(keys["admin"])
    for name in (TOPIC, "m-doomed"):
        assert (await client.post("/v1/topics", json={"name": name}, headers=admin)).status == 201
    one = {"records": [{"value": 1}]}  # for a stream of events that ends after one
    assert (await client.post(f"/v1/topics/{TOPIC}/records", json=one, headers=admin)).status == 200
    for _ in range(2):
        joined = await client.post(
            f"/v1/groups/{GROUP}/members", json={"topics": [TOPIC]}, headers=admin
        )
        assert joined.status == 201
        keys.setdefault("member", (await joined.json())["member_id"])
    shared = await client.post(
        f"/v1/share-groups/{GROUP}/members",
        json={"topics": [TOPIC], "member_id": SHARER},
        headers=admin,
    )
    assert shared.status == 201, await shared.text()
    empty = {"configs": {"share.auto.offset.reset": "earliest"}}
    configured = await client.put(
        f"/v1/share-groups/{EMPTY_SHARE}/configs", json=empty, headers=admin
    )
    assert configured.status == 200, await configured.text()
    created = await client.post(
        f"/consumers/{GROUP}",
        json={"name": INSTANCE, "format": "json"},
        headers={**admin, "Content-Type": V2},
    )
    assert created.status == 200, await created.text()
    subscribed = await client.post(
        f"/consumers/{GROUP}/instances/{INSTANCE}/subscription",
        json={"topics": [TOPIC]},
        headers={**admin, "Content-Type": V2},
    )
    assert subscribed.status == 204, await subscribed.text()
    hook = {"name": SUBSCRIPTION, "topic": TOPIC, "endpoint": "https://example.com/hook"}
    assert (await client.post("/v1/subscriptions", json=hook, headers=admin)).status == 201
    registered = await client.post(
        f"{REGISTRY}/subjects/{SUBJECT}/versions", json=SCHEMA, headers=admin
    )
    assert registered.status == 200, await registered.text()
    clusters = await (await client.get("/v3/clusters", headers=admin)).json()
    keys["cluster_id"] = clusters["data"][0]["cluster_id"]
    listed = await (await client.get("/v1/auth/keys", headers=admin)).json()
    keys["key_id"] = next(k["key_id"] for k in listed["keys"] if k["principal"] == "doomed")
    return client, keys


def _needs(method: str, path: str, params: dict[str, str]) -> list[tuple[str, str, str]]:
    rule = access(method, path)
    assert rule is not None
    sample = SAMPLES[(method, path)]
    named = [
        (n.resource_type, CLUSTER if n.param is None else params[n.param], n.operation)
        for n in rule.needs
    ]
    return [*named, *sample.also]


@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
async def test_authorization_matrix(
    start: Start, data_dir: Path, tmp_path: Path, method: str, path: str
) -> None:
    client, keys = await _world(start, data_dir, tmp_path)
    sample = SAMPLES[(method, path)]
    params = {"topic": TOPIC, "partition": "0", "group": GROUP, "member": keys["member"],
              "instance": INSTANCE, "key_id": keys["key_id"], "name": SUBSCRIPTION,
              "cluster_id": keys["cluster_id"], "subject": SUBJECT, "version": "1", "id": "1",
              "transactional_id": TRANSACTIONAL_ID, **sample.params}  # fmt: skip
    url = re.sub(r"\{(\w+)\}", lambda m: params[m.group(1)], path)
    url += f"?{sample.query}" if sample.query else ""
    rule = access(method, path)
    assert rule is not None, f"{method} {path} is in the contract but has no access rule"

    async def call(headers: dict[str, str]) -> tuple[int, Any]:
        if sample.content_type is not None:
            headers = {**headers, "Content-Type": sample.content_type}
        answer = await client.request(
            method, url, headers=headers, json=sample.json, data=sample.data
        )
        text = await answer.text()
        dialects = (
            "application/problem+json",
            V2,
            SR_JSON,
            *((JSON,) if path.startswith("/v3/") else ()),
        )
        is_error = answer.content_type in dialects and answer.status >= 400
        return answer.status, (await answer.json(content_type=None)) if is_error else text

    def refused(status: int, body: Any) -> None:
        """The refusal in the route's dialect (a 403's code, in /v1, says why: no ACL, not a
        super user...), as the contract declares it."""
        if path.startswith(("/topics", "/brokers", "/consumers", REGISTRY)):
            assert body["error_code"] == V2_REFUSED[status], body
        elif path.startswith("/v3/"):
            assert body["error_code"] == status, body
        elif status == 401:
            assert body["code"] == "UNAUTHENTICATED", body
        _check_declared(method, path, status, body)

    # no credentials
    status, body = await call({})
    if rule.audience == "public":
        assert status == 200
    else:
        assert status == 401, body
        refused(401, body)

    # the wrong principal: authenticated, no ACLs
    status, body = await call(bearer(keys["mallory"]))
    needs_nothing = rule.audience == "acl" and not rule.needs and not sample.also
    if rule.audience in ("public", "authenticated", "ops") or needs_nothing:
        assert status == 200, body
        if path in ("/v1/topics", "/v1/groups", "/v1/subscriptions"):
            assert body in ('{"topics":[]}', '{"groups":[]}', '{"subscriptions":[]}'), body
    else:
        assert status == 403, body
        refused(403, body)

    # the right principal: exactly what the operation needs
    if rule.audience == "internal":
        headers = bearer(INTERNAL_KEY)
    elif rule.audience == "super_user":
        headers = bearer(keys["admin"])
    else:
        principal = "right"
        await grant(
            client,
            keys["admin"],
            *(
                binding(principal, kind, name, op)
                for kind, name, op in _needs(method, path, params)
            ),
        )
        headers = bearer(keys[principal])
    status, body = await call(headers)
    assert status not in (401, 403), (status, body)
    assert status < 500, (status, body)
