"""One partition's replication state, sans-IO: the leader's ISR and high watermark, and the
follower's epoch-based truncation (KIP-101/279). No I/O, no clock: time comes in as `now_ms`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.epoch_cache import UNDEFINED_EPOCH

UNKNOWN_OFFSET = -1


@dataclass
class FollowerProgress:
    """What the leader knows of one follower in the current leader epoch."""

    log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    last_fetch_leader_end: int = UNKNOWN_OFFSET


def _check_isr(leader: int, isr: tuple[int, ...], replicas: tuple[int, ...]) -> None:
    """An ISR holds its leader and only the partition's replicas."""
    if leader not in isr or not set(isr) <= set(replicas):
        raise ValueError(f"ISR {isr} must hold the leader {leader} and only replicas")


class LeaderState:
    """The leader's view of a partition in one leader epoch: follower progress, ISR, HW.
    An ISR change is pending from `begin_isr_change` until the store write's outcome is reported."""

    def __init__(
        self,
        node_id: int,
        leader_epoch: int,
        replicas: tuple[int, ...],
        isr: tuple[int, ...],
        epoch_start_offset: int,
        high_watermark: int,
        now_ms: int,
    ) -> None:
        _check_isr(node_id, isr, replicas)
        if high_watermark > epoch_start_offset:
            raise ValueError(
                f"high watermark {high_watermark} past the log end {epoch_start_offset}"
            )
        self.node_id = node_id
        self.leader_epoch = leader_epoch
        self.replicas = replicas
        self.epoch_start_offset = epoch_start_offset
        self._isr = isr
        self._pending: tuple[int, ...] | None = None
        self._hw = high_watermark
        self._started_ms = now_ms
        # Kafka starts ISR members as caught up now, so that a new leader does not shrink at once.
        self.followers = {
            r: FollowerProgress(last_caught_up_ms=now_ms if r in isr else 0)
            for r in replicas
            if r != node_id
        }

    @property
    def isr(self) -> tuple[int, ...]:
        """The committed ISR."""
        return self._isr

    @property
    def pending(self) -> tuple[int, ...] | None:
        """The proposed ISR being written to the store, if any."""
        return self._pending

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The committed ISR plus any replica a pending change may add (Kafka's maximalIsr)."""
        if self._pending is None:
            return self._isr
        return self._isr + tuple(r for r in self._pending if r not in self._isr)

    def set_replicas(self, replicas: tuple[int, ...]) -> None:
        """The replica list changed within the epoch (a reassignment added replicas): track the
        new followers from now, forget the ones outside the ISR that left."""
        if not set(self.maximal_isr) <= set(replicas):
            raise ValueError(f"replicas {replicas} must hold the ISR {self.maximal_isr}")
        self.replicas = replicas
        self.followers = {
            r: self.followers.get(r) or FollowerProgress() for r in replicas if r != self.node_id
        }

    def _progress(self, replica: int) -> FollowerProgress:
        try:
            return self.followers[replica]
        except KeyError:
            raise ValueError(f"{replica} is not a follower of this partition") from None

    def on_follower_fetch(
        self, replica: int, fetch_offset: int, leader_log_end: int, now_ms: int
    ) -> None:
        """Record a follower's fetch at `fetch_offset` (Kafka's updateFetchState, KAFKA-4485)."""
        p = self._progress(replica)
        if fetch_offset > leader_log_end:
            raise ValueError(f"fetch offset {fetch_offset} is past the log end {leader_log_end}")
        if fetch_offset >= leader_log_end:
            p.last_caught_up_ms = max(p.last_caught_up_ms, now_ms)
        elif fetch_offset >= p.last_fetch_leader_end:
            # It reached where the leader was at its previous fetch: it was caught up then.
            p.last_caught_up_ms = max(p.last_caught_up_ms, p.last_fetch_ms)
        p.last_fetch_leader_end = leader_log_end
        p.last_fetch_ms = now_ms
        p.log_end_offset = fetch_offset

    def _hw_candidate(self, leader_log_end: int) -> int:
        ends = [
            leader_log_end if r == self.node_id else self.followers[r].log_end_offset
            for r in self.maximal_isr
        ]
        if UNKNOWN_OFFSET in ends:
            return self._hw
        return max(self._hw, min(ends))

    def high_watermark(self, leader_log_end: int) -> int:
        """Advance the HW to the least log end over the maximal ISR; it never goes back."""
        self._hw = self._hw_candidate(leader_log_end)
        return self._hw

    def shrink_proposal(
        self, now_ms: int, leader_log_end: int, lag_max_ms: int
    ) -> tuple[int, ...] | None:
        """The ISR without followers behind the log end and not caught up for `lag_max_ms`."""
        if self._pending is not None:
            return None
        out = {
            r
            for r in self._isr
            if r != self.node_id
            and self.followers[r].log_end_offset != leader_log_end
            and now_ms - self.followers[r].last_caught_up_ms > lag_max_ms
        }
        return tuple(r for r in self._isr if r not in out) if out else None

    def expand_proposal(self, replica: int, leader_log_end: int) -> tuple[int, ...] | None:
        """The ISR plus `replica` once its log end reaches both the HW and the epoch start."""
        log_end = self._progress(replica).log_end_offset
        if (
            self._pending is not None
            or replica in self._isr
            or log_end < self._hw_candidate(leader_log_end)
            or log_end < self.epoch_start_offset
        ):
            return None
        return (*self._isr, replica)

    def begin_isr_change(self, new_isr: tuple[int, ...]) -> None:
        """Mark `new_isr` as being written to the store."""
        if self._pending is not None:
            raise ValueError(f"an ISR change to {self._pending} is already pending")
        if new_isr == self._isr or self.node_id not in new_isr:
            raise ValueError(f"{new_isr} is no ISR change from {self._isr}")
        if not set(new_isr) <= set(self.replicas):
            raise ValueError(f"{new_isr} holds a replica not in {self.replicas}")
        self._pending = new_isr

    def isr_change_committed(self, new_isr: tuple[int, ...]) -> None:
        """The store accepted the pending change: it becomes the ISR."""
        if new_isr != self._pending:
            raise ValueError(f"{new_isr} is not the pending ISR change {self._pending}")
        self._isr = new_isr
        self._pending = None

    def isr_stored(self, isr: tuple[int, ...]) -> None:
        """The store holds `isr` for this epoch: this leader's own change, or the controller's
        (a move's start drops the members restarted since, KIP-903, without a new epoch). It is
        the committed ISR from now on; a pending change still fails or commits in the store."""
        _check_isr(self.node_id, isr, self.replicas)
        self._isr = isr

    def isr_change_failed(self) -> None:
        """The store refused the pending change: the committed ISR stands."""
        if self._pending is None:
            raise ValueError("no ISR change is pending")
        self._pending = None

    def min_isr_satisfied(self, min_insync: int) -> bool:
        return len(self._isr) >= min_insync

    def largest_lag(self, leader_log_end: int, now_ms: int) -> tuple[int, int]:
        """(records, ms) of the most lagging followers; ms since last caught up (or since this
        leader began). A follower yet to fetch counts in ms only."""
        records = ms = 0
        for p in self.followers.values():
            if p.log_end_offset == leader_log_end:
                continue
            if p.log_end_offset != UNKNOWN_OFFSET:
                records = max(records, leader_log_end - p.log_end_offset)
            ms = max(ms, now_ms - max(p.last_caught_up_ms, self._started_ms))
        return records, ms


@dataclass(frozen=True)
class Truncate:
    """Truncate the local log to `offset` (keep offsets below it); truncation is done."""

    offset: int


@dataclass(frozen=True)
class AskAgain:
    """Ask the leader for the end offset of `epoch` and call `truncation_step` again."""

    epoch: int


def truncation_request(local_entries: Sequence[tuple[int, int]]) -> int:
    """The epoch to ask the leader about first: the latest local one, or UNDEFINED_EPOCH."""
    return local_entries[-1][0] if local_entries else UNDEFINED_EPOCH


def truncation_step(
    local_entries: Sequence[tuple[int, int]],
    local_log_end: int,
    asked_epoch: int,
    leader_epoch_answer: int,
    leader_end_offset: int,
) -> Truncate | AskAgain:
    """One KIP-279 round: from the leader's answer (its largest epoch <= `asked_epoch`, where it
    ends) to a truncation or another question. `local_entries`: (epoch, start offset), in order."""
    # Why it is right: a record (offset o, epoch e) is a copy of e's leader's log up to o, so two
    # logs holding the same epoch at an offset agree up to it. Invariant: the logs diverge at or
    # below where the local `asked_epoch` ends. The asked epoch falls every round, so it ends.
    # The local high watermark plays no part: truncating to it is the bug KIP-101 fixes.
    if leader_epoch_answer > asked_epoch:
        raise ValueError(f"the leader answered epoch {leader_epoch_answer} > {asked_epoch}")
    # With no epoch <= asked on the leader, no local record is on it: drop every local epoch.
    # With no local epoch at all the follower proves nothing: 0 (below the log start, it empties).
    earliest_start = local_entries[0][1] if local_entries else 0
    if leader_epoch_answer == UNDEFINED_EPOCH:
        return Truncate(earliest_start)
    # Both have E': they agree up to where E' ends on both (the local end, not the log end, in a
    # later round), and differ after it, each holding there an epoch the other lacks.
    for i, (epoch, _) in enumerate(local_entries):
        if epoch == leader_epoch_answer:
            own_end = local_entries[i + 1][1] if i + 1 < len(local_entries) else local_log_end
            return Truncate(min(leader_end_offset, own_end))
    # The follower lacks E': its epochs in (E', asked] are not on the leader. Ask about its largest
    # epoch below E'; with none, every local epoch differs from the leader's.
    older = [epoch for epoch, _ in local_entries if epoch < leader_epoch_answer]
    return AskAgain(older[-1]) if older else Truncate(earliest_start)
