"""The `sluice` command: `serve`, and console tools like Kafka's that talk HTTP to `--url`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import signal
import stat
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import quote

import aiohttp
import orjson

from gateway import config
from gateway.cli import auth as auth_cli
from gateway.cli import client, consumer
from gateway.cli import cluster as cluster_cli
from gateway.cli import quotas as quota_cli
from gateway.cli import schemas as schemas_cli
from gateway.cli import share_groups as share_groups_cli
from gateway.cli import subscriptions as subscriptions_cli
from gateway.cli import transactions as transactions_cli
from gateway.cli.client import CommandError
from gateway.cli.progress import Progress
from gateway.settings import Settings

DEFAULT_URL = "http://localhost:8080"
FETCH_WAIT_MS = "5000"
FETCH_RECORDS = 1000


def _config_pairs(pairs: Sequence[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--config takes name=value, got {pair!r}")
        out[name] = value
    return out


LOCAL_COLUMNS = ("log_start_offset", "high_watermark", "log_end_offset", "size_bytes")


def _print_topic(doc: dict[str, Any], table: bool) -> None:
    """A topic's description: JSON, or a summary line and kafka-topics --describe's table."""
    if not table:
        client.print_json(doc)
        return
    rows = doc["partitions"]
    overrides = ",".join(f"{k}={v}" for k, v in sorted(doc["overrides"].items())) or "-"
    factor = len(rows[0]["replicas"]) if rows else 0
    print(
        f"topic {doc['name']}  id {doc['topic_id']}  partitions {len(rows)}  "
        f"replication factor {factor}  configs {overrides}\n"
    )
    header = ("PARTITION", "LEADER", "REPLICAS", "ISR", "ELR", "OFFLINE", "LOG-START",
              "HIGH-WATERMARK", "LOG-END", "SIZE")  # fmt: skip
    print(
        client.table(
            header,
            [
                [
                    r["partition"],
                    "none" if r["leader"] is None else r["leader"],
                    ",".join(map(str, r["replicas"])),
                    ",".join(map(str, r["isr"])),
                    ",".join(map(str, r["eligible_leader_replicas"])) or "-",
                    ",".join(map(str, r["offline_replicas"])) or "-",
                    *("-" if r[k] is None else r[k] for k in LOCAL_COLUMNS),
                ]
                for r in rows
            ],
        )
    )


async def topics_command(args: argparse.Namespace) -> None:
    base = f"{args.url}/v1/topics"
    table = client.as_table(args)
    async with client.session(args) as session:
        if args.action == "list":
            topics = (await client.call(session, "GET", base))["topics"]
            if args.output == "json":
                client.print_json(topics)
                return
            for topic in topics:
                print(f"{topic['name']}\t{topic['partitions']}")
        elif args.action == "create":
            body = {
                "name": args.topic,
                "partitions": args.partitions,
                "configs": _config_pairs(args.config),
            }
            if args.replication_factor is not None:
                body["replication_factor"] = args.replication_factor
            _print_topic(await client.call(session, "POST", base, json=body), table)
        elif args.action == "describe":
            _print_topic(await client.call(session, "GET", f"{base}/{args.topic}"), table)
        elif args.action == "alter":
            changes: dict[str, object] = {}
            configs: dict[str, object] = dict(_config_pairs(args.config))
            configs.update({name: None for name in args.delete_config})
            if configs:
                changes["configs"] = configs
            if args.partitions is not None:
                changes["partitions"] = args.partitions
            _print_topic(
                await client.call(session, "PATCH", f"{base}/{args.topic}", json=changes), table
            )
        elif args.action == "delete":
            await client.call(session, "DELETE", f"{base}/{args.topic}")
            client.print_deleted(
                {"topic": args.topic, "deleted": True}, f"deleted {args.topic}", table
            )


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


def _line(raw: bytes, number: int) -> str:
    """A line of input as text, without its line ending."""
    try:
        return raw.decode().rstrip("\r\n")
    except UnicodeDecodeError as exc:
        raise CommandError(f"line {number} of the input is not UTF-8: {exc}") from None


def _input_size(stream: BinaryIO) -> int | None:
    """The bytes left to read from a file given as stdin (`< FILE`); None from a pipe."""
    try:
        fd = stream.fileno()
    except io.UnsupportedOperation:
        return None
    info = os.fstat(fd)
    return info.st_size - os.lseek(fd, 0, os.SEEK_CUR) if stat.S_ISREG(info.st_mode) else None


async def _send(
    session: aiohttp.ClientSession,
    url: str,
    records: list[dict[str, object]],
    params: dict[str, str],
) -> int:
    """Produce `records`; how many."""
    await client.call(session, "POST", url, json={"records": records}, params=params)
    return len(records)


async def _produce_lines(
    session: aiohttp.ClientSession,
    args: argparse.Namespace,
    url: str,
    params: dict[str, str],
    progress: Progress,
) -> int:
    """stdin's lines, sent in batches of `--batch-size` (one a line when typed); how many."""
    batch_size = 1 if sys.stdin.isatty() else args.batch_size
    sent = 0
    batch: list[dict[str, object]] = []
    read = 0  # bytes of input since the last request
    for number, raw in enumerate(sys.stdin.buffer, 1):
        read += len(raw)
        line = _line(raw, number)
        if line:
            batch.append(_record(line, args.key_separator))
        if len(batch) >= batch_size:
            sent += await _send(session, url, batch, params)
            progress.advance(read, f"{sent:,} records")
            batch, read = [], 0
    if batch:
        sent += await _send(session, url, batch, params)
    progress.advance(read, f"{sent:,} records")
    return sent


