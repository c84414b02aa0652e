"""A leader's fetch sessions (KIP-227), sans-IO: what each follower node fetches here.

A full request opens a session holding every partition it names; each later request of the
session (its epoch one more than the last) names only the partitions whose position changed,
and those it forgets. The leader answers a full request with every partition, an incremental
one with those that have records, an error, or a high watermark or log start the follower has
not been sent; such a mark alone answers a parked request 10 ms on
(`ReplicaManager.session_fetch`), so a follower learns a high watermark within that and a round
trip of its move. One session per follower node: a new full request replaces its old session. A
partition both forgotten and named starts afresh, as if new: the follower asks so for one whose
part it could not take, whose marks the leader noted as sent when it answered.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

from replication.errors import (
    FetchSessionIdNotFound,
    FetchSessionTooLarge,
    InvalidFetchSessionEpoch,
)
from replication.metadata import TopicPartition
from replication.session_wire import FetchPosition, SessionFetchRequest

MAX_SESSIONS = 1_000  # follower nodes a leader keeps sessions for; the oldest goes first


@dataclass
class SessionPartition:
    """A partition in a session: where the follower fetches from, what it was last sent."""

    position: FetchPosition
    sent_high_watermark: int = -1
    sent_log_start: int = -1

    def news(self, high_watermark: int, log_start: int) -> bool:
        return high_watermark != self.sent_high_watermark or log_start != self.sent_log_start


class FetchSession:
    """One follower node's partitions here, in the order the next answer visits them."""

    def __init__(self, session_id: int, replica: int) -> None:
        self.id = session_id
        self.replica = replica
        self.epoch = 0  # requests taken so far; the next must carry epoch + 1
        self.partitions: dict[TopicPartition, SessionPartition] = {}

    def update(self, request: SessionFetchRequest) -> None:
        """Forget, then add or move what the request names (so one in both starts afresh)."""
        for key in request.forgotten:
            self.partitions.pop(key, None)
        for key, position in request.partitions.items():
            known = self.partitions.get(key)
            if known is None:
                self.partitions[key] = SessionPartition(position)
            else:
                known.position = position

    def answered(self, key: TopicPartition, high_watermark: int, log_start: int) -> None:
        """Note the marks the follower was sent (the next answer carries only new ones)."""
        part = self.partitions.get(key)
        if part is not None:
            part.sent_high_watermark = high_watermark
            part.sent_log_start = log_start

    def to_back(self, key: TopicPartition) -> None:
        """A partition that brought records goes last, so that the next answer starts with
        those that did not (Kafka's fairness rule)."""
        part = self.partitions.pop(key, None)
        if part is not None:
            self.partitions[key] = part

    def __iter__(self) -> Iterator[tuple[TopicPartition, SessionPartition]]:
        return iter(list(self.partitions.items()))


class FetchSessions:
    """The sessions of every follower node fetching here."""

    def __init__(self, max_partitions: int) -> None:
        self.max_partitions = max_partitions
        self._by_replica: dict[int, FetchSession] = {}
        self._ids = itertools.count(1)

    def __len__(self) -> int:
        return len(self._by_replica)

    def take(self, request: SessionFetchRequest) -> FetchSession:
        """The session a request belongs to, brought up to date with it: a new one for a full
        request, else the follower's current one if the request is its next in turn."""
        if request.full:
            session = FetchSession(self._next_id(), request.replica)
            self._by_replica.pop(request.replica, None)
            while len(self._by_replica) >= MAX_SESSIONS:
                self._by_replica.pop(next(iter(self._by_replica)))
            self._by_replica[request.replica] = session
        else:
            found = self._by_replica.get(request.replica)
            if found is None or found.id != request.session_id:
                raise FetchSessionIdNotFound(
                    f"no fetch session {request.session_id} of node {request.replica} here"
                )
            if request.session_epoch != found.epoch + 1:
                raise InvalidFetchSessionEpoch(
                    f"fetch session {found.id} expects epoch {found.epoch + 1}, "
                    f"not {request.session_epoch}"
                )
            session = found
        session.update(request)
        if len(session.partitions) > self.max_partitions:
            self._by_replica.pop(request.replica, None)
            raise FetchSessionTooLarge(
                f"fetch session {session.id} would hold {len(session.partitions)} partitions; "
                f"at most {self.max_partitions}"
            )
        session.epoch = request.session_epoch if not request.full else 0
        return session

    def current(self, session: FetchSession) -> bool:
        """Whether `session` is still its follower's (no newer full request replaced it)."""
        return self._by_replica.get(session.replica) is session

    def _next_id(self) -> int:
        session_id = next(self._ids)
        if session_id > 2**31 - 1:
            self._ids = itertools.count(1)
            session_id = next(self._ids)
        return session_id
