"""`sluice cluster`: change a running cluster's shape: reassign partitions (like
kafka-reassign-partitions) and follow the bytes copied, list or cancel moves, set the
reassignment throttle; balance the nodes, decommission one, remove a lost one (each with
--dry-run to print the plan first)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
from rich import filesize
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, TaskID, TextColumn
from rich.progress import Progress as Bar

from gateway.cli import client as cli
from gateway.cli.progress import Progress

AddUrl = Callable[[argparse.ArgumentParser], argparse.ArgumentParser]
ROUTE = "/v1/cluster/reassignments"
POLL_S = 1.0  # how often a waiting `reassign` asks for progress


def add_commands(commands: Any, with_url: AddUrl) -> None:
    """The `cluster` subcommand (`commands`: argparse's subparsers action)."""
    cluster = commands.add_parser("cluster", help="reassign partitions, throttle the moves")
    actions = cluster.add_subparsers(dest="action", required=True)
    reassign = with_url(
        actions.add_parser(
            "reassign",
            help="start a plan (kafka-reassign-partitions' JSON) and follow it, list the moves "
            "(--status) or cancel them (--cancel)",
        )
    )
    what = reassign.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--plan", type=Path, metavar="FILE", help="the moves: a JSON file, - for stdin"
    )
    what.add_argument("--status", action="store_true", help="list the moves in progress")
    what.add_argument(
        "--cancel",
        nargs="?",
        const="-all-",
        type=Path,
        metavar="FILE",
        help="cancel the moves of FILE's partitions, or every move",
    )
    reassign.add_argument(
        "--throttle",
        type=_rate,
        metavar="BYTES_PER_S",
        help="with --plan: set the reassignment throttle first",
    )
    reassign.add_argument(
        "--no-wait", action="store_true", help="with --plan: return once the moves started"
    )
    cli.with_output(reassign)
    throttle = with_url(
        actions.add_parser("throttle", help="set (bytes/s per node) or lift (off) the throttle")
    )
    throttle.add_argument("rate", help="bytes per second, or off")
    for name, help_text in (
        ("balance", "spread replicas, leaderships and bytes evenly over the nodes"),
        ("decommission", "move every replica off NODE, then mark it removed"),
        ("remove-node", "mark a down NODE removed and re-create its replicas elsewhere"),
    ):
        sub = with_url(actions.add_parser(name, help=help_text))
        if name != "balance":
            sub.add_argument("node", type=int, metavar="NODE")
        sub.add_argument(
            "--dry-run",
            action="store_true",
            help="print the plan (moves, bytes), move nothing",
        )
        sub.add_argument("--no-wait", action="store_true", help="return once the moves started")
        cli.with_output(sub)


