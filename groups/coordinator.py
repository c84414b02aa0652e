"""Consumer groups: membership, assignment, hand-over of partitions, fetch and commit.

The coordinator owns the groups whose `__consumer_offsets` partition is on this node. Every
membership change and every commit is written to that topic before it is acknowledged, so a
restarted node (or, later, the next coordinator) takes the groups over as they were: members
carry on with their ids, and positions restart from the committed offsets.

A partition has at most one owner. When a rebalance moves it, the old owner gives it up at its
next fetch (after that fetch's auto-commit) or at once if it is parked in a fetch; only then does
the new owner start, from the committed offset. A group that only grows, shrinks by leaving and
commits as it goes therefore delivers every record once.

This class is the facade the gateway uses; the work is done by its parts, which share the
groups (groups.model): the offsets log (groups.offsets_log), committed offsets
(groups.offsets), membership (groups.membership), members' fetches (groups.member_fetch) and
the admin views (groups.views).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine import offsets_topic
from engine.offsets_topic import CommittedOffset, StoredGroup, TopicPartition
from engine.producer_state import Isolation
from groups import views
from groups.errors import GroupError
from groups.member_fetch import CURSOR_MASK, GroupFetch, MemberFetch, RecordDecoder
from groups.membership import Membership
from groups.model import OFFSET_RESETS, Group, JoinRequest, Member
from groups.offsets import Offsets
from groups.offsets_log import OffsetsLog, partition_count
from replication.fetch_limits import FetchLimits
from replication.forward_client import ForwardClient
from replication.partition import Partition
from replication.replica_manager import ReplicaManager

__all__ = [  # what the gateway and the subscriptions import from here
    "CURSOR_MASK",
    "OFFSET_RESETS",
    "GroupCoordinator",
    "GroupFetch",
    "JoinRequest",
    "Member",
    "RecordDecoder",
]


class GroupCoordinator:
    """Every group this node coordinates, their members, and their committed offsets."""

    def __init__(
        self,
        replicas: ReplicaManager,
        forwarder: ForwardClient,
        max_members: int,
        decode_records: RecordDecoder,
    ) -> None:
        """`max_members`: a group's limit; `decode_records`: how a member's fetch renders its
        records. (The session timeout's bounds are the API's to check.)"""
        self.replicas = replicas
        self.groups: dict[str, Group] = {}  # shared by the parts
        self.log = OffsetsLog(replicas, self.restore, self.topics_changed, self._unload)
        self.offsets = Offsets(replicas, forwarder, self.groups, self.log)
        self.membership = Membership(replicas, self.groups, self.log, self.offsets, max_members)
        self.member_fetch = MemberFetch(
            replicas,
            forwarder,
            self.groups,
            self.log,
            self.membership,
            self.offsets,
            decode_records,
        )
        self.remote_fetches = self.member_fetch.remote_fetches

    # -- start and stop ------------------------------------------------------------------------

    def restore(self, stored: Mapping[str, StoredGroup]) -> None:
        """Take over groups as the offsets topic left them (see Membership.restore)."""
        self.membership.restore(stored)

    async def role_changed(self, partition: Partition) -> None:
        """An offsets partition came to this node, moved to a new epoch, or left it."""
        await self.log.role_changed(partition)

    def _unload(self, offsets_partition: int) -> None:
        """An offsets partition left this node: its groups are coordinated elsewhere now."""
        count = partition_count(self.replicas)
        for name in [
            n for n in self.groups if offsets_topic.partition_for(n, count) == offsets_partition
        ]:
            group = self.groups.pop(name)
            self.offsets.forget(group)
            self.membership.drop(group)

    async def loaded(self) -> None:
        """Wait for the offsets partitions' replays under way."""
        await self.log.loaded()

    def coordinator(self, name: str) -> Partition:
        """The offsets partition holding group `name`, which this node must lead and have
        replayed (NotLeader names the node that does)."""
        return self.log.coordinator(name)

    def close(self) -> None:
        """Shutting down: no more expiries or replays; parked member fetches answer now."""
        self.membership.close()
        self.log.close()

    def flush(self) -> None:
        """Write every auto-commit still held in memory (at shutdown)."""
        self.offsets.flush()

    async def durable(self, name: str, timeout_ms: int) -> None:
        """Wait until the group's last write is on every in-sync replica of its offsets
        partition: a commit or a join is answered only then."""
        await self.log.durable(name, timeout_ms)

    # -- membership ----------------------------------------------------------------------------

    def join(self, name: str, request: JoinRequest) -> tuple[Group, Member]:
        """Add a member (or restart a static one) and rebalance."""
        return self.membership.join(name, request)

    def leave(self, name: str, member_id: str) -> None:
        """A member leaves: with auto_commit, what it was delivered is committed first."""
        self.membership.leave(name, member_id)

    def create_instance(
        self, name: str, request: JoinRequest, instance: dict[str, Any]
    ) -> tuple[Group, Member]:
        """A REST Proxy v2 consumer instance: a static member that subscribes later."""
        return self.membership.create_instance(name, request, instance)

    def subscribe(
        self,
        name: str,
        member_id: str,
        topics: tuple[str, ...],
        instance: dict[str, Any] | None = None,
    ) -> Member:
        """Change what an existing member consumes (no topics: nothing)."""
        return self.membership.subscribe(name, member_id, topics, instance)

    def assign(self, name: str, member_id: str, partitions: tuple[TopicPartition, ...]) -> Member:
        """Kafka's assign(): the member reads exactly these partitions."""
        return self.membership.assign(name, member_id, partitions)

    def touch(self, name: str, member_id: str) -> Member:
        """A member's request that is no fetch nor commit: it renews the session."""
        group, member = self.membership.member(name, member_id)
        self.membership.renew(group, member)
        return member

    def topics_changed(self, deleted: str | None = None) -> None:
        """A topic was created, grown or deleted (or the gateway started): a deleted topic's
        partitions and committed offsets go (tombstones); groups whose topics' partitions no
        longer match their assignment rebalance. Fetches never poll for this."""
        for group in list(self.groups.values()):
            if deleted is not None:
                self.membership.topic_deleted(group, deleted)
                self.offsets.topic_deleted(group, deleted)
            self.membership.topics_changed(group)

    # -- fetch ---------------------------------------------------------------------------------

    async def fetch(
        self,
        name: str,
        member_id: str,
        limits: FetchLimits,
        cursor: int | None = None,
        decode: RecordDecoder | None = None,
    ) -> GroupFetch:
        """Long-poll across the member's partitions; counts as a heartbeat."""
        return await self.member_fetch.fetch(name, member_id, limits, cursor, decode)

    async def seek(
        self,
        name: str,
        member_id: str,
        targets: list[tuple[TopicPartition, object]],
        within_log: bool = True,
        isolation: Isolation = Isolation.READ_UNCOMMITTED,
    ) -> None:
        """Set the member's next position on owned partitions (`within_log`, `isolation`: see
        MemberFetch)."""
        await self.member_fetch.seek(name, member_id, targets, within_log, isolation)

    # -- offsets -------------------------------------------------------------------------------

    def commit(
        self,
        name: str,
        member_id: str,
        offsets: list[tuple[TopicPartition, int, str]] | None,
        generation: int | None,
        within_log: bool = True,
    ) -> list[tuple[TopicPartition, int]]:
        """Commit the given offsets, or everything delivered; only owned partitions. It renews
        the member's session (`within_log`: see Offsets.commit)."""
        group, member = self.membership.member(name, member_id)
        self.membership.renew(group, member)
        return self.offsets.commit(group, member, offsets, generation, within_log)

    def check_generation(self, name: str, member_id: str, generation: int) -> None:
        """Refuse (UNKNOWN_MEMBER, STALE_GENERATION) unless the member is of the group's
        current generation: offsets sent to a transaction must be (KIP-447)."""
        group, _ = self.membership.member(name, member_id)
        self.offsets.check_generation(group, generation)

    def commit_transactional(
        self, name: str, offsets: list[tuple[TopicPartition, int, str]]
    ) -> None:
        """Commit a committed transaction's offsets for the group, whoever owns the partitions
        now: they were checked when sent, and the transaction's commit may not be undone."""
        self.offsets.commit_decided(name, offsets)

    def committed(
        self, name: str, member_id: str, partitions: list[TopicPartition]
    ) -> list[tuple[TopicPartition, CommittedOffset | None]]:
        """The group's committed offsets of the partitions asked, for one of its members."""
        group, _ = self.membership.member(name, member_id)
        return [(tp, group.offsets.get(tp)) for tp in partitions]

    async def reset_offsets(
        self, name: str, topic: str, partitions: list[int] | None, to: object
    ) -> list[tuple[TopicPartition, int]]:
        """Set committed offsets while the group has no members (Kafka's --reset-offsets)."""
        return await self.offsets.reset(name, topic, partitions, to)

    def expire_offsets(self, now_ms: int, retention_ms: int) -> int:
        """Drop old committed offsets of groups without members (none while shutting down);
        returns how many went."""
        if self.membership.closing:
            return 0
        return self.offsets.expire(now_ms, retention_ms)

    def delete_group(self, name: str) -> None:
        """Delete a group without members, with tombstones (Kafka's DeleteGroups)."""
        self.offsets.delete(self.group(name))

    # -- views ---------------------------------------------------------------------------------

    def group(self, name: str) -> Group:
        """A group coordinated here that exists (it has members or committed offsets)."""
        self.coordinator(name)
        group = self.groups.get(name)
        if group is None or not (group.members or group.offsets):
            raise GroupError("UNKNOWN_GROUP", f"group {name!r} does not exist")
        return group

    def describe(self, name: str) -> dict[str, Any]:
        """The group's state, members, committed offsets and lag."""
        return views.describe(self.group(name), self.replicas)

    def list_groups(self) -> list[dict[str, Any]]:
        """Every group coordinated here."""
        return views.list_groups(self.groups)
