"""A share group's state in memory: its configs, members and share-partitions, the records
read ahead of its windows (as the batches' bytes), what an acquire delivers, and who waits for
records."""

from __future__ import annotations

import asyncio
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from engine import batch as fmt
from engine.offsets_topic import TopicPartition
from engine.producer_state import Isolation
from groups.errors import GroupError
from groups.share.partition_state import (
    DEFAULT_DELIVERY_LIMIT,
    DEFAULT_LOCK_MS,
    DEFAULT_MAX_RECORD_LOCKS,
    SharePartition,
)

AUTO_OFFSET_RESET = "share.auto.offset.reset"
LOCK_DURATION = "share.record.lock.duration.ms"
DELIVERY_LIMIT = "share.delivery.count.limit"
MAX_RECORD_LOCKS = "share.partition.max.record.locks"
# KIP-932's group config: what the group's members see of transactions (read_uncommitted, the
# default as for consumers, or read_committed).
ISOLATION_LEVEL = "share.isolation.level"
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")
# Each config's default and bounds (Kafka's group.share.* broker bounds, the lock's widened).
CONFIG_BOUNDS: dict[str, tuple[int, int, int]] = {
    LOCK_DURATION: (DEFAULT_LOCK_MS, 1_000, 3_600_000),
    DELIVERY_LIMIT: (DEFAULT_DELIVERY_LIMIT, 2, 10),
    MAX_RECORD_LOCKS: (DEFAULT_MAX_RECORD_LOCKS, 100, 10_000),
}
DEFAULT_RESET = "latest"
_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$")


def reset_lookback_ms(value: str) -> int | None:
    """`by_duration:<ISO-8601 duration>` (KIP-1106) as milliseconds back from now; None for
    `earliest` and `latest`; ValueError for anything else."""
    if value in ("earliest", "latest"):
        return None
    prefix = "by_duration:"
    match = _DURATION.match(value[len(prefix) :]) if value.startswith(prefix) else None
    if match is None or value == prefix + "P" or value.endswith("T"):
        raise ValueError(
            f"{AUTO_OFFSET_RESET} is earliest, latest or by_duration:<ISO-8601 duration> "
            "(by_duration:PT1H, by_duration:P1DT12H)"
        )
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return int((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000)


def check_configs(configs: dict[str, Any]) -> dict[str, Any]:
    """Configs as a share group stores them; ValueError names the first bad one."""
    out: dict[str, Any] = {}
    for name, value in configs.items():
        if name == AUTO_OFFSET_RESET:
            if not isinstance(value, str):
                raise ValueError(f"{name} must be a string")
            reset_lookback_ms(value)
        elif name == ISOLATION_LEVEL:
            if value not in ISOLATION_LEVELS:
                raise ValueError(f"{name} must be {' or '.join(ISOLATION_LEVELS)}")
        elif name in CONFIG_BOUNDS:
            _, low, high = CONFIG_BOUNDS[name]
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"{name} must be an integer between {low} and {high}")
        else:
            known = ", ".join(sorted([AUTO_OFFSET_RESET, ISOLATION_LEVEL, *CONFIG_BOUNDS]))
            raise ValueError(f"unknown config {name!r}; known: {known}")
        out[name] = value
    return out


@dataclass(slots=True)
class ShareRecord:
    """A record delivered under an acquisition lock: what to deliver, and how to acknowledge
    it (`token`)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: fmt.Headers
    values_json: bool
    delivery_count: int
    lock_deadline_ms: int  # wall-clock ms

    @property
    def token(self) -> str:
        return make_token(self.topic, self.partition, self.offset, self.delivery_count)

    @property
    def size(self) -> int:
        return len(self.key or b"") + len(self.value or b"")


def make_token(topic: str, partition: int, offset: int, delivery_count: int) -> str:
    """An acquisition's handle: which record, and which of its deliveries."""
    return f"{topic}:{partition}:{offset}:{delivery_count}"


