"""Server-Sent Events: `GET /v1/topics/{topic}/events` streams a topic's committed records to a
browser's EventSource (or curl -N), one event per record, resumable from any event's id.

Each partition is read by a task of its own wherever it is led (groups.partition_reader); the
answer is written one chunk at a time, and the next is read only once the client has taken
the last: a stream holds at most one read per partition and one chunk. A client that takes
nothing for SLOW_READER_S is told so in a last event and cut off.

The event id is a cursor of every partition's next offset, `0-17.1-4` (partition-offset pairs,
ascending partitions): EventSource sends it back as `Last-Event-ID` when it reconnects, and a
first connection may give one as `cursor`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, replace
from typing import Any, Literal

import orjson
from aiohttp import web

from engine import batch as fmt
from engine.errors import (
    EngineError,
    IsolationUnavailable,
    OffsetOutOfRange,
    UnknownPartition,
    UnknownTopic,
)
from engine.producer_state import Isolation
from gateway.api.event_cursor import format_cursor, parse_cursor
from gateway.api.fetch import isolation_of, refuse_when_full
from gateway.api.group_events import GroupStream, group_events
from gateway.api.groups import DEFAULT_SESSION_TIMEOUT_MS, valid_group_id
from gateway.auth.middleware import require
from gateway.formats import codecs
from gateway.formats.decoded import decode_values, decoded_records
from gateway.http import sse
from gateway.http.params import int_param
from gateway.http.problem import Problem, bad_request
from gateway.state import Gateway, gateway_of
from groups.partition_reader import PartitionReader, out_of_range_start
from groups.record_filter import RecordFilter
from replication.errors import ReplicationError
from schemas.decoding import ValueDecoder

DEFAULT_HEARTBEAT_MS = 15_000  # a comment line this often keeps proxies from closing the stream
MIN_READ_BYTES = 64 * 1024  # a partition's read, however many partitions share the budget
MAX_FILTER_HEADERS = 16
READ_WAIT_MS = 30_000  # one long-poll of a partition, then another
RETRY_FIRST_S, RETRY_MAX_S = 0.1, 5.0  # a partition without a reachable leader waits, doubling
log = logging.getLogger(__name__)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/v1/topics/{topic}/events", events)


@dataclass(slots=True)
class _Read:
    """A partition's batches, read at `position` (its reader goes on from `next_offset`)."""

    partition: int
    position: int
    data: memoryview


@dataclass(slots=True)
class _Gap:
    """A partition's position fell out of its log (retention, or truncation): it goes on at
    `to`."""

    partition: int
    missed_from: int
    to: int


@dataclass(slots=True)
class _End:
    """The stream cannot go on (its topic was deleted, say): the problem it ends with."""

    problem: Problem


_Item = _Read | _Gap | _End


