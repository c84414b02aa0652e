"""Follower fetching: one fetch session per leader node, for every partition followed there.

Kafka's FetchRequest with KIP-227 sessions: a follower sends one long-poll per leader node for
all the partitions it follows there; after the first, full request only the partitions whose
position changed (and those it stopped following) are sent, and the leader answers as soon as
any has records, or 10 ms after a high watermark it has not sent appears (so this follower, and
the consumers of its rack it serves, learn what is committed within that and a round trip). A
session error (the leader restarted, a request lost) starts a new session with a full request.

Each partition keeps its own rules. On every role change the follower first truncates its log
where it diverges from the new leader's (KIP-279: it asks the leader where its latest epoch
ends, repeating with older epochs until they agree; never to its own high watermark, the
KIP-101 bug). Then it fetches from its log end offset, appends the batches as they are
(offsets and epochs kept) and takes the leader's high watermark and log start from each
answer. Its fetch offset is how the leader learns its progress. A follower behind the leader's
log start starts over there (behind a tiered leader's local start, after the segment S3 holds
before it, with the producer state shipped with that segment). A partition the leader refuses
(a stale epoch, a failure) leaves the session for a backoff; the others go on.

The leader notes the marks it sent as it answers, so a part this follower does not take (its
role changed while the answer was on its way) would leave its high watermark behind for good
once producing stops: such a partition is forgotten and named again in the next request, which
makes the leader send it whole. An error nothing here expects is logged and the session starts
over after a backoff; the task of a leader never ends while this node follows anything there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from engine.errors import EngineError, KafkaStorageError, OffsetMismatch, OffsetOutOfRange
from replication.errors import (
    FencedLeaderEpoch,
    FetchSessionIdNotFound,
    FetchSessionTooLarge,
    InvalidFetchSessionEpoch,
    ReplicationError,
)
from replication.metadata import NO_LEADER, MetadataStore, PartitionState, TopicPartition
from replication.node_contract import error_of
from replication.partition import Partition
from replication.replica_client import ReplicaClient
from replication.replica_state import Truncate, truncation_request, truncation_step
from replication.session_wire import FetchPosition, SessionFetchAnswer, SessionFetchRequest
from replication.tiering import TieringService

log = logging.getLogger(__name__)

TRUNCATIONS_AT_ONCE = 16  # epoch queries in flight to one leader while partitions join
# A part this large is written in a thread (the file write and CRC checks release the GIL):
# a follower catching up at 100+ MB/s otherwise holds the loop a millisecond per MiB. So is
# any part whose append would roll a segment or wait for another thread holding the log.
THREAD_APPEND_BYTES = 256 * 1024
# The leader lost the session or took a request out of turn: start a new one at once.
_SESSION_ERRORS = (FetchSessionIdNotFound, InvalidFetchSessionEpoch, FetchSessionTooLarge)


@dataclass(frozen=True)
class FetcherSettings:
    max_bytes: int = 1024 * 1024  # replica.fetch.max.bytes, per partition
    response_max_bytes: int = 10 * 1024 * 1024  # replica.fetch.response.max.bytes, in all
    # How long a follower's fetch parks at an idle leader. The leader answers at once when
    # records arrive, 10 ms after a high watermark moves, and a caught-up follower never
    # counts as lagging, so a long wait costs nothing but saves idle round trips.
    wait_ms: int = 5_000
    backoff_ms: int = 100  # replica.fetch.backoff.ms; doubles up to max_backoff_ms
    max_backoff_ms: int = 1_000


@dataclass
class _Followed:
    """A partition followed in one leader epoch: truncated yet, and when it may fetch again."""

    partition: Partition
    state: PartitionState
    truncated: bool = False
    retry_at: float = 0.0
    backoff_ms: int = 0

    def current(self) -> bool:
        """Whether the partition still follows this leader in this epoch."""
        p = self.partition
        return (
            not p.is_leader
            and p.leader == self.state.leader
            and p.leader_epoch == self.state.leader_epoch
        )

    def position(self, max_bytes: int) -> FetchPosition:
        return FetchPosition(self.state.leader_epoch, self.partition.log_end_offset, max_bytes)


@dataclass
class _Link:
    """One leader node: the partitions followed there and this follower's session with it."""

    leader: int
    followed: dict[TopicPartition, _Followed] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    session_id: int = 0
    epoch: int = 0
    sent: dict[TopicPartition, FetchPosition] = field(default_factory=dict)  # the leader's view
    # Partitions whose last part was not taken: the leader believes their marks were.
    resend: set[TopicPartition] = field(default_factory=set)
    backoff_ms: int = 0  # the pause after the last failed request (0 after a success)
    task: asyncio.Task[None] | None = None

    def reset(self) -> None:
        """Start over with a full request (a session error, or a request given up)."""
        self.session_id = self.epoch = 0
        self.sent.clear()
        self.resend.clear()

    def request(
        self, replica: int, ready: dict[TopicPartition, FetchPosition], wait_ms: int, total: int
    ) -> SessionFetchRequest:
        if self.session_id == 0:
            return SessionFetchRequest(replica, 0, 0, wait_ms, 1, total, dict(ready))
        # A partition to resend is forgotten and named again: the leader starts it afresh.
        changed = {k: p for k, p in ready.items() if self.sent.get(k) != p or k in self.resend}
        forgotten = tuple(k for k in self.sent if k not in ready or k in self.resend)
        return SessionFetchRequest(
            replica, self.session_id, self.epoch + 1, wait_ms, 1, total, changed, forgotten
        )

    def took(self, request: SessionFetchRequest, session_id: int) -> None:
        """The leader answered `request`: its session now holds what the request said."""
        if request.full:
            self.session_id, self.epoch = session_id, 0
            self.sent = dict(request.partitions)
            self.resend.clear()
            return
        self.epoch = request.session_epoch
        for key in request.forgotten:
            self.sent.pop(key, None)
            self.resend.discard(key)
        self.sent.update(request.partitions)


