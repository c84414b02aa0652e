"""One ingest run: plan from the checkpoint and the manifests, write hourly Parquet, commit.

The order makes every crash recoverable by a plain rerun:
1. plan the ranges (checkpoint -> newest manifest entry) and store them as `pending`;
2. Spark runs a task per segment that downloads, decodes and writes its hourly files, named
   by offsets (with --value-schema registry, typing values with the registry versions the
   plan stores; with --json-schema, the `sluice` source's frame goes through Spark's JSON
   functions and the `sluice_hourly` writer instead). Kafka transactions are decided from
   the segments (transactions.py): a segment holding transactional records is written once
   its partition's markers are known, without the aborted ones, and nothing from the first
   offset of a transaction still undecided on (files written past it go again), which is
   where the partition's checkpoint stops;
3. each touched hour's `_SUCCESS` is merged with the files written to it;
4. the summary is stored, then the checkpoint commits the plan.
A rerun that finds `pending` redoes that exact plan with the same settings: it rewrites the
same names with the same bytes, merges the same `_SUCCESS` entries, and commits.
Spark is started only when there is something to read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import os
import re
import sys
import tempfile
import time
import zoneinfo
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StructType

from engine import batch as fmt
from spark_ingest import checkpoint as ckpt
from spark_ingest import (
    decode,
    layout,
    manifest,
    registry,
    sink,
    source,
    storage,
    summary,
    transactions,
)
from spark_ingest.errors import IngestError
from spark_ingest.faults import KillSwitch
from spark_ingest.manifest import Manifest
from spark_ingest.plan import (
    Gap,
    Offsets,
    Range,
    SegmentTask,
    offsets_to_json,
    plan_ranges,
    segment_tasks,
)
from spark_ingest.progress import Counter, spark_tasks
from spark_ingest.transactions import NONE_DECIDED, Decisions, TxnEvent
from spark_ingest.typed_values import SCHEMA_ID, ValueColumns
from spark_ingest.writer import WrittenFile, write_hour_files

log = logging.getLogger("spark_ingest")

# The source's columns; JSON fields that collide with them (case-insensitively) get a prefix.
FIXED_COLUMNS = frozenset(f.name.lower() for f in source.SCHEMA.fields)
COLLISION_PREFIX = "json_"


@dataclass(frozen=True)
class JobOptions:
    """What `python -m spark_ingest` was asked to do."""

    endpoint: str | None
    bucket: str
    prefix: str
    topics: tuple[str, ...]
    out: str
    checkpoint: str
    time_zone: str = "UTC"
    master: str = "local[*]"
    json_schema: str | None = None  # None, "infer" or a schema file
    value_schema: str | None = None  # None or "registry"
    registry_url: str | None = None  # the schema registry `--value-schema registry` reads
    start_offsets: Offsets = field(default_factory=dict)  # for partitions not checkpointed yet
    kill: KillSwitch = field(default_factory=lambda: KillSwitch(None, 0))

    @property
    def json_mode(self) -> str:
        if self.json_schema is None:
            return "none"
        return "infer" if self.json_schema == "infer" else "file"

    def settings(self) -> ckpt.Settings:
        return ckpt.Settings(
            tuple(sorted(set(self.topics))),
            self.time_zone,
            self.json_mode,
            self.value_schema or "none",
        )


def check_options(options: JobOptions) -> None:
    """Reject bad options before touching S3 or starting Spark."""
    if not options.bucket:
        raise IngestError("--bucket is required")
    for topic in options.topics:
        manifest.check_topic(topic)
    if not options.topics:
        raise IngestError("--topics needs at least one topic")
    try:
        zoneinfo.ZoneInfo(options.time_zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
        raise IngestError(f"unknown --time-zone {options.time_zone!r}") from exc
    if options.json_mode == "file" and not Path(str(options.json_schema)).is_file():
        raise IngestError(f"--json-schema: no such file {options.json_schema!r}")
    if options.value_schema is not None:
        if options.value_schema != "registry":
            raise IngestError(f"--value-schema must be 'registry', not {options.value_schema!r}")
        if options.json_schema is not None:
            raise IngestError("give one of --json-schema and --value-schema")
        if not options.registry_url:
            raise IngestError("--value-schema registry needs --registry-url")


def start_spark(master: str) -> SparkSession:
    """A session for the job: workers run this interpreter, no console progress bars."""
    # Read by the JVM at launch, also for the data source planning workers (which ignore
    # spark.pyspark.python): without it they run whatever `python3` is first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(master)
        .appName("sluice-ingest")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    return spark


@contextlib.contextmanager
def spark_errors() -> Iterator[None]:
    """Re-raise an IngestError from inside Spark (a task or a planning worker) as itself.

    Spark wraps Python errors in its own exceptions with the worker's traceback as text.
    """
    try:
        yield
    except Exception as exc:
        found = re.search(r"spark_ingest\.errors\.IngestError: (.+)", str(exc))
        if found is None:
            raise
        raise IngestError(found.group(1).strip()) from exc


def register(spark: SparkSession) -> None:
    """Make `format("sluice")` and the job's writer known to `spark`."""
    spark.dataSource.register(source.SluiceDataSource)
    spark.dataSource.register(sink.HourlySink)