async def events(request: web.Request) -> web.StreamResponse:
    """Stream the topic's records as Server-Sent Events until the client goes."""
    gateway = gateway_of(request)
    settings = gateway.settings
    topic = request.match_info["topic"]
    if (
        codecs.negotiate(request.headers.get("Accept", ""), (sse.EVENT_STREAM,), sse.EVENT_STREAM)
        is None
    ):
        raise Problem(406, "NOT_ACCEPTABLE", f"this route answers {sse.EVENT_STREAM} only")
    spec = gateway.replicas.topic(topic)
    keep = _filter(request)
    heartbeat_ms = int_param(request, "heartbeat_ms", DEFAULT_HEARTBEAT_MS, 100, 300_000)
    max_events = int_param(request, "max_events", 0, 0, 2**31 - 1)
    max_bytes = int_param(
        request, "max_bytes", settings.default_fetch_bytes, 1, settings.max_fetch_bytes
    )
    decode = decode_values(request.query)
    isolation = isolation_of(request.query)
    if "group" in request.query:
        ask = _group_stream(request, topic, spec.partitions, keep, heartbeat_ms, max_events)
        refuse_when_full(gateway.notifier, settings)
        return await group_events(
            request,
            gateway,
            replace(ask, max_bytes=max_bytes, decode_values=decode, isolation=isolation),
        )
    wanted = _partitions(request.query.get("partitions"), spec.partitions)
    raw_cursor = request.headers.get("Last-Event-ID") or request.query.get("cursor")
    cursor = {} if not raw_cursor else parse_cursor(raw_cursor, spec.partitions)
    partitions = range(spec.partitions) if wanted is None else wanted
    start = _start(request)
    refuse_when_full(gateway.notifier, settings)
    reader = PartitionReader(gateway.replicas, gateway.forwarder)
    positions = {
        p: cursor[p] if p in cursor else await reader.offset(topic, p, start, isolation)
        for p in partitions
    }
    response = web.StreamResponse(headers=sse.HEADERS)
    await response.prepare(request)
    writer = sse.EventWriter(response, topic)
    stream = _Stream(
        gateway,
        reader,
        topic,
        positions,
        keep,
        max(MIN_READ_BYTES, max_bytes // len(positions)),
        gateway.value_decoder if decode else None,
        isolation,
    )
    try:
        await stream.run(writer, heartbeat_ms / 1000, max_events)
    finally:
        stream.stop()
    return writer.finish(request)


class _Stream:
    """One client's stream: a reader task per partition, and the writer (the handler)."""

    def __init__(
        self,
        gateway: Gateway,
        reader: PartitionReader,
        topic: str,
        positions: dict[int, int],
        keep: RecordFilter,
        read_bytes: int,
        decoder: ValueDecoder | None,
        isolation: Isolation,
    ) -> None:
        self.gateway = gateway
        self.isolation = isolation  # read_committed: below the LSO, aborted batches emptied
        self.decoder = decoder  # decode_values=schema
        self.reader = reader
        self.topic = topic
        self.positions = positions
        # Always a filter, even one that keeps everything: the C path of a fetch writes a
        # batch's JSON whole, and each event needs its record's offset for its id.
        self.keep = keep
        self.read_bytes = read_bytes
        # One item a partition at most waits here, and each reader holds at most one more.
        self.items: asyncio.Queue[_Item] = asyncio.Queue(maxsize=len(positions))
        self.tasks = [asyncio.create_task(self._read(p, o)) for p, o in positions.items()]

    def stop(self) -> None:
        for task in self.tasks:
            task.cancel()

    async def run(self, writer: sse.EventWriter, heartbeat_s: float, max_events: int) -> None:
        """Write events as the readers bring records, a heartbeat when there is none."""
        sent = 0
        if not await writer.send(b"retry: %d\n\n" % sse.RETRY_MS):
            return
        while not self.gateway.notifier.closing:
            try:
                async with asyncio.timeout(heartbeat_s):
                    item = await self.items.get()
            except TimeoutError:
                if not await writer.send(sse.HEARTBEAT):
                    return
                continue
            if isinstance(item, _End):
                await writer.send(sse.problem_event(item.problem))
                return
            if isinstance(item, _Gap):
                self.positions[item.partition] = item.to
                gap = {"partition": item.partition, "from": item.missed_from, "to": item.to}
                chunk = sse.event("gap", orjson.dumps(gap), format_cursor(self.positions))
            else:
                left = max_events - sent if max_events else 2**31
                records = self._records(item, left)
                if self.decoder is not None:
                    records = await decoded_records(self.decoder, records)
                chunk = self._events(item.partition, records)
                sent += len(records)
            if chunk and not await writer.send(chunk):
                return
            if max_events and sent >= max_events:
                return

    def _records(self, read: _Read, left: int) -> list[Any]:
        """A read's records past the stream's position (at most `left`); the position moves
        past them."""
        p = read.partition
        records, next_offset = codecs.fetched_records(
            read.data, self.positions[p], left, (self.topic, p), self.keep
        )
        self.positions[p] = next_offset
        return records

    def _events(self, p: int, records: list[Any]) -> bytes:
        """The events of a partition's records, each with its cursor."""
        before, after = self._cursor_around(p)
        out = []
        for record in records:
            offset = record["offset"] if isinstance(record, dict) else record.offset
            cursor = f"{before}{p}-{offset + 1}{after}"
            out.append(sse.event("record", codecs.encode_record(record), cursor))
        return b"".join(out)

    def _cursor_around(self, partition: int) -> tuple[str, str]:
        """The cursor's text before and after `partition`'s pair."""
        pairs = sorted(self.positions.items())
        before = "".join(f"{p}-{o}." for p, o in pairs if p < partition)
        after = "".join(f".{p}-{o}" for p, o in pairs if p > partition)
        return before, after

    async def _read(self, partition: int, position: int) -> None:
        """Read the partition from `position` on, forever: each read goes to the writer; a
        fault past the known ones ends the stream with a 500 event, and is logged."""
        try:
            await self._read_on(partition, position)
        except Exception:
            log.exception("reading %s-%d for an event stream failed", self.topic, partition)
            detail = "internal server error"
            await self.items.put(_End(Problem(500, "INTERNAL_ERROR", detail)))

    async def _read_on(self, partition: int, position: int) -> None:
        delay = RETRY_FIRST_S
        while True:
            try:
                got = await self.reader.read(
                    self.topic,
                    partition,
                    position,
                    self.read_bytes,
                    READ_WAIT_MS,
                    isolation=self.isolation,
                )
            except OffsetOutOfRange as exc:
                to = out_of_range_start(exc)
                await self.items.put(_Gap(partition, position, to))
                position = to
                continue
            except (UnknownTopic, UnknownPartition) as exc:
                await self.items.put(_End(Problem(404, exc.code, str(exc))))
                return
            except IsolationUnavailable as exc:  # no retry would read it at read_committed
                await self.items.put(_End(Problem(416, exc.code, str(exc))))
                return
            except (ReplicationError, EngineError, OSError) as exc:
                if self.gateway.notifier.closing:
                    self._closing()
                    return
                log.debug("reading %s-%d for an event stream: %r", self.topic, partition, exc)
                await asyncio.sleep(delay)
                delay = min(RETRY_MAX_S, delay * 2)
                continue
            delay = RETRY_FIRST_S
            if not got.data:
                if self.gateway.notifier.closing:
                    self._closing()
                    return
                continue
            await self.items.put(_Read(partition, position, got.data))
            position = max(position, _end_of(got.data))

    def _closing(self) -> None:
        """The node shuts down: end the stream (the client reconnects elsewhere or later)."""
        with contextlib.suppress(asyncio.QueueFull):
            self.items.put_nowait(_End(Problem(503, "SHUTTING_DOWN", "the node is shutting down")))


def _end_of(data: memoryview) -> int:
    """The offset after the last whole batch of `data`."""
    headers = fmt.scan(data, check_crc=False).headers
    return headers[-1][1].next_offset if headers else 0


def _partitions(raw: str | None, count: int) -> list[int] | None:
    """`partitions=0,2`: the partitions to stream (all of them when absent)."""
    if raw is None:
        return None
    try:
        chosen = sorted({int(p) for p in raw.split(",")})
    except ValueError:
        raise bad_request(
            f"partitions must be a comma-separated list of partition numbers, got {raw[:200]!r}",
            "INVALID_PARAMETER",
        ) from None
    if not chosen or chosen[0] < 0 or chosen[-1] >= count:
        raise Problem(
            404, "UNKNOWN_PARTITION", f"the topic has partitions 0..{count - 1}, not {raw[:200]!r}"
        )
    return chosen


def _group_stream(
    request: web.Request,
    topic: str,
    partitions: int,
    keep: RecordFilter,
    heartbeat_ms: int,
    max_events: int,
) -> GroupStream:
    """`group=NAME`: the stream joins that group (Read on it too). Its partitions are the
    group's to give, so a cursor, `partitions` and `timestamp` have no place; `offset` is
    where partitions without a committed offset start."""
    group = request.query["group"]
    if not valid_group_id(group):
        raise bad_request(
            "group must be 1 to 255 printable characters without '/'", "INVALID_GROUP_ID"
        )
    for name in ("cursor", "partitions", "timestamp"):
        if name in request.query:
            raise bad_request(
                f"{name} does not go with group: the group assigns the partitions and keeps "
                "their positions",
                "INVALID_PARAMETER",
            )
    require(request, "group", group, "read")
    settings = gateway_of(request).settings
    session_timeout_ms = int_param(
        request,
        "session_timeout_ms",
        DEFAULT_SESSION_TIMEOUT_MS,
        settings.group_min_session_timeout_ms,
        settings.group_max_session_timeout_ms,
    )
    resume_from = request.headers.get("Last-Event-ID")
    return GroupStream(
        group,
        topic,
        _start_of_group(request),
        session_timeout_ms,
        keep,
        heartbeat_ms,
        max_events,
        0,
        parse_cursor(resume_from, partitions) if resume_from else {},
    )


def _start_of_group(request: web.Request) -> str:
    """A group stream's `offset`: Kafka's auto.offset.reset, earliest or latest."""
    offset = request.query.get("offset", "latest")
    if offset not in ("earliest", "latest"):
        raise bad_request(
            f"offset must be earliest or latest, got {offset[:200]!r}", "INVALID_PARAMETER"
        )
    return offset


def _start(request: web.Request) -> Literal["earliest", "latest"] | int:
    """Where partitions without a cursor start: `offset=earliest|latest` (latest by default,
    as a tail), or the first record at or after `timestamp` (ms)."""
    if "timestamp" in request.query:
        return int_param(request, "timestamp", None, 0, 2**63 - 1)
    offset = request.query.get("offset", "latest")
    if offset == "earliest":
        return "earliest"
    if offset == "latest":
        return "latest"
    raise bad_request(
        f"offset must be earliest or latest, got {offset[:200]!r} (resume with a cursor)",
        "INVALID_PARAMETER",
    )


def _filter(request: web.Request) -> RecordFilter:
    """`key_prefix` and `header=NAME:VALUE` (repeated: every one must match)."""
    prefix = request.query.get("key_prefix")
    pairs = request.query.getall("header", [])
    if len(pairs) > MAX_FILTER_HEADERS:
        raise bad_request(f"at most {MAX_FILTER_HEADERS} header filters", "INVALID_PARAMETER")
    headers = []
    for pair in pairs:
        name, sep, value = pair.partition(":")
        if not sep or not name:
            raise bad_request(
                f"header filter {pair[:200]!r}: expected NAME:VALUE", "INVALID_PARAMETER"
            )
        headers.append((name, value.encode()))
    return RecordFilter(None if prefix is None else prefix.encode(), tuple(headers))
