"""The fast routes: plain produces, partition fetches, group members' fetches and other nodes'
internal appends served without aiohttp's per-request machinery.

aiohttp builds a Request, runs the middlewares and the router and writes a StreamResponse for
every request: for a one-record produce, or a long-poll that returns a few records, that costs
more than the work itself (see docs/PERFORMANCE.md "Request cost"). The connections
(gateway.http.connections, gateway.http.http2) offer each complete request here first (the
app hands them this object as their fast path); `take` accepts only the plain case (a produce
whose body has arrived whole, a fetch of a partition led here, a fetch by a member of a group
coordinated here, the batches another node's front forwards to a partition led here), and
everything else, including every request that would fail before producing or fetching, goes
through the Application, which stays the reference. The middlewares' checks (credentials, ACLs,
quotas, CORS headers) are steps of `take`, through the same functions, whatever the options.
What the fast routes serve is what the general path would answer: the same Producer, partition
read and group fetch, the same refusals and error rendering, the same request metrics and body
accounting.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import orjson
from aiohttp.helpers import rfc822_formatted_time
from aiohttp.http import SERVER_SOFTWARE

from engine.log import AppendInfo
from gateway.api.backpressure import InflightBodies
from gateway.api.cors import Policy
from gateway.api.fetch import (
    FetchAnswer,
    fetch_position,
    read_from_sibling,
    read_partition,
    start_offset,
)
from gateway.api.groups import member_fetch_query, member_records, valid_group_id
from gateway.api.problems import problem_of
from gateway.api.records import produce_delivery, produced
from gateway.api.rest_proxy import fast as rest_proxy
from gateway.api.topics import INTERNAL_TOPICS
from gateway.auth.checks import (
    UNLIMITED_AUDIENCES,
    admit,
    quota_charged,
    quota_refusal,
    require_reads,
    unauthenticated,
)
from gateway.auth.quotas import ANONYMOUS, PrincipalUsage
from gateway.auth.route_operations import Access, access
from gateway.formats import codecs
from gateway.http.memo import Memo
from gateway.http.problem import PROBLEM_JSON, Problem, problem_body, status_code
from gateway.metrics.collectors import CLIENT_CLOSED
from gateway.produce.errors import ProduceError
from gateway.produce.front import Built, ProduceRequest
from gateway.produce.idempotency import validate_key
from gateway.state import Gateway
from replication.acks import Acks
from replication.errors import PartiallyAppended
from replication.fetch_limits import FetchLimits
from replication.metadata import TopicSpec
from replication.node_contract import APPEND_PREFIX, APPEND_ROUTE, FORWARDED_BY, ON_BEHALF_OF
from replication.partition import Partition

TOPIC_ROUTE = "/v1/topics/{topic}/records"
PARTITION_ROUTE = "/v1/topics/{topic}/partitions/{partition}/records"
MEMBER_ROUTE = "/v1/groups/{group}/members/{member}/records"
# Headers the body reader acts on: their requests take the general path (a forwarded request
# too, but for the internal append, which only other nodes send).
_GENERAL_PATH_HEADERS = ("Content-Encoding", "Expect")
_PREFIX = "/v1/topics/"
_GROUPS_PREFIX = "/v1/groups/"
_PRODUCE_PARAMS = frozenset({"acks", "timeout_ms", "key"})
_FETCH_PARAMS = frozenset({"offset", "max_records", "max_bytes", "min_bytes", "timeout_ms"})
_MEMBER_FETCH_PARAMS = frozenset({"cursor", "max_records", "max_bytes", "min_bytes", "timeout_ms"})
_APPEND_PARAMS = frozenset({"acks", "timeout_ms"})
_V2_PRODUCE_PARAMS = frozenset({"acks", "timeout_ms"})
# Accept headers a fetch takes as they are (anything else is negotiated by the Application).
_FETCH_ACCEPT = {
    None: codecs.JSON,
    "*/*": codecs.JSON,
    codecs.JSON: codecs.JSON,
    codecs.NDJSON: codecs.NDJSON,
    codecs.RECORD_BATCH: codecs.RECORD_BATCH,
}
# The head up to its length of an HTTP/1.1 answer with no other headers, per (status, content
# type): a few statuses of the four types the fast routes answer with.
_HTTP1_HEADS: dict[tuple[int, str], bytes] = {}
_SERVER = SERVER_SOFTWARE.encode()
# The same for HTTP/2: the status and content-type fields per (status, content type).
_H2_FIELDS: dict[tuple[int, str], tuple[tuple[bytes, bytes], tuple[bytes, bytes]]] = {}
_SERVER_FIELD = (b"server", _SERVER)
# The date field of this second's answers, with aiohttp's text of it (the same str all second).
_date: tuple[str, tuple[bytes, bytes]] = ("", (b"date", b""))
# A produce target's plain reading (`FastRoutes._plain_produce_target`), remembered: clients repeat
# their target, and reading it costs ~2 µs of a produce. At most this many, then forgotten.
_TARGETS_KEPT = 1024
PlainProduce = tuple[str, int | None, Acks, int, str | None, str]
_NOT_PLAIN: PlainProduce = ("", None, Acks.ALL, 0, None, "")  # a target the fast routes leave
_ORIGINS_KEPT = 256  # the CORS headers of this many Origin values, remembered
_ADMITTED_KEPT = 10_000  # (credentials, route, resource) admitted, remembered
Headers = tuple[tuple[str, str], ...]
log = logging.getLogger(__name__)


@dataclass(slots=True)
class FastProduce:
    """A produce the fast routes took: what to produce, its route template and body size; a
    REST Proxy v2 produce also its batches (built in C as it was taken), each record's
    partition, and its answer's media type (its answers and errors are v2's)."""

    produce: ProduceRequest
    route: str
    size: int
    cors: Headers = ()  # added to its answer, whatever it is
    built: Built | None = None
    owners: bytes | None = None  # v2: each record's partition (uint32s, request order)
    answer_type: str = codecs.JSON


@dataclass(slots=True)
class FastAppend:
    """Batches another node's front built for a partition led here (the internal append)."""

    topic: str
    partition: int
    data: bytes
    acks: Acks
    timeout_ms: int
    target: str
    cors: Headers = ()

    @property
    def size(self) -> int:
        return len(self.data)