def schema_from_file(spark: SparkSession, path: str) -> StructType:
    """A Spark DDL string ("id BIGINT, name STRING") or Spark's JSON form of a struct."""
    text = Path(path).read_text()
    try:
        parsed: DataType = (
            StructType.fromJson(json.loads(text))
            if text.lstrip().startswith("{")
            else DataType.fromDDL(text)
        )
    except Exception as exc:  # JSON, DDL parse and analysis errors all mean a bad file
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
        raise IngestError(f"--json-schema {path}: not a schema ({first_line})") from exc
    if not isinstance(parsed, StructType):
        raise IngestError(f"--json-schema {path}: expected a struct of fields, not {parsed}")
    return parsed


def infer_schema(spark: SparkSession, df: DataFrame) -> StructType:
    """Spark's JSON schema inference over every JSON value of the run.

    Values that are not objects (`[1, 2]`, `"text"`) are left out of the inference rather
    than adding Spark's `_corrupt_record` column.
    """
    texts = df.where(F.col("value").isNotNull()).select("value").rdd.map(lambda row: row[0])
    inferred: StructType = spark.read.option("mode", "DROPMALFORMED").json(texts).schema
    return inferred


def expand(df: DataFrame, schema: StructType) -> DataFrame:
    """The source's columns plus one column per field of the JSON values (null if not JSON)."""
    parsed = F.from_json(F.col("value"), schema)
    extra = [
        parsed.getField(f.name).alias(
            COLLISION_PREFIX + f.name if f.name.lower() in FIXED_COLUMNS else f.name
        )
        for f in schema.fields
    ]
    return df.select(*[F.col(c) for c in df.columns], *extra)


def read_frame(
    spark: SparkSession, options: JobOptions, ranges: list[Range], decided: Decided
) -> DataFrame:
    """The `sluice` source over exactly `ranges` (log start not re-applied: see source.py),
    up to each partition's first undecided transaction and without its aborted ones."""
    assign: dict[str, list[int]] = {}
    start: Offsets = {}
    end: Offsets = {}
    for r in bounded(ranges, decided):
        assign.setdefault(r.topic, []).append(r.partition)
        start.setdefault(r.topic, {})[r.partition] = r.start
        end.setdefault(r.topic, {})[r.partition] = r.end
    aborted = {key: d.aborted for key, d in decided.items()}
    return (
        spark.read.format(source.NAME)
        .option("endpoint", options.endpoint or "")
        .option("bucket", options.bucket)
        .option("prefix", options.prefix)
        .option("assign", json.dumps(assign))
        .option("start_offsets", json.dumps(offsets_to_json(start)))
        .option("end_offsets", json.dumps(offsets_to_json(end)))
        .option("apply_log_start", "false")
        .option("aborted", transactions.aborted_to_json(aborted))
        .load()
    )


def write_files(df: DataFrame, options: JobOptions) -> list[WrittenFile]:
    """Run the Spark write and return the files it reports."""
    with tempfile.TemporaryDirectory(prefix="sluice-ingest-") as tmp:
        results = Path(tmp) / "results.json"
        (
            df.write.format(sink.NAME)
            .mode("append")
            .option("out", options.out)
            .option("endpoint", options.endpoint or "")
            .option("time_zone", options.time_zone)
            .option("results", str(results))
            .option("kill_at", options.kill.point or "")
            .option("kill_group", str(options.kill.job_group))
            .save()
        )
        return sink.read_results(results)


