"""Cluster metadata in etcd: nodes registered under a lease, controller election by lowest
create revision, topics and partition states, nodes' offline reports and recovering replicas'
log ends, push subscriptions; one watch keeps the published view current."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import functools
import logging
import math
import uuid
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from typing import TypeVar

import msgspec

from engine.errors import TopicAlreadyExists, UnknownTopic
from replication.errors import FencedController, MetadataUnavailable
from replication.etcd_client import (
    Compare,
    Delete,
    EtcdClient,
    Events,
    Get,
    KeyValue,
    LeaseNotFound,
    Put,
    Snapshot,
    TxnResult,
    WatchUpdate,
    prefix_end,
)
from replication.metadata import (
    MAX_PARTITIONS_PER_WRITE,
    ClusterView,
    Fence,
    LogEnd,
    MetadataStore,
    NodeInfo,
    PartitionState,
    StoredSubscription,
    TopicPartition,
    TopicSpec,
)

log = logging.getLogger(__name__)

REPORT_RETRY_S = 0.1  # the first pause before writing the offline report again; doubles
REPORT_RETRY_MAX_S = 2.0
MAX_PUTS_PER_TXN = 100  # a topic's partition records per transaction (and the fence, a guard)
_T = TypeVar("_T")


class _NodeRecord(msgspec.Struct, omit_defaults=True):
    node_id: int
    url: str
    rack: str | None = None


class _IncarnationRecord(msgspec.Struct):
    """incarnations/<id>: written once per process start; its mod revision is the broker epoch."""

    clean_start: bool


class _TopicRecord(msgspec.Struct):
    topic_id: str
    partitions: int
    replication_factor: int
    configs: dict[str, object]


class _PartitionRecord(msgspec.Struct, omit_defaults=True):
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    recovering: tuple[int, ...] = ()
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()
    original: tuple[int, ...] = ()
    elr: tuple[int, ...] = ()


class _LogEndRecord(msgspec.Struct):
    """log_ends/<topic>/<partition>/<node>: a recovering replica's log end (LogEnd)."""

    leader_epoch: int
    end_offset: int
    incarnation: int


def _split_for_topic(puts: list[Put]) -> tuple[list[list[Put]], list[Put]]:
    """A topic's partition writes as batches to store before its record, and the rest, to
    store with it: each transaction within etcd's default --max-txn-ops (128) and far below its
    request size limit (1.5 MiB). The topic record is the commit point: the view shows no
    partition of a topic without its record, nor past its count (a creation cut short leaves
    keys nobody sees, overwritten when the name is created or grown again)."""
    cut = len(puts) // MAX_PUTS_PER_TXN * MAX_PUTS_PER_TXN
    before = [puts[i : i + MAX_PUTS_PER_TXN] for i in range(0, cut, MAX_PUTS_PER_TXN)]
    return before, puts[cut:]


