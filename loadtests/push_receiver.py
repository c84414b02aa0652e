"""The endpoint of `loadtests.subscriptions_bench`: a process of its own that answers every POST
with 204 at once and counts what arrived, read from the request's head only (no body is
parsed): records from `webhook-id` (`topic/partition/offset` for one record,
`topic/partition/first-last` for a batch), and for a single-record CloudEvent the delay to the
arrival from its `ce-sent` if it has one (a record header `sent`: the producer's wall-clock send
time in milliseconds, with a fraction), else from its `ce-time` (the record's timestamp, whole
milliseconds). A bare asyncio Protocol on uvloop, as
`loadtests.floor_server`, so that the receiver costs little beside what it receives.

    python -m loadtests.push_receiver     # prints "listening on PORT" once it accepts

Besides `POST /hook`, two paths answer each delivery with replies, one 100-byte record a record
delivered, to the delivered records' partition (`loadtests.txn_bench`'s push pipeline):
`POST /reply` answers 200 with them as the produce API's JSON (a reply subscription produces
them), and `POST /produce/PORT/TOPIC` sends them to the gateway at 127.0.0.1:PORT itself, with
the `webhook-id` as the `Idempotency-Key`, before it answers 204 (500 if that produce failed).
A connection's answers keep its requests' order.

`GET /stats` answers the counts (`first_at` and `last_at` are CLOCK_MONOTONIC seconds, which
every process of the machine shares; `GET /stats?covered` adds, per `topic/partition`, the
offset ranges delivered, merged, to tell a record never delivered from one delivered twice);
`POST /reset` zeroes them.
"""

from __future__ import annotations

import asyncio
import bisect
import datetime
import re
import time
from collections.abc import Awaitable

import orjson
import uvloop

from loadtests.consumers import RawHttp
from loadtests.floor_server import LISTEN_BACKLOG, HttpRequests
from loadtests.rows import VALUE

MAX_LATENCIES = 500_000  # delays kept for the percentiles; later arrivals are counted only
MAX_PENDING = 64 << 20  # a client that sends more without a whole request is hung up on
WEBHOOK_ID = re.compile(rb"\r\nwebhook-id:[ \t]*([^\r]*)", re.IGNORECASE)
CE_TIME = re.compile(rb"\r\nce-time:[ \t]*([^\r]*)", re.IGNORECASE)
CE_SENT = re.compile(rb"\r\nce-sent:[ \t]*([^\r]*)", re.IGNORECASE)
NO_CONTENT = b"HTTP/1.1 204 No Content\r\n\r\n"
NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
JSON_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
FAILED = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n"


class Counts:
    """What arrived since the last reset."""

    def __init__(self) -> None:
        self.requests = 0
        self.records = 0
        self.first_at: float | None = None
        self.last_at: float | None = None
        self.latencies_ms: list[float] = []
        self.covered: dict[str, list[list[int]]] = {}  # "topic/partition" -> [first, last]s

    def arrived(self, message_id: str, ce_time: str | None, sent_ms: float | None = None) -> None:
        now = time.monotonic()
        if self.first_at is None:
            self.first_at = now
        self.last_at = now
        self.requests += 1
        self.records += records_in(message_id)
        where, _, offsets = message_id.rpartition("/")
        first, _, last = offsets.partition("-")
        if where and first.isdigit():
            cover(self.covered.setdefault(where, []), int(first), int(last or first))
        if len(self.latencies_ms) >= MAX_LATENCIES:
            return
        if sent_ms is not None:
            self.latencies_ms.append(time.time() * 1000 - sent_ms)
        elif ce_time is not None:
            sent = datetime.datetime.fromisoformat(ce_time).timestamp()
            self.latencies_ms.append((time.time() - sent) * 1000)


def records_in(message_id: str) -> int:
    """How many records a `webhook-id` names: `first-last` a batch's, an offset one."""
    first, sep, last = message_id.rpartition("/")[2].partition("-")
    if not sep:
        return 1
    return int(last) - int(first) + 1


def cover(ranges: list[list[int]], first: int, last: int) -> None:
    """Add the offsets `first`..`last` to sorted, disjoint, non-adjacent `ranges`."""
    at = bisect.bisect_left(ranges, [first, first])
    if at > 0 and ranges[at - 1][1] >= first - 1:
        at -= 1
    end = at
    low, high = first, last
    while end < len(ranges) and ranges[end][0] <= high + 1:
        low, high = min(low, ranges[end][0]), max(high, ranges[end][1])
        end += 1
    ranges[at:end] = [[low, high]]


