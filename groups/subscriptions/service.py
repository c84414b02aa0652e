"""A node's subscriptions: the catalogue (specs in the cluster's metadata store, beside the
topics: any node reads and writes them, every node sees them through its view) and the
dispatchers of the partitions this node leads.

Ownership: a partition is dispatched by its leader, the one node that serves its committed
records without a network hop and the one the cluster already keeps unique (epochs fence a
stale one). The service follows the partition layer's role changes and the store's view:
a dispatcher starts when this node becomes a partition's leader or a subscription appears,
and stops when leadership moves, the subscription is deleted or its delivery settings
change (the next one starts from the committed position). Pause and resume reach the running
dispatchers at once (the view's watch: well within a second)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Collection
from typing import Any
from urllib.parse import quote

import orjson

from engine.errors import EngineError, UnknownTopic
from engine.internal_topics import INTERNAL_TOPICS
from groups.coordinator import RecordDecoder
from groups.partition_reader import PartitionReader
from groups.share import state_topic
from groups.share.coordinator import ShareCoordinator
from groups.share.model import ShareRecord
from groups.subscriptions import spec as specs
from groups.subscriptions.client import DeliveryClient
from groups.subscriptions.dispatcher import (
    Counts,
    DeadLetterSink,
    LatencyHistogram,
    PartitionDispatcher,
    SchemaValues,
    Services,
)
from groups.subscriptions.endpoints import check_endpoint
from groups.subscriptions.errors import SubscriptionError
from groups.subscriptions.flow import FlowControl
from groups.subscriptions.positions import GroupPositions
from groups.subscriptions.queue_dispatcher import QueueDispatcher
from groups.subscriptions.replies import Transactions
from groups.subscriptions.reply_dispatcher import ReplyDispatcher
from groups.subscriptions.spec import Subscription
from replication.errors import NodeUnreachable, NotLeader
from replication.forward_client import ForwardClient
from replication.metadata import ClusterView, StoredSubscription
from replication.node_contract import SUBSCRIPTION_PARTITIONS_ROUTE
from replication.partition import Partition
from replication.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

MAX_SUBSCRIPTIONS = 10_000
CHANGE_ATTEMPTS = 5  # compare-and-set rounds a change makes against concurrent ones
VIEW_WAIT_S = 5.0  # a change is answered once this node's view shows it (bounded)
PEER_TIMEOUT_S = 2.0  # a node slower than this to report its partitions shows them unknown
POOL_LIMIT = 256  # connections to endpoints, all subscriptions of the node
POOL_LIMIT_PER_HOST = 64
CONNECT_TIMEOUT_S = 10.0
PAUSED_BY_USER = "paused through the API"
QUEUE_ROW = -1  # a queue-mode subscription's dispatcher, among partition rows


class SubscriptionService:
    """The catalogue and this node's dispatchers."""

    def __init__(
        self,
        replicas: ReplicaManager,
        forwarder: ForwardClient,
        positions: GroupPositions,
        dead_letter: DeadLetterSink,
        decode_json: RecordDecoder,
        schema_values: SchemaValues,
        share: ShareCoordinator,
        share_json: Callable[[ShareRecord], bytes],
        transactions: Transactions,
        allowed_hosts: Collection[str] = (),
    ) -> None:
        """`share` and `share_json`: the share groups queue-mode subscriptions acquire from,
        and how a record they acquire is written in the `json` format; `transactions`, the
        calls reply subscriptions commit their replies with."""
        self.replicas = replicas
        self.share = share
        self.share_json = share_json
        # Queue-mode subscriptions whose share group this node coordinates, by name.
        self.queues: dict[str, QueueDispatcher] = {}
        self.store = replicas.store
        self.forwarder = forwarder
        self.positions = positions
        self.allowed_hosts = frozenset(h.lower() for h in allowed_hosts)
        self.subscriptions: dict[str, Subscription] = {}
        self.dispatchers: dict[tuple[str, int], PartitionDispatcher] = {}
        self.counts: dict[tuple[str, int], Counts] = {}
        self.flows: dict[str, FlowControl] = {}  # by subscription: its partitions here share it
        self._parsed: dict[str, StoredSubscription] = {}
        self._reconciling: asyncio.Task[None] | None = None
        self._again = False
        self._closed = False
        self.services = Services(
            reader=PartitionReader(replicas, forwarder),
            positions=positions,
            dead_letter=dead_letter,
            decode_json=decode_json,
            schema_values=schema_values,
            client=DeliveryClient(
                self.allowed_hosts, CONNECT_TIMEOUT_S, POOL_LIMIT, POOL_LIMIT_PER_HOST
            ),
            set_paused=self._paused_by_endpoint,
            transactions=transactions,
        )

    @property
    def latency(self) -> dict[str, LatencyHistogram]:
        return self.services.latency

    # -- following the cluster -----------------------------------------------------------------

    def start(self) -> None:
        """Follow the store's view and this node's roles from now on."""
        self.store.add_listener(self._view_changed)
        self.replicas.add_role_listener(self._role_changed)
        self.share.listeners.add(self._reconcile)
        self._view_changed(self.store.view)

    async def close(self) -> None:
        self._closed = True
        self.store.remove_listener(self._view_changed)
        if self._reconciling is not None:
            self._reconciling.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reconciling
        await asyncio.gather(*(d.stop() for d in self.dispatchers.values()))
        await asyncio.gather(*(q.stop() for q in self.queues.values()))
        self.dispatchers.clear()
        self.queues.clear()
        await self.services.client.close()

    def _view_changed(self, view: ClusterView) -> None:
        fresh: dict[str, Subscription] = {}
        for name, stored in view.subscriptions.items():
            known = self._parsed.get(name)
            current = self.subscriptions.get(name)
            if known == stored and current is not None:
                fresh[name] = current
                continue
            try:
                fresh[name] = specs.loaded(stored.document, stored.version)
            except (SubscriptionError, ValueError, KeyError, TypeError) as exc:
                log.warning("ignoring unreadable subscription %r: %r", name, exc)
                continue
            self._parsed[name] = stored
        for name in set(self._parsed) - set(view.subscriptions):
            del self._parsed[name]
        self.subscriptions = fresh
        self._reconcile()

    async def _role_changed(self, partition: Partition) -> None:
        if (
            any(s.topic == partition.topic for s in self.subscriptions.values())
            or partition.topic == state_topic.STATE_TOPIC
        ):
            self._reconcile()

    def _reconcile(self) -> None:
        """Bring the dispatchers in line with the view (one pass at a time; a change during a
        pass makes another)."""
        if self._closed:
            return
        if self._reconciling is not None and not self._reconciling.done():
            self._again = True
            return
        self._reconciling = asyncio.create_task(self._reconcile_passes())

    async def _reconcile_passes(self) -> None:
        self._again = True
        while self._again and not self._closed:
            self._again = False
            await self._reconcile_once()

    async def _reconcile_once(self) -> None:
        wanted: dict[tuple[str, int], Subscription] = {}
        topics = self.store.view.topics
        queues: dict[str, Subscription] = {}
        for sub in self.subscriptions.values():
            topic = topics.get(sub.topic)
            if topic is None:
                continue
            if sub.mode == "queue":
                if self.share.coordinates(sub.group):
                    queues[sub.name] = sub
                continue
            for p in range(topic.partitions):
                if self.replicas.leading(sub.topic, p) is not None:
                    wanted[(sub.name, p)] = sub
        stopping: list[PartitionDispatcher | QueueDispatcher] = []
        for key, dispatcher in list(self.dispatchers.items()):
            want = wanted.get(key)
            if (
                want is None
                or want.uid != dispatcher.sub.uid
                or not want.same_delivery(dispatcher.sub)
            ):
                stopping.append(self.dispatchers.pop(key))
            elif want.version != dispatcher.sub.version:
                dispatcher.set_paused(want)  # paused, or resumed (a stopped partition too)
        for name, queue in list(self.queues.items()):
            want = queues.get(name)
            if want is None or want.uid != queue.sub.uid or not want.same_delivery(queue.sub):
                stopping.append(self.queues.pop(name))
            elif want.version != queue.sub.version:
                queue.set_paused(want)
        await asyncio.gather(*(d.stop() for d in stopping))
        for name, sub in queues.items():
            if name not in self.queues:
                counts = self.counts.setdefault((name, -1), Counts())
                self.queues[name] = QueueDispatcher(
                    self.services, self.share, self.share_json, sub, counts, self._flow(sub)
                )
        for key, sub in wanted.items():
            if key not in self.dispatchers:
                counts = self.counts.setdefault(key, Counts())
                flow = self._flow(sub)
                kind = PartitionDispatcher if sub.reply is None else ReplyDispatcher
                self.dispatchers[key] = kind(self.services, sub, key[1], counts, flow)
        for name in set(self.flows) - {n for n, _ in self.dispatchers} - set(self.queues):
            del self.flows[name]
        for key in set(self.counts) - {(n, p) for n, p in self.counts if n in self.subscriptions}:
            del self.counts[key]
        for name in set(self.latency) - set(self.subscriptions):
            del self.latency[name]

    def _flow(self, sub: Subscription) -> FlowControl:
        """The subscription's flow control on this node: kept while its settings hold (a
        dispatcher restarted for another reason keeps the limit learnt)."""
        flow = self.flows.get(sub.name)
        if flow is None or not flow.fits(sub):
            flow = self.flows[sub.name] = FlowControl(sub, asyncio.get_running_loop().time())
        return flow

    # -- the catalogue -------------------------------------------------------------------------

    def get(self, name: str) -> Subscription:
        """A subscription as this node's view has it; UNKNOWN_SUBSCRIPTION if none."""
        stored = self.store.view.subscriptions.get(name)
        if stored is None:
            raise SubscriptionError("UNKNOWN_SUBSCRIPTION", f"subscription {name!r} does not exist")
        known = self.subscriptions.get(name)
        if known is not None and known.version == stored.version:
            return known
        return specs.loaded(stored.document, stored.version)

    def check(self, sub: Subscription) -> None:
        """What a stored subscription must satisfy: an allowed endpoint, existing topics."""
        check_endpoint(sub.endpoint, self.allowed_hosts)
        self.replicas.topic(sub.topic)
        if sub.dead_letter_topic is not None:
            if sub.dead_letter_topic == sub.topic:
                raise SubscriptionError(
                    "INVALID_SUBSCRIPTION",
                    "the dead-letter topic must not be the subscription's own topic",
                    pointer="/dead_letter_topic",
                )
            if sub.dead_letter_topic in INTERNAL_TOPICS:
                raise SubscriptionError(
                    "INVALID_SUBSCRIPTION",
                    "the dead-letter topic must not be an internal topic",
                    pointer="/dead_letter_topic",
                )
            self.replicas.topic(sub.dead_letter_topic)
        if sub.reply is not None:
            self._check_reply_topic(sub.reply.topic)

    def _check_reply_topic(self, topic: str) -> None:
        """A reply topic is written in transactions: a topic of the cluster's, not internal,
        not compacted (a compacted topic refuses transactional records)."""
        if topic in INTERNAL_TOPICS:
            raise SubscriptionError(
                "INVALID_SUBSCRIPTION",
                "the reply topic must not be an internal topic",
                pointer="/reply/topic",
            )
        self.replicas.topic(topic)
        if self.replicas.topic_config(topic).compact:
            raise SubscriptionError(
                "INVALID_SUBSCRIPTION",
                "the reply topic must not be compacted: replies are written in transactions, "
                "which a compacted topic refuses",
                pointer="/reply/topic",
            )

    async def create(self, doc: dict[str, Any]) -> Subscription:
        """Store a new subscription (SUBSCRIPTION_EXISTS if the name is taken)."""
        sub = specs.parse(doc, uid=specs.new_uid())
        self.check(sub)
        if len(self.store.view.subscriptions) >= MAX_SUBSCRIPTIONS:
            raise SubscriptionError(
                "INVALID_SUBSCRIPTION", f"at most {MAX_SUBSCRIPTIONS} subscriptions", pointer=""
            )
        version = await self.store.put_subscription(sub.name, specs.stored(sub), 0)
        if version is None:
            raise SubscriptionError(
                "SUBSCRIPTION_EXISTS", f"subscription {sub.name!r} already exists"
            )
        await self._seen(sub.name, version)
        return self.get(sub.name)

    async def update(self, name: str, patch: dict[str, Any]) -> Subscription:
        """Apply a merge patch, compare-and-set against concurrent changes."""
        for _ in range(CHANGE_ATTEMPTS):
            current = self.get(name)
            new = specs.patched(current, patch)
            self.check(new)
            version = await self.store.put_subscription(name, specs.stored(new), current.version)
            if version is not None:
                await self._seen(name, version)
                return self.get(name)
            await self._caught_up(name, current.version)
        raise SubscriptionError(
            "SUBSCRIPTION_CHANGED", f"subscription {name!r} keeps changing; try again"
        )

    async def pause(self, name: str) -> Subscription:
        return await self.update(name, {"paused": True, "pause_reason": PAUSED_BY_USER})

    async def resume(self, name: str) -> Subscription:
        return await self.update(name, {"paused": False})

    async def delete(self, name: str) -> None:
        """Remove the subscription, then forget its group's offsets once this node's own
        dispatchers have stopped (others stop as their view follows; their late commits are
        refused or erased at the coordinator: positions.py)."""
        sub = self.get(name)
        if not await self.store.delete_subscription(name):
            raise SubscriptionError("UNKNOWN_SUBSCRIPTION", f"subscription {name!r} does not exist")
        await self.store.wait_for(lambda v: name not in v.subscriptions, VIEW_WAIT_S)
        if self._reconciling is not None:
            await asyncio.shield(self._reconciling)
        try:
            await self.positions.forget(sub)
        except SubscriptionError as exc:  # the coordinator's view lags: retention removes them
            log.warning("subscription %r deleted, its positions kept: %s", name, exc)

    async def _paused_by_endpoint(self, name: str, reason: str) -> None:
        """A dispatcher met 410 Gone: pause the whole subscription with that reason."""
        with contextlib.suppress(SubscriptionError):
            await self.update(name, {"paused": True, "pause_reason": reason})

    async def _seen(self, name: str, version: int) -> None:
        """Wait (bounded) until this node's view has the change it just made."""

        def seen(view: ClusterView) -> bool:
            stored = view.subscriptions.get(name)
            return stored is not None and stored.version >= version

        await self.store.wait_for(seen, VIEW_WAIT_S)

    async def _caught_up(self, name: str, version: int) -> None:
        def newer(view: ClusterView) -> bool:
            stored = view.subscriptions.get(name)
            return stored is None or stored.version != version

        await self.store.wait_for(newer, VIEW_WAIT_S)

    # -- descriptions --------------------------------------------------------------------------

    def local_partitions(self, name: str) -> list[dict[str, Any]]:
        """This node's dispatchers of the subscription, as description rows (a queue-mode
        subscription's one dispatcher as partition -1)."""
        queue = self.queues.get(name)
        if queue is not None:
            return [queue.status() | {"partition": QUEUE_ROW}]
        return [d.status() for (n, _), d in sorted(self.dispatchers.items()) if n == name]

    async def _describe_queue(self, sub: Subscription, doc: dict[str, Any]) -> dict[str, Any]:
        """A queue-mode subscription's description: its dispatcher's row, from the node that
        coordinates its share group."""
        rows = self.local_partitions(sub.name)
        if not rows:
            try:
                self.share.log.coordinator(sub.group)
            except NotLeader as exc:
                if exc.leader is not None:
                    rows = await self._peer_rows(exc.leader, sub.name)
            except EngineError:
                pass
        queue = next((r for r in rows if r.get("partition") == QUEUE_ROW), None)
        doc["partitions"] = []
        doc["queue"] = (
            None if queue is None else {k: v for k, v in queue.items() if k != "partition"}
        )
        doc["state"] = "paused" if sub.paused else ("unknown" if queue is None else "running")
        for total in ("delivered", "retried", "dead_lettered", "in_flight"):
            doc[total] = 0 if queue is None else int(queue.get(total) or 0)
        doc["lag"] = None
        return doc

    async def describe(self, name: str) -> dict[str, Any]:
        """The subscription (secrets masked), its state, and a row per partition from the
        node dispatching it."""
        sub = self.get(name)
        doc = specs.public_view(sub)
        if sub.mode == "queue":
            return await self._describe_queue(sub, doc)
        try:
            count = self.replicas.topic(sub.topic).partitions
        except UnknownTopic:
            count = 0
        rows: dict[int, dict[str, Any]] = {r["partition"]: r for r in self.local_partitions(name)}
        elsewhere: dict[int, list[int]] = {}
        for p in range(count):
            if p in rows:
                continue
            state = self.store.view.partition(sub.topic, p)
            leader = None if state is None else state.leader
            if leader is not None and leader != self.replicas.node_id:
                elsewhere.setdefault(leader, []).append(p)
        answers = await asyncio.gather(*(self._peer_rows(n, name) for n in elsewhere))
        for found in answers:
            rows.update({r["partition"]: r for r in found})
        doc["partitions"] = [rows.get(p, _unknown(p)) for p in range(count)]
        doc["state"] = _overall(sub, doc["partitions"], count)
        for total in ("delivered", "retried", "dead_lettered", "in_flight"):
            doc[total] = sum(int(r.get(total) or 0) for r in doc["partitions"])
        lags = [r["lag"] for r in doc["partitions"] if r.get("lag") is not None]
        doc["lag"] = sum(lags) if lags else None
        return doc

    async def _peer_rows(self, node_id: int, name: str) -> list[dict[str, Any]]:
        node = self.store.view.nodes.get(node_id)
        if node is None:
            return []
        path = SUBSCRIPTION_PARTITIONS_ROUTE.format(name=quote(name, safe=""))
        try:
            async with asyncio.timeout(PEER_TIMEOUT_S):
                answer = await self.forwarder.forward(node.url, "GET", path, {}, b"")
        except (NodeUnreachable, TimeoutError):
            return []
        if answer.status != 200:
            return []
        rows = orjson.loads(answer.body).get("partitions", [])
        return [r for r in rows if isinstance(r, dict) and isinstance(r.get("partition"), int)]

    def summaries(self) -> list[dict[str, Any]]:
        """Every subscription in the cluster (from the view), secrets masked, with this
        node's partitions' states."""
        out = []
        for name in sorted(self.store.view.subscriptions):
            try:
                sub = self.get(name)
            except (SubscriptionError, ValueError, KeyError):
                continue
            out.append(specs.public_view(sub) | {"state": "paused" if sub.paused else "active"})
        return out


def _unknown(partition: int) -> dict[str, Any]:
    """A partition whose dispatcher did not report (its leader is down or being elected)."""
    return {"partition": partition, "state": "unknown", "committed_offset": None, "lag": None,
            "in_flight": 0, "attempts": 0, "delivered": 0, "retried": 0, "dead_lettered": 0,
            "last_error": None, "high_watermark": None}  # fmt: skip


def _overall(sub: Subscription, rows: list[dict[str, Any]], count: int) -> str:
    """paused, stopped (some partition stopped on a record), failing (some partition is
    retrying), running, or unknown (no partition reported)."""
    if sub.paused:
        return "paused"
    states = {r["state"] for r in rows}
    if "stopped" in states:
        return "stopped"
    if "failing" in states:
        return "failing"
    if count and states == {"unknown"}:
        return "unknown"
    return "running"
