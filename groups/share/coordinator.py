"""Share groups (KIP-932, "queues for Kafka"): records of a topic handed out one at a time
under acquisition locks, each acknowledged by itself, to as many consumers as want them.

The node that leads a group's partition of `__share_group_state` coordinates it, as a consumer
group's coordinator is chosen: it keeps every share-partition's window (groups.share.
partition_state), reads the records wherever their partitions are led (groups.
partition_reader), and appends each change of a window to its state partition before it
answers, so that the next coordinator (failover, reassignment, controlled shutdown) rebuilds
the windows as they were answered. Any node forwards a share group's request here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from engine import batch as fmt
from engine.errors import EngineError, InvalidRecord, OffsetOutOfRange
from engine.offsets_topic import TopicPartition, partition_for
from groups.errors import GroupError
from groups.offsets_log import CoordinatorLog, partition_count
from groups.partition_reader import PartitionReader
from groups.share import state_topic
from groups.share.model import (
    DELIVERY_LIMIT,
    ISOLATION_LEVEL,
    LOCK_DURATION,
    MAX_RECORD_LOCKS,
    Delivery,
    Parked,
    PendingWrite,
    ReadAhead,
    ShareGroup,
    ShareMember,
    ShareRecord,
    Stretch,
    check_configs,
    parse_token,
    reset_lookback_ms,
    stretches,
)
from groups.share.partition_state import (
    AckRefused,
    AckType,
    RecordState,
    ShareConfig,
    SharePartition,
    Span,
    Transition,
)
from replication.partition import Partition
from replication.replica_manager import ReplicaManager

READ_BYTES = 1024 * 1024  # one read ahead of a window
WATCH_MS = 10_000  # a parked acquire's long-poll at a partition's leader, renewed while parked
WATCH_RETRY_S = 0.5  # after a failed long-poll (no leader, say), before the next
logger = logging.getLogger("groups.share")


def now_ms() -> int:
    """Wall-clock milliseconds: lock deadlines outlive the node that set them."""
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class AckRange:
    """Records of one partition named by their offsets, `first` to `last` (as Kafka's
    ShareAcknowledge names them), rather than one delivery by its token."""

    topic: str
    partition: int
    first: int
    last: int


# An acknowledgement: a token or a range, its type, and a release's delay (ms).
Ack = tuple[str | AckRange, AckType, int]


@dataclass(slots=True)
class AckResult:
    """One acknowledgement's outcome: None when it took effect, else why not."""

    target: str | AckRange  # the token or the range acknowledged
    kind: AckType
    refused: AckRefused | None
    lock_deadline_ms: int | None = None  # a renewal's new deadline


@dataclass(slots=True)
class _Acks:
    """Acknowledgements of one window taken together: a range, or tokens of consecutive
    records of one delivery count asking the same (`at`: their places in the request)."""

    tp: TopicPartition
    first: int
    last: int
    delivery_count: int | None  # None: a range, whatever the delivery
    kind: AckType
    delay_ms: int
    at: list[int]


