"""Partition: one partition's log on this node and its role in the current leader epoch.

As leader it appends producer batches stamped with its epoch, tracks its followers' progress
(a sans-IO `LeaderState`), moves the high watermark and serves reads below it. As follower it
appends the leader's batches as they are and takes the leader's high watermark. Everything
here is synchronous and runs on the event loop; waiting (acks, long-polls, ISR writes) is the
replica manager's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from itertools import accumulate
from typing import NamedTuple

from engine.batch import IDEMPOTENT_MASK, TRANSACTIONAL_MASK
from engine.config import TopicConfig
from engine.errors import OffsetOutOfRange
from engine.log import (
    AppendInfo,
    Headers,
    Landings,
    PartitionLog,
    ReadResult,
    decided,
    join_checked,
)
from engine.producer_state import EndMarker, Isolation, ProducerIdentity, ProducerState
from replication.acks import Acks
from replication.errors import (
    FencedLeaderEpoch,
    IdempotencyKeyReused,
    NotAReplica,
    NotEnoughReplicas,
    NotLeader,
    UnknownLeaderEpoch,
)
from replication.idempotency import IdempotencyIndex, Marker, first_marker
from replication.metadata import NO_LEADER, LogEnd, PartitionState, with_eligible_leaders
from replication.replica_state import LeaderState

# A produce request as a leader appends it: its batches, its acks, and the producer whose
# transaction it is in (None: none).
Request = tuple[bytes | bytearray, Acks, ProducerIdentity | None]


class ReplicationHealth(NamedTuple):
    """A leader's view of its followers, for the metrics."""

    under_replicated: bool
    max_lag_records: int
    max_lag_ms: int


def _now_ms() -> int:
    return int(time.time() * 1000)


