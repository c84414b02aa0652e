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
from gateway.api.rest_proxy.errors import INVALID_DATA, KAFKA_RETRIABLE_ERROR, v2_error
from gateway.api.rest_proxy.media import Format, add_route, answer, body_format
from gateway.api.topics import refuse_internal
from gateway.http.params import partition_param, read_body
from gateway.http.problem import Problem
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


class _Schemas(msgspec.Struct, forbid_unknown_fields=True):
    """The schema fields are accepted and ignored: json and binary need no schema."""

    key_schema: str | None = None
    key_schema_id: int | None = None
    value_schema: str | None = None
    value_schema_id: int | None = None


class _JsonBody(_Schemas, forbid_unknown_fields=True):
    records: list[_JsonRecord] = []


class _BinaryBody(_Schemas, forbid_unknown_fields=True):
    records: list[_BinaryRecord] = []


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


_DECODERS: dict[str, msgspec.json.Decoder[_JsonBody] | msgspec.json.Decoder[_BinaryBody]] = {
    "json": msgspec.json.Decoder(_JsonBody),
    "binary": msgspec.json.Decoder(_BinaryBody),
}
_ENCODER = msgspec.json.Encoder()


def add_routes(app: web.Application) -> None:
    add_route(app, "POST", "/topics/{topic}", produce)
    add_route(app, "POST", "/topics/{topic}/partitions/{partition}", produce)


def translate(body: bytes, embedded: Format) -> tuple[bytes, list[bytes | None], list[int | None]]:
    """A v2 produce body -> the /v1 JSON body it stands for, each record's key bytes (None: no
    key) and the partition each names (None: chosen by the front). 422 INVALID_DATA for a body
    v2 would refuse."""
    decoder: msgspec.json.Decoder[_JsonBody] | msgspec.json.Decoder[_BinaryBody]
    decoder = _DECODERS[embedded]
    try:
        doc = decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise v2_error(422, INVALID_DATA, f"invalid produce body: {exc}") from None
    except msgspec.DecodeError as exc:
        raise v2_error(400, 400, f"malformed JSON: {exc}") from None
    except RecursionError:
        raise v2_error(400, 400, "the body nests JSON deeper than the parser allows") from None
    if not doc.records:
        raise v2_error(422, INVALID_DATA, "records must be a non-empty list")
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


def _compact_key(raw: msgspec.Raw, index: int) -> str:
    try:
        return orjson.dumps(orjson.loads(memoryview(raw))).decode()
    except orjson.JSONDecodeError as exc:
        raise v2_error(422, INVALID_DATA, f"records[{index}].key: {exc}") from None


def _decoded(text: str, index: int, field: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise v2_error(
            422, INVALID_DATA, f"records[{index}].{field} is not a valid base64 string"
        ) from None


async def produce(request: web.Request) -> web.Response:
    gateway = gateway_of(request)
    name = request.match_info["topic"]
    refuse_internal(name, "producing to it")
    partition = partition_param(request) if "partition" in request.match_info else None
    embedded = body_format(request)
    acks, timeout_ms, idempotency_key = produce_options(request, gateway)
    v1_body, keys, named = translate(await read_body(request, gateway.settings), embedded)
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
    except Problem as problem:
        if problem.code == "INVALID_RECORD":  # the front's refusal, in v2's terms
            raise v2_error(422, INVALID_DATA, problem.detail) from None
        raise
    return answer(request, offsets_answer(chosen, results, refused), produced(acks))


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
