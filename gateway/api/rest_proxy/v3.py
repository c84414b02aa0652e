"""Confluent REST Proxy v3: record produce (`POST /v3/clusters/{id}/topics/{topic}/records`),
one record object or many concatenated in one body (the streaming mode: each record's delivery
report written back, in order, as it is acknowledged), and the cluster and topic reads clients
use to find the cluster id. Records go through the same produce front as /v1 (partitioning,
acks, batches); errors are v3's `{"error_code": <HTTP status>, "message"}` (errors.v3_render).

A record: `{"partition_id", "headers": [{"name", "value": base64}], "key": {"type", "data"},
"value": {"type", "data"}, "timestamp": ISO 8601}`, each optional. Types: BINARY (base64 data),
JSON (stored as its compact text) and STRING (stored as UTF-8); no type means JSON. AVRO,
JSONSCHEMA and PROTOBUF, or any schema field, make the data schema-aware (v3_schemas).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime
import time
from typing import Annotated, Any

import msgspec
import orjson
from aiohttp import web

from engine import batch as fmt
from engine.errors import RecordTooLarge
from engine.internal_topics import INTERNAL_TOPICS
from gateway.api.problems import problem_of
from gateway.api.records import produce_options
from gateway.api.rest_proxy import v3_schemas
from gateway.api.rest_proxy.json_stream import ObjectStream, StreamError
from gateway.api.rest_proxy.media import add_route
from gateway.api.topics import refuse_internal
from gateway.auth.middleware import may
from gateway.formats import codecs
from gateway.http.problem import Problem
from gateway.produce.front import ProduceRequest
from gateway.produce.partitioner import partition_for_key
from gateway.state import Gateway, gateway_of
from replication.metadata import ClusterView

CLUSTERS = "/v3/clusters"
CLUSTER = "/v3/clusters/{cluster_id}"
TOPICS = f"{CLUSTER}/topics"
TOPIC = f"{TOPICS}/{{topic}}"
RECORDS = f"{TOPIC}/records"
MAX_IN_FLIGHT = 64  # records of one stream being produced at once (then reading waits)
_NULL = msgspec.Raw(b"null")
Partition = Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)]


def add_routes(app: web.Application) -> None:
    add_route(app, "GET", CLUSTERS, list_clusters)
    add_route(app, "GET", CLUSTER, describe_cluster)
    add_route(app, "GET", TOPICS, list_topics)
    add_route(app, "GET", TOPIC, describe_topic)
    add_route(app, "POST", RECORDS, produce_records)


# -- reads ----------------------------------------------------------------------------------


def _base(request: web.Request) -> str:
    """The URL this node is reached at (through a load balancer, the one the client used)."""
    host = request.headers.get("X-Forwarded-Host", request.host).split(",")[0].strip()
    scheme = request.headers.get("X-Forwarded-Proto", request.scheme).split(",")[0].strip()
    return f"{scheme}://{host}"


def _view(request: web.Request) -> ClusterView:
    """This node's view of the cluster, once the path names its id (404 otherwise)."""
    view = gateway_of(request).broker.store.view
    wanted = request.match_info.get("cluster_id")
    if wanted is not None and wanted != view.cluster_id:
        raise Problem(404, "UNKNOWN_CLUSTER", f"cluster {wanted!r} cannot be found")
    return view


def _related(url: str) -> dict[str, str]:
    return {"related": url}


def _cluster_doc(request: web.Request, view: ClusterView) -> dict[str, Any]:
    url = f"{_base(request)}/v3/clusters/{view.cluster_id}"
    controller = None if view.controller is None else _related(f"{url}/brokers/{view.controller}")
    return {
        "kind": "KafkaCluster",
        "metadata": {"self": url, "resource_name": f"crn:///kafka={view.cluster_id}"},
        "cluster_id": view.cluster_id,
        "controller": controller,
        "brokers": _related(f"{url}/brokers"),
        "topics": _related(f"{url}/topics"),
    }


def _topic_doc(request: web.Request, view: ClusterView, name: str) -> dict[str, Any]:
    spec = gateway_of(request).replicas.topic(name)
    url = f"{_base(request)}/v3/clusters/{view.cluster_id}/topics/{name}"
    return {
        "kind": "KafkaTopic",
        "metadata": {
            "self": url,
            "resource_name": f"crn:///kafka={view.cluster_id}/topic={name}",
        },
        "cluster_id": view.cluster_id,
        "topic_name": name,
        "is_internal": name in INTERNAL_TOPICS,
        "replication_factor": spec.replication_factor,
        "partitions_count": spec.partitions,
        "partitions": _related(f"{url}/partitions"),
        "configs": _related(f"{url}/configs"),
    }


def _listing(kind: str, url: str, data: list[dict[str, Any]]) -> dict[str, Any]:
    return {"kind": kind, "metadata": {"self": url, "next": None}, "data": data}


async def list_clusters(request: web.Request) -> web.Response:
    """The one cluster this node belongs to."""
    view = _view(request)
    docs = [_cluster_doc(request, view)]
    return _json(_listing("KafkaClusterList", f"{_base(request)}{CLUSTERS}", docs))


