"""Committed offsets: commits, resets, expiry and tombstones, written to the offsets log.

Kafka's OffsetMetadataManager: a group's offsets are in memory at once (hand-overs and views
use them) and in its offsets partition before an explicit commit is answered; auto-commits
reach the log with the group's next write, within AUTO_COMMIT_WRITE_S.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from engine import offsets_topic
from engine.errors import EngineError, OffsetOutOfRange
from engine.offsets_topic import CommittedOffset, TopicPartition
from engine.producer_state import Isolation
from groups import remote
from groups.errors import GroupError
from groups.model import Group, Member, not_assigned
from groups.offsets_log import OffsetsLog
from replication.errors import LeaderNotAvailable, ReplicationError
from replication.fetch_limits import latest_offset
from replication.forward_client import ForwardClient
from replication.replica_manager import ReplicaManager

AUTO_COMMIT_WRITE_S = 1.0  # auto-commits reach the log within this (auto.commit.interval.ms)
logger = logging.getLogger("groups.coordinator")  # every part logs as the coordinator


def offset_key(group: str, tp: TopicPartition) -> bytes:
    return offsets_topic.offset_key(group, *tp)


class Offsets:
    """The committed offsets of the groups coordinated here (`groups`, shared)."""

    def __init__(
        self,
        replicas: ReplicaManager,
        forwarder: ForwardClient,
        groups: dict[str, Group],
        log: OffsetsLog,
    ) -> None:
        self.replicas = replicas
        self.forwarder = forwarder
        self.groups = groups
        self.log = log
        self._loop = asyncio.get_running_loop()

    def commit(
        self,
        group: Group,
        member: Member,
        offsets: list[tuple[TopicPartition, int, str]] | None,
        generation: int | None,
        within_log: bool = True,
    ) -> list[tuple[TopicPartition, int]]:
        """Commit the given offsets, or everything delivered; only owned partitions, and only
        in the group's current generation (if given). `within_log` False takes any offset, as
        Kafka's coordinator does (a read from it resets where auto_offset_reset says)."""
        if generation is not None:
            self.check_generation(group, generation)
        if offsets is None:
            return self.commit_positions(group, member)
        for (topic, p), offset, _ in offsets:
            if (topic, p) not in member.owned:
                raise not_assigned(group, member, (topic, p))
            # Checked where the log is at hand; a partition led elsewhere takes it as given,
            # as Kafka's coordinator takes every commit.
            log = self.replicas.local(topic, p)
            if log is None or not log.is_leader or not within_log:
                continue
            if not log.log_start_offset <= offset <= log.high_watermark:
                raise OffsetOutOfRange(offset, log.log_start_offset, log.high_watermark)
        self._store(group, [(tp, offset, meta) for tp, offset, meta in offsets])
        return [(tp, offset) for tp, offset, _ in offsets]

    def check_generation(self, group: Group, generation: int) -> None:
        if generation != group.generation:
            raise GroupError(
                "STALE_GENERATION",
                f"generation {generation} is not the group's current one ({group.generation}); "
                "fetch to learn the new assignment",
                generation=group.generation,
            )

    def commit_decided(self, name: str, offsets: list[tuple[TopicPartition, int, str]]) -> None:
        """Commit offsets a committed transaction carried, members or not (`durable` waits)."""
        self.log.coordinator(name)
        group = self.groups.setdefault(name, Group(name))
        self._store(group, offsets)

    def commit_positions(
        self, group: Group, member: Member, *, durable: bool = True, write: bool = True
    ) -> list[tuple[TopicPartition, int]]:
        """Commit the member's positions on its owned partitions. An answered commit
        (`durable`) writes them all, changed or not, as Kafka appends every OffsetCommit, so
        that its answer rests on the offsets partition's replicas, not on this node's memory:
        a coordinator paused while another took its groups over resumes with old offsets, and
        its write cannot commit. An auto-commit writes only what changed. `write` False holds
        them for the caller's own write of the group: its record and these in one append."""
        positions = sorted((tp, pos) for tp, pos in member.positions.items() if tp in member.owned)
        written = [
            (tp, pos, "")
            for tp, pos in positions
            if durable or (c := group.offsets.get(tp)) is None or c.offset != pos
        ]
        self._store(group, written, durable=durable, write=write)
        return positions

    async def reset(
        self, name: str, topic: str, partitions: list[int] | None, to: object
    ) -> list[tuple[TopicPartition, int]]:
        """Set committed offsets while the group has no members (Kafka's --reset-offsets)."""
        self.log.coordinator(name)
        count = self.replicas.topic(topic).partitions
        chosen = list(range(count)) if partitions is None else partitions
        new: list[tuple[TopicPartition, int, str]] = []
        for p in chosen:
            new.append(((topic, p), await self.resolve(topic, p, to), ""))
        group = self.groups.get(name) or Group(name)
        if group.members:
            raise GroupError(
                "GROUP_NOT_EMPTY",
                f"group {name!r} has {len(group.members)} active members; offsets can be reset "
                "only when it has none",
            )
        self.groups[name] = group
        self._store(group, new)
        return [(tp, offset) for tp, offset, _ in new]

    def expire(self, now_ms: int, retention_ms: int) -> int:
        """Drop the committed offsets of groups without members that are older than
        `retention_ms` (Kafka's offsets.retention.minutes), with tombstones; a group left
        with no offsets is forgotten. Returns how many offsets went."""
        expired = 0
        for group in list(self.groups.values()):
            if group.members:
                continue
            old = sorted(
                tp for tp, c in group.offsets.items() if now_ms - c.commit_timestamp > retention_ms
            )
            if not old:
                continue
            try:
                self.log.coordinator(group.name)
            except ReplicationError:
                continue  # coordinated elsewhere now
            records: list[tuple[bytes, bytes | None]] = [
                (offset_key(group.name, tp), None) for tp in old
            ]
            for tp in old:
                del group.offsets[tp]
                group.unwritten.pop(tp, None)
            if not group.offsets:
                records.append((offsets_topic.group_key(group.name), None))
                del self.groups[group.name]
            self.log.append(group.name, records)
            expired += len(old)
            logger.info("group %r: %d committed offsets expired", group.name, len(old))
        return expired

    def delete(self, group: Group) -> None:
        """Delete a group without members (Kafka's DeleteGroups): tombstones for its metadata
        and every committed offset, so that a new coordinator's replay forgets it too."""
        if group.members:
            raise GroupError(
                "GROUP_NOT_EMPTY",
                f"group {group.name!r} has {len(group.members)} active members; a group can be "
                "deleted only when it has none",
            )
        self.forget(group)
        group.unwritten.clear()
        tombstones: list[tuple[bytes, bytes | None]] = [
            (offset_key(group.name, tp), None) for tp in sorted(group.offsets)
        ]
        tombstones.append((offsets_topic.group_key(group.name), None))
        self.log.append(group.name, tombstones)
        del self.groups[group.name]

    def topic_deleted(self, group: Group, topic: str) -> None:
        """A deleted topic's committed offsets go, with tombstones, as in Kafka."""
        gone = [tp for tp in group.offsets if tp[0] == topic]
        for tp in gone:
            del group.offsets[tp]
            group.unwritten.pop(tp, None)
        if gone:
            self.write_group(group, [(offset_key(group.name, tp), None) for tp in gone])

    async def resolve(
        self, topic: str, p: int, to: object, isolation: Isolation = Isolation.READ_UNCOMMITTED
    ) -> int:
        """The offset `to` names in a partition (earliest, latest, {timestamp} or an offset
        within the log), asked of its leader wherever that is; `latest` and a timestamp's as
        a reader at `isolation` has them (`replication.fetch_limits.latest_offset`)."""
        local = self.replicas.local(topic, p)
        if local is None or not local.is_leader:
            url = self._leader_url(topic, p)
            if isinstance(to, int):
                start = await remote.offset(self.forwarder, url, topic, p, "earliest")
                end = await remote.offset(self.forwarder, url, topic, p, "latest")
                if not start <= to <= end:
                    raise OffsetOutOfRange(to, start, end)
                return to
            at = int(to["timestamp"]) if isinstance(to, dict) else str(to)
            return await remote.offset(self.forwarder, url, topic, p, at, isolation)
        if to == "earliest":
            return local.log_start_offset
        if to == "latest":
            return latest_offset(local, isolation)
        if isinstance(to, dict):
            found = await self.replicas.offset_for_timestamp(local, int(to["timestamp"]))
            latest = latest_offset(local, isolation)
            return latest if found is None or found[0] >= latest else found[0]
        assert isinstance(to, int)
        if not local.log_start_offset <= to <= local.high_watermark:
            raise OffsetOutOfRange(to, local.log_start_offset, local.high_watermark)
        return to

    def _leader_url(self, topic: str, p: int) -> str:
        state = self.replicas.state(topic, p)
        node = self.replicas.store.view.nodes.get(state.leader)
        if node is None:
            raise LeaderNotAvailable(f"{topic}-{p} has no leader now; retry shortly")
        return node.url

    def _store(
        self,
        group: Group,
        offsets: list[tuple[TopicPartition, int, str]],
        *,
        durable: bool = True,
        write: bool = True,
    ) -> None:
        """Commit offsets: at once in memory (hand-overs and views use them); in the log now,
        or, for auto-commits (`durable=False`), with the group's next write, at most
        AUTO_COMMIT_WRITE_S later, as Kafka's consumers auto-commit on an interval; or, not
        `write`, with the caller's next write of the group."""
        if not offsets:
            return
        now = int(time.time() * 1000)
        committed = {tp: CommittedOffset(offset, meta, now) for tp, offset, meta in offsets}
        group.offsets.update(committed)
        group.unwritten.update(committed)
        if not write:
            return
        if durable:
            self.write_group(group)
        elif group.write_timer is None:
            self._write_later(group)

    def _write_later(self, group: Group) -> None:
        group.write_timer = self._loop.call_later(AUTO_COMMIT_WRITE_S, self._write_held, group)

    def _write_held(self, group: Group) -> None:
        """The auto-commits' timer: write them; if the offsets partition refuses, they stay
        held and are tried again (as long as the group is coordinated here)."""
        group.write_timer = None
        try:
            self.write_group(group)
        except EngineError as exc:
            if self.groups.get(group.name) is group:
                logger.warning("group %r: its auto-commits were not written: %s", group.name, exc)
                self._write_later(group)

    def write_group(self, group: Group, records: Sequence[tuple[bytes, bytes | None]] = ()) -> None:
        """One append: the group's auto-commits not yet in the log, then `records`. Refused,
        the auto-commits stay held for the next write."""
        pending = [
            (offset_key(group.name, tp), offsets_topic.offset_value(c))
            for tp, c in group.unwritten.items()
        ]
        if pending or records:
            self.log.append(group.name, [*pending, *records])
        self.forget(group)
        group.unwritten.clear()

    def forget(self, group: Group) -> None:
        """Stop the group's pending auto-commit write (written now, or no longer ours)."""
        if group.write_timer is not None:
            group.write_timer.cancel()
            group.write_timer = None

    def flush(self) -> None:
        """Write every auto-commit still held in memory (at shutdown); a group whose offsets
        partition refuses (offline, a full disk) does not keep the others from theirs."""
        for group in self.groups.values():
            try:
                self.write_group(group)
            except EngineError as exc:
                logger.warning("group %r: its auto-commits were not written: %s", group.name, exc)
