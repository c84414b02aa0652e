"""`sluice quotas`: a running node's /v1/quotas (like `kafka-configs --entity-type users`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from gateway.auth.quotas import DEFAULT_ENTITY, FIELD_OF, KINDS
from gateway.cli import client as cli

AddUrl = Callable[[argparse.ArgumentParser], argparse.ArgumentParser]
COLUMNS = ("principal", *FIELD_OF.values())


def add_commands(commands: Any, with_url: AddUrl) -> None:
    """The `quotas` subcommand (`commands`: argparse's subparsers action)."""
    quotas = commands.add_parser("quotas", help="set, list and remove per-principal quotas")
    actions = quotas.add_subparsers(dest="action", required=True)
    put = _entity(with_url(actions.add_parser("set", help="replace a principal's quota")))
    put.add_argument("--produce-bytes-per-second", type=cli_rate(int), metavar="N")
    put.add_argument("--fetch-bytes-per-second", type=cli_rate(int), metavar="N")
    put.add_argument("--requests-per-second", type=cli_rate(float), metavar="N")
    cli.with_output(put)
    cli.with_output(with_url(actions.add_parser("list", help="every quota set")))
    cli.with_output(
        _entity(with_url(actions.add_parser("describe", help="own and effective rates")))
    )
    _entity(with_url(actions.add_parser("remove", help="delete a principal's own quota")))


def cli_rate(kind: Callable[[str], float]) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        try:
            value = kind(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {raw!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be above 0, got {raw}")
        return value

    return parse


def _entity(sub: argparse.ArgumentParser) -> argparse.ArgumentParser:
    which = sub.add_mutually_exclusive_group(required=True)
    which.add_argument("--principal", help="a principal's name")
    which.add_argument(
        "--default", action="store_true", help=f"the {DEFAULT_ENTITY} quota of every principal "
        "without its own",
    )  # fmt: skip
    return sub


async def quotas_command(args: argparse.Namespace) -> None:
    base = f"{args.url}/v1/quotas"
    entity = DEFAULT_ENTITY if getattr(args, "default", False) else getattr(args, "principal", "")
    url = f"{base}/{quote(entity or '', safe='')}"
    async with cli.session(args) as session:
        if args.action == "list":
            rows = (await cli.call(session, "GET", base))["quotas"]
        elif args.action == "describe":
            doc = await cli.call(session, "GET", url)
            if not cli.as_table(args):
                cli.print_json(doc)
                return
            rows = [{"principal": f"{entity} (effective)", **doc["effective"]}]
        elif args.action == "set":
            rates = {FIELD_OF[k]: getattr(args, FIELD_OF[k]) for k in KINDS}
            if all(v is None for v in rates.values()):
                raise cli.CommandError(
                    "name at least one rate: --produce-bytes-per-second, "
                    "--fetch-bytes-per-second or --requests-per-second"
                )
            rows = [await cli.call(session, "PUT", url, json=rates)]
        else:
            await cli.call(session, "DELETE", url)
            print(f"removed the quota of {entity}")
            return
    if not cli.as_table(args):
        cli.print_json(rows)
        return
    header = tuple(c.upper().replace("_", "-") for c in COLUMNS)
    print(cli.table(header, [[row.get(c) for c in COLUMNS] for row in rows]))
