"""A push subscription's spec: what it reads, where it delivers, how it batches, formats,
retries and dead-letters. Parsed (and refused, field by field) from the JSON document users
send and the metadata store keeps; `public_view` is what is shown back, secrets masked.

Retry defaults follow Pub/Sub push (exponential backoff 10 s to 600 s) and stay bounded: 10
attempts take about 40 minutes at most (timeouts included), never Lambda's unbounded `-1`.
Concurrency follows Pub/Sub's push flow control: a limit that starts at one request and adapts
(flow.py), under the configured maxima."""

from __future__ import annotations

import base64
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import orjson

from engine.config import validate_topic_name
from engine.errors import InvalidTopicName
from groups.record_filter import RecordFilter
from groups.subscriptions.errors import SubscriptionError, invalid

NAME = re.compile(r"[A-Za-z0-9._-]{1,200}")
CE_TYPE = re.compile(r"[A-Za-z0-9._:/-]{1,200}")
HEADER_NAME = re.compile(r"[A-Za-z0-9-]{1,100}")
FORMATS = ("binary", "structured", "json")
DECODINGS = ("none", "schema")
ORDERINGS = ("partition", "key", "none")
MODES = ("log", "queue")
ISOLATIONS = ("read_uncommitted", "read_committed")
MAX_QUEUE_ATTEMPTS = 10  # a share group's highest delivery limit
MAX_RATE_PER_S = 100_000.0
MAX_PIPELINE = 64  # requests on one connection before their answers
MAX_SECRET = 4096
MAX_URL = 2048
MAX_FILTER_HEADERS = 16
MAX_FILTER_VALUE = 1024
MAX_PAUSE_REASON = 1024
SECRET_PREFIX = "whsec_"
MASK = "********"
# Headers a stored auth header may not set: ours (signature, CloudEvents, body type, routing).
RESERVED_HEADERS = ("host", "content-type", "content-length", "transfer-encoding", "connection")
RESERVED_PREFIXES = ("ce-", "webhook-")
FIELDS = frozenset(
    {
        "name", "topic", "endpoint", "start", "ordering", "batching", "format", "ce_type",
        "retry", "dead_letter_topic", "filter", "auth", "signing_secret", "paused",
        "concurrency", "rate_limit_per_s", "decode_values", "mode", "isolation", "reply",
    }
)  # fmt: skip
# What PATCH may change: not the name, the topic, the start (the position is the group's) or
# the mode (a log's positions and a queue's windows are different states). The isolation may
# change: an offset is the same record at either level, so the position holds across it.
MUTABLE = FIELDS - {"name", "topic", "start", "mode"}

Start = Literal["earliest", "latest"] | int  # an int: the first record at or after it (ms)
Ordering = Literal["partition", "key", "none"]
Mode = Literal["log", "queue"]
Isolation = Literal["read_uncommitted", "read_committed"]