async def _in_transaction(
    session: aiohttp.ClientSession,
    args: argparse.Namespace,
    url: str,
    params: dict[str, str],
    progress: Progress,
) -> int:
    """The whole input as one transaction of `--transactional-id`: begun, produced, committed;
    aborted when anything fails first (nothing of it is then read committed)."""
    base = f"{args.url}/v1/transactions/{quote(args.transactional_id, safe='')}"
    begun = await client.call(session, "POST", base, json={})
    epoch = {"producer_epoch": begun["producer_epoch"]}
    params["producer_epoch"] = str(begun["producer_epoch"])
    try:
        sent = await _produce_lines(session, args, url, params, progress)
    except BaseException:
        with contextlib.suppress(client.CommandError, aiohttp.ClientError):
            await client.call(session, "POST", f"{base}/abort", json=epoch)
        raise
    await client.call(session, "POST", f"{base}/commit", json=epoch)
    return sent


async def produce_command(args: argparse.Namespace) -> None:
    """stdin lines -> records; a JSON line is sent as that JSON value, anything else as a string.
    Input that is not typed at a terminal shows its progress on stderr. With
    `--transactional-id`, inside a transaction: the open one of `--producer-epoch`, or else one
    of its own around the whole input."""
    if args.producer_epoch is not None and args.transactional_id is None:
        raise CommandError("--producer-epoch names a transaction: give --transactional-id too")
    path = f"/v1/topics/{args.topic}" + (
        f"/partitions/{args.partition}" if args.partition is not None else ""
    )
    url = f"{args.url}{path}/records"
    params = {"acks": args.acks}
    if args.transactional_id is not None:
        params["transactional_id"] = args.transactional_id
    if args.producer_epoch is not None:
        params["producer_epoch"] = str(args.producer_epoch)
    size = _input_size(sys.stdin.buffer)
    show = not sys.stdin.isatty()
    with Progress(f"produce {args.topic}", size, unit="bytes", show=show) as progress:
        async with client.session(args) as session:
            if args.transactional_id is not None and args.producer_epoch is None:
                sent = await _in_transaction(session, args, url, params, progress)
                print(
                    f"produced {sent} records, committed in transaction {args.transactional_id}",
                    file=sys.stderr,
                )
                return
            sent = await _produce_lines(session, args, url, params, progress)
    print(f"produced {sent} records", file=sys.stderr)