def _rate(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected bytes per second, got {raw!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {raw}")
    return value


def read_plan(path: Path) -> dict[str, Any]:
    """A plan file: {"version": 1, "partitions": [{"topic", "partition", "replicas"}]}."""
    try:
        text = sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
        doc = json.loads(text)
    except (OSError, ValueError) as exc:
        raise cli.CommandError(f"cannot read the plan {path}: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("partitions"), list):
        raise cli.CommandError(f'{path}: expected {{"version": 1, "partitions": [...]}}')
    return doc


async def cluster_command(args: argparse.Namespace) -> None:
    async with cli.session(args) as session:
        if args.action == "throttle":
            rate = None if args.rate == "off" else _rate_or_exit(args.rate)
            doc = await cli.call(
                session, "PUT", f"{args.url}{ROUTE}/throttle", json={"bytes_per_second": rate}
            )
            shown = doc["throttle_bytes_per_second"]
            print("throttle lifted" if shown is None else f"throttle {shown} bytes/s per node")
        elif args.action in PLANS:
            await _planned(args, session)
        elif args.status:
            _print_moves(args, await cli.call(session, "GET", f"{args.url}{ROUTE}"))
        elif args.cancel is not None:
            await _cancel(args, session)
        else:
            await _reassign(args, session)


def _rate_or_exit(raw: str) -> int:
    try:
        return _rate(raw)
    except argparse.ArgumentTypeError as exc:
        raise cli.CommandError(str(exc)) from None


async def _cancel(args: argparse.Namespace, session: aiohttp.ClientSession) -> None:
    if str(args.cancel) == "-all-":
        doc = await cli.call(session, "DELETE", f"{args.url}{ROUTE}")
        cancelled = doc["cancelled"]
    else:
        cancelled = []
        for move in read_plan(args.cancel)["partitions"]:
            url = f"{args.url}{ROUTE}/{quote(str(move['topic']), safe='')}/{move['partition']}"
            try:
                cancelled += (await cli.call(session, "DELETE", url))["cancelled"]
            except cli.CommandError as exc:
                if exc.code != "NO_REASSIGNMENT_IN_PROGRESS":
                    raise
    if not cli.as_table(args):
        cli.print_json({"cancelled": cancelled})
        return
    rows = [[m["topic"], m["partition"], m["replicas"], m["leader"]] for m in cancelled]
    print(
        cli.table(("TOPIC", "PARTITION", "REPLICAS", "LEADER"), rows) if rows else "nothing moving"
    )


async def _reassign(args: argparse.Namespace, session: aiohttp.ClientSession) -> None:
    plan = read_plan(args.plan)
    if args.throttle is not None:
        body = {"bytes_per_second": args.throttle}
        await cli.call(session, "PUT", f"{args.url}{ROUTE}/throttle", json=body)
    started = (await cli.call(session, "POST", f"{args.url}{ROUTE}", json=plan))["reassignments"]
    keys = {(m["topic"], m["partition"]) for m in started}
    if args.no_wait or not keys:
        _print_moves(args, {"reassignments": started})
        return
    await _follow(args, session, keys)


async def _follow(
    args: argparse.Namespace, session: aiohttp.ClientSession, keys: set[tuple[str, int]]
) -> None:
    """Bars of the bytes the moves of `keys` copied, until none of them moves: on a terminal
    one per partition (the first PARTITION_BARS still moving) and one for all; piped, plain
    lines for all."""
    bars = PartitionBars() if sys.stderr.isatty() else None
    with Progress("copied", unit="bytes", show=bars is None) as progress:
        try:
            while True:
                doc = await cli.call(session, "GET", f"{args.url}{ROUTE}")
                moves = [m for m in doc["reassignments"] if (m["topic"], m["partition"]) in keys]
                if not moves:
                    if bars is not None:
                        bars.show([])  # every bar done
                    break
                total, copied, notes = 0, 0, []
                for move in moves:
                    have, want = _copied(move)
                    total, copied = total + want, copied + have
                    share = f"{100 * have // want}%" if want else "in sync"
                    notes.append(f"{move['topic']}-{move['partition']} {share}")
                progress.total = max(progress.total or 0, total)
                progress.advance(copied - progress.done, note=", ".join(notes[:4]))
                if bars is not None:
                    bars.show(moves)
                await asyncio.sleep(POLL_S)
        finally:
            if bars is not None:
                bars.close()
    print(f"{len(keys)} partitions moved")


def _copied(move: dict[str, Any]) -> tuple[int, int]:
    """(bytes the new replicas hold, bytes they will hold) of one move."""
    size = move["leader_size_bytes"] or 0
    have = sum(min(p["size_bytes"] or 0, size) for p in move["progress"])
    return have, size * len(move["progress"])


PARTITION_BARS = 20


class PartitionBars:
    """A terminal's bars: one per moving partition (bytes copied against the leader's), the
    finished ones marked done, and a line for what does not fit."""

    def __init__(self) -> None:
        self.bar = Bar(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TextColumn("{task.fields[note]}"),
            console=Console(file=sys.stderr),
        )
        self.tasks: dict[tuple[str, int], TaskID] = {}
        self.bar.start()

    def show(self, moves: list[dict[str, Any]]) -> None:
        moving = {(m["topic"], m["partition"]): m for m in moves}
        for key, task in self.tasks.items():
            if key not in moving:
                self.bar.update(task, completed=self.bar.tasks[task].total, note="done")
        for key, move in list(moving.items())[:PARTITION_BARS]:
            have, want = _copied(move)
            if key not in self.tasks:
                self.tasks[key] = self.bar.add_task(f"{key[0]}-{key[1]}", total=want, note="")
            note = "in sync, completing" if have >= want else ""
            self.bar.update(self.tasks[key], completed=have, total=max(want, 1), note=note)

    def close(self) -> None:
        self.bar.stop()


PLANS = {
    "balance": "/v1/cluster/balance",
    "decommission": "/v1/cluster/nodes/{node}/decommission",
    "remove-node": "/v1/cluster/nodes/{node}/remove",
}


async def _planned(args: argparse.Namespace, session: aiohttp.ClientSession) -> None:
    """balance, decommission, remove-node: print the plan, then (unless a dry run) follow
    its moves as `reassign` does."""
    path = PLANS[args.action].format(node=getattr(args, "node", ""))
    query = "?dry_run=true" if args.dry_run else ""
    plan = await cli.call(session, "POST", f"{args.url}{path}{query}")
    if not cli.as_table(args):
        cli.print_json(plan)
    else:
        _print_plan(plan)
    keys = {(m["topic"], m["partition"]) for m in plan["moves"]}
    if not args.dry_run and not args.no_wait and keys:
        await _follow(args, session, keys)


def _print_plan(plan: dict[str, Any]) -> None:
    moved = [m for m in plan["moves"] if set(m["replicas"]) != set(m["from"])]
    rows = [[m["topic"], m["partition"], m["from"], m["replicas"]] for m in plan["moves"]]
    print(cli.table(("TOPIC", "PARTITION", "FROM", "TO"), rows) if rows else "nothing to move")
    nodes = [
        [
            n["node_id"],
            f"{n['replicas_before']} -> {n['replicas_after']}",
            f"{n['leaders_before']} -> {n['leaders_after']}",
            f"{filesize.decimal(n['bytes_before'])} -> {filesize.decimal(n['bytes_after'])}",
        ]
        for n in plan["nodes"]
    ]
    print(cli.table(("NODE", "REPLICAS", "LEADERS", "BYTES"), nodes))
    print(
        f"{len(moved)} partitions copy {filesize.decimal(plan['bytes_to_move'])}, "
        f"{plan['leadership_changes']} change leadership only; goal "
        f"{'met' if plan['goal_met'] else 'not met'} (±{plan['tolerance']:.0%})"
    )
    for note in plan["notes"]:
        print(f"note: {note}")


def _print_moves(args: argparse.Namespace, doc: dict[str, Any]) -> None:
    if not cli.as_table(args):
        cli.print_json(doc)
        return
    rows = []
    for m in doc["reassignments"]:
        copied = ", ".join(
            f"{p['replica']}: {'in sync' if p['in_sync'] else p['size_bytes']}"
            for p in m.get("progress", [])
        )
        rows.append(
            [m["topic"], m["partition"], m["replicas"], m["adding"], m["removing"], copied or "-"]
        )
    header = ("TOPIC", "PARTITION", "TARGET", "ADDING", "REMOVING", "COPIED (BYTES)")
    print(cli.table(header, rows) if rows else "no moves in progress")
    if "throttle_bytes_per_second" in doc:
        rate = doc["throttle_bytes_per_second"]
        print("throttle: " + ("none" if rate is None else f"{rate} bytes/s per node"))
