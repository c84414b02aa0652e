"""The metadata store in memory, with etcd's semantics: one node's store, or a simulated cluster
in tests (several stores sharing one `MemoryBackend`, each acting as one node).

A single node's topics live on its disk (the broker adopts them at start); its subscriptions
live nowhere else, so a backend given a `state_file` keeps them there, replaced atomically on
every change."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import orjson

from engine.checkpoint import fsync_directory
from engine.errors import TopicAlreadyExists, UnknownTopic
from engine.fsync import checked_fsync
from replication.errors import FencedController
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

ELECTION_PREFIX = "election/"


class MemoryBackend:
    """The shared keyspace: nodes, leases, election keys, offline reports, topics, partition
    states and the log ends reported for them.

    Every change takes the next revision of one counter (etcd's) as the version of what it
    wrote, and is published to every store attached to the backend."""

    def __init__(self, cluster_id: str | None = None, state_file: Path | None = None) -> None:
        self.cluster_id = cluster_id or uuid.uuid4().hex
        self.revision = 0
        self.nodes: dict[int, NodeInfo] = {}
        self.live: set[int] = set()
        self.registered: dict[int, int] = {}  # node id -> revision of its process's start
        self.unclean_starts: set[int] = set()
        self.election: dict[int, int] = {}  # node id -> create revision of its election key
        self.offline: dict[int, frozenset[TopicPartition]] = {}  # live nodes' reports
        self.topics: dict[str, TopicSpec] = {}
        self.partitions: dict[TopicPartition, PartitionState] = {}
        self.log_ends: dict[TopicPartition, dict[int, LogEnd]] = {}
        self.subscriptions: dict[str, StoredSubscription] = {}
        self.reassignment_throttle: int | None = None
        self.node_states: dict[int, str] = {}
        self.shutting_down: set[int] = set()  # nodes in a controlled shutdown
        self.stores: list[MemoryMetadataStore] = []
        self._changed: asyncio.Event | None = None
        self.state_file = state_file
        if state_file is not None and state_file.exists():
            saved = orjson.loads(state_file.read_bytes())
            for name, document in sorted(saved.get("subscriptions", {}).items()):
                self.revision += 1
                self.subscriptions[name] = StoredSubscription(
                    name, document.encode(), self.revision
                )

    def save(self, subscriptions: Mapping[str, bytes]) -> None:
        """Write what only the store holds (the subscriptions' documents) to `state_file`,
        before a change takes effect: a temporary file, fsynced, renamed over the old one."""
        if self.state_file is None:
            return
        doc = {
            "subscriptions": {name: document.decode() for name, document in subscriptions.items()}
        }
        tmp = self.state_file.with_name(self.state_file.name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(orjson.dumps(doc))
            f.flush()
            checked_fsync(f.fileno(), tmp)
        os.replace(tmp, self.state_file)
        fsync_directory(self.state_file.parent)

    def documents(self) -> dict[str, bytes]:
        return {name: s.document for name, s in self.subscriptions.items()}

    def expire(self, node_id: int) -> None:
        """Simulate a lost lease: the node leaves `live`, its election key and its offline
        report are deleted."""
        with self.transaction():
            self.live.discard(node_id)
            self.election.pop(node_id, None)
            self.offline.pop(node_id, None)
            self.shutting_down.discard(node_id)

    def revive(self, node_id: int) -> None:
        """Simulate an expired node coming back under a new lease (live, not campaigning,
        its store's offline report published again)."""
        with self.transaction():
            self.live.add(node_id)
            for store in self.stores:
                if store.node is not None and store.node.node_id == node_id:
                    self.set_offline(node_id, store.reported_offline)

    def set_offline(self, node_id: int, partitions: frozenset[TopicPartition]) -> None:
        """Set a node's offline report (inside a transaction); an empty one deletes it."""
        if partitions:
            self.offline[node_id] = partitions
        else:
            self.offline.pop(node_id, None)

    def controller(self) -> int | None:
        """The campaigning node with the lowest election create revision."""
        return min(self.election, key=self.election.__getitem__, default=None)

    def fence_holds(self, fence: Fence) -> bool:
        return (
            fence.key == election_key(fence.node_id)
            and self.election.get(fence.node_id) == fence.create_revision
        )

    def snapshot(self) -> ClusterView:
        return ClusterView(
            cluster_id=self.cluster_id,
            controller=self.controller(),
            nodes=dict(self.nodes),
            live=frozenset(self.live),
            topics=dict(self.topics),
            partitions=dict(self.partitions),
            revision=self.revision,
            offline=dict(self.offline),
            subscriptions=dict(self.subscriptions),
            registered=dict(self.registered),
            unclean_starts=frozenset(self.unclean_starts),
            log_ends={key: dict(ends) for key, ends in self.log_ends.items()},
            reassignment_throttle=self.reassignment_throttle,
            node_states=dict(self.node_states),
            shutting_down=frozenset(self.shutting_down),
        )

    @contextmanager
    def transaction(self) -> Iterator[int]:
        """Yield the revision this change takes; if the body returns, commit and publish it."""
        yield self.revision + 1
        self.revision += 1
        view = self.snapshot()
        for store in list(self.stores):
            store.publish(view)
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def changed(self) -> None:
        """Wait for the next committed change."""
        if self._changed is None:
            self._changed = asyncio.Event()
        await self._changed.wait()


def election_key(node_id: int) -> str:
    return f"{ELECTION_PREFIX}{node_id}"


class MemoryMetadataStore(MetadataStore):
    """A MetadataStore over a `MemoryBackend` (a private one by default).

    The store sees the backend's views from construction (unstarted, it is an observer);
    start() registers its node. Every write yields to the event loop once before it applies,
    as a round trip to etcd would, so tests meet the interleavings a real store allows."""

    def __init__(self, backend: MemoryBackend | None = None) -> None:
        self.backend = backend or MemoryBackend()
        super().__init__(self.backend.snapshot())
        self.node: NodeInfo | None = None
        self.reported_offline: frozenset[TopicPartition] = frozenset()
        self.backend.stores.append(self)

    async def start(self, node: NodeInfo, clean_start: bool = True) -> None:
        self.node = node
        backend = self.backend
        with backend.transaction() as revision:
            backend.nodes[node.node_id] = node
            backend.live.add(node.node_id)
            backend.set_offline(node.node_id, self.reported_offline)
            if not self.registration:
                self.registration = backend.registered[node.node_id] = revision
                backend.shutting_down.discard(node.node_id)  # a new process is starting
                if clean_start:
                    backend.unclean_starts.discard(node.node_id)
                else:
                    backend.unclean_starts.add(node.node_id)

    async def close(self) -> None:
        if self in self.backend.stores:
            self.backend.stores.remove(self)
        if self.node is not None:
            self.backend.expire(self.node.node_id)
            self.node = None

    def stopping(self, deadline: float) -> None:
        """Nothing to bound: memory answers at once."""

    async def begin_shutdown(self) -> None:
        await asyncio.sleep(0)
        if self.node is None:
            raise RuntimeError("start() the store before shutting down")
        with self.backend.transaction():
            self.backend.shutting_down.add(self.node.node_id)

    async def resign(self) -> None:
        await asyncio.sleep(0)
        if self.node is not None and self.node.node_id in self.backend.election:
            with self.backend.transaction():
                del self.backend.election[self.node.node_id]

    def report_offline(self, partitions: Iterable[TopicPartition]) -> None:
        if self.node is None:
            raise RuntimeError("start() the store before reporting")
        self.reported_offline = frozenset(partitions)
        node_id = self.node.node_id
        if node_id in self.backend.live:
            with self.backend.transaction():
                self.backend.set_offline(node_id, self.reported_offline)

    async def topic_exists(self, name: str) -> bool:
        return name in self.backend.topics

    async def read_partition(
        self, topic: str, partition: int, timeout_s: float
    ) -> PartitionState | None:
        return self.backend.partitions.get((topic, partition))

    async def campaign(self) -> Fence:
        if self.node is None:
            raise RuntimeError("start() the store before campaigning")
        node_id = self.node.node_id
        backend = self.backend
        while True:
            if node_id in backend.live and node_id not in backend.election:
                with backend.transaction() as revision:
                    backend.election[node_id] = revision
            if backend.controller() == node_id:
                return Fence(node_id, election_key(node_id), backend.election[node_id])
            await backend.changed()

    async def create_topic(
        self, fence: Fence, spec: TopicSpec, states: Sequence[PartitionState]
    ) -> None:
        await asyncio.sleep(0)
        self._check_fence(fence)
        backend = self.backend
        if spec.name in backend.topics:
            raise TopicAlreadyExists(f"topic {spec.name!r} already exists")
        with backend.transaction() as revision:
            backend.topics[spec.name] = replace(spec, version=revision)
            for partition, state in enumerate(states):
                backend.partitions[(spec.name, partition)] = replace(state, version=revision)

    async def update_topic(
        self, fence: Fence, spec: TopicSpec, new_states: Mapping[int, PartitionState]
    ) -> bool:
        await asyncio.sleep(0)
        self._check_fence(fence)
        backend = self.backend
        current = backend.topics.get(spec.name)
        if current is None:
            raise UnknownTopic(f"topic {spec.name!r} does not exist")
        if current.version != spec.version:
            return False
        with backend.transaction() as revision:
            backend.topics[spec.name] = replace(spec, version=revision)
            for partition, state in new_states.items():
                backend.partitions[(spec.name, partition)] = replace(state, version=revision)
        return True

    async def delete_topic(self, fence: Fence, name: str) -> None:
        await asyncio.sleep(0)
        self._check_fence(fence)
        backend = self.backend
        if name not in backend.topics:
            raise UnknownTopic(f"topic {name!r} does not exist")
        with backend.transaction():
            del backend.topics[name]
            for key in [key for key in backend.partitions if key[0] == name]:
                del backend.partitions[key]
                backend.log_ends.pop(key, None)

    async def set_partitions(
        self,
        states: Sequence[tuple[TopicPartition, PartitionState]],
        fence: Fence | None = None,
        incarnations: Sequence[Mapping[int, int]] = (),
        recovered: Collection[TopicPartition] = (),
    ) -> list[PartitionState] | None:
        await asyncio.sleep(0)
        backend = self.backend
        if len(states) > MAX_PARTITIONS_PER_WRITE:
            raise ValueError(f"at most {MAX_PARTITIONS_PER_WRITE} partitions per write")
        if fence is not None and not backend.fence_holds(fence):
            return None
        for assumed in incarnations:
            if any(backend.registered.get(r, 0) != rev for r, rev in assumed.items()):
                return None
        for key, state in states:
            current = backend.partitions.get(key)
            if current is None or current.version != state.version:
                return None
        with backend.transaction() as revision:
            stored = [replace(state, version=revision) for _, state in states]
            for (key, _), new in zip(states, stored, strict=True):
                backend.partitions[key] = new
            for key in recovered:
                backend.log_ends.pop(key, None)
        return stored

    async def report_log_ends(self, reports: Sequence[tuple[TopicPartition, int, LogEnd]]) -> bool:
        await asyncio.sleep(0)
        if self.node is None:
            raise RuntimeError("start() the store before reporting")
        backend = self.backend
        if len(reports) > MAX_PARTITIONS_PER_WRITE:
            raise ValueError(f"at most {MAX_PARTITIONS_PER_WRITE} partitions per write")
        for key, version, _ in reports:
            current = backend.partitions.get(key)
            if current is None or current.version != version:
                return False
        with backend.transaction():
            for key, _, end in reports:
                backend.log_ends.setdefault(key, {})[self.node.node_id] = end
        return True

    def _check_fence(self, fence: Fence) -> None:
        if not self.backend.fence_holds(fence):
            raise FencedController(
                f"node {fence.node_id} is no longer the controller: its election key "
                f"{fence.key!r} of revision {fence.create_revision} is gone"
            )

    async def set_node_state(self, fence: Fence, node: int, state: str | None) -> None:
        await asyncio.sleep(0)
        self._check_fence(fence)
        with self.backend.transaction():
            if state is None:
                self.backend.node_states.pop(node, None)
            else:
                self.backend.node_states[node] = state

    async def set_reassignment_throttle(self, bytes_per_second: int | None) -> None:
        await asyncio.sleep(0)
        with self.backend.transaction():
            self.backend.reassignment_throttle = bytes_per_second

    async def put_subscription(self, name: str, document: bytes, version: int) -> int | None:
        await asyncio.sleep(0)
        backend = self.backend
        current = backend.subscriptions.get(name)
        if (0 if current is None else current.version) != version:
            return None
        backend.save({**backend.documents(), name: document})
        with backend.transaction() as revision:
            backend.subscriptions[name] = StoredSubscription(name, document, revision)
        return revision

    async def delete_subscription(self, name: str) -> bool:
        await asyncio.sleep(0)
        backend = self.backend
        if name not in backend.subscriptions:
            return False
        backend.save({n: d for n, d in backend.documents().items() if n != name})
        with backend.transaction():
            del backend.subscriptions[name]
        return True
