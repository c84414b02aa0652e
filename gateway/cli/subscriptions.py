"""`sluice subscriptions`: a running node's push subscriptions (/v1/subscriptions): create,
list, describe, pause, resume, delete; tables on a terminal, the server's JSON when piped."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import orjson

from gateway.cli import client as cli

AddUrl = Callable[[argparse.ArgumentParser], argparse.ArgumentParser]
ROW = ("partition", "state", "committed_offset", "lag", "in_flight", "concurrency_limit",
       "delivered", "retried", "dead_lettered", "last_error")  # fmt: skip


def add_commands(commands: Any, with_url: AddUrl) -> None:
    """The `subscriptions` subcommand (`commands`: argparse's subparsers action)."""
    subs = commands.add_parser(
        "subscriptions", help="push a topic to an HTTP endpoint: create, list, describe, ..."
    )
    actions = subs.add_subparsers(dest="action", required=True)
    create = cli.with_output(with_url(actions.add_parser("create", help="a new subscription")))
    create.add_argument("name")
    create.add_argument("--topic", required=True)
    create.add_argument("--endpoint", required=True, help="the http(s) URL records are POSTed to")
    create.add_argument("--start", default="latest", help="earliest, latest or a timestamp (ms)")
    create.add_argument("--dead-letter-topic")
    create.add_argument("--format", choices=["binary", "structured", "json"])
    create.add_argument(
        "--decode-values",
        choices=["none", "schema"],
        help="schema: values in the schema registry's wire format delivered as their JSON",
    )
    create.add_argument("--max-records", type=int, help="records per request (batching)")
    create.add_argument("--max-wait-ms", type=int, help="how long a batch may wait to fill")
    create.add_argument("--max-attempts", type=int)
    create.add_argument(
        "--bisect-on-error",
        action="store_true",
        help="split a batch the endpoint refuses (4xx, 5xx but 503) to isolate the bad record",
    )
    create.add_argument(
        "--ordering",
        choices=["partition", "key", "none"],
        help="partition: one request per partition, in order; key: in order per key; none",
    )
    create.add_argument(
        "--max-in-flight", type=int, help="requests per partition at once (ordering key, none)"
    )
    create.add_argument(
        "--max-requests", type=int, help="ceiling of the adaptive in-flight limit, per node"
    )
    create.add_argument(
        "--pipeline", type=int, help="requests on one connection before their answers (HTTP/1.1)"
    )
    create.add_argument("--rate-limit", type=float, help="at most this many requests per second")
    create.add_argument(
        "--spec", help='further fields as a JSON object, e.g. \'{"retry": {"timeout_ms": 5000}}\''
    )
    cli.with_output(with_url(actions.add_parser("list", help="every subscription")))
    for action, text in (
        ("describe", "state, positions, lag and errors per partition"),
        ("pause", "stop sending (positions are kept)"),
        ("resume", "go on from the committed positions"),
        ("delete", "stop and forget the positions"),
    ):
        cli.with_output(with_url(actions.add_parser(action, help=text))).add_argument("name")


def _spec(args: argparse.Namespace) -> dict[str, Any]:
    doc: dict[str, Any] = orjson.loads(args.spec) if args.spec else {}
    if not isinstance(doc, dict):
        raise SystemExit("sluice: --spec must be a JSON object")
    start: Any = args.start
    if start.isdigit():
        start = {"timestamp": int(start)}
    doc |= {"name": args.name, "topic": args.topic, "endpoint": args.endpoint, "start": start}
    if args.dead_letter_topic:
        doc["dead_letter_topic"] = args.dead_letter_topic
    if args.format:
        doc["format"] = args.format
    if args.decode_values:
        doc["decode_values"] = args.decode_values
    batching = {k: v for k, v in (("max_records", args.max_records),
                                  ("max_wait_ms", args.max_wait_ms)) if v is not None}  # fmt: skip
    if batching:
        doc["batching"] = {**doc.get("batching", {}), **batching}
    retry: dict[str, Any] = {}
    if args.max_attempts is not None:
        retry["max_attempts"] = args.max_attempts
    if args.bisect_on_error:
        retry["bisect_on_error"] = True
    if retry:
        doc["retry"] = {**doc.get("retry", {}), **retry}
    if args.ordering:
        doc["ordering"] = args.ordering
    pairs = (
        ("max_in_flight", args.max_in_flight),
        ("max_requests", args.max_requests),
        ("pipeline", args.pipeline),
    )
    concurrency = {k: v for k, v in pairs if v is not None}
    if concurrency:
        doc["concurrency"] = {**doc.get("concurrency", {}), **concurrency}
    if args.rate_limit is not None:
        doc["rate_limit_per_s"] = args.rate_limit
    return doc


async def subscriptions_command(args: argparse.Namespace) -> None:
    base = f"{args.url}/v1/subscriptions"
    table = cli.as_table(args)
    async with cli.session(args) as session:
        if args.action == "list":
            subs = (await cli.call(session, "GET", base))["subscriptions"]
            if not table:
                cli.print_json(subs)
                return
            rows = [[s["name"], s["topic"], s["state"], s["endpoint"]] for s in subs]
            print(cli.table(("NAME", "TOPIC", "STATE", "ENDPOINT"), rows))
            return
        if args.action == "create":
            doc = await cli.call(session, "POST", base, json=_spec(args))
            if not table:
                cli.print_json(doc)
                return
            print(f"created subscription {doc['name']} on {doc['topic']} -> {doc['endpoint']}")
            print(f"signing secret (shown once): {doc['signing_secret']}")
            return
        url = f"{base}/{quote(args.name, safe='')}"
        if args.action == "delete":
            await cli.call(session, "DELETE", url)
            if table:
                print(f"deleted subscription {args.name}")
            else:
                cli.print_json({"name": args.name, "deleted": True})
            return
        method = "GET" if args.action == "describe" else "POST"
        path = url if args.action == "describe" else f"{url}/{args.action}"
        doc = await cli.call(session, method, path)
        if not table:
            cli.print_json(doc)
            return
        reason = f" ({doc['pause_reason']})" if doc.get("pause_reason") else ""
        print(
            f"subscription {doc['name']}: {doc['state']}{reason}, {doc['topic']} -> "
            f"{doc['endpoint']}; delivered {doc['delivered']}, retried {doc['retried']}, "
            f"dead-lettered {doc['dead_lettered']}, lag {doc['lag']}\n"
        )
        header = [c.upper().replace("_", "-") for c in ROW]
        print(cli.table(header, [[r.get(c) for c in ROW] for r in doc["partitions"]]))
