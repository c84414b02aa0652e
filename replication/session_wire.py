"""The binary body of a session fetch (Kafka's FetchRequest with KIP-227 sessions): one request
from a follower for every partition it follows at one leader, and the leader's answer, each
partition's part length-prefixed and its records the stored RecordBatch v2 bytes as they are.

Replica -1 is a consumer, as in Kafka: the group coordinator reading its members' partitions
at one leader. Its request is sessionless (session_id 0 and session_epoch -1, KIP-227's full
fetch that opens no session) and forgets nothing; a leader epoch of -1 in it is not checked.

Big-endian, fixed-width integers; a topic is a u16 length and UTF-8 bytes. Request:

    u8 version, i32 replica (-1: a consumer), i32 session_id (0: a new, full session),
    i32 session_epoch (-1: a consumer's, sessionless),
    i32 max_wait_ms, i32 min_bytes, i32 max_bytes (in all),
    i32 count, count x (topic, i32 partition, i32 leader_epoch, i64 fetch_offset, i32 max_bytes),
    i32 count, count x (topic, i32 partition)                      the partitions forgotten
    [u8 isolation]   a consumer's read_committed only (1); absent: read_uncommitted

Answer:

    u8 version, i32 session_id,
    i32 count, count x (topic, i32 partition, i64 high_watermark, i64 log_start_offset,
                        u16 error status (0: none), u32 length + problem+json body,
                        u32 length + record batches)

Decoding checks every length and count against the bytes there and the bounds below, and says
what is wrong in a `MalformedSessionFetch`.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass

from engine.config import MAX_TOPIC_NAME_LENGTH
from engine.producer_state import Isolation
from replication.metadata import TopicPartition

VERSION = 1
CONSUMER = -1  # the replica of a consumer's request
SESSIONLESS_EPOCH = -1  # a consumer's session_epoch: a full request that opens no session
UNKNOWN_EPOCH = -1  # a consumer's leader epoch when it does not know it: not checked
MAX_PARTITIONS = 100_000  # in one request or answer (a session holds at most this many)
MAX_PROBLEM_BYTES = 64 * 1024

_REQUEST_HEAD = struct.Struct(">Biiiiiii")
_PARTITION = struct.Struct(">iiqi")
_COUNT = struct.Struct(">i")
_ISOLATION = struct.Struct(">B")
READ_COMMITTED = 1
_TOPIC_LENGTH = struct.Struct(">H")
_PARTITION_NUMBER = struct.Struct(">i")
_ANSWER_HEAD = struct.Struct(">Bii")
_ANSWER_PART = struct.Struct(">iqqHI")
_RECORDS_LENGTH = struct.Struct(">I")


class MalformedSessionFetch(ValueError):
    """A session fetch body that does not follow the format (the message says where)."""


@dataclass(frozen=True)
class FetchPosition:
    """Where a follower fetches one partition from, in the leader epoch it follows."""

    leader_epoch: int
    fetch_offset: int
    max_bytes: int


@dataclass(frozen=True)
class SessionFetchRequest:
    replica: int  # a follower's node id, or CONSUMER
    session_id: int  # 0: open a new session with every partition below (a full request)
    session_epoch: int  # the session's requests so far; ignored in a full request
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    partitions: dict[TopicPartition, FetchPosition]  # full: all; incremental: changed only
    forgotten: tuple[TopicPartition, ...] = ()
    isolation: Isolation = Isolation.READ_UNCOMMITTED  # a consumer's

    @property
    def full(self) -> bool:
        return self.session_id == 0

    @property
    def consumer(self) -> bool:
        """A consumer's request: read below the high watermark, no session, no follower."""
        return self.replica == CONSUMER


@dataclass(frozen=True)
class PartitionAnswer:
    """One partition's part of an answer: its batches and marks, or a problem (status, body)."""

    high_watermark: int
    log_start_offset: int
    records: bytes | memoryview = b""
    error_status: int = 0
    error_body: bytes = b""


@dataclass(frozen=True)
class SessionFetchAnswer:
    session_id: int
    partitions: dict[TopicPartition, PartitionAnswer]


