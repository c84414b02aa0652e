"""v2's error answer, `{"error_code": N, "message": "..."}`, and which code each failure gets.

The codes, and where each comes from:

- Confluent's kafka-rest `Errors.java`: 40401 topic not found, 40402 partition not found,
  40403 consumer instance not found, 40601 the consumer's format does not match the request,
  40902 consumer instance already exists, 40903 illegal state (subscribe and assign at once),
  42204 invalid consumer configuration, 50002 Kafka error, 50003 retriable Kafka error.
- Confluent's kafka-rest `Errors.java` too: 42201 and 42202, a produce in a schema format whose
  records have keys (values) but no key (value) schema or schema id.
- Confluent's kafka-rest `Errors.java` and Karapace's `error_codes.py`: 40801, a schema the
  registry refused to register for a produce.
- Confluent's kafka-rest `KafkaExceptionMapper`: 40101 authentication failed, 40301 not
  authorized.
- Karapace's `kafka_rest_apis/error_codes.py`: 42205 invalid data (a field of the wrong type
  or range, a record too large to produce).
- rest-utils (Confluent's and Karapace's base): any other error's code is its HTTP status
  (a produce body of the wrong shape is 422, bad base64 400, as Karapace answers them).

Sluice keeps its own HTTP statuses (429 with Retry-After, 503 for a leader election, 416 for an
offset out of range): v2 clients branch on `error_code`, and retry on 5xx as before.
"""

from __future__ import annotations

import orjson
from aiohttp import web

from gateway.api.problems import PROBLEM_DIALECTS
from gateway.http.problem import Problem

V2_JSON = "application/vnd.kafka.v2+json"

TOPIC_NOT_FOUND = 40401
PARTITION_NOT_FOUND = 40402
CONSUMER_NOT_FOUND = 40403
UNSUPPORTED_FORMAT = 40601
CONSUMER_ALREADY_EXISTS = 40902
ILLEGAL_STATE = 40903
SCHEMA_RETRIEVAL_ERROR = 40801
KEY_SCHEMA_MISSING = 42201
VALUE_SCHEMA_MISSING = 42202
INVALID_CONSUMER_CONFIG = 42204
INVALID_DATA = 42205
KAFKA_ERROR = 50002
KAFKA_RETRIABLE_ERROR = 50003

# Kafka's text for MESSAGE_TOO_LARGE, which v2 clients see in a record's error.
MESSAGE_TOO_LARGE = (
    "The server has a configurable maximum message size to avoid unbounded memory allocation. "
    "This error is thrown if the client attempt to produce a message larger than this maximum."
)

# Sluice's stable problem codes -> v2's error codes.
_CODES = {
    "UNKNOWN_TOPIC": TOPIC_NOT_FOUND,
    "UNKNOWN_PARTITION": PARTITION_NOT_FOUND,
    "UNKNOWN_MEMBER": CONSUMER_NOT_FOUND,
    "MEMBER_ALREADY_EXISTS": CONSUMER_ALREADY_EXISTS,
    "PARTITION_NOT_ASSIGNED": ILLEGAL_STATE,
    "ILLEGAL_STATE": ILLEGAL_STATE,
    "UNAUTHENTICATED": 40101,
    "ACL_DENIED": 40301,
    "INVALID_RECORD": INVALID_DATA,
    "INVALID_JSON": 400,
}


def v2_error(status: int, error_code: int, message: str, **fields: object) -> Problem:
    """An error in v2's terms, raised as a problem so the middlewares count and render it;
    `fields` join its body (a refused produce's per-record offsets)."""
    return Problem(status, "REST_PROXY_ERROR", message, error_code=error_code, v2_fields=fields)


def v2_code(problem: Problem) -> int:
    """The v2 error code a problem stands for (see the module's docstring for the sources)."""
    explicit = problem.extra.get("error_code")
    if isinstance(explicit, int):
        return explicit
    if problem.code in _CODES:
        return _CODES[problem.code]
    if problem.status >= 500 and problem.status != 500:
        return KAFKA_RETRIABLE_ERROR if "Retry-After" in problem.headers else KAFKA_ERROR
    return problem.status


def error_body(problem: Problem) -> dict[str, object]:
    fields = problem.extra.get("v2_fields")
    body: dict[str, object] = {"error_code": v2_code(problem), "message": problem.detail}
    if isinstance(fields, dict):
        body.update(fields)
    return body


def render(problem: Problem) -> web.Response:
    """A problem as v2 answers it: the same status and headers, v2's body."""
    return web.Response(
        body=orjson.dumps(error_body(problem)),
        status=problem.status,
        content_type=V2_JSON,
        headers=problem.headers,
    )


V2_PREFIXES = ("/topics", "/brokers", "/consumers")


def speaks_v2(request: web.Request) -> bool:
    path = request.path
    return any(path == p or path.startswith(p + "/") for p in V2_PREFIXES)


def speaks_v3(request: web.Request) -> bool:
    return request.path.startswith("/v3/")


def v3_render(problem: Problem) -> web.Response:
    """A problem as v3 answers it (kafka-rest's V3ExceptionMapper): its HTTP status as the
    error code, in `application/json`."""
    return web.Response(
        body=orjson.dumps({"error_code": problem.status, "message": problem.detail}),
        status=problem.status,
        content_type="application/json",
        headers=problem.headers,
    )


def setup(app: web.Application) -> None:
    """Failures on the v2 paths answer v2's body, on the v3 paths v3's (auth's 401/403 and
    quotas' 429 included)."""
    dialects = app.setdefault(PROBLEM_DIALECTS, [])
    dialects.append((speaks_v2, render))
    dialects.append((speaks_v3, v3_render))
