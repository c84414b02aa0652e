"""A group member's partitions that another node leads: read from that leader over the
internal network, as any consumer would (committed batches only), for the coordinator."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

import orjson

from engine.errors import OffsetOutOfRange
from replication.forward_client import ForwardClient, RemoteError
from replication.node_contract import HIGH_WATERMARK, RECORD_BATCH


@dataclass(frozen=True)
class RemoteRead:
    """What one fetch from a partition's leader saw at `position`."""

    position: int
    data: memoryview
    high_watermark: int


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
) -> RemoteRead:
    """Batches from `position` at the leader, long-polling up to `timeout_ms` for one.
    OffsetOutOfRange carries the leader's log bounds."""
    query = f"?offset={position}&max_bytes={max_bytes}&timeout_ms={timeout_ms}"
    answer = await forwarder.forward(
        url, "GET", _path(topic, partition, "records") + query, {"Accept": RECORD_BATCH}, b""
    )
    if answer.status != 200:
        problem = orjson.loads(answer.body) if answer.body else {}
        if answer.status == 416:
            raise OffsetOutOfRange(
                position, int(problem["log_start_offset"]), int(problem["log_end_offset"])
            )
        raise RemoteError(answer.status, problem)
    high_watermark = int(answer.headers.get(HIGH_WATERMARK, position))
    return RemoteRead(position, memoryview(answer.body), high_watermark)


async def offset(
    forwarder: ForwardClient, url: str, topic: str, partition: int, at: str | int
) -> int:
    """The leader's offset for `at`: earliest, latest (its high watermark) or a timestamp."""
    answer = await forwarder.forward(
        url, "GET", _path(topic, partition, "offsets") + f"?timestamp={at}", {}, b""
    )
    doc = orjson.loads(answer.body) if answer.body else {}
    if answer.status != 200:
        raise RemoteError(answer.status, doc)
    return int(doc["offset"])
