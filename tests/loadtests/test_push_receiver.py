"""The push receiver's record of what was delivered (offset ranges per partition, merged) and
its answers with replies (in the requests' order, a produce with its Idempotency-Key)."""

from __future__ import annotations

import asyncio
import time
from typing import cast

import orjson
import pytest

from loadtests.push_receiver import Counts, ReceiverProtocol, cover
from loadtests.rows import VALUE


def test_cover_merges_adjacent_and_overlapping_ranges() -> None:
    ranges: list[list[int]] = []
    for first, last in [(10, 19), (0, 4), (30, 30), (5, 9), (18, 25), (27, 28), (26, 26)]:
        cover(ranges, first, last)
    assert ranges == [[0, 28], [30, 30]]
    cover(ranges, 0, 40)
    assert ranges == [[0, 40]]


def test_arrivals_cover_batches_and_single_records_per_partition() -> None:
    counts = Counts()
    for message_id in ["t/0/0-99", "t/1/0", "t/0/100-149", "t/1/1", "t/0/50-60", "t/1/3"]:
        counts.arrived(message_id, None)
    assert counts.records == 150 + 11 + 3
    assert counts.covered == {"t/0": [[0, 149]], "t/1": [[0, 1], [3, 3]]}


def test_a_delay_is_taken_from_the_sent_header_when_there_is_one() -> None:
    counts = Counts()
    counts.arrived("t/0/0", "2000-01-01T00:00:00.000Z", time.time() * 1000 - 5)
    counts.arrived("t/0/1", "2000-01-01T00:00:00.000Z")
    from_sent, from_time = counts.latencies_ms
    assert 5 <= from_sent < 60_000  # the producer's send time, not the record's timestamp
    assert from_time > 20 * 365 * 86_400_000


class _HeldGateway(asyncio.Protocol):
    """Stands in for the gateway a /produce path sends to: takes one request, answers `status`
    once `release` is set."""

    def __init__(self, got: asyncio.Queue[bytes], release: asyncio.Event, status: int) -> None:
        self.got, self.release, self.status = got, release, status

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.got.put_nowait(data)
        self.answering = asyncio.ensure_future(self._answer())

    async def _answer(self) -> None:
        await self.release.wait()
        self.transport.write(b"HTTP/1.1 %d X\r\nContent-Length: 2\r\n\r\n{}" % self.status)


def _post(path: str, message_id: str) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nwebhook-id: {message_id}\r\nContent-Length: 2\r\n\r\n"
    return head.encode() + b"{}"


@pytest.mark.parametrize("status", [200, 500])
async def test_replies_keep_the_requests_order_and_a_produce_carries_its_key(status: int) -> None:
    """A /produce answer waits for the gateway's; a /reply and a /hook pipelined after it are
    answered after it, in order; the produce's replies go to the delivered partition with the
    webhook-id as the Idempotency-Key, and a failed produce answers 500."""
    loop = asyncio.get_running_loop()
    got: asyncio.Queue[bytes] = asyncio.Queue()
    release = asyncio.Event()
    gateway = await loop.create_server(lambda: _HeldGateway(got, release, status), "127.0.0.1", 0)
    receiver = await loop.create_server(lambda: ReceiverProtocol([Counts()]), "127.0.0.1", 0)
    gateway_port = gateway.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", receiver.sockets[0].getsockname()[1]
    )
    writer.write(
        _post(f"/produce/{gateway_port}/out", "in/3/10-12")
        + _post("/reply", "in/3/13")
        + _post("/hook", "in/3/14")
    )
    produced = await got.get()
    assert b"Idempotency-Key: in/3/10-12\r\n" in produced
    records = orjson.loads(produced.split(b"\r\n\r\n", 1)[1])["records"]
    assert [r["partition"] for r in records] == [3, 3, 3]
    release.set()
    first = await reader.readuntil(b"\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 204" if status == 200 else b"HTTP/1.1 500")
    reply = await reader.readuntil(b"\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 200")
    length = int(reply.split(b"Content-Length: ")[1].split(b"\r\n")[0])
    body = orjson.loads(await reader.readexactly(length))
    assert body == {"records": [{"partition": 3, "value": orjson.loads(VALUE)}]}
    assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 204")
    writer.close()
    for server in (receiver, gateway):
        server.close()