@dataclass(slots=True)
class FastFetch:
    """A partition fetch the fast routes took, its parameters checked."""

    topic: str
    partition: int
    offset: int | str  # an offset, "earliest" or "latest"
    limits: FetchLimits
    accept: str
    target: str
    ready: FetchAnswer | None = None  # read already, from a sibling worker's files
    cors: Headers = ()
    usage: PrincipalUsage | None = None  # the quotas the answer's bytes are charged to


@dataclass(slots=True)
class FastMemberFetch:
    """A group member's fetch the fast routes took: a member of a group coordinated here."""

    group: str
    member: str
    limits: FetchLimits
    cursor: int  # -1: none given
    target: str
    topics: tuple[str, ...] = ()  # the member's, each read
    cors: Headers = ()
    usage: PrincipalUsage | None = None


@dataclass(slots=True)
class FastRefusal:
    """A request the checks refused (401, 403, 429): answered as the middlewares answer it."""

    method: str
    route: str
    answer: FastAnswer


FastRequest = FastProduce | FastAppend | FastFetch | FastMemberFetch


@dataclass(slots=True)
class FastAnswer:
    """What the fast routes answer: status, content type, body, extra headers, and the CORS
    headers, which aiohttp adds after its own (Server), as the answer is prepared."""

    status: int
    content_type: str
    body: bytes
    headers: Headers = ()
    cors: Headers = ()

    @property
    def closes(self) -> bool:
        """Whether the answer ends the connection (an error that leaves the stream unknown)."""
        return ("Connection", "close") in self.headers

    def http1(self) -> bytes:
        """The whole HTTP/1.1 answer, headers as aiohttp writes them."""
        status, headers = self.status, self.headers
        head = None if headers else _HTTP1_HEADS.get((status, self.content_type))
        if head is None:
            extra = "".join(f"{name}: {value}\r\n" for name, value in headers)
            head = (
                f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n{extra}"
                f"Content-Type: {self.content_type}\r\nContent-Length: "
            ).encode("latin-1")
            if not headers:
                _HTTP1_HEADS[status, self.content_type] = head
        body = self.body
        date = rfc822_formatted_time().encode()
        if self.cors:
            late = "".join(f"{name}: {value}\r\n" for name, value in self.cors).encode("latin-1")
            return b"%s%d\r\nDate: %s\r\nServer: %s\r\n%s\r\n%s" % (
                head, len(body), date, _SERVER, late, body
            )  # fmt: skip
        return b"%s%d\r\nDate: %s\r\nServer: %s\r\n\r\n%s" % (head, len(body), date, _SERVER, body)

    def h2_headers(self) -> list[tuple[bytes, bytes]]:
        """The answer's HTTP/2 header list (no connection-specific fields)."""
        known = _H2_FIELDS.get((self.status, self.content_type))
        if known is None:
            known = _H2_FIELDS[self.status, self.content_type] = (
                (b":status", b"%d" % self.status),
                (b"content-type", self.content_type.encode()),
            )
        status, content_type = known
        length = (b"content-length", b"%d" % len(self.body))
        date = _date_field()
        if not self.headers and not self.cors:
            return [status, content_type, length, date, _SERVER_FIELD]
        extra = [
            (name.lower().encode(), value.encode())
            for name, value in self.headers
            if name.lower() != "connection"
        ]
        late = [(name.lower().encode(), value.encode()) for name, value in self.cors]
        return [status, *extra, content_type, length, date, _SERVER_FIELD, *late]


