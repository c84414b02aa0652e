"""Consumer groups: membership, assignment, hand-over of partitions, fetch and commit.

The coordinator owns the groups whose `__consumer_offsets` partition is on this node. Every
membership change and every commit is written to that topic before it is acknowledged, so a
restarted node (or, later, the next coordinator) takes the groups over as they were: members
carry on with their ids, and positions restart from the committed offsets.

A partition has at most one owner. When a rebalance moves it, the old owner gives it up at its
next fetch (after that fetch's auto-commit) or at once if it is parked in a fetch; only then does
the new owner start, from the committed offset. A group that only grows, shrinks by leaving and
commits as it goes therefore delivers every record once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from engine import offsets_topic
from engine.errors import (
    EngineError,
    LogClosed,
    OffsetMovedToTieredStorage,
    OffsetOutOfRange,
    UnknownPartition,
    UnknownTopic,
)
from engine.offsets_topic import CommittedOffset, StoredGroup, TopicPartition
from groups import remote
from groups.assignors import ASSIGNORS
from groups.errors import GroupError
from replication.acks import Acks
from replication.errors import LeaderNotAvailable, NotLeader, ReplicationError
from replication.fetch_limits import FetchLimits
from replication.forward_client import ForwardClient
from replication.metadata import NO_LEADER
from replication.partition import Partition
from replication.replica_manager import ReplicaManager

OFFSET_RESETS = ("earliest", "latest", "none")
# Whole batches -> at most N records from an offset on, each naming its topic and partition,
# ready for the answer's encoder (a decoder may skip records: the offset still passes them);
# and the offset after the last. The gateway gives its codec: the coordinator counts and
# positions records, never encodes them.
RecordDecoder = Callable[[memoryview, int, int, TopicPartition], tuple[list[Any], int]]
logger = logging.getLogger(__name__)
RemoteFetch = Literal["read", "poll"]
AUTO_COMMIT_WRITE_S = 1.0  # auto-commits reach the log within this (auto.commit.interval.ms)
CURSOR_MASK = 2**31 - 1
REPLAY_WAIT_MS = 30_000  # how long a new coordinator waits for its offsets log to commit
METADATA_OVERHEAD = 4096  # the batch and record headers, the key, and slack


def _illegal_state(group: str, member_id: str, why: str) -> GroupError:
    return GroupError(
        "ILLEGAL_STATE",
        f"member {member_id!r} of group {group!r} {why}: subscribing and assigning partitions "
        "manually exclude each other (unsubscribe first)",
    )


def unknown_member(group: str, member_id: str) -> GroupError:
    return GroupError(
        "UNKNOWN_MEMBER",
        f"group {group!r} has no member {member_id!r} (it left, expired or never joined); "
        "join again",
    )


@dataclass
class Member:
    member_id: str
    topics: tuple[str, ...]
    session_timeout_ms: int
    auto_offset_reset: str
    auto_commit: bool
    target: set[TopicPartition] = field(default_factory=set)  # what the assignor gives it
    owned: set[TopicPartition] = field(default_factory=set)  # what it may read now
    positions: dict[TopicPartition, int] = field(default_factory=dict)  # next to deliver
    fetching: int = 0
    fetch_turn: int = 0  # a newer fetch supersedes a parked older one
    cursor: int = field(default_factory=lambda: random.getrandbits(31))  # the last delivery's
    before_last: dict[TopicPartition, int] = field(default_factory=dict)  # positions it moved
    rotation: int = 0  # where the next fetch starts among the owned partitions
    wake: asyncio.Future[None] | None = None
    expiry: asyncio.TimerHandle | None = None  # fires at or before `deadline`
    deadline: float = 0.0  # loop time when the session runs out, if no request is in flight
    # A REST Proxy v2 consumer instance's settings (format, fetch.min.bytes, ...): kept with
    # the member in the log, so whichever node coordinates the group next serves it alike.
    instance: dict[str, Any] = field(default_factory=dict)
    # Kafka's assign(): `target` is what the member chose, outside the group's assignment and
    # its ownership (as in Kafka, a partition may be assigned to several such members).
    manual: bool = False
    _assignment: tuple[set[TopicPartition], list[dict[str, Any]]] | None = None

    def assignment(self) -> list[dict[str, Any]]:
        """The target as the API shows it; kept until a rebalance gives a new target."""
        if self._assignment is None or self._assignment[0] is not self.target:
            self._assignment = (self.target, assignment_doc(self.target))
        return self._assignment[1]

    def stored(self) -> dict[str, Any]:
        doc = {
            "member_id": self.member_id,
            "topics": list(self.topics),
            "session_timeout_ms": self.session_timeout_ms,
            "auto_offset_reset": self.auto_offset_reset,
            "auto_commit": self.auto_commit,
            "assignment": self.assignment(),
        }
        if self.instance:
            doc["instance"] = self.instance
        if self.manual:
            doc["manual"] = True
        return doc

    def poke(self) -> None:
        """Wake the member's parked fetch, if any, to look at its partitions again."""
        if self.wake is not None and not self.wake.done():
            self.wake.set_result(None)


@dataclass
class Group:
    name: str
    assignor: str = "range"
    generation: int = 0
    members: dict[str, Member] = field(default_factory=dict)
    offsets: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)
    owners: dict[TopicPartition, str] = field(default_factory=dict)
    partition_counts: dict[str, int] = field(default_factory=dict)  # as last assigned
    unwritten: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)
    write_timer: asyncio.TimerHandle | None = None

    @property
    def state(self) -> Literal["Empty", "Rebalancing", "Stable"]:
        if not self.members:
            return "Empty"
        settled = all(m.owned == m.target for m in self.members.values())
        return "Stable" if settled else "Rebalancing"

    def subscribed(self) -> set[str]:
        return {t for m in self.members.values() for t in m.topics}


def assignment_doc(partitions: Iterable[TopicPartition]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[int]] = {}
    for topic, p in sorted(partitions):
        by_topic.setdefault(topic, []).append(p)
    return [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]


@dataclass(frozen=True)
class JoinRequest:
    topics: tuple[str, ...]
    session_timeout_ms: int
    auto_offset_reset: str
    auto_commit: bool
    assignor: str | None = None  # None: the group's
    instance_id: str | None = None  # a static member's chosen id (Kafka's group.instance.id)


@dataclass
class PartitionReads:
    """What one pass over a member's partitions found, before it is delivered."""

    records: list[Any]
    next_offsets: dict[TopicPartition, int]
    counts: dict[str, int]  # records per topic, for metrics
    bytes_read: int


@dataclass
class GroupFetch:
    """A member's fetch answer: records ready for the JSON encoder and the member's view."""

    records: list[Any]
    assignment: list[dict[str, Any]]
    generation: int
    counts: dict[str, int]  # records per topic, for metrics
    cursor: int  # the client echoes it on its next fetch, proving it received this answer


