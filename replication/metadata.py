"""Cluster metadata: who the nodes are, which one is controller, the topics and each partition's
replicas, leader, leader epoch and ISR, the push subscriptions, and the store that holds them
(etcd, or memory for a single node).

Every change goes through the store; every node watches it and takes up its roles from the
view it publishes. A controller's writes carry a `Fence` (its election key's create revision),
and every partition write is a compare-and-set on the version it was read at.
"""

from __future__ import annotations

import asyncio
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

NO_LEADER = -1
DECOMMISSIONING = "decommissioning"
REMOVED = "removed"
# Partitions per all-or-none write: a guard each, one per node's incarnation and the fence; a
# put and a delete each: within etcd's default --max-txn-ops of 128 (etcd counts the compares
# and the operations apart) for clusters of up to 67 nodes.
MAX_PARTITIONS_PER_WRITE = 60

TopicPartition = tuple[str, int]
# A rack, zone or data centre name (Kafka's broker.rack, a fetch's client_rack): 1 to 64
# printable ASCII characters, no spaces.
RACK_NAME = re.compile(r"[!-~]{1,64}")


@dataclass(frozen=True)
class NodeInfo:
    node_id: int
    url: str  # the advertised base URL other nodes and clients use, e.g. http://10.0.0.2:8080
    rack: str | None = None  # its rack, zone or data centre (KIP-36); None: not configured


@dataclass(frozen=True)
class TopicSpec:
    name: str
    topic_id: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, object]  # the topic's overrides, normalised (engine.config)
    version: int = 0  # the store's revision of this record; 0 before it is stored


@dataclass(frozen=True)
class StoredSubscription:
    """A push subscription's spec as the store keeps it: a JSON document this layer does not
    read (groups.subscriptions owns its shape), and the store's revision of it."""

    name: str
    document: bytes
    version: int = 0  # the store's revision of this record; 0 before it is stored


@dataclass(frozen=True)
class PartitionState:
    leader: int  # NO_LEADER while the partition is offline
    leader_epoch: int
    replicas: tuple[int, ...]  # the first is the preferred leader
    isr: tuple[int, ...]
    version: int = 0  # the store's revision of this record (etcd mod_revision); 0 before stored
    # ISR members that restarted after a crash while the partition had no leader to take over
    # from: kept in the ISR (KIP-966 waits for all of them), but not in sync
    recovering: tuple[int, ...] = ()
    # A reassignment in progress (KIP-455): `replicas` is the target followed by `removing`;
    # `adding` are target replicas not in the original list (they fetch, and join the ISR);
    # `original` is the list before the move, in its order.
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()
    original: tuple[int, ...] = ()  # the replicas in their order before the move (a cancel's)
    # KIP-966's eligible leader replicas: members that left the ISR while it was below
    # min.insync.replicas, so they hold every record acks=all acknowledged; a recovery from
    # crashed ISR members waits for them too, and weighs their logs
    elr: tuple[int, ...] = ()

    @property
    def reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        """The replicas the partition will have once its reassignment completes."""
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def original_replicas(self) -> tuple[int, ...]:
        """The replicas it had before its reassignment began (what a cancellation restores)."""
        return self.original or tuple(r for r in self.replicas if r not in self.adding)


def with_eligible_leaders(
    old: PartitionState, new: PartitionState, min_insync: int
) -> PartitionState:
    """`new` with its eligible leader replicas (KIP-966) carried from `old`: while the ISR is
    below `min_insync`, acks=all is refused, so the members it drops (and those dropped before)
    keep every acknowledged acks=all record; once the ISR is back at `min_insync`, acks=all
    acknowledges without them again and none is eligible. A member back in the ISR, or no
    longer a replica, leaves the list."""
    if len(new.isr) >= min_insync:
        return new if not new.elr else replace(new, elr=())
    dropped = (r for r in (*old.elr, *old.isr) if r not in new.isr and r in new.replicas)
    elr = tuple(dict.fromkeys(dropped))
    return new if elr == new.elr else replace(new, elr=elr)


@dataclass(frozen=True)
class LogEnd:
    """A replica's log as its node reports it while the partition waits for its crashed ISR
    members (KIP-966's balanced recovery): the last epoch in its leader-epoch cache, its log
    end offset, and the incarnation (`ClusterView.registered`) of the process that read them."""

    leader_epoch: int
    end_offset: int
    incarnation: int