@functools.lru_cache(maxsize=16)
def value_columns(versions: str, topic: str) -> ValueColumns:
    """The typed columns of `topic` from the registry versions a plan stored (once a worker)."""
    found = registry.from_json(versions)
    if topic not in found:
        raise IngestError(f"the run's registry versions have no subject for topic {topic}")
    return ValueColumns(topic, found[topic], FIXED_COLUMNS | {SCHEMA_ID.name})


def write_segment(
    data: bytes,
    headers: Sequence[tuple[int, fmt.BatchHeader]] | None,
    where: str,
    out: str,
    endpoint: str | None,
    time_zone: str,
    kill: KillSwitch,
    versions: str | None,
    task: SegmentTask,
) -> list[WrittenFile]:
    """Decode a downloaded segment's records of `task` (typing its values if the plan has
    registry `versions`) and write its hourly files."""
    batches = decode.decode_segment(
        data, task.topic, task.partition, task.lo, task.hi, where, task.aborted, headers
    )
    table = pa.Table.from_batches(list(batches), schema=decode.SCHEMA)
    if versions is not None:
        table = value_columns(versions, task.topic).add_to(table)
    return write_hour_files(table, storage.location(out, endpoint), time_zone, kill)


@dataclass(frozen=True)
class FirstPass:
    """What a segment's first task did: the files it wrote, none when its records wait on its
    partition's transaction markers (`deferred`), and its transactional batches."""

    files: list[WrittenFile]
    events: tuple[TxnEvent, ...]
    deferred: bool


def ingest_segment(
    endpoint: str | None,
    bucket: str,
    out: str,
    time_zone: str,
    kill: KillSwitch,
    versions: str | None,
    task: SegmentTask,
) -> FirstPass:
    """One Spark task of the direct path: download, verify and scan one segment; unless it
    holds transactional records, decode it and write its hourly files in the same Python
    worker. A segment without a transactional batch costs a bit test per batch more."""
    data, where = source.download(endpoint, bucket, task)
    headers = decode.scan_segment(data, where)
    events = transactions.segment_events(data, headers, task.lo, task.hi)
    if transactions.has_records(events):
        return FirstPass([], events, True)
    files = write_segment(data, headers, where, out, endpoint, time_zone, kill, versions, task)
    return FirstPass(files, events, False)


def ingest_decided(
    endpoint: str | None,
    bucket: str,
    out: str,
    time_zone: str,
    kill: KillSwitch,
    versions: str | None,
    task: SegmentTask,
) -> list[WrittenFile]:
    """A deferred segment once its partition's transactions are decided (`task` bounded and
    naming its aborted transactions): download it again and write its files."""
    data, where = source.download(endpoint, bucket, task)
    return write_segment(data, None, where, out, endpoint, time_zone, kill, versions, task)


def scan_transactions(endpoint: str | None, bucket: str, task: SegmentTask) -> tuple[TxnEvent, ...]:
    """The transactional batches of one segment (the data-source path's first pass)."""
    data, where = source.download(endpoint, bucket, task)
    return transactions.segment_events(data, decode.scan_segment(data, where), task.lo, task.hi)


Decided = dict[transactions.Partition, Decisions]


def decide(tasks: list[SegmentTask], events: list[tuple[TxnEvent, ...]]) -> Decided:
    """Each partition's decisions from its segments' events (`tasks` in offset order)."""
    by_partition: dict[transactions.Partition, list[TxnEvent]] = {}
    start: dict[transactions.Partition, int] = {}
    for task, found in zip(tasks, events, strict=True):
        if found:
            by_partition.setdefault((task.topic, task.partition), []).extend(found)
            start[(task.topic, task.partition)] = task.lo
    return {key: transactions.decide(found, start[key]) for key, found in by_partition.items()}


def bound(decided: Decided, topic: str, partition: int) -> int | None:
    """The offset a partition's run stops at: its first undecided transaction's (or None)."""
    return decided.get((topic, partition), NONE_DECIDED).first_undecided


def bounded(ranges: Iterable[Range], decided: Decided) -> tuple[Range, ...]:
    """`ranges` ending at their partition's first undecided transaction, if one is open."""
    out: list[Range] = []
    for r in ranges:
        stop = bound(decided, r.topic, r.partition)
        end = r.end if stop is None else max(r.start, min(r.end, stop))
        out.append(dataclasses.replace(r, end=end))
    return tuple(out)