async def _follow_partition(
    session: aiohttp.ClientSession,
    args: argparse.Namespace,
    partition: int,
    remaining: list[int],
    done: asyncio.Event,
) -> None:
    """Print one partition's records from --offset on. An offset past the end waits for the
    log to reach it; one below the start goes where --reset says."""
    url = f"{args.url}/v1/topics/{args.topic}/partitions/{partition}/records"
    offset = args.offset
    wanted = int(offset) if offset.isdigit() else None  # print nothing below it
    while not done.is_set():
        params = {"offset": offset, "timeout_ms": "10000", "max_records": "1000"}
        try:
            answer = await consumer.call_retrying(
                session, "GET", url, params=params, decode=consumer.records_answer
            )
        except CommandError as exc:
            if exc.code != "OFFSET_OUT_OF_RANGE" or exc.problem is None:
                raise
            offset = _out_of_range(args, partition, int(offset), exc.problem)
            continue
        for record in answer["records"]:
            if remaining[0] == 0:
                break
            if wanted is not None and record["offset"] < wanted:
                continue
            print(consumer.format_record(record, args.print_key, args.key_separator), flush=True)
            remaining[0] -= 1
        if remaining[0] == 0:
            done.set()
        offset = str(answer["next_offset"])


def _out_of_range(
    args: argparse.Namespace, partition: int, offset: int, problem: dict[str, Any]
) -> str:
    """Where to read from after a 416: the log end to wait at, or --reset's choice."""
    start, end = int(problem["log_start_offset"]), int(problem["log_end_offset"])
    if offset > end:
        return str(end)  # wait there until the log reaches `offset`
    if args.reset == "none":
        raise CommandError(
            f"offset {offset} of {args.topic}-{partition} is below the log start {start} "
            "(deleted by retention); --reset earliest or latest says where to go instead",
            "OFFSET_OUT_OF_RANGE",
        )
    print(
        f"sluice: offset {offset} of {args.topic}-{partition} is below the log start {start}; "
        f"reading from {args.reset}",
        file=sys.stderr,
        flush=True,
    )
    return str(args.reset)


async def _join(
    session: aiohttp.ClientSession, members: str, args: argparse.Namespace
) -> tuple[str, int]:
    """Join; the member id and the first cursor."""
    body: dict[str, object] = {
        "topics": [args.topic],
        "auto_offset_reset": args.offset,
        "auto_commit": False,  # commits follow the printing instead
    }
    if args.session_timeout_ms is not None:
        body["session_timeout_ms"] = args.session_timeout_ms
    if args.assignor is not None:
        body["assignor"] = args.assignor
    if args.instance_id is not None:
        body["instance_id"] = args.instance_id
    joined = await client.call(session, "POST", members, json=body)
    return str(joined["member_id"]), int(joined["cursor"])


def _printed_offsets(records: list[dict[str, Any]]) -> list[dict[str, object]]:
    """The offsets to commit after printing `records`: one past the last, per partition."""
    after: dict[tuple[str, int], int] = {}
    for record in records:
        after[(record["topic"], record["partition"])] = record["offset"] + 1
    return [{"topic": t, "partition": p, "offset": o} for (t, p), o in after.items()]


async def group_consume(args: argparse.Namespace) -> None:
    """Consume as a member of --group: print each batch, then commit exactly what was printed;
    leave the group on the way out (--max-records, Ctrl-C, SIGTERM) so its partitions move
    to the other members at once. A static member (--instance-id) stays, as in Kafka: run
    again within the session timeout, it carries on with the same partitions."""
    members = f"{args.url}/v1/groups/{quote(args.group, safe='')}/members"
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    remaining = args.max_records
    async with client.session(args) as session:
        member, cursor = await _join(session, members, args)
        try:
            while remaining is None or remaining > 0:
                limit = FETCH_RECORDS if remaining is None else min(remaining, FETCH_RECORDS)
                params = {
                    "timeout_ms": FETCH_WAIT_MS,
                    "max_records": str(limit),
                    "cursor": str(cursor),  # an answer lost on the way comes again
                }
                try:
                    answer = await consumer.call_retrying(
                        session,
                        "GET",
                        f"{members}/{member}/records",
                        params=params,
                        decode=consumer.records_answer,
                    )
                    records = answer["records"]
                    cursor = answer["cursor"]
                    for record in records:
                        print(consumer.format_record(record, args.print_key, args.key_separator))
                    sys.stdout.flush()
                    if records:
                        offsets = _printed_offsets(records)
                        await consumer.call_retrying(
                            session,
                            "POST",
                            f"{members}/{member}/commit",
                            json={"offsets": offsets},
                        )
                except CommandError as exc:
                    if exc.code != "UNKNOWN_MEMBER":
                        raise
                    # The session expired (a stalled pipe, a paused process): what was printed
                    # but not committed comes again, as at-least-once delivery promises.
                    print(f"sluice: {exc}; joining again", file=sys.stderr)
                    member, cursor = await _join(session, members, args)
                    continue
                if remaining is not None:
                    remaining -= len(records)
        finally:
            if args.instance_id is None:
                with contextlib.suppress(CommandError, aiohttp.ClientError):
                    await client.call(session, "DELETE", f"{members}/{member}")


