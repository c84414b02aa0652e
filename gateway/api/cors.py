"""CORS for browser clients (`--cors-origins`): preflights answered before any other
middleware, and every answer, errors and 401s included, readable by the allowed origins.

A small middleware rather than aiohttp-cors, which answers preflights from OPTIONS routes it
adds to each registered route: they then pass through every middleware, so an auth middleware
refuses them (browsers send preflights without credentials), routes added later are missed,
and 405 answers list OPTIONS. Without origins configured nothing is installed: OPTIONS is
refused 405 like any method a route lacks, and browsers block cross-origin calls.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from gateway.http.problem import Problem, problem_response
from gateway.settings import Settings
from gateway.state import SETTINGS

ANY = "*"
# Response headers a script may read beyond the CORS-safelisted ones.
EXPOSED = ("Idempotency-Key", "Retry-After", "Sluice-High-Watermark", "Sluice-Next-Offset")
_EXPOSE = ", ".join(EXPOSED)


@dataclass(frozen=True, slots=True)
class Policy:
    """Which origins may read answers, and what a preflight answers them."""

    named: frozenset[str]  # origins listed by name: echoed, with credentials if allowed
    any_origin: bool  # `*` listed: every other origin, never with credentials
    credentials: bool
    preflight: dict[str, str]  # the headers of a preflight answer

    @classmethod
    def of(cls, settings: Settings) -> Policy:
        preflight = {}
        if settings.cors_methods:
            preflight["Access-Control-Allow-Methods"] = ", ".join(settings.cors_methods)
        if settings.cors_headers:
            preflight["Access-Control-Allow-Headers"] = ", ".join(settings.cors_headers)
        preflight["Access-Control-Max-Age"] = str(settings.cors_max_age_s)
        named = frozenset(o for o in settings.cors_origins if o != ANY)
        any_origin = ANY in settings.cors_origins
        return cls(named, any_origin, settings.cors_allow_credentials, preflight)

    def allowed(self, origin: str) -> dict[str, str] | None:
        """The headers that let `origin` read an answer; None if it may not."""
        if origin in self.named:
            if self.credentials:
                return {
                    "Access-Control-Allow-Origin": origin,
                    "Access-Control-Allow-Credentials": "true",
                }
            return {"Access-Control-Allow-Origin": origin}
        return {"Access-Control-Allow-Origin": ANY} if self.any_origin else None

    def answer_headers(self, origin: str | None) -> tuple[tuple[str, str], ...]:
        """What `_add_headers` adds to an answer that is no preflight and has no Vary of its
        own (the fast routes' answers), in its order."""
        vary = (("Vary", "Origin"),) if self.named else ()
        allowed = None if origin is None else self.allowed(origin)
        if allowed is None:
            return vary
        return (*vary, *allowed.items(), ("Access-Control-Expose-Headers", _EXPOSE))


POLICY = web.AppKey("cors_policy", Policy)


def setup(app: web.Application) -> None:
    """Serve CORS if origins are configured, outside every other middleware (auth included)."""
    settings = app[SETTINGS]
    if not settings.cors_origins:
        return
    app[POLICY] = Policy.of(settings)
    app.middlewares.insert(0, cors_middleware)
    app.on_response_prepare.append(_add_headers)


@web.middleware
async def cors_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Answer a preflight on any route: 204 for an allowed origin, else 403."""
    origin = request.headers.get("Origin")
    if (
        request.method != "OPTIONS"
        or origin is None
        or "Access-Control-Request-Method" not in request.headers
        or isinstance(request.match_info.http_exception, web.HTTPNotFound)
    ):
        return await handler(request)
    policy = request.app[POLICY]
    if policy.allowed(origin) is None:
        return problem_response(
            Problem(
                403,
                "CORS_ORIGIN_NOT_ALLOWED",
                f"origin {origin!r} is not one --cors-origins allows",
                origin=origin,
            )
        )
    return web.Response(status=204, headers=policy.preflight)


async def _add_headers(request: web.Request, response: web.StreamResponse) -> None:
    """Let an allowed origin read the answer; answers differ by Origin unless only `*` is set."""
    policy = request.app[POLICY]
    headers = response.headers
    if policy.named:
        vary = headers.get("Vary")
        if vary is None:
            headers["Vary"] = "Origin"
        elif "origin" not in (v.strip().lower() for v in vary.split(",")):
            headers["Vary"] = f"{vary}, Origin"
    origin = request.headers.get("Origin")
    allowed = None if origin is None else policy.allowed(origin)
    if allowed is None:
        return
    headers.update(allowed)
    if "Access-Control-Allow-Methods" not in headers:  # not a preflight: expose what it sends
        headers["Access-Control-Expose-Headers"] = _EXPOSE
