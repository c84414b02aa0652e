"""`sluice transactions`: a running cluster's transactions (/v1/transactions). A producer's
steps (begin, a group's offsets, commit, abort), scriptable between `sluice produce
--transactional-id` calls; and as Kafka's kafka-transactions.sh, list (optionally in some
states), describe, and an operator's abort of a hanging transaction."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from gateway.cli import client as cli

AddUrl = Callable[[argparse.ArgumentParser], argparse.ArgumentParser]
LISTED = ("transactional_id", "producer_id", "producer_epoch", "state")
STATES = "Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort"


def add_commands(commands: Any, with_url: AddUrl) -> None:
    """The `transactions` subcommand (`commands`: argparse's subparsers action)."""
    transactions = commands.add_parser(
        "transactions", help="transactions: begin, offsets, commit, abort, list, describe"
    )
    actions = transactions.add_subparsers(dest="action", required=True)
    begin = cli.with_output(
        with_url(
            actions.add_parser("begin", help="begin a transaction (fences the id's earlier one)")
        )
    )
    begin.add_argument("transactional_id")
    begin.add_argument("--timeout-ms", type=int, help="abort it if still open after this long")
    offsets = cli.with_output(
        with_url(
            actions.add_parser("offsets", help="a consumer group's offsets, committed with it")
        )
    )
    offsets.add_argument("transactional_id")
    offsets.add_argument("positions", nargs="+", metavar="TOPIC:PARTITION:OFFSET")
    offsets.add_argument("--producer-epoch", type=int, required=True)
    offsets.add_argument("--group", required=True)
    offsets.add_argument("--member-id", help="the member sending them (with --generation-id)")
    offsets.add_argument("--generation-id", type=int)
    commit = cli.with_output(with_url(actions.add_parser("commit", help="commit it")))
    commit.add_argument("transactional_id")
    commit.add_argument("--producer-epoch", type=int, required=True)
    listing = cli.with_output(
        with_url(actions.add_parser("list", help="the cluster's transactional ids"))
    )
    listing.add_argument("--state", help=f"only those in these states, comma-separated ({STATES})")
    describe = cli.with_output(
        with_url(actions.add_parser("describe", help="an id's transaction, its partitions"))
    )
    describe.add_argument("transactional_id")
    abort = cli.with_output(
        with_url(
            actions.add_parser(
                "abort",
                help="abort the id's open transaction: the producer's (--producer-epoch), or "
                "an operator's whatever its epoch",
            )
        )
    )
    abort.add_argument("transactional_id")
    abort.add_argument("--producer-epoch", type=int)


async def transactions_command(args: argparse.Namespace) -> None:
    base = f"{args.url}/v1/transactions"
    table = cli.as_table(args)
    async with cli.session(args) as session:
        if args.action == "list":
            params = {"state": args.state} if args.state else {}
            found = (await cli.call(session, "GET", base, params=params))["transactions"]
            if not table:
                cli.print_json(found)
                return
            rows = [[t[k] for k in LISTED] for t in found]
            print(cli.table([c.upper().replace("_", "-") for c in LISTED], rows))
            return
        url = f"{base}/{quote(args.transactional_id, safe='')}"
        if args.action == "begin":
            body = {} if args.timeout_ms is None else {"timeout_ms": args.timeout_ms}
            doc = await cli.call(session, "POST", url, json=body)
            if table:
                print(f"began transaction {doc['transactional_id']}: producer epoch "
                      f"{doc['producer_epoch']}")  # fmt: skip
            else:
                cli.print_json(doc)
        elif args.action == "offsets":
            doc = await cli.call(session, "POST", f"{url}/offsets", json=_offsets_body(args))
            if table:
                _print_description(doc)
            else:
                cli.print_json(doc)
        elif args.action == "commit":
            body = {"producer_epoch": args.producer_epoch}
            doc = await cli.call(session, "POST", f"{url}/commit", json=body)
            if table:
                print(f"committed transaction {doc['transactional_id']}")
            else:
                cli.print_json(doc)
        elif args.action == "describe":
            doc = await cli.call(session, "GET", url)
            if table:
                _print_description(doc)
            else:
                cli.print_json(doc)
        elif args.action == "abort":
            body = {} if args.producer_epoch is None else {"producer_epoch": args.producer_epoch}
            doc = await cli.call(session, "POST", f"{url}/abort", json=body)
            if not table:
                cli.print_json(doc)
            elif doc["state"] == "CompleteAbort":
                print(f"aborted transaction {doc['transactional_id']}")
            else:
                print(
                    f"transaction {doc['transactional_id']}: aborting ({doc['state']}: its "
                    "markers are still being written)"
                )


def _offsets_body(args: argparse.Namespace) -> dict[str, Any]:
    """The offsets call's body from TOPIC:PARTITION:OFFSET arguments."""
    if (args.member_id is None) != (args.generation_id is None):
        raise cli.CommandError("--member-id and --generation-id go together")
    offsets = []
    for position in args.positions:
        topic, _, rest = position.rpartition(":")
        topic, _, partition = topic.rpartition(":")
        if not topic or not partition.isdigit() or not rest.isdigit():
            raise cli.CommandError(f"{position!r} is not TOPIC:PARTITION:OFFSET")
        offsets.append({"topic": topic, "partition": int(partition), "offset": int(rest)})
    body: dict[str, Any] = {
        "producer_epoch": args.producer_epoch,
        "group_id": args.group,
        "offsets": offsets,
    }
    if args.member_id is not None:
        body["member_id"] = args.member_id
        body["generation_id"] = args.generation_id
    return body


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


def _print_description(doc: dict[str, Any]) -> None:
    """A summary line, then the partitions written and the offsets sent, each as a table."""
    line = (
        f"transaction {doc['transactional_id']} ({doc['state']}): producer id "
        f"{doc['producer_id']}, epoch {doc['producer_epoch']}, timeout {doc['timeout_ms']} ms; "
        f"began {_when(doc['started_ms'])}"
    )
    if doc.get("principal"):
        line += f" by {doc['principal']}"
    if "expires_ms" in doc:
        line += f", expires {_when(doc['expires_ms'])}"
    if doc.get("abort_cause"):
        line += f"; aborted ({doc['abort_cause']})"
    print(line)
    if doc["partitions"]:
        rows = [[p["topic"], p["partition"]] for p in doc["partitions"]]
        print("\n" + cli.table(("TOPIC", "PARTITION"), rows))
    offsets = [
        [group["group_id"], o["topic"], o["partition"], o["offset"]]
        for group in doc["pending_offsets"]
        for o in group["offsets"]
    ]
    if offsets:
        print("\n" + cli.table(("GROUP", "TOPIC", "PARTITION", "OFFSET"), offsets))
