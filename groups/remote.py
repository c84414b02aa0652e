"""A group member's partitions that another node leads: read from that leader over the
internal network, as any consumer would (committed batches only), for the coordinator and the
subscriptions' partition reader."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote

import orjson

from engine import batch as fmt
from engine.errors import EngineError, IsolationUnavailable, OffsetOutOfRange
from engine.producer_state import Isolation
from replication import session_wire
from replication.errors import ReplicationError
from replication.forward_client import ForwardClient, RemoteError
from replication.metadata import TopicPartition
from replication.node_contract import (
    HIGH_WATERMARK,
    RECORD_BATCH,
    SESSION_FETCH,
    SESSION_FETCH_ROUTE,
    error_of,
)


@dataclass(frozen=True)
class RemoteRead:
    """What one fetch from a partition's leader saw at `position`."""

    position: int
    data: memoryview
    high_watermark: int

    @property
    def end(self) -> int:
        """The offset after the batches read (`position` if none): where newer records start."""
        if not self.data:
            return self.position
        return fmt.scan(self.data, check_crc=False).headers[-1][1].next_offset


def _path(topic: str, partition: int, what: str) -> str:
    return f"/v1/topics/{quote(topic, safe='')}/partitions/{partition}/{what}"


async def fetch(
    forwarder: ForwardClient,
    url: str,
    topic: str,
    partition: int,
    position: int,
    max_bytes: int,
    timeout_ms: int,
    isolation: Isolation = Isolation.READ_UNCOMMITTED,
) -> RemoteRead:
    """Batches from `position` at the leader, long-polling up to `timeout_ms` for one, as a
    consumer at `isolation` reads them. OffsetOutOfRange carries the leader's log bounds."""
    query = f"?offset={position}&max_bytes={max_bytes}&timeout_ms={timeout_ms}"
    if isolation is Isolation.READ_COMMITTED:
        query += f"&isolation={isolation.value}"
    answer = await forwarder.forward(
        url,
        "GET",
        _path(topic, partition, "records") + query,
        {"Accept": RECORD_BATCH},
        b"",
        timeout_ms,
    )
    if answer.status != 200:
        problem = orjson.loads(answer.body) if answer.body else {}
        if answer.status == 416 and problem.get("code") == IsolationUnavailable.code:
            raise IsolationUnavailable(str(problem.get("detail", "read_committed unavailable")))
        if answer.status == 416:
            raise OffsetOutOfRange(
                position, int(problem["log_start_offset"]), int(problem["log_end_offset"])
            )
        raise RemoteError(answer.status, problem)
    high_watermark = int(answer.headers.get(HIGH_WATERMARK, position))
    return RemoteRead(position, memoryview(answer.body), high_watermark)


async def fetch_many(
    forwarder: ForwardClient,
    url: str,
    positions: Mapping[TopicPartition, int],
    max_bytes: int,
    timeout_ms: int,
    isolation: Isolation = Isolation.READ_UNCOMMITTED,
) -> dict[TopicPartition, RemoteRead | EngineError]:
    """Batches of many partitions the node at `url` leads, each from its position, in one
    consumer fetch (replication.session_wire, replica -1), long-polling up to `timeout_ms`
    until any has some; each partition and the whole within `max_bytes`. Per partition its read
    or its error (OffsetOutOfRange carries the leader's log bounds). A refused request raises
    RemoteError."""
    request = session_wire.consumer_request(positions, timeout_ms, max_bytes, isolation)
    answer = await forwarder.forward(
        url,
        "POST",
        SESSION_FETCH_ROUTE,
        {"Content-Type": SESSION_FETCH},
        session_wire.encode_request(request),
        timeout_ms,
    )
    if answer.status != 200:
        raise RemoteError(answer.status, orjson.loads(answer.body) if answer.body else {})
    try:
        parts = session_wire.decode_answer(answer.body).partitions
    except session_wire.MalformedSessionFetch as exc:
        raise ReplicationError(f"{url}: a malformed fetch answer: {exc}") from None
    out: dict[TopicPartition, RemoteRead | EngineError] = {}
    for key, position in positions.items():
        part = parts.get(key)
        if part is None:
            out[key] = ReplicationError(f"{url} answered nothing for {key[0]}-{key[1]}")
        elif part.error_status:
            out[key] = error_of(part.error_status, part.error_body)
        else:
            out[key] = RemoteRead(position, memoryview(part.records), part.high_watermark)
    return out


async def offset(
    forwarder: ForwardClient,
    url: str,
    topic: str,
    partition: int,
    at: str | int,
    isolation: Isolation = Isolation.READ_UNCOMMITTED,
) -> int:
    """The leader's offset for `at`: earliest, latest or a timestamp, as a reader at
    `isolation` has it (`replication.fetch_limits.latest_offset`)."""
    query = f"?timestamp={at}"
    if isolation is Isolation.READ_COMMITTED:
        query += f"&isolation={isolation.value}"
    answer = await forwarder.forward(
        url, "GET", _path(topic, partition, "offsets") + query, {}, b""
    )
    doc = orjson.loads(answer.body) if answer.body else {}
    if answer.status != 200:
        raise RemoteError(answer.status, doc)
    return int(doc["offset"])