def replies(message_id: str) -> bytes:
    """The produce API's JSON body of one reply for each record `message_id` names, to its
    partition."""
    partition = int(message_id.rsplit("/", 2)[1])
    record = orjson.Fragment(b'{"partition":%d,"value":%s}' % (partition, VALUE))
    return orjson.dumps({"records": [record] * records_in(message_id)})


class ReceiverProtocol(HttpRequests):
    """One connection: every whole request answered in order (HTTP/1.1 keep-alive); a POST to
    /hook counted and answered 204, /reply and /produce/PORT/TOPIC counted and answered with
    replies, GET /stats and POST /reset as above."""

    max_pending = MAX_PENDING

    def __init__(self, counts: list[Counts]) -> None:
        super().__init__()
        self.counts = counts  # one box: /reset replaces what every connection counts into
        self.tail: asyncio.Task[None] | None = None  # the last answer still to be written
        self.gateway: RawHttp | None = None  # /produce's connection, opened by its first

    def answer(self, head: bytes) -> None:
        assert self.transport is not None
        target = head.split(b" ", 2)[:2]
        if target[0] == b"POST" and (
            target[1] in (b"/hook", b"/reply") or target[1].startswith(b"/produce/")
        ):
            found = WEBHOOK_ID.search(head)
            message_id = "-/0" if found is None else found.group(1).decode()
            ce_time = CE_TIME.search(head)
            sent = CE_SENT.search(head)
            self.counts[0].arrived(
                message_id,
                None if ce_time is None else ce_time.group(1).decode(),
                None if sent is None else float(sent.group(1)),
            )
            if target[1] == b"/hook":
                self.in_order(NO_CONTENT)
            elif target[1] == b"/reply":
                body = replies(message_id)
                self.in_order(JSON_HEAD % len(body) + body)
            else:
                self.in_order(self.relay(target[1].decode(), message_id))
        elif target[0] == b"GET" and target[1].startswith(b"/stats"):
            counts = self.counts[0]
            body = orjson.dumps({
                "requests": counts.requests,
                "records": counts.records,
                "first_at": counts.first_at,
                "last_at": counts.last_at,
                "latencies_ms": counts.latencies_ms if b"latencies" in target[1] else [],
                "covered": counts.covered if b"covered" in target[1] else {},
            })  # fmt: skip
            self.transport.write(JSON_HEAD % len(body) + body)
        elif target == [b"POST", b"/reset"]:
            self.counts[0] = Counts()
            self.in_order(NO_CONTENT)
        else:
            self.in_order(NOT_FOUND)

    def in_order(self, answer: bytes | Awaitable[bytes]) -> None:
        """Write `answer` once every answer before it on this connection is written."""
        assert self.transport is not None
        if isinstance(answer, bytes) and (self.tail is None or self.tail.done()):
            self.transport.write(answer)
            return
        self.tail = asyncio.ensure_future(self._after(self.tail, answer))

    async def _after(
        self, previous: asyncio.Task[None] | None, answer: bytes | Awaitable[bytes]
    ) -> None:
        if previous is not None:
            await previous
        data = answer if isinstance(answer, bytes) else await answer
        assert self.transport is not None
        self.transport.write(data)

    async def relay(self, path: str, message_id: str) -> bytes:
        """Produce the replies to /produce/PORT/TOPIC's gateway with an Idempotency-Key; 204
        once it acknowledged them."""
        _, _, port, topic = path.split("/", 3)
        try:
            if self.gateway is None:
                self.gateway = await RawHttp.open(f"http://127.0.0.1:{port}")
            status, _, _ = await self.gateway.send(
                "POST",
                f"/v1/topics/{topic}/records",
                replies(message_id),
                headers={"Idempotency-Key": message_id},
            )
        except (OSError, asyncio.IncompleteReadError):  # the delivery is retried on a new one
            if self.gateway is not None:
                self.gateway.close()
            self.gateway = None
            return FAILED
        return NO_CONTENT if 200 <= status < 300 else FAILED

    def connection_lost(self, exc: Exception | None) -> None:
        if self.gateway is not None:
            self.gateway.close()


async def serve() -> None:
    counts = [Counts()]
    server = await asyncio.get_running_loop().create_server(
        lambda: ReceiverProtocol(counts), "127.0.0.1", 0, backlog=LISTEN_BACKLOG
    )
    print(f"listening on {server.sockets[0].getsockname()[1]}", flush=True)
    await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(serve())
