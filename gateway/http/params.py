"""Query-parameter and body-field parsing that answers 400 with the parameter's name."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from typing import Any

import orjson
from aiohttp import web
from aiohttp.http import HttpProcessingError

from gateway.http.bodies import content_codings, inflate
from gateway.http.problem import Problem, bad_request, malformed
from gateway.settings import Settings

_INTEGER = re.compile(r"-?[0-9]{1,19}")


def parse_int(raw: str) -> int | None:
    """A plain ASCII decimal integer ("+5", "1_0", " 5 " and other scripts' digits are not)."""
    return int(raw) if _INTEGER.fullmatch(raw) else None


def int_param(
    request: web.Request, name: str, default: int | None, minimum: int, maximum: int
) -> int:
    """An integer query parameter in [minimum, maximum]; required where `default` is None."""
    return query_int(request.query, name, default, minimum, maximum)


def query_int(
    query: Mapping[str, str], name: str, default: int | None, minimum: int, maximum: int
) -> int:
    """`int_param` on a parsed query."""
    raw = query.get(name)
    if raw is None or raw == "":
        if default is None:
            raise bad_request(f"the query parameter {name} is required", "INVALID_PARAMETER")
        return default
    value = parse_int(raw)
    if value is None:
        raise bad_request(f"{name} must be an integer, got {raw!r}", "INVALID_PARAMETER")
    if not minimum <= value <= maximum:
        raise bad_request(
            f"{name} must be between {minimum} and {maximum}, got {value}", "INVALID_PARAMETER"
        )
    return value


def choice_param(request: web.Request, name: str, default: str, choices: tuple[str, ...]) -> str:
    value = request.query.get(name, default)
    if value not in choices:
        raise bad_request(
            f"{name} must be one of {', '.join(choices)}, got {value!r}", "INVALID_PARAMETER"
        )
    return value


def partition_param(request: web.Request) -> int:
    raw = request.match_info["partition"]
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 9:
        raise Problem(404, "UNKNOWN_PARTITION", f"partition {raw!r} does not exist")
    return int(raw)


BODY = web.RequestKey("sluice_body", bytes)


async def read_body(request: web.Request, settings: Settings) -> bytes:
    """The whole body, its Content-Encoding undone (in a worker thread): an unsupported coding
    or charset and an oversized body are refused before reading, a slow sender in time."""
    if BODY in request:
        return request[BODY]
    codings = content_codings(request)
    limit = settings.max_request_bytes
    if request.content_length is not None and request.content_length > limit:
        raise Problem(
            413,
            "REQUEST_TOO_LARGE",
            f"the body is {request.content_length} bytes; the maximum is {limit}",
            headers={"Connection": "close"},
        )
    # A body that came whole with its headers (most do) needs no deadline, and no timer.
    deadline = None if request.content.is_eof() else settings.body_read_timeout_s
    try:
        async with asyncio.timeout(deadline):
            body = await request.read()
    except TimeoutError:
        raise Problem(
            408,
            "REQUEST_TIMED_OUT",
            f"the body did not arrive within {settings.body_read_timeout_s:g} s",
            headers={"Connection": "close"},
        ) from None
    except web.HTTPRequestEntityTooLarge:
        raise Problem(
            413,
            "REQUEST_TOO_LARGE",
            f"the body is larger than the maximum of {limit} bytes",
            headers={"Connection": "close"},
        ) from None
    except HttpProcessingError as exc:  # a malformed chunk size, say (gateway.http.connections)
        raise malformed(exc.message) from None
    if codings:
        body = await asyncio.to_thread(inflate, body, codings, limit)
    request[BODY] = body
    return body


async def json_object(request: web.Request, settings: Settings) -> dict[str, Any]:
    """The request body as a JSON object (415 unless application/json)."""
    body = await read_body(request, settings)
    if request.content_type != "application/json":
        raise Problem(
            415,
            "UNSUPPORTED_MEDIA_TYPE",
            f"expected application/json, got {request.content_type!r}",
        )
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise bad_request(f"malformed JSON: {exc}", "INVALID_JSON") from None
    if not isinstance(doc, dict):
        raise bad_request("the body must be a JSON object", "INVALID_JSON")
    return doc


def json_response(body: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")
