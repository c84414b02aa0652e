"""Long-poll fetch: read whole batches, or park until min_bytes arrive or the wait ends."""

from __future__ import annotations

import asyncio

from engine import batch as fmt
from engine.log import PartitionLog, ReadResult
from engine.notify import ChangeNotifier


async def long_poll(
    log: PartitionLog,
    notifier: ChangeNotifier,
    offset: int,
    max_bytes: int,
    min_bytes: int,
    timeout_ms: int,
    max_records: int | None = None,
) -> ReadResult:
    """Read from `offset`; with less than `min_bytes` committed, wait up to `timeout_ms`.

    A parked request is one future (no CPU); a client that goes away cancels it.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_ms / 1000
    while True:
        result = log.read(offset, max_bytes, max_records=max_records)
        remaining = deadline - loop.time()
        if len(result.data) >= min_bytes or remaining <= 0 or notifier.closing:
            return result
        if max_records is not None and _covers(result.data, offset + max_records):
            return result
        await notifier.wait(log, remaining)


def _covers(data: memoryview, end_offset: int) -> bool:
    """Whether the batches reach `end_offset`: all the records the caller asked for are there."""
    headers = fmt.scan(data, check_crc=False).headers
    return bool(headers) and headers[-1][1].next_offset >= end_offset