@dataclass(frozen=True, slots=True)
class Batching:
    """Up to `max_records` records and about `max_bytes` per request, waiting at most
    `max_wait_ms` for a batch to fill (Lambda's batch size and batching window)."""

    max_records: int = 1
    max_bytes: int = 1024 * 1024
    max_wait_ms: int = 0


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Knative's delivery spec in our words: `timeout_ms` per request, `max_attempts` in all
    (retry = max_attempts - 1), exponential backoff from `min_backoff_ms` doubling to
    `max_backoff_ms` with jitter, a receiver's Retry-After honoured up to
    `retry_after_max_ms` (Knative's retryAfterMax). `bisect_on_error`: a batch the endpoint
    blames for its content is split in two rather than retried whole (Lambda's
    BisectBatchOnFunctionError; state.py)."""

    timeout_ms: int = 10_000
    max_attempts: int = 10
    min_backoff_ms: int = 10_000
    max_backoff_ms: int = 600_000
    retry_after_max_ms: int = 600_000
    bisect_on_error: bool = False


@dataclass(frozen=True, slots=True)
class Concurrency:
    """Requests in flight: at most `max_in_flight` per partition under ordering `key` or `none`
    (ordering `partition` has one by definition), and at most `max_requests` for the whole
    subscription on one dispatching node, a limit that starts at one and adapts to the
    endpoint's answers (Pub/Sub's push flow control) unless `adaptive` is false. `pipeline`:
    requests written on one connection before their answers (HTTP/1.1 pipelining; 1, the
    default, is one at a time)."""

    max_in_flight: int = 16
    max_requests: int = 64
    adaptive: bool = True
    pipeline: int = 1


@dataclass(frozen=True, slots=True)
class EndpointAuth:
    """A credential the endpoint wants on every request: a header's name and value (a bearer
    token is `Authorization: Bearer ...`). Never shown in full, never logged."""

    header: str
    value: str
    bearer: bool = False


@dataclass(frozen=True, slots=True)
class Reply:
    """Exactly-once functions (Knative's reply events, made atomic): the records of the
    endpoint's 2xx answer are produced to `topic` in one transaction with the position past
    the batch (reply_dispatcher.py)."""

    topic: str


@dataclass(frozen=True, slots=True)
class Subscription:
    name: str
    topic: str
    endpoint: str
    uid: str  # set at creation: names the group, so a subscription made again starts afresh
    signing_secret: str
    start: Start = "latest"
    mode: Mode = "log"  # queue: records acquired from a share group, one a request
    # read_committed: only records of committed transactions (and plain ones), below the LSO
    isolation: Isolation = "read_uncommitted"
    ordering: Ordering = "partition"
    batching: Batching = field(default_factory=Batching)
    concurrency: Concurrency = field(default_factory=Concurrency)
    rate_limit_per_s: float | None = None  # requests per second to the endpoint, at most
    format: Literal["binary", "structured", "json"] = "binary"
    decode_values: Literal["none", "schema"] = "none"  # schema: values in the wire format as JSON
    ce_type: str = "dev.sluice.record"
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    dead_letter_topic: str | None = None
    filter: RecordFilter = field(default_factory=RecordFilter)
    auth: EndpointAuth | None = None
    reply: Reply | None = None
    paused: bool = False
    pause_reason: str | None = None
    version: int = 0  # the metadata store's revision of it; 0 before it is stored

    @property
    def group(self) -> str:
        """The consumer group holding its committed positions in `__consumer_offsets` (in
        queue mode, the share group it acquires from)."""
        return f"subscription.{self.name}.{self.uid}"

    def signing_key(self) -> bytes:
        """The HMAC key: the secret's base64 part (Standard Webhooks' `whsec_` form)."""
        return base64.b64decode(self.signing_secret.removeprefix(SECRET_PREFIX))

    def paused_for(self, reason: str | None) -> Subscription:
        return replace(self, paused=reason is not None, pause_reason=reason)

    def same_delivery(self, other: Subscription) -> bool:
        """Whether `other` delivers as this one does (only the pause differs)."""
        return replace(other, paused=self.paused, pause_reason=self.pause_reason, version=0) == (
            replace(self, version=0)
        )


def new_secret() -> str:
    """A fresh signing secret: 32 random bytes (Standard Webhooks asks 24 to 64)."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode()


def new_uid() -> str:
    return secrets.token_hex(4)