class ShareCoordinator:
    """Every share group whose state partition this node leads."""

    def __init__(
        self,
        replicas: ReplicaManager,
        reader: PartitionReader,
        max_members: int,
        write_timeout_ms: int,
    ) -> None:
        self.replicas = replicas
        self.reader = reader
        self.max_members = max_members
        self.write_timeout_ms = write_timeout_ms
        self.groups: dict[str, ShareGroup] = {}
        # Told when the groups coordinated here change (a state partition loaded or gone): the
        # queue-mode subscriptions follow where their share group is coordinated.
        self.listeners: set[Callable[[], None]] = set()
        self.log: CoordinatorLog[state_topic.StoredShareGroup] = CoordinatorLog(
            replicas,
            self._restore,
            self._tell,
            self._unload,
            state_topic.STATE_TOPIC,
            state_topic.replay,
        )
        self.closing = False
        # What happened to records, for /metrics: acquired, accepted, released, rejected,
        # archived, lock_expired, redelivered, renewed.
        self.counts: dict[str, int] = dict.fromkeys(
            (
                "acquired",
                "accepted",
                "released",
                "rejected",
                "archived",
                "lock_expired",
                "redelivered",
                "renewed",
            ),
            0,
        )
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop, bound once: asyncio.get_running_loop() is a getpid() system call,
        and a request asks for it several times."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        return loop

    # -- start and stop --------------------------------------------------------------------------

    async def role_changed(self, partition: Partition) -> None:
        """A state partition came to this node, moved to a new epoch, or left it."""
        await self.log.role_changed(partition)

    async def loaded(self, timeout_s: float | None = None) -> None:
        """Wait for the replays under way, at most `timeout_s`."""
        await self.log.loaded(timeout_s)

    def close(self) -> None:
        """Shutting down (from the drain on): parked acquires answer now and new ones do not
        wait, timers and watchers stop; acknowledgements are still taken."""
        self.closing = True
        self.log.close()
        for group in self.groups.values():
            self._drop(group)
        for task in self._tasks:
            task.cancel()

    def _restore(self, stored: Mapping[str, state_topic.StoredShareGroup]) -> None:
        """Take over groups as the state topic left them: members with fresh sessions, windows
        as their last answered change left them (locks in force stay held by their members)."""
        for name, doc in stored.items():
            old = self.groups.pop(name, None)
            if old is not None:
                self._drop(old)
            group = ShareGroup(name)
            metadata = doc.metadata or {}
            try:
                group.configs = check_configs(dict(metadata.get("configs") or {}))
                for m in metadata.get("members") or []:
                    member = ShareMember(
                        str(m["member_id"]), tuple(m["topics"]), int(m["session_timeout_ms"])
                    )
                    group.members[member.member_id] = member
                config = _config_of(group)
                for tp, window in doc.partitions.items():
                    group.partitions[tp] = SharePartition.from_snapshot(window, config)
            except (KeyError, TypeError, ValueError, InvalidRecord) as exc:
                logger.error("share group %r: its stored state is unreadable: %s", name, exc)
                continue
            self.groups[name] = group
            for member in group.members.values():
                self._renew(group, member)

    def _unload(self, state_partition: int) -> None:
        """A state partition left this node: its groups are coordinated elsewhere now."""
        count = partition_count(self.replicas, state_topic.STATE_TOPIC)
        for name in [n for n in self.groups if partition_for(n, count) == state_partition]:
            self._drop(self.groups.pop(name))
        self._tell()

    def _tell(self) -> None:
        for listener in list(self.listeners):
            listener()

    def coordinates(self, name: str) -> bool:
        """Whether this node coordinates share group `name` now (its state partition is led
        and loaded here)."""
        try:
            self.log.coordinator(name)
        except EngineError:
            return False
        return True

    def _drop(self, group: ShareGroup) -> None:
        for member in group.members.values():
            if member.expiry is not None:
                member.expiry.cancel()
        for watcher in group.watchers.values():
            watcher.cancel()
        if group.timer is not None:
            group.timer.cancel()
        group.wake()

    def _group(self, name: str, create: bool = False) -> ShareGroup:
        """The group, coordinated here (NotLeader names the node that coordinates it)."""
        self.log.coordinator(name)
        group = self.groups.get(name)
        if group is not None and (create or group.exists):
            return group
        if not create:  # never made, or left with nothing (no members, configs, windows)
            raise GroupError("UNKNOWN_GROUP", f"share group {name!r} does not exist")
        group = self.groups[name] = ShareGroup(name)
        return group

    # -- configs and membership ------------------------------------------------------------------

    async def set_configs(self, name: str, configs: dict[str, Any]) -> dict[str, Any]:
        """Set (a null value: unset) some of the group's configs; creates the group."""
        try:
            checked = check_configs({k: v for k, v in configs.items() if v is not None})
        except ValueError as exc:
            raise GroupError("INVALID_CONFIG", str(exc)) from None
        group = self._group(name, create=True)
        merged = {**group.configs, **checked}
        for key, value in configs.items():
            if value is None:
                merged.pop(key, None)
        check_configs(merged)
        if merged.get(ISOLATION_LEVEL) != group.configs.get(ISOLATION_LEVEL):
            group.ahead.clear()  # read at the other level: what a transaction left may differ
        group.configs = merged
        config = _config_of(group)
        changed = []
        for tp, window in group.partitions.items():
            archived = window.configure(config)
            if archived:
                self._count(archived)
                changed.append(tp)
        await self._store(group, changed, with_group=True)
        return dict(group.configs)

    async def join(
        self,
        name: str,
        topics: tuple[str, ...],
        session_timeout_ms: int,
        member_id: str | None = None,
    ) -> str:
        """A new member of the group (created if new), reading `topics`; its id. With
        `member_id`, the member of that id is the same client again (its settings renewed)."""
        group = self._group(name, create=True)
        known = None if member_id is None else group.members.get(member_id)
        if known is None and len(group.members) >= self.max_members:
            raise GroupError(
                "GROUP_MAX_SIZE_REACHED",
                f"share group {name!r} has {len(group.members)} members, its limit",
            )
        changed = known is None or (known.topics, known.session_timeout_ms) != (
            topics,
            session_timeout_ms,
        )
        if known is None:
            member = ShareMember(member_id or str(uuid.uuid4()), topics, session_timeout_ms)
            group.members[member.member_id] = member
        else:
            member = known
            member.topics, member.session_timeout_ms = topics, session_timeout_ms
            if changed and member.expiry is not None:  # timed by its new session from now
                member.expiry.cancel()
                member.expiry = None
        self._renew(group, member)
        await self._store(group, (), with_group=changed)  # the same member again: no write
        return member.member_id

    async def leave(self, name: str, member_id: str) -> int:
        """A member leaves: what it holds is released at once. Returns how many."""
        group = self._group(name)
        member = group.member(member_id)
        return await self._remove(group, member)

    async def _remove(self, group: ShareGroup, member: ShareMember) -> int:
        if member.expiry is not None:
            member.expiry.cancel()
        group.members.pop(member.member_id, None)
        changed = []
        released = 0
        full = {tp for tp, window in group.partitions.items() if not window.room}
        for tp, window in group.partitions.items():
            moved = window.release_member(member.member_id)
            if moved:
                self._count(moved)
                changed.append(tp)
                released += sum(t.count for t in moved)
        await self._store(group, changed, with_group=True)
        for tp in changed:
            self._wake_for(group, tp, tp in full)
        return released

    def _renew(self, group: ShareGroup, member: ShareMember) -> None:
        """The member was heard from: its session starts again. Only `seen` moves; the one
        timer of the member looks at it when it fires."""
        loop = self.loop()
        member.seen = loop.time()
        if member.expiry is None and not self.closing:
            member.expiry = loop.call_later(
                member.session_timeout_ms / 1000, self._expire_member, group, member
            )

    def _expire_member(self, group: ShareGroup, member: ShareMember) -> None:
        """The session's timer fired: the member expires if it was not heard from for its
        session and has no request in flight (an acquire parked in a long-poll keeps it);
        else the timer waits the rest of the session."""
        member.expiry = None
        current = self.groups.get(group.name) is group
        if not current or group.members.get(member.member_id) is not member:
            return
        loop = self.loop()
        if member.acquiring:
            member.seen = loop.time()
        left = member.seen + member.session_timeout_ms / 1000 - loop.time()
        if left > 0:
            if not self.closing:
                member.expiry = loop.call_later(left, self._expire_member, group, member)
            return
        logger.info("share group %r: member %s expired", group.name, member.member_id)
        self._spawn(self._remove(group, member))

    def _spawn(self, work: Any) -> None:
        task: asyncio.Task[Any] = self.loop().create_task(work)
        self._tasks.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                logger.warning("share groups: a background write failed: %s", t.exception())

        task.add_done_callback(done)

    # -- acquire ---------------------------------------------------------------------------------

    async def acquire(
        self,
        name: str,
        member_id: str,
        max_records: int,
        max_bytes: int,
        timeout_ms: int,
        counted: bool = True,
    ) -> list[ShareRecord]:
        """`deliver`'s records, each decoded."""
        deliveries = await self.deliver(
            name, member_id, max_records, max_bytes, timeout_ms, counted
        )
        return [record for d in deliveries for record in d.records()]

    async def deliver(
        self,
        name: str,
        member_id: str,
        max_records: int,
        max_bytes: int,
        timeout_ms: int,
        counted: bool = True,
    ) -> list[Delivery]:
        """Up to `max_records` records (and about `max_bytes`; the first always comes)
        acquired for the member across its partitions, waiting up to `timeout_ms` for one.
        Answered once their acquisition is stored. While parked, it counts among the node's
        parked fetches (`--max-parked-fetches`), unless `counted` is False (the server's own
        acquires: a queue-mode subscription's)."""
        loop = self.loop()
        deadline = loop.time() + timeout_ms / 1000
        group = self._group(name)
        member = joined = group.member(member_id)
        member.acquiring += 1
        self._renew(group, member)
        woken: int | None = None  # the wake this pass answers, if one woke it
        try:
            while True:
                try:
                    if woken is not None and self.groups.get(name) is not group:
                        group = self._group(name)  # moved away: NotLeader names the new place
                        member = group.member(member_id)
                    if group.members.get(member_id) is not member:
                        raise GroupError("UNKNOWN_MEMBER", f"member {member_id!r} left the group")
                    got, changed = await self._acquire_pass(group, member, max_records, max_bytes)
                except BaseException:
                    if woken is not None:
                        self._pass_on(group, member.topics, woken)
                    raise
                if woken is not None and not got:
                    self._pass_on(group, member.topics, woken)
                if got:
                    await self._store(group, changed)
                    return got
                if changed:
                    await self._store(group, changed)
                left = deadline - loop.time()
                if left <= 0 or self.closing:
                    return []
                woken = await self._park(group, member, left, counted)
        finally:
            joined.acquiring -= 1
            if group.members.get(member_id) is joined:
                self._renew(group, joined)

    def _member_partitions(self, member: ShareMember) -> list[TopicPartition]:
        topics = self.replicas.store.view.topics
        return [
            (topic, p)
            for topic in member.topics
            if topic in topics
            for p in range(topics[topic].partitions)
        ]

    async def _acquire_pass(
        self, group: ShareGroup, member: ShareMember, max_records: int, max_bytes: int
    ) -> tuple[list[Delivery], list[TopicPartition]]:
        """One turn over the member's partitions from where the last one left off: records
        due again first, then records new to each window."""
        partitions = self._member_partitions(member)
        if not partitions:
            return [], []
        turn = member.rotation % len(partitions)
        member.rotation += 1
        changed: list[TopicPartition] = []
        got: list[Delivery] = []
        taken = size = 0
        for tp in partitions[turn:] + partitions[:turn]:
            if taken >= max_records or (got and size >= max_bytes):
                break
            window = group.partitions.get(tp)
            if window is None:
                window = await self._start_window(group, tp)
                changed.append(tp)
            if group.partitions.get(tp) is not window:
                continue  # reset or unloaded meanwhile
            expired = window.expire(now_ms())
            if expired:
                self._count(expired)
                changed.append(tp)
            delivered = await self._take(group, member, tp, window, max_records - taken)
            if delivered:
                changed.append(tp)
                for d in delivered:
                    got.append(d)
                    taken += d.count
                    size += d.size
        return got, list(dict.fromkeys(changed))

    async def _take(
        self,
        group: ShareGroup,
        member: ShareMember,
        tp: TopicPartition,
        window: SharePartition,
        limit: int,
    ) -> list[Delivery]:
        """Acquire up to `limit` records of one window: those due again, then new ones."""
        out: list[Delivery] = []
        due = _offsets(window.available(now_ms()), limit)
        if due:
            found, read_to = await self._read_offsets(group, tp, due)
            now = now_ms()
            still = _among(window.available(now), due)
            gone = [o for o in due if o in still and o not in found and o < read_to]
            if gone:  # compacted away since their last delivery: nothing left to deliver
                window.forget(gone)
            due = [o for o in due if o in still and o in found]
            if due:
                deadline = now + window.config.lock_ms
                for t in window.acquire(_spans(due), member.member_id, now):
                    out += _redelivered(tp, found, t, deadline)
                self._count_acquired(out)
        left = limit - sum(d.count for d in out)
        if left > 0 and window.room:
            ahead = await self._read_ahead(group, tp, window)
            if ahead is None or group.partitions.get(tp) is not window:
                return out
            now = now_ms()
            stretches = ahead.stretches
            end = window.end
            while stretches and stretches[0].last < end:
                stretches.popleft()
            if stretches and stretches[0].first < end:
                stretches[0].first = end
            want = min(left, window.room)
            take: list[Stretch] = []
            while stretches and want:
                s = stretches[0]
                if s.last - s.first < want:
                    take.append(stretches.popleft())
                    want -= s.last - s.first + 1
                else:
                    take.append(Stretch(s.batch, s.first, s.first + want - 1, s.record_bytes))
                    s.first += want
                    want = 0
            if take:
                window.acquire([(s.first, s.last) for s in take], member.member_id, now)
                deadline = now + window.config.lock_ms
                new = [
                    Delivery(
                        tp[0],
                        tp[1],
                        s.batch,
                        s.first,
                        s.last,
                        1,
                        deadline,
                        (s.last - s.first + 1) * s.record_bytes,
                    )
                    for s in take
                ]
                self._count_acquired(new)
                out += new
            elif not stretches:
                window.skip_to(ahead.end)
        return out

    async def _read_ahead(
        self, group: ShareGroup, tp: TopicPartition, window: SharePartition
    ) -> ReadAhead | None:
        """Records from the window's end on, read once for every acquirer."""
        ahead = group.ahead.get(tp)
        if ahead is not None and ahead.reaches(window.end):
            return ahead
        lock = group.reading.setdefault(tp, asyncio.Lock())
        async with lock:
            ahead = group.ahead.get(tp)
            if ahead is not None and ahead.reaches(window.end):
                return ahead
            position = window.end
            try:
                data, batches, end = await self._read(group, window, tp, position, 0)
            except EngineError as exc:
                logger.debug("share group %r: reading %s-%d: %s", group.name, *tp, exc)
                return None
            ahead = ReadAhead(deque(stretches(data, batches, position)), end)
            group.ahead[tp] = ahead
            return ahead

    async def _read(
        self,
        group: ShareGroup,
        window: SharePartition,
        tp: TopicPartition,
        position: int,
        timeout_ms: int,
        counted: bool = True,
    ) -> tuple[memoryview, list[tuple[int, fmt.BatchHeader]], int]:
        """Committed batches at `position` (a window that fell below the log start moves up to
        it first), their headers, and where they end, at the group's isolation level.
        `counted` False: a watch for parked acquires, which count themselves among the parked
        fetches."""
        isolation = group.isolation
        try:
            read = await self.reader.read(*tp, position, READ_BYTES, timeout_ms, counted, isolation)
        except OffsetOutOfRange as exc:
            if exc.offset >= exc.log_start_offset:
                raise
            lost = window.advance_to(exc.log_start_offset)
            if lost:
                logger.warning(
                    "%s-%d: %d records not yet acknowledged fell out of the log", *tp, lost
                )
            position = window.end
            read = await self.reader.read(*tp, position, READ_BYTES, timeout_ms, counted, isolation)
        data = read.data
        end = position
        batches: list[tuple[int, fmt.BatchHeader]] = []
        if data:
            batches = fmt.scan(data, check_crc=False).headers
            end = max(position, batches[-1][1].next_offset)
        return data, batches, end

    async def _read_offsets(
        self, group: ShareGroup, tp: TopicPartition, offsets: list[int]
    ) -> tuple[dict[int, Stretch], int]:
        """The records at `offsets` (ascending), read again for their redelivery, each as the
        stretch of its batch that holds it alone; and the offset the reads covered the log up to
        (a wanted offset below it is no longer there)."""
        found: dict[int, Stretch] = {}
        wanted = set(offsets)
        position = offsets[0]
        covered = position
        window = group.partitions[tp]
        while wanted and position <= offsets[-1]:
            try:
                data, batches, end = await self._read(group, window, tp, position, 0)
            except EngineError as exc:
                logger.debug("share group %r: reading %s-%d: %s", group.name, *tp, exc)
                break
            for s in stretches(data, batches, position):
                for offset in offsets[
                    bisect_left(offsets, s.first) : bisect_right(offsets, s.last)
                ]:
                    if offset in wanted:
                        found[offset] = Stretch(s.batch, offset, offset, s.record_bytes)
                        wanted.discard(offset)
            if end <= position:
                break
            if position == covered:
                covered = end
            position = min((o for o in wanted if o >= end), default=offsets[-1] + 1)
        return found, covered

    async def _start_window(self, group: ShareGroup, tp: TopicPartition) -> SharePartition:
        """A share-partition read for the first time starts at the group's
        share.auto.offset.reset; stored before anything is acquired from it."""
        start = await self._reset_offset(group, tp)
        window = group.partitions.get(tp)
        if window is None:
            window = group.partitions[tp] = SharePartition(start, _config_of(group))
        return window

    async def _reset_offset(self, group: ShareGroup, tp: TopicPartition) -> int:
        """Where share.auto.offset.reset starts a share-partition now."""
        lookback = reset_lookback_ms(group.reset)
        at: str | int = group.reset if lookback is None else now_ms() - lookback
        return await self.reader.offset(tp[0], tp[1], at, group.isolation)  # type: ignore[arg-type]

    # -- waiting ---------------------------------------------------------------------------------

    async def _park(
        self, group: ShareGroup, member: ShareMember, left_s: float, counted: bool
    ) -> int | None:
        """Wait until something may be acquirable: new records at one of the member's
        partitions, a record given back or due again, or `left_s` passes (None). Parked
        acquires are woken as many as there are records for them, longest waiting first; one
        woken but gone before it looked passes its wake on."""
        loop = self.loop()
        waiter: asyncio.Future[int | None] = loop.create_future()
        parked = Parked(waiter, member.topics, group.parks)
        group.parks += 1
        group.parked.append(parked)
        self._arm_timer(group)
        for tp in self._member_partitions(member):
            window = group.partitions.get(tp)
            if window is not None and window.room and tp not in group.watchers:
                group.watchers[tp] = loop.create_task(self._watch(group, tp, window))
        timeout = loop.call_later(left_s, _time_up, waiter)
        notifier = self.replicas.notifier
        notifier.parked += counted
        try:
            return await waiter
        except asyncio.CancelledError:
            if not waiter.cancelled() and (wake := waiter.result()) is not None:
                self._pass_on(group, member.topics, wake)
            raise
        finally:
            notifier.parked -= counted
            timeout.cancel()
            if waiter.cancelled() or waiter.result() is None:
                with contextlib.suppress(ValueError):
                    group.parked.remove(parked)

    def _pass_on(self, group: ShareGroup, topics: tuple[str, ...], wake: int) -> None:
        """A woken acquire took nothing (or failed, or went): if records are still there for
        its topics, the next acquire parked before that wake looks in its place."""
        if not group.parked:
            return
        now = now_ms()
        for tp, window in group.partitions.items():
            if tp[0] not in topics:
                continue
            ahead = group.ahead.get(tp)
            fresh = ahead is not None and ahead.reaches(window.end)
            waiting = (fresh and window.room) or window.available(now)
            if waiting and group.wake(1, tp[0], before=wake):
                return

    def _arm_timer(self, group: ShareGroup) -> None:
        """Look again when the group's next lock may lapse or delayed release be due (a timer
        set for sooner stays)."""
        soonest = min(
            (d for w in group.partitions.values() if (d := w.next_deadline()) is not None),
            default=None,
        )
        if soonest is None or (group.timer is not None and group.timer_at <= soonest):
            return
        if group.timer is not None:
            group.timer.cancel()
        delay = max(0.0, (soonest - now_ms()) / 1000) + 0.001
        group.timer = self.loop().call_later(delay, self._timer_fired, group)
        group.timer_at = soonest

    def _timer_fired(self, group: ShareGroup) -> None:
        """Locks that lapsed give their records back, delayed releases come due: as many
        parked acquires wake as records came back; the timer is set again for the next."""
        group.timer = None
        if self.groups.get(group.name) is not group:
            return
        now = now_ms()
        for tp, window in group.partitions.items():
            was_full = not window.room
            self._count(window.expire(now))
            self._wake_for(group, tp, was_full, now)
        if group.parked:
            self._arm_timer(group)

    def _wake_for(
        self, group: ShareGroup, tp: TopicPartition, was_full: bool, now: int | None = None
    ) -> None:
        """Wake as many parked acquires of the window's topic as it may serve now: records
        due again, and, if it was full and has room now, as many more as the room."""
        window = group.partitions.get(tp)
        if window is None or not group.parked:
            return
        count = sum(
            last - first + 1 for first, last in window.available(now_ms() if now is None else now)
        )
        if was_full:
            count += window.room
        if count:
            group.wake(count, tp[0])

    async def _watch(self, group: ShareGroup, tp: TopicPartition, window: SharePartition) -> None:
        """While acquires are parked, long-poll the partition's leader past what the window
        and its read-ahead hold; what comes is read ahead for them, and wakes as many. It
        stops once none is parked, or when the window can take no more than is read ahead
        (room made wakes them, and the next to park watches again)."""
        loop = self.loop()
        try:
            while group.parked and self.groups.get(group.name) is group and not self.closing:
                if group.partitions.get(tp) is not window:
                    return  # reset or dropped
                ahead = group.ahead.get(tp)
                position = window.end
                if ahead is not None and ahead.reaches(position):
                    if ahead.records_from(position) >= window.room:
                        return
                    position = ahead.end
                started = loop.time()
                try:
                    data, batches, end = await self._read(
                        group, window, tp, position, WATCH_MS, counted=False
                    )
                except EngineError as exc:
                    logger.debug("share group %r: watching %s-%d: %s", group.name, *tp, exc)
                    await asyncio.sleep(WATCH_RETRY_S)
                    continue
                if data:
                    self._took_in(
                        group, tp, window, position, stretches(data, batches, position), end
                    )
                elif loop.time() - started < WATCH_MS / 2000:
                    # answered early with nothing (the node is draining its long-polls)
                    await asyncio.sleep(WATCH_RETRY_S)
        finally:
            if group.watchers.get(tp) is asyncio.current_task():
                del group.watchers[tp]

    def _took_in(
        self,
        group: ShareGroup,
        tp: TopicPartition,
        window: SharePartition,
        position: int,
        read: list[Stretch],
        end: int,
    ) -> None:
        """A watch's read from `position` to `end`: added to the read-ahead if it follows on
        from it (or the window's end, with nothing read ahead), and as many parked acquires
        woken as it brought records; a read that raced an acquirer's is dropped."""
        if group.partitions.get(tp) is not window:
            return
        ahead = group.ahead.get(tp)
        if ahead is not None and ahead.reaches(window.end):
            if ahead.end != position:
                return
            ahead.stretches.extend(read)
            ahead.end = end
        elif window.end == position:
            group.ahead[tp] = ReadAhead(deque(read), end)
            if not read:
                window.skip_to(end)  # nothing to deliver there: watch on from its end
        else:
            return
        if read:
            group.wake(min(sum(s.last - s.first + 1 for s in read), window.room), tp[0])

    # -- acknowledge -----------------------------------------------------------------------------

    async def acknowledge(self, name: str, member_id: str, acks: Sequence[Ack]) -> list[AckResult]:
        """Apply each (token or range, type, delay_ms) in order; each answers whether it took
        effect, a range as a whole. Answered once the changes are stored."""
        group = self._group(name)
        member = group.member(member_id)
        self._renew(group, member)
        now = now_ms()
        results: list[AckResult | None] = [None] * len(acks)
        changed: list[TopicPartition] = []
        touched: dict[TopicPartition, bool] = {}  # each window acknowledged in: was it full
        for taken in _together(acks, results):
            tp = taken.tp
            window = group.partitions.get(tp)
            if window is None or tp[0] not in member.topics:
                refused = AckRefused(
                    "RECORD_NOT_ACQUIRED",
                    f"{tp[0]}-{tp[1]} has no record acquired in share group {name!r}",
                )
                for at in taken.at:
                    results[at] = AckResult(acks[at][0], taken.kind, refused)
                continue
            if tp not in touched:
                touched[tp] = not window.room
                expired = window.expire(now)
                if expired:
                    self._count(expired)
                    changed.append(tp)
            if self._apply(window, member_id, taken, now, acks, results):
                changed.append(tp)
            elif len(taken.at) > 1:  # one of the tokens does not take effect: each by itself
                for k, at in enumerate(taken.at):
                    offset = taken.first + k
                    one = _Acks(
                        tp, offset, offset, taken.delivery_count, taken.kind, taken.delay_ms, [at]
                    )
                    if self._apply(window, member_id, one, now, acks, results):
                        changed.append(tp)
        await self._store(group, list(dict.fromkeys(changed)))
        if changed and group.parked:
            for tp, was_full in touched.items():
                self._wake_for(group, tp, was_full)
            self._arm_timer(group)
        return [r for r in results if r is not None]

    def _apply(
        self,
        window: SharePartition,
        member_id: str,
        taken: _Acks,
        now: int,
        acks: Sequence[Ack],
        results: list[AckResult | None],
    ) -> bool:
        """Acknowledgements of one window taken together: each answered if they took effect
        (or, one alone, its refusal). Whether the window is to be written: changed, or a retry
        of what is acknowledged already, whose answer must wait for the write as the first
        did (never answered from memory)."""
        kind = taken.kind
        try:
            done = window.acknowledge(
                taken.first, taken.last, member_id, kind, now, taken.delay_ms, taken.delivery_count
            )
        except AckRefused as exc:
            if len(taken.at) > 1:
                return False
            at = taken.at[0]
            results[at] = AckResult(acks[at][0], kind, exc)
            return exc.code == "ALREADY_ACKNOWLEDGED"
        self._count(done)
        deadline = now + window.config.lock_ms if kind is AckType.RENEW else None
        for at in taken.at:
            results[at] = AckResult(acks[at][0], kind, None, deadline)
        return True

    # -- operations ------------------------------------------------------------------------------

    async def describe(self, name: str) -> dict[str, Any]:
        """Members, and per share-partition its window and lag (a partition of the members'
        topics not read yet: the window it would start with)."""
        group = self._group(name)
        now = now_ms()
        rows = []
        total = 0
        windows = dict(group.partitions)
        for member in group.members.values():
            for tp in self._member_partitions(member):
                if tp not in windows:
                    with contextlib.suppress(EngineError):
                        start = await self._reset_offset(group, tp)
                        windows[tp] = SharePartition(start, _config_of(group))
        for (topic, p), window in sorted(windows.items()):
            expired = window.expire(now)
            self._count(expired)
            try:
                high_watermark: int | None = await self.reader.offset(topic, p, "latest")
            except EngineError:
                high_watermark = None
            lag = None if high_watermark is None else window.lag(high_watermark)
            total += lag or 0
            counts = window.counts()
            rows.append(
                {
                    "topic": topic,
                    "partition": p,
                    "start_offset": window.start,
                    "end_offset": window.end,
                    "high_watermark": high_watermark,
                    "in_flight": window.size,
                    "acquired": counts["acquired"],
                    "available": counts["available"],
                    "acknowledged": counts["acknowledged"],
                    "archived": counts["archived"],
                    "lag": lag,
                }
            )
        members = []
        for member in sorted(group.members.values(), key=lambda m: m.member_id):
            held = sum(w.held_by(member.member_id) for w in group.partitions.values())
            members.append(
                {
                    "member_id": member.member_id,
                    "topics": list(member.topics),
                    "session_timeout_ms": member.session_timeout_ms,
                    "acquired": held,
                }
            )
        return {
            "group": name,
            "state": "Stable" if group.members else "Empty",
            "configs": dict(group.configs),
            "members": members,
            "partitions": rows,
            "lag": total,
        }

    def list_groups(self) -> list[dict[str, Any]]:
        return [
            {"group": name, "state": "Stable" if g.members else "Empty", "members": len(g.members)}
            for name, g in sorted(self.groups.items())
            if g.exists
        ]

    async def delete(self, name: str) -> None:
        """Forget a group without members, its windows and configs (tombstones)."""
        group = self._group(name)
        _refuse_members(group, "delete it")
        while group.pending is not None:  # the tombstones go after the writes of the group
            await asyncio.shield(group.pending.written)
            if self.groups.get(name) is not group:
                group = self._group(name)
            _refuse_members(group, "delete it")
        records: list[tuple[bytes, bytes | None]] = [(state_topic.group_key(name), None)]
        records += [(state_topic.partition_key(name, *tp), None) for tp in group.partitions]
        self.log.append(name, records)
        await self.log.durable(name, self.write_timeout_ms)
        self._drop(self.groups.pop(name))

    async def reset(
        self, name: str, topic: str, partitions: list[int] | None, to: str | int | dict[str, int]
    ) -> list[tuple[TopicPartition, int]]:
        """Start the group's share-partitions of `topic` over at `to` (earliest, latest, an
        offset, or {"timestamp": ms}), as kafka-share-groups --reset-offsets; only without
        members."""
        self.log.coordinator(name)
        known = self.groups.get(name)
        if known is not None:
            _refuse_members(known, "reset it")
        count = self.replicas.topic(topic).partitions
        chosen = list(range(count)) if partitions is None else partitions
        for p in chosen:
            if not 0 <= p < count:
                raise GroupError("UNKNOWN_PARTITION", f"{topic} has no partition {p}")
        starts = []
        for p in chosen:
            if isinstance(to, dict):
                offset = await self.reader.offset(topic, p, int(to["timestamp"]))
            elif isinstance(to, int):
                low = await self.reader.offset(topic, p, "earliest")
                high = await self.reader.offset(topic, p, "latest")
                if not low <= to <= high:
                    raise OffsetOutOfRange(to, low, high)
                offset = to
            else:
                offset = await self.reader.offset(topic, p, to)  # type: ignore[arg-type]
            starts.append(((topic, p), offset))
        group = self._group(name, create=True)  # only once every target was found
        _refuse_members(group, "reset it")  # a member may have joined meanwhile
        for tp, offset in starts:
            window = group.partitions.get(tp)
            if window is None:
                group.partitions[tp] = SharePartition(offset, _config_of(group))
            else:
                window.reset(offset)
            group.ahead.pop(tp, None)
        await self._store(group, [tp for tp, _ in starts], with_group=True)
        return starts

    def topics_changed(self, deleted: set[str]) -> None:
        """Topics were deleted: their share-partitions go (tombstones)."""
        for group in list(self.groups.values()):
            gone = [tp for tp in group.partitions if tp[0] in deleted]
            if not gone:
                continue
            for tp in gone:
                del group.partitions[tp]
                group.ahead.pop(tp, None)
            records = [(state_topic.partition_key(group.name, *tp), None) for tp in gone]
            with contextlib.suppress(EngineError):
                self.log.append(group.name, records)

    # -- inside ----------------------------------------------------------------------------------

    async def _store(
        self,
        group: ShareGroup,
        partitions: list[TopicPartition] | tuple[()],
        with_group: bool = False,
    ) -> None:
        """Store the group's changed windows (and its own record), and wait until every
        in-sync replica has them: what is answered then survives the coordinator. The changes
        of one loop turn go out in one append (`_write`). With nothing to write, wait for the
        group's write under way, if any: what this answer reports may be in it."""
        if not partitions and not with_group and not group.unsure:
            if group.writing is not None:
                await asyncio.shield(group.writing)
            return
        pending = group.pending
        if pending is None:
            pending = group.pending = PendingWrite()
            # Its first step runs in the next turn, after this turn's requests joined it.
            written = self.loop().create_task(self._write(group, pending))
            written.add_done_callback(_retrieved)
            pending.written = group.writing = written
        pending.partitions.update(partitions)
        pending.with_group = pending.with_group or with_group
        await asyncio.shield(pending.written)

    async def _write(self, group: ShareGroup, pending: PendingWrite) -> None:
        """One append of what this turn's requests changed, each window as it is now, and the
        wait for the in-sync replicas. After a failed write, everything is written."""
        if group.pending is pending:
            group.pending = None
        everything = group.unsure
        records: list[tuple[bytes, bytes | None]] = []
        if pending.with_group or everything:
            records.append((state_topic.group_key(group.name), orjson.dumps(group.stored())))
        for tp in group.partitions if everything else sorted(pending.partitions):
            window = group.partitions.get(tp)
            if window is not None:
                records.append(
                    (state_topic.partition_key(group.name, *tp), orjson.dumps(window.snapshot()))
                )
        if not records:
            return
        try:
            self.log.append(group.name, records)
            await self.log.durable(group.name, self.write_timeout_ms)
        except BaseException:
            group.unsure = True
            raise
        else:
            if everything:
                group.unsure = False
        finally:
            if group.writing is pending.written:
                group.writing = None

    def _count(self, transitions: list[Transition]) -> None:
        counts = self.counts
        for t in transitions:
            if t.cause != "archived":
                counts[t.cause] += t.last - t.first + 1
            if t.state is RecordState.ARCHIVED:
                counts["archived"] += t.last - t.first + 1

    def _count_acquired(self, deliveries: list[Delivery]) -> None:
        self.counts["acquired"] += sum(d.count for d in deliveries)
        self.counts["redelivered"] += sum(d.count for d in deliveries if d.delivery_count > 1)