def _lowest_priority() -> None:
    """Run the calling thread at nice 19 (Linux sets it per thread): the kernel then gives the
    CPU to the node's event loop and to the other processes first."""
    with contextlib.suppress(OSError, AttributeError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


def _retrieved(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


class ReplicaFetchers:
    """Keeps one session per leader node fetching every partition this node follows there."""

    def __init__(
        self,
        store: MetadataStore,
        client: ReplicaClient,
        node_id: int,
        settings: FetcherSettings | None = None,
        tiering: TieringService | None = None,
    ) -> None:
        """`tiering`: the node's S3, where a follower that starts over at a tiered leader's
        local log start finds the producer state there."""
        self.store = store
        self.client = client
        self.node_id = node_id
        self.settings = settings or FetcherSettings()
        self.tiering = tiering
        self._links: dict[int, _Link] = {}
        self._leader_of: dict[TopicPartition, int] = {}  # the link each followed partition is in
        # A move's copy is written at the lowest CPU priority: on shared cores it yields to
        # the produce path (docs/PERFORMANCE.md, "Moving partitions").
        self._copier = ThreadPoolExecutor(1, "sluice-copy", initializer=_lowest_priority)

    @property
    def following(self) -> dict[TopicPartition, int]:
        """Each partition followed, and its leader."""
        return dict(self._leader_of)

    async def role_changed(self, partition: Partition) -> None:
        """Follow the partition's new leader, or stop following it. An offline log (a storage
        failure) follows nobody: it would take nothing until the node restarts."""
        key = (partition.topic, partition.partition)
        self._forget(key)
        state = partition.state
        if (
            partition.is_leader
            or partition.log.offline
            or state is None
            or state.leader in (NO_LEADER, self.node_id)
        ):
            return
        link = self._links.get(state.leader)
        if link is None:
            link = self._links[state.leader] = _Link(state.leader)
        if link.task is None or link.task.done():
            link.task = asyncio.create_task(self._run(link))
        link.followed[key] = _Followed(partition, state)
        self._leader_of[key] = state.leader
        link.changed.set()  # a fetch parked without this partition gives way to one with it

    def _forget(self, key: TopicPartition) -> None:
        """Stop following (the next request of its session tells the leader)."""
        leader = self._leader_of.pop(key, None)
        if leader is not None:
            self._links[leader].followed.pop(key, None)

    async def close(self) -> None:
        tasks = [link.task for link in self._links.values() if link.task is not None]
        self._links.clear()
        self._leader_of.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._copier.shutdown(wait=False)

    # -- one leader ----------------------------------------------------------------------------

    async def _run(self, link: _Link) -> None:
        """Fetch from one leader for as long as this node lives. A failure nothing below
        expects is logged and the session starts over after a backoff: this task must not end
        silently, since only a role change of a partition led there would start another."""
        while True:
            try:
                await self._round(link)
            except Exception:
                log.exception("fetching from node %d failed; starting a new session", link.leader)
                link.reset()
                await self._pause(link)

    async def _round(self, link: _Link) -> None:
        """One request to the leader and its answer taken, or one wait while nothing is ready
        (a backoff, no address for the leader, nothing followed there)."""
        settings = self.settings
        link.changed.clear()
        for key in [k for k, f in link.followed.items() if not f.current()]:
            self._forget(key)
        url = self._leader_url(link.leader)
        if url is not None:
            await self._truncate_joined(link, url)
        now = time.monotonic()
        ready = {
            key: f.position(settings.max_bytes)
            for key, f in link.followed.items()
            if f.truncated and f.retry_at <= now
        }
        later = [f.retry_at for f in link.followed.values() if f.retry_at > now]
        wait_s = min([settings.wait_ms / 1000, *(t - now for t in later)])
        if url is None or not ready:
            # Only a link that follows nothing waits for a role change alone; otherwise the
            # next pass looks again, whatever it was waiting for.
            idle_s = settings.max_backoff_ms / 1000 if url is None else wait_s
            timeout = idle_s if link.followed or url is None else None
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await link.changed.wait()
            return
        request = link.request(
            self.node_id, ready, max(int(wait_s * 1000), 0), settings.response_max_bytes
        )
        try:
            answer = await self._fetch_unless_changed(link, url, request)
        except ReplicationError as exc:
            log.debug("fetch from node %d failed: %s", link.leader, exc)
            link.reset()
            if not isinstance(exc, _SESSION_ERRORS):
                await self._pause(link)
            return
        if answer is None:
            link.reset()  # given up for a partition that joined: the leader's view is unknown
            return
        link.backoff_ms = 0
        link.took(request, answer.session_id)
        await self._take(link, answer)

    async def _pause(self, link: _Link) -> None:
        """The pause after a failed request: replica.fetch.backoff.ms, doubling up to
        max_backoff_ms while the failures go on."""
        settings = self.settings
        link.backoff_ms = min(
            max(link.backoff_ms * 2, settings.backoff_ms), settings.max_backoff_ms
        )
        await asyncio.sleep(link.backoff_ms / 1000)

    async def _fetch_unless_changed(
        self, link: _Link, url: str, request: SessionFetchRequest
    ) -> SessionFetchAnswer | None:
        """The leader's answer, or None if the partitions followed there changed first."""
        fetch = asyncio.ensure_future(self.client.session_fetch(url, request))
        changed = asyncio.ensure_future(link.changed.wait())
        try:
            await asyncio.wait((fetch, changed), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            # Its failure, if it ends in one rather than cancelled (a connect that failed as
            # the cancellation came: the leader exiting too), is no news.
            fetch.add_done_callback(_retrieved)
            fetch.cancel()
            raise
        finally:
            changed.cancel()
        if fetch.done():
            return fetch.result()
        # Waited for, not awaited: its cancellation (or failure) must not pass for this task's.
        fetch.add_done_callback(_retrieved)
        fetch.cancel()
        await asyncio.wait((fetch,))
        return None

    async def _take(self, link: _Link, answer: SessionFetchAnswer) -> None:
        """Apply each partition's part: append its batches, take its marks, or handle its error.
        A part dropped is resent: the leader noted its marks as sent when it answered. A large
        part (a follower catching up, a replica a reassignment adds) is written off the event
        loop, which meanwhile serves the node's other work (its other fetch sessions, the
        produce requests it leads); a move's copy in a thread of the lowest CPU priority."""
        for key, part in answer.partitions.items():
            followed = link.followed.get(key)
            if followed is None or not followed.current() or not followed.truncated:
                link.resend.add(key)  # the role changed while the fetch was out: drop it
                continue
            partition = followed.partition
            try:
                if part.error_status:
                    raise error_of(part.error_status, part.error_body)
                sent = link.sent.get(key)
                if part.records and (sent is None or sent.fetch_offset != partition.log_end_offset):
                    link.resend.add(key)  # read from a position this log has left
                    continue
                marks = (part.high_watermark, part.log_start_offset)
                size = len(part.records)
                if size >= THREAD_APPEND_BYTES or (size and partition.log.needs_room(size)):
                    # A move's copy may wait for the CPU; the ISR's catch-up may not.
                    copying = partition.copying_to(self.node_id)
                    await asyncio.get_running_loop().run_in_executor(
                        self._copier if copying else None,
                        partition.append_from_leader,
                        part.records,
                        *marks,
                    )
                    if not followed.current():
                        link.resend.add(key)  # the role changed while it was written
                        continue
                else:
                    partition.append_from_leader(part.records, *marks)
                followed.backoff_ms = 0
            except OffsetOutOfRange as exc:
                if partition.log_end_offset < exc.log_start_offset:
                    log.info("%s-%d: below the leader's log start %d", *key, exc.log_start_offset)
                    await self._start_over(key, followed, exc.log_start_offset)
                else:
                    followed.truncated = False
            except OffsetMismatch:
                followed.truncated = False
            except KafkaStorageError as exc:
                self._stop(key, followed, exc)
            except FencedLeaderEpoch:
                # This follower is behind: the view will bring the new state and a new role. A
                # leader behind its view (NotLeader, UnknownLeaderEpoch) is asked again after
                # the backoff, as after any failure.
                followed.retry_at = time.monotonic() + self.settings.max_backoff_ms / 1000
            except EngineError as exc:
                self._back_off(key, followed, exc)

    async def _start_over(
        self, key: TopicPartition, followed: _Followed, leader_start: int
    ) -> None:
        """Empty the log and start it at the leader's log start. A tiered partition's leader
        answers with its local log start (S3 holds what is below): as Kafka's
        buildRemoteLogAuxState, the follower starts at the end of the segment S3 holds before
        it, with the producer state shipped with that segment, so the transactions open across
        it are known here (the last stable offset, the aborted entries their markers make).
        S3 holding none (segments uploaded without one): at the leader's local start without
        it, warned. S3 failing: the partition backs off and asks again."""
        partition = followed.partition
        start, producers = leader_start, None
        if partition.config.remote_storage_enable:
            spec = self.store.view.topics.get(partition.topic)
            found = None
            if self.tiering is not None and spec is not None:
                try:
                    found = await self.tiering.producer_state_before(
                        partition, spec.topic_id, leader_start
                    )
                except EngineError as exc:
                    self._back_off(key, followed, exc)
                    return
                if not followed.current():
                    return  # the role changed while S3 was read
            if found is None:
                log.warning(
                    "%s-%d starts over at its leader's local log start %d without the producer "
                    "state there (remote storage has none for it): transactions open across "
                    "it are unknown here",
                    *key,
                    leader_start,
                )
            else:
                start, producers = found
        partition.restart_at(start, producers)

    def _back_off(self, key: TopicPartition, followed: _Followed, exc: Exception) -> None:
        settings = self.settings
        followed.backoff_ms = min(
            max(followed.backoff_ms * 2, settings.backoff_ms), settings.max_backoff_ms
        )
        followed.retry_at = time.monotonic() + followed.backoff_ms / 1000
        log.debug("%s-%d: fetch from node %d failed: %s", *key, followed.state.leader, exc)

    def _stop(self, key: TopicPartition, followed: _Followed, exc: Exception) -> None:
        """A log a storage failure took offline stops here (it takes nothing more until the
        node restarts)."""
        log.error("%s-%d stops following node %d: %s", *key, followed.state.leader, exc)
        self._forget(key)

    def _leader_url(self, leader: int) -> str | None:
        node = self.store.view.nodes.get(leader)
        return None if node is None else node.url

    # -- truncation (KIP-279), per partition ---------------------------------------------------

    async def _truncate_joined(self, link: _Link, url: str) -> None:
        """Truncate every partition that joined (or must truncate again) before it fetches,
        several at once."""
        now = time.monotonic()
        due = [
            (key, f) for key, f in link.followed.items() if not f.truncated and f.retry_at <= now
        ]
        if not due:
            return
        gate = asyncio.Semaphore(TRUNCATIONS_AT_ONCE)

        async def one(key: TopicPartition, followed: _Followed) -> None:
            async with gate:
                if link.followed.get(key) is not followed or not followed.current():
                    return
                try:
                    await self._truncate(followed, url)
                except KafkaStorageError as exc:
                    self._stop(key, followed, exc)
                except FencedLeaderEpoch:
                    followed.retry_at = time.monotonic() + self.settings.max_backoff_ms / 1000
                except EngineError as exc:
                    self._back_off(key, followed, exc)
                else:
                    followed.truncated = True

        await asyncio.gather(*(one(key, f) for key, f in due))

    async def _truncate(self, followed: _Followed, url: str) -> None:
        """KIP-279: cut the local log where it stops agreeing with the leader's."""
        partition, state = followed.partition, followed.state
        entries = partition.epoch_entries()
        asked = truncation_request(entries)
        while True:
            epoch, end = await self.client.epoch_end(
                url,
                partition.topic,
                partition.partition,
                leader_epoch=state.leader_epoch,
                epoch=asked,
            )
            if not followed.current():
                return
            step = truncation_step(entries, partition.log_end_offset, asked, epoch, end)
            if isinstance(step, Truncate):
                if step.offset < partition.log_end_offset:
                    log.info(
                        "%s-%d: truncating to %d (leader %d, epoch %d)",
                        partition.topic,
                        partition.partition,
                        step.offset,
                        state.leader,
                        state.leader_epoch,
                    )
                partition.truncate_to(step.offset)
                return
            asked = step.epoch
