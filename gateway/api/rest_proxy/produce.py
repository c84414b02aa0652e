"""v2 produce: `POST /topics/{topic}` and `POST /topics/{topic}/partitions/{partition}`.

A v2 body becomes the /v1 JSON body it stands for, and goes through the same produce front
(gateway.produce): the same validation, murmur2 partitioning of keys, sticky partition for
key-less records, batches, acks and Idempotency-Key. What differs is only the translation:

- json format (`application/vnd.kafka.json.v2+json`): values are stored as their JSON text (as
  /v1 stores JSON values); a key is stored as its compact JSON text, as Confluent's JSON
  serializer writes it (so the key "a" is the three bytes `"a"`, and is partitioned by them).
- binary format: keys and values are base64, stored decoded (/v1's `*_encoding: base64`).

The answer lists each record's partition and offset, in request order: records bound for one
partition get consecutive offsets in request order, so each offset follows from its
partition's base offset.
"""

from __future__ import annotations

import base64
from typing import Annotated, Any

import msgspec
import orjson
from aiohttp import web

from gateway.api.records import ensure_topic, produce_options, produced
from gateway.api.rest_proxy import schema_formats
from gateway.api.rest_proxy.errors import (
    INVALID_DATA,
    KAFKA_ERROR,
    KAFKA_RETRIABLE_ERROR,
    KEY_SCHEMA_MISSING,
    MESSAGE_TOO_LARGE,
    VALUE_SCHEMA_MISSING,
    v2_error,
)
from gateway.api.rest_proxy.media import SCHEMA_FORMATS, add_route, answer, body_format
from gateway.api.rest_proxy.metadata import topic_named, v2_partition
from gateway.api.topics import refuse_internal
from gateway.http.params import read_body
from gateway.http.problem import Problem
from gateway.produce.errors import ProduceError
from gateway.produce.front import ProduceRequest
from gateway.produce.partitioner import partition_for_key
from gateway.state import gateway_of
from replication.errors import PartiallyAppended
from replication.node_contract import FORWARDED_BY

Partition = Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)]
_NULL = msgspec.Raw(b"null")


class _JsonRecord(msgspec.Struct, forbid_unknown_fields=True):
    key: msgspec.Raw = _NULL
    value: msgspec.Raw = _NULL
    partition: Partition | None = None


class _BinaryRecord(msgspec.Struct, forbid_unknown_fields=True):
    key: str | None = None
    value: str | None = None
    partition: Partition | None = None


class _SchemaRecord(msgspec.Struct, forbid_unknown_fields=True):
    key: Any = None
    value: Any = None
    partition: Partition | None = None


class _Schemas(msgspec.Struct, forbid_unknown_fields=True):
    """The schema fields: json and binary accept and ignore them; an id may be its decimal
    text (as Karapace takes it)."""

    key_schema: str | None = None
    key_schema_id: int | str | None = None
    value_schema: str | None = None
    value_schema_id: int | str | None = None


class _JsonBody(_Schemas, forbid_unknown_fields=True):
    records: list[_JsonRecord] = []


class _BinaryBody(_Schemas, forbid_unknown_fields=True):
    records: list[_BinaryRecord] = []


class _SchemaBody(_Schemas, forbid_unknown_fields=True):
    records: list[_SchemaRecord] = []


class _V1Json(msgspec.Struct, omit_defaults=True):
    value: msgspec.Raw
    key: str | None = None
    partition: int | None = None


class _V1Binary(msgspec.Struct, omit_defaults=True):
    value: str | None
    key: str | None = None
    key_encoding: str | None = None
    value_encoding: str | None = None
    partition: int | None = None


_BODY_FIELDS = {"records", "key_schema", "key_schema_id", "value_schema", "value_schema_id"}
_RECORD_FIELDS = {"key", "value", "partition"}
_DECODERS: dict[
    str,
    msgspec.json.Decoder[_JsonBody]
    | msgspec.json.Decoder[_BinaryBody]
    | msgspec.json.Decoder[_SchemaBody],
] = {
    "json": msgspec.json.Decoder(_JsonBody),
    "binary": msgspec.json.Decoder(_BinaryBody),
    **{name: msgspec.json.Decoder(_SchemaBody) for name in SCHEMA_FORMATS},
}
_ENCODER = msgspec.json.Encoder()


def add_routes(app: web.Application) -> None:
    schema_formats.setup(app)
    add_route(app, "POST", "/topics/{topic}", produce)
    add_route(app, "POST", "/topics/{topic}/partitions/{partition}", produce)


def _parsed(body: bytes, embedded: str) -> _JsonBody | _BinaryBody | _SchemaBody:
    """The body in its format's shape; what v2 refuses gets the error Karapace's and
    Confluent's proxies give it (see `_refusal`)."""
    try:
        doc = _DECODERS[embedded].decode(body)
        if not doc.records:
            raise msgspec.ValidationError("no records")
    except msgspec.ValidationError as exc:
        raise _refusal(body, embedded, str(exc)) from None
    except msgspec.DecodeError as exc:
        raise v2_error(400, 400, f"malformed JSON: {exc}") from None
    except RecursionError:
        raise v2_error(400, 400, "the body nests JSON deeper than the parser allows") from None
    return doc


