"""`sluice share-groups`: a running node's share groups (queues, /v1/share-groups), as Kafka's
kafka-share-groups.sh: list, describe, reset-offsets, delete, configs; and consume, a member
that prints each record it acquires and acknowledges it, as kafka-console-share-consumer.sh."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import signal
import sys
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import aiohttp

from gateway import config
from gateway.cli import client as cli
from gateway.cli import consumer
from gateway.cli.client import CommandError

AddUrl = Callable[[argparse.ArgumentParser], argparse.ArgumentParser]
ACQUIRE_WAIT_MS = 5_000  # an acquire's long-poll; the member's session is kept meanwhile
MEMBER = ("member_id", "topics", "session_timeout_ms", "acquired")
PARTITION = ("topic", "partition", "start_offset", "end_offset", "high_watermark", "acquired",
             "available", "acknowledged", "archived", "lag")  # fmt: skip
INTEGER = re.compile(r"-?[0-9]+")


def add_commands(commands: Any, with_url: AddUrl) -> None:
    """The `share-groups` subcommand (`commands`: argparse's subparsers action)."""
    groups = commands.add_parser(
        "share-groups", help="queues: list, describe, reset-offsets, delete, configs, consume"
    )
    actions = groups.add_subparsers(dest="action", required=True)
    cli.with_output(with_url(actions.add_parser("list", help="every share group")))
    describe = cli.with_output(
        with_url(actions.add_parser("describe", help="members, and each partition's window"))
    )
    describe.add_argument("group")
    describe.add_argument(
        "--json", dest="output", action="store_const", const="json", help="same as --output json"
    )
    reset = cli.with_output(
        with_url(
            actions.add_parser(
                "reset-offsets", help="start a topic's share-partitions over (no members)"
            )
        )
    )
    reset.add_argument("group")
    cli.add_reset_arguments(reset)
    delete = cli.with_output(
        with_url(actions.add_parser("delete", help="forget a share group without members"))
    )
    delete.add_argument("group")
    configs = cli.with_output(
        with_url(actions.add_parser("configs", help="show, set or unset a group's configs"))
    )
    configs.add_argument("group")
    configs.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="e.g. share.auto.offset.reset=earliest (the group is made if new)",
    )
    configs.add_argument(
        "--unset", action="append", default=[], metavar="NAME", help="back to its default"
    )
    consume = with_url(
        actions.add_parser(
            "consume", help="acquire records as a member, print and acknowledge each"
        )
    )
    consume.add_argument("group")
    consume.add_argument("--topic", required=True)
    consume.add_argument(
        "--max-records", type=config.positive, default=100, help="records per acquire (100)"
    )
    consume.add_argument("--count", type=config.positive, help="stop after this many records")
    consume.add_argument(
        "--timeout-ms",
        type=config.non_negative,
        help="stop once no record came for this long (default: wait for more)",
    )
    consume.add_argument(
        "--ack",
        choices=["accept", "release", "reject"],
        default="accept",
        help="how each printed record is acknowledged (default accept)",
    )
    consume.add_argument("--print-key", action="store_true")
    consume.add_argument("--key-separator", default="\t")
    consume.add_argument("--session-timeout-ms", type=int, help="(server default)")


async def share_groups_command(args: argparse.Namespace) -> None:
    base = f"{args.url}/v1/share-groups"
    if args.action == "consume":
        await _consume(args, f"{base}/{quote(args.group, safe='')}/members")
        return
    table = cli.as_table(args)
    async with cli.session(args) as session:
        if args.action == "list":
            groups = (await cli.call(session, "GET", base))["share_groups"]
            if not table:
                cli.print_json(groups)
                return
            for group in groups:
                print(f"{group['group']}\t{group['state']}\t{group['members']}")
            return
        url = f"{base}/{quote(args.group, safe='')}"
        if args.action == "describe":
            _print_description(await cli.call(session, "GET", url), table)
        elif args.action == "reset-offsets":
            answer = await cli.call(session, "PUT", f"{url}/offsets", json=cli.reset_body(args))
            if not table:
                cli.print_json(answer)
                return
            rows = [[o["topic"], o["partition"], o["start_offset"]] for o in answer["offsets"]]
            print(cli.table(("TOPIC", "PARTITION", "NEW-START-OFFSET"), rows))
        elif args.action == "delete":
            await cli.call(session, "DELETE", url)
            cli.print_deleted(
                {"group": args.group, "deleted": True}, f"deleted share group {args.group}", table
            )
        elif args.action == "configs":
            changes = _config_changes(args.set, args.unset)
            if changes:
                doc = await cli.call(session, "PUT", f"{url}/configs", json={"configs": changes})
            else:
                described = await cli.call(session, "GET", url)
                doc = {"group": described["group"], "configs": described["configs"]}
            _print_configs(doc, table)