def parse(doc: Mapping[str, Any], *, uid: str, version: int = 0) -> Subscription:
    """A subscription from its document; SubscriptionError INVALID_SUBSCRIPTION names the first
    bad field. A missing signing secret is made here (creation)."""
    unknown = sorted(set(doc) - FIELDS - {"pause_reason"})
    if unknown:
        raise invalid(
            f"unknown fields {', '.join(unknown)}; allowed: {', '.join(sorted(FIELDS))}",
            "/" + unknown[0].replace("~", "~0").replace("/", "~1"),  # RFC 6901
        )
    name = doc.get("name")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise invalid("name must be 1 to 200 characters of A-Z a-z 0-9 . _ -", "/name")
    endpoint = doc.get("endpoint")
    if not isinstance(endpoint, str) or not 0 < len(endpoint) <= MAX_URL:
        raise invalid(
            f"endpoint must be an http(s) URL of at most {MAX_URL} characters", "/endpoint"
        )
    mode = doc.get("mode", "log")
    if mode not in MODES:
        raise invalid(
            'mode must be "log" (each partition in order from the group\'s position) or '
            '"queue" (records acquired one at a time from a share group)',
            "/mode",
        )
    isolation = doc.get("isolation", "read_uncommitted")
    if isolation not in ISOLATIONS:
        raise invalid(
            'isolation must be "read_uncommitted" (every record, as Kafka\'s default) or '
            '"read_committed" (only records of committed transactions, and plain ones)',
            "/isolation",
        )
    ordering = doc.get("ordering", "none" if mode == "queue" else "partition")
    if ordering not in ORDERINGS:
        raise invalid(
            'ordering must be "partition" (one request in flight per partition, in offset '
            'order), "key" (in order per key) or "none"',
            "/ordering",
        )
    fmt = doc.get("format", "binary")
    if fmt not in FORMATS:
        raise invalid(f"format must be one of {', '.join(FORMATS)}", "/format")
    decode_values = doc.get("decode_values", "none")
    if decode_values not in DECODINGS:
        raise invalid(f"decode_values must be one of {', '.join(DECODINGS)}", "/decode_values")
    ce_type = doc.get("ce_type", "dev.sluice.record")
    if not isinstance(ce_type, str) or not CE_TYPE.fullmatch(ce_type):
        raise invalid("ce_type must be 1 to 200 characters of A-Z a-z 0-9 . _ : / -", "/ce_type")
    paused = doc.get("paused", False)
    if not isinstance(paused, bool):
        raise invalid("paused must be true or false", "/paused")
    reason = doc.get("pause_reason")
    if reason is not None and (not isinstance(reason, str) or len(reason) > MAX_PAUSE_REASON):
        raise invalid("pause_reason must be a short string", "/pause_reason")
    secret = doc.get("signing_secret")
    if secret is None:
        secret = new_secret()
    elif not _valid_secret(secret):
        raise invalid(
            f"signing_secret must be {SECRET_PREFIX} and the base64 of 24 to 64 bytes",
            "/signing_secret",
        )
    sub = Subscription(
        name=name,
        topic=_topic(doc.get("topic"), "/topic"),
        endpoint=endpoint,
        uid=uid,
        signing_secret=secret,
        start=_start(doc.get("start", "latest")),
        mode=mode,
        isolation=isolation,
        ordering=ordering,
        batching=_batching(doc.get("batching", {})),
        concurrency=_concurrency(doc.get("concurrency", {})),
        rate_limit_per_s=_rate(doc.get("rate_limit_per_s")),
        format=fmt,
        decode_values=decode_values,
        ce_type=ce_type,
        retry=_retry(doc.get("retry", {})),
        dead_letter_topic=None
        if doc.get("dead_letter_topic") is None
        else _topic(doc["dead_letter_topic"], "/dead_letter_topic"),
        filter=_filter(doc.get("filter", {})),
        auth=_auth(doc.get("auth")),
        reply=_reply(doc.get("reply")),
        paused=paused,
        pause_reason=reason if paused else None,
        version=version,
    )
    if mode == "queue":
        _check_queue(sub)
    if sub.reply is not None:
        _check_reply(sub)
    return sub


def _check_reply(sub: Subscription) -> None:
    """A reply subscription delivers each partition one batch at a time, in offset order: its
    transactions commit the position past each batch in turn."""
    if sub.mode == "queue":
        raise invalid(
            "a subscription with a reply topic is in log mode: its replies commit with the "
            "partition's position, which a queue does not have",
            "/mode",
        )
    if sub.ordering != "partition":
        raise invalid(
            'a subscription with a reply topic has ordering "partition": one batch of a '
            "partition at a time, each committed with its replies before the next",
            "/ordering",
        )
    if sub.reply is not None and sub.reply.topic == sub.topic:
        raise invalid(
            "the reply topic must not be the subscription's own topic: each reply would be "
            "delivered in turn",
            "/reply/topic",
        )


