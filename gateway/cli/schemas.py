"""`sluice schemas`: a node's schema registry (Confluent's API under /schema-registry): subjects,
versions, a schema by subject or id, register, check compatibility, delete, and the
compatibility level and mode; tables on a terminal, the registry's JSON when piped."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson

from gateway.cli import client as cli

AddUrl = Callable[[argparse.ArgumentParser], argparse.ArgumentParser]
PREFIX = "/schema-registry"
MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"
SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")
LEVELS = ("BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL",
          "FULL_TRANSITIVE", "NONE")  # fmt: skip
MODES = ("READWRITE", "READONLY", "IMPORT")
_SUFFIX_TYPES = {".avsc": "AVRO", ".json": "JSON", ".proto": "PROTOBUF"}


def add_commands(commands: Any, with_url: AddUrl) -> None:
    """The `schemas` subcommand (`commands`: argparse's subparsers action)."""
    schemas = commands.add_parser(
        "schemas", help="the schema registry: subjects, versions, register, check, delete"
    )
    actions = schemas.add_subparsers(dest="action", required=True)
    subjects = cli.with_output(with_url(actions.add_parser("subjects", help="every subject")))
    subjects.add_argument("--deleted", action="store_true", help="soft-deleted ones too")
    versions = cli.with_output(
        with_url(actions.add_parser("versions", help="a subject's versions"))
    )
    versions.add_argument("subject")
    show = cli.with_output(
        with_url(actions.add_parser("show", help="a subject's version (latest)"))
    )
    show.add_argument("subject")
    show.add_argument("version", nargs="?", default="latest")
    by_id = cli.with_output(
        with_url(actions.add_parser("id", help="a schema by id, and who uses it"))
    )
    by_id.add_argument("id", type=int)
    for action, text in (
        ("register", "register a schema (a file, or - for stdin) under a subject"),
        ("check", "whether a schema is compatible with a subject's version (latest)"),
    ):
        sub = cli.with_output(with_url(actions.add_parser(action, help=text)))
        sub.add_argument("subject")
        sub.add_argument("file", help="the schema's text: a path, or - for stdin")
        sub.add_argument(
            "--type", choices=SCHEMA_TYPES, help="default: from the file's suffix, else AVRO"
        )
        sub.add_argument(
            "--reference",
            action="append",
            default=[],
            metavar="NAME=SUBJECT:VERSION",
            help="a reference the schema's text names (repeatable)",
        )
        if action == "check":
            sub.add_argument("--version", default="latest")
    delete = cli.with_output(
        with_url(actions.add_parser("delete", help="a subject, or one version"))
    )
    delete.add_argument("subject")
    delete.add_argument("version", nargs="?")
    delete.add_argument("--permanent", action="store_true", help="after a soft delete")
    for action, choices in (("compatibility", LEVELS), ("mode", MODES)):
        sub = cli.with_output(
            with_url(actions.add_parser(action, help=f"show or set the {action}"))
        )
        sub.add_argument("subject", nargs="?", help="default: the global one")
        sub.add_argument("--set", choices=choices, dest="value")


def schema_document(args: argparse.Namespace) -> dict[str, Any]:
    """The registry's body for `register` and `check`: the schema's text, type, references."""
    text = sys.stdin.read() if args.file == "-" else _read(Path(args.file))
    schema_type = args.type or _SUFFIX_TYPES.get(Path(args.file).suffix.lower(), "AVRO")
    doc: dict[str, Any] = {"schema": text, "schemaType": schema_type}
    if args.reference:
        doc["references"] = [_reference(given) for given in args.reference]
    return doc


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise SystemExit(f"sluice: {path}: {exc.strerror or exc}") from None


def _reference(given: str) -> dict[str, object]:
    name, _, where = given.partition("=")
    subject, _, version = where.rpartition(":")
    if not name or not subject or not version.isdigit():
        raise SystemExit(f"sluice: --reference {given!r} is not NAME=SUBJECT:VERSION")
    return {"name": name, "subject": subject, "version": int(version)}


async def schemas_command(args: argparse.Namespace) -> None:
    base = f"{args.url}{PREFIX}"
    table = cli.as_table(args)
    headers = {"Accept": MEDIA_TYPE}
    async with cli.session(args) as session:

        async def call(method: str, path: str, body: object = None) -> Any:
            if body is None:
                return await cli.call(session, method, base + path, headers=headers)
            sent = {**headers, "Content-Type": MEDIA_TYPE}
            return await cli.call(
                session, method, base + path, headers=sent, data=orjson.dumps(body)
            )

        answer = await _run(args, call)
    if not table:
        cli.print_json(answer)
        return
    print(_as_text(args, answer))


async def _run(args: argparse.Namespace, call: Callable[..., Any]) -> Any:
    """The action's request(s); the registry's answer."""
    action = args.action
    subject = quote(getattr(args, "subject", None) or "", safe="")
    if action == "subjects":
        return await call("GET", "/subjects" + ("?deleted=true" if args.deleted else ""))
    if action == "versions":
        return await call("GET", f"/subjects/{subject}/versions")
    if action == "show":
        return await call("GET", f"/subjects/{subject}/versions/{quote(args.version, safe='')}")
    if action == "id":
        schema = await call("GET", f"/schemas/ids/{args.id}")
        return {
            **schema,
            "id": args.id,
            "used_by": await call("GET", f"/schemas/ids/{args.id}/versions"),
        }
    if action == "register":
        return await call("POST", f"/subjects/{subject}/versions", schema_document(args))
    if action == "check":
        version = quote(args.version, safe="")
        path = f"/compatibility/subjects/{subject}/versions/{version}?verbose=true"
        return await call("POST", path, schema_document(args))
    if action == "delete":
        path = f"/subjects/{subject}" + (f"/versions/{args.version}" if args.version else "")
        return await call("DELETE", path + ("?permanent=true" if args.permanent else ""))
    kind = "config" if action == "compatibility" else "mode"
    path = f"/{kind}" + (f"/{subject}" if subject else "")
    if args.value is None:
        return await call(
            "GET", path + ("?defaultToGlobal=true" if subject and kind == "config" else "")
        )
    field = "compatibility" if kind == "config" else "mode"
    return await call("PUT", path, {field: args.value})


def _as_text(args: argparse.Namespace, answer: Any) -> str:
    """The answer for a terminal."""
    action = args.action
    if action == "subjects":
        return "\n".join(answer) if answer else "(no subjects)"
    if action in ("versions", "delete"):
        return " ".join(str(v) for v in answer) if isinstance(answer, list) else str(answer)
    if action == "show":
        header = (
            f"subject {answer['subject']} version {answer['version']}, id {answer['id']}, "
            f"{answer.get('schemaType', 'AVRO')}"
        )
        return header + "\n" + _pretty(answer["schema"])
    if action == "id":
        used = ", ".join(f"{u['subject']} v{u['version']}" for u in answer["used_by"])
        return (
            f"id {answer['id']}, {answer.get('schemaType', 'AVRO')}, used by {used or 'nothing'}"
            f"\n{_pretty(answer['schema'])}"
        )
    if action == "register":
        return f"registered under {args.subject}: id {answer['id']}"
    if action == "check":
        if answer.get("is_compatible"):
            return "compatible"
        return "\n".join(["not compatible:", *answer.get("messages", [])])
    value = answer.get("compatibilityLevel", answer.get("compatibility", answer.get("mode")))
    return str(value)


def _pretty(text: str) -> str:
    """A JSON schema's text indented; any other (Protobuf) as it is."""
    try:
        return orjson.dumps(orjson.loads(text), option=orjson.OPT_INDENT_2).decode()
    except orjson.JSONDecodeError:
        return text
