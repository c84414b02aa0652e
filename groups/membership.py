"""Members, generations and rebalances: who is in a group and which partitions each may read.

Kafka's GroupMetadataManager. A partition has at most one owner: a rebalance gives members new
targets, and a partition moves to its new owner only once the old one gave it up (at once if
nothing is at stake, else at the old owner's next fetch, after its auto-commit).

Every change that writes the group's record is one append, and stands only if the offsets
partition took it: refused, the group is put back as it was (see `_Saved`), so that memory is
always what replaying the log gives. A change the partition took stands even if waiting for
its replicas (`durable`) then fails, as in Kafka: the record is in the log, and will be
replayed if it is committed; the client, answered an error, joins or leaves again.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import orjson

from engine import offsets_topic
from engine.errors import EngineError
from engine.offsets_topic import StoredGroup, TopicPartition
from groups.assignors import ASSIGNORS
from groups.errors import GroupError
from groups.model import Group, JoinRequest, Member, unknown_member
from groups.offsets import Offsets
from groups.offsets_log import OffsetsLog
from replication.replica_manager import ReplicaManager

METADATA_OVERHEAD = 4096  # the batch and record headers, the key, and slack
RETRY_S = 1.0  # a refused change no client retries (an expiry, a rebalance) is tried again
logger = logging.getLogger("groups.coordinator")  # every part logs as the coordinator


def _illegal_state(group: str, member_id: str, why: str) -> GroupError:
    return GroupError(
        "ILLEGAL_STATE",
        f"member {member_id!r} of group {group!r} {why}: subscribing and assigning partitions "
        "manually exclude each other (unsubscribe first)",
    )


class Membership:
    """The members of the groups coordinated here (`groups`, shared), their sessions and
    their partitions; every change is written to the offsets log with the group's record."""

    def __init__(
        self,
        replicas: ReplicaManager,
        groups: dict[str, Group],
        log: OffsetsLog,
        offsets: Offsets,
        max_members: int,
    ) -> None:
        self.replicas = replicas
        self.groups = groups
        self.log = log
        self.offsets = offsets
        self.max_members = max_members
        self.closing = False  # shutting down: sessions stop running out
        self._loop = asyncio.get_running_loop()
        self._rebalances: dict[str, asyncio.TimerHandle] = {}  # refused ones, to try again

    # -- start and stop ------------------------------------------------------------------------

    def restore(self, stored: Mapping[str, StoredGroup]) -> None:
        """Take over groups as the offsets topic left them: offsets, generation and members,
        each member with a fresh session and the partitions it was assigned. Unreadable
        metadata costs the group its members (they join again), never its offsets."""
        for name, saved in stored.items():
            group = Group(name, offsets=dict(saved.offsets))
            try:
                _restore_metadata(group, saved.metadata or {})
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                logger.warning("group %r: unreadable metadata, members dropped: %r", name, exc)
                group = Group(name, offsets=dict(saved.offsets))
            if group.assignor not in ASSIGNORS:
                group.assignor = "range"
            for member in group.members.values():
                self.schedule_expiry(group, member)
            self.groups[name] = group

    def drop(self, group: Group) -> None:
        """The group is coordinated elsewhere now: its parked fetches answer, and its sessions
        stop running out here (each cancelled timer stays in place, so that a fetch ending on
        the dropped group arms no new one)."""
        retry = self._rebalances.pop(group.name, None)
        if retry is not None:
            retry.cancel()
        for member in group.members.values():
            if member.expiry is not None:
                member.expiry.cancel()
            member.poke()

    def close(self) -> None:
        """Shutting down: no more expiries; parked member fetches answer now."""
        self.closing = True
        for retry in self._rebalances.values():
            retry.cancel()
        self._rebalances.clear()
        for group in self.groups.values():
            for member in group.members.values():
                if member.expiry is not None:
                    member.expiry.cancel()
                    member.expiry = None
                member.poke()

    # -- members -------------------------------------------------------------------------------

    def member(self, name: str, member_id: str) -> tuple[Group, Member]:
        """A member of a group coordinated here, or UNKNOWN_MEMBER."""
        self.log.coordinator(name)
        group = self.groups.get(name)
        member = None if group is None else group.members.get(member_id)
        if group is None or member is None:
            raise unknown_member(name, member_id)
        return group, member

    def join(
        self, name: str, request: JoinRequest, instance: dict[str, Any] | None = None
    ) -> tuple[Group, Member]:
        """Add a member and rebalance. A static member (`instance_id`) joining again is the
        same member restarted: it keeps its partitions, without a rebalance unless its topics
        changed, and what it was delivered but did not commit comes again. `instance`: a
        consumer instance's settings, kept with the member."""
        self.log.coordinator(name)
        group = self.groups.get(name) or Group(name)
        with self._changing(group):
            member = self._join(group, request, instance)
        self.schedule_expiry(group, member)
        return group, member

    def _join(self, group: Group, request: JoinRequest, instance: dict[str, Any] | None) -> Member:
        """Join's change of the group, up to its write."""
        name = group.name
        for topic in request.topics:
            self.replicas.topic(topic)
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
        if instance is not None:
            member.instance = instance
        group.members[member.member_id] = member
        if reassign:
            self._rebalance(group)
        else:
            self.write_metadata(group)
        return member

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
            len(orjson.dumps(group.metadata()))
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
        """A member leaves: with auto_commit, what it was delivered is committed with the
        group's record, in the same append."""
        group, member = self.member(name, member_id)
        with self._changing(group):
            if member.auto_commit:
                self.offsets.commit_positions(group, member, write=False)
            self._remove(group, member)

    def create_instance(
        self, name: str, request: JoinRequest, instance: dict[str, Any]
    ) -> tuple[Group, Member]:
        """A v2 consumer instance: a static member (its name is its `instance_id`) that
        subscribes later. Refused if the group has a member of that name already."""
        assert request.instance_id is not None
        self.log.coordinator(name)
        group = self.groups.get(name)
        if group is not None and request.instance_id in group.members:
            raise GroupError(
                "MEMBER_ALREADY_EXISTS",
                f"group {name!r} has a member {request.instance_id!r} already",
            )
        return self.join(name, request, instance)

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
        group, member = self.member(name, member_id)
        if member.manual and topics:
            raise _illegal_state(name, member_id, "has a manual assignment")
        request = JoinRequest(
            topics,
            member.session_timeout_ms,
            member.auto_offset_reset,
            member.auto_commit,
            instance_id=member_id,
        )
        with self._changing(group):
            if member.auto_commit:  # before its positions go, as a Kafka consumer rejoining
                self.offsets.commit_positions(group, member, write=False)
            if member.manual:
                self._assign(group, member, ())
            self._join(group, request, instance)
        self.schedule_expiry(group, member)
        return member

    def assign(self, name: str, member_id: str, partitions: tuple[TopicPartition, ...]) -> Member:
        """Kafka's assign(): the member reads exactly these partitions (none: nothing), outside
        the group's assignment; refused for a subscribed member (IllegalStateException)."""
        group, member = self.member(name, member_id)
        if member.topics:
            raise _illegal_state(name, member_id, "is subscribed to topics")
        for topic, partition in partitions:
            self.replicas.check_partition(topic, partition)
        with self._changing(group):
            self._assign(group, member, partitions)
            self.write_metadata(group)
        self.schedule_expiry(group, member)
        return member

    def _assign(self, group: Group, member: Member, partitions: tuple[TopicPartition, ...]) -> None:
        for tp in member.owned - set(partitions):
            self._release(group, member, tp)
        for tp in set(partitions) - member.owned:
            _start_afresh(member, tp)
        member.manual = bool(partitions)
        member.target = set(partitions)
        member.owned = set(partitions)
        member.poke()

    # -- sessions ------------------------------------------------------------------------------

    def renew(self, group: Group, member: Member) -> None:
        """A member's request renews its session, unless a fetch in flight holds it open
        (that fetch's end renews it)."""
        if not member.fetching:
            self.schedule_expiry(group, member)

    def schedule_expiry(self, group: Group, member: Member) -> None:
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

    def _expire(self, group: Group, member: Member) -> None:
        member.expiry = None
        if group.members.get(member.member_id) is not member or member.fetching or self.closing:
            return  # gone, or a request in flight: its end arms the timer again
        if self._loop.time() < member.deadline:
            member.expiry = self._loop.call_at(member.deadline, self._expire, group, member)
            return
        try:
            with self._changing(group):
                self._remove(group, member)
        except EngineError as exc:
            if self.groups.get(group.name) is not group:
                return  # coordinated elsewhere now
            logger.warning(
                "group %r: the session of member %r ran out, but its removal was not written "
                "(%s); trying again in %.0f s",
                group.name,
                member.member_id,
                exc,
                RETRY_S,
            )
            member.expiry = self._loop.call_later(RETRY_S, self._expire, group, member)

    def _remove(self, group: Group, member: Member) -> None:
        """The member goes, and the others rebalance; its session ends once that is written."""
        del group.members[member.member_id]
        for tp in list(member.owned):
            self._release(group, member, tp)
        member.poke()
        self._rebalance(group)
        if member.expiry is not None:
            member.expiry.cancel()

    # -- assignment ----------------------------------------------------------------------------

    def topic_deleted(self, group: Group, topic: str) -> None:
        """The members give up a deleted topic's partitions (manual assignments forget them)."""
        for member in group.members.values():
            for tp in [tp for tp in member.owned if tp[0] == topic]:
                self._release(group, member, tp)
                if member.manual:
                    member.target.discard(tp)

    def topics_changed(self, group: Group) -> None:
        """Rebalance the group if its topics' partitions no longer match its assignment; if
        its record is refused, try again in RETRY_S (no client asks for this rebalance)."""
        if not group.members or group.partition_counts == self._partition_counts(group):
            return
        try:
            with self._changing(group):
                self._rebalance(group)
        except EngineError as exc:
            if self.groups.get(group.name) is not group or group.name in self._rebalances:
                return
            logger.warning(
                "group %r: its topics' partitions changed, but its rebalance was not written "
                "(%s); trying again in %.0f s",
                group.name,
                exc,
                RETRY_S,
            )
            self._rebalances[group.name] = self._loop.call_later(
                RETRY_S, self._rebalance_again, group
            )

    def _rebalance_again(self, group: Group) -> None:
        del self._rebalances[group.name]
        if self.groups.get(group.name) is group and not self.closing:
            self.topics_changed(group)

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
                if member.wake is not None or not _uncommitted(group, member, tp):
                    self._release(group, member, tp)
        for tp in [tp for tp, owner in group.owners.items() if owner not in group.members]:
            del group.owners[tp]
        for member in group.members.values():
            self._acquire_free(group, member)
            member.poke()
        self.write_metadata(group)

    def _release(self, group: Group, member: Member, tp: TopicPartition) -> None:
        member.owned.discard(tp)
        member.positions.pop(tp, None)
        if group.owners.get(tp) == member.member_id:
            del group.owners[tp]
        for other in group.members.values():
            if tp in other.target and other is not member:
                self._acquire_free(group, other)
                other.poke()

    @staticmethod
    def _acquire_free(group: Group, member: Member) -> None:
        if member.manual:  # its own choice: owned as assigned, from no one
            return
        for tp in member.target - member.owned:
            if tp not in group.owners:
                group.owners[tp] = member.member_id
                member.owned.add(tp)
                _start_afresh(member, tp)

    def reconcile(self, group: Group, member: Member) -> None:
        """At a fetch: give up what was moved away, take what has been freed."""
        if member.manual:
            return
        for tp in member.owned - member.target:
            self._release(group, member, tp)
        self._acquire_free(group, member)

    def write_metadata(self, group: Group) -> None:
        """The group's record (members, generation, assignment), with its pending commits."""
        doc = orjson.dumps(group.metadata())
        self.offsets.write_group(group, [(offsets_topic.group_key(group.name), doc)])

    @contextlib.contextmanager
    def _changing(self, group: Group) -> Iterator[None]:
        """A change of the group ending in its one append: if anything in it fails (the
        append refused, above all), the group is put back as it was."""
        saved = _Saved(self.groups, group)
        try:
            yield
        except BaseException:
            saved.restore()
            raise


