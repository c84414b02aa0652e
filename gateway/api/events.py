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
from dataclasses import dataclass
from typing import Literal

import orjson
from aiohttp import HttpVersion, web

from engine import batch as fmt
from engine.errors import EngineError, OffsetOutOfRange, UnknownPartition, UnknownTopic
from gateway.api.fetch import refuse_when_full
from gateway.formats import codecs
from gateway.http.params import int_param
from gateway.http.problem import Problem, bad_request
from gateway.state import Gateway, gateway_of
from groups.partition_reader import PartitionReader, out_of_range_start
from groups.record_filter import RecordFilter
from replication.errors import ReplicationError

EVENT_STREAM = "text/event-stream"
RETRY_MS = 1000  # how soon a disconnected EventSource comes back
SLOW_READER_S = 30.0  # a chunk the client has not taken by then ends its stream
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
    if codecs.negotiate(request.headers.get("Accept", ""), (EVENT_STREAM,), EVENT_STREAM) is None:
        raise Problem(406, "NOT_ACCEPTABLE", f"this route answers {EVENT_STREAM} only")
    spec = gateway.replicas.topic(topic)
    keep = _filter(request)
    heartbeat_ms = int_param(request, "heartbeat_ms", DEFAULT_HEARTBEAT_MS, 100, 300_000)
    max_events = int_param(request, "max_events", 0, 0, 2**31 - 1)
    max_bytes = int_param(
        request, "max_bytes", settings.default_fetch_bytes, 1, settings.max_fetch_bytes
    )
    wanted = _partitions(request.query.get("partitions"), spec.partitions)
    raw_cursor = request.headers.get("Last-Event-ID") or request.query.get("cursor")
    cursor = {} if not raw_cursor else parse_cursor(raw_cursor, spec.partitions)
    partitions = range(spec.partitions) if wanted is None else wanted
    start = _start(request)
    refuse_when_full(gateway.notifier, settings)
    reader = PartitionReader(gateway.replicas, gateway.forwarder)
    positions = {
        p: cursor[p] if p in cursor else await reader.offset(topic, p, start) for p in partitions
    }
    response = web.StreamResponse(
        headers={
            "Content-Type": EVENT_STREAM,
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",  # nginx: pass events on as they come
        }
    )
    await response.prepare(request)
    stream = _Stream(
        gateway, reader, topic, positions, keep, max(MIN_READ_BYTES, max_bytes // len(positions))
    )
    try:
        await stream.run(response, heartbeat_ms / 1000, max_events)
    finally:
        stream.stop()
    if stream.cut_off:
        # Ended as when the client goes: HTTP/1.1 drops the connection and what it buffered,
        # HTTP/2 resets the stream (the connection's other streams go on).
        if request.version < HttpVersion(2, 0) and request.transport is not None:
            request.transport.abort()
        raise asyncio.CancelledError
    return response


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
    ) -> None:
        self.gateway = gateway
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
        self.cut_off = False  # the client took nothing for SLOW_READER_S

    def stop(self) -> None:
        for task in self.tasks:
            task.cancel()

    async def run(self, response: web.StreamResponse, heartbeat_s: float, max_events: int) -> None:
        """Write events as the readers bring records, a heartbeat when there is none."""
        sent = 0
        if not await self._send(response, b"retry: %d\n\n" % RETRY_MS):
            return
        while not self.gateway.notifier.closing:
            try:
                item = await asyncio.wait_for(self.items.get(), heartbeat_s)
            except TimeoutError:
                if not await self._send(response, b": heartbeat\n\n"):
                    return
                continue
            if isinstance(item, _End):
                await self._send(
                    response, _event("problem", orjson.dumps(_problem_doc(item.problem)))
                )
                return
            if isinstance(item, _Gap):
                self.positions[item.partition] = item.to
                gap = {"partition": item.partition, "from": item.missed_from, "to": item.to}
                chunk = _event("gap", orjson.dumps(gap), self._cursor())
            else:
                left = max_events - sent if max_events else 2**31
                chunk, count = self._records(item, left)
                sent += count
            if chunk and not await self._send(response, chunk):
                return
            if max_events and sent >= max_events:
                return

    def _records(self, read: _Read, left: int) -> tuple[bytes, int]:
        """The events of a read's records past the stream's position (at most `left`)."""
        p = read.partition
        records, next_offset = codecs.fetched_records(
            read.data, self.positions[p], left, (self.topic, p), self.keep
        )
        self.positions[p] = next_offset
        before, after = self._cursor_around(p)
        out = []
        for record in records:
            offset = record["offset"] if isinstance(record, dict) else record.offset
            cursor = f"{before}{p}-{offset + 1}{after}"
            out.append(_event("record", codecs.encode_record(record), cursor))
        return b"".join(out), len(records)

    def _cursor(self) -> str:
        return ".".join(f"{p}-{o}" for p, o in sorted(self.positions.items()))

    def _cursor_around(self, partition: int) -> tuple[str, str]:
        """The cursor's text before and after `partition`'s pair."""
        pairs = sorted(self.positions.items())
        before = "".join(f"{p}-{o}." for p, o in pairs if p < partition)
        after = "".join(f".{p}-{o}" for p, o in pairs if p > partition)
        return before, after

    async def _send(self, response: web.StreamResponse, chunk: bytes) -> bool:
        """Write a chunk; False once the client is gone or too slow to take it (then told so,
        if it ever reads again, and cut off)."""
        try:
            await asyncio.wait_for(response.write(chunk), SLOW_READER_S)
        except TimeoutError:
            detail = f"the client took no events for {SLOW_READER_S:.0f} s"
            slow = Problem(503, "SLOW_READER", detail)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    response.write(_event("problem", orjson.dumps(_problem_doc(slow)))), 1.0
                )
            log.info("an event stream of %s was cut off: %s", self.topic, detail)
            self.cut_off = True
            return False
        except (ConnectionError, RuntimeError):  # the client went (aiohttp: closing transport)
            return False
        return True

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
                    self.topic, partition, position, self.read_bytes, READ_WAIT_MS
                )
            except OffsetOutOfRange as exc:
                to = out_of_range_start(exc)
                await self.items.put(_Gap(partition, position, to))
                position = to
                continue
            except (UnknownTopic, UnknownPartition) as exc:
                await self.items.put(_End(Problem(404, exc.code, str(exc))))
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


