"""Group commit, one hop earlier: the batches a front node built in one event-loop turn for a
partition led elsewhere go to the leader in one internal append, not one each.

A forwarded produce costs the leader a whole HTTP request; a node taking many small produces
for a partition it does not lead pays that per request (docs/PERFORMANCE.md, "Cluster").
Appends that reach `append` in the same turn, for the same leader, partition, acks and
timeout, are sent together at the end of that turn, so nothing waits for more than the turn it
is in. The leader appends them as one request (all or nothing) and gives consecutive offsets
in order, so each gets its own base offset back. A refusal of the whole (a 4xx: one batch it
would not take) sends each again alone, so a bad batch fails only its own request; any other
failure is every one's, as it would have been alone. Idempotent produces are never joined:
their batches carry the marker the leader answers a retry by.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from replication.acks import Acks
from replication.forward_client import ForwardClient, RemoteError

Key = tuple[str, str, int, Acks, int]  # leader URL, topic, partition, acks, timeout_ms
MAX_JOINED_BYTES = 4 * 1024 * 1024  # past this, a turn's appends go in more than one request


@dataclass
class _Pending:
    size: int = 0
    entries: list[tuple[bytes | bytearray, int, asyncio.Future[int]]] = field(default_factory=list)


class ForwardedAppends:
    """Joins each turn's forwarded appends per (leader, partition, acks, timeout)."""

    def __init__(self, client: ForwardClient, max_bytes: int = MAX_JOINED_BYTES) -> None:
        self.client = client
        self.max_bytes = max_bytes
        self._pending: dict[Key, _Pending] = {}
        self._sending: set[asyncio.Task[None]] = set()
        self.sends = 0  # internal appends sent; `requests / sends` is how much joining happens
        self.requests = 0

    async def append(
        self,
        url: str,
        topic: str,
        partition: int,
        data: bytes | bytearray,
        count: int,
        acks: Acks,
        timeout_ms: int,
    ) -> int:
        """The base offset of `data` (`count` records) once the leader has it, acks honoured."""
        loop = asyncio.get_running_loop()
        key = (url, topic, partition, acks, timeout_ms)
        pending = self._pending.get(key)
        if pending is None:
            pending = self._pending[key] = _Pending()
            loop.call_soon(self._send_pending, key, pending)
        done: asyncio.Future[int] = loop.create_future()
        pending.entries.append((data, count, done))
        pending.size += len(data)
        if pending.size >= self.max_bytes:
            self._send_pending(key, pending)
        return await done

    def _send_pending(self, key: Key, pending: _Pending) -> None:
        if self._pending.get(key) is not pending:
            return  # sent already, when it grew past max_bytes
        del self._pending[key]
        task = asyncio.ensure_future(self._send(key, pending.entries))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(
        self, key: Key, entries: list[tuple[bytes | bytearray, int, asyncio.Future[int]]]
    ) -> None:
        url, topic, partition, acks, timeout_ms = key
        self.sends += 1
        self.requests += len(entries)
        data = entries[0][0] if len(entries) == 1 else b"".join(d for d, _, _ in entries)
        try:
            base = await self.client.produce_batches(url, topic, partition, data, acks, timeout_ms)
        except RemoteError as exc:
            if len(entries) > 1 and 400 <= exc.status < 500:
                await asyncio.gather(*(self._alone(key, entry) for entry in entries))
                return
            _fail(entries, exc)
            return
        except Exception as exc:
            _fail(entries, exc)
            return
        for _, count, done in entries:
            if not done.done():
                done.set_result(base)
            base += count

    async def _alone(
        self, key: Key, entry: tuple[bytes | bytearray, int, asyncio.Future[int]]
    ) -> None:
        url, topic, partition, acks, timeout_ms = key
        data, _, done = entry
        self.sends += 1
        try:
            base = await self.client.produce_batches(url, topic, partition, data, acks, timeout_ms)
        except Exception as exc:
            _fail([entry], exc)
        else:
            if not done.done():
                done.set_result(base)

    async def close(self) -> None:
        for task in list(self._sending):
            task.cancel()
        await asyncio.gather(*self._sending, return_exceptions=True)


def _fail(
    entries: list[tuple[bytes | bytearray, int, asyncio.Future[int]]], exc: BaseException
) -> None:
    for _, _, done in entries:
        if not done.done():
            done.set_exception(exc)
