"""The auth middleware: authenticate every request (401 problem+json with WWW-Authenticate),
check what its route needs (403 ACL_DENIED), and the checks handlers make on top; the checks
themselves are gateway.auth.checks', which the fast routes run too."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import hdrs, web

from gateway.auth.acl import CLUSTER, RESOURCE_OPERATIONS, Operation, ResourceType
from gateway.auth.checks import admit, denied, unauthenticated
from gateway.auth.route_operations import access
from gateway.auth.service import AuthService

PRINCIPAL = web.RequestKey("principal", str)
# The node's AuthService, set at startup (the middlewares and handlers find it here).
AUTH = web.AppKey("auth", AuthService)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _preflight(request: web.Request) -> bool:
    """A CORS preflight: browsers send it without credentials."""
    return (
        request.method == hdrs.METH_OPTIONS
        and hdrs.ORIGIN in request.headers
        and hdrs.ACCESS_CONTROL_REQUEST_METHOD in request.headers
    )


# The prefix an app's routes are known by in the access rules and to the other nodes: the
# registry's own port serves at its root what the gateway's port serves under a prefix.
ROUTE_PREFIX = web.AppKey("route_prefix", str)


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Registered only with --auth; runs inside problem_middleware, so its refusals are
    problem+json and metrics count them."""
    auth = request.app[AUTH]
    match_info = request.match_info
    resource = match_info.route.resource
    template = None if resource is None else request.app.get(ROUTE_PREFIX, "") + resource.canonical
    if template in auth.public or (request.method == hdrs.METH_OPTIONS and _preflight(request)):
        return await handler(request)
    principal = await auth.authenticator.authenticate(request)
    if principal is None:
        raise unauthenticated(auth.authenticator)
    request[PRINCIPAL] = principal
    rule = None if template is None else access(request.method, template)
    if rule is None:
        return await handler(request)  # no such route: 404 or 405, to an authenticated caller
    admit(auth, principal, rule, match_info)
    return await handler(request)


def may(request: web.Request, resource_type: ResourceType, name: str, operation: Operation) -> bool:
    """Whether the request's principal may do `operation` (always, with auth off)."""
    principal = request.get(PRINCIPAL)
    if principal is None:
        return True
    return request.app[AUTH].allowed(principal, resource_type, name, operation)


def authorized_operations(
    request: web.Request, resource_type: ResourceType, name: str
) -> tuple[Operation, ...]:
    """What the request's principal may do to the named resource, of what can be done to one of
    its type (KIP-430; all of it with auth off)."""
    principal = request.get(PRINCIPAL)
    if principal is None:
        return RESOURCE_OPERATIONS[resource_type]
    return request.app[AUTH].authorized_operations(principal, resource_type, name)


def require(
    request: web.Request, resource_type: ResourceType, name: str, operation: Operation
) -> None:
    """A handler's check on a resource named by the body or its own state: 403 ACL_DENIED."""
    principal = request.get(PRINCIPAL)
    if principal is not None and not may(request, resource_type, name, operation):
        raise denied(principal, resource_type, name, operation)


def principal_of(request: web.Request) -> str | None:
    """The authenticated principal (None with auth off, and on public routes)."""
    return request.get(PRINCIPAL)


def require_create_topic(request: web.Request, name: str) -> None:
    """Kafka's rule for creating a topic: create on the cluster, or on the topic."""
    if not may(request, "cluster", CLUSTER, "create"):
        require(request, "topic", name, "create")