def _check_queue(sub: Subscription) -> None:
    """What queue mode allows: records one a request, in no order or in order per key, within
    the share group's delivery limit."""
    if sub.ordering == "partition":
        raise invalid(
            'in queue mode ordering is "none" (the default) or "key": a queue has no partition '
            "order",
            "/ordering",
        )
    if sub.batching.max_records != 1:
        raise invalid("in queue mode records are delivered one a request", "/batching/max_records")
    if sub.retry.max_attempts > MAX_QUEUE_ATTEMPTS:
        raise invalid(
            f"in queue mode retry.max_attempts is at most {MAX_QUEUE_ATTEMPTS} (the share "
            "group's delivery limit)",
            "/retry/max_attempts",
        )


def patched(current: Subscription, patch: Mapping[str, Any]) -> Subscription:
    """`current` with a JSON merge patch (RFC 7396) of its mutable fields applied; a null
    member resets a field to its default (or removes the dead-letter topic, the auth)."""
    fixed = sorted(set(patch) & (FIELDS - MUTABLE))
    if fixed:
        raise invalid(f"{fixed[0]} cannot be changed; create another subscription", f"/{fixed[0]}")
    doc = merge_patch(document(current), {k: v for k, v in patch.items() if k != "auth"})
    if "auth" in patch:  # one credential replaces the other whole: never a mix of two kinds
        if patch["auth"] is None:
            doc.pop("auth", None)
        else:
            doc["auth"] = patch["auth"]
    if patch.get("paused") is not None and "pause_reason" not in patch:
        doc.pop("pause_reason", None)  # a new pause or a resume: the old reason goes
    return parse(doc, uid=current.uid, version=current.version)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7396: an object patch merges member by member, at every depth, a null member
    removing the target's (its field then takes its default); anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def document(sub: Subscription) -> dict[str, Any]:
    """The full document (secrets included), as the store keeps it."""
    doc: dict[str, Any] = {
        "name": sub.name,
        "topic": sub.topic,
        "endpoint": sub.endpoint,
        "start": sub.start if isinstance(sub.start, str) else {"timestamp": sub.start},
        "ordering": sub.ordering,
        "batching": {
            "max_records": sub.batching.max_records,
            "max_bytes": sub.batching.max_bytes,
            "max_wait_ms": sub.batching.max_wait_ms,
        },
        "concurrency": {
            "max_in_flight": sub.concurrency.max_in_flight,
            "max_requests": sub.concurrency.max_requests,
            "adaptive": sub.concurrency.adaptive,
            "pipeline": sub.concurrency.pipeline,
        },
        "rate_limit_per_s": sub.rate_limit_per_s,
        "format": sub.format,
        "decode_values": sub.decode_values,
        "ce_type": sub.ce_type,
        "retry": {
            "timeout_ms": sub.retry.timeout_ms,
            "max_attempts": sub.retry.max_attempts,
            "min_backoff_ms": sub.retry.min_backoff_ms,
            "max_backoff_ms": sub.retry.max_backoff_ms,
            "retry_after_max_ms": sub.retry.retry_after_max_ms,
            "bisect_on_error": sub.retry.bisect_on_error,
        },
        "filter": {
            "key_prefix": None if sub.filter.key_prefix is None else sub.filter.key_prefix.decode(),
            "headers": {name: value.decode() for name, value in sub.filter.headers},
        },
        "signing_secret": sub.signing_secret,
        "paused": sub.paused,
    }
    # Defaults are left out, so that documents stay as nodes that predate a field read them.
    if sub.mode == "queue":
        doc["mode"] = sub.mode
    if sub.isolation != "read_uncommitted":
        doc["isolation"] = sub.isolation
    if sub.filter.key_prefix is None:
        del doc["filter"]["key_prefix"]
    if sub.dead_letter_topic is not None:
        doc["dead_letter_topic"] = sub.dead_letter_topic
    if sub.reply is not None:
        doc["reply"] = {"topic": sub.reply.topic}
    if sub.auth is not None:
        doc["auth"] = (
            {"bearer": sub.auth.value}
            if sub.auth.bearer
            else {"header": {"name": sub.auth.header, "value": sub.auth.value}}
        )
    if sub.pause_reason is not None:
        doc["pause_reason"] = sub.pause_reason
    return doc


