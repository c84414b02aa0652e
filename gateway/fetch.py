"""Long-poll fetch: read whole batches, or park until min_bytes arrive or the wait ends."""

from __future__ import annotations

import asyncio

from engine.log import PartitionLog, ReadResult
from engine.notify import ChangeNotifier


async def long_poll(
    log: PartitionLog,
    notifier: ChangeNotifier,
    offset: int,
    max_bytes: int,
    min_bytes: int,
    timeout_ms: int,
) -> ReadResult:
    """Read from `offset`; with less than `min_bytes` committed, wait up to `timeout_ms`.

    A parked request is one future (no CPU); a client that goes away cancels it.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_ms / 1000
    while True:
        result = log.read(offset, max_bytes)
        remaining = deadline - loop.time()
        if len(result.data) >= min_bytes or remaining <= 0 or notifier.closing:
            return result
        await notifier.wait(log, remaining)