def _event(kind: str, data: bytes, cursor: str | None = None) -> bytes:
    """One event; a line break inside the data (stored JSON may hold some) starts another
    `data:` line, which EventSource joins back with a newline."""
    lines = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n").replace(b"\n", b"\ndata: ")
    head = b"event: %s\n" % kind.encode()
    if cursor is not None:
        head = b"id: %s\n%s" % (cursor.encode(), head)
    return b"%sdata: %s\n\n" % (head, lines)


def _end_of(data: memoryview) -> int:
    """The offset after the last whole batch of `data`."""
    headers = fmt.scan(data, check_crc=False).headers
    return headers[-1][1].next_offset if headers else 0


def _problem_doc(problem: Problem) -> dict[str, object]:
    return {"status": problem.status, "code": problem.code, "detail": problem.detail}


def parse_cursor(raw: str, partitions: int) -> dict[int, int]:
    """A cursor's positions; 400 INVALID_CURSOR for anything but partition-offset pairs of the
    topic's partitions."""
    out: dict[int, int] = {}
    for pair in raw.split("."):
        p, sep, o = pair.partition("-")
        if not (sep and _digits(p, 9) and _digits(o, 19)):
            raise bad_request(
                f"cursor {raw[:200]!r}: expected PARTITION-OFFSET pairs joined by '.'",
                "INVALID_CURSOR",
            )
        partition, offset = int(p), int(o)
        if partition >= partitions or partition in out:
            raise bad_request(
                f"cursor {raw[:200]!r}: partition {partition} is named twice or is not one of "
                f"the topic's 0..{partitions - 1}",
                "INVALID_CURSOR",
            )
        if offset >= 2**63:
            raise bad_request(
                f"cursor {raw[:200]!r}: offset {offset} is too large", "INVALID_CURSOR"
            )
        out[partition] = offset
    return out


def _digits(text: str, most: int) -> bool:
    return 0 < len(text) <= most and text.isascii() and text.isdigit()


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