def consumer_request(
    offsets: Mapping[TopicPartition, int],
    max_wait_ms: int,
    max_bytes: int,
    isolation: Isolation = Isolation.READ_UNCOMMITTED,
) -> SessionFetchRequest:
    """A consumer's request for `offsets` (leader epochs unchecked), answered once any
    partition has records or at `max_wait_ms`, each partition and the whole within
    `max_bytes`."""
    positions = {key: FetchPosition(UNKNOWN_EPOCH, o, max_bytes) for key, o in offsets.items()}
    return SessionFetchRequest(
        CONSUMER, 0, SESSIONLESS_EPOCH, max_wait_ms, 1, max_bytes, positions, (), isolation
    )


def encode_request(request: SessionFetchRequest) -> bytes:
    parts = [
        _REQUEST_HEAD.pack(
            VERSION,
            request.replica,
            request.session_id,
            request.session_epoch,
            request.max_wait_ms,
            request.min_bytes,
            request.max_bytes,
            len(request.partitions),
        )
    ]
    for (topic, partition), position in request.partitions.items():
        parts.append(_topic(topic))
        parts.append(
            _PARTITION.pack(
                partition, position.leader_epoch, position.fetch_offset, position.max_bytes
            )
        )
    parts.append(_COUNT.pack(len(request.forgotten)))
    for topic, partition in request.forgotten:
        parts.append(_topic(topic))
        parts.append(_PARTITION_NUMBER.pack(partition))
    if request.isolation is Isolation.READ_COMMITTED:
        parts.append(_ISOLATION.pack(READ_COMMITTED))
    return b"".join(parts)


def decode_request(body: bytes) -> SessionFetchRequest:
    reader = _Reader(body)
    version, replica, session_id, epoch, wait, min_bytes, max_bytes, count = reader.unpack(
        _REQUEST_HEAD, "the request head"
    )
    if version != VERSION:
        raise MalformedSessionFetch(f"version {version}; this node speaks {VERSION}")
    if replica < CONSUMER:
        raise MalformedSessionFetch(f"replica is {replica}; a node id, or -1 for a consumer")
    consumer = replica == CONSUMER
    if consumer and (session_id, epoch) != (0, SESSIONLESS_EPOCH):
        raise MalformedSessionFetch(
            f"replica is -1 (a consumer) with session {session_id} in epoch {epoch}; a "
            f"consumer's fetch is sessionless: session_id 0, session_epoch {SESSIONLESS_EPOCH}"
        )
    for name, value in (
        ("session_id", session_id),
        ("session_epoch", epoch),
        ("max_wait_ms", wait),
        ("min_bytes", min_bytes),
    ):
        if value < 0 and not (consumer and name == "session_epoch"):
            raise MalformedSessionFetch(f"{name} is {value}; it must not be negative")
    if max_bytes < 1:
        raise MalformedSessionFetch(f"max_bytes is {max_bytes}; it must be at least 1")
    partitions: dict[TopicPartition, FetchPosition] = {}
    lowest_epoch = UNKNOWN_EPOCH if consumer else 0
    for _ in range(reader.count(count, "partitions")):
        topic = reader.topic()
        partition, leader_epoch, offset, part_max = reader.unpack(_PARTITION, f"{topic}'s part")
        key = _key(topic, partition)
        if leader_epoch < lowest_epoch or offset < 0 or part_max < 1:
            raise MalformedSessionFetch(
                f"{topic}-{partition}: leader epoch {leader_epoch}, offset {offset} and "
                f"max_bytes {part_max} must be >= {lowest_epoch}, >= 0 and >= 1"
            )
        if key in partitions:
            raise MalformedSessionFetch(f"{topic}-{partition} appears twice")
        partitions[key] = FetchPosition(leader_epoch, offset, part_max)
    (forgotten_count,) = reader.unpack(_COUNT, "the count of forgotten partitions")
    forgotten = []
    for _ in range(reader.count(forgotten_count, "forgotten partitions")):
        topic = reader.topic()
        (partition,) = reader.unpack(_PARTITION_NUMBER, f"forgotten {topic}'s partition")
        forgotten.append(_key(topic, partition))
    if consumer and forgotten:
        raise MalformedSessionFetch("a consumer's fetch has no session to forget partitions of")
    isolation = Isolation.READ_UNCOMMITTED
    if consumer and reader.left():
        (level,) = reader.unpack(_ISOLATION, "the isolation level")
        if level != READ_COMMITTED:
            raise MalformedSessionFetch(f"isolation level {level}; 1 (read_committed) or none")
        isolation = Isolation.READ_COMMITTED
    reader.end()
    return SessionFetchRequest(
        replica,
        session_id,
        epoch,
        wait,
        min_bytes,
        max_bytes,
        partitions,
        tuple(forgotten),
        isolation,
    )


