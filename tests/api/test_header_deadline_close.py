"""The header deadline's 408 ends with a lingering close: the write side ends at once (the
client reads the answer whole, then EOF) and what the client still sends is dropped for a
while before the connection closes. Closed at once, a client still trickling its headers has
its next bytes answered by a reset, and it could lose the 408 unread."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from gateway.settings import Settings
from tests.api.support import kept_connections, own_connections


async def test_the_408_is_read_whole_and_later_bytes_are_dropped_until_the_close(
    tmp_path: Path,
) -> None:
    kept, accepted = kept_connections()
    async with own_connections(Settings(data_dir=tmp_path), kept) as served:
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: sluice\r\nX-Slow: ")
        async with asyncio.timeout(10):  # until the partial head is read and its deadline set
            while not accepted or accepted[-1]._header_deadline is None:
                await asyncio.sleep(0)
        connection = accepted[-1]
        deadline = connection._header_deadline
        assert deadline is not None
        deadline.cancel()
        connection._headers_too_slow()  # the deadline, now rather than in 5 s
        answer = await reader.read()  # the 408, then the end of the server's writes
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408 ")
        assert orjson.loads(body)["code"] == "REQUEST_TIMED_OUT"
        assert connection.transport is not None  # still reading what the client sends
        writer.write(b"a" * 1000 + b"\r\n\r\n")
        await writer.drain()
        async with asyncio.timeout(10):  # closed after the linger, having parsed nothing
            while connection.transport is not None:
                await asyncio.sleep(0)
        assert not connection.request_queue
        writer.close()
