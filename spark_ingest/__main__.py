"""Command line: `python -m spark_ingest [options]` ingests once; `... audit` checks a run.

Bad input (options, S3, manifests, checkpoint) is one line on stderr and exit code 2; an
audit that finds a mismatch exits 1.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from spark_ingest import audit as auditing
from spark_ingest import storage, summary
from spark_ingest.errors import IngestError
from spark_ingest.faults import KillSwitch
from spark_ingest.job import JobOptions, run
from spark_ingest.plan import parse_offsets


def ingest_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m spark_ingest",
        description="Ingest tiered Sluice segments from S3 into hourly Parquet, exactly once "
        "(`python -m spark_ingest audit --help` for the audit).",
    )
    add_s3_options(parser)
    parser.add_argument("--topics", required=True, help="comma-separated topics")
    parser.add_argument("--out", required=True, help="output root: a path or s3://bucket/key")
    parser.add_argument(
        "--checkpoint", required=True, help="checkpoint file: a path or s3://bucket/key"
    )
    parser.add_argument("--time-zone", default="UTC", help="zone of the dt=/hr= directories")
    parser.add_argument("--master", default="local[*]", help="Spark master (passed through)")
    parser.add_argument(
        "--json-schema",
        metavar="FILE|infer",
        help="expand JSON values into columns: a schema file (Spark DDL or JSON) or 'infer'",
    )
    parser.add_argument(
        "--value-schema",
        choices=["registry"],
        help="type Avro, JSON Schema and Protobuf values (Confluent's wire format) into "
        "columns with the versions of each topic's subject <topic>-value in the schema "
        "registry at --registry-url",
    )
    parser.add_argument(
        "--registry-url",
        metavar="URL",
        help="a Confluent-compatible schema registry: a gateway's /schema-registry or a "
        "registry's root",
    )
    parser.add_argument(
        "--start-offsets",
        default="{}",
        metavar="JSON",
        help='first offsets of partitions not checkpointed yet: {"topic": {"0": 123}}',
    )
    return parser


def audit_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m spark_ingest audit",
        description="Check a run's ingested row counts against the manifests' record counts.",
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--summary", help="a run summary (a path or s3:// URL)")
    which.add_argument("--checkpoint", help="a checkpoint: audit the summary beside it")
    add_s3_options(parser)
    return parser


def add_s3_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--s3-endpoint", help="S3 endpoint URL (default: AWS)")
    parser.add_argument("--bucket", required=True, help="bucket of the tiered segments")
    parser.add_argument("--prefix", default="", help="key prefix of the tiered segments")


def ingest(argv: list[str]) -> int:
    args = ingest_parser().parse_args(argv)
    options = JobOptions(
        endpoint=args.s3_endpoint,
        bucket=args.bucket,
        prefix=args.prefix,
        topics=tuple(t.strip() for t in args.topics.split(",") if t.strip()),
        out=args.out,
        checkpoint=args.checkpoint,
        time_zone=args.time_zone,
        master=args.master,
        json_schema=args.json_schema,
        value_schema=args.value_schema,
        registry_url=args.registry_url,
        start_offsets=parse_offsets(args.start_offsets, "--start-offsets"),
        kill=KillSwitch.from_env(),
    )
    print(json.dumps(run(options), indent=2))
    return 0


def audit(argv: list[str]) -> int:
    args = audit_parser().parse_args(argv)
    where: storage.Location = (
        storage.location(args.summary, args.s3_endpoint)
        if args.summary is not None
        else summary.location_for(storage.location(args.checkpoint, args.s3_endpoint))
    )
    findings = auditing.audit(summary.load(where), args.s3_endpoint, args.bucket, args.prefix)
    for finding in findings:
        print(finding.line())
    bad = sum(not f.ok for f in findings)
    print(f"audit of {where}: {len(findings)} partitions, {bad} failed")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        if argv[:1] == ["audit"]:
            return audit(argv[1:])
        return ingest(argv)
    except (IngestError, OSError) as exc:
        print(f"spark_ingest: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
