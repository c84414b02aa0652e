"""What each route needs, in Kafka's terms: the (resource type, name, operation) triples the
auth middleware checks before the handler runs, and what the handler checks on top from the
body or its own state. tests/auth/test_route_operations.py holds this against the OpenAPI
contract and the app's routes, so no route is forgotten."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from gateway.auth.acl import CLUSTER, Operation, ResourceType

Audience = Literal["acl", "authenticated", "ops", "public", "super_user", "internal"]


@dataclass(frozen=True)
class Need:
    """One operation on one resource, named by a path parameter (None: the cluster)."""

    resource_type: ResourceType
    operation: Operation
    param: str | None = None

    def name(self, params: Mapping[str, str]) -> str:
        """The resource's name, from the route's path parameters."""
        return CLUSTER if self.param is None else params[self.param]


@dataclass(frozen=True)
class Access:
    """Who may call a route: `acl` checks `needs` (and the handler checks `also`);
    `authenticated` asks only for valid credentials; `ops` is `authenticated` unless made
    public (--auth-public-metrics, --auth-public-readyz); `super_user` and `internal` name
    principals, not ACLs."""

    needs: tuple[Need, ...] = ()
    audience: Audience = "acl"
    also: str = ""


def _on(resource_type: ResourceType, operation: Operation, param: str | None) -> tuple[Need]:
    return (Need(resource_type, operation, param),)


_TOPIC_RECORDS = "/v1/topics/{topic}/partitions/{partition}"
_MEMBER = "/v1/groups/{group}/members/{member}"
_SHARE = "/v1/share-groups/{group}"
_SHARE_MEMBER = f"{_SHARE}/members/{{member}}"
_V2_PARTITION = "/topics/{topic}/partitions/{partition}"
_V2_INSTANCE = "/consumers/{group}/instances/{instance}"
_TXN = "/v1/transactions/{transactional_id}"
_SUBSCRIPTION = "/v1/subscriptions/{name}"
_CHANGE_SUBSCRIPTION = "read on the subscription's topic, write on its dead-letter topic"
_SR = "/schema-registry"  # gateway.api.schema_registry.media.PREFIX
_SR_SUBJECT = f"{_SR}/subjects/{{subject}}"
_SR_VERSION = f"{_SR_SUBJECT}/versions/{{version}}"
_SR_ID = f"{_SR}/schemas/ids/{{id}}"
ROUTES: dict[tuple[str, str], Access] = {
    ("POST", "/v1/topics"): Access(also="create on the named topic, or on the cluster"),
    ("GET", "/v1/topics"): Access(also="lists only the topics the principal may describe"),
    ("GET", "/v1/topics/{topic}"): Access(_on("topic", "describe", "topic")),
    ("PATCH", "/v1/topics/{topic}"): Access(_on("topic", "alter", "topic")),
    ("DELETE", "/v1/topics/{topic}"): Access(_on("topic", "delete", "topic")),
    ("POST", "/v1/topics/{topic}/records"): Access(
        _on("topic", "write", "topic"),
        also="create on the topic or cluster to auto-create it; write on the transactional id",
    ),
    ("POST", f"{_TOPIC_RECORDS}/records"): Access(
        _on("topic", "write", "topic"), also="write on the transactional id"
    ),
    ("GET", f"{_TOPIC_RECORDS}/records"): Access(_on("topic", "read", "topic")),
    ("GET", "/v1/topics/{topic}/events"): Access(
        _on("topic", "read", "topic"), also="read on the group named by `group`"
    ),
    ("GET", f"{_TOPIC_RECORDS}/offsets"): Access(_on("topic", "describe", "topic")),
    ("POST", f"{_TOPIC_RECORDS}/delete-records"): Access(_on("topic", "delete", "topic")),
    ("GET", "/v1/groups"): Access(also="lists only the groups the principal may describe"),
    ("GET", "/v1/groups/{group}"): Access(_on("group", "describe", "group")),
    ("DELETE", "/v1/groups/{group}"): Access(_on("group", "delete", "group")),
    ("PUT", "/v1/groups/{group}/offsets"): Access(
        _on("group", "read", "group"), also="read on the topic"
    ),
    ("POST", "/v1/groups/{group}/members"): Access(
        _on("group", "read", "group"), also="read on each topic"
    ),
    ("GET", f"{_MEMBER}/records"): Access(
        _on("group", "read", "group"), also="read on each of the member's topics"
    ),
    ("POST", f"{_MEMBER}/commit"): Access(
        _on("group", "read", "group"), also="read on each topic committed"
    ),
    ("DELETE", _MEMBER): Access(_on("group", "read", "group")),
    ("GET", "/v1/share-groups"): Access(also="lists only the groups the principal may describe"),
    ("GET", _SHARE): Access(_on("group", "describe", "group")),
    ("DELETE", _SHARE): Access(_on("group", "delete", "group")),
    ("PUT", f"{_SHARE}/configs"): Access(_on("group", "alter", "group")),
    ("PUT", f"{_SHARE}/offsets"): Access(_on("group", "read", "group"), also="read on the topic"),
    ("POST", f"{_SHARE}/members"): Access(_on("group", "read", "group"), also="read on each topic"),
    ("DELETE", _SHARE_MEMBER): Access(_on("group", "read", "group")),
    ("POST", f"{_SHARE_MEMBER}/acquire"): Access(
        _on("group", "read", "group"), also="read on each of the member's topics"
    ),
    ("POST", f"{_SHARE_MEMBER}/acknowledge"): Access(_on("group", "read", "group")),
    ("GET", "/v1/transactions"): Access(
        also="lists only the transactional ids the principal may describe"
    ),
    ("POST", _TXN): Access(_on("transactional_id", "write", "transactional_id")),
    ("GET", _TXN): Access(_on("transactional_id", "describe", "transactional_id")),
    ("POST", f"{_TXN}/offsets"): Access(
        _on("transactional_id", "write", "transactional_id"),
        also="read on the group and on each topic",
    ),
    ("POST", f"{_TXN}/commit"): Access(_on("transactional_id", "write", "transactional_id")),
    ("POST", f"{_TXN}/abort"): Access(
        _on("transactional_id", "write", "transactional_id"),
        also="alter on the cluster for an abort without producer_epoch (an operator's)",
    ),
    ("POST", "/v1/subscriptions"): Access(also="read on the topic, write on the dead-letter topic"),
    ("GET", "/v1/subscriptions"): Access(
        also="lists only the subscriptions of topics the principal may describe"
    ),
    ("GET", _SUBSCRIPTION): Access(also="describe on the subscription's topic"),
    ("PATCH", _SUBSCRIPTION): Access(also=_CHANGE_SUBSCRIPTION),
    ("DELETE", _SUBSCRIPTION): Access(also=_CHANGE_SUBSCRIPTION),
    ("POST", f"{_SUBSCRIPTION}/pause"): Access(also=_CHANGE_SUBSCRIPTION),
    ("POST", f"{_SUBSCRIPTION}/resume"): Access(also=_CHANGE_SUBSCRIPTION),
    ("GET", "/v1/cluster"): Access(_on("cluster", "describe", None)),
    ("GET", "/v1/traffic"): Access(_on("cluster", "describe", None)),
    # Kafka's rules: ListPartitionReassignments describes, AlterPartitionReassignments alters
    ("GET", "/v1/cluster/reassignments"): Access(_on("cluster", "describe", None)),
    ("POST", "/v1/cluster/reassignments"): Access(_on("cluster", "alter", None)),
    ("DELETE", "/v1/cluster/reassignments"): Access(_on("cluster", "alter", None)),
    ("DELETE", "/v1/cluster/reassignments/{topic}/{partition}"): Access(
        _on("cluster", "alter", None)
    ),
    ("PUT", "/v1/cluster/reassignments/throttle"): Access(_on("cluster", "alter", None)),
    ("POST", "/v1/cluster/balance"): Access(_on("cluster", "alter", None)),
    ("POST", "/v1/cluster/nodes/{node}/decommission"): Access(_on("cluster", "alter", None)),
    ("POST", "/v1/cluster/nodes/{node}/remove"): Access(_on("cluster", "alter", None)),
    ("GET", "/v1/acls"): Access(_on("cluster", "describe", None)),
    ("POST", "/v1/acls"): Access(_on("cluster", "alter", None)),
    ("DELETE", "/v1/acls"): Access(_on("cluster", "alter", None)),
    ("GET", "/v1/quotas"): Access(_on("cluster", "describe", None)),
    ("GET", "/v1/quotas/{principal}"): Access(_on("cluster", "describe", None)),
    ("PUT", "/v1/quotas/{principal}"): Access(_on("cluster", "alter", None)),
    ("DELETE", "/v1/quotas/{principal}"): Access(_on("cluster", "alter", None)),
    ("GET", "/v1/auth/whoami"): Access(audience="authenticated"),
    ("GET", "/v1/auth/keys"): Access(audience="super_user"),
    ("POST", "/v1/auth/keys"): Access(audience="super_user"),
    ("DELETE", "/v1/auth/keys/{key_id}"): Access(audience="super_user"),
    # Confluent REST Proxy v2 (gateway.api.rest_proxy): what the /v1 route doing the same needs.
    ("GET", "/topics"): Access(also="lists only the topics the principal may describe"),
    ("GET", "/topics/{topic}"): Access(_on("topic", "describe", "topic")),
    ("POST", "/topics/{topic}"): Access(
        _on("topic", "write", "topic"), also="create on the topic or cluster to auto-create it"
    ),
    ("GET", "/topics/{topic}/partitions"): Access(_on("topic", "describe", "topic")),
    ("GET", _V2_PARTITION): Access(_on("topic", "describe", "topic")),
    ("POST", _V2_PARTITION): Access(_on("topic", "write", "topic")),
    ("GET", f"{_V2_PARTITION}/offsets"): Access(_on("topic", "describe", "topic")),
    ("GET", "/brokers"): Access(_on("cluster", "describe", None)),
    ("POST", "/consumers/{group}"): Access(_on("group", "read", "group")),
    ("DELETE", _V2_INSTANCE): Access(_on("group", "read", "group")),
    ("POST", f"{_V2_INSTANCE}/subscription"): Access(
        _on("group", "read", "group"), also="read on each topic"
    ),
    ("GET", f"{_V2_INSTANCE}/subscription"): Access(_on("group", "read", "group")),
    ("DELETE", f"{_V2_INSTANCE}/subscription"): Access(_on("group", "read", "group")),
    ("POST", f"{_V2_INSTANCE}/assignments"): Access(
        _on("group", "read", "group"), also="read on each topic"
    ),
    ("GET", f"{_V2_INSTANCE}/assignments"): Access(_on("group", "read", "group")),
    ("GET", f"{_V2_INSTANCE}/records"): Access(
        _on("group", "read", "group"), also="read on each of the instance's topics"
    ),
    ("POST", f"{_V2_INSTANCE}/offsets"): Access(
        _on("group", "read", "group"), also="read on each topic committed"
    ),
    ("GET", f"{_V2_INSTANCE}/offsets"): Access(
        _on("group", "read", "group"), also="read on each topic asked"
    ),
    ("POST", f"{_V2_INSTANCE}/positions"): Access(
        _on("group", "read", "group"), also="read on each topic"
    ),
    ("POST", f"{_V2_INSTANCE}/positions/beginning"): Access(
        _on("group", "read", "group"), also="read on each topic"
    ),
    ("POST", f"{_V2_INSTANCE}/positions/end"): Access(
        _on("group", "read", "group"), also="read on each topic"
    ),
    # Confluent REST Proxy v3 (gateway.api.rest_proxy.v3).
    ("GET", "/v3/clusters"): Access(_on("cluster", "describe", None)),
    ("GET", "/v3/clusters/{cluster_id}"): Access(_on("cluster", "describe", None)),
    ("GET", "/v3/clusters/{cluster_id}/topics"): Access(
        also="lists only the topics the principal may describe"
    ),
    ("GET", "/v3/clusters/{cluster_id}/topics/{topic}"): Access(_on("topic", "describe", "topic")),
    ("POST", "/v3/clusters/{cluster_id}/topics/{topic}/records"): Access(
        _on("topic", "write", "topic")
    ),
    ("GET", "/healthz"): Access(audience="public"),
    # The web console's page and files (gateway.console): it asks for credentials itself.
    ("GET", "/console"): Access(audience="public"),
    ("GET", "/console/{asset}"): Access(audience="public"),
    ("GET", "/readyz"): Access(audience="ops"),
    ("GET", "/metrics"): Access(audience="ops"),
    # Confluent Schema Registry (gateway.api.schema_registry): a subject is read, written
    # (register), deleted or altered (its level and mode); the global settings alter the
    # cluster; a schema by id, the types and the global settings are read by anyone signed in.
    ("GET", _SR): Access(audience="authenticated"),
    ("GET", f"{_SR}/subjects"): Access(also="lists only the subjects the principal may read"),
    ("POST", _SR_SUBJECT): Access(_on("subject", "read", "subject")),
    ("DELETE", _SR_SUBJECT): Access(_on("subject", "delete", "subject")),
    ("GET", f"{_SR_SUBJECT}/versions"): Access(_on("subject", "read", "subject")),
    ("POST", f"{_SR_SUBJECT}/versions"): Access(_on("subject", "write", "subject")),
    ("GET", _SR_VERSION): Access(_on("subject", "read", "subject")),
    ("DELETE", _SR_VERSION): Access(_on("subject", "delete", "subject")),
    ("GET", f"{_SR_VERSION}/schema"): Access(_on("subject", "read", "subject")),
    ("GET", f"{_SR_VERSION}/referencedby"): Access(_on("subject", "read", "subject")),
    ("GET", f"{_SR}/schemas"): Access(
        also="lists only the versions of the subjects the principal may read"
    ),
    ("GET", f"{_SR}/schemas/types"): Access(audience="authenticated"),
    ("GET", _SR_ID): Access(audience="authenticated"),
    ("GET", f"{_SR_ID}/schema"): Access(audience="authenticated"),
    ("GET", f"{_SR_ID}/subjects"): Access(audience="authenticated"),
    ("GET", f"{_SR_ID}/versions"): Access(audience="authenticated"),
    ("GET", f"{_SR}/config"): Access(audience="authenticated"),
    ("PUT", f"{_SR}/config"): Access(_on("cluster", "alter", None)),
    ("DELETE", f"{_SR}/config"): Access(_on("cluster", "alter", None)),
    ("GET", f"{_SR}/config/{{subject}}"): Access(_on("subject", "read", "subject")),
    ("PUT", f"{_SR}/config/{{subject}}"): Access(_on("subject", "alter", "subject")),
    ("DELETE", f"{_SR}/config/{{subject}}"): Access(_on("subject", "alter", "subject")),
    ("GET", f"{_SR}/mode"): Access(audience="authenticated"),
    ("PUT", f"{_SR}/mode"): Access(_on("cluster", "alter", None)),
    ("GET", f"{_SR}/mode/{{subject}}"): Access(_on("subject", "read", "subject")),
    ("PUT", f"{_SR}/mode/{{subject}}"): Access(_on("subject", "alter", "subject")),
    ("DELETE", f"{_SR}/mode/{{subject}}"): Access(_on("subject", "alter", "subject")),
    ("POST", f"{_SR}/compatibility/subjects/{{subject}}/versions"): Access(
        _on("subject", "read", "subject")
    ),
    ("POST", f"{_SR}/compatibility/subjects/{{subject}}/versions/{{version}}"): Access(
        _on("subject", "read", "subject")
    ),
    ("GET", "/openapi.yaml"): Access(audience="authenticated"),
    ("GET", "/internal/v1/replicas/{topic}/{partition}/records"): Access(audience="internal"),
    ("POST", "/internal/v1/replicas/fetch"): Access(audience="internal"),
    ("GET", "/internal/v1/replicas/{topic}/{partition}/epoch-end"): Access(audience="internal"),
    ("POST", "/internal/v1/partitions/{topic}/{partition}/append"): Access(audience="internal"),
    ("POST", "/internal/v1/partitions/{topic}/{partition}/markers"): Access(audience="internal"),
    ("POST", "/internal/v1/groups/{group}/transaction-offsets"): Access(audience="internal"),
    ("GET", "/internal/v1/ready"): Access(audience="internal"),
    ("GET", "/internal/v1/reassignments/replicas"): Access(audience="internal"),
    ("GET", "/internal/v1/partition-sizes"): Access(audience="internal"),
    ("GET", "/internal/v1/metrics"): Access(audience="internal"),
    ("GET", "/internal/v1/auth/refresh"): Access(audience="internal"),
    ("GET", "/internal/v1/subscriptions/{name}/partitions"): Access(audience="internal"),
    ("PUT", "/internal/v1/subscriptions/{name}/positions"): Access(audience="internal"),
    ("DELETE", "/internal/v1/subscriptions/{name}/positions"): Access(audience="internal"),
}


_RULES = {**ROUTES, **{("HEAD", path): rule for (m, path), rule in ROUTES.items() if m == "GET"}}


def access(method: str, template: str) -> Access | None:
    """The route's access rule (HEAD is GET's; a REST Proxy path with a trailing slash is the
    path without it); None for a path no route serves."""
    return _RULES.get((method, route_template(template)))


def route_template(canonical: str) -> str:
    """The template a route is known by: a REST Proxy path's trailing-slash twin (both are
    served, as v2 clients send both) is the path without the slash."""
    return canonical[:-1] if len(canonical) > 1 and canonical.endswith("/") else canonical
