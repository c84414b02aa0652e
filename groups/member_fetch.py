"""A member's fetch: long-polls across its partitions, wherever they are led, and its positions.

A position is where the member is, else the group's committed offset, else where
auto_offset_reset says; partitions led here are read in place, those led elsewhere from their
leaders (one request per leader node), those only on S3 through the partition layer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from engine.errors import (
    EngineError,
    IsolationUnavailable,
    LogClosed,
    OffsetMovedToTieredStorage,
    OffsetOutOfRange,
    UnknownPartition,
    UnknownTopic,
)
from engine.offsets_topic import TopicPartition
from engine.producer_state import Isolation
from groups import remote
from groups.errors import GroupError
from groups.membership import Membership
from groups.model import Group, Member, not_assigned, unknown_member
from groups.offsets import Offsets
from groups.offsets_log import OffsetsLog, local_leader
from replication.errors import ReplicationError
from replication.fetch_limits import FetchLimits, latest_offset
from replication.forward_client import ForwardClient
from replication.partition import Partition
from replication.replica_manager import ReplicaManager

# Whole batches -> at most N records from an offset on, each naming its topic and partition,
# ready for the answer's encoder (a decoder may skip records: the offset still passes them);
# and the offset after the last. The gateway gives its codec: the coordinator counts and
# positions records, never encodes them.
RecordDecoder = Callable[[memoryview, int, int, TopicPartition], tuple[list[Any], int]]
RemoteFetch = Literal["read", "poll"]
CURSOR_MASK = 2**31 - 1
logger = logging.getLogger("groups.coordinator")  # every part logs as the coordinator


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


class MemberFetch:
    """Members' fetches and seeks over the partitions their group lets them read."""

    def __init__(
        self,
        replicas: ReplicaManager,
        forwarder: ForwardClient,
        groups: dict[str, Group],
        log: OffsetsLog,
        membership: Membership,
        offsets: Offsets,
        decode_records: RecordDecoder,
    ) -> None:
        self.replicas = replicas
        self.forwarder = forwarder
        self.groups = groups
        self.log = log
        self.membership = membership
        self.offsets = offsets
        self.decode_records = decode_records
        self._loop = asyncio.get_running_loop()
        # Fetch requests sent to other nodes for members' partitions they lead, one per leader
        # node and pass: immediate reads, and parked long-polls.
        self.remote_fetches: dict[RemoteFetch, int] = {"read": 0, "poll": 0}

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
        group, member = self.membership.member(name, member_id)
        if cursor is not None and cursor != member.cursor:
            _rewind(member, cursor)
        member.fetch_turn += 1
        turn = member.fetch_turn
        member.poke()
        member.fetching += 1
        try:
            if member.auto_commit:
                self.offsets.commit_positions(group, member, durable=False)
            deadline = self._loop.time() + limits.timeout_ms / 1000
            while True:
                if self.groups.get(name) is not group:
                    self.log.coordinator(name)  # the group moved to another node: NotLeader
                if group.members.get(member_id) is not member:
                    raise unknown_member(name, member_id)
                if member.fetch_turn != turn:
                    return GroupFetch([], member.assignment(), group.generation, {}, member.cursor)
                self.membership.reconcile(group, member)
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
                    return _deliver(group, member, answer)
                wake = member.wake = self._loop.create_future()
                # Those that failed at once would fail again at once: no poll for them.
                read_there = {tp: url for tp, url in elsewhere.items() if tp in fetched}
                polls = [
                    asyncio.ensure_future(
                        self._poll_remote(
                            member, url, {tp: fetched[tp] for tp in tps}, limits, remaining
                        )
                    )
                    for url, tps in _by_leader(member, read_there).items()
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
                self.membership.schedule_expiry(group, member)

    async def seek(
        self,
        name: str,
        member_id: str,
        targets: list[tuple[TopicPartition, object]],
        within_log: bool = True,
        isolation: Isolation = Isolation.READ_UNCOMMITTED,
    ) -> None:
        """Set the member's next position on owned partitions: an offset within the log,
        `earliest` or `latest` (Kafka's seek, seekToBeginning, seekToEnd; `latest` as a reader
        at `isolation` has it). `within_log` False takes any offset as Kafka's seek() does: a
        read finds it out of range and starts where auto_offset_reset says."""
        group, member = self.membership.member(name, member_id)
        for tp, _ in targets:
            if tp not in member.owned:
                raise not_assigned(group, member, tp)
        resolved = [
            (
                tp,
                to
                if isinstance(to, int) and not within_log
                else await self.offsets.resolve(*tp, to, isolation),
            )
            for tp, to in targets
        ]
        group, member = self.membership.member(name, member_id)
        for tp, position in resolved:
            if tp not in member.owned:
                raise not_assigned(group, member, tp)
            member.positions[tp] = position
        member.before_last = {}
        self.membership.renew(group, member)

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
        (the partition layer's fetch serves tiered offsets), like reads of other leaders. A
        read the isolation cannot be served at there is the member's answer, as a partition
        fetch's: no retry would read it."""
        out = {}
        for tp in sorted(member.owned):
            local = self.replicas.local(*tp)
            if local is None or not local.is_leader or not self._tiered(member, tp):
                continue
            try:
                position = _position(group, member, tp, local, limits.isolation)
                read = await self.replicas.fetch(
                    *tp, position, limits.max_bytes, 0, 0, isolation=limits.isolation
                )
            except IsolationUnavailable:
                raise
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
        node, all at once. A group's refusal, or a read the isolation cannot be served at, is
        the member's answer; other failures leave their partitions out of this pass."""
        found = await asyncio.gather(
            *(
                self._fetch_remote(group, member, url, tps, limits)
                for url, tps in _by_leader(member, elsewhere).items()
            )
        )
        out = {}
        for reads in found:
            for tp, read in reads.items():
                if isinstance(read, remote.RemoteRead):
                    out[tp] = read
                elif isinstance(read, GroupError | IsolationUnavailable):
                    raise read
                elif not isinstance(read, EngineError | asyncio.CancelledError):
                    logger.warning("reading %s-%d from its leader failed: %r", tp[0], tp[1], read)
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
        handovers = member.handovers
        positions = await asyncio.gather(
            *(self._remote_position(group, member, tp, url, limits.isolation) for tp in tps),
            return_exceptions=True,
        )
        if member.handovers != handovers:  # what was found may be a former ownership's
            return out
        asked = {}
        for tp, position in zip(tps, positions, strict=True):
            if isinstance(position, BaseException):
                out[tp] = position
                continue
            member.positions[tp] = position
            if limits.isolation is Isolation.READ_COMMITTED:
                asked[tp] = position  # the last stable offset is the leader's to know
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
        found = await self._read_many(url, asked, limits)
        moved = {tp: exc for tp, exc in found.items() if isinstance(exc, OffsetOutOfRange)}
        resets = await asyncio.gather(
            *(
                self._remote_reset(member, tp, url, exc, limits.isolation)
                for tp, exc in moved.items()
            ),
            return_exceptions=True,
        )
        if member.handovers != handovers:
            return out
        again = {}
        for tp, position in zip(moved, resets, strict=True):
            if isinstance(position, BaseException):
                found[tp] = position
            else:
                missed = moved[tp]
                bounds = (missed.log_start_offset, missed.log_end_offset)
                _log_reset(group, member, tp, missed.offset, bounds, position)
                member.positions[tp] = again[tp] = position
        found.update(await self._read_many(url, again, limits))
        out.update(found)
        return out

    async def _read_many(
        self, url: str, positions: Mapping[TopicPartition, int], limits: FetchLimits
    ) -> dict[TopicPartition, remote.RemoteRead | BaseException]:
        """One request, answered at once, for `positions` at the node at `url` (counted); a
        request that failed is every partition's error."""
        if not positions:
            return {}
        self.remote_fetches["read"] += 1
        try:
            found = await remote.fetch_many(
                self.forwarder, url, positions, limits.max_bytes, 0, limits.isolation
            )
        except Exception as exc:
            return dict.fromkeys(positions, exc)
        return dict(found)

    async def _remote_position(
        self, group: Group, member: Member, tp: TopicPartition, url: str, isolation: Isolation
    ) -> int:
        """The member's position in a partition led elsewhere: where it is, else the
        committed offset, else where auto_offset_reset says (asked of the leader, at the
        fetch's isolation). The caller records it, unless the partition changed hands while
        it was asked."""
        position = member.positions.get(tp)
        if position is None:
            committed = group.offsets.get(tp)
            if committed is None:
                return await self._remote_reset(member, tp, url, None, isolation)
            return committed.offset
        return position

    async def _remote_reset(
        self,
        member: Member,
        tp: TopicPartition,
        url: str,
        out_of_range: OffsetOutOfRange | None,
        isolation: Isolation,
    ) -> int:
        if member.auto_offset_reset in ("earliest", "latest"):
            reset = member.auto_offset_reset
            return await remote.offset(self.forwarder, url, *tp, reset, isolation)
        if out_of_range is None:
            raise _no_committed_offset(tp)
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
                self.forwarder,
                url,
                positions,
                limits.max_bytes,
                int(wait_s * 1000),
                limits.isolation,
            )
            if any(isinstance(read, EngineError) or read.data for read in found.values()):
                member.poke()

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
        for tp in _in_turn(member):
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
            log = local_leader(self.replicas, *tp)
            position = _position(group, member, tp, log, limits.isolation)
            committed = limits.isolation is Isolation.READ_COMMITTED
            if position >= (log.last_stable_offset if committed else log.high_watermark):
                return None
            data = log.read(
                position,
                limits.max_bytes - out.bytes_read,
                min_one=not out.records,
                max_records=left,
                isolation=limits.isolation,
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


def _by_leader(
    member: Member, elsewhere: Mapping[TopicPartition, str]
) -> dict[str, list[TopicPartition]]:
    """The partitions of `elsewhere` by their leader's URL, each in the member's turn."""
    out: dict[str, list[TopicPartition]] = {}
    for tp in _in_turn(member):
        url = elsewhere.get(tp)
        if url is not None:
            out.setdefault(url, []).append(tp)
    return out


def _in_turn(member: Member) -> list[TopicPartition]:
    """The member's partitions in the order a pass visits them: sorted, from where the
    rotation left off (so that no partition is always last)."""
    owned = sorted(member.owned)
    start = member.rotation % len(owned) if owned else 0
    return owned[start:] + owned[:start]


def _position(
    group: Group, member: Member, tp: TopicPartition, log: Partition, isolation: Isolation
) -> int:
    """The member's position in a partition led here: where it is, else the committed
    offset, else where auto_offset_reset says (`latest` as a reader at `isolation` has it).
    Out of range only outside the log: a new leader's high watermark trails its log until its
    followers fetch, and a position past it waits there, as a partition fetch does, rather
    than starting over."""
    position = member.positions.get(tp)
    if position is None:
        committed = group.offsets.get(tp)
        position = _reset(member, tp, log, isolation) if committed is None else committed.offset
        member.positions[tp] = position
    if not log.log_start_offset <= position <= log.log_end_offset:
        reset = member.positions[tp] = _reset(member, tp, log, isolation, position)
        bounds = (log.log_start_offset, log.log_end_offset)
        _log_reset(group, member, tp, position, bounds, reset)
        position = reset
    return position


def _reset(
    member: Member,
    tp: TopicPartition,
    log: Partition,
    isolation: Isolation,
    out_of_range: int | None = None,
) -> int:
    if member.auto_offset_reset == "earliest":
        return log.log_start_offset
    if member.auto_offset_reset == "latest":
        return latest_offset(log, isolation)
    if out_of_range is None:
        raise _no_committed_offset(tp)
    raise OffsetOutOfRange(out_of_range, log.log_start_offset, log.high_watermark)


def _no_committed_offset(tp: TopicPartition) -> GroupError:
    return GroupError(
        "NO_COMMITTED_OFFSET",
        f"{tp[0]}-{tp[1]} has no committed offset and auto_offset_reset is none; "
        "commit a starting offset for it",
        topic=tp[0],
        partition=tp[1],
    )


def _deliver(group: Group, member: Member, answer: PartitionReads) -> GroupFetch:
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