async def consume_command(args: argparse.Namespace) -> None:
    """Print records as they arrive (long-poll) until interrupted or --max-records."""
    if args.from_beginning and args.offset == "latest":
        args.offset = "earliest"
    if args.group is not None:
        if args.partition is not None or args.offset not in ("earliest", "latest", "none"):
            raise CommandError(
                "with --group the group chooses partitions and offsets; --offset can only say "
                "where to start without a committed offset: earliest, latest or none"
            )
        await group_consume(args)
        return
    async with client.session(args) as session:
        if args.partition is not None:
            partitions = [args.partition]
        else:
            described = await client.call(session, "GET", f"{args.url}/v1/topics/{args.topic}")
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


async def groups_command(args: argparse.Namespace) -> None:
    base = f"{args.url}/v1/groups"
    table = client.as_table(args)
    async with client.session(args) as session:
        if args.action == "list":
            groups = (await client.call(session, "GET", base))["groups"]
            if not table:
                client.print_json(groups)
                return
            for group in groups:
                print(f"{group['group']}\t{group['state']}\t{group['members']}")
            return
        url = f"{base}/{quote(args.group, safe='')}"
        if args.action == "describe":
            doc = await client.call(session, "GET", url)
            if not table:
                client.print_json(doc)
                return
            members = len(doc["members"])
            print(
                f"group {doc['group']} ({doc['state']}, generation {doc['generation']}, "
                f"{doc['assignor']} assignor): {members} member{'s' * (members != 1)}, "
                f"total lag {doc['lag']}\n"
            )
            header = ("TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "OWNER")
            keys = ("topic", "partition", "committed_offset", "log_end_offset", "lag", "owner")
            print(client.table(header, [[row[k] for k in keys] for row in doc["partitions"]]))
        elif args.action == "reset-offsets":
            body = client.reset_body(args)
            answer = await client.call(session, "PUT", f"{url}/offsets", json=body)
            if not table:
                client.print_json(answer)
                return
            rows = [[o["topic"], o["partition"], o["offset"]] for o in answer["offsets"]]
            print(client.table(("TOPIC", "PARTITION", "NEW-OFFSET"), rows))
        elif args.action == "delete":
            await client.call(session, "DELETE", url)
            client.print_deleted(
                {"group": args.group, "deleted": True}, f"deleted group {args.group}", table
            )


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="sluice", description=__doc__)
    commands = root.add_subparsers(dest="command", required=True)

    serve = commands.add_parser(
        "serve", help="run a node: the embedded single node, or one of a cluster (--cluster)"
    )
    config.add_arguments(serve)
    # Not a setting: how the supervisor of --workers starts each of its workers.
    serve.add_argument("--supervised", action="store_true", help=argparse.SUPPRESS)
    show = commands.add_parser(
        "config", help="show: the effective settings of `serve` and where each came from"
    )
    show.add_argument("action", choices=["show", "reference"])
    config.add_arguments(show)

    dev = commands.add_parser(
        "dev-cluster", help="run a local etcd and N nodes on loopback until Ctrl-C"
    )
    dev.add_argument("--nodes", type=config.positive, default=3)
    dev.add_argument("--data-dir", type=Path, default=Path("dev-cluster"))
    dev.add_argument(
        "--base-port", type=config.positive, default=8080, help="node i listens on P+i"
    )

    def with_url(sub: argparse.ArgumentParser) -> argparse.ArgumentParser:
        sub.add_argument(
            "--url",
            default=os.environ.get("SLUICE_URL", DEFAULT_URL),
            help=f"gateway URL (default $SLUICE_URL, else {DEFAULT_URL})",
        )
        sub.add_argument(
            "--key",
            default=os.environ.get("SLUICE_KEY"),
            help="an API key (or JWT) sent as a bearer token (default $SLUICE_KEY)",
        )
        return sub

    topics = with_url(commands.add_parser("topics", help="create, list, describe, alter, delete"))
    topics.add_argument("action", choices=["create", "list", "describe", "alter", "delete"])
    topics.add_argument("topic", nargs="?")
    topics.add_argument("--partitions", type=int)
    topics.add_argument(
        "--replication-factor", type=int, help="default: the server's (3, or fewer live nodes)"
    )
    topics.add_argument("--config", action="append", default=[], metavar="NAME=VALUE")
    topics.add_argument("--delete-config", action="append", default=[], metavar="NAME")
    topics.add_argument(
        "--output",
        choices=["table", "json"],
        help="default: a table on a terminal, JSON when piped (`list` prints name and "
        "partitions either way, a JSON array with --output json; `delete` a line or "
        '{"topic", "deleted"})',
    )

    produce = with_url(commands.add_parser("produce", help="stdin lines -> records"))
    produce.add_argument("topic")
    produce.add_argument("--partition", type=int)
    produce.add_argument("--key-separator", help="split each line into key and value")
    produce.add_argument("--acks", choices=["0", "1", "all"], default="all")
    produce.add_argument("--batch-size", type=int, default=1000)
    produce.add_argument(
        "--transactional-id",
        help="produce in a transaction: its own around the whole input (begun, committed at "
        "the end, aborted on failure), or the open one of --producer-epoch",
    )
    produce.add_argument(
        "--producer-epoch", type=int, help="the open transaction's epoch (`transactions begin`)"
    )

    consume = with_url(commands.add_parser("consume", help="print records as they arrive"))
    consume.add_argument("topic")
    consume.add_argument("--partition", type=int)
    consume.add_argument(
        "--offset",
        default="latest",
        help="an offset, earliest or latest; with --group, where to start in partitions the "
        "group has no committed offset for: earliest, latest or none",
    )
    consume.add_argument("--from-beginning", action="store_true", help="same as --offset earliest")
    consume.add_argument(
        "--reset",
        choices=["earliest", "latest", "none"],
        default="earliest",
        help="where to go when --offset is below the log start (deleted): earliest (default), "
        "latest, or none (stop with an error); an offset past the end waits for it",
    )
    consume.add_argument("--max-records", "--max-messages", type=int)
    consume.add_argument("--print-key", action="store_true")
    consume.add_argument("--key-separator", default="\t")
    consume.add_argument("--group", help="consume as a member of this consumer group")
    consume.add_argument("--session-timeout-ms", type=int, help="with --group (server default)")
    consume.add_argument("--assignor", choices=["range", "roundrobin"], help="with --group")
    consume.add_argument(
        "--instance-id",
        help="with --group: a static member's id (group.instance.id); it does not leave on exit",
    )

    groups = commands.add_parser("groups", help="list, describe, reset-offsets, delete")
    group_actions = groups.add_subparsers(dest="action", required=True)

    def with_output(sub: argparse.ArgumentParser) -> argparse.ArgumentParser:
        sub.add_argument(
            "--output",
            choices=["table", "json"],
            help="default: a table on a terminal, JSON (the server's answer) when piped",
        )
        return sub

    delete_group = with_output(
        with_url(
            group_actions.add_parser(
                "delete", help="forget a group without members and its offsets"
            )
        )
    )
    delete_group.add_argument("group")
    with_output(
        with_url(group_actions.add_parser("list", help="every group, its state and member count"))
    )
    describe = with_output(
        with_url(group_actions.add_parser("describe", help="offsets, lag and owners"))
    )
    describe.add_argument("group")
    describe.add_argument(
        "--json", dest="output", action="store_const", const="json", help="same as --output json"
    )
    reset = with_output(
        with_url(
            group_actions.add_parser(
                "reset-offsets", help="set committed offsets of an empty group"
            )
        )
    )
    reset.add_argument("group")
    client.add_reset_arguments(reset)
    share_groups_cli.add_commands(commands, with_url)
    transactions_cli.add_commands(commands, with_url)
    auth_cli.add_commands(commands, with_url)
    quota_cli.add_commands(commands, with_url)
    subscriptions_cli.add_commands(commands, with_url)
    schemas_cli.add_commands(commands, with_url)
    cluster_cli.add_commands(commands, with_url)
    return root


