"""CORS (`--cors-origins`): preflights on every route, answers readable by allowed origins only,
credentials only for origins listed by name, nothing at all when no origin is configured."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

from aiohttp import web
from pytest_aiohttp import AiohttpClient

from gateway.api.cors import EXPOSED
from gateway.app import build_app
from gateway.settings import Settings
from tests.api.support import (
    JSON,
    RECORD_BATCH,
    Client,
    Start,
    create_topic,
    problem,
    produce,
    records_path,
)

APP = "https://app.example.com"
OTHER = "https://evil.example.net"


def preflight_headers(origin: str, method: str = "POST") -> dict[str, str]:
    return {
        "Origin": origin,
        "Access-Control-Request-Method": method,
        "Access-Control-Request-Headers": "content-type,idempotency-key",
    }


def concrete_paths(client: Client) -> list[str]:
    """One path per route of the app, its templates ({topic}, {partition}...) filled in."""
    assert client.app is not None
    return sorted({re.sub(r"\{\w+\}", "x1", r.canonical) for r in client.app.router.resources()})


def cors_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items() if k.lower().startswith("access-control")}


async def test_without_origins_nothing_changes(client: Client) -> None:
    """No CORS configured: a preflight is a method the route lacks (405), no CORS headers."""
    resp = await client.options("/v1/topics", headers=preflight_headers(APP))
    await problem(resp, 405, "METHOD_NOT_ALLOWED")
    assert cors_headers(resp.headers) == {}
    resp = await client.get("/v1/topics", headers={"Origin": APP})
    assert resp.status == 200 and cors_headers(resp.headers) == {}
    assert "Vary" not in resp.headers


async def test_preflight_is_answered_on_every_route(start: Start) -> None:
    client = await start(cors_origins=(APP,), cors_max_age_s=120)
    paths = concrete_paths(client)
    assert "/v1/topics/x1/partitions/x1/records" in paths and len(paths) > 15
    for path in paths:
        resp = await client.options(path, headers=preflight_headers(APP, "DELETE"))
        assert resp.status == 204, path
        assert cors_headers(resp.headers) == {
            "access-control-allow-origin": APP,
            "access-control-allow-methods": "GET, HEAD, POST, PUT, PATCH, DELETE",
            "access-control-allow-headers": "Accept, Authorization, Content-Type, Idempotency-Key",
            "access-control-max-age": "120",
        }, path
        assert resp.headers["Vary"] == "Origin"


async def test_answers_and_errors_are_readable_by_an_allowed_origin(start: Start) -> None:
    client = await start(cors_origins=(APP, "http://localhost:3000"))
    await create_topic(client, "t")
    await produce(client, [{"value": 1}])
    for path, status in [("/v1/topics", 200), ("/v1/topics/missing", 404), ("/v1/nowhere", 404)]:
        resp = await client.get(path, headers={"Origin": APP})
        assert resp.status == status, path
        assert cors_headers(resp.headers) == {
            "access-control-allow-origin": APP,
            "access-control-expose-headers": ", ".join(EXPOSED),
        }
        assert resp.headers["Vary"] == "Origin"
    assert {"Idempotency-Key", "Sluice-Next-Offset", "Sluice-High-Watermark"} <= set(EXPOSED)


async def test_every_sluice_header_of_a_fetch_is_exposed(start: Start) -> None:
    client = await start(cors_origins=(APP,))
    await create_topic(client, "t")
    await produce(client, [{"value": 1}])
    for accept in (JSON, RECORD_BATCH):
        resp = await client.get(records_path("t", 0), headers={"Origin": APP, "Accept": accept})
        assert resp.status == 200
        sent = {k for k in resp.headers if k.lower().startswith("sluice-")}
        exposed = resp.headers["Access-Control-Expose-Headers"].split(", ")
        assert sent and sent <= set(exposed), (accept, sent)


async def test_a_disallowed_origin_gets_no_allow_headers(start: Start) -> None:
    client = await start(cors_origins=(APP,))
    resp = await client.options("/v1/topics/t/records", headers=preflight_headers(OTHER))
    body = await problem(resp, 403, "CORS_ORIGIN_NOT_ALLOWED")
    assert body["origin"] == OTHER
    assert cors_headers(resp.headers) == {}
    resp = await client.get("/v1/topics", headers={"Origin": OTHER})
    assert resp.status == 200 and cors_headers(resp.headers) == {}
    assert resp.headers["Vary"] == "Origin"  # a cache must not hand it to APP, or back


async def test_credentials_only_for_origins_listed_by_name(start: Start) -> None:
    client = await start(cors_origins=(APP, "*"), cors_allow_credentials=True)
    resp = await client.options("/v1/topics", headers=preflight_headers(APP))
    assert resp.headers["Access-Control-Allow-Origin"] == APP
    assert resp.headers["Access-Control-Allow-Credentials"] == "true"
    for method in ("OPTIONS", "GET"):
        headers = preflight_headers(OTHER) if method == "OPTIONS" else {"Origin": OTHER}
        resp = await client.request(method, "/v1/topics", headers=headers)
        assert resp.headers["Access-Control-Allow-Origin"] == "*"
        assert "Access-Control-Allow-Credentials" not in resp.headers


async def test_any_origin_without_names_does_not_vary(start: Start) -> None:
    client = await start(cors_origins=("*",), cors_headers=())
    resp = await client.options("/v1/groups", headers=preflight_headers(OTHER, "GET"))
    assert resp.status == 204
    assert cors_headers(resp.headers) == {
        "access-control-allow-origin": "*",
        "access-control-allow-methods": "GET, HEAD, POST, PUT, PATCH, DELETE",
        "access-control-max-age": "600",
    }
    resp = await client.get("/v1/groups", headers={"Origin": OTHER})
    assert resp.headers["Access-Control-Allow-Origin"] == "*" and "Vary" not in resp.headers


async def test_plain_options_and_requests_without_origin_are_not_preflights(start: Start) -> None:
    client = await start(cors_origins=(APP,))
    resp = await client.options("/v1/topics", headers={"Origin": APP})  # no request method
    assert resp.status == 405 and resp.headers["Access-Control-Allow-Origin"] == APP
    resp = await client.options("/v1/topics", headers={"Access-Control-Request-Method": "GET"})
    assert resp.status == 405 and cors_headers(resp.headers) == {}


async def test_preflights_pass_before_authentication(
    aiohttp_client: AiohttpClient, data_dir: Path
) -> None:
    """An auth middleware placed anywhere after CORS: the preflight (which never carries
    credentials) is answered, and its 401s are readable by the allowed origin."""

    @web.middleware
    async def refuse_anonymous(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if "Authorization" not in request.headers:
            raise web.HTTPUnauthorized(headers={"WWW-Authenticate": "Bearer"})
        return await handler(request)

    app = build_app(Settings(data_dir=data_dir, cors_origins=(APP,)))
    app.middlewares.insert(1, refuse_anonymous)
    client = await aiohttp_client(app)
    resp = await client.options("/v1/topics", headers=preflight_headers(APP))
    assert resp.status == 204 and resp.headers["Access-Control-Allow-Origin"] == APP
    resp = await client.get("/v1/topics", headers={"Origin": APP})
    assert resp.status == 401
    assert resp.headers["Access-Control-Allow-Origin"] == APP
    assert "Idempotency-Key" in resp.headers["Access-Control-Expose-Headers"]
    resp = await client.get("/v1/topics", headers={"Origin": APP, "Authorization": "Bearer x"})
    assert resp.status == 200 and resp.headers["Access-Control-Allow-Origin"] == APP


async def test_with_the_gateways_authentication(start: Start) -> None:
    """`--auth` on: preflights need no credentials, and its 401s are readable."""
    client = await start(cors_origins=(APP,), auth=True)
    resp = await client.options("/v1/topics", headers=preflight_headers(APP))
    assert resp.status == 204 and resp.headers["Access-Control-Allow-Origin"] == APP
    resp = await client.get("/v1/topics", headers={"Origin": APP})
    await problem(resp, 401, "UNAUTHENTICATED")
    assert resp.headers["Access-Control-Allow-Origin"] == APP
    assert "Sluice-Next-Offset" in resp.headers["Access-Control-Expose-Headers"]
