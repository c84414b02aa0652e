"""What the console consumers share (`sluice consume`, `sluice share-groups consume`): an
answer of records decoded even where a value cannot be (kept as stored), a record printed as
a line, and calls retried through a server restart or a leader change."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import aiohttp
import msgspec
import orjson

from gateway.cli import client
from gateway.cli.client import CommandError

RETRY_FIRST_S = 0.2  # a consumer's first retry after a lost connection, a 503 or a 421
RETRY_MAX_S = 5.0


class StoredText(str):
    """A fetched value no JSON decoder here can read (a number too large for a double, stored
    before the gateway refused them), kept as the JSON text the gateway sent."""


def records_answer(body: bytes) -> Any:
    """A fetch's (or an acquire's) answer. A value that cannot be decoded becomes its
    StoredText, with a one-line warning on stderr, so one bad record never stops a consumer."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        pass
    try:
        fields = msgspec.json.decode(body, type=dict[str, msgspec.Raw])
        raw_records = msgspec.json.decode(fields.pop("records"), type=list[dict[str, msgspec.Raw]])
    except (msgspec.DecodeError, KeyError) as exc:
        raise CommandError(f"the gateway's answer is not a fetch answer: {exc}") from None
    answer: dict[str, Any] = {name: orjson.loads(memoryview(raw)) for name, raw in fields.items()}
    answer["records"] = records = []
    for raw_record in raw_records:
        record: dict[str, Any] = {}
        for name, raw in raw_record.items():
            try:
                record[name] = orjson.loads(memoryview(raw))
            except orjson.JSONDecodeError as exc:
                record[name] = StoredText(bytes(raw).decode(errors="replace"))
                where = f"offset {record.get('offset', '?')}"
                print(f"sluice: {where}: {name} printed as stored ({exc})", file=sys.stderr)
        records.append(record)
    return answer


def format_record(record: dict[str, Any], print_key: bool, separator: str) -> str:
    """A record as `sluice consume` prints it: its value (JSON, or a string as it is), after
    its key and `separator` with `print_key`."""
    value = record["value"]  # a StoredText is a str: printed as the gateway sent it
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    if print_key:
        return f"{record['key']}{separator}{text}"
    return text


async def call_retrying(
    session: aiohttp.ClientSession, method: str, url: str, **kwargs: Any
) -> Any:
    """A consumer's call (a fetch, a commit: both safe to repeat); a lost connection, a
    restarting server, a 503 or a 421 (a cluster's nodes disagreeing for a moment on who
    leads) is retried with backoff (said once on stderr per outage), so a consumer outlives a
    server restart and a leader change."""
    delay = RETRY_FIRST_S
    while True:
        try:
            return await client.call(session, method, url, **kwargs)
        except aiohttp.ClientConnectionError as exc:
            reason = client.connection_error(exc)
        except CommandError as exc:
            if exc.status not in (421, 503):
                raise
            reason = str(exc)
        if delay == RETRY_FIRST_S:
            print(f"sluice: {reason}; retrying", file=sys.stderr, flush=True)
        await asyncio.sleep(delay)
        delay = min(delay * 2, RETRY_MAX_S)
