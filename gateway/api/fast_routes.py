"""The fast routes: plain produces, partition fetches, group members' fetches, share-group
members' acquires and acknowledgements, transactions' begins, commits and aborts, and other
nodes' internal appends served without aiohttp's per-request machinery.

aiohttp builds a Request, runs the middlewares and the router and writes a StreamResponse for
every request: for a one-record produce, or a long-poll that returns a few records, that costs
more than the work itself (see docs/PERFORMANCE.md "Request cost"). The connections
(gateway.http.connections, gateway.http.http2) offer each complete request here first (the app
hands them this object as their fast path); `take` accepts only the plain case (a produce whose
body has arrived whole, also one inside a transaction coordinated here, a fetch of a partition
led here, a fetch by a member of a group coordinated here, a producer's begin, commit or abort
of a transaction coordinated here, the batches another node's front forwards to a partition led
here), and everything else, including every request that would fail before producing or
fetching, goes through the Application, which stays the reference. The middlewares' checks
(credentials, ACLs, quotas, CORS headers) and the handlers' own (a member fetch's topics, a
produce's transactional id) are steps of `take`, through the same functions, whatever the
options. What the fast routes serve is what the general path would answer: the same Producer,
partition read and group fetch, the same refusals and error rendering, the same request metrics
and body accounting. Which produces and fetches they take is `fast_produce`'s and
`fast_fetch`'s, the share-group requests `fast_share`'s, the transaction calls
`fast_transactions`', the targets they read `fast_targets`', and the answer's head
`fast_answer`'s.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from engine.log import AppendInfo
from gateway.api.admission import Admission
from gateway.api.backpressure import InflightBodies
from gateway.api.cors import Policy
from gateway.api.fast_answer import FastAnswer, Headers, RepeatedAnswer, problem_answer
from gateway.api.fast_fetch import FastFetch, FastMemberFetch, FetchIntake
from gateway.api.fast_produce import FastAppend, FastProduce, ProduceIntake
from gateway.api.fast_share import (
    ACKNOWLEDGE_ROUTE,
    ACQUIRE_ROUTE,
    SHARE_PREFIX,
    FastShareAck,
    FastShareAcquire,
    ShareIntake,
)
from gateway.api.fast_targets import (
    GROUPS_PREFIX,
    MEMBER_ROUTE,
    PARTITION_ROUTE,
    TOPIC_ROUTE,
    TOPICS_PREFIX,
)
from gateway.api.fast_transactions import FastTransaction, TransactionIntake
from gateway.api.problems import problem_of
from gateway.api.records import produced
from gateway.api.rest_proxy import fast as rest_proxy
from gateway.api.transactions import (
    ABORT_ROUTE,
    COMMIT_ROUTE,
    TRANSACTION_ROUTE,
    TRANSACTIONS_PREFIX,
)
from gateway.auth.checks import (
    UNLIMITED_AUDIENCES,
    admit,
    denied,
    quota_charged,
    quota_refusal,
    require_reads,
    unauthenticated,
)
from gateway.auth.quotas import ANONYMOUS
from gateway.auth.route_operations import Access, access
from gateway.formats import codecs
from gateway.http.memo import Memo
from gateway.http.problem import PROBLEM_JSON, Problem, problem_body, status_code
from gateway.metrics.collectors import CLIENT_CLOSED
from gateway.metrics.requests import Labels
from gateway.produce.errors import SchemaViewBehind
from gateway.produce.front import Built
from gateway.produce.transaction import PartitionsAdder
from gateway.state import Gateway
from replication.acks import Acks
from replication.errors import PartiallyAppended
from replication.node_contract import APPEND_PREFIX, APPEND_ROUTE, FORWARDED_BY, ON_BEHALF_OF
from replication.partition import Partition

# Headers the body reader acts on: their requests take the general path (a forwarded request
# too, but for the internal append, which only other nodes send).
_CONTENT_ENCODING, _EXPECT = "Content-Encoding", "Expect"
_ORIGINS_KEPT = 256  # the CORS headers of this many Origin values, remembered
_ADMITTED_KEPT = 10_000  # (credentials, route, resource) admitted, remembered
_TARGETS_KEPT = 1024  # POST targets and the produce route each is (or None), remembered
_ONE_RESULT = b'{"results":[{"partition":%d,"base_offset":%d,"count":%d}]}'
log = logging.getLogger(__name__)


@dataclass(slots=True)
class FastRefusal:
    """A request the admission (503) or the checks (401, 403, 429) refused: answered as the
    middlewares answer it, at once."""

    method: str
    route: str
    answer: FastAnswer
    labels: Labels = field(init=False)  # its request metrics' (route, method, status)

    def __post_init__(self) -> None:
        self.labels = (self.route, self.method, str(self.answer.status))


FastRequest = (
    FastProduce
    | FastAppend
    | FastFetch
    | FastMemberFetch
    | FastShareAcquire
    | FastShareAck
    | FastTransaction
)


class FastRoutes:
    """Takes and serves the plain produces and fetches of one gateway, whatever its options:
    the checks the middlewares make (credentials, ACLs, quotas, CORS headers) run here as
    steps of `take`, calling the same functions (gateway.auth.checks, gateway.api.cors)."""

    def __init__(
        self,
        gateway: Gateway,
        inflight: InflightBodies,
        admission: Admission,
        cors: Policy | None,
    ) -> None:
        self.gateway = gateway
        self.inflight = inflight
        self.admission = admission
        self.auth = gateway.auth
        self.cors = cors
        self.produces = ProduceIntake(gateway, inflight)
        self.fetches = FetchIntake(gateway)
        self.shares = ShareIntake(gateway)
        self.transactions = TransactionIntake(gateway)
        self.served = 0  # requests answered here: sluice_lane_requests_total
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
        self._shed = {route: _shed_refusal(route, admission) for route in _PRODUCE_ROUTES}
        self._shed_cors: Memo[tuple[str, str | None], FastRefusal] = Memo(_ORIGINS_KEPT)
        self._latency = gateway.metrics.latency
        # POST target -> the produce route it is, "" for none
        self._produce_routes: Memo[str, str] = Memo(_TARGETS_KEPT)
        self._admitted_under: tuple[int, object] = (-1, None)

    def take(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes,
        connection: object,
        waited_s: float = 0.0,
    ) -> FastRequest | FastRefusal | None:
        """What this complete request asks for, if the fast routes answer it; else None. A
        produce is admitted first (gateway.api.admission), before anything is read of it: one
        refused costs only its answer. What they take has passed the checks the middlewares
        would make, or is refused as they refuse it."""
        admitted = False
        if method == "POST":
            route = self._produce_routes.get(target)
            if route is None:
                route = _produce_route(target) or ""
                self._produce_routes.remember(target, route)
            if route:
                if not self.admission.admit(waited_s):
                    if self.cors is None:
                        return self._shed[route]
                    return self._overloaded(route, headers)
                admitted = True
        plain = self._plain(method, target, headers, body, connection)
        taken: FastRequest | FastRefusal | None = plain
        if plain is not None and (self.auth.enabled or self.auth.quotas.active or self.cors):
            taken = self._checked(plain, headers, connection)
        if isinstance(taken, FastProduce) and taken.transaction is not None:
            name, epoch = taken.transaction
            topic = taken.produce.topic
            gateway = self.gateway
            taken.produce.transaction = PartitionsAdder(
                gateway.transactions,
                gateway.transactions_ready,
                name,
                epoch,
                topic,
                taken.principal,
            )
        if admitted and not isinstance(taken, FastProduce):
            self.admission.done()  # refused, or left to the Application, which admits it itself
        return taken

    def _overloaded(self, route: str, headers: Mapping[str, str]) -> FastRefusal:
        """A produce the admission refused, answered with CORS headers: 503 with Retry-After, in
        its route's dialect (`_shed` holds the answers without them)."""
        refused = self._shed[route]
        origin = headers.get("Origin")
        known = self._shed_cors.get((route, origin))
        if known is None:  # one answer per route and origin, its bytes made once a second
            answer = dataclasses.replace(refused.answer, cors=self._cors_of(origin))
            known = FastRefusal(refused.method, route, answer)
            self._shed_cors.remember((route, origin), known)
        return known

    def _plain(
        self, method: str, target: str, headers: Mapping[str, str], body: bytes, connection: object
    ) -> FastRequest | None:
        """What the request asks for, if it is one the fast routes serve as the routes would."""
        if _CONTENT_ENCODING in headers or _EXPECT in headers:
            return None
        forwarded = FORWARDED_BY in headers
        if target.startswith(APPEND_PREFIX):
            # Another node's, forwarded once: a leader that moved answers 421 as the route
            # does then; one without the header may be forwarded by the route, so is left to it.
            if method != "POST" or not forwarded:
                return None
            return self.produces.append(target, headers, body, connection)
        if forwarded:
            return None
        get = method == "GET" and not body and "Content-Length" not in headers
        if method == "POST" and target.startswith(rest_proxy.PREFIX):
            return self.produces.v2_produce(target, headers, body, connection)
        if target.startswith(TOPICS_PREFIX):
            if method == "POST":
                return self.produces.produce(target, headers, body, connection)
            return self.fetches.fetch(target, headers) if get else None
        if get and target.startswith(GROUPS_PREFIX):
            return self.fetches.member_fetch(target, headers)
        if method == "POST" and target.startswith(SHARE_PREFIX):
            return self.shares.take(target, headers, body)
        if method == "POST" and target.startswith(TRANSACTIONS_PREFIX):
            return self.transactions.take(target, headers, body)
        return None

    def _checked(
        self, taken: FastRequest, headers: Mapping[str, str], connection: object
    ) -> FastRequest | FastRefusal | None:
        """The middlewares' steps, in their order: CORS headers for its answer, credentials
        (401), what the route needs (403), the quota (429), then the handlers': what a member's
        fetch reads (403), write on a produce's transactional id (403). None where only the
        Application can tell: credentials not seen before (it checks them and remembers them
        for the next request), a delayed quota."""
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
        if auth.enabled and isinstance(taken, FastMemberFetch | FastShareAcquire):
            try:
                require_reads(auth, principal, taken.topics)
            except Problem as problem:
                return self._refused(taken, problem)
        if auth.enabled and isinstance(taken, FastProduce) and taken.transaction is not None:
            name = taken.transaction[0]
            if not auth.allowed(principal, "transactional_id", name, "write"):
                return self._refused(taken, denied(principal, "transactional_id", name, "write"))
            taken.principal = principal
        if auth.enabled and isinstance(taken, FastTransaction):
            taken.principal = principal  # the route checked write on its id (`_admit`)
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

    def immediate(self, taken: FastRequest | FastRefusal) -> FastAnswer | None:
        """A refusal `take` made (the admission's 503, the checks' 401, 403, 429), counted
        here: the connection sends it with no future or callback (docs/gateway.md, "Answers
        written together")."""
        if not isinstance(taken, FastRefusal):
            return None
        self._latency.observe_at_once(taken.labels)
        self.served += 1
        return taken.answer

    def start(
        self,
        request: FastRequest | FastRefusal,
        connection: object,
        ready: Callable[[FastAnswer | None], None],
        loop: asyncio.AbstractEventLoop,
    ) -> asyncio.Future[Any]:
        """Begin answering what `take` accepted (a refusal is `immediate`'s); `ready` gets the
        answer, or None when the returned future was cancelled first (the client went). The
        common produce (one partition led here, no idempotency key) waits for its write
        without a coroutine of its own: its answer is made when this turn's write lands
        (acks=all: if the high watermark passed it then, as on a leader alone). A produce
        counts in the admission's account until `ready` has its answer."""
        if isinstance(request, FastRefusal):
            raise TypeError("a refusal is answered at once: FastRoutes.immediate")
        started = time.perf_counter()
        built: Built | Exception | None = None
        if isinstance(request, FastProduce):  # admitted by `take`
            if request.produce.idempotency_key is None:
                producer = self.gateway.producer
                try:
                    built = request.built or producer.build(request.produce)
                except Exception as exc:  # answered by `serve`, as any other failure
                    built = exc
                else:
                    landed = functools.partial(  # settles the admission, in the write's pass
                        self._landed, request, built, connection, started, ready
                    )
                    landing = producer.append_now(request.produce, built, landed)
                    if landing is not None:
                        self.inflight.reserve(request.size, connection)
                        return landing
            ready = functools.partial(_admitted_answer, self.admission, ready)
        task = loop.create_task(self.serve(request, connection, built))
        task.add_done_callback(functools.partial(_served, ready))
        return task

    def _landed(
        self,
        request: FastProduce,
        built: Built,
        connection: object,
        started: float,
        ready: Callable[[FastAnswer | None], None],
        leader: Partition,
        landing: asyncio.Future[AppendInfo],
    ) -> None:
        """`start`'s produce, once its write landed (or failed, or its client went), called in
        the write's pass; it leaves the admission's account as `ready` gets its answer."""
        if landing.cancelled():
            self.inflight.release(request.size, connection)
            self._observe(request.route, "POST", CLIENT_CLOSED, started)
            self.admission.done()
            ready(None)
            return
        error = landing.exception()
        if error is None:
            info = landing.result()
            if info.flush_due or (
                request.produce.acks is Acks.ALL
                and not self.gateway.replicas.committed(leader, info.last_offset)
            ):  # an fsync the flush policy asks for, or the in-sync replicas: that waits
                acknowledged = asyncio.ensure_future(
                    self._acknowledged(request, built, leader, info, connection, started)
                )
                admitted = functools.partial(_admitted_answer, self.admission, ready)
                acknowledged.add_done_callback(functools.partial(_served, admitted))
                return
            answer = _landed_answer(request, self.gateway.producer.appended(built, info))
        else:
            answer = _failure(
                request, _problem_of(_as_exception(error), "POST", request.produce.target)
            )
        answer.cors = request.cors
        self.inflight.release(request.size, connection)
        self._observe(request.route, "POST", answer.status, started)
        self.served += 1
        self.admission.done()
        ready(answer)

    async def _acknowledged(
        self,
        request: FastProduce,
        built: Built,
        leader: Partition,
        info: AppendInfo,
        connection: object,
        started: float,
    ) -> FastAnswer:
        """`_landed`'s answer after the fsync the flush policy asks for, or once the in-sync
        replicas have the records (acks=all)."""
        answer: FastAnswer | None = None
        produce = request.produce
        try:
            await self.gateway.replicas.acknowledge(leader, info, produce.acks, produce.timeout_ms)
            answer = _landed_answer(request, self.gateway.producer.appended(built, info))
        except Exception as exc:
            answer = _failure(request, _problem_of(exc, "POST", produce.target))
        finally:
            self.inflight.release(request.size, connection)
            status = CLIENT_CLOSED if answer is None else answer.status
            self._observe(request.route, "POST", status, started)
        answer.cors = request.cors
        self.served += 1
        return answer

    def _observe(self, route: str, method: str, status: int, started: float) -> None:
        """Count and time the answer under its route, as the metrics middleware does."""
        elapsed = time.perf_counter() - started
        self._latency.observe(route, method, str(status), elapsed)

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
            elif isinstance(request, FastShareAcquire | FastShareAck):
                answer = await self.shares.answer(request)
            elif isinstance(request, FastTransaction):
                answer = await self.transactions.answer(request)
            else:
                if isinstance(request, FastFetch):
                    answer = await self.fetches.answer_fetch(request)
                else:
                    answer = await self.fetches.answer_member_fetch(request)
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
        if isinstance(built, SchemaViewBehind):
            built = None  # the producer builds it again once the registry view caught up
        if isinstance(built, Exception):
            raise built
        self.inflight.reserve(request.size, connection)
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
            self.inflight.release(request.size, connection)


