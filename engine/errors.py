"""Engine errors: each carries a stable `code` the HTTP layer maps to a problem response."""

from __future__ import annotations

from typing import Any


class EngineError(Exception):
    """Base of every error the engine raises on purpose."""

    code = "ENGINE_ERROR"

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled whole, its own attributes too, and rebuilt without its `__init__`: an error
        raised in another process (a segment's upload) reaches the caller as it was raised."""
        return _rebuilt, (type(self), self.args, self.__dict__)


def _rebuilt(cls: type[EngineError], args: tuple[Any, ...], state: dict[str, Any]) -> EngineError:
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(state)
    return error


class InvalidTopicName(EngineError):
    code = "INVALID_TOPIC_NAME"


class InvalidConfig(EngineError):
    code = "INVALID_CONFIG"


class InvalidPartitions(EngineError):
    code = "INVALID_PARTITIONS"


class TopicAlreadyExists(EngineError):
    code = "TOPIC_ALREADY_EXISTS"


class UnknownTopic(EngineError):
    code = "UNKNOWN_TOPIC"

    def __init__(self, message: str, topic: str | None = None) -> None:
        super().__init__(message)
        self.topic = topic  # the name, where a cluster node should confirm it with the store


class UnknownPartition(EngineError):
    code = "UNKNOWN_PARTITION"


class InvalidRecord(EngineError):
    """A batch or record that fails validation (bad magic, sizes, CRC, missing key...)."""

    code = "INVALID_RECORD"


class CorruptRecord(InvalidRecord):
    """Stored bytes fail their CRC: reported to the reader, never served."""

    code = "CORRUPT_RECORD"

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


class RecordTooLarge(EngineError):
    code = "RECORD_TOO_LARGE"

    def __init__(self, message: str, record_index: int | None = None) -> None:
        super().__init__(message)
        self.record_index = record_index


class OffsetOutOfRange(EngineError):
    code = "OFFSET_OUT_OF_RANGE"

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(
            f"offset {offset} is outside the log [{log_start_offset}, {log_end_offset}]"
        )
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class OffsetMovedToTieredStorage(EngineError):
    """The offset is in the log, but only on S3 now (Kafka's OFFSET_MOVED_TO_TIERED_STORAGE):
    the partition layer reads it from there."""

    code = "OFFSET_MOVED_TO_TIERED_STORAGE"

    def __init__(self, offset: int, local_log_start_offset: int) -> None:
        super().__init__(
            f"offset {offset} is below the local log start {local_log_start_offset} (on S3)"
        )
        self.offset = offset
        self.local_log_start_offset = local_log_start_offset


class RemoteStorageError(EngineError):
    """S3 refused or could not be reached; the caller retries later, nothing is lost."""

    code = "REMOTE_STORAGE_UNAVAILABLE"


class OffsetMismatch(EngineError):
    """A follower append whose first offset is not the log end offset (a gap or an overlap)."""

    code = "OFFSET_MISMATCH"


class TooManyPartitions(EngineError):
    """More partitions than this node's file-descriptor limit can keep open."""

    code = "TOO_MANY_PARTITIONS"


class StorageError(EngineError):
    """The filesystem refused an operation (no descriptors, no space); nothing was kept."""

    code = "STORAGE_ERROR"


class InsufficientStorage(StorageError):
    """The data directory's disk is full: nothing of the request was written (the segment
    is cut back to where it was), and appends work again once there is space."""

    code = "INSUFFICIENT_STORAGE"


class KafkaStorageError(StorageError):
    """A partition's files failed (an I/O error, a read-only filesystem, a failed fsync): the
    partition is offline, as Kafka takes a failed log directory offline. Nothing is appended,
    read or flushed there again until the node restarts, whose recovery CRC-checks the log:
    unlike a full disk this does not heal by itself, and after a failed fsync the page cache
    no longer says what the disk holds."""

    code = "KAFKA_STORAGE_ERROR"

    def __init__(self, message: str, topic: str, partition: int) -> None:
        super().__init__(message)
        self.topic = topic
        self.partition = partition


class LogClosed(EngineError):
    code = "LOG_CLOSED"


class ProducerFenced(EngineError):
    """A transactional write of a producer epoch older than the partition has seen: a newer
    holder of the transactional id fenced it (Kafka's PRODUCER_FENCED / INVALID_PRODUCER_EPOCH)."""

    code = "PRODUCER_FENCED"


class TransactionNotOngoing(EngineError):
    """A transactional write that does not fit the partition's transaction of its producer:
    after the marker for that producer epoch (the transaction already ended, so the write would
    hang a new one: KIP-890's defence), or of a newer epoch while an older epoch's transaction
    is still open there (the two would be ended by one marker)."""

    code = "INVALID_TXN_STATE"


class IsolationUnavailable(EngineError):
    """A read_committed read of offsets only remote storage holds: their aborted-transaction
    index stays on the local disk, so which records were aborted is not known there."""

    code = "ISOLATION_UNAVAILABLE"