def decided_tasks(tasks: Iterable[SegmentTask], decided: Decided) -> list[SegmentTask]:
    """`tasks` bounded by their partition's first undecided transaction, naming the aborted
    transactions that may have batches in their segment; those wholly past it go."""
    out: list[SegmentTask] = []
    for task in tasks:
        d = decided.get((task.topic, task.partition), NONE_DECIDED)
        hi = task.hi if d.first_undecided is None else min(task.hi, d.first_undecided)
        if max(task.lo, task.base_offset) >= hi:
            continue
        aborted = transactions.overlapping(d.aborted, task.base_offset, task.last_offset)
        out.append(dataclasses.replace(task, hi=hi, aborted=aborted))
    return out


def plan_segments(
    options: JobOptions, manifests: list[Manifest], ranges: list[Range]
) -> list[SegmentTask]:
    """The segments that hold the offsets of `ranges`: one Spark task each."""
    wanted = {(r.topic, r.partition) for r in ranges}
    start: Offsets = {}
    end: Offsets = {}
    for r in ranges:
        start.setdefault(r.topic, {})[r.partition] = r.start
        end.setdefault(r.topic, {})[r.partition] = r.end
    return segment_tasks(
        [m for m in manifests if (m.topic, m.partition) in wanted],
        manifest.clean_prefix(options.prefix),
        start,
        end,
        apply_log_start=False,
    )


def ingest_direct(
    spark: SparkSession, options: JobOptions, tasks: list[SegmentTask], versions: str | None
) -> tuple[list[WrittenFile], Decided]:
    """Without JSON expansion, Spark only schedules: a task per segment reads and writes it
    (the rows never cross into the JVM and back, which costs more than decoding them). The
    segments with transactional records go in a second pass, once their partition's markers
    are known; the files the first wrote past a transaction still undecided are removed."""
    if not tasks:
        return [], {}
    context = spark.sparkContext
    work = functools.partial(
        ingest_segment, options.endpoint, options.bucket, options.out, options.time_zone,
        options.kill, versions,
    )  # fmt: skip
    first: list[FirstPass] = context.parallelize(tasks, len(tasks)).map(work).collect()
    decided = decide(tasks, [f.events for f in first])
    files: list[WrittenFile] = []
    out = storage.location(options.out, options.endpoint)
    for f in (f for result in first for f in result.files):
        stop = bound(decided, f.topic, f.partition)
        if stop is not None and f.first_offset >= stop:
            out.child(f.path).delete()
        else:
            files.append(f)
    deferred = decided_tasks((t for t, f in zip(tasks, first, strict=True) if f.deferred), decided)
    if deferred:
        log.info("writing %d segments with transactions", len(deferred))
        again = functools.partial(
            ingest_decided, options.endpoint, options.bucket, options.out, options.time_zone,
            options.kill, versions,
        )  # fmt: skip
        written = context.parallelize(deferred, len(deferred)).map(again).collect()
        files.extend(f for found in written for f in found)
    return sorted(files, key=lambda f: f.path), decided


def finalize_hours(out: storage.Location, files: list[WrittenFile], kill: KillSwitch) -> list[str]:
    """Merge each touched hour's `_SUCCESS` with the files written to it; return the hours."""
    by_dir: dict[str, dict[str, int]] = {}
    for f in files:
        directory, _, name = f.path.rpartition("/")
        by_dir.setdefault(directory, {})[name] = f.rows
    counter = Counter("finalizing", len(by_dir), "hours")
    try:
        for done, directory in enumerate(sorted(by_dir), 1):
            marker = out.child(directory, layout.SUCCESS)
            parts = layout.success_parts(marker.read())
            parts.update(by_dir[directory])
            midway = functools.partial(kill.at, f"during:{directory}/{layout.SUCCESS}")
            marker.write(layout.success_bytes(parts), midway)
            log.debug("finalized %s: %d rows in %d files", directory, sum(parts.values()),
                      len(parts))  # fmt: skip
            kill.at(f"after:{directory}/{layout.SUCCESS}")
            counter.update(done)
    finally:
        counter.close()
    return sorted(by_dir)