class Partition:
    """A partition replica on this node: leader, follower, or not yet assigned a role."""

    def __init__(
        self,
        log: PartitionLog,
        node_id: int,
        idempotency: IdempotencyIndex,
        clock_ms: Callable[[], int] = _now_ms,
    ) -> None:
        self.log = log
        self.node_id = node_id
        self.idempotency = idempotency
        self.clock_ms = clock_ms
        self.state: PartitionState | None = None
        self.leader_state: LeaderState | None = None

    @property
    def topic(self) -> str:
        return self.log.topic

    @property
    def partition(self) -> int:
        return self.log.partition

    @property
    def config(self) -> TopicConfig:
        return self.log.config

    @property
    def leader_epoch(self) -> int:
        return -1 if self.state is None else self.state.leader_epoch

    @property
    def leader(self) -> int:
        return NO_LEADER if self.state is None else self.state.leader

    @property
    def is_leader(self) -> bool:
        return self.leader_state is not None

    @property
    def isr(self) -> tuple[int, ...]:
        if self.leader_state is not None:
            return self.leader_state.isr
        return () if self.state is None else self.state.isr

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def local_log_start_offset(self) -> int:
        """Below it (and from the log start) the records are on S3 only."""
        return self.log.local_log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def size_bytes(self) -> int:
        return self.log.size_bytes

    def replication_health(self) -> ReplicationHealth | None:
        """As leader: whether the ISR lacks replicas, and the largest follower lag."""
        leading = self.leader_state
        if leading is None or self.state is None:
            return None
        records, ms = leading.largest_lag(self.log.log_end_offset, self.clock_ms())
        return ReplicationHealth(len(leading.isr) < len(self.state.replicas), records, ms)

    # -- roles ---------------------------------------------------------------------------------

    def make_leader(self, state: PartitionState) -> None:
        """Lead in `state.leader_epoch`: the epoch starts at the log end offset (KIP-101), and
        followers are tracked from now, the ISR's as caught up."""
        log = self.log
        log.assign_epoch(state.leader_epoch, log.log_end_offset)
        self.state = state
        self.leader_state = LeaderState(
            self.node_id,
            state.leader_epoch,
            state.replicas,
            state.isr,
            log.log_end_offset,
            log.high_watermark,
            self.clock_ms(),
        )
        self.update_high_watermark()
        log.publish_leadership(state.leader_epoch)

    def make_follower(self, state: PartitionState) -> None:
        """Follow `state.leader` (or nobody, while the partition is offline)."""
        self.log.publish_leadership(-1)
        self.state = state
        self.leader_state = None

    def update_state(self, state: PartitionState) -> None:
        """A newer version of the same epoch's state: an ISR change stored by this leader, or a
        move's start (replicas added, followed from now on; members restarted since dropped
        from the ISR, which they rejoin through their fetches)."""
        self.state = state
        leading = self.leader_state
        if leading is None:
            return
        if leading.isr != state.isr:
            leading.isr_stored(state.isr)
            self.update_high_watermark()
        if leading.replicas != state.replicas:
            leading.set_replicas(state.replicas)

    # -- leader --------------------------------------------------------------------------------

    def _leading(self) -> LeaderState:
        if self.leader_state is None:
            raise NotLeader(
                f"node {self.node_id} does not lead {self.topic}-{self.partition}",
                None if self.leader == NO_LEADER else self.leader,
            )
        return self.leader_state

    def append(self, data: bytes | bytearray, acks: Acks) -> AppendInfo:
        """Append producer batches in this epoch. acks=all with the ISR below
        min.insync.replicas appends nothing (Kafka's NOT_ENOUGH_REPLICAS). A marked request
        this log already holds appends nothing and answers where its records are. An offline
        log (a storage failure) refuses every request, repeats included."""
        leading = self._leading()
        self.log.check_online("nothing was appended")
        marker = first_marker(data)
        if marker is not None:
            repeat = self._repeat(marker)
            if repeat is not None:
                return repeat
        if acks is Acks.ALL:
            self.check_enough_replicas()
        info = self.log.append_as_leader(data, leading.leader_epoch)
        if marker is not None:
            self.idempotency.note(marker, info.first_offset)
        self.update_high_watermark()
        return info

    def write_marker(
        self, producer: ProducerIdentity, commit: bool, coordinator_epoch: int
    ) -> AppendInfo | None:
        """End `producer`'s transaction here with a COMMIT or ABORT marker (None: it was)."""
        leading = self._leading()
        self.log.check_online("no marker was written")
        info = self.log.append_marker_as_leader(
            producer.producer_id, producer.epoch, commit, coordinator_epoch, leading.leader_epoch
        )
        self.update_high_watermark()
        return info

    @property
    def last_stable_offset(self) -> int:
        return self.log.last_stable_offset

    def append_together(
        self, requests: Sequence[Request], markers: Sequence[EndMarker] = ()
    ) -> Landings:
        """Append several produce requests (data, acks, and the producer whose transaction it
        is in, or None) in one write, each judged alone: a repeat answers with its first
        attempt's offsets, a refused one gets its own error (a transactional one also its
        producer's: fenced, or its transaction ended here), the rest get consecutive offsets
        in request order. `markers` end transactions here in the same write, after the
        requests; one whose producer a request names (or another marker) goes in a write of
        its own after it."""
        leading = self._leading()
        self.log.check_online("nothing was appended")
        joined, alone = _joinable(requests, markers)
        if len(requests) > 1:
            at_once = self._append_at_once(
                requests, leading.leader_epoch, [markers[k] for k in joined]
            )
            if at_once is not None:
                return self._marked_alone(at_once, joined, alone, markers)
        outcomes: list[AppendInfo | Exception | None] = [None] * len(requests)
        checked: list[tuple[int, bytearray, Headers, ProducerIdentity | None]] = []
        idempotent: dict[int, Marker] = {}
        later: list[int] = []  # a second request with a key already in this write: after it
        for i, (data, acks, producer) in enumerate(requests):
            marker = None
            try:
                if producer is None:  # in a transaction, the producer epoch fences retries
                    marker = first_marker(data)
                if marker is not None:
                    if any(m.key == marker.key for m in idempotent.values()):
                        later.append(i)
                        continue
                    repeat = self._repeat(marker)
                    if repeat is not None:
                        outcomes[i] = repeat
                        continue
                if acks is Acks.ALL:
                    self.check_enough_replicas()
                if producer is not None:
                    self.log.check_transactions_allowed()
                buf = data if isinstance(data, bytearray) else bytearray(data)
                in_transaction = producer is not None
                headers = self.log.check_as_leader(buf, in_transaction=in_transaction)
                checked.append((i, buf, headers, producer))
            except Exception as exc:  # this request's own refusal; the others go on
                outcomes[i] = exc
                continue
            if marker is not None:
                idempotent[i] = marker
        marked: list[AppendInfo | Exception | None] = []
        if checked or joined:
            buf, headers = join_checked([(buf, headers) for _, buf, headers, _ in checked])
            if joined and len(checked) == 1:
                buf = bytearray(buf)  # the request's own bytes: the markers extend the write's
            landed, marked = self.log.append_checked_in_transactions(
                buf,
                headers,
                [(len(headers), producer) for _, _, headers, producer in checked],
                leading.leader_epoch,
                [markers[k] for k in joined],
            )
            for (i, _, _, _), landing in zip(checked, landed, strict=True):
                marker = idempotent.get(i)
                if marker is not None and isinstance(landing, AppendInfo):
                    self.idempotency.note(marker, landing.first_offset)
                outcomes[i] = landing
            self.update_high_watermark()
        for i in later:
            data, acks, _ = requests[i]
            try:
                outcomes[i] = self.append(data, acks)
            except Exception as exc:
                outcomes[i] = exc
        return self._marked_alone(Landings(decided(outcomes), marked), joined, alone, markers)

    def _append_at_once(
        self, requests: Sequence[Request], leader_epoch: int, markers: Sequence[EndMarker]
    ) -> Landings | None:
        """The common write, checked in one pass over the requests' bytes joined: each request
        is whole valid batches, none is marked, none is in a transaction of a compacted topic,
        the ISR is large enough for acks=all. None when any of that fails: `append_together`
        then judges each request alone, as it would anyway. Requests inside transactions are
        each checked against their producer's state (`append_checked_in_transactions`), and
        `markers` go at the end of the write."""
        buf = bytearray().join([data for data, _, _ in requests])
        producers = [producer for _, _, producer in requests]
        transactional = producers.count(None) < len(producers)
        try:
            if any(acks is Acks.ALL for _, acks, _ in requests):
                self.check_enough_replicas()
            if transactional:
                self.log.check_transactions_allowed()
            headers = self.log.check_as_leader(buf, in_transaction=transactional)
        except Exception:
            return None
        if any(header.attributes & IDEMPOTENT_MASK for _, header in headers):
            return None
        lengths = [len(data) for data, _, _ in requests]
        starts = list(accumulate(lengths[:-1], initial=0))
        positions = [pos for pos, _ in headers]
        if positions == starts:  # one batch a request, the common case
            batches = [1] * len(requests)
        else:  # each request must begin a batch, and hold one at least
            first = {pos: i for i, pos in enumerate(positions)}
            firsts = [first.get(start, -1) for start in starts]
            if 0 in lengths or -1 in firsts:
                return None
            ends = [*firsts[1:], len(headers)]
            batches = [end - begin for begin, end in zip(firsts, ends, strict=True)]
        if (
            transactional
            and None in producers
            and not self._transactional_only_inside(requests, headers, batches)
        ):
            return None
        landings: Landings
        if transactional or markers:
            landings = self.log.append_checked_in_transactions(
                buf, headers, list(zip(batches, producers, strict=True)), leader_epoch, markers
            )
        else:
            try:
                infos = self.log.append_batches_as_leader(buf, headers, leader_epoch, batches)
            except Exception as exc:  # the write failed: nothing of it was appended
                return Landings([exc] * len(requests), [])
            landings = Landings(list(infos), [])
        self.update_high_watermark()
        return landings

    def _marked_alone(
        self,
        landings: Landings,
        joined: list[int],
        alone: list[int],
        markers: Sequence[EndMarker],
    ) -> Landings:
        """`landings` with every marker's outcome in the order given: those of the write, then
        those written each in a write of its own after it."""
        if not markers:
            return landings
        marked: list[AppendInfo | Exception | None] = [None] * len(markers)
        for k, outcome in zip(joined, landings.markers, strict=True):
            marked[k] = outcome
        for k in alone:
            producer_id, epoch, commit, coordinator_epoch = markers[k]
            try:
                marked[k] = self.write_marker(
                    ProducerIdentity(producer_id, epoch), commit, coordinator_epoch
                )
            except Exception as exc:
                marked[k] = exc
        return Landings(landings.requests, marked)

    @staticmethod
    def _transactional_only_inside(
        requests: Sequence[Request], headers: Headers, batches: list[int]
    ) -> bool:
        """Whether every transactional batch of a write is in a transaction's request (the
        checks let them through for those); one outside is refused when judged alone."""
        at = 0
        for count, (_, _, producer) in zip(batches, requests, strict=True):
            if producer is None and any(
                header.attributes & TRANSACTIONAL_MASK for _, header in headers[at : at + count]
            ):
                return False
            at += count
        return True

    def _repeat(self, marker: Marker) -> AppendInfo | None:
        """Where a request this log already holds put its records; None for a new request."""
        found = self.idempotency.lookup(marker.key)
        if found is None:
            return None
        if found.digest != marker.digest:
            raise IdempotencyKeyReused("this Idempotency-Key was used with a different request")
        last = found.base_offset + found.count - 1
        return AppendInfo(found.base_offset, last, found.count, -1, False)

    def check_enough_replicas(self) -> None:
        """acks=all needs min.insync.replicas in the ISR (Kafka's NOT_ENOUGH_REPLICAS)."""
        leading = self._leading()
        required = self.config.min_insync_replicas
        if not leading.min_isr_satisfied(required):
            raise NotEnoughReplicas(
                f"{self.topic}-{self.partition} has {len(leading.isr)} in-sync replicas "
                f"{list(leading.isr)}; min.insync.replicas is {required}; nothing was appended"
            )

    def copying_to(self, replica: int) -> bool:
        """Whether `replica` is one a reassignment adds and not yet in sync: what it fetches
        is reassignment traffic (throttled by its leader, written at low priority by itself),
        not the ISR's catch-up."""
        state = self.state
        return state is not None and replica in state.adding and replica not in state.isr

    def update_high_watermark(self) -> bool:
        """Move the high watermark to the minimum log end over the ISR; True if it moved."""
        if self.leader_state is None:
            return False
        return self.log.advance_high_watermark(
            self.leader_state.high_watermark(self.log.log_end_offset)
        )

    def replica_fetch(
        self,
        replica: int,
        fetch_offset: int,
        leader_epoch: int,
        max_bytes: int,
        *,
        min_one: bool = True,
    ) -> tuple[ReadResult, tuple[int, ...] | None]:
        """A follower's fetch from its log end: note its progress, move the high watermark,
        and read up to the log end (nothing to read for a follower caught up, the common case
        of a session's partitions). Also returns an ISR expansion to propose, if any. An
        offline log answers KafkaStorageError before noting any progress: its high watermark
        no longer moves."""
        leading = self._leading()
        self.check_epoch(leader_epoch)
        self.log.check_online()
        if replica not in leading.followers:
            raise NotAReplica(
                f"node {replica} is not a follower of {self.topic}-{self.partition} "
                f"(replicas {list(leading.replicas)})"
            )
        log = self.log
        end = log.log_end_offset
        if fetch_offset > end:
            raise OffsetOutOfRange(fetch_offset, log.log_start_offset, end)
        if fetch_offset < log.local_log_start_offset:
            # Tiered away: the follower starts over at the local start (S3 has the rest).
            raise OffsetOutOfRange(fetch_offset, log.local_log_start_offset, end)
        leading.on_follower_fetch(replica, fetch_offset, end, self.clock_ms())
        self.update_high_watermark()
        expand = leading.expand_proposal(replica, end)
        if fetch_offset == end or (max_bytes <= 0 and not min_one):
            empty = ReadResult(memoryview(b""), log.high_watermark, log.log_start_offset, end)
            return empty, expand
        result = log.read(
            fetch_offset, max_bytes, upper_offset=end, min_one=min_one, isolation=Isolation.RAW
        )
        return result, expand

    def check_epoch(self, leader_epoch: int) -> None:
        """Fence a request from an older epoch; ask one from a newer epoch to retry."""
        if leader_epoch < self.leader_epoch:
            raise FencedLeaderEpoch(
                f"{self.topic}-{self.partition}: epoch {leader_epoch} is older than "
                f"the current {self.leader_epoch}"
            )
        if leader_epoch > self.leader_epoch:
            raise UnknownLeaderEpoch(
                f"{self.topic}-{self.partition}: epoch {leader_epoch} is newer than "
                f"{self.leader_epoch}, which this node knows"
            )

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """KIP-279: (the largest epoch <= `epoch` this leader has, the offset where it ends)."""
        self._leading()
        return self.log.epoch_cache.end_offset_for(epoch, self.log.log_end_offset)

    def shrink_proposal(self, lag_max_ms: int) -> tuple[int, ...] | None:
        """The ISR without followers that have not caught up for `lag_max_ms`, if any lag."""
        if self.leader_state is None:
            return None
        return self.leader_state.shrink_proposal(
            self.clock_ms(), self.log.log_end_offset, lag_max_ms
        )

    def stored_isr(self, state: PartitionState) -> None:
        """The store took this leader's ISR change: adopt it and recompute the watermark."""
        self.state = state
        if self.leader_state is not None:
            self.leader_state.isr_change_committed(state.isr)
            self.update_high_watermark()

    def isr_state(self, isr: tuple[int, ...]) -> PartitionState:
        """The current state with `isr`, and the eligible leader replicas that follow, to
        write to the store (compare-and-set on version)."""
        assert self.state is not None
        return with_eligible_leaders(
            self.state, replace(self.state, isr=isr), self.config.min_insync_replicas
        )

    # -- follower ------------------------------------------------------------------------------

    def append_from_leader(
        self, data: bytes | memoryview, leader_high_watermark: int, leader_log_start: int
    ) -> None:
        """Append the leader's batches as they are; take its high watermark and log start."""
        log = self.log
        if data:
            log.append_as_follower(data)
            self.idempotency.note_batches(data)
        log.advance_high_watermark(min(leader_high_watermark, log.log_end_offset))
        start = min(leader_log_start, log.high_watermark)
        if start > log.log_start_offset:
            log.delete_records(start)
        elif start < log.log_start_offset and log.config.remote_storage_enable:
            log.adopt_remote_log_start(start)

    def epoch_entries(self) -> list[tuple[int, int]]:
        """This replica's (leader epoch, start offset) entries, oldest first."""
        return [(e.epoch, e.start_offset) for e in self.log.epoch_cache.entries]

    def log_end(self, incarnation: int) -> LogEnd:
        """This replica's last leader epoch and log end offset, as this process (of
        `incarnation`) reports them while the partition recovers (KIP-966)."""
        return LogEnd(self.log.epoch_cache.latest_epoch, self.log.log_end_offset, incarnation)

    def truncate_to(self, offset: int) -> None:
        """Drop the local records at and after `offset` (a follower's divergent tail)."""
        self.log.truncate_to(offset)
        self.idempotency.truncate(offset)

    def restart_at(self, offset: int, producers: ProducerState | None = None) -> None:
        """Empty the log and start it at `offset` (the leader's log start is past this end),
        with the producer state there if known (`PartitionLog.truncate_fully_and_start_at`)."""
        self.log.truncate_fully_and_start_at(offset, producers)
        self.idempotency.clear()

    # -- reads ---------------------------------------------------------------------------------

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        min_one: bool = True,
        max_records: int | None = None,
        isolation: Isolation = Isolation.READ_UNCOMMITTED,
    ) -> ReadResult:
        """Whole batches from `offset`, never at or past the high watermark (leader only);
        read_committed stops at the last stable offset."""
        self._leading()
        return self.log.read(
            offset, max_bytes, min_one=min_one, max_records=max_records, isolation=isolation
        )

    def read_in_sync(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_records: int | None = None,
        isolation: Isolation = Isolation.READ_UNCOMMITTED,
    ) -> ReadResult:
        """`read` on any replica in the ISR, below its own high watermark (what the leader
        sent it: committed): a follower serving a consumer of its rack (KIP-392)."""
        state = self.state
        if state is None or self.node_id not in state.isr:
            raise NotLeader(
                f"node {self.node_id} is not in sync for {self.topic}-{self.partition}",
                None if self.leader == NO_LEADER else self.leader,
            )
        return self.log.read(offset, max_bytes, max_records=max_records, isolation=isolation)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        self._leading()
        return self.log.offset_for_timestamp(timestamp)

    def rebuild_idempotency(self) -> None:
        """Index the markers of the segments written within the window (by file mtime: the
        broker's clock, not record timestamps, which producers choose)."""
        since = time.time() - self.idempotency.window_ms / 1000
        self.idempotency.rebuild(
            batch
            for segment in self.log.segments
            if segment.path.stat().st_mtime >= since
            for batch in segment.batches()
        )

    def delete_records(self, before_offset: int) -> int:
        self._leading()
        return self.log.delete_records(before_offset)


def _joinable(
    requests: Sequence[Request], markers: Sequence[EndMarker]
) -> tuple[list[int], list[int]]:
    """The markers (indexes) that may end a write of `requests`, and those to write alone
    after it: one whose producer a request or an earlier marker names, so that every
    producer's state is checked before the write as it is when its batch is written."""
    if not markers:  # every produce write but a commit's: no set to build
        return [], []
    named = {producer.producer_id for _, _, producer in requests if producer is not None}
    joined: list[int] = []
    alone: list[int] = []
    for k, marker in enumerate(markers):
        if marker.producer_id in named:
            alone.append(k)
        else:
            named.add(marker.producer_id)
            joined.append(k)
    return joined, alone