def _refuse_members(group: ShareGroup, what: str) -> None:
    """GROUP_NOT_EMPTY while the group has members."""
    if group.members:
        raise GroupError(
            "GROUP_NOT_EMPTY",
            f"share group {group.name!r} has {len(group.members)} members; {what} when empty",
        )


def _time_up(waiter: asyncio.Future[int | None]) -> None:
    """A parked acquire's timeout."""
    if not waiter.done():
        waiter.set_result(None)


def _retrieved(written: asyncio.Task[None]) -> None:
    """A write's failure is its waiters' to answer; one whose waiters all went is not logged
    as never retrieved."""
    if not written.cancelled():
        written.exception()


def _config_of(group: ShareGroup) -> ShareConfig:
    return ShareConfig(
        group.config(LOCK_DURATION), group.config(DELIVERY_LIMIT), group.config(MAX_RECORD_LOCKS)
    )


def _spans(offsets: list[int]) -> list[Span]:
    """Ascending offsets as spans of consecutive ones."""
    out: list[Span] = []
    first = last = offsets[0]
    for offset in offsets[1:]:
        if offset != last + 1:
            out.append((first, last))
            first = offset
        last = offset
    out.append((first, last))
    return out


def _offsets(spans: list[Span], limit: int) -> list[int]:
    """The first `limit` offsets of the spans."""
    out: list[int] = []
    for first, last in spans:
        out += range(first, min(last, first + limit - len(out) - 1) + 1)
        if len(out) >= limit:
            break
    return out