def check_settings(settings: Settings, supervised: bool = False) -> None:
    """What no single setting can check alone (`supervised`: a worker of --workers)."""
    if settings.workers > 1 and not supervised and (settings.cluster or settings.advertise):
        raise SystemExit(
            "sluice: --workers runs its own cluster on this host: no --cluster or --advertise"
        )
    if settings.group_min_session_timeout_ms > settings.group_max_session_timeout_ms:
        raise SystemExit("sluice: --group-min-session-timeout-ms is above the maximum")
    if settings.cluster and settings.advertise is None and settings.host in ("0.0.0.0", "::"):
        raise SystemExit("sluice: --cluster with --host 0.0.0.0 needs --advertise URL")
    if (settings.s3_endpoint or settings.s3_prefix) and not settings.s3_bucket:
        raise SystemExit("sluice: --s3-endpoint and --s3-prefix need --s3-bucket")
    if settings.cors_allow_credentials and set(settings.cors_origins) <= {"*"}:
        raise SystemExit("sluice: --cors-allow-credentials needs --cors-origins listed by name")
    if settings.auth and settings.cluster and settings.internal_key_file is None:
        raise SystemExit("sluice: --auth with --cluster needs --internal-key-file (nodes' key)")
    if settings.tls_client_ca is not None and settings.tls_cert is None:
        raise SystemExit("sluice: --tls-client-ca needs --tls-cert and --tls-key")
    jwt_options = (settings.jwt_issuer, settings.jwt_audience)
    if settings.jwt_jwks is None and any(o is not None for o in jwt_options):
        raise SystemExit("sluice: --jwt-issuer and --jwt-audience need --jwt-jwks")