_FETCH = "GET " + PARTITION_ROUTE  # (the produce routes are POST's only)
_ROUTES = {  # `_resource_of`'s name of a route -> its method and template
    TOPIC_ROUTE: ("POST", TOPIC_ROUTE),
    PARTITION_ROUTE: ("POST", PARTITION_ROUTE),
    rest_proxy.TOPIC_ROUTE: ("POST", rest_proxy.TOPIC_ROUTE),
    rest_proxy.PARTITION_ROUTE: ("POST", rest_proxy.PARTITION_ROUTE),
    _FETCH: ("GET", PARTITION_ROUTE),
    MEMBER_ROUTE: ("GET", MEMBER_ROUTE),
    APPEND_ROUTE: ("POST", APPEND_ROUTE),
    ACQUIRE_ROUTE: ("POST", ACQUIRE_ROUTE),
    ACKNOWLEDGE_ROUTE: ("POST", ACKNOWLEDGE_ROUTE),
    TRANSACTION_ROUTE: ("POST", TRANSACTION_ROUTE),
    COMMIT_ROUTE: ("POST", COMMIT_ROUTE),
    ABORT_ROUTE: ("POST", ABORT_ROUTE),
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
    if isinstance(request, FastShareAcquire):
        return "POST", ACQUIRE_ROUTE, {"group": request.group}
    if isinstance(request, FastShareAck):
        return "POST", ACKNOWLEDGE_ROUTE, {"group": request.group}
    if isinstance(request, FastTransaction):
        return "POST", request.route, {"transactional_id": request.transactional_id}
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
    if isinstance(request, FastShareAcquire):
        return ACQUIRE_ROUTE, request.group
    if isinstance(request, FastShareAck):
        return ACKNOWLEDGE_ROUTE, request.group
    if isinstance(request, FastTransaction):
        return request.route, request.transactional_id
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


_PRODUCE_ROUTES = (TOPIC_ROUTE, PARTITION_ROUTE, rest_proxy.TOPIC_ROUTE, rest_proxy.PARTITION_ROUTE)


def _produce_route(target: str) -> str | None:
    """The produce route a POST to `target` is, if any (the admission's business)."""
    path = target.split("?", 1)[0]
    if path.startswith(TOPICS_PREFIX):
        if not path.endswith("/records"):
            return None
        return PARTITION_ROUTE if "/partitions/" in path else TOPIC_ROUTE
    if path.startswith(rest_proxy.PREFIX):
        return rest_proxy.PARTITION_ROUTE if "/partitions/" in path else rest_proxy.TOPIC_ROUTE
    return None


def _shed_refusal(route: str, admission: Admission) -> FastRefusal:
    """The answer to a produce on `route` the admission refused (v2's dialect on v2's)."""
    problem = admission.refusal()
    if route.startswith(rest_proxy.PREFIX):
        kind, body = rest_proxy.ERROR_TYPE, rest_proxy.error_answer(problem)
    else:
        kind, body = PROBLEM_JSON, problem_body(problem)
    answer = RepeatedAnswer(503, kind, body, tuple(problem.headers.items()))
    return FastRefusal("POST", route, answer)


def _admitted_answer(
    admission: Admission, ready: Callable[[FastAnswer | None], None], answer: FastAnswer | None
) -> None:
    """An admitted produce's answer: it leaves the admission's account, then goes out."""
    admission.done()
    ready(answer)


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


def _landed_answer(request: FastProduce, landed: tuple[int, int, int]) -> FastAnswer:
    """The answer to a produce appended in one batch: /v1's document as the Producer's answer
    is written by orjson, byte for byte, without building it; v2's offsets for a v2 produce."""
    status = produced(request.produce.acks)
    if request.owners is None:
        return FastAnswer(status, codecs.JSON, _ONE_RESULT % landed)
    partition, base, count = landed
    body = rest_proxy.produced_answer({partition: (base, count)}, request.owners, [])
    return FastAnswer(status, request.answer_type, body)


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
    return problem_answer(problem)
