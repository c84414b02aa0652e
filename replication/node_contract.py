"""The contract between nodes, in one place for both halves: the client (replication's
forwarding and replica calls, groups' remote reads) and the server (the gateway's internal and
forwarded routes). Route paths, header names, the batch media type, which headers a forwarded
request carries and its answer brings back, and how a problem answer becomes the domain error
it stands for."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import orjson

from engine.errors import EngineError, IsolationUnavailable, OffsetOutOfRange
from replication import errors

# Headers
FORWARDED_BY = "Sluice-Forwarded-By"  # set on a forwarded request: it is never forwarded again
# The principal the front node authenticated, trusted only with the cluster's internal key.
ON_BEHALF_OF = "Sluice-Principal"
HIGH_WATERMARK = "Sluice-High-Watermark"  # a leader's, on its answer to a follower's fetch
LOG_START_OFFSET = "Sluice-Log-Start-Offset"  # likewise
# What a forwarded request carries over and what its answer brings back.
# X-Forwarded-Host/-Proto: where the client sent the request, for URLs in the answer (a v2
# consumer instance's base_uri names the node the client reached, not the coordinator).
REQUEST_HEADERS = (
    "Content-Type",
    "Accept",
    "Idempotency-Key",
    "Authorization",
    ON_BEHALF_OF,
    "X-Forwarded-Host",
    "X-Forwarded-Proto",
)
ANSWER_HEADERS = ("Content-Type", "Retry-After", "Location", "Allow")
ANSWER_PREFIX = "sluice-"

RECORD_BATCH = "application/vnd.sluice.record-batch"  # whole Kafka RecordBatch v2, as stored

# Routes: a follower's fetches and epoch query, and the batches a front node built for a leader.
REPLICA_PREFIX = "/internal/v1/replicas"
APPEND_PREFIX = "/internal/v1/partitions"
REPLICA_RECORDS_ROUTE = REPLICA_PREFIX + "/{topic}/{partition}/records"
# A follower's one fetch for every partition it follows at a leader (replication.session_wire).
SESSION_FETCH_ROUTE = REPLICA_PREFIX + "/fetch"
SESSION_FETCH = "application/vnd.sluice.session-fetch"  # its request's and answer's bodies
EPOCH_END_ROUTE = REPLICA_PREFIX + "/{topic}/{partition}/epoch-end"
APPEND_ROUTE = APPEND_PREFIX + "/{topic}/{partition}/append"
# A transaction coordinator's COMMIT or ABORT marker for a partition led there.
MARKER_ROUTE = APPEND_PREFIX + "/{topic}/{partition}/markers"
# A node's own dispatchers of a subscription, for the node that describes it.
SUBSCRIPTION_PARTITIONS_ROUTE = "/internal/v1/subscriptions/{name}/partitions"
# A transaction's offsets at its group's coordinator: the generation check (offsets null)
# and the commit of a committed transaction's offsets.
TRANSACTION_OFFSETS_ROUTE = "/internal/v1/groups/{group}/transaction-offsets"
# A subscription's positions at its group's coordinator: commit (PUT) and forget (DELETE),
# each checked there against that node's view of the subscription.
SUBSCRIPTION_POSITIONS_ROUTE = "/internal/v1/subscriptions/{name}/positions"

MAX_ERROR_BYTES = 64 * 1024  # of a problem answer, read to learn its code

_ERRORS: dict[str, type[errors.ReplicationError]] = {
    cls.code: cls
    for cls in (
        errors.NotLeader,
        errors.LeaderNotAvailable,
        errors.FencedLeaderEpoch,
        errors.UnknownLeaderEpoch,
        errors.NotController,
        errors.FetchSessionIdNotFound,
        errors.InvalidFetchSessionEpoch,
    )
}


def replica_path(topic: str, partition: int, what: str) -> str:
    """A replica route's path: `what` is `records` or `epoch-end`."""
    return f"{REPLICA_PREFIX}/{quote(topic, safe='')}/{partition}/{what}"


def append_path(topic: str, partition: int) -> str:
    """The internal append route's path."""
    return f"{APPEND_PREFIX}/{quote(topic, safe='')}/{partition}/append"


def marker_path(topic: str, partition: int) -> str:
    """The internal markers route's path."""
    return f"{APPEND_PREFIX}/{quote(topic, safe='')}/{partition}/markers"


def error_of(status: int, body: bytes) -> EngineError:
    """The exception a problem+json answer stands for (a generic one for an unknown code)."""
    try:
        problem: dict[str, Any] = orjson.loads(body[:MAX_ERROR_BYTES])
    except orjson.JSONDecodeError:
        problem = {}
    if not isinstance(problem, dict):
        problem = {}
    code = str(problem.get("code", ""))
    detail = str(problem.get("detail", f"HTTP {status}"))
    if code == OffsetOutOfRange.code:
        return OffsetOutOfRange(
            int(problem.get("offset", -1)),
            int(problem.get("log_start_offset", 0)),
            int(problem.get("log_end_offset", 0)),
        )
    if code == IsolationUnavailable.code:
        return IsolationUnavailable(detail)
    cls = _ERRORS.get(code)
    if cls is errors.NotLeader:
        leader = problem.get("leader")
        return errors.NotLeader(detail, leader if isinstance(leader, int) else None)
    if cls is not None:
        return cls(detail)
    return errors.ReplicationError(f"{status} {code}: {detail}")