def _date_field() -> tuple[bytes, bytes]:
    """This second's HTTP/2 date field, encoded once a second rather than once an answer."""
    global _date
    text = rfc822_formatted_time()
    if text is not _date[0]:
        _date = (text, (b"date", text.encode()))
    return _date[1]


class FastRoutes:
    """Takes and serves the plain produces and fetches of one gateway, whatever its options:
    the checks the middlewares make (credentials, ACLs, quotas, CORS headers) run here as
    steps of `take`, calling the same functions (gateway.auth.checks, gateway.api.cors)."""

    def __init__(self, gateway: Gateway, inflight: InflightBodies, cors: Policy | None) -> None:
        self.gateway = gateway
        self.inflight = inflight
        self.auth = gateway.auth
        self.cors = cors
        # Bulk bodies too: on HTTP/2 the Application would copy a held body into a reader and
        # out again, a quarter of a 1000-record produce. A larger one gets its 413 there.
        self.max_body = gateway.settings.max_request_bytes
        self.served = 0  # requests answered here: sluice_lane_requests_total
        self._produce_targets: Memo[str, PlainProduce] = Memo(_TARGETS_KEPT)
        self._cors_headers: Memo[str | None, Headers] = Memo(_ORIGINS_KEPT)
        # Per route (as `_resource_of` names it): its access rule, and whether quotas limit it
        # and the byte rate they charge (the quota middleware's reading of the same rule).
        self._rules = {key: _rule(*route) for key, route in _ROUTES.items()}
        self._quotas = {
            key: (self._rules[key].audience not in UNLIMITED_AUDIENCES, quota_charged(*route))
            for key, route in _ROUTES.items()
        }
        # (Authorization, route, resource name) -> the principal admitted, while neither the
        # credentials (the authenticator's generation) nor the ACLs (the authorizer) change:
        # the common request's credentials and route check in one lookup.
        self._admitted: Memo[tuple[str, str, str], str] = Memo(_ADMITTED_KEPT)
        self._admitted_under: tuple[int, object] = (-1, None)

    def take(
        self, method: str, target: str, headers: Mapping[str, str], body: bytes, connection: object
    ) -> FastRequest | FastRefusal | None:
        """What this complete request asks for, if the fast routes answer it; else None. What
        they take has passed the checks the middlewares would make, or is refused as they
        refuse it."""
        taken = self._plain(method, target, headers, body, connection)
        if taken is None or not (self.auth.enabled or self.auth.quotas.active or self.cors):
            return taken
        return self._checked(taken, headers, connection)

    def _plain(
        self, method: str, target: str, headers: Mapping[str, str], body: bytes, connection: object
    ) -> FastRequest | None:
        """What the request asks for, if it is one the fast routes serve as the routes would."""
        if any(name in headers for name in _GENERAL_PATH_HEADERS):
            return None
        forwarded = FORWARDED_BY in headers
        if target.startswith(APPEND_PREFIX):
            # Another node's, forwarded once: a leader that moved answers 421 as the route
            # does then; one without the header may be forwarded by the route, so is left to it.
            if method != "POST" or not forwarded:
                return None
            return self._take_append(target, headers, body, connection)
        if forwarded:
            return None
        get = method == "GET" and not body and "Content-Length" not in headers
        if method == "POST" and target.startswith(rest_proxy.PREFIX):
            return self._take_v2_produce(target, headers, body, connection)
        if target.startswith(_PREFIX):
            if method == "POST":
                return self._take_produce(target, headers, body, connection)
            return self._take_fetch(target, headers) if get else None
        if get and target.startswith(_GROUPS_PREFIX):
            return self._take_member_fetch(target, headers)
        return None

    def _checked(
        self, taken: FastRequest, headers: Mapping[str, str], connection: object
    ) -> FastRequest | FastRefusal | None:
        """The middlewares' steps, in their order: CORS headers for its answer, credentials
        (401), what the route needs (403), the quota (429), what a member's fetch reads (403).
        None where only the Application can tell: credentials not seen before (it checks them
        and remembers them for the next request), a delayed quota."""
        if self.cors is not None:
            taken.cors = self._cors_of(headers.get("Origin"))
        auth = self.auth
        principal = ANONYMOUS
        if auth.enabled:
            header = headers.get("Authorization")
            if header is None:  # the client certificate of the connection, if any
                certified = auth.authenticator.certificate_of(
                    getattr(connection, "transport", None)
                )
                if certified is None:
                    return self._refused(taken, unauthenticated(auth.authenticator))
                refusal = self._admit(taken, certified)
                if refusal is not None:
                    return refusal
                principal = certified
            else:
                route, name = _resource_of(taken)
                admitted = self._admitted_principal(header, route, name)
                if admitted is None:
                    authenticator = auth.authenticator
                    known = authenticator.known(header, headers.get(ON_BEHALF_OF))
                    if known is None:
                        return None
                    refusal = self._admit(taken, known)
                    if refusal is not None:
                        return refusal
                    if authenticator.lasting(header) == known:
                        self._admitted.remember((header, route, name), known)
                    admitted = known
                principal = admitted
        book = auth.quotas
        if book.active:
            limited, charged = self._quotas[_resource_of(taken)[0]]
            usage = book.usage_of(principal) if limited else None
            if usage is not None:
                throttle = book.check(usage, charged)
                if throttle is not None:
                    over = quota_refusal(auth, usage, throttle)
                    return None if over is None else self._refused(taken, over)
                if isinstance(taken, FastProduce):
                    book.charge(usage, "produce_bytes", taken.size)  # as sent, at once
                elif not isinstance(taken, FastAppend):
                    # A limited principal's fetch goes the middleware's way: charged here, the
                    # answers' bytes overran the rate by 17% (loadtests.quota_bench).
                    return None
        if auth.enabled and isinstance(taken, FastMemberFetch):
            try:
                require_reads(auth, principal, taken.topics)
            except Problem as problem:
                return self._refused(taken, problem)
        return taken

    def _admit(self, taken: FastRequest, principal: str) -> FastRefusal | None:
        """What the route needs of the principal (gateway.auth.checks.admit); its 403."""
        try:
            admit(self.auth, principal, self._rules[_resource_of(taken)[0]], _route_of(taken)[2])
        except Problem as problem:
            return self._refused(taken, problem)
        return None

    def _admitted_principal(self, header: str, route: str, name: str) -> str | None:
        """The principal this Authorization header was admitted as on this route and resource
        before, if the credentials and ACLs are still those it was admitted under."""
        auth = self.auth
        under = self._admitted_under
        if under[0] != auth.authenticator.generation or under[1] is not auth.authorizer:
            self._admitted.clear()
            self._admitted_under = (auth.authenticator.generation, auth.authorizer)
            return None
        return self._admitted.get((header, route, name))

    def _cors_of(self, origin: str | None) -> Headers:
        """The CORS headers of an answer to `origin` (remembered per origin)."""
        known = self._cors_headers.get(origin)
        if known is None:
            assert self.cors is not None
            known = self.cors.answer_headers(origin)
            self._cors_headers.remember(origin, known)
        return known

    def _refused(self, taken: FastRequest, problem: Problem) -> FastRefusal:
        method, route, _ = _route_of(taken)
        answer = _failure(taken, problem)
        answer.cors = taken.cors
        return FastRefusal(method, route, answer)

    def _take_produce(
        self, target: str, headers: Mapping[str, str], body: bytes, connection: object
    ) -> FastProduce | None:
        content_type = headers.get("Content-Type")
        if content_type is None or content_type not in codecs.PRODUCE_TYPES:
            return None
        if len(body) > self.max_body:
            return None
        plain = self._produce_targets.get(target)
        if plain is None:
            plain = self._plain_produce_target(target) or _NOT_PLAIN
            self._produce_targets.remember(target, plain)
        if plain is _NOT_PLAIN:
            return None
        name, partition, acks, timeout_ms, record_key, route = plain
        topic = self.gateway.broker.store.view.topics.get(name)
        if topic is None or (partition is not None and partition >= topic.partitions):
            return None
        key = headers.get("Idempotency-Key")
        if key is not None:
            try:
                validate_key(key)
            except ProduceError:
                return None
        if not self._room_for(len(body), connection):
            return None
        produce = ProduceRequest(
            topic=name,
            partition=partition,
            acks=acks,
            timeout_ms=timeout_ms,
            content_type=content_type,
            body=body,
            key=record_key,
            idempotency_key=key,
            target=target,
        )
        return FastProduce(produce, route, len(body))

    def _take_v2_produce(
        self, target: str, headers: Mapping[str, str], body: bytes, connection: object
    ) -> FastProduce | None:
        """REST Proxy v2's json-format produce, when its body is one the C path builds (so
        it is valid) and nothing else sets it apart; everything else goes to its route."""
        if headers.get("Content-Type") != rest_proxy.PRODUCE_TYPE or len(body) > self.max_body:
            return None
        if "Idempotency-Key" in headers:
            return None
        answer_type = rest_proxy.answer_type(headers.get("Accept"))
        parsed = rest_proxy.produce_target(target)
        if answer_type is None or parsed is None or parsed[0] in INTERNAL_TOPICS:
            return None
        name, partition, query, route = parsed
        topic = self.gateway.broker.store.view.topics.get(name)
        if topic is None or (partition is not None and partition >= topic.partitions):
            return None
        params = _query(query, _V2_PRODUCE_PARAMS)
        if params is None or not self._room_for(len(body), connection):
            return None
        delivery = self._acks_and_timeout(params)
        if delivery is None:
            return None
        acks, timeout_ms = delivery
        produce = ProduceRequest(
            topic=name,
            partition=partition,
            acks=acks,
            timeout_ms=timeout_ms,
            content_type=rest_proxy.PRODUCE_TYPE,
            body=body,
            key=None,
            idempotency_key=None,
            target=target,
        )
        try:
            made = self.gateway.producer.build_json_keyed(produce)
        except Exception:  # the topic went meanwhile: its route says so
            return None
        if made is None:
            return None
        built, owners = made
        return FastProduce(produce, route, len(body), (), built, owners, answer_type)

    def _acks_and_timeout(self, params: Mapping[str, str]) -> tuple[Acks, int] | None:
        """A produce's `acks` and `timeout_ms`; None when either is bad (the route says why)."""
        try:
            return produce_delivery(params, self.gateway.settings)
        except Problem:
            return None

    def _plain_produce_target(self, target: str) -> PlainProduce | None:
        """What a produce's target says, when the fast routes may take it (the topic's existence
        and partitions aside, which change): topic, partition, acks, timeout, record key, route."""
        parsed = _parse_route(target, _PRODUCE_PARAMS)
        if parsed is None or parsed[0] in INTERNAL_TOPICS:
            return None
        name, partition, params = parsed
        delivery = self._acks_and_timeout(params)
        if delivery is None:
            return None
        acks, timeout_ms = delivery
        route = PARTITION_ROUTE if partition is not None else TOPIC_ROUTE
        return name, partition, acks, timeout_ms, params.get("key"), route

    def _take_append(
        self, target: str, headers: Mapping[str, str], body: bytes, connection: object
    ) -> FastAppend | None:
        if headers.get("Content-Type") != codecs.RECORD_BATCH or len(body) > self.max_body:
            return None
        path, _, query = target.partition("?")
        parts = path[len(APPEND_PREFIX) :].split("/")
        if len(parts) != 4 or parts[0] or parts[3] != "append" or "%" in path:
            return None
        partition = _partition_number(parts[2])
        topic = self.gateway.broker.store.view.topics.get(parts[1])
        if topic is None or partition is None or partition >= topic.partitions:
            return None
        params = _query(query, _APPEND_PARAMS)
        if params is None or topic.name in INTERNAL_TOPICS:
            return None
        delivery = self._acks_and_timeout(params)
        if delivery is None or not self._room_for(len(body), connection):
            return None
        return FastAppend(topic.name, partition, body, *delivery, target)

    def _room_for(self, size: int, connection: object) -> bool:
        """Whether a body of `size` bytes fits the in-flight limits (the connection's share,
        and the whole); a body that does not goes where the backpressure middleware waits."""
        inflight = self.inflight
        held = inflight.by_connection.get(connection, 0)
        if held and held + size > inflight.connection_limit:
            return False
        return inflight.reserved + size <= inflight.limit

    def _take_fetch(self, target: str, headers: Mapping[str, str]) -> FastFetch | None:
        accept = _FETCH_ACCEPT.get(headers.get("Accept"))
        routed = self._route(target, _FETCH_PARAMS)
        if accept is None or routed is None:
            return None
        topic, partition, params = routed
        gateway = self.gateway
        if partition is None:
            return None
        local = gateway.replicas.local(topic.name, partition)
        led_here = local is not None and local.is_leader
        settings = gateway.settings
        if led_here and gateway.notifier.parked >= settings.max_parked_fetches:
            return None
        try:
            offset, limits = fetch_position(params, settings)
        except Problem:
            return None
        ready = None
        if not led_here:
            ready = read_from_sibling(gateway, topic.name, partition, offset, limits, accept)
            if ready is None:  # led elsewhere, and not readable here: the Application forwards
                return None
        return FastFetch(topic.name, partition, offset, limits, accept, target, ready)

    def _take_member_fetch(self, target: str, headers: Mapping[str, str]) -> FastMemberFetch | None:
        path, _, query = target.partition("?")
        parts = path[len(_GROUPS_PREFIX) :].split("/")
        if len(parts) != 4 or parts[1] != "members" or parts[3] != "records" or "%" in path:
            return None
        name, member = parts[0], parts[2]
        if _FETCH_ACCEPT.get(headers.get("Accept")) != codecs.JSON or not valid_group_id(name):
            return None
        gateway = self.gateway
        group = gateway.groups.groups.get(name)
        joined = None if group is None else group.members.get(member)
        if joined is None:  # coordinated elsewhere, or unknown: not plain
            return None
        settings = gateway.settings
        params = _query(query, _MEMBER_FETCH_PARAMS)
        if params is None or gateway.notifier.parked >= settings.max_parked_fetches:
            return None
        try:
            limits, cursor = member_fetch_query(params, settings)
        except Problem:
            return None
        return FastMemberFetch(name, member, limits, cursor, target, tuple(joined.topics))

    def _route(
        self, target: str, allowed: frozenset[str]
    ) -> tuple[TopicSpec, int | None, dict[str, str]] | None:
        """The topic (known here), the partition (if the path names one, and it exists) and
        the query (each parameter allowed, once, unescaped) of a records route."""
        parsed = _parse_route(target, allowed)
        if parsed is None:
            return None
        name, partition, params = parsed
        topic = self.gateway.broker.store.view.topics.get(name)
        if topic is None or (partition is not None and partition >= topic.partitions):
            return None
        return topic, partition, params

    def start(
        self,
        request: FastRequest | FastRefusal,
        connection: object,
        ready: Callable[[FastAnswer | None], None],
        loop: asyncio.AbstractEventLoop,
    ) -> asyncio.Future[Any]:
        """Begin answering what `take` accepted; `ready` gets the answer, or None when the
        returned future was cancelled first (the client went). The common produce (one
        partition led here, acks 0 or 1, no idempotency key) waits for its write without a
        coroutine of its own: its answer is made when this turn's write lands."""
        started = time.perf_counter()
        if isinstance(request, FastRefusal):
            self._observe(request.route, request.method, request.answer.status, started)
            self.served += 1
            refused: asyncio.Future[FastAnswer] = loop.create_future()
            refused.set_result(request.answer)
            refused.add_done_callback(functools.partial(_served, ready))
            return refused
        built: Built | Exception | None = None
        if isinstance(request, FastProduce) and request.produce.idempotency_key is None:
            producer = self.gateway.producer
            try:
                built = request.built or producer.build(request.produce)
            except Exception as exc:  # answered by `serve`, as any other failure
                built = exc
            else:
                appending = producer.append_now(request.produce, built)
                if appending is not None:
                    landing, leader = appending
                    self._reserve(request.size, connection)
                    landing.add_done_callback(
                        functools.partial(
                            self._landed, request, built, leader, connection, started, ready
                        )
                    )
                    return landing
        task = loop.create_task(self.serve(request, connection, built))
        task.add_done_callback(functools.partial(_served, ready))
        return task

    def _landed(
        self,
        request: FastProduce,
        built: Built,
        leader: Partition,
        connection: object,
        started: float,
        ready: Callable[[FastAnswer | None], None],
        landing: asyncio.Future[AppendInfo],
    ) -> None:
        """`start`'s produce, once its write landed (or failed, or its client went)."""
        if landing.cancelled():
            self._release(request.size, connection)
            self._observe(request.route, "POST", CLIENT_CLOSED, started)
            ready(None)
            return
        error = landing.exception()
        if error is None:
            info = landing.result()
            if info.flush_due:  # the flush policy asks for an fsync first: that waits
                flushed = asyncio.ensure_future(
                    self._flushed(request, built, leader, info, connection, started)
                )
                flushed.add_done_callback(functools.partial(_served, ready))
                return
            document = self.gateway.producer.appended(request.produce, built, info)
            answer = _produced(request, document)
        else:
            answer = _failure(
                request, _problem_of(_as_exception(error), "POST", request.produce.target)
            )
        answer.cors = request.cors
        self._release(request.size, connection)
        self._observe(request.route, "POST", answer.status, started)
        self.served += 1
        ready(answer)

    async def _flushed(
        self,
        request: FastProduce,
        built: Built,
        leader: Partition,
        info: AppendInfo,
        connection: object,
        started: float,
    ) -> FastAnswer:
        """`_landed`'s answer after the fsync the flush policy asks for."""
        answer: FastAnswer | None = None
        produce = request.produce
        try:
            await self.gateway.replicas.acknowledge(leader, info, produce.acks, produce.timeout_ms)
            document = self.gateway.producer.appended(produce, built, info)
            answer = _produced(request, document)
        except Exception as exc:
            answer = _failure(request, _problem_of(exc, "POST", produce.target))
        finally:
            self._release(request.size, connection)
            status = CLIENT_CLOSED if answer is None else answer.status
            self._observe(request.route, "POST", status, started)
        answer.cors = request.cors
        self.served += 1
        return answer

    def _observe(self, route: str, method: str, status: int, started: float) -> None:
        """Count and time the answer under its route, as the metrics middleware does."""
        elapsed = time.perf_counter() - started
        self.gateway.metrics.latency.observe(route, method, str(status), elapsed)

    async def serve(
        self, request: FastRequest, connection: object, built: Built | Exception | None = None
    ) -> FastAnswer:
        """Answer what `take` accepted, a failure as the Application renders it, counted in
        the request metrics under its route (`built`: a produce's batches, or why they could
        not be built, if `start` tried)."""
        started = time.perf_counter()
        answer: FastAnswer | None = None
        method, route, _ = _route_of(request)
        target = request.produce.target if isinstance(request, FastProduce) else request.target
        try:
            if isinstance(request, FastProduce | FastAppend):
                answer = await self._write(request, connection, built)
            else:
                if isinstance(request, FastFetch):
                    answer = await self._fetch(request)
                else:
                    answer = await self._member_fetch(request)
                if request.usage is not None:  # as the quota middleware charges a fetch
                    self.auth.quotas.charge(request.usage, "fetch_bytes", len(answer.body))
        except Exception as exc:
            answer = _failure(request, _problem_of(exc, method, target))
        finally:
            self._observe(
                route, method, CLIENT_CLOSED if answer is None else answer.status, started
            )
        answer.cors = request.cors
        self.served += 1
        return answer

    async def _write(
        self, request: FastProduce | FastAppend, connection: object, built: Built | Exception | None
    ) -> FastAnswer:
        """Produce or append, holding the body's bytes in the in-flight account meanwhile."""
        if isinstance(built, Exception):
            raise built
        self._reserve(request.size, connection)
        try:
            if isinstance(request, FastProduce):
                try:
                    document = await self.gateway.producer.produce(request.produce, built)
                except PartiallyAppended as exc:
                    if request.owners is None:
                        raise
                    body = rest_proxy.produced_answer(exc.appended, request.owners, exc.refused)
                    return FastAnswer(produced(request.produce.acks), request.answer_type, body)
                return _produced(request, document)
            info = await self.gateway.replicas.append(
                request.topic, request.partition, request.data, request.acks, request.timeout_ms
            )
            landed = {"base_offset": info.first_offset, "count": info.record_count}
            return FastAnswer(200, codecs.JSON, orjson.dumps(landed))
        finally:
            self._release(request.size, connection)

    def _reserve(self, size: int, connection: object) -> None:
        """Count a body being produced in the in-flight account (see `_room_for`)."""
        inflight = self.inflight
        inflight.reserved += size
        inflight.by_connection[connection] = inflight.by_connection.get(connection, 0) + size

    def _release(self, size: int, connection: object) -> None:
        inflight = self.inflight
        inflight.reserved -= size
        left = inflight.by_connection.pop(connection) - size
        if left:
            inflight.by_connection[connection] = left

    async def _fetch(self, request: FastFetch) -> FastAnswer:
        """Read the partition as the route does (a long-poll waits here as there)."""
        fetched = request.ready
        if fetched is not None:
            return FastAnswer(
                200, fetched.content_type, fetched.body, tuple(fetched.headers.items())
            )
        gateway = self.gateway
        leader = gateway.replicas.leading(request.topic, request.partition)
        if leader is None:
            leader = await gateway.replicas.leader(request.topic, request.partition)
        offset = start_offset(request.offset, leader)
        fetched = await read_partition(
            gateway, request.topic, request.partition, offset, request.limits, request.accept
        )
        return FastAnswer(200, fetched.content_type, fetched.body, tuple(fetched.headers.items()))

    async def _member_fetch(self, request: FastMemberFetch) -> FastAnswer:
        """The member's long-poll, as the group route runs it."""
        body = await member_records(
            self.gateway, request.group, request.member, request.limits, request.cursor
        )
        return FastAnswer(200, codecs.JSON, body)


