"""What a problem answer from another node becomes on this one (`node_contract.error_of`): the
domain error it stands for, with its members, so the reader answers as the leader did."""

from __future__ import annotations

import orjson

from engine.errors import IsolationUnavailable, OffsetOutOfRange
from replication.errors import NotLeader, ReplicationError
from replication.node_contract import error_of


def body(**problem: object) -> bytes:
    return orjson.dumps(problem)


def test_an_offset_out_of_range_keeps_the_log_bounds() -> None:
    found = error_of(
        416, body(code="OFFSET_OUT_OF_RANGE", offset=9, log_start_offset=2, log_end_offset=5)
    )
    assert isinstance(found, OffsetOutOfRange)
    assert (found.offset, found.log_start_offset, found.log_end_offset) == (9, 2, 5)


def test_read_committed_unavailable_is_its_own_error_not_an_offset_out_of_range() -> None:
    found = error_of(416, body(code="ISOLATION_UNAVAILABLE", detail="only on S3"))
    assert isinstance(found, IsolationUnavailable) and str(found) == "only on S3"


def test_not_leader_names_the_leader_and_an_unknown_code_is_generic() -> None:
    found = error_of(421, body(code="NOT_LEADER_OR_FOLLOWER", detail="elsewhere", leader=2))
    assert isinstance(found, NotLeader) and found.leader == 2
    other = error_of(500, b"not json")
    assert type(other) is ReplicationError and "HTTP 500" in str(other)
