"""v2's media types, content negotiation, and routes that answer with or without a trailing
slash (as Confluent's REST Proxy and Karapace do).

v2's media types are `application/vnd.kafka[.embedded].v2+json`: the embedded format (json,
binary; avro, jsonschema and protobuf, on the node's schema registry) says how keys and values
travel;
without one (`application/vnd.kafka.v2+json`, `application/json`) a produce is binary, as in
Confluent's REST Proxy and Karapace. v1's types and the versionless ones are taken alike.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web

from gateway.api.rest_proxy.errors import V2_JSON, v2_error
from gateway.formats import codecs

JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
KAFKA_JSON = "application/vnd.kafka+json"
V1_JSON = "application/vnd.kafka.v1+json"
SCHEMA_FORMATS = ("avro", "jsonschema", "protobuf")
# A v2 body's media type (v1's and the versionless ones too, as Karapace takes them) and the
# embedded format it names; plain JSON, and `application/octet-stream` (what a client that
# names no type sends), are v2 JSON without one.
_BODY_TYPE = re.compile(
    r"application/(?:vnd\.kafka(?:\.(?P<embedded>json|binary|avro|jsonschema|protobuf))?"
    r"(?:\.v[12])?\+json|json|octet-stream)"
)
# What an answer without embedded data may be sent as; the first is the default.
ANSWER_TYPES = (V2_JSON, KAFKA_JSON, codecs.JSON, V1_JSON)
RECORDS_TYPES = {
    name: f"application/vnd.kafka.{name}.v2+json" for name in ("json", "binary", *SCHEMA_FORMATS)
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def body_format(request: web.Request) -> str:
    """The embedded format a produce body's Content-Type names (binary if none: v2's
    default), schema-registry ones included; 415 for a type that is not v2's."""
    media = request.content_type
    found = _BODY_TYPE.fullmatch(media)
    if found is None:
        raise v2_error(415, 415, f"Content-Type {media!r} is not a v2 media type")
    return found["embedded"] or "binary"


def json_body_type(request: web.Request) -> None:
    """A body without embedded data (consumer settings, subscriptions, offsets): any v2 media
    type, or plain JSON."""
    if _BODY_TYPE.fullmatch(request.content_type) is None:
        raise v2_error(
            415, 415, f"Content-Type {request.content_type!r} is not a v2 JSON media type"
        )


def accepted(header: str) -> str:
    """An Accept header with Karapace's `*/json` read as `application/json`."""
    return header.replace("*/json", codecs.JSON)


def answer_type(request: web.Request) -> str:
    """The media type of an answer without embedded data, from Accept (406 if none fits)."""
    chosen = codecs.negotiate(accepted(request.headers.get("Accept", "")), ANSWER_TYPES, V2_JSON)
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
