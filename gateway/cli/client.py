"""What the console tools share: a request to a node that fails as a CommandError with the
server's problem (a quota's 429 waited out and sent again), output as a table on a terminal
or JSON when piped, and the flags of an offsets reset (consumer groups' and share groups')."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import aiohttp
import orjson


class CommandError(Exception):
    """A failed request, printed as the server's problem detail; `code` is the problem's."""

    def __init__(
        self,
        message: str,
        code: str | None = None,
        status: int | None = None,
        problem: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.problem = problem


def session(args: argparse.Namespace) -> aiohttp.ClientSession:
    """A client session; with --key (or $SLUICE_KEY) every request carries it as a bearer."""
    key = getattr(args, "key", None)
    return aiohttp.ClientSession(headers={"Authorization": f"Bearer {key}"} if key else None)


async def call(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    *,
    decode: Callable[[bytes], Any] = orjson.loads,
    **kwargs: Any,
) -> Any:
    """One request; a 429 QUOTA_EXCEEDED (nothing was done) is sent again after the wait the
    gateway names, as a Kafka client obeys its throttle time."""
    told = False
    while True:
        try:
            return await _call_once(session, method, url, decode=decode, **kwargs)
        except CommandError as exc:
            if exc.status != 429 or exc.problem is None or exc.code != "QUOTA_EXCEEDED":
                raise
            if not told:
                print(f"sluice: {exc.problem.get('detail')}; waiting", file=sys.stderr)
                told = True
            await asyncio.sleep(int(exc.problem.get("retry_after_ms", 1000)) / 1000)


async def _call_once(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    *,
    decode: Callable[[bytes], Any],
    **kwargs: Any,
) -> Any:
    async with session.request(method, url, **kwargs) as response:
        body = await response.read()
        if response.status >= 400:
            code, problem = None, None
            try:
                problem = orjson.loads(body)
                code = problem.get("code")
                detail = f"{code}: {problem.get('detail')}"
            except (orjson.JSONDecodeError, AttributeError):
                problem, detail = None, body.decode(errors="replace")
            raise CommandError(
                f"{method} {url} -> {response.status} {detail}", code, response.status, problem
            )
        return decode(body) if body else None


def print_json(doc: object) -> None:
    sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")


def with_output(sub: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The subcommand with `--output table|json` (`as_table` reads it)."""
    sub.add_argument(
        "--output",
        choices=["table", "json"],
        help="default: a table on a terminal, JSON (the server's answer) when piped",
    )
    return sub


def as_table(args: argparse.Namespace) -> bool:
    """--output, else a table on a terminal and JSON when piped (for scripts and jq)."""
    output = getattr(args, "output", None)
    if output is not None:
        return bool(output == "table")
    return sys.stdout.isatty()


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned columns two spaces apart; None shows as "-" (as Kafka's tools print)."""
    cells = [list(header), *[["-" if c is None else str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


def connection_error(exc: aiohttp.ClientConnectionError) -> str:
    """A lost connection in a line (aiohttp's own names `ssl:default` for plain http)."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        error = exc.os_error
        reason = os.strerror(error.errno) if error.errno else (error.strerror or repr(error))
        return f"cannot connect to {exc.host}:{exc.port}: {reason}"
    return f"connection lost ({str(exc) or type(exc).__name__})"


def print_deleted(doc: dict[str, object], line: str, table: bool) -> None:
    """A delete has no answer body: a line for people, an object for scripts."""
    if table:
        print(line)
    else:
        print_json(doc)


def add_reset_arguments(sub: argparse.ArgumentParser) -> None:
    """An offsets reset's flags, as kafka-consumer-groups --reset-offsets names them: --topic,
    --partitions and one --to-* (`reset_body` reads them)."""
    sub.add_argument("--topic", required=True)
    sub.add_argument("--partitions", type=_partition_list, help="e.g. 0,1 (default: all)")
    to = sub.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=int, metavar="N")
    to.add_argument("--to-timestamp", type=int, metavar="MS", help="milliseconds since the epoch")
    to.add_argument(
        "--to-datetime", metavar="ISO", help="e.g. 2026-01-31T12:00:00 (UTC unless it says)"
    )


def reset_body(args: argparse.Namespace) -> dict[str, object]:
    """The body of `PUT .../offsets` for the flags `add_reset_arguments` added."""
    body: dict[str, object] = {"topic": args.topic, "to": _reset_target(args)}
    if args.partitions is not None:
        body["partitions"] = args.partitions
    return body


def _reset_target(args: argparse.Namespace) -> object:
    if args.to_earliest:
        return "earliest"
    if args.to_latest:
        return "latest"
    if args.to_offset is not None:
        return args.to_offset
    if args.to_timestamp is not None:
        return {"timestamp": args.to_timestamp}
    try:
        when = datetime.fromisoformat(args.to_datetime)
    except ValueError:
        raise CommandError(
            f"--to-datetime takes an ISO 8601 time, got {args.to_datetime!r}"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return {"timestamp": int(when.timestamp() * 1000)}


def _partition_list(text: str) -> list[int]:
    try:
        return [int(p) for p in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected partition numbers like 0,1,2, got {text!r}"
        ) from None
