"""A share-partition's in-flight window (KIP-932), as plain state transitions: no I/O, no clock.

The window runs from the start offset (every record below it is acknowledged or archived) to
the end offset (the next record not yet taken from the log). Each record in it is available,
acquired (by one member, until its lock's deadline), acknowledged or archived, and counts its
deliveries. The coordinator around it reads the log, keeps time and stores `snapshot()` in the
share-group state topic before it answers; `from_snapshot` rebuilds the window on a new leader.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from engine.errors import InvalidRecord

DEFAULT_LOCK_MS = 30_000  # group.share.record.lock.duration.ms
DEFAULT_DELIVERY_LIMIT = 5  # group.share.delivery.count.limit
DEFAULT_MAX_RECORD_LOCKS = 2_000  # group.share.partition.max.record.locks
NEVER = 2**63  # a time after every deadline


class RecordState(enum.IntEnum):
    """Kafka's values for a share-partition record's state (KIP-932)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


_DONE = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)  # never delivered again


class AckType(enum.Enum):
    """What an acknowledgement asks of an acquired record (RENEW as KIP-1222)."""

    ACCEPT = "accept"
    RELEASE = "release"
    REJECT = "reject"
    RENEW = "renew"


@dataclass(frozen=True, slots=True)
class ShareConfig:
    """The limits of one share group's partitions."""

    lock_ms: int = DEFAULT_LOCK_MS
    delivery_limit: int = DEFAULT_DELIVERY_LIMIT
    max_record_locks: int = DEFAULT_MAX_RECORD_LOCKS


@dataclass(slots=True)
class InFlight:
    """One record of the window. `member` is its last holder; `deadline_ms` is the lock's end
    while acquired, and while available the time it may be acquired again (0: at once)."""

    state: RecordState
    delivery_count: int
    member: str | None
    deadline_ms: int

    @property
    def done(self) -> bool:
        return self.state in _DONE


class AckRefused(Exception):
    """An acknowledgement that took no effect; `code` says why, nothing changed."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code


@dataclass(slots=True)
class Transition:
    """A record that changed state, for the coordinator's counters and dead letters."""

    offset: int
    state: RecordState
    delivery_count: int
    # "acquired", "accepted", "released", "rejected", "lock_expired", "renewed", "archived" (at
    # a lowered delivery limit)
    cause: str


