"""A consumer group's Server-Sent Events: `GET /v1/topics/{topic}/events?group=NAME` makes the
stream a member of the group, held by the server for as long as the client stays. Streams of
one group share the topic's partitions as any members do, and a rebalance moves partitions
between them.

The stream runs on the group's coordinator (another node's streams are relayed there). Its
member commits what it delivered once each answer's events are written, so a stream that
breaks hands its partitions on from the last event written. A reconnecting EventSource's
`Last-Event-ID` (its partitions' next offsets) takes those of them the new stream is given
back to where the browser was: events written but never received come again, none it had
come twice.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from engine.errors import EngineError
from engine.producer_state import Isolation
from gateway.api.event_cursor import format_cursor
from gateway.api.forwarding import relay_stream
from gateway.api.problems import from_engine_error
from gateway.formats import codecs
from gateway.formats.decoded import decoded_records
from gateway.http import sse
from gateway.http.problem import Problem
from gateway.state import Gateway
from groups.coordinator import GroupFetch, JoinRequest, RecordDecoder
from groups.errors import GroupError
from groups.record_filter import RecordFilter
from replication.errors import NotLeader
from replication.fetch_limits import FetchLimits

MAX_RECORDS = 1000  # records an answer of the member's brings at most


@dataclass(frozen=True)
class GroupStream:
    """What a group's event stream was asked for."""

    group: str
    topic: str
    auto_offset_reset: str
    session_timeout_ms: int
    keep: RecordFilter
    heartbeat_ms: int
    max_events: int
    max_bytes: int
    resume: dict[int, int]  # Last-Event-ID: where the client was, per partition
    decode_values: bool = False  # values in the registry's wire format as their JSON
    isolation: Isolation = Isolation.READ_UNCOMMITTED  # Kafka's isolation.level


async def group_events(
    request: web.Request, gateway: Gateway, ask: GroupStream
) -> web.StreamResponse:
    """Join the group, stream what the member is given until the client goes, then leave."""
    coordinator = gateway.groups
    join = JoinRequest((ask.topic,), ask.session_timeout_ms, ask.auto_offset_reset, False)
    try:
        _, member = coordinator.join(ask.group, join)
    except NotLeader as exc:
        return await relay_stream(request, exc)
    member_id = member.member_id
    try:
        await coordinator.durable(ask.group, gateway.settings.default_produce_timeout_ms)
        response = web.StreamResponse(headers=sse.HEADERS)
        await response.prepare(request)
        writer = sse.EventWriter(response, f"{ask.topic} for group {ask.group}")
        await _Member(gateway, ask, member_id, writer).run()
    finally:
        with contextlib.suppress(EngineError):
            coordinator.leave(ask.group, member_id)
    return writer.finish(request)


class _Member:
    """The stream's member: fetch, write the answer's events, commit them, fetch again."""

    def __init__(
        self, gateway: Gateway, ask: GroupStream, member_id: str, writer: sse.EventWriter
    ) -> None:
        self.gateway = gateway
        self.ask = ask
        self.member_id = member_id
        self.writer = writer
        self.resume = dict(ask.resume)  # partitions whose Last-Event-ID position is not met yet
        self.positions: dict[int, int] = {}  # next offsets of what this stream delivered
        self.assignment: list[dict[str, Any]] | None = None
        # Always a filter, even one that keeps everything: the C path of a fetch writes a
        # batch's JSON whole, and each event needs its record's offset for its id.
        self.decode: RecordDecoder = functools.partial(_decode_kept, ask.keep)

    async def run(self) -> None:
        coordinator = self.gateway.groups
        ask = self.ask
        if not await self.writer.send(b"retry: %d\n\n" % sse.RETRY_MS):
            return
        sent = 0
        while not self.gateway.notifier.closing:
            left = ask.max_events - sent if ask.max_events else MAX_RECORDS
            limits = FetchLimits(
                min(MAX_RECORDS, left), ask.max_bytes, 1, ask.heartbeat_ms, ask.isolation
            )
            try:
                answer = await coordinator.fetch(
                    ask.group, self.member_id, limits, decode=self.decode
                )
            except EngineError as exc:
                await self.writer.send(sse.problem_event(from_engine_error(exc)))
                return
            chunks = []
            if answer.assignment != self.assignment:
                self.assignment = answer.assignment
                owned = [p for a in answer.assignment for p in a["partitions"]]
                doc = {"generation": answer.generation, "partitions": owned}
                chunks.append(sse.event("assignment", orjson.dumps(doc)))
            records = await self._resumed(answer)
            if ask.decode_values:
                records = await decoded_records(self.gateway.value_decoder, records)
            for record in records:
                chunks.append(self._event(record))
            sent += len(records)
            if not chunks:
                chunks.append(sse.HEARTBEAT)
            if not await self.writer.send(b"".join(chunks)):
                return
            try:
                coordinator.commit(ask.group, self.member_id, None, None)
            except EngineError as exc:
                await self.writer.send(sse.problem_event(from_engine_error(exc)))
                return
            if ask.max_events and sent >= ask.max_events:
                return
        await self.writer.send(
            sse.problem_event(Problem(503, "SHUTTING_DOWN", "the node is shutting down"))
        )

    async def _resumed(self, answer: GroupFetch) -> list[Any]:
        """The answer's records to write, once each partition named by Last-Event-ID is
        sought back to where the client was (forward past what it received, or back to what
        it never got); this answer's records of those partitions come again, from there."""
        if not self.resume:
            return answer.records
        assigned = {p for topic in answer.assignment for p in topic["partitions"]}
        sought = set()
        for partition in sorted(assigned & set(self.resume)):
            target: list[tuple[tuple[str, int], object]] = [
                ((self.ask.topic, partition), self.resume[partition])
            ]
            try:
                await self.gateway.groups.seek(self.ask.group, self.member_id, target)
            except GroupError as exc:
                if exc.code == "PARTITION_NOT_ASSIGNED":
                    continue  # still its previous owner's: sought once it is handed over
            except EngineError:
                pass  # out of the log now: it goes on from the group's position
            else:
                sought.add(partition)
            del self.resume[partition]
        return [r for r in answer.records if _where(r)[0] not in sought]

    def _event(self, record: Any) -> bytes:
        partition, offset = _where(record)
        self.positions[partition] = offset + 1
        cursor = format_cursor(self.positions)
        return sse.event("record", codecs.encode_record(record), cursor)


def _decode_kept(
    keep: RecordFilter, data: memoryview, start: int, most: int, source: tuple[str, int]
) -> tuple[list[Any], int]:
    """The member's records that the stream's filter keeps (the others still pass)."""
    return codecs.fetched_records(data, start, most, source, keep)


def _where(record: Any) -> tuple[int, int]:
    """A fetched record's partition and offset (a dict, or the common path's struct)."""
    if isinstance(record, dict):
        return record["partition"], record["offset"]
    return record.partition, record.offset
