"""The gateway's shared state, reachable from every handler through the Application, and how
it is opened and closed (plain asyncio: nothing here needs aiohttp's server)."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web

from engine import batch as fmt
from engine import offsets_topic
from engine.errors import EngineError
from engine.notify import ChangeNotifier
from engine.producer_state import ProducerIdentity
from engine.tiered.remote import S3Location
from gateway.auth.service import AuthService
from gateway.formats import codecs
from gateway.formats.decoded import SubscriptionValues
from gateway.formats.share_records import share_record_json
from gateway.metrics.collectors import ForwardedCollector, Metrics
from gateway.metrics.quotas import QuotaCollector
from gateway.metrics.share_groups import ShareGroupCollector
from gateway.metrics.subscriptions import SubscriptionCollector
from gateway.metrics.transactions import TransactionCollector
from gateway.produce.front import Producer, ProduceRequest
from gateway.produce.idempotency import InFlight
from gateway.produce.partitioner import partition_for_key
from gateway.reply_transactions import OwnApiTransactions, ReplyTransactions
from gateway.settings import Settings
from gateway.worker_dirs import sibling_data_dirs
from groups.coordinator import GroupCoordinator
from groups.errors import GroupError
from groups.partition_reader import PartitionReader
from groups.share import state_topic
from groups.share.coordinator import ShareCoordinator
from groups.subscriptions.positions import GroupPositions
from groups.subscriptions.service import SubscriptionService
from groups.transactions import state_topic as txn_state_topic
from groups.transactions.coordinator import TransactionCoordinator
from groups.transactions.group_offsets import TransactionOffsets
from replication.acks import Acks
from replication.broker import Broker, BrokerSettings
from replication.errors import NotController
from replication.forward_client import ForwardClient
from replication.markers import MarkerWriter
from replication.replica_manager import ReplicaManager, ReplicationSettings
from replication.tiering import TieringSettings
from schemas import records as schema_records
from schemas.decoding import ValueDecoder
from schemas.store import SchemaStore

log = logging.getLogger(__name__)


@dataclass
class Gateway:
    """Everything a request handler needs; built at startup, closed at cleanup."""

    settings: Settings
    broker: Broker
    metrics: Metrics
    producer: Producer
    groups: GroupCoordinator
    forwarder: ForwardClient
    auth: AuthService
    subscriptions: SubscriptionService
    schemas: SchemaStore
    value_decoder: ValueDecoder  # record values read with the registry, for readers that ask
    share_groups: ShareCoordinator
    transactions: TransactionCoordinator
    ready: bool = False
    port: int = 0  # the bound port, once listening (settings.port may be 0)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    # Set when shutdown drains the connections: reads forwarded elsewhere stop waiting
    draining: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def replicas(self) -> ReplicaManager:
        return self.broker.replicas

    @property
    def notifier(self) -> ChangeNotifier:
        return self.broker.notifier

    @classmethod
    async def open(cls, settings: Settings) -> Gateway:
        """Open the broker, build the domain services over it (groups, idempotency), then let
        the broker take up its roles, which the services follow from the first one."""
        auth = await AuthService.open(settings)
        broker = Broker(broker_settings(settings, auth.authorization))
        try:
            await broker.open()
        except BaseException:
            await auth.close()
            raise
        replicas = broker.replicas
        forwarder = ForwardClient(
            settings.node_id,
            authorization=auth.authorization,
            answer_timeout_s=settings.forward_timeout_ms / 1000,
        )
        groups = GroupCoordinator(
            replicas,
            forwarder,
            settings.group_max_members,
            codecs.fetched_records,
        )
        share_groups = ShareCoordinator(
            replicas,
            PartitionReader(replicas, forwarder),
            settings.group_max_members,
            settings.default_produce_timeout_ms,
        )
        markers = MarkerWriter(replicas, forwarder)
        txn_offsets = TransactionOffsets(groups, forwarder, settings.default_produce_timeout_ms)
        transactions = TransactionCoordinator(
            replicas,
            lambda partitions, pid, epoch, commit, ce: markers.write_all(
                partitions, ProducerIdentity(pid, epoch), commit, ce
            ),
            txn_offsets.commit,
            txn_offsets.check_generation,
            settings.default_produce_timeout_ms,
            abort_interval_ms=settings.transaction_abort_interval_ms,
        )
        in_flight = InFlight()
        replicas.add_role_listener(groups.role_changed)
        replicas.add_role_listener(share_groups.role_changed)
        replicas.add_role_listener(transactions.role_changed)
        replicas.add_topics_listener(lambda deleted: _topics_changed(groups, deleted))
        replicas.add_topics_listener(share_groups.topics_changed)
        await broker.start()
        await groups.loaded()
        metrics = Metrics(lambda: replicas, lambda: broker.notifier, lambda: groups)
        metrics.registry.register(QuotaCollector(lambda: auth.quotas))
        metrics.registry.register(ShareGroupCollector(lambda: share_groups))
        metrics.registry.register(TransactionCollector(lambda: transactions))
        producer = Producer(
            replicas, metrics, in_flight, forwarder, keyless_led_here=settings.workers > 1
        )
        schemas = SchemaStore(
            replicas, PartitionReader(replicas, forwarder), settings.leader_wait_ms
        )
        value_decoder = ValueDecoder(lambda: schemas.state, schemas.synced)
        subscriptions = SubscriptionService(
            replicas,
            forwarder,
            GroupPositions(groups, forwarder, settings.default_produce_timeout_ms),
            functools.partial(_dead_letter, producer, settings),
            codecs.fetched_records,
            SubscriptionValues(value_decoder),
            share_groups,
            share_record_json,
            ReplyTransactions(
                transactions,
                producer,
                OwnApiTransactions(forwarder, broker, settings.node_id),
                auth=settings.auth,
                timeout_ms=settings.default_produce_timeout_ms,
            ),
            settings.subscription_allowed_hosts,
        )
        gateway = cls(
            settings=settings,
            broker=broker,
            metrics=metrics,
            producer=producer,
            groups=groups,
            forwarder=forwarder,
            auth=auth,
            subscriptions=subscriptions,
            schemas=schemas,
            value_decoder=value_decoder,
            share_groups=share_groups,
            transactions=transactions,
        )
        producer.registry = lambda: gateway.schemas.state
        producer.registry_synced = gateway.schemas.synced
        metrics.registry.register(ForwardedCollector(gateway.producer.appender.forwarded))
        metrics.registry.register(SubscriptionCollector(lambda: gateway.subscriptions))
        offsets = broker.ensure_topic(
            offsets_topic.OFFSETS_TOPIC,
            settings.offsets_topic_partitions,
            settings.offsets_topic_replication_factor if settings.cluster else 1,
            offsets_topic.TOPIC_CONFIGS,
            min_live=settings.workers,  # workers: the groups' coordinators spread over all
        )
        if settings.cluster:
            gateway.tasks.add(asyncio.create_task(offsets))
        else:
            await offsets
            await groups.loaded()
        schemas_topic = broker.ensure_topic(
            schema_records.TOPIC,
            1,
            settings.schemas_topic_replication_factor if settings.cluster else 1,
            schema_records.TOPIC_CONFIGS,
        )
        if settings.cluster:
            gateway.tasks.add(asyncio.create_task(schemas_topic))
        else:
            await schemas_topic
        gateway.schemas.start()
        gateway.tasks.add(asyncio.create_task(_expire_offsets(groups, settings)))
        subscriptions.start()
        keys = sum(len(p.idempotency) for p in replicas.partitions.values())
        log.info("%d idempotency keys restored, %d groups", keys, len(groups.groups))
        return gateway

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.schemas.close()
        await self.subscriptions.close()
        self.share_groups.close()
        self.transactions.close()
        self.groups.flush()
        await self.producer.appender.forwarded.close()
        await self.forwarder.close()
        await self.broker.stop()
        await self.auth.close()

    async def share_groups_ready(self) -> ShareCoordinator:
        """The share-group coordinator, once `__share_group_state` exists (made at the first
        share group's first call, as Kafka makes it) and the partitions led here are loaded."""
        await self._state_topic_ready(
            state_topic.STATE_TOPIC, state_topic.TOPIC_CONFIGS, self.share_groups.loaded
        )
        return self.share_groups

    async def transactions_ready(self) -> TransactionCoordinator:
        """The transaction coordinator, once `__transaction_state` exists (made at the first
        transactional call, as Kafka makes it) and the partitions led here are loaded."""
        await self._state_topic_ready(
            txn_state_topic.STATE_TOPIC, txn_state_topic.TOPIC_CONFIGS, self.transactions.loaded
        )
        return self.transactions

    async def _state_topic_ready(
        self,
        topic: str,
        configs: dict[str, object],
        loaded: Callable[[float | None], Awaitable[None]],
    ) -> None:
        """Make a coordinator's internal state topic if it does not exist yet, then wait for
        the replays of its partitions led here (those under way when it exists: a node that
        just started, or took a partition over, answers its groups once it has replayed them,
        not 503 while it does; at most `leader_wait_ms`, as a produce waits for a leader).
        Only the controller makes it: another node sends that first call there."""
        store = self.broker.store
        view = store.view
        settings = self.settings
        # Made by the controller a moment ago, the topic may be in the store before it is in
        # this node's view (a call forwarded here by a node whose view has it): wait for the
        # view, bounded, rather than send the call back as misdirected.
        if (
            topic not in view.topics
            and view.controller != settings.node_id
            and await store.topic_exists(topic)
        ):
            await store.wait_for(lambda v: topic in v.topics, settings.leader_wait_ms / 1000)
            view = store.view
        if topic in view.topics:
            await loaded(settings.leader_wait_ms / 1000)  # still replaying after: 503, retry
            return
        if view.controller != settings.node_id:
            raise NotController(
                f"{topic} does not exist yet; the controller (node {view.controller}) makes it"
            )
        factor = settings.offsets_topic_replication_factor if settings.cluster else 1
        if len(view.live) < factor:
            raise _state_topic_unavailable(
                topic,
                f"{len(view.live)} nodes are alive, fewer than its replication factor "
                f"({factor}, --offsets-topic-replication-factor)",
            )
        try:
            async with asyncio.timeout(settings.leader_wait_ms / 1000):
                await self.broker.ensure_topic(
                    topic, settings.offsets_topic_partitions, factor, _for_replicas(configs, factor)
                )
        except TimeoutError:
            raise _state_topic_unavailable(
                topic, f"it was not made within {settings.leader_wait_ms} ms"
            ) from None
        await loaded(None)

    async def reload(self) -> None:
        """SIGHUP: what the auth settings name is read again; calls to other nodes carry the
        (possibly new) first internal key."""
        await self.auth.reload()
        self.forwarder.authorization = self.broker.client.authorization = self.auth.authorization


def _state_topic_unavailable(topic: str, why: str) -> GroupError:
    """503 COORDINATOR_NOT_AVAILABLE with Retry-After (not a gateway timeout): no group of a
    coordinator can be served until its state topic exists."""
    return GroupError(
        "COORDINATOR_NOT_AVAILABLE",
        f"the {topic} topic cannot be made yet: {why}; retry once enough nodes are alive",
    )


def _for_replicas(configs: dict[str, object], factor: int) -> dict[str, object]:
    """A coordinator topic's configs for `factor` replicas: its min.insync.replicas no more
    than the replicas (Kafka's 2 would refuse every write of a single node's one)."""
    wanted = configs.get("min.insync.replicas")
    if not isinstance(wanted, int) or wanted <= factor:
        return configs
    return {**configs, "min.insync.replicas": factor}


async def _expire_offsets(groups: GroupCoordinator, settings: Settings) -> None:
    """Kafka's offsets retention: every check interval, drop old offsets of empty groups."""
    retention_ms = settings.offsets_retention_minutes * 60_000
    while True:
        await asyncio.sleep(settings.offsets_retention_check_interval_ms / 1000)
        try:
            groups.expire_offsets(int(time.time() * 1000), retention_ms)
        except EngineError as exc:  # the offsets partition refused the write: next time
            log.warning("offsets retention pass failed: %s", exc)


async def _dead_letter(
    producer: Producer,
    settings: Settings,
    topic: str,
    records: list[tuple[bytes | None, bytes | None, fmt.Headers]],
) -> None:
    """A subscription's dead letters, produced with acks=all: a keyed record to its key's
    partition (Kafka's default partitioner), the others to partition 0; one request each
    partition."""
    partitions = producer.replicas.topic(topic).partitions
    by_partition: dict[int, list[fmt.RecordInput]] = {}
    for key, value, headers in records:
        p = 0 if key is None else partition_for_key(key, partitions)
        by_partition.setdefault(p, []).append(fmt.RecordInput(key, value, headers, None))
    for p, batch in sorted(by_partition.items()):
        request = ProduceRequest(
            topic=topic,
            partition=p,
            acks=Acks.ALL,
            timeout_ms=settings.default_produce_timeout_ms,
            content_type=codecs.RECORD_BATCH,
            body=bytes(fmt.encode_batch(batch)),
            key=None,
            idempotency_key=None,
            target=f"/v1/topics/{topic}/partitions/{p}/records",
        )
        await producer.produce(request)


def _topics_changed(groups: GroupCoordinator, deleted: set[str]) -> None:
    for name in deleted:
        groups.topics_changed(deleted=name)
    groups.topics_changed()


def broker_settings(settings: Settings, authorization: str | None = None) -> BrokerSettings:
    return BrokerSettings(
        data_dir=settings.data_dir,
        file_cache_size=settings.file_cache_size,
        node_id=settings.node_id,
        url=settings.advertise or f"http://{settings.host}:{settings.port}",
        rack=settings.rack,
        replica_lost_timeout_ms=settings.replica_lost_timeout_ms,
        balance=settings.balance == "auto",
        leader_imbalance_check_interval_ms=settings.leader_imbalance_check_interval_ms,
        cluster=settings.cluster,
        etcd_prefix=settings.etcd_prefix,
        lease_ttl_s=settings.lease_ttl_s,
        default_replication_factor=settings.default_replication_factor,
        producer_id_expiration_ms=settings.producer_id_expiration_ms,
        replication=ReplicationSettings(
            replica_lag_time_max_ms=settings.replica_lag_time_max_ms,
            leader_wait_ms=settings.leader_wait_ms,
            idempotency_window_s=settings.idempotency_window_s,
            idempotency_max_entries=settings.idempotency_max_entries,
        ),
        tiering=None
        if settings.s3_bucket is None
        else TieringSettings(
            S3Location(settings.s3_endpoint, settings.s3_bucket, settings.s3_prefix),
            interval_s=settings.tiering_interval_s,
        ),
        authorization=authorization,
        siblings=sibling_data_dirs(settings),
    )


GATEWAY = web.AppKey("gateway", Gateway)
SETTINGS = web.AppKey("settings", Settings)


def gateway_of(request: web.Request) -> Gateway:
    return request.app[GATEWAY]
