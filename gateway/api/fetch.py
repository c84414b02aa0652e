"""The limits every fetch (a partition's or a group member's) takes from its query, the
parked-fetch limit, and a partition fetch's answer (shared by the route and the fast routes). The
long-poll itself is the replica manager's."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine import batch as fmt
from engine.log import ReadResult
from engine.notify import ChangeNotifier
from engine.producer_state import Isolation
from gateway.formats import codecs
from gateway.formats.decoded import decoded_records
from gateway.http.params import parse_int, query_int
from gateway.http.problem import Problem, bad_request
from gateway.settings import Settings
from replication.fetch_limits import FetchLimits, latest_offset
from replication.partition import Partition
from schemas.decoding import ValueDecoder

if TYPE_CHECKING:  # the gateway's state holds the group coordinator, which uses the limits
    from gateway.state import Gateway

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def limits_of(query: Mapping[str, str], settings: Settings) -> FetchLimits:
    """A fetch's max_records, max_bytes, min_bytes and timeout_ms from its query, with Kafka's
    defaults, bounded."""
    return FetchLimits(
        max_records=query_int(
            query, "max_records", settings.default_fetch_records, 1, settings.max_fetch_records
        ),
        max_bytes=query_int(
            query, "max_bytes", settings.default_fetch_bytes, 1, settings.max_fetch_bytes
        ),
        min_bytes=query_int(query, "min_bytes", 1, 0, settings.max_fetch_bytes),
        timeout_ms=query_int(
            query, "timeout_ms", settings.default_fetch_wait_ms, 0, settings.max_wait_ms
        ),
        isolation=isolation_of(query),
    )


ISOLATIONS = {i.value: i for i in (Isolation.READ_UNCOMMITTED, Isolation.READ_COMMITTED)}


def isolation_of(query: Mapping[str, str]) -> Isolation:
    """A fetch's `isolation` (Kafka's isolation.level): read_uncommitted (the default) or
    read_committed."""
    raw = query.get("isolation", Isolation.READ_UNCOMMITTED.value)
    found = ISOLATIONS.get(raw)
    if found is None:
        raise bad_request(
            f"isolation must be read_uncommitted or read_committed, got {raw!r}",
            "INVALID_PARAMETER",
        )
    return found


def fetch_position(query: Mapping[str, str], settings: Settings) -> tuple[int | str, FetchLimits]:
    """A partition fetch's offset (or earliest/latest) and limits from its query (the route's
    and the fast routes')."""
    return parse_offset(query.get("offset", "earliest")), limits_of(query, settings)


def parse_offset(raw: str) -> int | str:
    """A fetch's `offset`: a 64-bit integer, `earliest` or `latest` (400 otherwise)."""
    if raw in ("earliest", "latest"):
        return raw
    offset = parse_int(raw)
    if offset is None or not INT64_MIN <= offset <= INT64_MAX:
        raise bad_request(
            f"offset must be a 64-bit integer, earliest or latest, got {raw!r}",
            "INVALID_PARAMETER",
        )
    return offset


def start_offset(
    offset: int | str, leader: Partition, isolation: Isolation = Isolation.READ_UNCOMMITTED
) -> int:
    """Where a fetch starts: the offset asked for, or the leader's log start, or where `latest`
    is at the fetch's isolation (the last stable offset at read_committed)."""
    if offset == "earliest":
        return leader.log_start_offset
    if offset == "latest":
        return latest_offset(leader, isolation)
    return int(offset)


@dataclass(slots=True)
class FetchAnswer:
    """What a partition fetch answers: the body in its media type and where to go on."""

    content_type: str
    body: bytes
    next_offset: int
    high_watermark: int
    last_stable_offset: int = -1  # a read_committed fetch's

    @property
    def headers(self) -> dict[str, str]:
        headers = {
            "Sluice-Next-Offset": str(self.next_offset),
            "Sluice-High-Watermark": str(self.high_watermark),
        }
        if self.last_stable_offset >= 0:
            headers["Sluice-Last-Stable-Offset"] = str(self.last_stable_offset)
        return headers


