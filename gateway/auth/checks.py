"""The checks a request passes before its route runs, as functions of who it is and which route
it takes: authentication's refusal, what the route needs (route_operations), and the quota.
The middlewares (gateway.auth.middleware, gateway.auth.throttle) and the fast routes
(gateway.api.fast_routes) both call these, so a refusal is the same whichever path gives it."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from aiohttp import hdrs

from gateway.auth.acl import Operation, ResourceType
from gateway.auth.authenticator import Authenticator
from gateway.auth.credentials import INTERNAL_PRINCIPAL
from gateway.auth.quotas import FIELD_OF, PrincipalUsage, QuotaKind, Throttle
from gateway.auth.route_operations import Access, route_template
from gateway.auth.service import AuthService
from gateway.http.problem import Problem

_RECORDS = "/v1/topics/{topic}/partitions/{partition}/records"
# The REST Proxy's produce and read routes are charged as /v1's that do the same.
PRODUCE_ROUTES = frozenset(
    {
        ("POST", "/v1/topics/{topic}/records"),
        ("POST", _RECORDS),
        ("POST", "/topics/{topic}"),
        ("POST", "/topics/{topic}/partitions/{partition}"),
        ("POST", "/v3/clusters/{cluster_id}/topics/{topic}/records"),
    }
)
_MEMBER_RECORDS = "/v1/groups/{group}/members/{member}/records"
_V2_RECORDS = "/consumers/{group}/instances/{instance}/records"
FETCH_ROUTES = frozenset({("GET", _RECORDS), ("GET", _MEMBER_RECORDS), ("GET", _V2_RECORDS)})
UNLIMITED_AUDIENCES = frozenset({"public", "ops", "internal"})  # probes and nodes: never


def unauthenticated(authenticator: Authenticator) -> Problem:
    """401 UNAUTHENTICATED, with the challenge of every scheme this node accepts."""
    return Problem(
        401,
        "UNAUTHENTICATED",
        "this route needs credentials: Authorization: Bearer <API key or JWT>"
        + (", HTTP Basic" if authenticator.basic else "")
        + (" or a client certificate" if authenticator.certificate_source else ""),
        headers={hdrs.WWW_AUTHENTICATE: authenticator.challenge},
    )


def denied(principal: str, resource_type: ResourceType, name: str, operation: Operation) -> Problem:
    return Problem(
        403,
        "ACL_DENIED",
        f"principal {principal!r} may not {operation} {resource_type} {name!r}",
        principal=principal,
        resource_type=resource_type,
        resource_name=name,
        operation=operation,
    )


def admit(auth: AuthService, principal: str, rule: Access, names: Mapping[str, str]) -> None:
    """What the route needs of the principal (`names`: the route's path parameters); a 403
    problem if it may not."""
    if rule.audience == "internal" and principal != INTERNAL_PRINCIPAL:
        raise Problem(403, "INTERNAL_ONLY", "internal routes answer other nodes only")
    if rule.audience == "super_user" and principal not in auth.super_users:
        raise Problem(403, "SUPER_USER_ONLY", f"principal {principal!r} is not a super user")
    authorizer = auth.authorizer
    for need in rule.needs:
        name = need.name(names)
        if not authorizer.allowed(principal, need.resource_type, name, need.operation):
            raise denied(principal, need.resource_type, name, need.operation)


def require_reads(auth: AuthService, principal: str, topics: Iterable[str]) -> None:
    """Read on each topic (a group member's fetch reads its assigned topics); 403 if not."""
    for topic in topics:
        if not auth.allowed(principal, "topic", topic, "read"):
            raise denied(principal, "topic", topic, "read")


def quota_charged(method: str, template: str) -> QuotaKind | None:
    """The byte rate a route's requests are charged to, besides the request rate."""
    route = (method, route_template(template))
    if route in PRODUCE_ROUTES:
        return "produce_bytes"
    return "fetch_bytes" if route in FETCH_ROUTES else None


def quota_refusal(auth: AuthService, usage: PrincipalUsage, throttle: Throttle) -> Problem | None:
    """A request over its quota: the 429 (`--quota-mode reject`, or a throttle past
    `--quota-max-delay`), the refusal counted; None when it is to wait the throttle out."""
    settings = auth.settings
    if settings.quota_mode == "reject" or throttle.wait_s > settings.quota_max_delay_s:
        usage.note_throttled(throttle.kind, throttle.wait_s)
        return over_quota(throttle)
    return None


def over_quota(throttle: Throttle) -> Problem:
    wait_ms = math.ceil(throttle.wait_s * 1000)
    return Problem(
        429,
        "QUOTA_EXCEEDED",
        f"over the {FIELD_OF[throttle.kind]} quota: retry in {wait_ms} ms",
        headers={hdrs.RETRY_AFTER: str(max(1, math.ceil(throttle.wait_s)))},
        quota=FIELD_OF[throttle.kind],
        retry_after_ms=wait_ms,
    )