_FETCH = "GET " + PARTITION_ROUTE  # (the produce routes are POST's only)
_ROUTES = {  # `_resource_of`'s name of a route -> its method and template
    TOPIC_ROUTE: ("POST", TOPIC_ROUTE),
    PARTITION_ROUTE: ("POST", PARTITION_ROUTE),
    rest_proxy.TOPIC_ROUTE: ("POST", rest_proxy.TOPIC_ROUTE),
    rest_proxy.PARTITION_ROUTE: ("POST", rest_proxy.PARTITION_ROUTE),
    _FETCH: ("GET", PARTITION_ROUTE),
    MEMBER_ROUTE: ("GET", MEMBER_ROUTE),
    APPEND_ROUTE: ("POST", APPEND_ROUTE),
}


def _rule(method: str, route: str) -> Access:
    rule = access(method, route)
    assert rule is not None, (method, route)  # route_operations names every route
    return rule


def _route_of(request: FastRequest) -> tuple[str, str, dict[str, str]]:
    """A request's method, route template and the path parameters its access rule names."""
    if isinstance(request, FastProduce):
        return "POST", request.route, {"topic": request.produce.topic}
    if isinstance(request, FastFetch):
        return "GET", PARTITION_ROUTE, {"topic": request.topic}
    if isinstance(request, FastMemberFetch):
        return "GET", MEMBER_ROUTE, {"group": request.group}
    return "POST", APPEND_ROUTE, {}


