"""Broker: one node's storage and partition layer, started and stopped as a unit.

It opens the data directory, joins the cluster's metadata store (etcd, or memory for the
embedded single node), runs for the controller election, and keeps the replica manager and
the follower fetchers in step with the metadata. Nothing here knows HTTP; the gateway serves
what this holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from engine import producer_state
from engine.background import BackgroundTasks
from engine.config import TopicConfig
from engine.errors import InvalidConfig, TopicAlreadyExists
from engine.manager import LogManager
from engine.notify import ChangeNotifier
from engine.tiered.remote import RemoteStorage
from replication.controlled_shutdown import Handover, handover
from replication.controller import Controller
from replication.errors import ControllerNotAvailable, MetadataUnavailable, NotController
from replication.fetcher import FetcherSettings, ReplicaFetchers
from replication.memory_store import MemoryBackend, MemoryMetadataStore
from replication.metadata import (
    ClusterView,
    MetadataStore,
    NodeInfo,
    PartitionState,
    TopicPartition,
    TopicSpec,
)
from replication.placement import Plan
from replication.replica_client import ReplicaClient
from replication.replica_manager import ReplicaManager, ReplicationSettings
from replication.sibling_replicas import SiblingReplicas
from replication.tiering import TieringService, TieringSettings

log = logging.getLogger(__name__)
ENSURE_RECHECK_S = 5.0
METADATA_FILE = "metadata.json"  # a single node's subscriptions (its store is memory)
BALANCE_INTERVAL_S = 60.0  # how often the continuous balancer looks (--balance auto)


@dataclass(frozen=True)
class BrokerSettings:
    data_dir: Path
    file_cache_size: int | None = None  # closed segments' descriptors kept open; None: derived
    node_id: int = 0
    url: str = "http://127.0.0.1:8080"  # advertised to the other nodes
    rack: str | None = None  # where the node stands (KIP-36), for placement and fetching
    replica_lost_timeout_ms: int | None = None  # as controller: remove a node gone this long
    balance: bool = False  # as controller: balance continuously
    leader_imbalance_check_interval_ms: int = 30_000  # as controller: back to preferred leaders
    cluster: tuple[str, ...] = ()  # etcd endpoints; empty: the embedded single node
    etcd_prefix: str = "/sluice"
    lease_ttl_s: float = 3.0
    default_replication_factor: int | None = None  # None: 3, or the live nodes when fewer
    replication: ReplicationSettings = field(default_factory=ReplicationSettings)
    topic_wait_s: float = 10.0  # how long a topic change waits to reach this node's disk
    producer_id_expiration_ms: int = producer_state.EXPIRATION_MS  # producer.id.expiration.ms
    tiering: TieringSettings | None = None  # S3 for topics with remote.storage.enable
    authorization: str | None = None  # the Authorization header of calls to other nodes
    # The data directories of the other nodes on this host, by node id (sibling workers): this
    # node publishes its watermarks for them and reads the partitions they lead from there.
    siblings: dict[int, Path] = field(default_factory=dict)


class Broker:
    """The data directory, the metadata store, the controller and the replica manager."""

    def __init__(self, settings: BrokerSettings) -> None:
        self.settings = settings
        self._background: BackgroundTasks | None = None
        self._deletions: set[asyncio.Task[int]] = set()  # S3 objects of deleted topics

    async def open(self) -> None:
        """Open the logs and join the cluster's metadata; roles are taken up by start(), so
        the services over the partitions can register their listeners in between."""
        settings = self.settings
        self.manager = await asyncio.to_thread(
            LogManager,
            settings.data_dir,
            file_cache_size=settings.file_cache_size,
            publish_watermarks=bool(settings.siblings),
            producer_id_expiration_ms=settings.producer_id_expiration_ms,
        )
        report = self.manager.startup
        log.info("node %d: %s: %s", self.settings.node_id, self.settings.data_dir, report.summary())
        for r in report.truncated:  # the partitions checked intact are only counted above
            log.warning(
                "%s-%d: recovery cut %d bytes of a torn or corrupt tail (%d segments dropped) "
                "in %.2f s",
                r.topic,
                r.partition,
                r.truncated_bytes,
                r.segments_deleted,
                r.seconds,
            )
        for error in report.errors:
            log.warning("recovery: %s", error)
        self.notifier = ChangeNotifier()
        self.store = self._store()
        clean = self.manager.had_clean_shutdown
        node = NodeInfo(settings.node_id, settings.url, settings.rack)
        await self.store.start(node, clean_start=clean)
        lost_ms = settings.replica_lost_timeout_ms
        self.controller = Controller(
            self.store,
            settings.node_id,
            self.manager.defaults,
            replica_lost_timeout_s=None if lost_ms is None else lost_ms / 1000,
            balance_interval_s=BALANCE_INTERVAL_S if settings.balance else None,
            leader_imbalance_check_interval_s=settings.leader_imbalance_check_interval_ms / 1000,
        )
        if not settings.cluster:
            await self._adopt_local_topics()
        self.tiering = None
        if settings.tiering is not None:
            storage = RemoteStorage(settings.tiering.location)
            self.tiering = TieringService(storage, settings.tiering)
        self.replicas = ReplicaManager(
            self.manager,
            self.store,
            settings.node_id,
            self.notifier,
            settings.replication,
            self.tiering,
            report_offline=bool(settings.cluster),
        )
        if settings.siblings:
            self.replicas.siblings = SiblingReplicas(settings.siblings)
        self.client = ReplicaClient(authorization=settings.authorization)
        # A parked fetch must come back well within replica.lag.time.max.ms.
        wait_ms = min(FetcherSettings.wait_ms, settings.replication.replica_lag_time_max_ms // 3)
        self.fetchers = ReplicaFetchers(
            self.store,
            self.client,
            settings.node_id,
            FetcherSettings(wait_ms=wait_ms),
            self.tiering,
        )
        self.replicas.add_role_listener(self.fetchers.role_changed)

    async def start(self) -> None:
        """Run for controller, take up this node's roles, start the background jobs."""
        self.controller.start()
        await self.replicas.start()
        self._background = BackgroundTasks(self.manager)
        self._background.start()
        if self.tiering is not None:
            self.tiering.start(self.replicas.partitions, self._topic_id)

    async def ensure_topic(
        self,
        name: str,
        partitions: int,
        factor: int,
        configs: Mapping[str, object],
        min_live: int = 1,
    ) -> None:
        """Have an internal topic exist: whichever node is controller creates it once `factor`
        nodes (Kafka's offsets.topic.replication.factor) and `min_live` nodes (so that its
        partitions spread over them) are alive; returns once it exists."""
        node_id = self.settings.node_id
        needed = max(factor, min_live)

        def actionable(view: ClusterView) -> bool:
            return name in view.topics or (view.controller == node_id and len(view.live) >= needed)

        while name not in self.store.view.topics:
            if not await self.store.wait_for(actionable, ENSURE_RECHECK_S):
                continue
            with contextlib.suppress(TopicAlreadyExists, NotController, ControllerNotAvailable):
                if name not in self.store.view.topics:
                    await self.create_topic(name, partitions, factor, configs)

    def _store(self) -> MetadataStore:
        settings = self.settings
        if not settings.cluster:
            # The single node's subscriptions are kept beside its logs (the store is memory).
            state = Path(settings.data_dir) / METADATA_FILE
            return MemoryMetadataStore(MemoryBackend(state_file=state))
        from replication.etcd_store import EtcdMetadataStore

        return EtcdMetadataStore(
            settings.cluster, prefix=settings.etcd_prefix, lease_ttl_s=settings.lease_ttl_s
        )

    async def _adopt_local_topics(self) -> None:
        """A single node's topics live on its disk: publish them as the cluster of one's
        metadata, each partition led by this node in the epoch its log last recorded."""
        node_id = self.settings.node_id
        fence = await self.store.campaign()
        for topic in list(self.manager.topics.values()):
            spec = TopicSpec(topic.name, topic.topic_id, len(topic.partitions), 1, topic.overrides)
            states = [
                PartitionState(
                    node_id, max(log_.epoch_cache.latest_epoch, 0), (node_id,), (node_id,)
                )
                for log_ in topic.partitions
            ]
            await self.store.create_topic(fence, spec, states)

    async def bound(self, url: str) -> None:
        """The single node learned the URL it listens on (it may have asked for port 0); a
        cluster node advertises what it was told."""
        if not self.settings.cluster:
            await self.store.start(NodeInfo(self.settings.node_id, url, self.settings.rack))

    def _topic_id(self, name: str) -> str | None:
        spec = self.store.view.topics.get(name)
        return None if spec is None else spec.topic_id

    def stopping(self, bound_s: float) -> None:
        """The node is stopping: what it still asks the metadata store (leaving the election,
        the handover, the lease's revocation) ends within `bound_s`, and once the store is
        found unreachable nothing more is asked: the node hands nothing over and exits."""
        self.store.stopping(asyncio.get_running_loop().time() + bound_s)

    async def controlled_shutdown(self, timeout_s: float) -> Handover:
        """Kafka's controlled shutdown, while this node still serves: leave the controller
        election (a controller only once its own handover is done), mark this node shutting
        down, and wait (at most `timeout_s`) until the controller has moved each leadership and
        ISR membership it could to other in-sync replicas, so that stopping costs its clients
        nothing. Returns what is left here (and logs it)."""
        node_id = self.settings.node_id
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + timeout_s
        led = [tp for tp, s in self.store.view.partitions.items() if s.leader == node_id]
        if not self.is_controller:
            await self._leave_election()
        try:
            await self.store.begin_shutdown()
        except MetadataUnavailable as exc:
            log.warning(
                "node %d cannot announce its shutdown (%s): its partitions move when its lease "
                "goes",
                node_id,
                exc,
            )
            return handover(self.store.view, node_id)
        await self.store.wait_for(
            lambda view: handover(view, node_id).done,
            max(0.0, deadline - loop.time()),
        )
        view = self.store.view
        left = handover(view, node_id)
        moved = sum(1 for tp in led if (s := view.partitions.get(tp)) and s.leader != node_id)
        log.info(
            "node %d handed over %d of the %d leaderships it held in %.2f s",
            node_id,
            moved,
            len(led),
            loop.time() - started,
        )
        if left.kept:
            log.warning(
                "node %d keeps leading %d partitions no other in-sync replica can take (they "
                "are unavailable until it is back): %s",
                node_id,
                len(left.kept),
                _named(left.kept),
            )
        if not left.done:
            log.warning(
                "node %d: controlled shutdown timed out after %.1f s; %d partitions still led "
                "or in sync here move when its lease goes: %s",
                node_id,
                timeout_s,
                len(left.pending),
                _named(left.pending),
            )
        if self.is_controller:
            await self._leave_election()
            await self.store.wait_for(
                lambda view: view.controller != node_id, max(0.0, deadline - loop.time())
            )
        return left

    async def _leave_election(self) -> None:
        """Stop campaigning (or leading, as controller) and delete the election key, so that
        the next candidate takes the role while this node's lease still holds."""
        await self.controller.close()
        try:
            await self.store.resign()
        except MetadataUnavailable as exc:
            log.warning(
                "node %d: its election key goes with its lease (%s)", self.settings.node_id, exc
            )

    async def stop(self) -> None:
        """Leave the cluster, stop the background work, flush and close the logs."""
        self.notifier.wake_all()
        if self.tiering is not None:
            await self.tiering.close()
        for task in self._deletions:
            task.cancel()
        await self.fetchers.close()
        await self.replicas.close()
        await self.client.close()
        await self.controller.close()
        await self.store.close()
        if self._background is not None:
            await self._background.stop()
        await asyncio.to_thread(self.manager.close)

    # -- topic changes (the controller's; NotController elsewhere) ----------------------------

    @property
    def is_controller(self) -> bool:
        return self.store.view.controller == self.settings.node_id

    async def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int | None,
        configs: Mapping[str, object],
    ) -> TopicSpec:
        """Create a topic (as controller) and wait until this node holds its replicas."""
        self._check_controller()
        self._check_tiering(configs.get("remote.storage.enable"))
        factor = (
            replication_factor
            or self.settings.default_replication_factor
            or min(3, len(self.store.view.live))
        )
        spec = await self.controller.create_topic(name, partitions, factor, configs)
        await self._settled(spec.name)
        return self.replicas.topic(spec.name)

    async def alter_topic(
        self,
        name: str,
        partitions: int | None,
        configs: Mapping[str, object | None] | None,
    ) -> TopicSpec:
        self._check_controller()
        if configs is not None and "remote.storage.enable" in configs:
            self._check_tiering(configs["remote.storage.enable"], self.replicas.topic_config(name))
        spec = await self.controller.alter_topic(name, partitions=partitions, configs=configs)
        await self._settled(spec.name)
        return self.replicas.topic(spec.name)

    async def delete_topic(self, name: str) -> None:
        self._check_controller()
        tiered = self.replicas.topic_config(name).remote_storage_enable
        await self.controller.delete_topic(name)
        if tiered and self.tiering is not None:
            task = asyncio.create_task(self.tiering.delete_topic(name), name=f"s3-delete-{name}")
            self._deletions.add(task)
            task.add_done_callback(self._deletions.discard)
        await self.replicas.applied(
            lambda: name not in self.manager.topics, self.settings.topic_wait_s
        )

    # -- reassignment (the controller's, but for the throttle) ---------------------------------

    async def reassign(
        self, plan: Sequence[tuple[TopicPartition, Sequence[object]]]
    ) -> dict[TopicPartition, PartitionState]:
        """Start moving partitions to new replicas (as controller): all of the plan or none."""
        self._check_controller()
        return await self.controller.reassign(plan)

    async def cancel_reassignments(
        self, partitions: Sequence[TopicPartition] | None
    ) -> dict[TopicPartition, PartitionState]:
        """Put the partitions named (None: every moving one) back on their replicas."""
        self._check_controller()
        return await self.controller.cancel_reassignments(partitions)

    async def balance(self, *, dry_run: bool) -> Plan:
        """Plan (and unless `dry_run`, start) the moves that balance the nodes (as controller)."""
        self._check_controller()
        return await self.controller.balance(dry_run=dry_run)

    async def decommission(self, node: int, *, dry_run: bool) -> Plan:
        """Plan (and start) moving every replica off `node` (as controller)."""
        self._check_controller()
        return await self.controller.decommission(node, dry_run=dry_run)

    async def remove_node(self, node: int, *, dry_run: bool) -> Plan:
        """Plan (and start) re-creating a down node's replicas elsewhere (as controller)."""
        self._check_controller()
        return await self.controller.remove_node(node, dry_run=dry_run)

    async def set_reassignment_throttle(self, bytes_per_second: int | None) -> None:
        """Set (None: lift) the bytes/s each node sends to replicas reassignments add;
        returns once this node's view shows it."""
        if bytes_per_second is not None and (
            isinstance(bytes_per_second, bool)
            or not isinstance(bytes_per_second, int)
            or bytes_per_second < 1
        ):
            raise InvalidConfig(
                f"the reassignment throttle must be a positive number of bytes per second, "
                f"got {bytes_per_second!r}"
            )
        await self.store.set_reassignment_throttle(bytes_per_second)
        await self.store.wait_for(
            lambda view: view.reassignment_throttle == bytes_per_second, self.settings.topic_wait_s
        )

    def _check_tiering(self, value: object, current: TopicConfig | None = None) -> None:
        """remote.storage.enable needs a bucket, and once on stays on (Kafka's rule: turning
        it off would strand what S3 holds)."""
        wanted = (
            False
            if value is None
            else TopicConfig()
            .with_overrides({"remote.storage.enable": value})
            .remote_storage_enable
        )
        if wanted and self.tiering is None:
            raise InvalidConfig(
                "remote.storage.enable needs S3: start the nodes with --s3-bucket "
                "(and --s3-endpoint for a non-AWS endpoint)"
            )
        if current is not None and current.remote_storage_enable and not wanted:
            raise InvalidConfig(
                "remote.storage.enable cannot be turned off once on (S3 holds the topic's "
                "oldest records); delete the topic instead"
            )

    def _check_controller(self) -> None:
        if not self.is_controller:
            raise NotController(
                f"node {self.settings.node_id} is not the controller "
                f"(node {self.store.view.controller} is)"
            )

    async def _settled(self, name: str) -> None:
        """Wait until this node's disk matches the view for `name` (if it hosts it)."""

        def done() -> bool:
            view = self.store.view
            spec = view.topics.get(name)
            if spec is None:
                return True
            hosted = any(
                self.settings.node_id in state.replicas
                for (topic, _), state in view.partitions.items()
                if topic == name
            )
            local = self.manager.topics.get(name)
            if not hosted:
                return local is None
            return (
                local is not None
                and len(local.partitions) == spec.partitions
                and dict(local.overrides) == dict(spec.configs)
            )

        await self.replicas.applied(done, self.settings.topic_wait_s)


def _named(partitions: Sequence[TopicPartition], shown: int = 10) -> str:
    """`orders-0, orders-3 and 5 more`."""
    named = ", ".join(f"{topic}-{p}" for topic, p in partitions[:shown])
    return named + (f" and {len(partitions) - shown} more" if len(partitions) > shown else "")