def resume_gaps(manifests: list[Manifest], pending: ckpt.Pending) -> list[Gap]:
    """Offsets of the interrupted run whose segments retention removed before the rerun."""
    by_partition = {(m.topic, m.partition): m for m in manifests}
    gaps: list[Gap] = []
    for r in pending.ranges:
        m = by_partition.get((r.topic, r.partition))
        if m is None or m.end_offset < r.end:
            raise IngestError(
                f"the manifest of {r.topic}/{r.partition} no longer reaches offset {r.end} "
                "that the interrupted run planned"
            )
        first = m.segments[0].base_offset if m.segments else m.end_offset
        if r.start < r.end and first > r.start:
            gaps.append(
                Gap(
                    r.topic,
                    r.partition,
                    r.start,
                    min(first, r.end),
                    "removed by retention between the interrupted run and its rerun "
                    "(files the interrupted run wrote for them remain)",
                )
            )
    return gaps


@dataclass(frozen=True)
class Plan:
    """What a run does: its number, ranges, gaps and (for a rerun) its stored JSON schema."""

    run: int
    ranges: tuple[Range, ...]
    gaps: tuple[Gap, ...]
    schema: str | None
    resumed: bool

    @property
    def reading(self) -> list[Range]:
        """The ranges with offsets to read (the others only move a checkpoint past a gap)."""
        return [r for r in self.ranges if r.start < r.end]

    @property
    def active(self) -> bool:
        """Whether the run changes anything: data to read or offsets to move."""
        return bool(self.ranges or self.gaps)


def make_plan(options: JobOptions, state: ckpt.Checkpoint, manifests: list[Manifest]) -> Plan:
    """Redo the unfinished run if there is one, else plan from the checkpoint to the end."""
    pending = state.pending
    if pending is not None:
        if pending.settings != options.settings():
            raise IngestError(
                f"the checkpoint holds an unfinished run with {pending.settings}; rerun with "
                "the same --topics, --time-zone, --json-schema and --value-schema to finish it"
            )
        log.info("redoing unfinished run %d", pending.run)
        gaps = (*pending.gaps, *resume_gaps(manifests, pending))
        return Plan(pending.run, pending.ranges, gaps, pending.schema, resumed=True)
    planned, found = plan_ranges(manifests, state.offsets, options.start_offsets)
    moving = tuple(
        r
        for r in planned
        if r.start < r.end or state.offsets.get(r.topic, {}).get(r.partition) != r.start
    )
    return Plan(state.run + 1, moving, tuple(found), None, resumed=False)


def decide_first(spark: SparkSession, options: JobOptions, tasks: list[SegmentTask]) -> Decided:
    """The transactions of the segments of `tasks`, read in a pass of their own."""
    if not tasks:
        return {}
    work = functools.partial(scan_transactions, options.endpoint, options.bucket)
    with spark_errors(), spark_tasks(spark, "reading transactions", len(tasks)):
        events = spark.sparkContext.parallelize(tasks, len(tasks)).map(work).collect()
    return decide(tasks, events)


def prepare(
    spark: SparkSession, options: JobOptions, plan: Plan, decided: Decided
) -> tuple[DataFrame, str | None]:
    """The frame to write (JSON fields expanded if asked) and the expansion schema used."""
    # Only from_json's parsing of zone-less timestamps depends on it; pin it for stable bytes.
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    register(spark)
    with spark_errors():
        frame = read_frame(spark, options, plan.reading, decided)
        schema = resolve_schema(spark, options, frame, plan)
    if schema is None:
        return frame, None
    return expand(frame, schema), schema.json()


@dataclass(frozen=True)
class Outcome:
    """What a run wrote: its files, the hours it finalized, and its ranges as far as they
    were ingested (each up to its partition's first undecided transaction)."""

    files: list[WrittenFile]
    hours: list[str]
    ranges: tuple[Range, ...]
    aborted_records: dict[transactions.Partition, int]


