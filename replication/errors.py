"""Domain errors of the partition layer; each has a stable `code` the gateway maps to HTTP."""

from __future__ import annotations

from engine.errors import EngineError


class ReplicationError(EngineError):
    """Base of the partition layer's errors."""

    code = "REPLICATION_ERROR"


class NotLeader(ReplicationError):
    """This node does not lead the partition (Kafka's NOT_LEADER_OR_FOLLOWER)."""

    code = "NOT_LEADER_OR_FOLLOWER"

    def __init__(self, message: str, leader: int | None = None) -> None:
        super().__init__(message)
        self.leader = leader


class LeaderNotAvailable(ReplicationError):
    """The partition has no leader now (an election is under way, or every ISR node is down)."""

    code = "LEADER_NOT_AVAILABLE"


class NotController(ReplicationError):
    """A controller-only change reached a node that is not the controller."""

    code = "NOT_CONTROLLER"


class InternalTopicWrite(ReplicationError):
    """A client's produce to an internal topic: only its coordinator writes there."""

    code = "INTERNAL_TOPIC"


class NotEnoughReplicas(ReplicationError):
    """acks=all with the ISR below min.insync.replicas: nothing was appended."""

    code = "NOT_ENOUGH_REPLICAS"


class NotEnoughReplicasAfterAppend(ReplicationError):
    """The ISR shrank below min.insync.replicas after the append: the records may be committed."""

    code = "NOT_ENOUGH_REPLICAS_AFTER_APPEND"


class RequestTimedOut(ReplicationError):
    """The wait for acks passed timeout_ms: the records may still be committed."""

    code = "REQUEST_TIMED_OUT"


class FencedLeaderEpoch(ReplicationError):
    """A request carried an older leader epoch than the partition's: the sender is stale."""

    code = "FENCED_LEADER_EPOCH"


class UnknownLeaderEpoch(ReplicationError):
    """A request carried a newer leader epoch than this node knows yet: retry shortly."""

    code = "UNKNOWN_LEADER_EPOCH"


class InvalidReplicationFactor(ReplicationError):
    code = "INVALID_REPLICATION_FACTOR"


class MetadataUnavailable(ReplicationError):
    """The cluster metadata store (etcd) cannot be reached or refused a write."""

    code = "METADATA_UNAVAILABLE"


class FencedController(ReplicationError):
    """A controller write failed its fence: this node lost the controller election."""

    code = "NOT_CONTROLLER"


class NodeUnreachable(ReplicationError):
    """Another node did not answer (connection refused, reset or timed out). `delivered`
    is False when the request surely never reached it (the connection was refused), so that
    sending it elsewhere cannot make it happen twice."""

    code = "NODE_UNREACHABLE"

    def __init__(self, message: str, *, delivered: bool = True) -> None:
        super().__init__(message)
        self.delivered = delivered


class NodeTimedOut(NodeUnreachable):
    """Another node took the request but gave no answer within the forwarding bound (a
    paused or overloaded process): it may have been served there."""

    code = "NODE_TIMED_OUT"


class NotAReplica(ReplicationError):
    """A replica fetch from a node that is not one of the partition's followers."""

    code = "NOT_A_REPLICA"


class IdempotencyKeyReused(ReplicationError):
    """An Idempotency-Key already used in this topic with a different request."""

    code = "IDEMPOTENCY_KEY_REUSED"


class ControllerNotAvailable(ReplicationError):
    """This node is being elected controller (or its previous run's election key has not
    expired yet): retry shortly."""

    code = "CONTROLLER_NOT_AVAILABLE"


class LeaderChangedAfterAppend(ReplicationError):
    """The leader lost its role after appending and before the records were committed: they
    may still be committed by the new leader. Never retried by the server (it could append
    them twice); a client retry with an Idempotency-Key is safe."""

    code = "LEADER_CHANGED"


class PartiallyAppended(ReplicationError):
    """A produce to several partitions appended some and was refused for others: a retry with
    the same Idempotency-Key appends only what is missing."""

    code = "PARTIALLY_APPENDED"

    def __init__(
        self, appended: dict[int, tuple[int, int]], refused: list[int], cause: BaseException
    ) -> None:
        super().__init__(
            f"records went to partitions {sorted(appended)}, but partitions {sorted(refused)} "
            f"refused them ({getattr(cause, 'code', type(cause).__name__)}: {cause})"
        )
        self.appended = appended
        self.refused = refused
        self.cause_code = str(getattr(cause, "code", type(cause).__name__))


class FetchSessionIdNotFound(ReplicationError):
    """An incremental session fetch names a session the leader does not hold (it restarted,
    or evicted it): the follower starts a new one with a full request (KIP-227)."""

    code = "FETCH_SESSION_ID_NOT_FOUND"


class InvalidFetchSessionEpoch(ReplicationError):
    """An incremental session fetch out of turn (a request lost or repeated): the follower
    starts a new session with a full request (KIP-227)."""

    code = "INVALID_FETCH_SESSION_EPOCH"


class FetchSessionTooLarge(ReplicationError):
    """A session fetch would make its session hold more partitions than a leader keeps."""

    code = "FETCH_SESSION_TOO_LARGE"


class InvalidReassignment(ReplicationError):
    """A reassignment plan that cannot be carried out as written (unknown or dead nodes,
    duplicate replicas, an empty list, a partition named twice); nothing of it was started."""

    code = "INVALID_REPLICA_ASSIGNMENT"


class ReassignmentInProgress(ReplicationError):
    """A partition already moving was named in a new plan: cancel or wait for it first."""

    code = "REASSIGNMENT_IN_PROGRESS"


class NoReassignmentInProgress(ReplicationError):
    """A cancellation named a partition that is not moving."""

    code = "NO_REASSIGNMENT_IN_PROGRESS"