@dataclass(frozen=True)
class ClusterView:
    """One consistent snapshot of the metadata, as of `revision`."""

    cluster_id: str
    controller: int | None
    nodes: Mapping[int, NodeInfo]  # every node that ever registered
    live: frozenset[int]  # the nodes whose lease is alive
    topics: Mapping[str, TopicSpec]
    partitions: Mapping[TopicPartition, PartitionState]
    revision: int = 0
    # node -> the partitions whose log a storage failure took offline there (KIP-112's
    # report); only live nodes report, and only while they have something to report
    offline: Mapping[int, frozenset[TopicPartition]] = field(default_factory=dict)
    subscriptions: Mapping[str, StoredSubscription] = field(default_factory=dict)
    # node -> the revision at which its running process registered (Kafka's broker epoch,
    # KIP-841): a partition state stored before it does not know of that restart
    registered: Mapping[int, int] = field(default_factory=dict)
    unclean_starts: frozenset[int] = frozenset()  # nodes whose process started after a crash
    # partition -> node -> its replica's log end, reported while the partition is recovering
    log_ends: Mapping[TopicPartition, Mapping[int, LogEnd]] = field(default_factory=dict)
    # bytes/s each node may send to the replicas reassignments add (KIP-73); None: no limit
    reassignment_throttle: int | None = None
    # node -> DECOMMISSIONING (its replicas are moving off) or REMOVED (it holds none and is
    # given none, and a process of it that comes back is in no ISR); absent: in service
    node_states: Mapping[int, str] = field(default_factory=dict)

    def in_service(self) -> frozenset[int]:
        """The live nodes that may be given replicas: not decommissioning, not removed, not
        in a controlled shutdown."""
        return frozenset(
            n for n in self.live if n not in self.node_states and n not in self.shutting_down
        )

    # nodes in a controlled shutdown (a key under each one's lease): not to lead, nor to rejoin
    # an ISR; the controller moves their leaderships and ISR memberships to others
    shutting_down: frozenset[int] = frozenset()

    def partition(self, topic: str, partition: int) -> PartitionState | None:
        return self.partitions.get((topic, partition))

    def offline_replicas(self, topic: str, partition: int) -> frozenset[int]:
        """The nodes that report their replica of the partition offline."""
        tp = (topic, partition)
        return frozenset(node for node, reported in self.offline.items() if tp in reported)

    def restarted(self, state: PartitionState) -> frozenset[int]:
        """The ISR members whose process started after `state` was stored: their membership
        is of a previous incarnation, whose unsynced writes may be gone (KIP-903)."""
        registered = self.registered
        return frozenset(r for r in state.isr if registered.get(r, 0) > state.version)

    def crashed(self, state: PartitionState) -> frozenset[int]:
        """The ISR members that may have lost unsynced writes since they were in sync: those
        the state records as recovering, and those that restarted since after a crash."""
        return frozenset(state.recovering) | (self.restarted(state) & self.unclean_starts)

    def reported_log_ends(self, topic: str, partition: int) -> dict[int, LogEnd]:
        """The partition's log ends reported by the nodes' current processes: an earlier
        incarnation's report describes a log that may have lost its tail since."""
        registered = self.registered
        reported = self.log_ends.get((topic, partition), {})
        return {n: end for n, end in reported.items() if end.incarnation == registered.get(n)}


@dataclass(frozen=True)
class Fence:
    """A controller's proof of election: its election key and the key's create revision.

    A write guarded by a fence succeeds only while that key still exists with that revision
    (etcd's Jepsen analysis: revisions are safe where its locks are not)."""

    node_id: int
    key: str
    create_revision: int


Listener = Callable[[ClusterView], None]