def _among(spans: list[Span], offsets: list[int]) -> set[int]:
    """The offsets (ascending) that lie in the spans."""
    lasts = [last for _, last in spans]
    out = set()
    for offset in offsets:
        i = bisect_left(lasts, offset)
        if i < len(spans) and spans[i][0] <= offset:
            out.add(offset)
    return out


def _redelivered(
    tp: TopicPartition, found: dict[int, Stretch], t: Transition, deadline_ms: int
) -> list[Delivery]:
    """The deliveries of records acquired again, read again one by one: consecutive ones of a
    batch go together."""
    out: list[Delivery] = []
    for offset in range(t.first, t.last + 1):
        s = found[offset]
        last = out[-1] if out else None
        if last is not None and last.batch is s.batch and last.last + 1 == offset:
            last.last = offset
            last.size += s.record_bytes
        else:
            out.append(
                Delivery(
                    tp[0],
                    tp[1],
                    s.batch,
                    offset,
                    offset,
                    t.delivery_count,
                    deadline_ms,
                    s.record_bytes,
                )
            )
    return out


def _together(acks: Sequence[Ack], results: list[AckResult | None]) -> list[_Acks]:
    """The acknowledgements, each range by itself and tokens of consecutive records of one
    window and delivery count asking the same together; a malformed token is answered here."""
    out: list[_Acks] = []
    last: _Acks | None = None
    for at, (target, kind, delay_ms) in enumerate(acks):
        if isinstance(target, AckRange):
            tp = (target.topic, target.partition)
            out.append(_Acks(tp, target.first, target.last, None, kind, delay_ms, [at]))
            last = None
            continue
        try:
            tp, offset, delivery = parse_token(target)
        except ValueError:
            refused = AckRefused("INVALID_TOKEN", f"{target!r} is not a token of an acquire")
            results[at] = AckResult(target, kind, refused)
            last = None
            continue
        if (
            last is not None
            and last.last + 1 == offset
            and last.delivery_count == delivery
            and last.tp == tp
            and last.kind is kind
            and last.delay_ms == delay_ms
        ):
            last.last = offset
            last.at.append(at)
        else:
            last = _Acks(tp, offset, offset, delivery, kind, delay_ms, [at])
            out.append(last)
    return out
