"""Reply subscriptions' transactions (groups.subscriptions.replies.Transactions): made in
process when this node coordinates the transactional id, through the node's own public API
otherwise.

In process, a one-record batch costs a delivery and the coordinator's work; through the API,
each of its four calls is also a hop on loopback, paid as client and as server
(docs/perf/transactions/README.md). Either way the same coordinator decides under the same
principal (the internal one with --auth, none without), so a transaction begun one way may be
ended the other: a coordinator that moves between two calls sends the next one through the
API, and one that moves during a call fails it, which the dispatcher retries from the begin."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

import orjson

from engine.errors import CorruptRecord, InvalidRecord, RecordTooLarge
from gateway.auth.credentials import INTERNAL_PRINCIPAL
from gateway.formats import codecs
from gateway.http.problem import Problem
from gateway.produce.errors import ProduceError
from gateway.produce.front import Producer, ProduceRequest
from gateway.produce.transaction import PartitionsAdder
from groups.subscriptions.replies import ReplyRefused
from groups.transactions.coordinator import TransactionCoordinator
from groups.transactions.group_offsets import NO_GENERATION
from groups.transactions.model import OffsetEntry
from replication.acks import Acks
from replication.broker import Broker
from replication.errors import LeaderNotAvailable
from replication.forward_client import ForwardClient, RemoteError

# A reply's produce refused for the records themselves (malformed, too large, unprocessable):
# the endpoint's answer is at fault, not the transaction.
REPLY_REFUSALS = frozenset({400, 413, 415, 422})


class OwnApiTransactions:
    """The calls as this node's own public API takes a client's, with the internal key (the
    internal principal): its forwarding middleware sends each to whoever serves it (the
    transactional id's coordinator, the partition leaders, the controller that makes
    `__transaction_state`), waiting out a node's loss, and its checks apply as to any produce.
    With --auth, the node needs an internal key (--internal-key-file, which a cluster has
    anyway)."""

    def __init__(self, forwarder: ForwardClient, broker: Broker, node_id: int) -> None:
        self.forwarder = forwarder
        self.broker = broker
        self.node_id = node_id

    async def begin(self, transactional_id: str, timeout_ms: int) -> int:
        doc = await self._call(_transaction(transactional_id), {"timeout_ms": timeout_ms})
        return int(doc["producer_epoch"])

    async def produce(self, transactional_id: str, epoch: int, topic: str, body: bytes) -> None:
        try:
            await self._call(_produce_target(transactional_id, epoch, topic), body)
        except RemoteError as exc:
            if exc.status in REPLY_REFUSALS:
                raise ReplyRefused(f"{exc.status} {exc.code}: {exc}") from None
            raise

    async def send_offsets(
        self, transactional_id: str, epoch: int, group: str, topic: str, partition: int, offset: int
    ) -> None:
        offsets = [{"topic": topic, "partition": partition, "offset": offset}]
        doc = {"producer_epoch": epoch, "group_id": group, "offsets": offsets}
        await self._call(_transaction(transactional_id, "/offsets"), doc)

    async def commit(self, transactional_id: str, epoch: int) -> None:
        await self._call(_transaction(transactional_id, "/commit"), {"producer_epoch": epoch})

    async def abort(self, transactional_id: str, epoch: int) -> None:
        await self._call(_transaction(transactional_id, "/abort"), {"producer_epoch": epoch})

    async def _call(self, path: str, body: dict[str, object] | bytes) -> dict[str, Any]:
        """POST to this node's public API; its answer, or RemoteError with its problem."""
        me = self.broker.store.view.nodes.get(self.node_id)
        if me is None:
            raise LeaderNotAvailable(f"node {self.node_id} is not in the cluster's view yet")
        data = body if isinstance(body, bytes) else orjson.dumps(body)
        answer = await self.forwarder.call(
            me.url, "POST", path, {"Content-Type": codecs.JSON}, data
        )
        doc = orjson.loads(answer.body) if answer.body else {}
        if answer.status >= 400:
            raise RemoteError(answer.status, doc if isinstance(doc, dict) else {})
        return doc if isinstance(doc, dict) else {}


