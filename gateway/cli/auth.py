"""`sluice auth` (credentials: in the files of a --data-dir, a single node's or --workers',
running or not; in a cluster's etcd with --cluster; or through a running node's
/v1/auth/keys) and `sluice acls` (a running node's /v1/acls, like kafka-acls.sh)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gateway import config
from gateway.auth.acl import CLUSTER, OPERATIONS
from gateway.auth.credentials import KINDS, CredentialError, KeyFile, Kind, new_credential
from gateway.cli import client as cli

AddUrl = Callable[[argparse.ArgumentParser], argparse.ArgumentParser]
ACL_COLUMNS = ("principal", "resource_type", "resource_name", "pattern_type", "operation",
               "permission")  # fmt: skip


def add_commands(commands: Any, with_url: AddUrl) -> None:
    """The `auth` and `acls` subcommands (`commands`: argparse's subparsers action)."""
    auth = commands.add_parser("auth", help="create, list and revoke API keys and Basic secrets")
    actions = auth.add_subparsers(dest="action", required=True)
    create = _with_place(actions.add_parser("create-key", help="a new key, printed once"), with_url)
    create.add_argument("--principal", required=True)
    create.add_argument(
        "--type", choices=KINDS, default="api-key", help="basic: a secret for HTTP Basic"
    )
    _with_place(actions.add_parser("list-keys", help="ids, principals and types"), with_url)
    revoke = _with_place(actions.add_parser("revoke-key", help="delete a key by id"), with_url)
    revoke.add_argument("key_id")

    acls = commands.add_parser("acls", help="add, list and remove ACL bindings")
    acl_actions = acls.add_subparsers(dest="action", required=True)
    for action, text in (("add", "allow (or --deny) operations"), ("remove", "delete bindings")):
        sub = with_url(acl_actions.add_parser(action, help=text))
        sub.add_argument("--principal", required=True, help="a principal, or * for every one")
        _resource(sub, required=True)
        sub.add_argument(
            "--operation", action="append", required=True, choices=OPERATIONS, help="repeatable"
        )
        sub.add_argument("--prefixed", action="store_true", help="the name is a prefix")
        sub.add_argument("--deny", action="store_true", help="a deny binding (deny wins)")
        cli.with_output(sub)
    listing = with_url(acl_actions.add_parser("list", help="bindings, filtered"))
    listing.add_argument("--principal")
    _resource(listing, required=False)
    cli.with_output(listing)


def _with_place(sub: argparse.ArgumentParser, with_url: AddUrl) -> argparse.ArgumentParser:
    place = sub.add_mutually_exclusive_group()
    place.add_argument(
        "--data-dir",
        type=Path,
        help="the --data-dir of `sluice serve` on a single node or with --workers, changed "
        "directly, whether it runs or not (else: --url)",
    )
    place.add_argument(
        "--cluster",
        type=config.etcd_endpoints,
        metavar="etcd://HOST:PORT[,HOST:PORT...]",
        help="a cluster's etcd, changed directly, whether the nodes run or not (else: --url)",
    )
    sub.add_argument(
        "--etcd-prefix",
        default=os.environ.get("SLUICE_ETCD_PREFIX", "/sluice"),
        help="with --cluster: the cluster's key prefix, as given to `sluice serve` "
        "(default $SLUICE_ETCD_PREFIX, else /sluice)",
    )
    return with_url(sub)


def _resource(sub: argparse.ArgumentParser, *, required: bool) -> None:
    which = sub.add_mutually_exclusive_group(required=required)
    which.add_argument("--topic", metavar="NAME")
    which.add_argument("--group", metavar="NAME")
    which.add_argument("--cluster", action="store_true")


async def auth_command(args: argparse.Namespace) -> None:
    if args.data_dir is not None:
        _offline(args)
        return
    if args.cluster is not None:
        await _in_etcd(args)
        return
    base = f"{args.url}/v1/auth/keys"
    async with cli.session(args) as session:
        if args.action == "create-key":
            doc = await cli.call(
                session, "POST", base, json={"principal": args.principal, "type": args.type}
            )
            _created(doc["secret"], doc["key_id"], doc["principal"], doc["type"])
        elif args.action == "list-keys":
            _print_keys((await cli.call(session, "GET", base))["keys"])
        else:
            await cli.call(session, "DELETE", f"{base}/{args.key_id}")
            print(f"revoked {args.key_id}")


def _offline(args: argparse.Namespace) -> None:
    keys = KeyFile(args.data_dir / "auth" / "keys.json")
    try:
        if args.action == "create-key":
            kind: Kind = "basic" if args.type == "basic" else "api-key"
            secret, record = new_credential(args.principal, kind)
            keys.update(lambda held: held.with_added(record))
            _created(secret, record.key_id, record.principal, record.kind)
        elif args.action == "list-keys":
            _print_keys([r.public() for r in keys.load().records])
        elif args.key_id not in keys.load().by_id:
            raise cli.CommandError(f"no credential has the id {args.key_id!r}", "KEY_NOT_FOUND")
        else:
            keys.update(lambda held: held.without(args.key_id))
            print(f"revoked {args.key_id}")
    except CredentialError as exc:
        raise cli.CommandError(str(exc)) from None


async def _in_etcd(args: argparse.Namespace) -> None:
    """The keys in a cluster's etcd, where every node follows them (a new key is known to a
    node as soon as a request shows it)."""
    from gateway.auth.etcd_store import EtcdAuthStore
    from replication.errors import MetadataUnavailable

    where = "etcd://" + ",".join(url.removeprefix("http://") for url in args.cluster)
    store = EtcdAuthStore(args.cluster, args.etcd_prefix)
    try:
        await store.start()
    except MetadataUnavailable as exc:
        raise cli.CommandError(f"cannot reach etcd at {where}: {exc}") from None
    try:
        if args.action == "create-key":
            kind: Kind = "basic" if args.type == "basic" else "api-key"
            secret, record = new_credential(args.principal, kind)
            await store.add_credential(record)
            _created(secret, record.key_id, record.principal, record.kind)
        elif args.action == "list-keys":
            _print_keys([r.public() for r in store.state.credentials.records])
        elif not await store.remove_credential(args.key_id):
            raise cli.CommandError(f"no credential has the id {args.key_id!r}", "KEY_NOT_FOUND")
        else:
            print(f"revoked {args.key_id}")
    except CredentialError as exc:
        raise cli.CommandError(str(exc)) from None
    except MetadataUnavailable as exc:
        raise cli.CommandError(f"etcd at {where}: {exc}") from None
    finally:
        await store.close()


def _created(secret: str, key_id: str, principal: str, kind: str) -> None:
    """The secret alone on stdout (for `> file`); what it is on stderr."""
    print(secret)
    print(
        f"sluice: {kind} {key_id} for principal {principal!r}; the secret is shown only now",
        file=sys.stderr,
    )


def _print_keys(keys: list[dict[str, Any]]) -> None:
    rows = [[k["key_id"], k["principal"], k["type"], k["created_ms"]] for k in keys]
    print(cli.table(("KEY-ID", "PRINCIPAL", "TYPE", "CREATED-MS"), rows))


def _bindings(args: argparse.Namespace) -> list[dict[str, str]]:
    resource_type, name = _named_resource(args)
    assert resource_type is not None and name is not None
    return [
        {
            "principal": args.principal,
            "resource_type": resource_type,
            "resource_name": name,
            "pattern_type": "prefixed" if args.prefixed else "literal",
            "operation": operation,
            "permission": "deny" if args.deny else "allow",
        }
        for operation in dict.fromkeys(args.operation)
    ]


def _named_resource(args: argparse.Namespace) -> tuple[str | None, str | None]:
    if args.topic is not None:
        return "topic", args.topic
    if args.group is not None:
        return "group", args.group
    if args.cluster:
        return "cluster", CLUSTER
    return None, None


async def acls_command(args: argparse.Namespace) -> None:
    base = f"{args.url}/v1/acls"
    async with cli.session(args) as session:
        if args.action == "list":
            resource_type, name = _named_resource(args)
            query = {"principal": args.principal, "resource_type": resource_type,
                     "resource_name": name}  # fmt: skip
            params = {k: v for k, v in query.items() if v is not None}
            shown = (await cli.call(session, "GET", base, params=params))["acls"]
        else:
            method = "POST" if args.action == "add" else "DELETE"
            shown = []
            for binding in _bindings(args):
                await cli.call(session, method, base, json=binding)
                shown.append(binding)
    if not cli.as_table(args):
        cli.print_json(shown)
        return
    header = tuple(c.upper().replace("_", "-") for c in ACL_COLUMNS)
    print(cli.table(header, [[b[c] for c in ACL_COLUMNS] for b in shown]))