def main(argv: Sequence[str] | None = None) -> None:
    """Run a command; a reader that stops early (`| head`) ends it quietly, as for cat."""
    try:
        _main(argv)
        sys.stdout.flush()
    except BrokenPipeError:
        # Python would report the failed flush of stdout at exit: point it at nothing first.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(1) from None


def _main(argv: Sequence[str] | None) -> None:
    args = parser().parse_args(argv)
    if args.command in ("serve", "config"):
        if args.command == "config" and args.action == "reference":
            print("\n".join(config.reference()))
            return
        try:
            settings, sources = config.resolve(args)
        except config.ConfigError as exc:
            raise SystemExit(f"sluice: {exc}") from None
        supervised = getattr(args, "supervised", False)
        check_settings(settings, supervised)
        if args.command == "config":
            print("\n".join(config.describe(settings, sources)))
            return
        from gateway import worker_dirs
        from gateway.workers import supervisor

        if settings.workers > 1 and not supervised:
            supervisor.supervise(settings)
            return
        if not supervised:
            worker_dirs.check_layout(settings.data_dir, settings.workers)
        from gateway.server import run

        run(settings)
        return
    if args.command == "dev-cluster":
        from gateway.workers.local_cluster import run_dev_cluster

        run_dev_cluster(args.nodes, args.data_dir, args.base_port)
        return
    if args.command == "topics" and args.action != "list" and not args.topic:
        raise SystemExit(f"sluice topics {args.action} needs a topic name")
    if args.command == "topics" and args.action == "create" and args.partitions is None:
        args.partitions = 1
    command = {
        "topics": topics_command,
        "produce": produce_command,
        "consume": consume_command,
        "groups": groups_command,
        "share-groups": share_groups_cli.share_groups_command,
        "transactions": transactions_cli.transactions_command,
        "auth": auth_cli.auth_command,
        "acls": auth_cli.acls_command,
        "quotas": quota_cli.quotas_command,
        "subscriptions": subscriptions_cli.subscriptions_command,
        "schemas": schemas_cli.schemas_command,
        "cluster": cluster_cli.cluster_command,
    }
    try:
        # Ctrl-C, and SIGTERM for a group or share-group consumer, cancel the command: exit quietly.
        with contextlib.suppress(KeyboardInterrupt, asyncio.CancelledError):
            asyncio.run(command[args.command](args))
    except CommandError as exc:
        raise SystemExit(f"sluice: {exc}") from None
    except aiohttp.ClientConnectionError as exc:
        raise SystemExit(f"sluice: {client.connection_error(exc)}") from None
    except aiohttp.ClientError as exc:
        raise SystemExit(f"sluice: {exc}") from None