def stored(sub: Subscription) -> bytes:
    """The document the metadata store keeps: the spec and its uid."""
    return orjson.dumps({"uid": sub.uid, "spec": document(sub)})


def loaded(raw: bytes, version: int) -> Subscription:
    """A stored document back (it was checked when written)."""
    doc = orjson.loads(raw)
    return parse(doc["spec"], uid=str(doc["uid"]), version=version)


def public_view(sub: Subscription) -> dict[str, Any]:
    """The document shown to users: the signing secret and the endpoint's credential masked
    (a receiver's copy of the secret comes from the creation's answer only)."""
    doc = document(sub)
    doc["signing_secret"] = MASK
    if sub.auth is not None:
        doc["auth"] = (
            {"bearer": MASK}
            if sub.auth.bearer
            else {"header": {"name": sub.auth.header, "value": MASK}}
        )
    doc["isolation"] = sub.isolation
    doc["group"] = sub.group
    return doc


def _valid_secret(value: object) -> bool:
    if not isinstance(value, str) or not value.startswith(SECRET_PREFIX):
        return False
    if len(value) > MAX_SECRET:
        return False
    try:
        key = base64.b64decode(value.removeprefix(SECRET_PREFIX), validate=True)
    except ValueError:
        return False
    return 24 <= len(key) <= 64


def _topic(value: object, pointer: str) -> str:
    try:
        return validate_topic_name(value)
    except InvalidTopicName as exc:
        raise SubscriptionError("INVALID_TOPIC_NAME", str(exc), pointer=pointer) from None


def _int(doc: Mapping[str, Any], name: str, default: int, low: int, high: int, at: str) -> int:
    value = doc.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise invalid(f"{name} must be an integer from {low} to {high}", f"{at}/{name}")
    return value


def _object(value: object, at: str, allowed: set[str]) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise invalid(f"{at[1:]} must be an object", at)
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise invalid(f"unknown field {unknown[0]}; allowed: {', '.join(sorted(allowed))}", at)
    return value


def _start(value: object) -> Start:
    if value in ("earliest", "latest"):
        return "earliest" if value == "earliest" else "latest"
    if isinstance(value, dict):
        doc = _object(value, "/start", {"timestamp"})
        return _int(doc, "timestamp", -1, 0, 2**63 - 1, "/start")
    raise invalid('start must be "earliest", "latest" or {"timestamp": ms}', "/start")


def _batching(value: object) -> Batching:
    doc = _object(value, "/batching", {"max_records", "max_bytes", "max_wait_ms"})
    return Batching(
        _int(doc, "max_records", 1, 1, 10_000, "/batching"),
        _int(doc, "max_bytes", 1024 * 1024, 1024, 16 * 1024 * 1024, "/batching"),
        _int(doc, "max_wait_ms", 0, 0, 300_000, "/batching"),
    )


def _concurrency(value: object) -> Concurrency:
    fields = {"max_in_flight", "max_requests", "adaptive", "pipeline"}
    doc = _object(value, "/concurrency", fields)
    adaptive = doc.get("adaptive", True)
    if not isinstance(adaptive, bool):
        raise invalid("adaptive must be true or false", "/concurrency/adaptive")
    return Concurrency(
        _int(doc, "max_in_flight", 16, 1, 1000, "/concurrency"),
        _int(doc, "max_requests", 64, 1, 10_000, "/concurrency"),
        adaptive,
        _int(doc, "pipeline", 1, 1, MAX_PIPELINE, "/concurrency"),
    )


