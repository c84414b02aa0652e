"""v2's media types, content negotiation, and routes that answer with or without a trailing
slash (as Confluent's REST Proxy and Karapace do).

v2's media types are `application/vnd.kafka[.embedded].v2+json`: the embedded format (json,
binary; avro, jsonschema and protobuf need a schema registry) says how keys and values travel;
without one (`application/vnd.kafka.v2+json`, `application/json`) a produce is binary, as in
Confluent's REST Proxy and Karapace.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal

import orjson
from aiohttp import web

from gateway.api.rest_proxy.errors import UNSUPPORTED_FORMAT, V2_JSON, v2_error
from gateway.formats import codecs
from gateway.http.problem import Problem

Format = Literal["json", "binary"]
JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
KAFKA_JSON = "application/vnd.kafka+json"
SCHEMA_FORMATS = ("avro", "jsonschema", "protobuf")
# Body media types -> the embedded format they carry.
BODY_FORMATS: dict[str, Format] = {
    JSON_V2: "json",
    BINARY_V2: "binary",
    V2_JSON: "binary",
    KAFKA_JSON: "binary",
    codecs.JSON: "binary",
}
# What an answer without embedded data may be sent as; the first is the default.
ANSWER_TYPES = (V2_JSON, KAFKA_JSON, codecs.JSON)
RECORDS_TYPES: dict[Format, str] = {"json": JSON_V2, "binary": BINARY_V2}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _schema_format(media: str) -> str | None:
    """The schema-registry format a v2 media type names, if any."""
    for name in SCHEMA_FORMATS:
        if media.startswith(f"application/vnd.kafka.{name}.v"):
            return name
    return None


def no_schema_registry(name: str) -> Problem:
    return v2_error(
        406,
        UNSUPPORTED_FORMAT,
        f"the {name} format needs a schema registry, and Sluice has none configured: use "
        "application/vnd.kafka.json.v2+json or application/vnd.kafka.binary.v2+json",
    )


def body_format(request: web.Request) -> Format:
    """The embedded format of a produce body, from its Content-Type."""
    media = request.content_type
    found = BODY_FORMATS.get(media)
    if found is not None:
        return found
    schema = _schema_format(media)
    if schema is not None:
        raise no_schema_registry(schema)
    raise v2_error(
        415,
        415,
        f"Content-Type {media!r} is not one of {', '.join(BODY_FORMATS)}",
    )


def json_body_type(request: web.Request) -> None:
    """A body without embedded data (consumer settings, subscriptions, offsets): any v2 media
    type, or plain JSON."""
    media = request.content_type
    if media not in BODY_FORMATS and _schema_format(media) is None:
        raise v2_error(415, 415, f"Content-Type {media!r} is not a v2 JSON media type")


def answer_type(request: web.Request) -> str:
    """The media type of an answer without embedded data, from Accept (406 if none fits)."""
    chosen = codecs.negotiate(request.headers.get("Accept", ""), ANSWER_TYPES, V2_JSON)
    if chosen is None:
        raise v2_error(406, 406, f"Accept allows none of {', '.join(ANSWER_TYPES)}")
    return chosen


def answer(request: web.Request, doc: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(doc), status=status, content_type=answer_type(request))


def add_route(app: web.Application, method: str, path: str, handler: Handler) -> None:
    """Register `handler` on `path` and on `path/`: v2 clients send both (the access rules
    and the contract name the slash-less template; see gateway.auth.route_operations)."""
    for template in (path, f"{path}/"):
        if method == "GET":
            app.router.add_get(template, handler)  # and HEAD
        else:
            app.router.add_route(method, template, handler)
