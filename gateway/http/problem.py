"""RFC 9457 problem answers: the `Problem` an error is answered with, its
application/problem+json body, and the stable codes of errors the HTTP layer answers itself
(malformed requests, timeouts, sizes)."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

import orjson
from aiohttp import web

PROBLEM_JSON = "application/problem+json"
TYPE_BASE = "https://sluice.dev/problems/"


class Problem(Exception):
    """An error answer: HTTP status, stable code, human detail, optional extra members."""

    def __init__(
        self,
        status: int,
        code: str,
        detail: str,
        *,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.headers = headers or {}
        self.extra = extra


def problem_response(problem: Problem) -> web.Response:
    return web.Response(
        status=problem.status,
        body=problem_body(problem),
        content_type=PROBLEM_JSON,
        headers=problem.headers,
    )


def problem_body(problem: Problem) -> bytes:
    """The problem's JSON document."""
    body: dict[str, Any] = {
        "type": TYPE_BASE + problem.code.lower().replace("_", "-"),
        "title": HTTPStatus(problem.status).phrase,
        "status": problem.status,
        "detail": problem.detail,
        "code": problem.code,
        **problem.extra,
    }
    try:
        return orjson.dumps(body)
    except orjson.JSONEncodeError:  # an extra member that JSON cannot carry: drop the extras
        return orjson.dumps({k: body[k] for k in ("type", "title", "status", "detail", "code")})


_HTTP_CODES = {
    400: "BAD_REQUEST",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    408: "REQUEST_TIMED_OUT",
    413: "REQUEST_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
    431: "REQUEST_HEADER_FIELDS_TOO_LARGE",
}


def status_code(status: int) -> str:
    """The stable code of an error answered by HTTP status alone."""
    return _HTTP_CODES.get(status, HTTPStatus(status).name)


def one_line(text: str, limit: int = 200) -> str:
    """An HTTP parser's message (the text, the bytes at fault, a caret line) on one short line,
    fit for a problem detail and a log line."""
    parts = (line.strip() for line in text.splitlines())
    return " ".join(p for p in parts if p and p.strip("^ ")).rstrip(":")[:limit]


def malformed(message: str) -> Problem:
    """400 MALFORMED_REQUEST for bytes the HTTP parser refused; the connection closes, since
    where the next request starts is unknown."""
    return Problem(
        400,
        "MALFORMED_REQUEST",
        one_line(message) or "malformed request",
        headers={"Connection": "close"},
    )


def bad_request(detail: str, code: str = "BAD_REQUEST", **extra: Any) -> Problem:
    return Problem(400, code, detail, **extra)


def json_body_error(exc: orjson.JSONDecodeError) -> Problem:
    return bad_request(f"malformed JSON: {exc}", "INVALID_JSON")