def _rate(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise invalid("rate_limit_per_s must be a number or null", "/rate_limit_per_s")
    if not 0.01 <= value <= MAX_RATE_PER_S:
        raise invalid(
            f"rate_limit_per_s must be from 0.01 to {MAX_RATE_PER_S:.0f}", "/rate_limit_per_s"
        )
    return float(value)


def _retry(value: object) -> RetryPolicy:
    fields = {"timeout_ms", "max_attempts", "min_backoff_ms", "max_backoff_ms"}
    doc = _object(value, "/retry", fields | {"retry_after_max_ms", "bisect_on_error"})
    bisect = doc.get("bisect_on_error", False)
    if not isinstance(bisect, bool):
        raise invalid("bisect_on_error must be true or false", "/retry/bisect_on_error")
    policy = RetryPolicy(
        _int(doc, "timeout_ms", 10_000, 10, 900_000, "/retry"),
        _int(doc, "max_attempts", 10, 1, 100, "/retry"),
        _int(doc, "min_backoff_ms", 10_000, 1, 3_600_000, "/retry"),
        _int(doc, "max_backoff_ms", 600_000, 1, 3_600_000, "/retry"),
        _int(doc, "retry_after_max_ms", 600_000, 0, 3_600_000, "/retry"),
        bisect,
    )
    if policy.max_backoff_ms < policy.min_backoff_ms:
        raise invalid("max_backoff_ms must be at least min_backoff_ms", "/retry/max_backoff_ms")
    return policy


def _filter(value: object) -> RecordFilter:
    doc = _object(value, "/filter", {"key_prefix", "headers"})
    prefix = doc.get("key_prefix")
    if prefix is not None and (not isinstance(prefix, str) or len(prefix) > MAX_FILTER_VALUE):
        raise invalid(f"key_prefix must be a string of at most {MAX_FILTER_VALUE}", "/filter")
    headers = doc.get("headers", {})
    if not isinstance(headers, dict) or len(headers) > MAX_FILTER_HEADERS:
        raise invalid(
            f"filter.headers must be an object of at most {MAX_FILTER_HEADERS} names",
            "/filter/headers",
        )
    pairs = []
    for name, wanted in sorted(headers.items()):
        if not name or len(name) > MAX_FILTER_VALUE:
            raise invalid("a header filter's name must be 1 to 1024 characters", "/filter/headers")
        if not isinstance(wanted, str) or len(wanted) > MAX_FILTER_VALUE:
            raise invalid(f"filter.headers.{name[:50]} must be a string", "/filter/headers")
        pairs.append((name, wanted.encode()))
    return RecordFilter(None if prefix is None else prefix.encode(), tuple(pairs))


def _reply(value: object) -> Reply | None:
    if value is None:
        return None
    doc = _object(value, "/reply", {"topic"})
    return Reply(_topic(doc.get("topic"), "/reply/topic"))


def _auth(value: object) -> EndpointAuth | None:
    if value is None:
        return None
    doc = _object(value, "/auth", {"bearer", "header"})
    if len(doc) != 1:
        raise invalid('auth must be {"bearer": token} or {"header": {"name", "value"}}', "/auth")
    if "bearer" in doc:
        token = doc["bearer"]
        if not _header_value(token):
            raise invalid("auth.bearer must be printable ASCII, 1 to 4096", "/auth/bearer")
        return EndpointAuth("Authorization", token, bearer=True)
    header = _object(doc["header"], "/auth/header", {"name", "value"})
    name, secret = header.get("name"), header.get("value")
    if not isinstance(name, str) or not HEADER_NAME.fullmatch(name):
        raise invalid("auth.header.name must be a header name", "/auth/header/name")
    lowered = name.lower()
    if lowered in RESERVED_HEADERS or lowered.startswith(RESERVED_PREFIXES):
        raise invalid(f"auth.header.name {name!r} is set by the dispatcher", "/auth/header/name")
    if not _header_value(secret):
        raise invalid("auth.header.value must be printable ASCII, 1 to 4096", "/auth/header/value")
    return EndpointAuth(name, str(secret))


def _header_value(value: object) -> bool:
    return (
        isinstance(value, str)
        and 0 < len(value) <= MAX_SECRET
        and value.isascii()
        and value.isprintable()
    )