def translate(body: bytes, embedded: str) -> tuple[bytes, list[bytes | None], list[int | None]]:
    """A json or binary v2 produce body -> the /v1 JSON body it stands for, each record's key
    bytes (None: no key) and the partition each names (None: chosen by the front)."""
    doc = _parsed(body, embedded)
    assert not isinstance(doc, _SchemaBody)
    for schema_id in (doc.key_schema_id, doc.value_schema_id):
        if isinstance(schema_id, str) and not (schema_id.isascii() and schema_id.isdigit()):
            raise _refusal(body, embedded, f"schema id {schema_id!r} is not a number")
    keys: list[bytes | None] = []
    named = [r.partition for r in doc.records]
    out: list[Any] = []
    if isinstance(doc, _JsonBody):
        for r in doc.records:
            text = None if r.key == _NULL else _compact_key(r.key, len(out))
            keys.append(None if text is None else text.encode())
            out.append(_V1Json(r.value, text, r.partition))
    else:
        for index, b in enumerate(doc.records):
            keys.append(None if b.key is None else _decoded(b.key, index, "key"))
            out.append(
                _V1Binary(
                    b.value,
                    b.key,
                    None if b.key is None else "base64",
                    None if b.value is None else "base64",
                    b.partition,
                )
            )
    return _ENCODER.encode({"records": out}), keys, named


async def translate_schemas(
    request: web.Request, topic: str, body: bytes, embedded: str
) -> tuple[bytes, list[bytes | None], list[int | None], dict[str, int | None]]:
    """A schema-format body -> the /v1 binary body of its records in the wire format (each
    side's schema resolved or registered first), the key bytes, the partitions each names,
    and the schema ids the answer carries."""
    doc = _parsed(body, embedded)
    assert isinstance(doc, _SchemaBody)
    sides: dict[str, list[bytes | None]] = {}
    ids: dict[str, int | None] = {"key_schema_id": None, "value_schema_id": None}
    fields = msgspec.structs.asdict(doc)
    for side in ("key", "value"):
        values = [getattr(r, side) for r in doc.records]
        if all(v is None for v in values):
            sides[side] = [None] * len(values)
            continue
        if not _names_schema(fields, side):
            raise _refusal(body, embedded, f"no {side} schema")
        schema_id, parsed = await schema_formats.side_schema(request, topic, side, embedded, fields)
        ids[f"{side}_schema_id"] = schema_id
        sides[side] = schema_formats.framed(schema_id, parsed, values)
    out = [
        _V1Binary(
            None if v is None else base64.b64encode(v).decode(),
            None if k is None else base64.b64encode(k).decode(),
            None if k is None else "base64",
            None if v is None else "base64",
            r.partition,
        )
        for k, v, r in zip(sides["key"], sides["value"], doc.records, strict=True)
    ]
    named = [r.partition for r in doc.records]
    return _ENCODER.encode({"records": out}), sides["key"], named, ids


def _refusal(body: bytes, embedded: str, why: str) -> Problem:
    """Why v2 refuses a body its format's decoder (or the produce front, for a value) did not
    take, checked in Karapace's order: the request's shape (422, or 400 for `records` or a
    record that is not what it must be), then, for a schema-registry format, the schema each
    populated side needs (42201 for keys, 42202 for values, Confluent's codes), then binary's
    base64 (400); a body that passes all these has a bad field (42205)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return v2_error(400, 400, f"malformed JSON: {exc}")
    if not isinstance(doc, dict) or not doc.get("records") or set(doc) - _BODY_FIELDS:
        return v2_error(422, 422, "Invalid request format: give a non-empty records list")
    records = doc["records"]
    if not isinstance(records, list):
        return v2_error(400, 400, "'records' must be an array")
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            return v2_error(400, 400, f"records[{index}] must be an object")
        unknown = set(record) - _RECORD_FIELDS
        if unknown:
            return v2_error(422, 422, f"records[{index}] has unknown fields {sorted(unknown)}")
    if embedded in SCHEMA_FORMATS:
        for side, code in (("key", KEY_SCHEMA_MISSING), ("value", VALUE_SCHEMA_MISSING)):
            if all(r.get(side) is None for r in records):
                continue
            if not _names_schema(doc, side):
                return v2_error(
                    422,
                    code,
                    f"Request includes {side}s and uses a format that requires schemas but "
                    f"does not include the {side}_schema or {side}_schema_id fields",
                )
    if embedded == "binary":
        for index, record in enumerate(records):
            for side in ("key", "value"):
                text = record.get(side)
                if text is not None and not _is_base64(text):
                    return v2_error(400, 400, f"records[{index}].{side} is not a base64 string")
    return v2_error(422, INVALID_DATA, f"invalid produce body: {why}")


def _names_schema(doc: dict[str, Any], side: str) -> bool:
    """Whether the body gives this side's schema: an id (a number, or its decimal text) or
    the schema's text."""
    schema_id = doc.get(f"{side}_schema_id")
    if schema_id is not None:
        return (isinstance(schema_id, int) and not isinstance(schema_id, bool)) or (
            isinstance(schema_id, str) and schema_id.isascii() and schema_id.isdigit()
        )
    return isinstance(doc.get(f"{side}_schema"), str)