def partition_count(replicas: ReplicaManager) -> int:
    """The offsets topic's partition count; until the controller has created the topic, no
    node can coordinate a group (Kafka's COORDINATOR_NOT_AVAILABLE)."""
    spec = replicas.store.view.topics.get(offsets_topic.OFFSETS_TOPIC)
    if spec is None:
        raise GroupError(
            "COORDINATOR_NOT_AVAILABLE",
            f"{offsets_topic.OFFSETS_TOPIC} does not exist yet (the controller creates it once "
            "enough nodes are alive); retry shortly",
        )
    return spec.partitions


class GroupCoordinator:
    """Every group this node coordinates, their members, and their committed offsets."""

    def __init__(
        self,
        replicas: ReplicaManager,
        forwarder: ForwardClient,
        min_session_timeout_ms: int,
        max_session_timeout_ms: int,
        max_members: int,
        decode_records: RecordDecoder,
    ) -> None:
        self.replicas = replicas
        self.decode_records = decode_records
        self.forwarder = forwarder
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.max_members = max_members
        self.groups: dict[str, Group] = {}
        # offsets partition -> the leader epoch its groups were replayed in: until then a new
        # leader knows none of them, and must not answer as if they had no offsets
        self._loaded: dict[int, int] = {}
        self._loads: dict[int, asyncio.Task[None]] = {}  # offsets partition -> its replay
        self._written: dict[str, tuple[Partition, int]] = {}  # each group's last write
        self.closing = False  # shutting down: sessions stop running out
        self._loop = asyncio.get_running_loop()
        # Fetch requests sent to other nodes for members' partitions they lead, one per leader
        # node and pass: immediate reads, and parked long-polls.
        self.remote_fetches: dict[RemoteFetch, int] = {"read": 0, "poll": 0}

    # -- start ---------------------------------------------------------------------------------

    def restore(self, stored: Mapping[str, StoredGroup]) -> None:
        """Take over groups as the offsets topic left them: offsets, generation and members,
        each member with a fresh session and the partitions it was assigned. Unreadable
        metadata costs the group its members (they join again), never its offsets."""
        for name, saved in stored.items():
            group = Group(name, offsets=dict(saved.offsets))
            try:
                self._restore_metadata(group, saved.metadata or {})
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                logger.warning("group %r: unreadable metadata, members dropped: %r", name, exc)
                group = Group(name, offsets=dict(saved.offsets))
            if group.assignor not in ASSIGNORS:
                group.assignor = "range"
            for member in group.members.values():
                self._schedule_expiry(group, member)
            self.groups[name] = group

    async def role_changed(self, partition: Partition) -> None:
        """An offsets partition came to this node (replay its groups from the log, in the
        background), moved to a new epoch while led here since its replay (keep its groups),
        or left it (its groups are coordinated elsewhere now; their parked fetches answer)."""
        if partition.topic != offsets_topic.OFFSETS_TOPIC:
            return
        previous = self._loads.pop(partition.partition, None)
        if previous is not None:
            previous.cancel()
        if partition.is_leader:
            epoch = partition.leader_epoch
            if partition.partition in self._loaded:
                # Led here since its replay: every change since went through this node's
                # log, so the groups in memory are the log's. A replay would replace them
                # under their members: positions lost, parked fetches and session timers
                # left on the replaced groups, and a commit answered while it ran missing.
                self._loaded[partition.partition] = epoch
                return
            # Not awaited: the node applies its next views only after its role listeners
            # return, and the view shrinking this partition's ISR to what is alive may be
            # the one that lets its high watermark reach the log end the replay waits for.
            load = asyncio.create_task(self._load(partition, epoch))
            self._loads[partition.partition] = load
            load.add_done_callback(functools.partial(self._loaded_by, partition.partition))
            return
        self._loaded.pop(partition.partition, None)
        count = partition_count(self.replicas)
        for name in [
            n for n in self.groups if offsets_topic.partition_for(n, count) == partition.partition
        ]:
            group = self.groups.pop(name)
            if group.write_timer is not None:
                group.write_timer.cancel()
            for member in group.members.values():
                if member.expiry is not None:
                    member.expiry.cancel()
                member.poke()

    async def _load(self, partition: Partition, epoch: int) -> None:
        """Replay an offsets partition's groups once its log is all committed: a new leader's
        high watermark trails its log until the followers fetch from it, and the log is the
        truth from now on. Only for the epoch it was started in."""
        end = partition.log_end_offset
        if partition.high_watermark < end:
            with contextlib.suppress(EngineError):
                await self.replicas.wait_committed(partition, end - 1, REPLAY_WAIT_MS)
        stored = await asyncio.to_thread(offsets_topic.replay, [partition])
        if partition.is_leader and partition.leader_epoch == epoch:
            self.restore(stored)
            self._loaded[partition.partition] = epoch
            self.topics_changed()

    async def loaded(self) -> None:
        """Wait for the replays under way (a starting node answers for its groups once the
        offsets partitions it leads are replayed, as Kafka's coordinator loads on start)."""
        await asyncio.gather(*self._loads.values(), return_exceptions=True)

    def _loaded_by(self, offsets_partition: int, load: asyncio.Task[None]) -> None:
        """A replay ended: forget it, and say why if it failed."""
        if self._loads.get(offsets_partition) is load:
            del self._loads[offsets_partition]
        if not load.cancelled() and load.exception() is not None:
            logger.error(
                "replaying %s-%d failed; its groups answer 503 until its next leader change",
                offsets_topic.OFFSETS_TOPIC,
                offsets_partition,
                exc_info=load.exception(),
            )

    def coordinator(self, name: str) -> Partition:
        """The offsets partition holding group `name`, which this node must lead: NotLeader
        names the node that does (the gateway forwards there)."""
        topic = offsets_topic.OFFSETS_TOPIC
        p = offsets_topic.partition_for(name, partition_count(self.replicas))
        partition = self._leader(topic, p)
        if self._loaded.get(p) != partition.leader_epoch:
            raise LeaderNotAvailable(
                f"{topic}-{p} is being loaded by its new leader (the coordinator of group "
                f"{name!r}); retry shortly"
            )
        return partition

    @staticmethod
    def _restore_metadata(group: Group, meta: Mapping[str, Any]) -> None:
        group.generation = int(meta.get("generation", 0))
        group.assignor = str(meta.get("assignor", "range"))
        group.partition_counts = {
            str(t): int(n) for t, n in dict(meta.get("partition_counts", {})).items()
        }
        for doc in meta.get("members", []):
            member = Member(
                str(doc["member_id"]),
                tuple(str(t) for t in doc["topics"]),
                int(doc["session_timeout_ms"]),
                str(doc["auto_offset_reset"]),
                bool(doc["auto_commit"]),
            )
            member.target = {
                (str(a["topic"]), int(p)) for a in doc["assignment"] for p in a["partitions"]
            }
            member.instance = dict(doc.get("instance", {}))
            member.manual = bool(doc.get("manual", False))
            group.members[member.member_id] = member
            if member.manual:
                member.owned = set(member.target)
                continue
            for tp in member.target - set(group.owners):
                member.owned.add(tp)
                group.owners[tp] = member.member_id

    def close(self) -> None:
        """Shutting down: no more expiries or replays; parked member fetches answer now."""
        self.closing = True
        for load in self._loads.values():
            load.cancel()
        for group in self.groups.values():
            for member in group.members.values():
                if member.expiry is not None:
                    member.expiry.cancel()
                    member.expiry = None
                member.poke()

    # -- membership ----------------------------------------------------------------------------

    def join(self, name: str, request: JoinRequest) -> tuple[Group, Member]:
        """Add a member and rebalance. A static member (`instance_id`) joining again is the
        same member restarted: it keeps its partitions, without a rebalance unless its topics
        changed, and what it was delivered but did not commit comes again."""
        self.coordinator(name)
        for topic in request.topics:
            self.replicas.topic(topic)
        group = self.groups.get(name) or Group(name)
        existing = group.members.get(request.instance_id or "")
        others = len(group.members) - (existing is not None)
        assignor = request.assignor
        if assignor is not None and assignor != group.assignor and others:
            raise GroupError(
                "INCONSISTENT_ASSIGNOR",
                f"group {name!r} uses the {group.assignor!r} assignor while it has "
                f"members; {assignor!r} can be chosen once it is empty",
            )
        member = Member(
            request.instance_id or uuid.uuid4().hex,
            request.topics,
            request.session_timeout_ms,
            request.auto_offset_reset,
            request.auto_commit,
        )
        self._check_room(group, member, existing)
        reassign = existing is None or existing.topics != member.topics
        if assignor is not None:
            reassign = reassign or assignor != group.assignor
            group.assignor = assignor
        self.groups[name] = group
        if existing is not None:
            existing.fetch_turn += 1  # a fetch parked by the previous process answers empty
            existing.poke()
            existing.positions.clear()
            existing.topics = member.topics
            existing.session_timeout_ms = member.session_timeout_ms
            existing.auto_offset_reset = member.auto_offset_reset
            existing.auto_commit = member.auto_commit
            member = existing
        group.members[member.member_id] = member
        if reassign:
            self._rebalance(group)
        else:
            self._write_metadata(group)
        self._schedule_expiry(group, member)
        return group, member

    def _check_room(self, group: Group, member: Member, replacing: Member | None) -> None:
        """Refuse a member the group cannot hold: past `max_members`, or one whose group
        metadata record would outgrow the offsets topic's max.message.bytes."""
        if replacing is None and len(group.members) >= self.max_members:
            raise GroupError(
                "GROUP_MAX_SIZE_REACHED",
                f"group {group.name!r} has {len(group.members)} members, the most it may have",
            )
        topics = self.replicas.store.view.topics
        assignment_bytes = 12 * sum(topics[t].partitions for t in member.topics)
        size = (
            len(orjson.dumps(self._metadata(group)))
            + len(orjson.dumps(member.stored()))
            + assignment_bytes
            + METADATA_OVERHEAD
        )
        limit = self.replicas.topic_config(offsets_topic.OFFSETS_TOPIC).max_message_bytes
        if size > limit:
            raise GroupError(
                "GROUP_METADATA_TOO_LARGE",
                f"with this member, group {group.name!r}'s metadata would take about {size} "
                f"bytes, more than the {limit} bytes a record of {offsets_topic.OFFSETS_TOPIC} "
                "may have",
            )

    def leave(self, name: str, member_id: str) -> None:
        """A member leaves: with auto_commit, what it was delivered is committed first."""
        group, member = self._member(name, member_id)
        if member.auto_commit:
            self._commit_positions(group, member)
        self._remove(group, member)

    # -- REST Proxy v2 consumer instances ----------------------------------------------------

    def create_instance(
        self, name: str, request: JoinRequest, instance: dict[str, Any]
    ) -> tuple[Group, Member]:
        """A v2 consumer instance: a static member (its name is its `instance_id`) that
        subscribes later. Refused if the group has a member of that name already."""
        assert request.instance_id is not None
        self.coordinator(name)
        group = self.groups.get(name)
        if group is not None and request.instance_id in group.members:
            raise GroupError(
                "MEMBER_ALREADY_EXISTS",
                f"group {name!r} has a member {request.instance_id!r} already",
            )
        group, member = self.join(name, request)
        member.instance = instance
        self._write_metadata(group)
        return group, member

    def subscribe(
        self,
        name: str,
        member_id: str,
        topics: tuple[str, ...],
        instance: dict[str, Any] | None = None,
    ) -> Member:
        """Change what an existing member consumes (no topics: nothing, and no manual
        assignment either, as Kafka's unsubscribe); its instance settings stay, or become
        `instance`. A member with a manual assignment cannot subscribe (Kafka's
        IllegalStateException)."""
        group, member = self._member(name, member_id)
        if member.manual and topics:
            raise _illegal_state(name, member_id, "has a manual assignment")
        if member.auto_commit:  # before its positions go, as a Kafka consumer rejoining
            self._commit_positions(group, member)
        if member.manual:
            self._assign(group, member, ())
        if instance is None:
            instance = member.instance
        member.instance = instance
        _, member = self.join(
            name,
            JoinRequest(
                topics,
                member.session_timeout_ms,
                member.auto_offset_reset,
                member.auto_commit,
                instance_id=member_id,
            ),
        )
        member.instance = instance
        return member

    def assign(self, name: str, member_id: str, partitions: tuple[TopicPartition, ...]) -> Member:
        """Kafka's assign(): the member reads exactly these partitions (none: nothing), outside
        the group's assignment; refused for a subscribed member (IllegalStateException)."""
        group, member = self._member(name, member_id)
        if member.topics:
            raise _illegal_state(name, member_id, "is subscribed to topics")
        for topic, partition in partitions:
            self.replicas.check_partition(topic, partition)
        self._assign(group, member, partitions)
        self._write_metadata(group)
        self._schedule_expiry(group, member)
        return member

    def _assign(self, group: Group, member: Member, partitions: tuple[TopicPartition, ...]) -> None:
        for tp in member.owned - set(partitions):
            self._release(group, member, tp)
        member.manual = bool(partitions)
        member.target = set(partitions)
        member.owned = set(partitions)
        member.poke()

    def touch(self, name: str, member_id: str) -> Member:
        """A member's request that is no fetch nor commit: it renews the session."""
        group, member = self._member(name, member_id)
        if not member.fetching:
            self._schedule_expiry(group, member)
        return member

    async def seek(
        self, name: str, member_id: str, targets: list[tuple[TopicPartition, object]]
    ) -> None:
        """Set the member's next position on owned partitions: an offset within the log,
        `earliest` or `latest` (Kafka's seek, seekToBeginning, seekToEnd)."""
        group, member = self._member(name, member_id)
        for tp, _ in targets:
            if tp not in member.owned:
                raise self._not_assigned(group, member, tp)
        resolved = [(tp, await self._resolve(*tp, to)) for tp, to in targets]
        group, member = self._member(name, member_id)
        for tp, position in resolved:
            if tp not in member.owned:
                raise self._not_assigned(group, member, tp)
            member.positions[tp] = position
        member.before_last = {}
        if not member.fetching:
            self._schedule_expiry(group, member)

    def committed(
        self, name: str, member_id: str, partitions: list[TopicPartition]
    ) -> list[tuple[TopicPartition, CommittedOffset | None]]:
        """The group's committed offsets of the partitions asked, for one of its members."""
        group, _ = self._member(name, member_id)
        return [(tp, group.offsets.get(tp)) for tp in partitions]

    def _expire(self, group: Group, member: Member) -> None:
        member.expiry = None
        if group.members.get(member.member_id) is not member or member.fetching or self.closing:
            return  # gone, or a request in flight: its end arms the timer again
        if self._loop.time() < member.deadline:
            member.expiry = self._loop.call_at(member.deadline, self._expire, group, member)
        else:
            self._remove(group, member)

    def _remove(self, group: Group, member: Member) -> None:
        if member.expiry is not None:
            member.expiry.cancel()
        del group.members[member.member_id]
        for tp in list(member.owned):
            self._release(group, member, tp)
        member.poke()
        self._rebalance(group)

    def _schedule_expiry(self, group: Group, member: Member) -> None:
        """Renew the session. One timer per member, moved only when it fires early (a request
        renews the session with a float, not a new timer)."""
        if self.closing:
            return
        member.deadline = self._loop.time() + member.session_timeout_ms / 1000
        if member.expiry is not None and member.expiry.when() > member.deadline:
            member.expiry.cancel()  # a rejoin with a shorter session
            member.expiry = None
        if member.expiry is None:
            member.expiry = self._loop.call_at(member.deadline, self._expire, group, member)

    def topics_changed(self, deleted: str | None = None) -> None:
        """A topic was created, grown or deleted (or the gateway started): rebalance the groups
        whose topics' partitions no longer match their assignment; a deleted topic's committed
        offsets go too (tombstones), as in Kafka. Fetches never poll for this."""
        for group in list(self.groups.values()):
            if deleted is not None:
                for member in group.members.values():
                    for tp in [tp for tp in member.owned if tp[0] == deleted]:
                        self._release(group, member, tp)
                        if member.manual:
                            member.target.discard(tp)
                gone = [tp for tp in group.offsets if tp[0] == deleted]
                for tp in gone:
                    del group.offsets[tp]
                    group.unwritten.pop(tp, None)
                if gone:
                    self._write_group(group, [(self._key(group.name, tp), None) for tp in gone])
            if group.members and group.partition_counts != self._partition_counts(group):
                self._rebalance(group)

    # -- assignment ----------------------------------------------------------------------------

    def _partition_counts(self, group: Group) -> dict[str, int]:
        topics = self.replicas.store.view.topics
        return {t: topics[t].partitions for t in sorted(group.subscribed()) if t in topics}

    def _rebalance(self, group: Group) -> None:
        """A new generation: new targets; partitions move now where nothing is at stake, the
        rest as their owners fetch."""
        group.generation += 1
        group.partition_counts = self._partition_counts(group)
        targets = ASSIGNORS[group.assignor](
            {m.member_id: m.topics for m in group.members.values() if not m.manual},
            group.partition_counts,
        )
        for member_id, partitions in targets.items():
            group.members[member_id].target = set(partitions)
        for member in group.members.values():
            for tp in member.owned - member.target:
                if member.wake is not None or not self._uncommitted(group, member, tp):
                    self._release(group, member, tp)
        for tp in [tp for tp, owner in group.owners.items() if owner not in group.members]:
            del group.owners[tp]
        for member in group.members.values():
            self._acquire_free(group, member)
            member.poke()
        self._write_metadata(group)

    def _uncommitted(self, group: Group, member: Member, tp: TopicPartition) -> bool:
        position = member.positions.get(tp)
        committed = group.offsets.get(tp)
        return position is not None and (committed is None or committed.offset != position)

    def _release(self, group: Group, member: Member, tp: TopicPartition) -> None:
        member.owned.discard(tp)
        member.positions.pop(tp, None)
        if group.owners.get(tp) == member.member_id:
            del group.owners[tp]
        for other in group.members.values():
            if tp in other.target and other is not member:
                self._acquire_free(group, other)
                other.poke()

    def _acquire_free(self, group: Group, member: Member) -> None:
        if member.manual:  # its own choice: owned as assigned, from no one
            return
        for tp in member.target - member.owned:
            if tp not in group.owners:
                group.owners[tp] = member.member_id
                member.owned.add(tp)

    def _reconcile(self, group: Group, member: Member) -> None:
        """At a fetch: give up what was moved away, take what has been freed."""
        if member.manual:
            return
        for tp in member.owned - member.target:
            self._release(group, member, tp)
        self._acquire_free(group, member)

    # -- fetch ---------------------------------------------------------------------------------

    async def fetch(
        self,
        name: str,
        member_id: str,
        limits: FetchLimits,
        cursor: int | None = None,
        decode: RecordDecoder | None = None,
    ) -> GroupFetch:
        """Long-poll across the member's partitions; counts as a heartbeat.

        With auto_commit, what the previous fetch delivered is committed first. Until a member
        owns a partition (the join settling) it waits, up to the timeout, rather than answer
        empty. A newer fetch by the same member answers an older parked one at once, empty.
        A `cursor` other than the last answer's means that answer was lost on the way: its
        records are delivered again (see _rewind). `decode`: how batches become the answer's
        records, if not the coordinator's own way (another API's record shape).
        """
        group, member = self._member(name, member_id)
        if cursor is not None and cursor != member.cursor:
            self._rewind(member, cursor)
        member.fetch_turn += 1
        turn = member.fetch_turn
        member.poke()
        member.fetching += 1
        try:
            if member.auto_commit:
                self._commit_positions(group, member, durable=False)
            deadline = self._loop.time() + limits.timeout_ms / 1000
            while True:
                if self.groups.get(name) is not group:
                    self.coordinator(name)  # the group moved to another node: NotLeader
                if group.members.get(member_id) is not member:
                    raise unknown_member(name, member_id)
                if member.fetch_turn != turn:
                    return GroupFetch([], member.assignment(), group.generation, {}, member.cursor)
                self._reconcile(group, member)
                elsewhere = self._led_elsewhere(member)
                fetched = await self._read_remote(group, member, elsewhere, limits)
                fetched.update(await self._read_tiered(group, member, limits))
                answer = self._read(group, member, limits, fetched, decode or self.decode_records)
                if not answer.records and answer.next_offsets:
                    # Only records the decoder's filter skips: pass them and read on.
                    member.positions.update(answer.next_offsets)
                    if self._loop.time() < deadline:
                        continue
                remaining = deadline - self._loop.time()
                if (
                    answer.bytes_read >= limits.min_bytes
                    or len(answer.records) >= limits.max_records
                    or remaining <= 0
                    or self.replicas.notifier.closing
                ):
                    return self._deliver(group, member, answer)
                wake = member.wake = self._loop.create_future()
                # Those that failed at once would fail again at once: no poll for them.
                read_there = {tp: url for tp, url in elsewhere.items() if tp in fetched}
                polls = [
                    asyncio.ensure_future(
                        self._poll_remote(
                            member, url, {tp: fetched[tp] for tp in tps}, limits, remaining
                        )
                    )
                    for url, tps in self._by_leader(member, read_there).items()
                ]
                try:
                    await self.replicas.wait_any(self._leaders(member.owned), remaining, wake)
                finally:
                    for poll in polls:
                        poll.cancel()
                    if member.wake is wake:
                        member.wake = None
        finally:
            member.fetching -= 1
            if group.members.get(member_id) is member and not member.fetching:
                self._schedule_expiry(group, member)

    def _leaders(self, partitions: Iterable[TopicPartition]) -> list[Partition]:
        found = (self.replicas.local(topic, p) for topic, p in partitions)
        return [partition for partition in found if partition is not None and partition.is_leader]

    def _led_elsewhere(self, member: Member) -> dict[TopicPartition, str]:
        """The member's partitions another node leads, with that node's URL."""
        view = self.replicas.store.view
        out = {}
        for tp in member.owned:
            state = view.partitions.get(tp)
            node = None if state is None else view.nodes.get(state.leader)
            if node is not None and state is not None and state.leader != self.replicas.node_id:
                out[tp] = node.url
        return out

    async def _read_tiered(
        self, group: Group, member: Member, limits: FetchLimits
    ) -> dict[TopicPartition, remote.RemoteRead]:
        """The member's partitions led here whose position is on S3 only, read from there
        (the partition layer's fetch serves tiered offsets), like reads of other leaders."""
        out = {}
        for tp in sorted(member.owned):
            local = self.replicas.local(*tp)
            if local is None or not local.is_leader or not self._tiered(member, tp):
                continue
            try:
                position = self._position(group, member, tp, local)
                read = await self.replicas.fetch(*tp, position, limits.max_bytes, 0, 0)
            except EngineError:
                continue
            out[tp] = remote.RemoteRead(position, read.data, read.high_watermark)
        return out

    def _tiered(self, member: Member, tp: TopicPartition) -> bool:
        """Whether the member's position (or, before it has one, the partition's start) is
        on S3 only."""
        local = self.replicas.local(*tp)
        if local is None:
            return False
        position = member.positions.get(tp, local.log_start_offset)
        return position < local.local_log_start_offset

    async def _read_remote(
        self,
        group: Group,
        member: Member,
        elsewhere: Mapping[TopicPartition, str],
        limits: FetchLimits,
    ) -> dict[TopicPartition, remote.RemoteRead]:
        """Fetch the partitions led elsewhere at the member's positions: one request per leader
        node, all at once."""
        found = await asyncio.gather(
            *(
                self._fetch_remote(group, member, url, tps, limits)
                for url, tps in self._by_leader(member, elsewhere).items()
            )
        )
        out = {}
        for reads in found:
            for tp, read in reads.items():
                if isinstance(read, remote.RemoteRead):
                    out[tp] = read
                elif isinstance(read, GroupError):
                    raise read
                elif not isinstance(read, EngineError | asyncio.CancelledError):
                    logger.warning("reading %s-%d from its leader failed: %r", tp[0], tp[1], read)
        return out

    def _by_leader(
        self, member: Member, elsewhere: Mapping[TopicPartition, str]
    ) -> dict[str, list[TopicPartition]]:
        """The partitions of `elsewhere` by their leader's URL, each in the member's turn."""
        out: dict[str, list[TopicPartition]] = {}
        for tp in self._in_turn(member):
            url = elsewhere.get(tp)
            if url is not None:
                out.setdefault(url, []).append(tp)
        return out

    async def _fetch_remote(
        self,
        group: Group,
        member: Member,
        url: str,
        tps: Sequence[TopicPartition],
        limits: FetchLimits,
    ) -> dict[TopicPartition, remote.RemoteRead | BaseException]:
        """The member's partitions the node at `url` leads, read at their positions in one
        request (a sibling worker's from its files instead): each one's read, or why it has
        none. Those out of range there are reset (auto_offset_reset) and read again, together."""
        out: dict[TopicPartition, remote.RemoteRead | BaseException] = {}
        positions = await asyncio.gather(
            *(self._remote_position(group, member, tp, url) for tp in tps),
            return_exceptions=True,
        )
        asked = {}
        for tp, position in zip(tps, positions, strict=True):
            if isinstance(position, BaseException):
                out[tp] = position
                continue
            try:
                beside = self.replicas.fetch_from_sibling(*tp, position, limits.max_bytes, 0, 0)
            except Exception as exc:  # that partition's failure, not the others'
                out[tp] = exc
                continue
            if beside is not None:  # a sibling worker's partition, read from its files
                out[tp] = remote.RemoteRead(position, beside[1].data, beside[1].high_watermark)
            else:
                asked[tp] = position
        found = await self._read_many(url, asked, limits.max_bytes)
        moved = {tp: exc for tp, exc in found.items() if isinstance(exc, OffsetOutOfRange)}
        resets = await asyncio.gather(
            *(self._remote_reset(member, tp, url, exc) for tp, exc in moved.items()),
            return_exceptions=True,
        )
        again = {}
        for tp, position in zip(moved, resets, strict=True):
            if isinstance(position, BaseException):
                found[tp] = position
            else:
                missed = moved[tp]
                bounds = (missed.log_start_offset, missed.log_end_offset)
                _log_reset(group, member, tp, missed.offset, bounds, position)
                member.positions[tp] = again[tp] = position
        found.update(await self._read_many(url, again, limits.max_bytes))
        out.update(found)
        return out

    async def _read_many(
        self, url: str, positions: Mapping[TopicPartition, int], max_bytes: int
    ) -> dict[TopicPartition, remote.RemoteRead | BaseException]:
        """One request, answered at once, for `positions` at the node at `url` (counted); a
        request that failed is every partition's error."""
        if not positions:
            return {}
        self.remote_fetches["read"] += 1
        try:
            found = await remote.fetch_many(self.forwarder, url, positions, max_bytes, 0)
        except Exception as exc:
            return dict.fromkeys(positions, exc)
        return dict(found)

    async def _remote_position(
        self, group: Group, member: Member, tp: TopicPartition, url: str
    ) -> int:
        """The member's position in a partition led elsewhere: where it is, else the
        committed offset, else where auto_offset_reset says (asked of the leader)."""
        position = member.positions.get(tp)
        if position is None:
            committed = group.offsets.get(tp)
            if committed is None:
                position = await self._remote_reset(member, tp, url, None)
            else:
                position = committed.offset
            member.positions[tp] = position
        return position

    async def _remote_reset(
        self, member: Member, tp: TopicPartition, url: str, out_of_range: OffsetOutOfRange | None
    ) -> int:
        if member.auto_offset_reset in ("earliest", "latest"):
            return await remote.offset(self.forwarder, url, *tp, member.auto_offset_reset)
        if out_of_range is None:
            raise self._no_committed_offset(tp)
        raise out_of_range

    async def _poll_remote(
        self,
        member: Member,
        url: str,
        seen: Mapping[TopicPartition, remote.RemoteRead],
        limits: FetchLimits,
        wait_s: float,
    ) -> None:
        """Park at the node at `url` until any of the member's partitions it leads has records
        past what the last pass read there (`seen`: short of min_bytes, they are no reason to
        wake), then wake the member's fetch (which reads them in its next pass). A partition
        failing there wakes it too: that pass leaves it out of the next poll. A request that
        failed wakes nothing (the next would fail alike)."""
        positions = {tp: read.end for tp, read in seen.items()}
        if not positions:
            return
        self.remote_fetches["poll"] += 1
        with contextlib.suppress(EngineError):
            found = await remote.fetch_many(
                self.forwarder, url, positions, limits.max_bytes, int(wait_s * 1000)
            )
            if any(isinstance(read, EngineError) or read.data for read in found.values()):
                member.poke()

    def _leader(self, topic: str, p: int) -> Partition:
        """This node's replica of a partition the group reads or commits; it must lead it."""
        state = self.replicas.state(topic, p)
        partition = self.replicas.local(topic, p)
        if partition is not None and partition.is_leader:
            return partition
        if state.leader not in (NO_LEADER, self.replicas.node_id):
            raise NotLeader(f"node {state.leader} leads {topic}-{p}", state.leader)
        raise LeaderNotAvailable(f"{topic}-{p} has no leader on this node yet; retry shortly")

    def _position(self, group: Group, member: Member, tp: TopicPartition, log: Partition) -> int:
        """The member's position in a partition led here: where it is, else the committed
        offset, else where auto_offset_reset says. Out of range only outside the log: a new
        leader's high watermark trails its log until its followers fetch, and a position past
        it waits there, as a partition fetch does, rather than starting over."""
        position = member.positions.get(tp)
        if position is None:
            committed = group.offsets.get(tp)
            position = self._reset(member, tp, log) if committed is None else committed.offset
            member.positions[tp] = position
        if not log.log_start_offset <= position <= log.log_end_offset:
            reset = member.positions[tp] = self._reset(member, tp, log, position)
            bounds = (log.log_start_offset, log.log_end_offset)
            _log_reset(group, member, tp, position, bounds, reset)
            position = reset
        return position

    def _reset(
        self, member: Member, tp: TopicPartition, log: Partition, out_of_range: int | None = None
    ) -> int:
        if member.auto_offset_reset == "earliest":
            return log.log_start_offset
        if member.auto_offset_reset == "latest":
            return log.high_watermark
        if out_of_range is None:
            raise self._no_committed_offset(tp)
        raise OffsetOutOfRange(out_of_range, log.log_start_offset, log.high_watermark)

    @staticmethod
    def _not_assigned(group: Group, member: Member, tp: TopicPartition) -> GroupError:
        return GroupError(
            "PARTITION_NOT_ASSIGNED",
            f"{tp[0]}-{tp[1]} is not assigned to member {member.member_id!r} in generation "
            f"{group.generation}",
            topic=tp[0],
            partition=tp[1],
            generation=group.generation,
        )

    @staticmethod
    def _no_committed_offset(tp: TopicPartition) -> GroupError:
        return GroupError(
            "NO_COMMITTED_OFFSET",
            f"{tp[0]}-{tp[1]} has no committed offset and auto_offset_reset is none; "
            "commit a starting offset for it",
            topic=tp[0],
            partition=tp[1],
        )

    def _read(
        self,
        group: Group,
        member: Member,
        limits: FetchLimits,
        fetched: Mapping[TopicPartition, remote.RemoteRead],
        decode: RecordDecoder,
    ) -> PartitionReads:
        """One pass over the member's partitions, from where a rotation left off: led here,
        read in place; led elsewhere, what `fetched` brought at the member's position."""
        out = PartitionReads([], {}, {}, 0)
        records = out.records
        for tp in self._in_turn(member):
            left = limits.max_records - len(records)
            if left <= 0 or out.bytes_read >= limits.max_bytes:
                break
            elsewhere = fetched.get(tp)
            if elsewhere is not None:
                if elsewhere.position != member.positions.get(tp) or not elsewhere.data:
                    continue
                data, position = elsewhere.data, elsewhere.position
            else:
                read = self._read_local(group, member, tp, limits, out, left)
                if read is None:
                    continue
                data, position = read
            got, next_offset = decode(data, position, left, tp)
            if got:
                records.extend(got)
                out.next_offsets[tp] = next_offset
                out.counts[tp[0]] = out.counts.get(tp[0], 0) + len(got)
                out.bytes_read += len(data)
            elif next_offset > position:
                out.next_offsets[tp] = next_offset
        return out

    @staticmethod
    def _in_turn(member: Member) -> list[TopicPartition]:
        """The member's partitions in the order a pass visits them: sorted, from where the
        rotation left off (so that no partition is always last)."""
        owned = sorted(member.owned)
        start = member.rotation % len(owned) if owned else 0
        return owned[start:] + owned[:start]

    def _read_local(
        self,
        group: Group,
        member: Member,
        tp: TopicPartition,
        limits: FetchLimits,
        out: PartitionReads,
        left: int,
    ) -> tuple[memoryview, int] | None:
        """Batches at the member's position of a partition led here (None: nothing to read)."""
        try:
            log = self._leader(*tp)
            position = self._position(group, member, tp, log)
            if position >= log.high_watermark:
                return None
            data = log.read(
                position,
                limits.max_bytes - out.bytes_read,
                min_one=not out.records,
                max_records=left,
            ).data
        except (
            UnknownTopic,
            UnknownPartition,
            LogClosed,
            OffsetMovedToTieredStorage,
            ReplicationError,
        ):
            return None
        return data, position

    def _deliver(self, group: Group, member: Member, answer: PartitionReads) -> GroupFetch:
        if answer.records:
            member.before_last = {tp: member.positions[tp] for tp in answer.next_offsets}
            member.positions.update(answer.next_offsets)
            member.cursor = (member.cursor + 1) & CURSOR_MASK
        member.rotation += 1
        return GroupFetch(
            answer.records,
            member.assignment(),
            group.generation,
            answer.counts,
            member.cursor,
        )

    @staticmethod
    def _rewind(member: Member, cursor: int) -> None:
        """The client's cursor is not the last answer's. The one before it: only the last
        answer was lost, so its partitions go back to where it started. Anything else (several
        answers lost, a restarted gateway): back to the committed offsets."""
        if cursor == (member.cursor - 1) & CURSOR_MASK and member.before_last:
            for tp, position in member.before_last.items():
                if tp in member.owned:
                    member.positions[tp] = position
        else:
            member.positions.clear()
        member.before_last = {}

    # -- offsets -------------------------------------------------------------------------------

    def commit(
        self,
        name: str,
        member_id: str,
        offsets: list[tuple[TopicPartition, int, str]] | None,
        generation: int | None,
    ) -> list[tuple[TopicPartition, int]]:
        """Commit the given offsets, or everything delivered; only owned partitions."""
        group, member = self._member(name, member_id)
        if not member.fetching:
            self._schedule_expiry(group, member)
        if generation is not None and generation != group.generation:
            raise GroupError(
                "STALE_GENERATION",
                f"generation {generation} is not the group's current one ({group.generation}); "
                "fetch to learn the new assignment",
                generation=group.generation,
            )
        if offsets is None:
            return self._commit_positions(group, member)
        for (topic, p), offset, _ in offsets:
            if (topic, p) not in member.owned:
                raise self._not_assigned(group, member, (topic, p))
            # Checked where the log is at hand; a partition led elsewhere takes it as given,
            # as Kafka's coordinator takes every commit.
            log = self.replicas.local(topic, p)
            if log is None or not log.is_leader:
                continue
            if not log.log_start_offset <= offset <= log.high_watermark:
                raise OffsetOutOfRange(offset, log.log_start_offset, log.high_watermark)
        self._store_offsets(group, [(tp, offset, meta) for tp, offset, meta in offsets])
        return [(tp, offset) for tp, offset, _ in offsets]

    def _commit_positions(
        self, group: Group, member: Member, *, durable: bool = True
    ) -> list[tuple[TopicPartition, int]]:
        """Commit the member's positions on its owned partitions. An answered commit
        (`durable`) writes them all, changed or not, as Kafka appends every OffsetCommit, so
        that its answer rests on the offsets partition's replicas, not on this node's memory:
        a coordinator paused while another took its groups over resumes with old offsets, and
        its write cannot commit. An auto-commit writes only what changed."""
        positions = sorted((tp, pos) for tp, pos in member.positions.items() if tp in member.owned)
        written = [
            (tp, pos, "")
            for tp, pos in positions
            if durable or (c := group.offsets.get(tp)) is None or c.offset != pos
        ]
        self._store_offsets(group, written, durable=durable)
        return positions

    async def reset_offsets(
        self, name: str, topic: str, partitions: list[int] | None, to: object
    ) -> list[tuple[TopicPartition, int]]:
        """Set committed offsets while the group has no members (Kafka's --reset-offsets)."""
        self.coordinator(name)
        count = self.replicas.topic(topic).partitions
        chosen = list(range(count)) if partitions is None else partitions
        new: list[tuple[TopicPartition, int, str]] = []
        for p in chosen:
            new.append(((topic, p), await self._resolve(topic, p, to), ""))
        group = self.groups.get(name) or Group(name)
        if group.members:
            raise GroupError(
                "GROUP_NOT_EMPTY",
                f"group {name!r} has {len(group.members)} active members; offsets can be reset "
                "only when it has none",
            )
        self.groups[name] = group
        self._store_offsets(group, new)
        return [(tp, offset) for tp, offset, _ in new]

    def expire_offsets(self, now_ms: int, retention_ms: int) -> int:
        """Drop the committed offsets of groups without members that are older than
        `retention_ms` (Kafka's offsets.retention.minutes), with tombstones; a group left
        with no offsets is forgotten. Returns how many offsets went."""
        expired = 0
        for group in list(self.groups.values()):
            if group.members or self.closing:
                continue
            old = sorted(
                tp for tp, c in group.offsets.items() if now_ms - c.commit_timestamp > retention_ms
            )
            if not old:
                continue
            try:
                self.coordinator(group.name)
            except ReplicationError:
                continue  # coordinated elsewhere now
            records: list[tuple[bytes, bytes | None]] = [
                (self._key(group.name, tp), None) for tp in old
            ]
            for tp in old:
                del group.offsets[tp]
                group.unwritten.pop(tp, None)
            if not group.offsets:
                records.append((offsets_topic.group_key(group.name), None))
                del self.groups[group.name]
            self._write(group.name, records)
            expired += len(old)
            logger.info("group %r: %d committed offsets expired", group.name, len(old))
        return expired

    def delete_group(self, name: str) -> None:
        """Delete a group without members (Kafka's DeleteGroups): tombstones for its metadata
        and every committed offset, so that a new coordinator's replay forgets it too."""
        group = self.group(name)
        if group.members:
            raise GroupError(
                "GROUP_NOT_EMPTY",
                f"group {name!r} has {len(group.members)} active members; a group can be "
                "deleted only when it has none",
            )
        if group.write_timer is not None:
            group.write_timer.cancel()
            group.write_timer = None
        group.unwritten.clear()
        tombstones: list[tuple[bytes, bytes | None]] = [
            (self._key(name, tp), None) for tp in sorted(group.offsets)
        ]
        tombstones.append((offsets_topic.group_key(name), None))
        self._write(name, tombstones)
        del self.groups[name]

    async def _resolve(self, topic: str, p: int, to: object) -> int:
        """The offset `to` names in a partition (earliest, latest, {timestamp} or an offset
        within the log), asked of its leader wherever that is."""
        local = self.replicas.local(topic, p)
        if local is None or not local.is_leader:
            url = self._led_elsewhere_url(topic, p)
            if isinstance(to, int):
                start = await remote.offset(self.forwarder, url, topic, p, "earliest")
                end = await remote.offset(self.forwarder, url, topic, p, "latest")
                if not start <= to <= end:
                    raise OffsetOutOfRange(to, start, end)
                return to
            at = int(to["timestamp"]) if isinstance(to, dict) else str(to)
            return await remote.offset(self.forwarder, url, topic, p, at)
        if to == "earliest":
            return local.log_start_offset
        if to == "latest":
            return local.high_watermark
        if isinstance(to, dict):
            found = await self.replicas.offset_for_timestamp(local, int(to["timestamp"]))
            return local.high_watermark if found is None else found[0]
        assert isinstance(to, int)
        if not local.log_start_offset <= to <= local.high_watermark:
            raise OffsetOutOfRange(to, local.log_start_offset, local.high_watermark)
        return to

    def _led_elsewhere_url(self, topic: str, p: int) -> str:
        state = self.replicas.state(topic, p)
        node = self.replicas.store.view.nodes.get(state.leader)
        if node is None:
            raise LeaderNotAvailable(f"{topic}-{p} has no leader now; retry shortly")
        return node.url

    def _store_offsets(
        self,
        group: Group,
        offsets: list[tuple[TopicPartition, int, str]],
        *,
        durable: bool = True,
    ) -> None:
        """Commit offsets: at once in memory (hand-overs and views use them); in the log now,
        or, for auto-commits (`durable=False`), with the group's next write, at most
        AUTO_COMMIT_WRITE_S later, as Kafka's consumers auto-commit on an interval."""
        if not offsets:
            return
        now = int(time.time() * 1000)
        committed = {tp: CommittedOffset(offset, meta, now) for tp, offset, meta in offsets}
        group.offsets.update(committed)
        group.unwritten.update(committed)
        if durable:
            self._write_group(group)
        elif group.write_timer is None:
            group.write_timer = self._loop.call_later(AUTO_COMMIT_WRITE_S, self._write_group, group)

    def _write_group(
        self, group: Group, records: Sequence[tuple[bytes, bytes | None]] = ()
    ) -> None:
        """One append: the group's auto-commits not yet in the log, then `records`."""
        if group.write_timer is not None:
            group.write_timer.cancel()
            group.write_timer = None
        pending = [
            (self._key(group.name, tp), offsets_topic.offset_value(c))
            for tp, c in group.unwritten.items()
        ]
        group.unwritten.clear()
        if pending or records:
            self._write(group.name, [*pending, *records])

    def flush(self) -> None:
        """Write every auto-commit still held in memory (at shutdown); a group whose offsets
        partition refuses (offline, a full disk) does not keep the others from theirs."""
        for group in self.groups.values():
            try:
                self._write_group(group)
            except EngineError as exc:
                logger.warning("group %r: its auto-commits were not written: %s", group.name, exc)

    # -- the offsets topic ---------------------------------------------------------------------

    @staticmethod
    def _key(group: str, tp: TopicPartition) -> bytes:
        return offsets_topic.offset_key(group, *tp)

    @staticmethod
    def _metadata(group: Group) -> dict[str, Any]:
        return {
            "generation": group.generation,
            "assignor": group.assignor,
            "partition_counts": group.partition_counts,
            "members": [m.stored() for m in group.members.values()],
        }

    def _write_metadata(self, group: Group) -> None:
        doc = orjson.dumps(self._metadata(group))
        self._write_group(group, [(offsets_topic.group_key(group.name), doc)])

    def _write(self, group: str, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Append to the group's offsets partition (`durable` waits for its replicas)."""
        partition = self.coordinator(group)
        limit = partition.config.max_message_bytes
        info = partition.append(offsets_topic.encode(records, limit), Acks.LEADER)
        self._written[group] = (partition, info.last_offset)

    async def durable(self, name: str, timeout_ms: int) -> None:
        """Wait until the group's last write is on every in-sync replica of its offsets
        partition (Kafka's offsets.commit.required.acks=-1), so that a new coordinator
        replays it: a commit or a join is answered only then."""
        written = self._written.pop(name, None)
        if written is not None:
            partition, last_offset = written
            await self.replicas.wait_committed(partition, last_offset, timeout_ms)

    # -- views ---------------------------------------------------------------------------------

    def _member(self, name: str, member_id: str) -> tuple[Group, Member]:
        self.coordinator(name)
        group = self.groups.get(name)
        member = None if group is None else group.members.get(member_id)
        if group is None or member is None:
            raise unknown_member(name, member_id)
        return group, member

    def group(self, name: str) -> Group:
        self.coordinator(name)
        group = self.groups.get(name)
        if group is None or not (group.members or group.offsets):
            raise GroupError("UNKNOWN_GROUP", f"group {name!r} does not exist")
        return group

    def describe(self, name: str) -> dict[str, Any]:
        group = self.group(name)
        topics = self.replicas.store.view.topics
        partitions: set[TopicPartition] = set(group.offsets)
        for topic in group.subscribed():
            if topic in topics:
                partitions.update((topic, p) for p in range(topics[topic].partitions))
        rows = []
        total = 0
        for topic, p in sorted(partitions):
            if topic not in topics or p >= topics[topic].partitions:
                continue
            local = self.replicas.local(topic, p)
            end = None if local is None else local.high_watermark
            committed = group.offsets.get((topic, p))
            lag = None if committed is None or end is None else max(end - committed.offset, 0)
            total += lag or 0
            rows.append(
                {
                    "topic": topic,
                    "partition": p,
                    "committed_offset": None if committed is None else committed.offset,
                    "log_end_offset": end,
                    "lag": lag,
                    "owner": group.owners.get((topic, p)),
                }
            )
        return {
            "group": name,
            "state": group.state,
            "generation": group.generation,
            "assignor": group.assignor,
            "members": [
                {
                    "member_id": m.member_id,
                    "topics": list(m.topics),
                    "session_timeout_ms": m.session_timeout_ms,
                    "assignment": m.assignment(),
                }
                for m in sorted(group.members.values(), key=lambda m: m.member_id)
            ],
            "partitions": rows,
            "lag": total,
        }

    def list_groups(self) -> list[dict[str, Any]]:
        return [
            {"group": g.name, "state": g.state, "members": len(g.members)}
            for g in sorted(self.groups.values(), key=lambda g: g.name)
            if g.members or g.offsets
        ]


def _log_reset(
    group: Group,
    member: Member,
    tp: TopicPartition,
    position: int,
    bounds: tuple[int, int],
    to: int,
) -> None:
    """A member's position moved by auto_offset_reset (as Kafka's consumer logs it): a
    position going back makes records delivered again."""
    logger.info(
        "group %r member %s: %s-%d position %d is outside the log (%d..%d); %s: %d",
        group.name,
        member.member_id,
        *tp,
        position,
        *bounds,
        member.auto_offset_reset,
        to,
    )
