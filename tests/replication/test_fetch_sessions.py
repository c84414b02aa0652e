"""A leader's fetch sessions (replication.fetch_sessions), sans-IO: one per follower node, taken
in turn, bounded in partitions and in number."""

from __future__ import annotations

import pytest

from replication import fetch_sessions
from replication.errors import (
    FetchSessionIdNotFound,
    FetchSessionTooLarge,
    InvalidFetchSessionEpoch,
)
from replication.fetch_sessions import FetchSessions
from replication.session_wire import FetchPosition, SessionFetchRequest


def request(
    replica: int, session: int, epoch: int, partitions: range, forgotten: range = range(0)
) -> SessionFetchRequest:
    return SessionFetchRequest(
        replica,
        session,
        epoch,
        0,
        1,
        1,
        {("t", p): FetchPosition(0, p, 1) for p in partitions},
        tuple(("t", p) for p in forgotten),
    )


def test_a_session_is_taken_in_turn_and_kept_up_to_date() -> None:
    sessions = FetchSessions(max_partitions=10)
    first = sessions.take(request(1, 0, 0, range(3)))
    assert sorted(first.partitions) == [("t", 0), ("t", 1), ("t", 2)]
    same = sessions.take(request(1, first.id, 1, range(3, 5), forgotten=range(1)))
    assert same is first and sorted(p for _, p in first.partitions) == [1, 2, 3, 4]
    with pytest.raises(InvalidFetchSessionEpoch, match="expects epoch 2, not 1"):
        sessions.take(request(1, first.id, 1, range(0)))
    with pytest.raises(FetchSessionIdNotFound):
        sessions.take(request(2, first.id, 2, range(0)))  # another node's request
    replaced = sessions.take(request(1, 0, 0, range(1)))
    assert replaced.id != first.id and not sessions.current(first)
    with pytest.raises(FetchSessionIdNotFound):
        sessions.take(request(1, first.id, 2, range(0)))


def test_a_session_holds_at_most_max_partitions() -> None:
    sessions = FetchSessions(max_partitions=4)
    session = sessions.take(request(1, 0, 0, range(4)))
    with pytest.raises(FetchSessionTooLarge, match="at most 4"):
        sessions.take(request(1, session.id, 1, range(4, 5)))
    assert len(sessions) == 0  # dropped: the follower starts over


def test_sessions_are_bounded_in_number(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fetch_sessions, "MAX_SESSIONS", 3)
    sessions = FetchSessions(max_partitions=4)
    oldest = sessions.take(request(0, 0, 0, range(1)))
    for replica in range(1, 4):
        sessions.take(request(replica, 0, 0, range(1)))
    assert len(sessions) == 3 and not sessions.current(oldest)