def execute(
    options: JobOptions,
    plan: Plan,
    state: ckpt.Checkpoint,
    manifests: list[Manifest],
    spark: SparkSession | None,
) -> Outcome:
    """Store the plan as pending, write its files, finalize its hours."""
    out = storage.location(options.out, options.endpoint)
    frame: DataFrame | None = None
    schema = plan.schema
    segments = plan_segments(options, manifests, plan.reading) if plan.reading else []
    decided: Decided = {}
    if plan.reading:
        spark = spark or start_spark(options.master)
        if options.json_mode != "none":
            decided = decide_first(spark, options, segments)
            frame, schema = prepare(spark, options, plan, decided)
        elif options.value_schema is not None and schema is None:
            schema = registry.to_json(registry.fetch(str(options.registry_url), options.topics))
            for topic in options.topics:  # a subject no column can be made from fails here
                value_columns(schema, topic)
    if not plan.resumed:
        pending = ckpt.Pending(plan.run, options.settings(), schema, plan.ranges, plan.gaps)
        ckpt.save(checkpoint_location(options), state.planned(str(out), pending))
    options.kill.at("planned")
    files: list[WrittenFile] = []
    if plan.reading:
        assert spark is not None
        log.info("writing run %d: %d segments", plan.run, len(segments))
        with spark_errors(), spark_tasks(spark, "writing", len(segments)):
            if frame is not None:
                files = write_files(frame, options)
            else:
                versions = schema if options.value_schema is not None else None
                files, decided = ingest_direct(spark, options, segments, versions)
        log.info("wrote %d files, %d rows", len(files), sum(f.rows for f in files))
    for key, d in sorted(decided.items()):
        if d.first_undecided is not None:
            log.info("%s/%d: stopping at offset %d, where a transaction is undecided",
                     *key, d.first_undecided)  # fmt: skip
    hours = finalize_hours(out, files, options.kill)
    left_out = {key: d.aborted_records for key, d in decided.items()}
    return Outcome(files, hours, bounded(plan.ranges, decided), left_out)


def checkpoint_location(options: JobOptions) -> storage.Location:
    return storage.location(options.checkpoint, options.endpoint)


def run(options: JobOptions, spark: SparkSession | None = None) -> dict[str, Any]:
    """Ingest once; return the summary. `spark` defaults to a new session on options.master."""
    began = time.monotonic()
    check_options(options)
    out = str(storage.location(options.out, options.endpoint))
    where = checkpoint_location(options)
    state = ckpt.load(where)
    if state.out is not None and state.out != out:
        raise IngestError(f"checkpoint {where} belongs to output {state.out}, not {out}")
    log.info("listing the manifests of %s", ", ".join(sorted(set(options.topics))))
    manifests = manifest.load_topics(
        options.endpoint, options.bucket, options.prefix, options.topics
    )
    log.info(
        "listed %d partitions, %d segments",
        len(manifests),
        sum(len(m.segments) for m in manifests),
    )
    plan = make_plan(options, state, manifests)
    for g in plan.gaps:
        log.warning("gap %s/%d [%d, %d): %s", g.topic, g.partition, g.start, g.end, g.reason)
    log.info(
        "planned run %d: %d partitions to read, %d offsets",
        plan.run,
        len(plan.reading),
        sum(r.end - r.start for r in plan.reading),
    )
    done = (
        execute(options, plan, state, manifests, spark) if plan.active else Outcome([], [], (), {})
    )
    result = summary.build(
        run=plan.run if plan.active else state.run,
        out=out,
        time_zone=options.time_zone,
        ranges=[
            r
            for r, planned in zip(done.ranges, plan.ranges, strict=True)
            if planned.start < planned.end
        ],
        gaps=plan.gaps,
        files=done.files,
        hours=done.hours,
        aborted_records=done.aborted_records,
        resumed=plan.resumed,
        seconds=time.monotonic() - began,
    )
    summary.location_for(where).write(summary.to_bytes(result))
    options.kill.at("summary")
    if plan.active:
        ckpt.save(where, state.committed(out, plan.run, done.ranges))
        log.info("committed run %d to %s", plan.run, where)
    options.kill.at("committed")
    return result


def schema_from_json(text: str) -> StructType:
    """A schema stored by a plan (Spark's JSON form)."""
    parsed = StructType.fromJson(json.loads(text))
    return parsed


def resolve_schema(
    spark: SparkSession, options: JobOptions, df: DataFrame, plan: Plan
) -> StructType | None:
    """The JSON expansion schema: none, the file's, or inferred (a rerun reuses its plan's)."""
    if options.json_mode == "none":
        return None
    if options.json_mode == "infer":
        if plan.schema is not None:
            return schema_from_json(plan.schema)
        log.info("inferring the JSON schema")
        return infer_schema(spark, df)
    schema = schema_from_file(spark, str(options.json_schema))
    if plan.resumed and plan.schema != schema.json():
        raise IngestError(
            f"--json-schema {options.json_schema} changed since the unfinished run was planned"
        )
    return schema
