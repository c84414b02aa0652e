"""A share-partition's in-flight window (KIP-932), as plain state transitions: no I/O, no clock.

The window runs from the start offset (every record below it is acknowledged or archived) to
the end offset (the next record not yet taken from the log). Each record in it is available,
acquired (by one member, until its lock's deadline), acknowledged or archived, and counts its
deliveries. The window keeps them as runs: consecutive records alike in all of that, so that
acquiring or acknowledging a hundred records in a row is one change, not a hundred. The
coordinator around it reads the log, keeps time and stores `snapshot()` in the share-group
state topic before it answers; `from_snapshot` rebuilds the window on a new leader.
"""

from __future__ import annotations

import enum
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import attrgetter
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
_ACQUIRED = RecordState.ACQUIRED
_AVAILABLE = RecordState.AVAILABLE


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


Span = tuple[int, int]  # first and last offset of consecutive records


@dataclass(slots=True)
class Run:
    """Records `first` to `last` of the window, every offset between a record, alike in state,
    delivery count, holder and deadline. `member` is their last holder (None once done);
    `deadline_ms` is the lock's end while acquired, and while available the time they may be
    acquired again (0: at once; 0 too once done)."""

    first: int
    last: int
    state: RecordState
    delivery_count: int
    member: str | None
    deadline_ms: int

    @property
    def done(self) -> bool:
        return self.state in _DONE

    @property
    def count(self) -> int:
        return self.last - self.first + 1


_LAST = attrgetter("last")


class AckRefused(Exception):
    """An acknowledgement that took no effect; `code` says why, nothing changed."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code


@dataclass(slots=True)
class Transition:
    """Consecutive records that changed state alike, for the coordinator's counters."""

    first: int
    last: int
    state: RecordState
    delivery_count: int
    # "acquired", "accepted", "released", "rejected", "lock_expired", "renewed", "archived" (at
    # a lowered delivery limit)
    cause: str

    @property
    def count(self) -> int:
        return self.last - self.first + 1


