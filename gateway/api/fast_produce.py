"""The produces the fast routes take (a plain produce, one inside a transaction this node
coordinates, REST Proxy v2's json-format produce, another node's internal append), each checked
as its route checks it; anything else is left to the Application, which says why."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from engine.internal_topics import INTERNAL_TOPICS
from gateway.api.backpressure import InflightBodies
from gateway.api.fast_answer import Headers
from gateway.api.fast_targets import (
    PARTITION_ROUTE,
    TOPIC_ROUTE,
    parse_route,
    partition_number,
    plain_query,
)
from gateway.api.groups import valid_id
from gateway.api.records import produce_delivery
from gateway.api.rest_proxy import fast as rest_proxy
from gateway.api.transactions import MAX_EPOCH, MAX_TRANSACTIONAL_ID
from gateway.formats import codecs
from gateway.http.memo import Memo
from gateway.http.params import parse_int
from gateway.http.problem import Problem
from gateway.produce.errors import ProduceError
from gateway.produce.front import Built, ProduceRequest
from gateway.produce.idempotency import validate_key
from gateway.state import Gateway
from replication.acks import Acks
from replication.node_contract import APPEND_PREFIX

_PRODUCE_PARAMS = frozenset({"acks", "timeout_ms", "key", "transactional_id", "producer_epoch"})
_APPEND_PARAMS = frozenset({"acks", "timeout_ms"})
_V2_PRODUCE_PARAMS = frozenset({"acks", "timeout_ms"})
# A produce target's plain reading (`_plain_produce_target`), remembered: clients repeat their
# target, and reading it costs ~2 µs of a produce. At most this many, then forgotten.
_TARGETS_KEPT = 1024
Transaction = tuple[str, int]  # a produce's transactional id and producer epoch
PlainProduce = tuple[str, int | None, Acks, int, str | None, str, Transaction | None]
_NOT_PLAIN: PlainProduce = ("", None, Acks.ALL, 0, None, "", None)  # one the fast routes leave


@dataclass(slots=True)
class FastProduce:
    """A produce the fast routes took: what to produce, its route template and body size; a
    REST Proxy v2 produce also its batches (built in C as it was taken), each record's
    partition, and its answer's media type (its answers and errors are v2's); a produce inside
    a transaction its transactional id and epoch, and (with --auth) the principal sending it."""

    produce: ProduceRequest
    route: str
    size: int
    cors: Headers = ()  # added to its answer, whatever it is
    built: Built | None = None
    owners: bytes | None = None  # v2: each record's partition (uint32s, request order)
    answer_type: str = codecs.JSON
    transaction: Transaction | None = None
    principal: str | None = None


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


class ProduceIntake:
    """Takes the produces the fast routes serve, their bodies within the in-flight limits."""

    def __init__(self, gateway: Gateway, inflight: InflightBodies) -> None:
        self.gateway = gateway
        self.inflight = inflight
        # Bulk bodies too: on HTTP/2 the Application would copy a held body into a reader and
        # out again, a quarter of a 1000-record produce. A larger one gets its 413 there.
        self.max_body = inflight.max_body
        self._targets: Memo[str, PlainProduce] = Memo(_TARGETS_KEPT)

    def produce(
        self, target: str, headers: Mapping[str, str], body: bytes, connection: object
    ) -> FastProduce | None:
        content_type = headers.get("Content-Type")
        if content_type is None or content_type not in codecs.PRODUCE_TYPES:
            return None
        if len(body) > self.max_body:
            return None
        plain = self._targets.get(target)
        if plain is None:
            plain = self._plain_produce_target(target) or _NOT_PLAIN
            self._targets.remember(target, plain)
        if plain is _NOT_PLAIN:
            return None
        name, partition, acks, timeout_ms, record_key, route, transaction = plain
        topic = self.gateway.broker.store.view.topics.get(name)
        if topic is None or (partition is not None and partition >= topic.partitions):
            return None
        key = headers.get("Idempotency-Key")
        if transaction is not None:
            # Its route refuses an Idempotency-Key; another node's coordinator gets it whole.
            if key is not None or not self.gateway.transactions.coordinates(transaction[0]):
                return None
        elif key is not None:
            try:
                validate_key(key)
            except ProduceError:
                return None
        if not self.inflight.room_for(len(body), connection):
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
        return FastProduce(produce, route, len(body), transaction=transaction)

    def v2_produce(
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
        params = plain_query(query, _V2_PRODUCE_PARAMS)
        if params is None or not self.inflight.room_for(len(body), connection):
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
        and partitions aside, which change): topic, partition, acks, timeout, record key, route,
        and its transaction if it names one."""
        parsed = parse_route(target, _PRODUCE_PARAMS)
        if parsed is None or parsed[0] in INTERNAL_TOPICS:
            return None
        name, partition, params = parsed
        delivery = self._acks_and_timeout(params)
        if delivery is None:
            return None
        acks, timeout_ms = delivery
        transaction = None
        if "transactional_id" in params or "producer_epoch" in params:
            transaction = _transaction(params)
            if transaction is None:
                return None
        route = PARTITION_ROUTE if partition is not None else TOPIC_ROUTE
        return name, partition, acks, timeout_ms, params.get("key"), route, transaction

    def append(
        self, target: str, headers: Mapping[str, str], body: bytes, connection: object
    ) -> FastAppend | None:
        if headers.get("Content-Type") != codecs.RECORD_BATCH or len(body) > self.max_body:
            return None
        path, _, query = target.partition("?")
        parts = path[len(APPEND_PREFIX) :].split("/")
        if len(parts) != 4 or parts[0] or parts[3] != "append" or "%" in path:
            return None
        partition = partition_number(parts[2])
        topic = self.gateway.broker.store.view.topics.get(parts[1])
        if topic is None or partition is None or partition >= topic.partitions:
            return None
        params = plain_query(query, _APPEND_PARAMS)
        if params is None or topic.name in INTERNAL_TOPICS:
            return None
        delivery = self._acks_and_timeout(params)
        if delivery is None or not self.inflight.room_for(len(body), connection):
            return None
        return FastAppend(topic.name, partition, body, *delivery, target)


def _transaction(params: Mapping[str, str]) -> Transaction | None:
    """A produce's transactional id and producer epoch, when both are there and good (as
    `gateway.api.transactions.produce_transaction` reads them); None leaves it to the route."""
    name, raw = params.get("transactional_id"), params.get("producer_epoch")
    epoch = None if raw is None else parse_int(raw)
    if name is None or epoch is None or not 0 <= epoch <= MAX_EPOCH:
        return None
    return (name, epoch) if valid_id(name, MAX_TRANSACTIONAL_ID) else None