class ReplyTransactions:
    """The calls in process while `coordinator` serves the transactional id here (and, for a
    produce, the reply topic exists here: the API makes one that does not, or says why not),
    as `api` otherwise. A produce in process is the produce route's: the same Producer builds
    and checks the records (a refusal of the records themselves is ReplyRefused, as the
    route's 400, 413, 415 and 422 are), adds their partitions to the transaction and appends
    them on their leaders, here or forwarded, with acks=all."""

    def __init__(
        self,
        coordinator: TransactionCoordinator,
        producer: Producer,
        api: OwnApiTransactions,
        *,
        auth: bool,
        timeout_ms: int,
    ) -> None:
        self.coordinator = coordinator
        self.producer = producer
        self.api = api
        self.principal = INTERNAL_PRINCIPAL if auth else None  # the API's, for the key
        self.timeout_ms = timeout_ms  # a produce's, as the route's default

    async def begin(self, transactional_id: str, timeout_ms: int) -> int:
        if not self.coordinator.coordinates(transactional_id):
            return await self.api.begin(transactional_id, timeout_ms)
        meta = await self.coordinator.begin(transactional_id, timeout_ms, self.principal)
        return meta.producer_epoch

    async def produce(self, transactional_id: str, epoch: int, topic: str, body: bytes) -> None:
        coordinator = self.coordinator
        if (
            not coordinator.coordinates(transactional_id)
            or topic not in self.producer.replicas.store.view.topics
        ):
            await self.api.produce(transactional_id, epoch, topic, body)
            return

        async def ready() -> TransactionCoordinator:
            return coordinator

        request = ProduceRequest(
            topic=topic,
            partition=None,
            acks=Acks.ALL,
            timeout_ms=self.timeout_ms,
            content_type=codecs.JSON,
            body=body,
            key=None,
            idempotency_key=None,
            target=_produce_target(transactional_id, epoch, topic),
            transaction=PartitionsAdder(
                coordinator, ready, transactional_id, epoch, topic, self.principal
            ),
        )
        try:
            await self.producer.produce(request)
        except (ProduceError, RecordTooLarge) as exc:
            raise ReplyRefused(f"{type(exc).__name__}: {exc}") from None
        except InvalidRecord as exc:
            if isinstance(exc, CorruptRecord):
                raise
            raise ReplyRefused(f"{type(exc).__name__}: {exc}") from None
        except Problem as exc:  # the body's format refused it (400)
            raise ReplyRefused(f"{exc.status} {exc.code}: {exc.detail}") from None

    async def send_offsets(
        self, transactional_id: str, epoch: int, group: str, topic: str, partition: int, offset: int
    ) -> None:
        if not self.coordinator.coordinates(transactional_id):
            await self.api.send_offsets(transactional_id, epoch, group, topic, partition, offset)
            return
        offsets: list[OffsetEntry] = [(topic, partition, offset, "")]
        await self.coordinator.add_offsets(
            transactional_id, epoch, group, "", NO_GENERATION, offsets, self.principal
        )

    async def commit(self, transactional_id: str, epoch: int) -> None:
        if not self.coordinator.coordinates(transactional_id):
            await self.api.commit(transactional_id, epoch)
            return
        await self.coordinator.commit(transactional_id, epoch, self.principal)

    async def abort(self, transactional_id: str, epoch: int) -> None:
        if not self.coordinator.coordinates(transactional_id):
            await self.api.abort(transactional_id, epoch)
            return
        await self.coordinator.abort(transactional_id, epoch, self.principal)


def _transaction(transactional_id: str, action: str = "") -> str:
    return f"/v1/transactions/{quote(transactional_id, safe='')}{action}"


def _produce_target(transactional_id: str, epoch: int, topic: str) -> str:
    query = urlencode({"transactional_id": transactional_id, "producer_epoch": epoch})
    return f"/v1/topics/{quote(topic, safe='')}/records?{query}"