def _config_changes(pairs: list[str], unset: list[str]) -> dict[str, object]:
    """--set name=value (a whole number sent as a number) and --unset name (null)."""
    changes: dict[str, object] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise CommandError(f"--set takes name=value, got {pair!r}")
        changes[name] = int(value) if INTEGER.fullmatch(value) else value
    changes.update({name: None for name in unset})
    return changes


def _print_configs(doc: dict[str, Any], table: bool) -> None:
    if not table:
        cli.print_json(doc)
    elif doc["configs"]:
        print(cli.table(("CONFIG", "VALUE"), sorted(doc["configs"].items())))
    else:
        print(f"share group {doc['group']}: no configs set (the defaults apply)")


def _print_description(doc: dict[str, Any], table: bool) -> None:
    """The server's JSON, or a summary line, the members and the share-partitions' windows."""
    if not table:
        cli.print_json(doc)
        return
    members = doc["members"]
    configs = ", ".join(f"{k}={v}" for k, v in sorted(doc["configs"].items())) or "defaults"
    print(
        f"share group {doc['group']} ({doc['state']}): {len(members)} "
        f"member{'s' * (len(members) != 1)}, total lag {doc['lag']}; configs: {configs}\n"
    )
    if members:
        rows = [[*(m[k] for k in MEMBER[:1]), ",".join(m["topics"]), *(m[k] for k in MEMBER[2:])]
                for m in members]  # fmt: skip
        print(cli.table([c.upper().replace("_", "-") for c in MEMBER], rows) + "\n")
    header = [c.upper().replace("_", "-") for c in PARTITION]
    print(cli.table(header, [[p[k] for k in PARTITION] for p in doc["partitions"]]))


async def _join(session: aiohttp.ClientSession, members: str, args: argparse.Namespace) -> str:
    """Join as a new member reading --topic; its id."""
    body: dict[str, object] = {"topics": [args.topic]}
    if args.session_timeout_ms is not None:
        body["session_timeout_ms"] = args.session_timeout_ms
    return str((await cli.call(session, "POST", members, json=body))["member_id"])


async def _consume(args: argparse.Namespace, members: str) -> None:
    """Join, then acquire, print and acknowledge (--ack) until --count records, --timeout-ms
    without one, Ctrl-C or SIGTERM; leave on the way out, so what is held goes back at once.
    A member whose session ran out (a paused process) joins again: what it printed but did
    not acknowledge comes again, at least once."""
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    remaining = args.count
    quiet_s = None if args.timeout_ms is None else args.timeout_ms / 1000
    async with cli.session(args) as session:
        member = await _join(session, members, args)
        last = time.monotonic()
        try:
            while remaining is None or remaining > 0:
                wait_ms = ACQUIRE_WAIT_MS
                if quiet_s is not None:
                    left = quiet_s - (time.monotonic() - last)
                    wait_ms = max(0, min(wait_ms, int(left * 1000)))
                limit = args.max_records if remaining is None else min(remaining, args.max_records)
                try:
                    taken = await _take(session, f"{members}/{member}", limit, wait_ms, args)
                except CommandError as exc:
                    if exc.code != "UNKNOWN_MEMBER":
                        raise
                    print(f"sluice: {exc}; joining again", file=sys.stderr)
                    member = await _join(session, members, args)
                    continue
                if taken:
                    last = time.monotonic()
                    if remaining is not None:
                        remaining -= taken
                elif quiet_s is not None and wait_ms == 0:
                    break
        finally:
            with contextlib.suppress(CommandError, aiohttp.ClientError):
                await cli.call(session, "DELETE", f"{members}/{member}")


async def _take(
    session: aiohttp.ClientSession, member: str, limit: int, wait_ms: int, args: argparse.Namespace
) -> int:
    """One acquire (waiting up to `wait_ms`), its records printed, then acknowledged with --ack;
    how many. An acknowledgement that does not take effect (the lock ran out while the record
    was printed) is said on stderr, and the rest go on."""
    params = {"max_records": str(limit), "timeout_ms": str(wait_ms)}
    answer = await consumer.call_retrying(
        session, "POST", f"{member}/acquire", params=params, decode=consumer.records_answer
    )
    records = answer["records"]
    for record in records:
        print(consumer.format_record(record, args.print_key, args.key_separator))
    sys.stdout.flush()
    if not records:
        return 0
    body = {"acknowledgements": [{"token": r["token"], "type": args.ack} for r in records]}
    acked = await consumer.call_retrying(session, "POST", f"{member}/acknowledge", json=body)
    for result in acked["results"]:
        if result["status"] != "ok":
            problem = result["problem"]
            print(
                f"sluice: {args.ack} of {result['token']} refused: {problem['code']}: "
                f"{problem['detail']}",
                file=sys.stderr,
            )
    return len(records)