def encode_answer(answer: SessionFetchAnswer) -> list[bytes | memoryview]:
    """The answer as pieces to write in order (the records are not copied)."""
    parts: list[bytes | memoryview] = [
        _ANSWER_HEAD.pack(VERSION, answer.session_id, len(answer.partitions))
    ]
    for (topic, partition), part in answer.partitions.items():
        parts.append(_topic(topic))
        parts.append(
            _ANSWER_PART.pack(
                partition,
                part.high_watermark,
                part.log_start_offset,
                part.error_status,
                len(part.error_body),
            )
        )
        parts.append(part.error_body)
        parts.append(_RECORDS_LENGTH.pack(len(part.records)))
        parts.append(part.records)
    return parts


def decode_answer(body: bytes) -> SessionFetchAnswer:
    reader = _Reader(body)
    version, session_id, count = reader.unpack(_ANSWER_HEAD, "the answer head")
    if version != VERSION:
        raise MalformedSessionFetch(f"answer version {version}; this node speaks {VERSION}")
    partitions: dict[TopicPartition, PartitionAnswer] = {}
    for _ in range(reader.count(count, "partitions")):
        topic = reader.topic()
        partition, hw, log_start, status, error_length = reader.unpack(
            _ANSWER_PART, f"{topic}'s part"
        )
        key = _key(topic, partition)
        if error_length > MAX_PROBLEM_BYTES:
            raise MalformedSessionFetch(f"{topic}-{partition}: a problem of {error_length} bytes")
        error = reader.take(error_length, f"{topic}-{partition}'s problem")
        (length,) = reader.unpack(_RECORDS_LENGTH, f"{topic}-{partition}'s records length")
        records = reader.view_of(length, f"{topic}-{partition}'s records")
        if key in partitions:
            raise MalformedSessionFetch(f"{topic}-{partition} appears twice")
        partitions[key] = PartitionAnswer(hw, log_start, records, status, error)
    reader.end()
    return SessionFetchAnswer(session_id, partitions)


def _topic(name: str) -> bytes:
    raw = name.encode()
    return _TOPIC_LENGTH.pack(len(raw)) + raw


def _key(topic: str, partition: int) -> TopicPartition:
    if partition < 0:
        raise MalformedSessionFetch(f"{topic}: partition {partition} is negative")
    return topic, partition


class _Reader:
    """Reads a body front to back; every shortfall is a MalformedSessionFetch."""

    def __init__(self, body: bytes) -> None:
        self.view = memoryview(body)
        self.at = 0

    def take(self, length: int, what: str) -> bytes:
        return bytes(self.view_of(length, what))

    def view_of(self, length: int, what: str) -> memoryview:
        """The next `length` bytes, not copied (a fetched part's records: a MiB each)."""
        end = self.at + length
        if end > len(self.view):
            raise MalformedSessionFetch(
                f"{what} needs {length} bytes at byte {self.at}; the body ends at {len(self.view)}"
            )
        data = self.view[self.at : end]
        self.at = end
        return data

    def unpack(self, layout: struct.Struct, what: str) -> tuple[int, ...]:
        if self.at + layout.size > len(self.view):
            raise MalformedSessionFetch(f"the body ends inside {what} (byte {self.at})")
        values: tuple[int, ...] = layout.unpack_from(self.view, self.at)
        self.at += layout.size
        return values

    def count(self, value: int, what: str) -> int:
        if not 0 <= value <= MAX_PARTITIONS:
            raise MalformedSessionFetch(f"{value} {what}; at most {MAX_PARTITIONS}")
        return value

    def topic(self) -> str:
        (length,) = self.unpack(_TOPIC_LENGTH, "a topic's length")
        if not 1 <= length <= MAX_TOPIC_NAME_LENGTH:
            raise MalformedSessionFetch(
                f"a topic name of {length} bytes at byte {self.at}; 1..{MAX_TOPIC_NAME_LENGTH}"
            )
        try:
            return self.take(length, "a topic name").decode()
        except UnicodeDecodeError:
            raise MalformedSessionFetch(
                f"a topic name before byte {self.at} is not UTF-8"
            ) from None

    def left(self) -> int:
        return len(self.view) - self.at

    def end(self) -> None:
        if self.at != len(self.view):
            raise MalformedSessionFetch(f"{len(self.view) - self.at} bytes after the last part")