def _resource_of(request: FastRequest) -> tuple[str, str]:
    """What a request's access decision depends on besides its principal: its route (with
    its method) and the resource the route names."""
    if isinstance(request, FastProduce):
        return request.route, request.produce.topic
    if isinstance(request, FastFetch):
        return _FETCH, request.topic
    if isinstance(request, FastMemberFetch):
        return MEMBER_ROUTE, request.group
    return APPEND_ROUTE, ""


def _problem_of(exc: Exception, method: str, target: str) -> Problem:
    """The answer the general path gives for a failure: the middleware's problem, or aiohttp's
    own for what the middleware lets through (both then close the connection)."""
    try:
        return problem_of(exc, method, target)
    except TimeoutError:
        return Problem(504, status_code(504), "gateway timeout", headers={"Connection": "close"})
    except ConnectionResetError:
        log.exception("Error handling request", exc_info=exc)
        detail = "internal server error"
        return Problem(500, "INTERNAL_ERROR", detail, headers={"Connection": "close"})


def _served(
    ready: Callable[[FastAnswer | None], None], answering: asyncio.Future[FastAnswer]
) -> None:
    """Hand a task's answer on; None if it was cancelled (its client went) or failed
    (which `serve` renders as a problem, so only an error past it, logged here)."""
    if answering.cancelled():
        ready(None)
        return
    error = answering.exception()
    if error is not None:
        log.error("the fast routes failed to answer a request", exc_info=error)
        ready(None)
        return
    ready(answering.result())