async def read_partition(
    gateway: Gateway,
    topic: str,
    partition: int,
    offset: int,
    limits: FetchLimits,
    accept: str,
    decoder: ValueDecoder | None = None,
) -> FetchAnswer:
    """Fetch from a partition led here (waiting as the limits say) and encode the records in
    the media type asked for; the records and bytes go in the topic's traffic. With `decoder`
    (`decode_values=schema`, JSON or NDJSON), values are decoded by the schema registry."""
    result = await gateway.replicas.fetch(
        topic, partition, offset, *_bounds(limits, accept), isolation=limits.isolation
    )
    if decoder is None:
        return _answer(gateway, topic, offset, result, limits, accept)
    records, next_offset = codecs.fetched_records(result.data, offset, limits.max_records)
    gateway.metrics.traffic.fetched(topic, len(records), len(result.data))
    records = await decoded_records(decoder, records)
    return _json_answer(accept, records, next_offset, result, limits)


async def read_in_sync(
    gateway: Gateway,
    topic: str,
    partition: int,
    offset: int,
    limits: FetchLimits,
    accept: str,
) -> FetchAnswer:
    """`read_partition` from this node's in-sync replica, leader or not (a consumer of its
    rack, KIP-392)."""
    result = await gateway.replicas.fetch_in_sync(
        topic, partition, offset, *_bounds(limits, accept), isolation=limits.isolation
    )
    return _answer(gateway, topic, offset, result, limits, accept)


def read_from_sibling(
    gateway: Gateway,
    topic: str,
    partition: int,
    offset: int | str,
    limits: FetchLimits,
    accept: str,
) -> FetchAnswer | None:
    """`read_partition` of a partition a sibling worker leads, from its files, when they hold
    what it would answer at once (replication.sibling_replicas); None: forward the fetch to it."""
    if limits.isolation is Isolation.READ_COMMITTED:
        return None  # the last stable offset is the leader's to know
    found = gateway.replicas.fetch_from_sibling(topic, partition, offset, *_bounds(limits, accept))
    if found is None:
        return None
    start, result = found
    return _answer(gateway, topic, start, result, limits, accept)


def _bounds(limits: FetchLimits, accept: str) -> tuple[int, int, int, int | None]:
    """max_bytes, min_bytes, timeout_ms and max_records of a read (a binary answer sends whole
    batches: no record limit)."""
    max_records = None if accept == codecs.RECORD_BATCH else limits.max_records
    return limits.max_bytes, limits.min_bytes, limits.timeout_ms, max_records


def _answer(
    gateway: Gateway,
    topic: str,
    offset: int,
    result: ReadResult,
    limits: FetchLimits,
    accept: str,
) -> FetchAnswer:
    """A partition read at `offset`, encoded in the media type asked for and counted in the
    topic's traffic."""
    data = result.data
    traffic = gateway.metrics.traffic
    if accept == codecs.RECORD_BATCH:
        batches = fmt.scan(data, check_crc=False).headers
        next_offset = batches[-1][1].next_offset if batches else offset
        traffic.fetched(topic, sum(h.record_count for _, h in batches), len(data))
        return FetchAnswer(
            accept,
            bytes(data),
            max(offset, next_offset),
            result.high_watermark,
            _lso(result, limits),
        )
    records, next_offset = codecs.fetched_records(data, offset, limits.max_records)
    traffic.fetched(topic, len(records), len(data))
    return _json_answer(accept, records, next_offset, result, limits)


def _lso(result: ReadResult, limits: FetchLimits) -> int:
    """The last stable offset a read_committed answer names (-1: not one)."""
    if limits.isolation is not Isolation.READ_COMMITTED:
        return -1
    return result.last_stable_offset if result.last_stable_offset >= 0 else result.high_watermark


def _json_answer(
    accept: str, records: list[Any], next_offset: int, result: ReadResult, limits: FetchLimits
) -> FetchAnswer:
    hw = result.high_watermark
    if accept == codecs.NDJSON:
        body = codecs.encode_ndjson_body(records)
    else:
        body = codecs.encode_json_body(records, next_offset, hw)
    return FetchAnswer(accept, body, next_offset, hw, _lso(result, limits))


def refuse_when_full(notifier: ChangeNotifier, settings: Settings) -> None:
    """503 with Retry-After once max_parked_fetches long-polls are parked on this node."""
    if notifier.parked >= settings.max_parked_fetches:
        raise Problem(
            503,
            "TOO_MANY_WAITING_FETCHES",
            "too many long-polls are parked on this node; retry shortly",
            headers={"Retry-After": "1"},
        )