def _new_cluster_id() -> str:
    """A random id in Kafka's format: a UUID as unpadded URL-safe base64."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def _partition_state(kv: KeyValue) -> PartitionState:
    record = msgspec.json.decode(kv.value, type=_PartitionRecord)
    return PartitionState(
        leader=record.leader,
        leader_epoch=record.leader_epoch,
        replicas=record.replicas,
        isr=record.isr,
        recovering=record.recovering,
        adding=record.adding,
        removing=record.removing,
        original=record.original,
        elr=record.elr,
        version=kv.mod_revision,
    )


class EtcdMetadataStore(MetadataStore):
    """The metadata store of a real cluster, under `prefix` in etcd.

    Layout: cluster_id, nodes/<id> (permanent), live/<id>, offline/<id> and
    controller/<lease hex> (under this node's lease), topics/<name>, partitions/<name>/<p>,
    log_ends/<name>/<p>/<id>, subscriptions/<name>; versions are mod revisions."""

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        prefix: str = "/sluice",
        lease_ttl_s: float = 3.0,
        cluster_id: str | None = None,
    ) -> None:
        super().__init__(
            ClusterView(
                cluster_id=cluster_id or "",
                controller=None,
                nodes={},
                live=frozenset(),
                topics={},
                partitions={},
            )
        )
        self._client = EtcdClient(endpoints)
        self._root = prefix.rstrip("/") + "/"
        self._lease_ttl_s = lease_ttl_s
        self._configured_cluster_id = cluster_id
        self._node: NodeInfo | None = None
        self._lease = 0
        self._keepalive_s = lease_ttl_s / 3
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False
        self._wakeup = asyncio.Event()
        self._reported: frozenset[TopicPartition] = frozenset()  # this node's offline report
        self._report_changed = asyncio.Event()
        # What the watch has seen, folded key by key; each change publishes a copy.
        self._cluster: str = cluster_id or ""
        self._nodes: dict[int, NodeInfo] = {}
        self._live: set[int] = set()
        self._registered: dict[int, int] = {}  # node -> its incarnation's revision
        self._unclean_starts: set[int] = set()
        self._clean_start = True
        self._offline: dict[int, frozenset[TopicPartition]] = {}
        self._election: dict[str, tuple[int, int]] = {}  # key -> (create revision, node id)
        self._topics: dict[str, TopicSpec] = {}
        self._partitions: dict[TopicPartition, PartitionState] = {}
        self._log_ends: dict[TopicPartition, dict[int, LogEnd]] = {}
        self._subscriptions: dict[str, StoredSubscription] = {}
        self._throttle: int | None = None
        self._node_states: dict[int, str] = {}
        self._shutting_down: set[int] = set()  # nodes in a controlled shutdown
        self._leaving = False  # this node is one of them
        self._unanswered: str | None = None  # why etcd counts as unreachable in this stop

    def _key(self, *parts: str | int) -> bytes:
        return (self._root + "/".join(str(p) for p in parts)).encode()

    async def start(self, node: NodeInfo, clean_start: bool = True) -> None:
        self._node = node
        self._clean_start = clean_start
        try:
            await self._ensure_cluster_id()
            await self._register()
            kvs, revision = await self._client.get_prefix(self._root.encode())
        except BaseException:
            await self.close()
            raise
        self._update(Snapshot(tuple(kvs), revision))
        self._tasks = [
            asyncio.create_task(self._watch(revision + 1), name=f"etcd-watch-{node.node_id}"),
            asyncio.create_task(self._keep_alive(), name=f"etcd-keepalive-{node.node_id}"),
            asyncio.create_task(self._write_reports(), name=f"etcd-report-{node.node_id}"),
        ]

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._wake()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        if self._lease:
            try:
                await self._leaving_request(functools.partial(self._client.revoke, self._lease))
            except LeaseNotFound:
                pass  # expired or revoked already: the node is gone either way
            except MetadataUnavailable as exc:
                log.warning("could not revoke the etcd lease (it will expire): %s", exc)
        await self._client.close()

    async def _ensure_cluster_id(self) -> None:
        """Create the cluster id once (first writer wins) and check it against ours."""
        key = self._key("cluster_id")
        wanted = self._configured_cluster_id or _new_cluster_id()
        result = await self._client.txn(
            [Compare(key, "CREATE", 0)], [Put(key, wanted.encode())], [Get(key)]
        )
        stored = result.gets[0] if not result.succeeded else None
        cluster_id = stored.value.decode() if stored is not None else wanted
        configured = self._configured_cluster_id
        if configured is not None and cluster_id != configured:
            raise MetadataUnavailable(
                f"etcd prefix {self._root!r} holds cluster {cluster_id}, not {configured}"
            )
        self._cluster = cluster_id

    async def _register(self) -> None:
        """Take a new lease and publish this node: nodes/<id> for good, live/<id> and its
        offline report (if any) under it; the first time, also this process's incarnation
        (incarnations/<id>, for good), which a lease regained later does not change, and
        without an earlier process's shutting-down mark (its lease may not have run out)."""
        node = self._require_node()
        lease = await self._client.grant(max(1, math.ceil(self._lease_ttl_s)))
        record = msgspec.json.encode(_NodeRecord(node.node_id, node.url, node.rack))
        puts: list[Put | Delete] = [
            Put(self._key("nodes", node.node_id), record),
            Put(self._key("live", node.node_id), record, lease.id),
        ]
        if not self.registration:
            incarnation = msgspec.json.encode(_IncarnationRecord(self._clean_start))
            puts.append(Put(self._key("incarnations", node.node_id), incarnation))
            puts.append(Delete(self._key("shutting_down", node.node_id)))
        elif self._leaving:
            puts.append(self._put_leaving(lease.id))
        if self._reported:
            puts.append(self._put_report(lease.id))
        result = await self._client.txn([], puts)
        if not self.registration:
            self.registration = result.revision
        self._lease, self._keepalive_s = lease.id, lease.ttl_s / 3
        self._wake()

    async def _keep_alive(self) -> None:
        """Refresh the lease every third of its TTL; once it is lost, register again."""
        unreachable = False
        delay = self._keepalive_s
        while True:
            await asyncio.sleep(delay)
            delay = self._keepalive_s
            try:
                if await self._client.keepalive(self._lease, self._keepalive_s) <= 0:
                    log.warning(
                        "node %d lost its etcd lease %x (expired or revoked); registering again",
                        self._node_id,
                        self._lease,
                    )
                    await self._register()
                    log.info("node %d registered under lease %x", self._node_id, self._lease)
                if unreachable:
                    log.info("etcd reachable again; lease %x refreshed", self._lease)
                unreachable = False
            except MetadataUnavailable as exc:
                if not unreachable:
                    log.warning("cannot refresh the etcd lease %x: %s", self._lease, exc)
                    delay = 0  # at once, on the next endpoint: the TTL is running out
                unreachable = True

    def stopping(self, deadline: float) -> None:
        """Each request from now on ends by `deadline` and waits at most the lease's TTL: a
        node whose requests go unanswered that long has lost its lease anyway (its keep-alives
        go the same way), so waiting longer buys nothing."""
        self._client.end_by(deadline, self._lease_ttl_s)

    async def _leaving_request(self, request: Callable[[], Awaitable[_T]]) -> _T:
        """One of the stop's own requests (leaving the election, the shutting-down mark, the
        lease's revocation). Once one went unanswered, etcd counts as unreachable: the others
        fail at once, so that a stop waits for an unreachable etcd once, not once each."""
        if self._unanswered is not None:
            raise MetadataUnavailable(
                f"etcd did not answer earlier in this stop: {self._unanswered}"
            )
        try:
            return await request()
        except LeaseNotFound:
            raise  # an answer: the lease is gone
        except MetadataUnavailable as exc:
            self._unanswered = str(exc)
            raise

    async def begin_shutdown(self) -> None:
        """shutting_down/<id> under this node's lease (written again with a new lease)."""
        self._leaving = True
        mark = [self._put_leaving(self._lease)]
        await self._leaving_request(functools.partial(self._client.txn, [], mark))

    def _put_leaving(self, lease: int) -> Put:
        """The mark's value is the process's incarnation (its registration revision)."""
        key = self._key("shutting_down", self._node_id)
        return Put(key, str(self.registration).encode(), lease)

    async def resign(self) -> None:
        """Delete controller/<lease> (`campaign`'s key under the current lease)."""
        key = [Delete(self._key("controller", f"{self._lease:x}"))]
        await self._leaving_request(functools.partial(self._client.txn, [], key))

    def report_offline(self, partitions: Iterable[TopicPartition]) -> None:
        self._reported = frozenset(partitions)
        self._report_changed.set()

    def _put_report(self, lease: int) -> Put:
        value = msgspec.json.encode(sorted(self._reported))
        return Put(self._key("offline", self._node_id), value, lease)

    async def _write_reports(self) -> None:
        """Write this node's offline report under its lease each time it changes, retrying
        with backoff while etcd is unavailable (or the lease just lapsed: the next one takes
        it). A lease lost later takes the key with it; `_register` writes it again."""
        backoff = REPORT_RETRY_S
        while True:
            await self._report_changed.wait()
            self._report_changed.clear()
            try:
                await self._client.txn([], [self._put_report(self._lease)])
            except MetadataUnavailable as exc:
                if backoff == REPORT_RETRY_S:
                    log.warning("cannot write node %d's offline report yet: %s", self._node_id, exc)
                self._report_changed.set()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, REPORT_RETRY_MAX_S)
            else:
                backoff = REPORT_RETRY_S

    async def _watch(self, start_revision: int) -> None:
        await self._client.follow_prefix(
            self._root.encode(), start_revision, self._update, "a metadata listener"
        )

    def _update(self, update: WatchUpdate) -> None:
        """Fold a snapshot or a batch of events into the state and publish the new view."""
        if isinstance(update, Events):
            for event in update.events:
                self._apply(event.kv.key, event.kv if event.type == "PUT" else None)
        else:
            self._nodes.clear()
            self._live.clear()
            self._registered.clear()
            self._unclean_starts.clear()
            self._offline.clear()
            self._election.clear()
            self._topics.clear()
            self._partitions.clear()
            self._log_ends.clear()
            self._subscriptions.clear()
            self._throttle = None
            self._node_states.clear()
            self._shutting_down.clear()
            for kv in update.kvs:
                self._apply(kv.key, kv)
        self._wake()
        self.publish(self._view(update.revision))

    def _apply(self, key: bytes, kv: KeyValue | None) -> None:
        """Fold one key's new value (None: deleted) into the state; skip what does not parse."""
        try:
            kind, _, rest = key.decode()[len(self._root) :].partition("/")
            if kind == "cluster_id" and kv is not None:
                self._cluster = kv.value.decode()
            elif kind == "nodes":
                self._apply_node(int(rest), kv)
            elif kind == "live" and kv is not None:
                self._live.add(int(rest))
            elif kind == "live":
                self._live.discard(int(rest))
            elif kind == "shutting_down" and kv is not None:
                self._shutting_down.add(int(rest))
            elif kind == "shutting_down":
                self._shutting_down.discard(int(rest))
            elif kind == "incarnations":
                self._apply_incarnation(int(rest), kv)
            elif kind == "offline":
                self._apply_offline(int(rest), kv)
            elif kind == "controller" and kv is not None:
                self._election[key.decode()] = (kv.create_revision, int(kv.value))
            elif kind == "controller":
                self._election.pop(key.decode(), None)
            elif kind == "topics":
                self._apply_topic(rest, kv)
            elif kind == "partitions":
                topic, _, partition = rest.rpartition("/")
                self._apply_partition((topic, int(partition)), kv)
            elif kind == "log_ends":
                topic, partition, node = rest.rsplit("/", 2)
                self._apply_log_end((topic, int(partition)), int(node), kv)
            elif kind == "subscriptions" and kv is not None:
                self._subscriptions[rest] = StoredSubscription(rest, kv.value, kv.mod_revision)
            elif kind == "subscriptions":
                self._subscriptions.pop(rest, None)
            elif kind == "node_states" and kv is not None:
                self._node_states[int(rest)] = kv.value.decode()
            elif kind == "node_states":
                self._node_states.pop(int(rest), None)
            elif kind == "reassignment_throttle":
                self._throttle = None if kv is None else msgspec.json.decode(kv.value, type=int)
        except (ValueError, msgspec.DecodeError) as exc:
            log.warning("ignoring malformed etcd metadata at %r: %s", key, exc)

    def _apply_node(self, node_id: int, kv: KeyValue | None) -> None:
        if kv is None:
            self._nodes.pop(node_id, None)
            return
        record = msgspec.json.decode(kv.value, type=_NodeRecord)
        self._nodes[node_id] = NodeInfo(record.node_id, record.url, record.rack)

    def _apply_incarnation(self, node_id: int, kv: KeyValue | None) -> None:
        self._unclean_starts.discard(node_id)
        if kv is None:
            self._registered.pop(node_id, None)
            return
        record = msgspec.json.decode(kv.value, type=_IncarnationRecord)
        self._registered[node_id] = kv.mod_revision
        if not record.clean_start:
            self._unclean_starts.add(node_id)

    def _apply_offline(self, node_id: int, kv: KeyValue | None) -> None:
        reported = (
            frozenset()
            if kv is None
            else frozenset(msgspec.json.decode(kv.value, type=list[tuple[str, int]]))
        )
        if reported:
            self._offline[node_id] = reported
        else:
            self._offline.pop(node_id, None)

    def _apply_topic(self, name: str, kv: KeyValue | None) -> None:
        if kv is None:
            self._topics.pop(name, None)
            return
        record = msgspec.json.decode(kv.value, type=_TopicRecord)
        self._topics[name] = TopicSpec(
            name=name,
            topic_id=record.topic_id,
            partitions=record.partitions,
            replication_factor=record.replication_factor,
            configs=record.configs,
            version=kv.mod_revision,
        )

    def _apply_partition(self, tp: TopicPartition, kv: KeyValue | None) -> None:
        if kv is None:
            self._partitions.pop(tp, None)
            return
        self._partitions[tp] = _partition_state(kv)

    def _apply_log_end(self, tp: TopicPartition, node_id: int, kv: KeyValue | None) -> None:
        ends = self._log_ends.setdefault(tp, {})
        if kv is None:
            ends.pop(node_id, None)
        else:
            record = msgspec.json.decode(kv.value, type=_LogEndRecord)
            ends[node_id] = LogEnd(record.leader_epoch, record.end_offset, record.incarnation)
        if not ends:
            del self._log_ends[tp]

    def _view(self, revision: int) -> ClusterView:
        controller = min(self._election.values())[1] if self._election else None
        return ClusterView(
            cluster_id=self._cluster,
            controller=controller,
            nodes=dict(self._nodes),
            live=frozenset(self._live),
            topics=dict(self._topics),
            partitions={
                key: state
                for key, state in self._partitions.items()
                if (spec := self._topics.get(key[0])) is not None and key[1] < spec.partitions
            },
            revision=revision,
            offline=dict(self._offline),
            subscriptions=dict(self._subscriptions),
            registered=dict(self._registered),
            unclean_starts=frozenset(self._unclean_starts),
            log_ends={key: dict(ends) for key, ends in self._log_ends.items()},
            reassignment_throttle=self._throttle,
            node_states=dict(self._node_states),
            shutting_down=frozenset(self._shutting_down),
        )

    def _wake(self) -> None:
        """Wake every `_until` waiter to re-check its condition."""
        self._wakeup.set()
        self._wakeup = asyncio.Event()

    async def _until(self, condition: Callable[[], bool]) -> None:
        """Wait, without polling, until `condition` holds after a change of state."""
        while not condition():
            if self._closed:
                raise MetadataUnavailable("the metadata store is closed")
            await self._wakeup.wait()

    def _require_node(self) -> NodeInfo:
        if self._node is None:
            raise RuntimeError("start() the metadata store first")
        return self._node

    @property
    def _node_id(self) -> int:
        return self._require_node().node_id

    async def topic_exists(self, name: str) -> bool:
        return await self._client.get(self._key("topics", name)) is not None

    async def read_partition(
        self, topic: str, partition: int, timeout_s: float
    ) -> PartitionState | None:
        kv = await self._client.get(self._key("partitions", topic, partition), timeout_s)
        return None if kv is None else _partition_state(kv)

    async def campaign(self) -> Fence:
        """etcd's election recipe: put controller/<lease> under our lease, then wait until no
        key with a lower create revision is left (each predecessor deleted or expired)."""
        node_id = self._node_id
        while True:
            lease = self._lease
            key = self._key("controller", f"{lease:x}")
            try:
                result = await self._client.txn(
                    [Compare(key, "CREATE", 0)],
                    [Put(key, str(node_id).encode(), lease)],
                    [Get(key)],
                )
            except LeaseNotFound:
                await self._until(functools.partial(self._lease_changed, lease))
                continue
            existing = result.gets[0] if not result.succeeded else None
            created = existing.create_revision if existing is not None else result.revision
            name = key.decode()
            await self._until(functools.partial(self._decided, name, created))
            if self._election.get(name, (0, 0))[0] == created:
                return Fence(node_id, name, created)
            log.info("node %d lost its election key %s; campaigning again", node_id, name)

    def _lease_changed(self, lease: int) -> bool:
        return self._lease != lease

    def _decided(self, key: str, created: int) -> bool:
        """Whether the election key `key` (created at `created`) is the lowest, or gone."""
        if self.view.revision < created:
            return False  # the watch has not caught up with the key yet
        if self._election.get(key, (0, 0))[0] != created:
            return True
        return min(self._election.values())[0] == created

    async def _fenced_txn(
        self, fence: Fence, compares: Sequence[Compare], success: Sequence[Put | Delete]
    ) -> TxnResult:
        """A controller transaction, also guarded by the fence; FencedController if that failed.

        On failure, gets[1:] read the keys of `compares`, for the caller to tell why."""
        fence_key = fence.key.encode()
        result = await self._client.txn(
            [Compare(fence_key, "CREATE", fence.create_revision), *compares],
            success,
            [Get(fence_key), *(Get(c.key) for c in compares)],
        )
        if not result.succeeded:
            held = result.gets[0]
            if held is None or held.create_revision != fence.create_revision:
                raise FencedController(
                    f"node {fence.node_id} is no longer the controller: its election key "
                    f"{fence.key} of revision {fence.create_revision} is gone"
                )
        return result

    def _put_topic(self, spec: TopicSpec) -> Put:
        record = _TopicRecord(
            spec.topic_id, spec.partitions, spec.replication_factor, dict(spec.configs)
        )
        return Put(self._key("topics", spec.name), msgspec.json.encode(record))

    def _put_partition(self, topic: str, partition: int, state: PartitionState) -> Put:
        record = _PartitionRecord(
            state.leader,
            state.leader_epoch,
            state.replicas,
            state.isr,
            state.recovering,
            state.adding,
            state.removing,
            state.original,
            state.elr,
        )
        return Put(self._key("partitions", topic, partition), msgspec.json.encode(record))

    async def create_topic(
        self, fence: Fence, spec: TopicSpec, states: Sequence[PartitionState]
    ) -> None:
        topic_key = self._key("topics", spec.name)
        puts = [self._put_partition(spec.name, p, state) for p, state in enumerate(states)]
        absent = [Compare(topic_key, "CREATE", 0)]
        before, last = _split_for_topic(puts)
        for batch in before:
            if not (await self._fenced_txn(fence, absent, batch)).succeeded:
                raise TopicAlreadyExists(f"topic {spec.name!r} already exists")
        result = await self._fenced_txn(fence, absent, [self._put_topic(spec), *last])
        if not result.succeeded:
            raise TopicAlreadyExists(f"topic {spec.name!r} already exists")

    async def update_topic(
        self, fence: Fence, spec: TopicSpec, new_states: Mapping[int, PartitionState]
    ) -> bool:
        topic_key = self._key("topics", spec.name)
        puts = [self._put_partition(spec.name, p, state) for p, state in new_states.items()]
        unchanged = [Compare(topic_key, "MOD", spec.version)]
        before, last = _split_for_topic(puts)
        for batch in before:
            result = await self._fenced_txn(fence, unchanged, batch)
            if not result.succeeded:
                break
        else:
            result = await self._fenced_txn(fence, unchanged, [self._put_topic(spec), *last])
        if not result.succeeded and result.gets[1] is None:
            raise UnknownTopic(f"topic {spec.name!r} does not exist")
        return result.succeeded

    async def delete_topic(self, fence: Fence, name: str) -> None:
        topic_key = self._key("topics", name)
        partitions = self._key("partitions", name) + b"/"
        log_ends = self._key("log_ends", name) + b"/"
        result = await self._fenced_txn(
            fence,
            [Compare(topic_key, "VERSION", 0, "GREATER")],
            [
                Delete(topic_key),
                Delete(partitions, prefix_end(partitions)),
                Delete(log_ends, prefix_end(log_ends)),
            ],
        )
        if not result.succeeded:
            raise UnknownTopic(f"topic {name!r} does not exist")

    async def set_partitions(
        self,
        states: Sequence[tuple[TopicPartition, PartitionState]],
        fence: Fence | None = None,
        incarnations: Sequence[Mapping[int, int]] = (),
        recovered: Collection[TopicPartition] = (),
    ) -> list[PartitionState] | None:
        if len(states) > MAX_PARTITIONS_PER_WRITE:
            raise ValueError(f"at most {MAX_PARTITIONS_PER_WRITE} partitions per write")
        compares = []
        for (topic, partition), state in states:
            key = self._key("partitions", topic, partition)
            compares.append(Compare(key, "MOD", state.version))  # a deleted key's is 0
            if not state.version:
                compares.append(Compare(key, "CREATE", 0, "GREATER"))
        # One guard per node and revision for the whole write, however many partitions assumed
        # it (etcd counts compares against --max-txn-ops). A node without an incarnation key
        # compares as revision 0.
        guards = {(r, revision) for assumed in incarnations for r, revision in assumed.items()}
        compares += [
            Compare(self._key("incarnations", r), "MOD", revision) for r, revision in sorted(guards)
        ]
        if fence is not None:
            compares.append(Compare(fence.key.encode(), "CREATE", fence.create_revision))
        ops: list[Put | Delete] = [
            self._put_partition(topic, p, state) for (topic, p), state in states
        ]
        for topic, p in recovered:
            log_ends = self._key("log_ends", topic, p) + b"/"
            ops.append(Delete(log_ends, prefix_end(log_ends)))
        result = await self._client.txn(compares, ops)
        if not result.succeeded:
            return None
        return [dataclasses.replace(state, version=result.revision) for _, state in states]

    async def report_log_ends(self, reports: Sequence[tuple[TopicPartition, int, LogEnd]]) -> bool:
        if len(reports) > MAX_PARTITIONS_PER_WRITE:
            raise ValueError(f"at most {MAX_PARTITIONS_PER_WRITE} partitions per write")
        node_id = self._node_id
        compares = [
            Compare(self._key("partitions", topic, p), "MOD", version)
            for (topic, p), version, _ in reports
        ]
        puts = [
            Put(
                self._key("log_ends", topic, p, node_id),
                msgspec.json.encode(
                    _LogEndRecord(end.leader_epoch, end.end_offset, end.incarnation)
                ),
            )
            for (topic, p), _, end in reports
        ]
        return (await self._client.txn(compares, puts)).succeeded

    async def set_node_state(self, fence: Fence, node: int, state: str | None) -> None:
        key = self._key("node_states", node)
        op = Delete(key) if state is None else Put(key, state.encode())
        await self._fenced_txn(fence, [], [op])

    async def set_reassignment_throttle(self, bytes_per_second: int | None) -> None:
        key = self._key("reassignment_throttle")
        op = Delete(key) if bytes_per_second is None else Put(key, b"%d" % bytes_per_second)
        await self._client.txn([], [op])

    async def put_subscription(self, name: str, document: bytes, version: int) -> int | None:
        key = self._key("subscriptions", name)
        result = await self._client.txn([Compare(key, "MOD", version)], [Put(key, document)])
        return result.revision if result.succeeded else None

    async def delete_subscription(self, name: str) -> bool:
        key = self._key("subscriptions", name)
        result = await self._client.txn([Compare(key, "VERSION", 0, "GREATER")], [Delete(key)])
        return result.succeeded