_MEMBER_STATE = (
    "topics",
    "session_timeout_ms",
    "auto_offset_reset",
    "auto_commit",
    "target",
    "owned",
    "positions",
    "before_last",
    "fetch_turn",
    "handovers",
    "instance",
    "manual",
)


class _Saved:
    """A group as it was before a change, put back if the change's append is refused.

    Kept and put back, rather than the change computed on a copy and applied once appended:
    a change is many edits in place across members (targets, owners, positions, hand-overs)
    that fetches make too, on the Member objects that parked fetches and timers hold; a copy
    to compute on would be a second group model. From its first edit to its append a change
    never awaits, so no one sees the group in between, and putting the fields back is exact.
    Not saved, as no part of the group's state: sessions' timers, parked fetches (one woken
    by the change looks again and finds the group as it was) and read cursors."""

    def __init__(self, groups: dict[str, Group], group: Group) -> None:
        self.groups = groups
        self.group = group
        self.registered = groups.get(group.name) is group
        self.generation = group.generation
        self.assignor = group.assignor
        self.partition_counts = dict(group.partition_counts)
        self.members = dict(group.members)
        self.owners = dict(group.owners)
        self.offsets = dict(group.offsets)
        self.unwritten = dict(group.unwritten)
        self.member_states = [
            (member, [copy.copy(getattr(member, f)) for f in _MEMBER_STATE])
            for member in group.members.values()
        ]

    def restore(self) -> None:
        group = self.group
        if not self.registered and self.groups.get(group.name) is group:
            del self.groups[group.name]
        group.generation = self.generation
        group.assignor = self.assignor
        group.partition_counts = self.partition_counts
        _refill(group.members, self.members)
        _refill(group.owners, self.owners)
        _refill(group.offsets, self.offsets)
        _refill(group.unwritten, self.unwritten)
        for member, state in self.member_states:
            for name, value in zip(_MEMBER_STATE, state, strict=True):
                setattr(member, name, value)


def _refill(now: dict[Any, Any], saved: dict[Any, Any]) -> None:
    """Put a dict's saved items back in place (others may hold the dict itself)."""
    now.clear()
    now.update(saved)


def _start_afresh(member: Member, tp: TopicPartition) -> None:
    """A partition the member takes (back) is read from its committed offset: a position
    left from before, by a read that ended after the partition went, is another owner's past."""
    member.positions.pop(tp, None)
    member.before_last.pop(tp, None)
    member.handovers += 1


def _uncommitted(group: Group, member: Member, tp: TopicPartition) -> bool:
    position = member.positions.get(tp)
    committed = group.offsets.get(tp)
    return position is not None and (committed is None or committed.offset != position)


def _restore_metadata(group: Group, meta: Mapping[str, Any]) -> None:
    """The group's record as `Group.metadata` wrote it: members keep the partitions they
    were assigned (the first to name a partition owns it)."""
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