def parse_token(token: str) -> tuple[TopicPartition, int, int]:
    """(topic, partition), offset and delivery count of a token; ValueError if malformed."""
    topic, partition, offset, delivery = token.rsplit(":", 3)
    if not (topic and partition.isdigit() and offset.isdigit() and delivery.isdigit()):
        raise ValueError(token)
    return (topic, int(partition)), int(offset), int(delivery)


@dataclass
class ShareMember:
    member_id: str
    topics: tuple[str, ...]
    session_timeout_ms: int
    acquiring: int = 0  # requests in flight: the session does not run out meanwhile
    rotation: int = 0  # where the next acquire starts among the member's partitions
    # The session's timer, and when the member was last heard from (loop time): a request
    # only moves `seen`; the timer, when it fires, looks at it and waits the rest.
    expiry: asyncio.TimerHandle | None = None
    seen: float = 0.0

    def stored(self) -> dict[str, Any]:
        return {
            "member_id": self.member_id,
            "topics": list(self.topics),
            "session_timeout_ms": self.session_timeout_ms,
        }


@dataclass(slots=True)
class Stretch:
    """Records of one batch at consecutive offsets, `first` to `last`: `batch` is the whole
    batch's bytes (decoded only into an answer); `record_bytes` about what one takes (the
    batch's bytes over its records), for an acquire's max_bytes."""

    batch: memoryview
    first: int
    last: int
    record_bytes: int


@dataclass(slots=True)
class Delivery:
    """Records of one batch at consecutive offsets acquired together, under one lock and
    with one delivery count: what an acquire hands out. Their JSON is written from the batch
    (gateway.formats.share_records); `records()` decodes them."""

    topic: str
    partition: int
    batch: memoryview
    first: int
    last: int
    delivery_count: int
    lock_deadline_ms: int  # wall-clock ms
    size: int  # about their key and value bytes

    @property
    def count(self) -> int:
        return self.last - self.first + 1

    def records(self) -> list[ShareRecord]:
        """Each record decoded (Sluice's own idempotency header taken off)."""
        header = fmt.read_header(self.batch)
        internal = header.idempotent  # the first record read carries the header
        out = []
        for rec in fmt.batch_records(self.batch):
            if rec.offset < self.first:
                continue
            headers = rec.headers
            if internal:
                internal = False
                headers = [h for h in headers if h[0] != fmt.IDEMPOTENCY_HEADER]
            out.append(
                ShareRecord(
                    self.topic,
                    self.partition,
                    rec.offset,
                    rec.timestamp,
                    rec.key,
                    rec.value,
                    headers,
                    header.values_json,
                    self.delivery_count,
                    self.lock_deadline_ms,
                )
            )
            if rec.offset >= self.last:
                break  # the rest is not read, as the C path does not
        return out


