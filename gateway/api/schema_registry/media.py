"""The registry API's media types, request bodies and parameters, and its error body.

Answers are `application/vnd.schemaregistry.v1+json`; bodies may be that, the unversioned
type, or `application/json`. An error carries Confluent's `error_code` and `message` (what
its clients read) and RFC 9457's members, so that it is a problem document too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import orjson
from aiohttp import web

from gateway.api.problems import PROBLEM_DIALECTS
from gateway.http.params import read_body
from gateway.http.problem import Problem, problem_body
from gateway.state import gateway_of
from schemas import errors
from schemas.errors import SchemaError
from schemas.state import RegistryState
from schemas.store import SchemaStore

PREFIX = "/schema-registry"  # where the gateway's port serves the registry
V1_JSON = "application/vnd.schemaregistry.v1+json"
# What an answer may be sent as, the default first; bodies may be any of these (or octet-stream).
ANSWER_TYPES = (V1_JSON, "application/vnd.schemaregistry+json", "application/json")
BODY_TYPES = frozenset({*ANSWER_TYPES, "application/octet-stream"})
# Registry answers on this app are at the root (the registry's own port), not under PREFIX.
AT_ROOT = web.AppKey("schema_registry_at_root", bool)
UNKNOWN_PROPERTIES = "Confluent-Accept-Unknown-Properties"
# Confluent's codes for refused credentials and ACLs (rest-utils' 40101 and 40301).
AUTH_CODES = {"UNAUTHENTICATED": 40101, "ACL_DENIED": 40301}

T = TypeVar("T")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def add_route(app: web.Application, method: str, path: str, handler: Handler) -> None:
    """Route a registry path ("": the registry's root), under PREFIX unless the app serves
    the registry at its root; its answer in the media type the request's Accept prefers."""

    async def negotiated(request: web.Request) -> web.StreamResponse:
        """The handler's answer in the negotiated media type."""
        media = answer_type(request.headers.get("Accept", ""))
        response = await handler(request)
        if isinstance(response, web.Response) and response.content_type in ANSWER_TYPES:
            response.content_type = media
        return response

    # A subject may hold any character but "/" (aiohttp's default also refuses braces).
    path = path.replace("{subject}", "{subject:[^/]+}")
    if app.get(AT_ROOT, False):
        app.router.add_route(method, path or "/", negotiated)
        return
    app.router.add_route(method, PREFIX + path, negotiated)
    if not path:  # the root under the prefix, with its slash as clients join it too
        app.router.add_route(method, PREFIX + "/", negotiated)


def answer_type(accept: str) -> str:
    """The registry's media type an Accept header prefers (by weight; a wildcard takes the
    default); 406 if it accepts none of them."""
    best, best_q = None, 0.0
    for item in accept.split(",") if accept.strip() else ["*/*"]:
        media, *params = (part.strip() for part in item.split(";"))
        q = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        kind, _, sub = media.lower().partition("/")
        if kind == "*" or (kind == "application" and sub in ("*", "")):
            found: str | None = V1_JSON
        else:
            found = media.lower() if media.lower() in ANSWER_TYPES else None
        if found is not None and q > best_q:
            best, best_q = found, q
    if best is None:
        raise invalid(f"None of {accept!r} is one of {', '.join(ANSWER_TYPES)}", 406)
    return best


def store_of(request: web.Request) -> SchemaStore:
    """This node's registry store."""
    return gateway_of(request).schemas


async def view(request: web.Request) -> RegistryState:
    """The registry's view once it holds every write answered before this request."""
    return await store_of(request).synced()


def answer(body: object, status: int = 200) -> web.Response:
    """A JSON answer in the registry's media type (add_route sets the one Accept prefers)."""
    return web.Response(body=orjson.dumps(body), status=status, content_type=V1_JSON)


def invalid(message: str, error_code: int = 422) -> SchemaError:
    """A request the registry cannot take as sent (Confluent's 422 and its kin)."""
    return SchemaError(error_code, message)


async def body_object(
    request: web.Request, fields: dict[str, tuple[type, ...]], required: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The body as a JSON object with these fields (name -> the JSON types each may be; null
    always allowed), the required ones present. Unknown fields are refused unless the client
    says it sends them knowingly (Confluent-Accept-Unknown-Properties, as confluent-kafka
    does); then they are ignored."""
    if request.content_type not in BODY_TYPES:
        raise invalid(
            f"Content-Type {request.content_type!r} is not one of {', '.join(sorted(BODY_TYPES))}",
            415,
        )
    raw = await read_body(request, gateway_of(request).settings)
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise invalid(f"Malformed JSON body: {exc}", 400) from None
    if not isinstance(doc, dict):
        raise invalid("The body must be a JSON object", 422)
    lenient = request.headers.get(UNKNOWN_PROPERTIES, "").lower() == "true"
    unknown = sorted(set(doc) - set(fields))
    if unknown and not lenient:
        raise invalid(f"Unrecognized field: {unknown[0]}", 422)
    for name, types in fields.items():
        value = doc.get(name)
        if value is None:
            if name in required:
                raise invalid(f"Missing field: {name}", 422)
            continue
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            raise invalid(f"Field {name!r} has the wrong type: {type(value).__name__}", 422)
    return {name: doc[name] for name in fields if doc.get(name) is not None}


def flag(request: web.Request, name: str) -> bool:
    """A boolean query parameter: true or false in any case (absent: false)."""
    raw = request.query.get(name)
    if raw is None or raw.lower() == "false":
        return False
    if raw.lower() == "true":
        return True
    raise invalid(f"Query parameter {name!r} must be true or false, not {raw!r}", 400)


def window(request: web.Request, items: list[T]) -> list[T]:
    """`offset` and `limit` (-1: all) applied to a listing."""
    try:
        offset = int(request.query.get("offset", "0"))
        limit = int(request.query.get("limit", "-1"))
    except ValueError:
        raise invalid("offset and limit must be integers", 400) from None
    offset = max(offset, 0)
    return items[offset:] if limit < 0 else items[offset : offset + limit]


def error_code(problem: Problem) -> int:
    """Confluent's code for a failure: the registry's own, else by status (a forward that
    failed, a store that could not be read or written in time)."""
    explicit = problem.extra.get("error_code")
    if isinstance(explicit, int):
        return explicit
    if problem.code in AUTH_CODES:
        return AUTH_CODES[problem.code]
    if problem.status in (502, 503):
        return errors.FORWARDING_ERROR
    if problem.status == 504:
        return errors.OPERATION_TIMEOUT
    if problem.status >= 500:
        return errors.STORE_ERROR
    return problem.status


def render(problem: Problem) -> web.Response:
    """A failure as Confluent's body and a problem document in one. A write that reached a
    node no longer writing (the writer moved while it was forwarded) is a retriable 503."""
    if problem.status == 421:
        problem = Problem(
            503,
            problem.code,
            problem.detail,
            headers={"Retry-After": "1"},
            error_code=errors.FORWARDING_ERROR,
        )
    doc = orjson.loads(problem_body(problem))
    doc["error_code"] = error_code(problem)
    doc["message"] = problem.detail
    return web.Response(
        body=orjson.dumps(doc), status=problem.status, content_type=V1_JSON, headers=problem.headers
    )


def speaks_registry(request: web.Request) -> bool:
    """Whether the request is the registry's (its errors answer in Confluent's body)."""
    path = request.path
    return request.app.get(AT_ROOT, False) or path == PREFIX or path.startswith(PREFIX + "/")


def setup(app: web.Application) -> None:
    """Failures on the registry's paths answer in its dialect."""
    app.setdefault(PROBLEM_DIALECTS, []).append((speaks_registry, render))