class SharePartition:
    """The in-flight window of one (group, topic, partition)."""

    def __init__(self, start_offset: int, config: ShareConfig) -> None:
        self.start = start_offset
        self.end = start_offset
        self.config = config
        # The records of [start, end) that exist in the log and are not below start, in
        # ascending offset order (offsets are only ever added at the end).
        self.records: dict[int, InFlight] = {}
        # The offsets of `records` in order, some perhaps gone from it: where the start moves
        # next, found without iterating a dict whose front keeps being deleted (CPython scans
        # the deleted slots first).
        self._order: deque[int] = deque()
        # Lower bounds that spare an acquire's pass a scan of the window (a thousand parked
        # consumers woken at once each look): no lock lapses before `_locks_until`, no record
        # is due again before `_due_from` (infinity: none is available). A scan makes them
        # exact; a transition only ever lowers them.
        self._locks_until = NEVER
        self._due_from = NEVER

    # -- reading ---------------------------------------------------------------------------------

    @property
    def room(self) -> int:
        """How many more records the window may take from the log."""
        return max(0, self.config.max_record_locks - len(self.records))

    def available(self, now_ms: int) -> list[int]:
        """The offsets that may be acquired again now (released, or their lock lapsed), in
        offset order."""
        if now_ms < self._due_from:
            return []
        due = []
        soonest = NEVER  # of every available record: a wall clock may step back
        for offset, record in self.records.items():
            if record.state is RecordState.AVAILABLE:
                soonest = min(soonest, record.deadline_ms)
                if record.deadline_ms <= now_ms:
                    due.append(offset)
        self._due_from = soonest
        return due

    def next_deadline(self) -> int | None:
        """When a lock may lapse or a delayed release become available next (at the earliest:
        the time to look again)."""
        soonest = min(self._locks_until, self._due_from)
        return None if soonest == NEVER else soonest

    def counts(self) -> dict[str, int]:
        """How many records of the window are in each state."""
        out = {state.name.lower(): 0 for state in RecordState}
        for record in self.records.values():
            out[record.state.name.lower()] += 1
        return out

    def lag(self, high_watermark: int) -> int:
        """Records neither acknowledged nor archived: the window's open ones and every offset
        past it up to the high watermark."""
        open_records = sum(1 for r in self.records.values() if not r.done)
        return open_records + max(0, high_watermark - self.end)

    def held_by(self, member: str) -> list[int]:
        """The offsets `member` holds now."""
        return [
            offset
            for offset, record in self.records.items()
            if record.state is RecordState.ACQUIRED and record.member == member
        ]

    # -- transitions -----------------------------------------------------------------------------

    def expire(self, now_ms: int) -> list[Transition]:
        """Locks that lapsed give their records back (archived once they reached the delivery
        limit); a delayed release that is due needs nothing (`available` tells)."""
        if now_ms < self._locks_until:
            return []
        out = []
        later = NEVER
        for offset, record in self.records.items():
            if record.state is RecordState.ACQUIRED:
                if record.deadline_ms <= now_ms:
                    out.append(self._give_back(offset, record, 0, "lock_expired"))
                else:
                    later = min(later, record.deadline_ms)
        self._locks_until = later
        if out:
            self._advance()
        return out

    def acquire(self, offsets: Iterable[int], member: str, now_ms: int) -> list[Transition]:
        """Acquire records of the window that are available now, or records new to it (at or
        past its end, ascending: offsets skipped between are records the log no longer has).
        Each acquisition counts a delivery and locks the record for `lock_ms`. All or nothing:
        ValueError, and nothing changed, if any of them may not be acquired."""
        offsets = list(offsets)
        records = self.records
        end = self.end
        new = 0
        for offset in offsets:
            record = records.get(offset)
            if record is None:
                if offset < end:
                    raise ValueError(f"offset {offset} is not in the window")
                end = offset + 1
                new += 1
            elif record.state is not RecordState.AVAILABLE or record.deadline_ms > now_ms:
                raise ValueError(f"offset {offset} is not available")
        if new > self.room:
            raise ValueError("the window is full")
        if len(offsets) - new != len({o for o in offsets if o in records}):
            raise ValueError("an offset named twice")
        out = []
        deadline = now_ms + self.config.lock_ms
        self._locks_until = min(self._locks_until, deadline)
        for offset in offsets:
            record = records.get(offset)
            if record is None:
                record = records[offset] = InFlight(RecordState.AVAILABLE, 0, None, 0)
                self._order.append(offset)
            record.state = RecordState.ACQUIRED
            record.delivery_count += 1
            record.member = member
            record.deadline_ms = deadline
            out.append(Transition(offset, record.state, record.delivery_count, "acquired"))
        self.end = end
        return out

    def configure(self, config: ShareConfig) -> list[Transition]:
        """Take new limits. A record given back that has had as many deliveries as a lowered
        delivery limit allows is archived now (it may not be delivered again); one held is
        archived when it is given back, as always."""
        self.config = config
        limit = config.delivery_limit
        out = []
        for offset, record in self.records.items():
            if record.state is RecordState.AVAILABLE and record.delivery_count >= limit:
                record.state = RecordState.ARCHIVED
                out.append(Transition(offset, record.state, record.delivery_count, "archived"))
        if out:
            self._advance()
        return out

    def skip_to(self, offset: int) -> None:
        """The log has no record to deliver below `offset` past the window's end (control
        batches, compacted records): the end moves there."""
        if offset > self.end:
            self.end = offset
            self._advance()

    def acknowledge(
        self,
        offset: int,
        delivery_count: int,
        member: str,
        kind: AckType,
        now_ms: int,
        delay_ms: int = 0,
    ) -> Transition:
        """Apply one acknowledgement of the delivery `delivery_count` of `offset` by
        `member`; AckRefused (nothing changed) when that delivery is not `member`'s in force."""
        record = self._held(offset, delivery_count, member, now_ms)
        if kind is AckType.ACCEPT:
            record.state = RecordState.ACKNOWLEDGED
            out = Transition(offset, record.state, record.delivery_count, "accepted")
        elif kind is AckType.REJECT:
            record.state = RecordState.ARCHIVED
            out = Transition(offset, record.state, record.delivery_count, "rejected")
        elif kind is AckType.RELEASE:
            out = self._give_back(offset, record, now_ms + delay_ms if delay_ms else 0, "released")
        else:
            # maybe before the last deadline: the lock duration set shorter, the clock stepped back
            record.deadline_ms = now_ms + self.config.lock_ms
            self._locks_until = min(self._locks_until, record.deadline_ms)
            return Transition(offset, record.state, record.delivery_count, "renewed")
        self._advance()
        return out

    def release_member(self, member: str) -> list[Transition]:
        """A member left or expired: what it holds is given back at once (its deliveries
        count; one that reached the limit is archived)."""
        out = [
            self._give_back(offset, self.records[offset], 0, "released")
            for offset in self.held_by(member)
        ]
        if out:
            self._advance()
        return out

    def advance_to(self, offset: int) -> int:
        """The log no longer holds the records below `offset` (retention deleted them): the
        window starts there, and what it held below is dropped. Returns how many were open."""
        if offset <= self.start:
            return 0
        dropped = [o for o in self.records if o < offset]
        open_records = sum(1 for o in dropped if not self.records[o].done)
        for o in dropped:
            del self.records[o]
        while self._order and self._order[0] < offset:
            self._order.popleft()
        self.end = max(self.end, offset)
        self.start = offset
        self._advance()
        return open_records

    def forget(self, offsets: Iterable[int]) -> None:
        """Records the log no longer holds (compacted away while available): nothing is left
        to deliver of them, so they leave the window as done."""
        for offset in offsets:
            record = self.records.get(offset)
            if record is not None and record.state is RecordState.AVAILABLE:
                del self.records[offset]
        self._advance()

    def reset(self, offset: int) -> None:
        """Start over at `offset` with an empty window (the group has no members)."""
        if any(r.state is RecordState.ACQUIRED for r in self.records.values()):
            raise ValueError("records are acquired")
        self.records.clear()
        self._order.clear()
        self.start = self.end = offset

    # -- inside ----------------------------------------------------------------------------------

    def _held(self, offset: int, delivery_count: int, member: str, now_ms: int) -> InFlight:
        """The record whose delivery `delivery_count` `member` holds now, or why not."""
        if offset < self.start:
            raise AckRefused(
                "ALREADY_ACKNOWLEDGED", f"offset {offset} is acknowledged or archived already"
            )
        record = self.records.get(offset)
        if record is None:
            raise AckRefused("RECORD_NOT_ACQUIRED", f"offset {offset} was never acquired")
        if record.state in _DONE:
            raise AckRefused(
                "ALREADY_ACKNOWLEDGED", f"offset {offset} is acknowledged or archived already"
            )
        if record.delivery_count != delivery_count:
            raise AckRefused(
                "DELIVERED_AGAIN",
                f"offset {offset} was delivered again since (delivery {record.delivery_count}, "
                f"not {delivery_count})",
            )
        if record.member != member:
            raise AckRefused("NOT_HOLDER", f"offset {offset} is held by another member")
        if record.state is not RecordState.ACQUIRED or record.deadline_ms <= now_ms:
            raise AckRefused(
                "LOCK_EXPIRED",
                f"the lock of offset {offset} lapsed or was released; it will be delivered again",
            )
        return record

    def _give_back(
        self, offset: int, record: InFlight, available_at: int, cause: str
    ) -> Transition:
        """An acquired record returns to the queue, or is archived at the delivery limit."""
        if record.delivery_count >= self.config.delivery_limit:
            record.state = RecordState.ARCHIVED
        else:
            record.state = RecordState.AVAILABLE
            self._due_from = min(self._due_from, available_at)
        record.deadline_ms = available_at
        return Transition(offset, record.state, record.delivery_count, cause)

    def _advance(self) -> None:
        """Move the start past the acknowledged and archived records at the window's front."""
        records = self.records
        order = self._order
        while order:
            first = order[0]
            record = records.get(first)
            if record is not None:
                if record.state not in _DONE:
                    self.start = first
                    return
                del records[first]
            order.popleft()
        self.start = self.end

    # -- stored form -----------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The window as stored: runs of consecutive offsets alike in state, delivery count,
        holder and deadline, as [first, last, state, delivery_count, member, deadline_ms]."""
        return {"start": self.start, "end": self.end, "runs": list(_runs(self.records))}

    @classmethod
    def from_snapshot(cls, doc: dict[str, Any], config: ShareConfig) -> SharePartition:
        """The window a snapshot stored (InvalidRecord if malformed: `check_snapshot`)."""
        start, end, runs = check_snapshot(doc)
        out = cls(start, config)
        out.end = end
        records = out.records
        for first, last, state, count, member, deadline in runs:
            for offset in range(first, last + 1):
                records[offset] = InFlight(state, count, member, deadline)
        out._order.extend(records)
        out._locks_until = out._due_from = 0  # unknown: the first look scans
        return out


Run = tuple[int, int, RecordState, int, str | None, int]


def check_snapshot(doc: dict[str, Any]) -> tuple[int, int, list[Run]]:
    """A stored window's start, end and runs, checked: InvalidRecord unless every run is well
    formed, the runs ascend without overlapping, and they lie within [start, end)."""
    try:
        start, end = int(doc["start"]), int(doc["end"])
        runs: list[Run] = [
            (
                int(first),
                int(last),
                RecordState(int(state)),
                int(count),
                None if member is None else str(member),
                int(deadline),
            )
            for first, last, state, count, member, deadline in doc["runs"]
        ]
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidRecord(f"a malformed share-partition window: {exc}") from None
    if start > end:
        raise InvalidRecord(f"a share-partition window that starts ({start}) past its end ({end})")
    below = start  # the lowest offset the next run may begin at
    for first, last, *_ in runs:
        if first < below or last < first:
            raise InvalidRecord(
                f"a share-partition window whose runs are out of order, overlap or lie below "
                f"its start ({first}-{last} after {below - 1})"
            )
        below = last + 1
    if below > end:
        raise InvalidRecord(f"a share-partition window with records past its end ({end})")
    return start, end, runs


def _runs(records: dict[int, InFlight]) -> Iterator[list[Any]]:
    run: list[Any] | None = None
    for offset, r in records.items():
        if (
            run is not None
            and run[1] + 1 == offset
            and run[2] == r.state
            and run[3] == r.delivery_count
            and run[4] == r.member
            and run[5] == r.deadline_ms
        ):
            run[1] = offset
            continue
        if run is not None:
            yield run
        run = [offset, offset, int(r.state), r.delivery_count, r.member, r.deadline_ms]
    if run is not None:
        yield run