class MetadataStore(ABC):
    """Where the cluster's metadata lives; `view` is the latest snapshot this node has seen.

    Listeners run on the event loop after every change of the view, in order of registration.
    """

    def __init__(self, view: ClusterView) -> None:
        self.view = view
        # The revision at which this process registered (0 before start): a partition state
        # older than that was decided without knowing this node restarted.
        self.registration = 0
        self._listeners: list[Listener] = []
        self._changed: asyncio.Event | None = None

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        self._listeners.remove(listener)

    def publish(self, view: ClusterView) -> None:
        """Install a new view and tell the listeners (implementations call this)."""
        self.view = view
        for listener in list(self._listeners):
            listener(view)
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def wait_for(self, predicate: Callable[[ClusterView], bool], timeout: float) -> bool:
        """Wait until the view satisfies `predicate`; False if `timeout` seconds pass first."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate(self.view):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            if self._changed is None:
                self._changed = asyncio.Event()
            try:
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation
                # that arrives as the event fires.
                async with asyncio.timeout(remaining):
                    await self._changed.wait()
            except TimeoutError:
                return predicate(self.view)
        return True

    @abstractmethod
    async def start(self, node: NodeInfo, clean_start: bool = True) -> None:
        """Register this node (under a lease, kept alive in the background) and load the view.

        The first start of a process also records its incarnation (sets `registration`), and
        whether its logs were closed cleanly before (`clean_start`); a later call only
        re-registers (the single node learning its URL)."""

    @abstractmethod
    async def close(self) -> None:
        """Leave: revoke the lease (the node is gone at once) and stop watching."""

    @abstractmethod
    def stopping(self, deadline: float) -> None:
        """The node is stopping: whatever it still asks the store ends by `deadline` (the
        loop's clock), and a store found unreachable meanwhile is asked nothing more."""

    @abstractmethod
    async def begin_shutdown(self) -> None:
        """Mark this node as shutting down (`ClusterView.shutting_down`), under its lease so
        that the mark goes with the node; MetadataUnavailable if it cannot be written."""

    @abstractmethod
    async def resign(self) -> None:
        """Leave the controller election (delete this node's election key): a controller
        that shuts down hands the role to the next candidate before its lease goes. Call
        only once this node's Controller is closed (else it campaigns again)."""

    @abstractmethod
    def report_offline(self, partitions: Iterable[TopicPartition]) -> None:
        """Publish the partitions whose log is offline on this node (the whole set, replacing
        the last), for the controller to move their leadership away. Returns at once; the
        store writes it in the background until it succeeds, and again whenever this node
        registers anew, for the life of the process (a restart reopens the logs)."""

    @abstractmethod
    async def topic_exists(self, name: str) -> bool:
        """Whether the store holds the topic now (read from the store, not the view, which
        may lag a change made through another node)."""

    @abstractmethod
    async def read_partition(
        self, topic: str, partition: int, timeout_s: float
    ) -> PartitionState | None:
        """A partition's state read from the store now (not the view, which a node cut off
        from the store cannot know is stale); MetadataUnavailable past `timeout_s`."""

    @abstractmethod
    async def campaign(self) -> Fence:
        """Wait until this node is elected controller (lowest create revision under the
        election prefix); the fence guards every controller write."""

    @abstractmethod
    async def create_topic(
        self, fence: Fence, spec: TopicSpec, states: Sequence[PartitionState]
    ) -> None:
        """Store a new topic and its partitions' states in one fenced transaction.

        Raises engine.errors.TopicAlreadyExists if the name is taken, FencedController if the
        fence no longer holds."""

    @abstractmethod
    async def update_topic(
        self, fence: Fence, spec: TopicSpec, new_states: Mapping[int, PartitionState]
    ) -> bool:
        """Replace a topic's record (configs, a larger partition count) and add the new
        partitions' states; a compare-and-set on `spec.version`. False if it changed."""

    @abstractmethod
    async def delete_topic(self, fence: Fence, name: str) -> None:
        """Remove a topic, its partitions' states and their reported log ends (UnknownTopic if
        there is none)."""

    async def set_partition(
        self,
        topic: str,
        partition: int,
        state: PartitionState,
        fence: Fence | None = None,
        incarnations: Mapping[int, int] | None = None,
        recovered: bool = False,
    ) -> PartitionState | None:
        """Compare-and-set a partition's state on `state.version` (the version it was read
        at), also guarded by `fence` when the controller writes, and by `incarnations`: the
        ISR members' incarnations (`ClusterView.registered`) the decision assumed, so that a
        replica which restarted meanwhile is not kept in the ISR (KIP-903). `recovered`: the
        write ends the partition's recovery, its log ends reported go with it. Returns the
        stored state with its new version, or None if a guard did not hold."""
        guards = [] if incarnations is None else [incarnations]
        key = (topic, partition)
        stored = await self.set_partitions(
            [(key, state)], fence, guards, [key] if recovered else ()
        )
        return None if stored is None else stored[0]

    @abstractmethod
    async def set_partitions(
        self,
        states: Sequence[tuple[TopicPartition, PartitionState]],
        fence: Fence | None = None,
        incarnations: Sequence[Mapping[int, int]] = (),
        recovered: Collection[TopicPartition] = (),
    ) -> list[PartitionState] | None:
        """`set_partition` for several partitions at once, all or none (one etcd transaction:
        at most MAX_PARTITIONS_PER_WRITE); `incarnations`: guards, any number; `recovered`:
        those of the partitions whose reported log ends the write deletes. Returns the
        stored states in order, or None if any guard did not hold (then nothing was
        written)."""

    @abstractmethod
    async def report_log_ends(self, reports: Sequence[tuple[TopicPartition, int, LogEnd]]) -> bool:
        """Store this node's log end of each partition that waits for it (KIP-966's balanced
        recovery), all or none (at most MAX_PARTITIONS_PER_WRITE), each guarded by the
        version of the partition's state that asked for it, so that none outlives the
        recovery. False if a guard did not hold (then nothing was written)."""

    @abstractmethod
    async def set_node_state(self, fence: Fence, node: int, state: str | None) -> None:
        """Store a node's state (DECOMMISSIONING, REMOVED; None: back in service), fenced:
        the controller's decision. FencedController if the fence no longer holds."""

    @abstractmethod
    async def set_reassignment_throttle(self, bytes_per_second: int | None) -> None:
        """Store the reassignment throttle every node applies (None removes it). Any node may
        write it: it is a setting, no partition's state."""

    @abstractmethod
    async def put_subscription(self, name: str, document: bytes, version: int) -> int | None:
        """Store a subscription's document: a compare-and-set on `version` (0: only if there
        is none by that name). Any node may write (no controller fence: a subscription is
        no partition's state). Returns the new version, or None if `version` did not match."""

    @abstractmethod
    async def delete_subscription(self, name: str) -> bool:
        """Remove a subscription; False if there was none."""