class SharePartition:
    """The in-flight window of one (group, topic, partition)."""

    def __init__(self, start_offset: int, config: ShareConfig) -> None:
        self.start = start_offset
        self.end = start_offset
        self.config = config
        # The records of [start, end) that exist in the log, as runs in ascending order, no
        # two neighbours alike (a snapshot stores them as they are). The first is open.
        self.runs: list[Run] = []
        self.size = 0  # records in the runs
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
        return max(0, self.config.max_record_locks - self.size)

    def available(self, now_ms: int) -> list[Span]:
        """The records that may be acquired again now (released, or their lock lapsed), in
        offset order, as spans."""
        if now_ms < self._due_from:
            return []
        due = []
        soonest = NEVER  # of every available record: a wall clock may step back
        for run in self.runs:
            if run.state is _AVAILABLE:
                deadline = run.deadline_ms
                if deadline < soonest:
                    soonest = deadline
                if deadline <= now_ms:
                    due.append((run.first, run.last))
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
        for run in self.runs:
            out[run.state.name.lower()] += run.count
        return out

    def lag(self, high_watermark: int) -> int:
        """Records neither acknowledged nor archived: the window's open ones and every offset
        past it up to the high watermark."""
        open_records = sum(run.count for run in self.runs if not run.done)
        return open_records + max(0, high_watermark - self.end)

    def held_by(self, member: str) -> int:
        """How many records `member` holds now."""
        return sum(
            run.count for run in self.runs if run.state is _ACQUIRED and run.member == member
        )

    # -- transitions -----------------------------------------------------------------------------

    def expire(self, now_ms: int) -> list[Transition]:
        """Locks that lapsed give their records back (archived once they reached the delivery
        limit); a delayed release that is due needs nothing (`available` tells)."""
        if now_ms < self._locks_until:
            return []
        out = []
        later = NEVER
        for run in self.runs:
            if run.state is _ACQUIRED:
                if run.deadline_ms <= now_ms:
                    out.append(self._give_back(run, 0, "lock_expired"))
                elif run.deadline_ms < later:
                    later = run.deadline_ms
        self._locks_until = later
        if out:
            self._merge(0, len(self.runs))
            self._advance()
        return out

    def acquire(self, spans: Sequence[Span], member: str, now_ms: int) -> list[Transition]:
        """Acquire spans of records (ascending, apart): records of the window that are
        available now, or records new to it (at or past its end; offsets skipped between are
        records the log no longer has). Each acquisition counts a delivery and locks the
        records for `lock_ms`. All or nothing: ValueError, and nothing changed, if any of them
        may not be acquired."""
        end = self.end
        new = 0
        below = -1  # the last offset named so far
        for first, last in spans:
            if first <= below or last < first:
                raise ValueError(f"spans out of order or overlapping at {first}-{last}")
            below = last
            if first < end:
                self._check_available(first, min(last, end - 1), now_ms)
            if last >= end:
                new += last - max(first, end) + 1
        if new > self.room:
            raise ValueError("the window is full")
        out: list[Transition] = []
        deadline = now_ms + self.config.lock_ms
        if deadline < self._locks_until:
            self._locks_until = deadline
        runs = self.runs
        for first, last in spans:
            if first < end:
                i, j = self._cut(first, min(last, end - 1))
                for run in runs[i:j]:
                    run.state = _ACQUIRED
                    run.delivery_count += 1
                    run.member = member
                    run.deadline_ms = deadline
                    out.append(
                        Transition(run.first, run.last, _ACQUIRED, run.delivery_count, "acquired")
                    )
                self._merge(i, j)
                first = end
            if last >= first:
                tail = runs[-1] if runs else None
                if (
                    tail is not None
                    and tail.last + 1 == first
                    and tail.state is _ACQUIRED
                    and tail.delivery_count == 1
                    and tail.member == member
                    and tail.deadline_ms == deadline
                ):
                    tail.last = last
                else:
                    runs.append(Run(first, last, _ACQUIRED, 1, member, deadline))
                self.size += last - first + 1
                self.end = last + 1
                out.append(Transition(first, last, _ACQUIRED, 1, "acquired"))
        return out

    def configure(self, config: ShareConfig) -> list[Transition]:
        """Take new limits. A record given back that has had as many deliveries as a lowered
        delivery limit allows is archived now (it may not be delivered again); one held is
        archived when it is given back, as always."""
        self.config = config
        limit = config.delivery_limit
        out = []
        for run in self.runs:
            if run.state is _AVAILABLE and run.delivery_count >= limit:
                _finish(run, RecordState.ARCHIVED)
                out.append(
                    Transition(run.first, run.last, run.state, run.delivery_count, "archived")
                )
        if out:
            self._merge(0, len(self.runs))
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
        first: int,
        last: int,
        member: str,
        kind: AckType,
        now_ms: int,
        delay_ms: int = 0,
        delivery_count: int | None = None,
    ) -> list[Transition]:
        """Apply one acknowledgement of the records `first` to `last` by `member` (offsets
        between that are no records, as a transaction's marker, are passed over), with
        `delivery_count` of that delivery of theirs only; AckRefused (nothing changed) unless
        every one is `member`'s in force."""
        self._check_held(first, last, member, now_ms, delivery_count)
        i, j = self._cut(first, last)
        runs = self.runs
        out = []
        if kind is AckType.RENEW:
            # maybe before the last deadline: the lock duration set shorter, the clock stepped back
            deadline = now_ms + self.config.lock_ms
            if deadline < self._locks_until:
                self._locks_until = deadline
            for run in runs[i:j]:
                run.deadline_ms = deadline
                out.append(
                    Transition(run.first, run.last, run.state, run.delivery_count, "renewed")
                )
            self._merge(i, j)
            return out
        for run in runs[i:j]:
            if kind is AckType.ACCEPT:
                _finish(run, RecordState.ACKNOWLEDGED)
                out.append(
                    Transition(run.first, run.last, run.state, run.delivery_count, "accepted")
                )
            elif kind is AckType.REJECT:
                _finish(run, RecordState.ARCHIVED)
                out.append(
                    Transition(run.first, run.last, run.state, run.delivery_count, "rejected")
                )
            else:
                out.append(self._give_back(run, now_ms + delay_ms if delay_ms else 0, "released"))
        self._merge(i, j)
        self._advance()
        return out

    def release_member(self, member: str) -> list[Transition]:
        """A member left or expired: what it holds is given back at once (its deliveries
        count; one that reached the limit is archived)."""
        out = [
            self._give_back(run, 0, "released")
            for run in self.runs
            if run.state is _ACQUIRED and run.member == member
        ]
        if out:
            self._merge(0, len(self.runs))
            self._advance()
        return out

    def advance_to(self, offset: int) -> int:
        """The log no longer holds the records below `offset` (retention deleted them): the
        window starts there, and what it held below is dropped. Returns how many were open."""
        if offset <= self.start:
            return 0
        i = self._split(offset)
        dropped = self.runs[:i]
        del self.runs[:i]
        self.size -= sum(run.count for run in dropped)
        self.end = max(self.end, offset)
        self.start = offset
        self._advance()
        return sum(run.count for run in dropped if not run.done)

    def forget(self, offsets: Iterable[int]) -> None:
        """Records the log no longer holds (compacted away while available): nothing is left
        to deliver of them, so they leave the window as done."""
        runs = self.runs
        for offset in offsets:
            i = bisect_left(runs, offset, key=_LAST)
            if i < len(runs) and runs[i].first <= offset and runs[i].state is _AVAILABLE:
                i, j = self._cut(offset, offset)
                del runs[i:j]
                self.size -= 1
        self._advance()

    def reset(self, offset: int) -> None:
        """Start over at `offset` with an empty window (the group has no members)."""
        if any(run.state is _ACQUIRED for run in self.runs):
            raise ValueError("records are acquired")
        self.runs.clear()
        self.size = 0
        self.start = self.end = offset

    # -- inside ----------------------------------------------------------------------------------

    def _check_available(self, first: int, last: int, now_ms: int) -> None:
        """Every offset from `first` to `last` (below the end) is a record available now."""
        if first < self.start:
            raise ValueError(f"offset {first} is not in the window")
        runs = self.runs
        expect = first
        for k in range(bisect_left(runs, first, key=_LAST), len(runs)):
            run = runs[k]
            if run.first > expect:
                break
            if run.state is not _AVAILABLE or run.deadline_ms > now_ms:
                raise ValueError(f"offset {max(first, run.first)} is not available")
            expect = run.last + 1
            if expect > last:
                return
        raise ValueError(f"offset {expect} is not in the window")

    def _check_held(
        self, first: int, last: int, member: str, now_ms: int, delivery_count: int | None
    ) -> None:
        """Every record from `first` to `last` is `member`'s in force (of that delivery), or
        AckRefused says why not of the first that is not."""
        if first < self.start:
            raise AckRefused(
                "ALREADY_ACKNOWLEDGED", f"offset {first} is acknowledged or archived already"
            )
        runs = self.runs
        found = False
        for k in range(bisect_left(runs, first, key=_LAST), len(runs)):
            run = runs[k]
            if run.first > last:
                break
            found = True
            offset = max(first, run.first)
            if run.state in _DONE:
                raise AckRefused(
                    "ALREADY_ACKNOWLEDGED", f"offset {offset} is acknowledged or archived already"
                )
            if delivery_count is not None and run.delivery_count != delivery_count:
                raise AckRefused(
                    "DELIVERED_AGAIN",
                    f"offset {offset} was delivered again since (delivery "
                    f"{run.delivery_count}, not {delivery_count})",
                )
            if run.member != member:
                raise AckRefused("NOT_HOLDER", f"offset {offset} is held by another member")
            if run.state is not _ACQUIRED or run.deadline_ms <= now_ms:
                raise AckRefused(
                    "LOCK_EXPIRED",
                    f"the lock of offset {offset} lapsed or was released; it will be delivered "
                    "again",
                )
        if last >= self.end or not found:
            at = max(first, self.end) if found else first
            raise AckRefused("RECORD_NOT_ACQUIRED", f"offset {at} was never acquired")

    def _give_back(self, run: Run, available_at: int, cause: str) -> Transition:
        """Acquired records return to the queue, or are archived at the delivery limit."""
        if run.delivery_count >= self.config.delivery_limit:
            _finish(run, RecordState.ARCHIVED)
        else:
            run.state = _AVAILABLE
            run.deadline_ms = available_at
            if available_at < self._due_from:
                self._due_from = available_at
        return Transition(run.first, run.last, run.state, run.delivery_count, cause)

    def _split(self, offset: int) -> int:
        """No run goes on from below `offset` to it (one that did is cut there); the index of
        the first run at or past it."""
        runs = self.runs
        i = bisect_left(runs, offset, key=_LAST)
        if i < len(runs):
            run = runs[i]
            if run.first < offset:
                runs.insert(
                    i + 1,
                    Run(
                        offset, run.last, run.state, run.delivery_count, run.member, run.deadline_ms
                    ),
                )
                run.last = offset - 1
                return i + 1
        return i

    def _cut(self, first: int, last: int) -> tuple[int, int]:
        """The runs from `first` to `last` cut out: runs[i:j] lie within them."""
        i = self._split(first)
        return i, self._split(last + 1)

    def _merge(self, i: int, j: int) -> None:
        """Join the neighbours alike among runs[i - 1 : j + 1]."""
        runs = self.runs
        k = max(i, 1)
        stop = min(j, len(runs) - 1)
        while k <= stop:
            a, b = runs[k - 1], runs[k]
            if (
                a.last + 1 == b.first
                and a.state is b.state
                and a.delivery_count == b.delivery_count
                and a.member == b.member
                and a.deadline_ms == b.deadline_ms
            ):
                a.last = b.last
                del runs[k]
                stop -= 1
            else:
                k += 1

    def _advance(self) -> None:
        """Move the start past the acknowledged and archived records at the window's front."""
        runs = self.runs
        k = 0
        while k < len(runs) and runs[k].state in _DONE:
            self.size -= runs[k].count
            k += 1
        if k:
            del runs[:k]
        self.start = runs[0].first if runs else self.end

    # -- stored form -----------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The window as stored: its runs, as [first, last, state, delivery_count, member,
        deadline_ms]."""
        return {
            "start": self.start,
            "end": self.end,
            "runs": [
                [r.first, r.last, int(r.state), r.delivery_count, r.member, r.deadline_ms]
                for r in self.runs
            ],
        }

    @classmethod
    def from_snapshot(cls, doc: dict[str, Any], config: ShareConfig) -> SharePartition:
        """The window a snapshot stored (InvalidRecord if malformed: `check_snapshot`)."""
        start, end, runs = check_snapshot(doc)
        out = cls(start, config)
        out.end = end
        for first, last, state, count, member, deadline in runs:
            run = Run(first, last, state, count, member, deadline)
            if run.done:
                _finish(run, state)  # stored by an older version with its last holder
            out.runs.append(run)
            out.size += run.count
        out._merge(0, len(out.runs))
        out._locks_until = out._due_from = 0  # unknown: the first look scans
        return out


def _finish(run: Run, state: RecordState) -> None:
    """The records are done: who held them and when no longer matters (so done neighbours
    join)."""
    run.state = state
    run.member = None
    run.deadline_ms = 0


StoredRun = tuple[int, int, RecordState, int, str | None, int]


def check_snapshot(doc: dict[str, Any]) -> tuple[int, int, list[StoredRun]]:
    """A stored window's start, end and runs, checked: InvalidRecord unless every run is well
    formed, the runs ascend without overlapping, and they lie within [start, end)."""
    try:
        start, end = int(doc["start"]), int(doc["end"])
        runs: list[StoredRun] = [
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
