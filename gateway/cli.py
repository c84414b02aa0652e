"""The `sluice` command: `serve`, and console tools like Kafka's that talk HTTP to `--url`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from gateway.settings import Settings

DEFAULT_URL = "http://localhost:8080"


class CommandError(Exception):
    """A failed request, printed as the server's problem detail."""


def _config_pairs(pairs: Sequence[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--config takes name=value, got {pair!r}")
        out[name] = value
    return out


async def _call(session: aiohttp.ClientSession, method: str, url: str, **kwargs: Any) -> Any:
    async with session.request(method, url, **kwargs) as response:
        body = await response.read()
        if response.status >= 400:
            try:
                problem = orjson.loads(body)
                detail = f"{problem.get('code')}: {problem.get('detail')}"
            except orjson.JSONDecodeError:
                detail = body.decode(errors="replace")
            raise CommandError(f"{method} {url} -> {response.status} {detail}")
        return orjson.loads(body) if body else None


def _print_json(doc: object) -> None:
    sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")


async def topics_command(args: argparse.Namespace) -> None:
    base = f"{args.url}/v1/topics"
    async with aiohttp.ClientSession() as session:
        if args.action == "list":
            for topic in (await _call(session, "GET", base))["topics"]:
                print(f"{topic['name']}\t{topic['partitions']}")
        elif args.action == "create":
            body = {
                "name": args.topic,
                "partitions": args.partitions,
                "replication_factor": args.replication_factor,
                "configs": _config_pairs(args.config),
            }
            _print_json(await _call(session, "POST", base, json=body))
        elif args.action == "describe":
            _print_json(await _call(session, "GET", f"{base}/{args.topic}"))
        elif args.action == "alter":
            changes: dict[str, object] = {}
            configs: dict[str, object] = dict(_config_pairs(args.config))
            configs.update({name: None for name in args.delete_config})
            if configs:
                changes["configs"] = configs
            if args.partitions is not None:
                changes["partitions"] = args.partitions
            _print_json(await _call(session, "PATCH", f"{base}/{args.topic}", json=changes))
        elif args.action == "delete":
            await _call(session, "DELETE", f"{base}/{args.topic}")
            print(f"deleted {args.topic}")


def _record(line: str, separator: str | None) -> dict[str, object]:
    key: str | None = None
    if separator is not None:
        key, sep, line = line.partition(separator)
        if not sep:
            raise CommandError(f"line has no key separator {separator!r}: {line!r}")
    try:
        value: object = orjson.loads(line)
    except orjson.JSONDecodeError:
        value = line
    return {"key": key, "value": value}


async def produce_command(args: argparse.Namespace) -> None:
    """stdin lines -> records; a JSON line is sent as that JSON value, anything else as a string."""
    path = f"/v1/topics/{args.topic}" + (
        f"/partitions/{args.partition}" if args.partition is not None else ""
    )
    url = f"{args.url}{path}/records"
    batch_size = 1 if sys.stdin.isatty() else args.batch_size
    sent = 0
    async with aiohttp.ClientSession() as session:
        batch: list[dict[str, object]] = []
        for raw in sys.stdin:
            line = raw.rstrip("\n")
            if not line:
                continue
            batch.append(_record(line, args.key_separator))
            if len(batch) >= batch_size:
                await _call(
                    session, "POST", url, json={"records": batch}, params={"acks": args.acks}
                )
                sent += len(batch)
                batch = []
        if batch:
            await _call(session, "POST", url, json={"records": batch}, params={"acks": args.acks})
            sent += len(batch)
    print(f"produced {sent} records", file=sys.stderr)


def _format(record: dict[str, Any], print_key: bool, separator: str) -> str:
    value = record["value"]
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    if print_key:
        return f"{record['key']}{separator}{text}"
    return text


async def _follow_partition(
    session: aiohttp.ClientSession,
    args: argparse.Namespace,
    partition: int,
    remaining: list[int],
    done: asyncio.Event,
) -> None:
    url = f"{args.url}/v1/topics/{args.topic}/partitions/{partition}/records"
    offset = args.offset
    while not done.is_set():
        params = {"offset": offset, "timeout_ms": "10000", "max_records": "1000"}
        answer = await _call(session, "GET", url, params=params)
        for record in answer["records"]:
            if remaining[0] == 0:
                break
            print(_format(record, args.print_key, args.key_separator), flush=True)
            remaining[0] -= 1
        if remaining[0] == 0:
            done.set()
        offset = str(answer["next_offset"])


async def consume_command(args: argparse.Namespace) -> None:
    """Print records as they arrive (long-poll) until interrupted or --max-records."""
    if args.from_beginning and args.offset == "latest":
        args.offset = "earliest"
    async with aiohttp.ClientSession() as session:
        if args.partition is not None:
            partitions = [args.partition]
        else:
            described = await _call(session, "GET", f"{args.url}/v1/topics/{args.topic}")
            partitions = [p["partition"] for p in described["partitions"]]
        remaining = [args.max_records if args.max_records is not None else -1]
        done = asyncio.Event()
        tasks = [
            asyncio.create_task(_follow_partition(session, args, p, remaining, done))
            for p in partitions
        ]
        waiter = asyncio.create_task(done.wait())
        finished, _ = await asyncio.wait([*tasks, waiter], return_when=asyncio.FIRST_COMPLETED)
        for task in [*tasks, waiter]:
            task.cancel()
        for task in finished:
            if task is not waiter and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="sluice", description=__doc__)
    commands = root.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run a single-node gateway")
    serve.add_argument("--data-dir", type=Path, default=Path("data"))
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--tls-cert", type=Path)
    serve.add_argument("--tls-key", type=Path)
    serve.add_argument("--max-request-bytes", type=int, default=Settings.max_request_bytes)
    serve.add_argument(
        "--auto-create-topics", action="store_true", help="create unknown topics on produce"
    )
    serve.add_argument("--default-partitions", type=int, default=1)
    serve.add_argument(
        "--idempotency-window",
        type=float,
        default=Settings.idempotency_window_s,
        help="seconds an Idempotency-Key is remembered",
    )

    def with_url(sub: argparse.ArgumentParser) -> argparse.ArgumentParser:
        sub.add_argument("--url", default=DEFAULT_URL, help=f"gateway URL (default {DEFAULT_URL})")
        return sub

    topics = with_url(commands.add_parser("topics", help="create, list, describe, alter, delete"))
    topics.add_argument("action", choices=["create", "list", "describe", "alter", "delete"])
    topics.add_argument("topic", nargs="?")
    topics.add_argument("--partitions", type=int)
    topics.add_argument("--replication-factor", type=int, default=1)
    topics.add_argument("--config", action="append", default=[], metavar="NAME=VALUE")
    topics.add_argument("--delete-config", action="append", default=[], metavar="NAME")

    produce = with_url(commands.add_parser("produce", help="stdin lines -> records"))
    produce.add_argument("topic")
    produce.add_argument("--partition", type=int)
    produce.add_argument("--key-separator", help="split each line into key and value")
    produce.add_argument("--acks", choices=["0", "1", "all"], default="all")
    produce.add_argument("--batch-size", type=int, default=1000)

    consume = with_url(commands.add_parser("consume", help="print records as they arrive"))
    consume.add_argument("topic")
    consume.add_argument("--partition", type=int)
    consume.add_argument("--offset", default="latest", help="an offset, earliest or latest")
    consume.add_argument("--from-beginning", action="store_true")
    consume.add_argument("--max-records", type=int)
    consume.add_argument("--print-key", action="store_true")
    consume.add_argument("--key-separator", default="\t")
    return root


def main(argv: Sequence[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.command == "serve":
        from gateway.server import run

        run(
            Settings(
                data_dir=args.data_dir,
                host=args.host,
                port=args.port,
                tls_cert=args.tls_cert,
                tls_key=args.tls_key,
                max_request_bytes=args.max_request_bytes,
                auto_create_topics=args.auto_create_topics,
                default_partitions=args.default_partitions,
                idempotency_window_s=args.idempotency_window,
            )
        )
        return
    if args.command == "topics" and args.action != "list" and not args.topic:
        raise SystemExit(f"sluice topics {args.action} needs a topic name")
    if args.command == "topics" and args.action == "create" and args.partitions is None:
        args.partitions = 1
    command = {"topics": topics_command, "produce": produce_command, "consume": consume_command}
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(command[args.command](args))
    except (CommandError, aiohttp.ClientError) as exc:
        raise SystemExit(f"sluice: {exc}") from None