def _is_base64(text: object) -> bool:
    if not isinstance(text, str):
        return False
    try:
        base64.b64decode(text, validate=True)
    except ValueError:
        return False
    return True


def _compact_key(raw: msgspec.Raw, index: int) -> str:
    try:
        return orjson.dumps(orjson.loads(memoryview(raw))).decode()
    except orjson.JSONDecodeError as exc:
        raise v2_error(422, INVALID_DATA, f"records[{index}].key: {exc}") from None


def _decoded(text: str, index: int, field: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise v2_error(400, 400, f"records[{index}].{field} is not a base64 string") from None


async def produce(request: web.Request) -> web.Response:
    """The topic is looked up first, then the body (as Karapace's proxy does), so a request
    for a missing topic answers 40401 whatever its body; with --auto-create-topics the
    topic is created only for a body that will be produced."""
    gateway = gateway_of(request)
    name = request.match_info["topic"]
    refuse_internal(name, "producing to it")
    partition = v2_partition(request) if "partition" in request.match_info else None
    embedded = body_format(request)
    acks, timeout_ms, idempotency_key = produce_options(request, gateway)
    body = await read_body(request, gateway.settings)
    if not gateway.settings.auto_create_topics:
        topic_named(gateway.replicas, name)
    ids: dict[str, int | None] = {}
    if embedded in SCHEMA_FORMATS:
        v1_body, keys, named, ids = await translate_schemas(request, name, body, embedded)
    else:
        v1_body, keys, named = translate(body, embedded)
    await ensure_topic(request, gateway, name)
    partitions = gateway.replicas.topic(name).partitions
    chosen = [
        partition if partition is not None else p if p is not None else _keyed(k, partitions)
        for k, p in zip(keys, named, strict=True)
    ]
    refused: list[int] = []
    try:
        done = await gateway.producer.produce(
            ProduceRequest(
                topic=name,
                partition=partition,
                acks=acks,
                timeout_ms=timeout_ms,
                content_type="application/json",
                body=v1_body,
                key=None,
                idempotency_key=idempotency_key,
                target=request.path_qs,
                forwarded=FORWARDED_BY in request.headers,
            )
        )
        results = {r["partition"]: (r["base_offset"], r["count"]) for r in _results(done)}
    except PartiallyAppended as exc:
        results, refused = exc.appended, exc.refused
    except ProduceError as exc:
        if exc.code == "RECORD_TOO_LARGE":
            raise too_large(len(keys), exc.extra.get("index", 0), str(exc)) from None
        raise
    except Problem as problem:
        if problem.code == "INVALID_RECORD":  # the front's refusal (a value), in v2's terms
            raise _refusal(body, embedded, problem.detail) from None
        raise
    return answer(request, {**offsets_answer(chosen, results, refused), **ids}, produced(acks))


def too_large(count: int, index: int, detail: str) -> Problem:
    """A record over the topic's max.message.bytes: 422 with an entry per record, the large
    one's error Kafka's MESSAGE_TOO_LARGE text (as Karapace answers; Confluent's proxy
    gives the same entry); nothing of the request was appended, so every entry is an error."""
    offsets = [
        {
            "partition": None,
            "offset": None,
            "error_code": KAFKA_ERROR,
            "error": MESSAGE_TOO_LARGE if i == index else f"not appended: {detail}",
        }
        for i in range(count)
    ]
    return v2_error(
        422,
        INVALID_DATA,
        detail,
        key_schema_id=None,
        value_schema_id=None,
        offsets=offsets,
    )


def _keyed(key: bytes | None, partitions: int) -> int | None:
    return None if key is None else partition_for_key(key, partitions)


def _results(done: dict[str, object]) -> list[dict[str, int]]:
    results = done["results"]
    assert isinstance(results, list)
    return results


def offsets_answer(
    chosen: list[int | None], results: dict[int, tuple[int, int]], refused: list[int]
) -> dict[str, object]:
    """v2's answer: each record's partition and offset; a record whose partition refused the
    append has a retriable error instead. Key-less records went to the one partition whose
    count exceeds what the keyed and placed records explain."""
    explained: dict[int, int] = {}
    for p in chosen:
        if p is not None:
            explained[p] = explained.get(p, 0) + 1
    keyless = next((p for p, (_, n) in results.items() if n > explained.get(p, 0)), None)
    next_offset = {p: base for p, (base, _) in results.items()}
    offsets = []
    for p in chosen:
        p = keyless if p is None else p
        if p is None or p not in next_offset:
            offsets.append(
                {
                    "partition": None,
                    "offset": None,
                    "error_code": KAFKA_RETRIABLE_ERROR,
                    "error": f"partitions {sorted(refused)} refused the records; retry",
                }
            )
            continue
        offsets.append(
            {"partition": p, "offset": next_offset[p], "error_code": None, "error": None}
        )
        next_offset[p] += 1
    return {"key_schema_id": None, "value_schema_id": None, "offsets": offsets}