def stretches(
    data: memoryview, batches: list[tuple[int, fmt.BatchHeader]], start: int
) -> list[Stretch]:
    """The records of the batches (as scanned from `data`) from `start` on, as stretches of
    consecutive offsets; control batches left out. A batch whose record count spans its offsets
    has no gap and is not decoded; others' offsets are read."""
    out = []
    for pos, header in batches:
        last = header.last_offset
        count = header.record_count
        if last < start or header.is_control or count <= 0:
            continue
        view = data[pos : pos + header.size]
        each = max(1, header.size // count)
        if count == header.last_offset_delta + 1:
            out.append(Stretch(view, max(start, header.base_offset), last, each))
            continue
        run: Stretch | None = None
        for rec in fmt.batch_records(view):
            offset = rec.offset
            if offset < start:
                continue
            if run is not None and run.last + 1 == offset:
                run.last = offset
            else:
                run = Stretch(view, offset, offset, each)
                out.append(run)
    return out


@dataclass
class ReadAhead:
    """Records read from the log past the window's end, not yet acquired: the next acquirers
    take them without another read. `end` is where the read stopped."""

    stretches: deque[Stretch]
    end: int

    def reaches(self, offset: int) -> bool:
        """Whether records at or past `offset` are read ahead."""
        return bool(self.stretches) and self.stretches[-1].last >= offset

    def records_from(self, offset: int) -> int:
        """How many records at or past `offset` are read ahead."""
        return sum(s.last - max(s.first, offset) + 1 for s in self.stretches if s.last >= offset)


@dataclass(slots=True, eq=False)
class Parked:
    """An acquire waiting for records: its future gets the number of the wake that woke it,
    or None at its timeout. `seq` orders the parked (longest waiting first)."""

    future: asyncio.Future[int | None]
    topics: tuple[str, ...]
    seq: int


@dataclass
class PendingWrite:
    """What a group's next append to its state partition writes: the changes of one loop
    turn's requests go out together (group commit), each window once, as it is then."""

    partitions: set[TopicPartition] = field(default_factory=set)
    with_group: bool = False  # the group's own record (configs, members)
    written: asyncio.Task[None] = field(init=False)  # the append and the wait for the replicas


@dataclass
class ShareGroup:
    name: str
    configs: dict[str, Any] = field(default_factory=dict)
    members: dict[str, ShareMember] = field(default_factory=dict)
    partitions: dict[TopicPartition, SharePartition] = field(default_factory=dict)
    ahead: dict[TopicPartition, ReadAhead] = field(default_factory=dict)
    reading: dict[TopicPartition, asyncio.Lock] = field(default_factory=dict)
    parked: deque[Parked] = field(default_factory=deque)
    parks: int = 0  # acquires parked so far: the next one's `seq`
    watchers: dict[TopicPartition, asyncio.Task[None]] = field(default_factory=dict)
    timer: asyncio.TimerHandle | None = None  # when a lock lapses or a release is due
    timer_at: int = 0  # its wall-clock ms
    pending: PendingWrite | None = None  # the write this turn's changes join
    writing: asyncio.Task[None] | None = None  # the latest write, until it is stored
    # A write failed: what the log holds is not known, so the next write is of everything.
    unsure: bool = False

    def config(self, name: str) -> int:
        return int(self.configs.get(name, CONFIG_BOUNDS[name][0]))

    @property
    def reset(self) -> str:
        return str(self.configs.get(AUTO_OFFSET_RESET, DEFAULT_RESET))

    @property
    def isolation(self) -> Isolation:
        """How the group reads its partitions (share.isolation.level)."""
        return Isolation(self.configs.get(ISOLATION_LEVEL, Isolation.READ_UNCOMMITTED.value))

    @property
    def exists(self) -> bool:
        return bool(self.members or self.partitions or self.configs)

    def stored(self) -> dict[str, Any]:
        return {
            "configs": self.configs,
            "members": [m.stored() for m in self.members.values()],
        }

    def member(self, member_id: str) -> ShareMember:
        member = self.members.get(member_id)
        if member is None:
            raise GroupError(
                "UNKNOWN_MEMBER",
                f"share group {self.name!r} has no member {member_id!r} (it left or expired: "
                "join again)",
            )
        return member

    def wake(self, count: int | None = None, topic: str | None = None, before: int = -1) -> int:
        """Wake up to `count` parked acquires (None: all), longest waiting first, of members
        reading `topic` (None: any); `before` (a wake passed on) only those parked before it.
        Each is told the wake's number; returns how many were woken."""
        parked = self.parked
        event = self.parks if before < 0 else before
        skipped: list[Parked] = []
        woken = 0
        while parked and (count is None or woken < count):
            waiter = parked[0]
            if waiter.seq >= event:
                break  # parked since: so are all behind it
            parked.popleft()
            if waiter.future.done():
                continue
            if topic is not None and topic not in waiter.topics:
                skipped.append(waiter)
                continue
            waiter.future.set_result(event)
            woken += 1
        parked.extendleft(reversed(skipped))
        return woken
