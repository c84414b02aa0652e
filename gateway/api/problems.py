"""Domain errors as problems (engine, partition layer, groups: status by stable code), and the
middleware that makes every error a problem response.

Handlers raise `Problem` (or let an engine error through); nothing answers 200 for a failure
and bad input never becomes a 500.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from engine import errors
from gateway.http.problem import Problem, problem_response, status_code
from gateway.produce.errors import ProduceError
from groups.errors import GroupError
from replication import errors as replication
from replication.forward_client import RemoteError
from schemas import errors as schema_errors
from schemas.errors import SchemaError

log = logging.getLogger(__name__)
# Other dialects of error answer, by the paths they serve (the REST Proxy v2 and v3 bodies):
# (does this request speak it, render the problem in it). problem+json elsewhere.
ProblemDialect = tuple[Callable[[web.Request], bool], Callable[[Problem], web.Response]]
PROBLEM_DIALECTS = web.AppKey("problem_dialects", list[ProblemDialect])

_ENGINE_STATUS: dict[type[errors.EngineError], int] = {
    errors.UnknownTopic: 404,
    errors.UnknownPartition: 404,
    errors.InvalidTopicName: 400,
    errors.InvalidConfig: 400,
    errors.InvalidPartitions: 400,
    errors.TopicAlreadyExists: 409,
    errors.CorruptRecord: 500,
    errors.InvalidRecord: 400,
    errors.RecordTooLarge: 413,
    errors.OffsetOutOfRange: 416,
    errors.OffsetMismatch: 409,
    errors.LogClosed: 503,
    errors.TooManyPartitions: 422,
    errors.InsufficientStorage: 507,
    errors.KafkaStorageError: 503,  # offline until a restart: no Retry-After
    errors.StorageError: 503,
    errors.RemoteStorageError: 503,
    errors.ProducerFenced: 409,
    errors.TransactionNotOngoing: 409,
    errors.IsolationUnavailable: 416,
    replication.NotLeader: 421,
    replication.LeaderNotAvailable: 503,
    replication.NotController: 421,
    replication.InternalTopicWrite: 403,
    replication.NotEnoughReplicas: 503,
    replication.NotEnoughReplicasAfterAppend: 503,
    replication.RequestTimedOut: 504,
    replication.FencedLeaderEpoch: 409,
    replication.UnknownLeaderEpoch: 503,
    replication.InvalidReplicationFactor: 400,
    replication.MetadataUnavailable: 503,
    replication.NotAReplica: 400,
    replication.IdempotencyKeyReused: 422,
    replication.ControllerNotAvailable: 503,
    replication.LeaderChangedAfterAppend: 503,
    replication.FetchSessionIdNotFound: 404,
    replication.InvalidFetchSessionEpoch: 409,
    replication.FetchSessionTooLarge: 422,
    replication.NodeTimedOut: 504,  # before NodeUnreachable, its base
    replication.NodeUnreachable: 502,
    replication.PartiallyAppended: 503,
    replication.InvalidReassignment: 400,
    replication.ReassignmentInProgress: 409,
    replication.NoReassignmentInProgress: 409,
}
# Errors a retry may cure shortly: their answers carry Retry-After.
_RETRIABLE = (
    errors.InsufficientStorage,
    errors.RemoteStorageError,
    replication.LeaderNotAvailable,
    replication.NotEnoughReplicas,
    replication.UnknownLeaderEpoch,
    replication.MetadataUnavailable,
    replication.ControllerNotAvailable,
    replication.LeaderChangedAfterAppend,
    replication.PartiallyAppended,
)
# The status of each code of the domain's own errors (groups and subscriptions, the produce
# front).
_DOMAIN_STATUS = {
    "UNKNOWN_MEMBER": 404,
    "UNKNOWN_GROUP": 404,
    "INCONSISTENT_ASSIGNOR": 409,
    "GROUP_MAX_SIZE_REACHED": 409,
    "GROUP_METADATA_TOO_LARGE": 413,
    "NO_COMMITTED_OFFSET": 409,
    "STALE_GENERATION": 409,
    "PARTITION_NOT_ASSIGNED": 409,
    "GROUP_NOT_EMPTY": 409,
    "INVALID_CONFIG": 400,
    "MEMBER_ALREADY_EXISTS": 409,
    "ILLEGAL_STATE": 409,
    "COORDINATOR_NOT_AVAILABLE": 503,
    "INVALID_RECORD": 400,
    "SCHEMA_VALIDATION_FAILED": 422,
    "RECORD_TOO_LARGE": 413,
    "UNKNOWN_PARTITION": 404,
    "INVALID_IDEMPOTENCY_KEY": 400,
    "IDEMPOTENCY_KEY_IN_FLIGHT": 409,
    "INVALID_SUBSCRIPTION": 400,
    "INVALID_TOPIC_NAME": 400,
    "ENDPOINT_NOT_ALLOWED": 422,
    "UNKNOWN_SUBSCRIPTION": 404,
    "SUBSCRIPTION_EXISTS": 409,
    "SUBSCRIPTION_CHANGED": 409,
    "PRODUCER_FENCED": 409,
    "INVALID_TXN_STATE": 409,
    "UNKNOWN_TRANSACTIONAL_ID": 404,
    "CONCURRENT_TRANSACTIONS": 409,
    "TRANSACTION_TIMED_OUT": 409,
    "INVALID_TRANSACTION_TIMEOUT": 400,
    "NOT_TRANSACTION_OWNER": 403,
}
_RETRY_SOON = frozenset(
    {"COORDINATOR_NOT_AVAILABLE", "IDEMPOTENCY_KEY_IN_FLIGHT", "CONCURRENT_TRANSACTIONS"}
)
# The schema registry's Confluent codes by their names (SUBJECT_NOT_FOUND for 40401, ...).
_SCHEMA_CODES = {
    value: name
    for name, value in vars(schema_errors).items()
    if name.isupper() and isinstance(value, int)
}


def from_engine_error(exc: errors.EngineError) -> Problem:
    if isinstance(exc, RemoteError):
        return Problem(exc.status, exc.code, str(exc), **exc.extra)
    if isinstance(exc, SchemaError):
        name = _SCHEMA_CODES.get(exc.error_code, "SCHEMA_REGISTRY_ERROR")
        retry = {"Retry-After": "1"} if exc.status >= 500 else None
        return Problem(exc.status, name, exc.message, headers=retry, error_code=exc.error_code)
    if isinstance(exc, GroupError | ProduceError):
        status = _DOMAIN_STATUS.get(exc.code, 500)
        retry = {"Retry-After": "1"} if exc.code in _RETRY_SOON else None
        return Problem(status, exc.code, str(exc), headers=retry, **exc.extra)
    status = next((s for cls, s in _ENGINE_STATUS.items() if isinstance(exc, cls)), 500)
    headers = {"Retry-After": "1"} if isinstance(exc, _RETRIABLE) else None
    extra: dict[str, Any] = {}
    if isinstance(exc, errors.OffsetOutOfRange):
        extra = {
            "offset": exc.offset,
            "log_start_offset": exc.log_start_offset,
            "log_end_offset": exc.log_end_offset,
        }
    elif isinstance(exc, errors.CorruptRecord):
        extra = {"offset": exc.offset}
    elif isinstance(exc, errors.KafkaStorageError):
        extra = {"topic": exc.topic, "partition": exc.partition}
    elif isinstance(exc, replication.NotLeader) and exc.leader is not None:
        extra = {"leader": exc.leader}
    elif isinstance(exc, replication.PartiallyAppended):
        extra = {
            "results": [
                {"partition": p, "base_offset": base, "count": count}
                for p, (base, count) in sorted(exc.appended.items())
            ],
            "refused_partitions": exc.refused,
            "cause": exc.cause_code,
        }
    return Problem(status, exc.code, str(exc), headers=headers, **extra)


@web.middleware
async def problem_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Turn every failure into application/problem+json, or the dialect the path speaks."""
    try:
        return await handler(request)
    except Exception as exc:
        problem = problem_of(exc, request.method, request.path)
        for speaks, render in request.app.get(PROBLEM_DIALECTS, ()):
            if speaks(request):
                return render(problem)
        return problem_response(problem)


def problem_of(exc: Exception, method: str, path: str) -> Problem:
    """The problem a handler's failure answers; what aiohttp itself must see (a client gone, a
    handler timed out, a redirect) is raised again, and the unexpected logged with its trace."""
    if isinstance(exc, Problem):
        return exc
    if isinstance(exc, errors.EngineError):
        return from_engine_error(exc)
    if isinstance(exc, web.HTTPException):
        if exc.status < 400:
            raise exc
        code = status_code(exc.status)
        detail = exc.text if exc.text and not exc.text.startswith(f"{exc.status}:") else exc.reason
        headers = {k: v for k, v in exc.headers.items() if k.lower() in ("allow", "retry-after")}
        return Problem(exc.status, code, detail or exc.reason, headers=headers)
    if isinstance(exc, ConnectionResetError | TimeoutError):
        raise exc
    log.exception("unhandled error in %s %s", method, path, exc_info=exc)
    return Problem(500, "INTERNAL_ERROR", "internal server error")