async def describe_cluster(request: web.Request) -> web.Response:
    return _json(_cluster_doc(request, _view(request)))


async def list_topics(request: web.Request) -> web.Response:
    """The user topics (with auth, those the principal may describe)."""
    view = _view(request)
    names = sorted(
        name
        for name in view.topics
        if name not in INTERNAL_TOPICS and may(request, "topic", name, "describe")
    )
    url = f"{_base(request)}/v3/clusters/{view.cluster_id}/topics"
    docs = [_topic_doc(request, view, name) for name in names]
    return _json(_listing("KafkaTopicList", url, docs))


async def describe_topic(request: web.Request) -> web.Response:
    return _json(_topic_doc(request, _view(request), request.match_info["topic"]))


def _json(doc: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(doc), status=status, content_type=codecs.JSON)


# -- record produce -------------------------------------------------------------------------


class _Data(msgspec.Struct, forbid_unknown_fields=True):
    """A key or value: its type and data, and the schema fields of a schema-aware one."""

    type: str | None = None
    data: msgspec.Raw = _NULL
    subject: str | None = None
    subject_name_strategy: str | None = None
    schema_id: int | None = None
    schema_version: int | None = None
    schema: str | None = None


class _Header(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    value: str | None = None  # base64


class _Record(msgspec.Struct, forbid_unknown_fields=True):
    id: str | None = None  # the client's own, accepted and ignored
    partition_id: Partition | None = None
    headers: list[_Header] = []
    key: _Data | None = None
    value: _Data | None = None
    timestamp: datetime.datetime | None = None


_RECORD = msgspec.json.Decoder(_Record)


def _invalid(message: str) -> Problem:
    return Problem(400, "INVALID_RECORD", message)


async def _field(
    request: web.Request, topic: str, field: str, data: _Data | None
) -> tuple[bytes | None, dict[str, Any] | None]:
    """A key's or value's bytes as stored, and its part of the delivery report (None: none)."""
    if data is None:
        return None, None
    fields = v3_schemas.SchemaFields(
        data.type,
        data.subject,
        data.subject_name_strategy,
        data.schema_id,
        data.schema_version,
        data.schema,
    )
    if fields.named():
        done = await v3_schemas.encoded(request, topic, field, fields, bytes(data.data))
        return done.data, done.report()
    raw, kind = _serialized(field, data)
    return raw, {"type": kind, "size": 0 if raw is None else len(raw)}


def _serialized(field: str, data: _Data) -> tuple[bytes | None, str]:
    """A schema-less key's or value's bytes as stored, and its type."""
    kind = (data.type or "JSON").upper()
    raw = bytes(data.data)
    if raw == b"null":
        return None, kind
    if kind == "JSON":
        return orjson.dumps(orjson.loads(raw)), kind
    if kind not in ("BINARY", "STRING"):
        raise _invalid(f"{field}.type must be BINARY, JSON or STRING")
    text = orjson.loads(raw)
    if not isinstance(text, str):
        raise _invalid(f"{field}.data must be a string for the {kind} type")
    if kind == "STRING":
        return text.encode(), kind
    try:
        return base64.b64decode(text, validate=True), kind
    except (binascii.Error, ValueError):
        raise _invalid(f"{field}.data is not valid base64") from None


def _headers(headers: list[_Header]) -> list[tuple[str, bytes | None]]:
    out: list[tuple[str, bytes | None]] = []
    for i, header in enumerate(headers):
        if header.value is None:
            out.append((header.name, None))
            continue
        try:
            out.append((header.name, base64.b64decode(header.value, validate=True)))
        except (binascii.Error, ValueError):
            raise _invalid(f"headers[{i}].value is not valid base64") from None
    return out


def _timestamp_ms(when: datetime.datetime | None) -> int:
    if when is None:
        return int(time.time() * 1000)
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    ms = int(when.timestamp() * 1000)
    if ms < 0:
        raise _invalid("timestamp must not be before 1970")
    return ms


def _iso(ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class _Produce:
    """One request's records: each parsed and handed to the produce front as it arrives."""

    def __init__(self, request: web.Request, gateway: Gateway, topic: str) -> None:
        self.request = request
        self.gateway = gateway
        self.topic = topic
        self.cluster_id = gateway.broker.store.view.cluster_id
        self.acks, self.timeout_ms, _ = produce_options(request, gateway)

    async def one(self, raw: bytes) -> tuple[int, bytes]:
        """A record's delivery report: its status and JSON."""
        try:
            report = await self._produce(raw)
        except Exception as exc:
            problem = problem_of(exc, "POST", self.request.path)
            return problem.status, orjson.dumps(
                {"error_code": problem.status, "message": problem.detail}
            )
        return 200, orjson.dumps(report)

    async def _produce(self, raw: bytes) -> dict[str, Any]:
        try:
            record = _RECORD.decode(raw)
        except msgspec.ValidationError as exc:
            raise _invalid(f"invalid record: {exc}") from None
        except (msgspec.DecodeError, RecursionError) as exc:
            raise Problem(400, "INVALID_JSON", f"malformed JSON: {exc}") from None
        key, key_report = await _field(self.request, self.topic, "key", record.key)
        value, value_report = await _field(self.request, self.topic, "value", record.value)
        timestamp = _timestamp_ms(record.timestamp)
        replicas = self.gateway.replicas
        spec = replicas.topic(self.topic)
        partition = record.partition_id
        if partition is None and key is not None:
            partition = partition_for_key(key, spec.partitions)
        if partition is not None:
            replicas.check_partition(self.topic, partition)
        config = replicas.topic_config(self.topic)
        try:
            batch = fmt.encode_batches(
                [(key, value, _headers(record.headers), timestamp)],
                max_batch_bytes=config.max_message_bytes,
            )
        except RecordTooLarge as exc:
            raise Problem(413, "RECORD_TOO_LARGE", str(exc)) from None
        done = await self.gateway.producer.produce(
            ProduceRequest(
                topic=self.topic,
                partition=partition,
                acks=self.acks,
                timeout_ms=self.timeout_ms,
                content_type=codecs.RECORD_BATCH,
                body=bytes(batch),
                key=None,
                idempotency_key=None,
                target=self.request.path_qs,
            )
        )
        results = done["results"]
        assert isinstance(results, list)
        report: dict[str, Any] = {
            "error_code": 200,
            "cluster_id": self.cluster_id,
            "topic_name": self.topic,
            "partition_id": results[0]["partition"],
            "offset": results[0]["base_offset"],
            "timestamp": _iso(timestamp),
        }
        if key_report is not None:
            report["key"] = key_report
        if value_report is not None:
            report["value"] = value_report
        return report


async def produce_records(request: web.Request) -> web.StreamResponse:
    """Each JSON object of the body is a record. A body of known length holding one object:
    its report is the answer, with the report's status. Otherwise (many objects, or a body
    streamed without a length: the streaming mode) 200, and each record's report written as it
    is acknowledged, in order, a line each; a failed record's report carries its error. A body
    holding no record is refused whole (422)."""
    gateway = gateway_of(request)
    _view(request)
    name = request.match_info["topic"]
    refuse_internal(name, "producing to it")
    gateway.replicas.topic(name)
    if request.content_type != codecs.JSON:
        raise Problem(415, "UNSUPPORTED_MEDIA_TYPE", "records are sent as application/json")
    producing = _Produce(request, gateway, name)
    reports: Reports = asyncio.Queue(MAX_IN_FLIGHT)
    reading = asyncio.ensure_future(
        _read(request, gateway.settings.max_request_bytes, producing, reports)
    )
    try:
        return await _answer(request, reports)
    finally:
        reading.cancel()


Reports = asyncio.Queue[asyncio.Future[tuple[int, bytes]] | None]  # None: the body ended


async def _read(request: web.Request, limit: int, producing: _Produce, reports: Reports) -> None:
    """Split the body into records as it arrives and start producing each (at most
    MAX_IN_FLIGHT unanswered: then the queue makes reading wait)."""
    stream = ObjectStream(limit)
    count = 0
    try:
        async for chunk in request.content.iter_any():
            for raw in stream.feed(chunk):
                count += 1
                await reports.put(asyncio.ensure_future(producing.one(raw)))
        if not stream.end():
            raise StreamError(400, "the body ends inside a record")
        if count == 0:
            await reports.put(_refused(_empty_body()))
    except StreamError as exc:
        await reports.put(_failed(exc.status, str(exc)))
    finally:
        await reports.put(None)


def _empty_body() -> Problem:
    """A body with no record in it (nothing, or only whitespace): the request is refused
    whole, streamed or not, as kafka-rest's invalid payload (422, its code 42206 in the text)."""
    return Problem(
        422,
        "EMPTY_BODY",
        "Error: 42206 : Payload error. Request body is empty. Data is required.",
    )


def _refused(problem: Problem) -> asyncio.Future[tuple[int, bytes]]:
    """A report that refuses the request as a whole: awaiting it raises the problem."""
    done: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()
    done.set_exception(problem)
    return done


def _failed(status: int, message: str) -> asyncio.Future[tuple[int, bytes]]:
    done: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()
    done.set_result((status, orjson.dumps({"error_code": status, "message": message})))
    return done


async def _answer(request: web.Request, reports: Reports) -> web.StreamResponse:
    first = await reports.get()
    assert first is not None  # the reader queues a report before the body's end
    status, body = await first  # raises a refusal of the whole request, before any answer
    streamed = request.content_length is None
    following = None if streamed else await reports.get()
    if not streamed and following is None:
        return web.Response(body=body, status=status, content_type=codecs.JSON)
    stream = web.StreamResponse(status=200)
    stream.content_type = codecs.JSON
    await stream.prepare(request)
    await stream.write(body + b"\n")
    if streamed:
        following = await reports.get()
    while following is not None:
        _, body = await following
        await stream.write(body + b"\n")
        following = await reports.get()
    await stream.write_eof()
    return stream