def _as_exception(error: BaseException) -> Exception:
    """A failed append's error as the problem renderer takes it."""
    return error if isinstance(error, Exception) else RuntimeError(str(error))


def _produced(request: FastProduce, document: dict[str, Any]) -> FastAnswer:
    """A produce's answer: /v1's document, or v2's offsets for a v2 produce."""
    status = produced(request.produce.acks)
    if request.owners is None:
        return FastAnswer(status, codecs.JSON, orjson.dumps(document))
    body = rest_proxy.produced_answer(document["results"], request.owners, [])
    return FastAnswer(status, request.answer_type, body)


def _failure(request: FastRequest, problem: Problem) -> FastAnswer:
    """A failure's answer: a problem, or v2's error body for a v2 request (the dialect the
    Application's problem middleware picks for v2's paths)."""
    if isinstance(request, FastProduce) and request.owners is not None:
        body = rest_proxy.error_answer(problem)
        return FastAnswer(
            problem.status, rest_proxy.ERROR_TYPE, body, tuple(problem.headers.items())
        )
    return _problem(problem)


def _problem(problem: Problem) -> FastAnswer:
    return FastAnswer(
        problem.status, PROBLEM_JSON, problem_body(problem), tuple(problem.headers.items())
    )


def _parse_route(
    target: str, allowed: frozenset[str]
) -> tuple[str, int | None, dict[str, str]] | None:
    """A records route's topic name, partition (if the path names one) and query (each
    parameter allowed, once, unescaped); None for any other target."""
    path, _, query = target.partition("?")
    parts = path[len(_PREFIX) :].split("/")
    partition: int | None = None
    if len(parts) == 4 and parts[1] == "partitions" and parts[3] == "records":
        partition = _partition_number(parts[2])
        if partition is None:
            return None
    elif len(parts) != 2 or parts[1] != "records":
        return None
    params = _query(query, allowed)
    return None if params is None else (parts[0], partition, params)


def _partition_number(raw: str) -> int | None:
    """A path's partition number, if it is one (digits only, as the routes take it)."""
    return int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 9 else None


def _query(query: str, allowed: frozenset[str]) -> dict[str, str] | None:
    """The query's parameters, if each is plain (no escapes, named once, allowed)."""
    params: dict[str, str] = {}
    if not query:
        return params
    if "%" in query or "+" in query:
        return None
    for pair in query.split("&"):
        name, _, value = pair.partition("=")
        if name not in allowed or name in params:
            return None
        params[name] = value
    return params
