"""Exactly once: SIGKILL the job, rerun it, and get the clean run's tree byte for byte.

The reference is a clean run over the same segments, on both write paths: the default one
(a Spark task per segment writes its files) and the data-source one (`--json-schema`: the
`sluice` source's frame through `from_json` and the `sluice_hourly` writer). A case runs
`python -m spark_ingest` and kills it: at a point SLUICE_INGEST_KILL_AT names (halfway through
an output file or `_SUCCESS`, one in place, the plan stored, the summary written, the
checkpoint committed), where the job kills its own process groups; or from outside, every
process of its session at a random moment of its write phase. The rerun must then rewrite the
same names with the same bytes and commit the same offsets: no duplicates, no gaps.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import boto3
import pytest
from pyspark.sql import SparkSession

from spark_ingest import job
from spark_ingest.job import JobOptions
from tests.spark_ingest.conftest import ingest_seed
from tests.spark_ingest.support import CREDENTIALS, REPO, SUBMIT_ARGS, cli, cli_args, options, tree
from tests.spark_ingest.tiered import HOUR_MS, T0, Partition, json_records, mixed_records


@dataclass(frozen=True)
class Reference:
    options: JobOptions
    tree: dict[str, bytes]
    offsets: dict[str, Any]
    points: list[str]


def kill_points(files: list[str]) -> list[str]:
    """Crash points in the order the cases take them: the first seven are one of each kind.
    The first five (CI's default) leave each state a rerun must handle: a part file halfway
    written under its temporary name, part files in place with an hour finalized before the
    others, a `_SUCCESS` halfway written, every file written but the checkpoint, the run
    committed. The sixth (a part file in place, others still to write) and the seventh (the
    plan stored, nothing written) leave what the rerun after the first and the second also
    rewrites or writes (`--ingest-kills 7` runs them too)."""
    parts = sorted(f for f in files if f.endswith(".parquet"))
    markers = sorted(f for f in files if f.endswith("_SUCCESS"))
    n = len(parts)
    ordered = [
        f"during:{parts[n // 3]}",
        f"after:{markers[0]}",
        f"during:{markers[-1]}",
        "summary",
        "committed",
        f"after:{parts[n // 2]}",
        "planned",
        f"after:{parts[0]}",
        f"after:{parts[-1]}",
        f"after:{markers[-1]}",
        f"after:{parts[n // 4]}",
        f"after:{parts[3 * n // 4]}",
        *(f"during:{p}" for p in parts),
        *(f"after:{p}" for p in parts),
    ]
    return list(dict.fromkeys(ordered))


SCHEMA = "id BIGINT, kind STRING, amount INT"  # json_records' fields
RANDOM_KILL_WINDOW_S = 4.0  # a random kill lands this long at most after the plan is stored


@pytest.fixture(scope="module")
def segments(spark: SparkSession, moto: str, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Segments of two partitions over several hours, uploaded with their manifests."""
    tmp = tmp_path_factory.mktemp("exactly-once")
    s3 = boto3.client("s3", endpoint_url=moto)
    s3.create_bucket(Bucket="exactly-once")
    made = [Partition(tmp / "logs", s3, "exactly-once", "tier", "events", p) for p in (0, 1)]
    for i, p in enumerate(made):
        for segment in range(3):
            start = T0 + segment * HOUR_MS + i * HOUR_MS // 2
            p.append(mixed_records(40, start, 45_000, seed=segment * 100), compression="gzip")
            p.append(json_records(30, start + 1_000, 60_000, seed=segment), values_json=True)
            p.upload()
    yield tmp
    for p in made:
        p.close()


def clean_run(spark: SparkSession, opts: JobOptions, where: Path) -> Reference:
    job.run(opts, spark)
    out = tree(where / "out")
    offsets = json.loads((where / "ckpt" / "offsets.json").read_text())["offsets"]
    return Reference(opts, out, offsets, kill_points(list(out)))


@pytest.fixture(scope="module")
def reference(spark: SparkSession, moto: str, segments: Path) -> Reference:
    """The default path's clean run."""
    opts = options(moto, "exactly-once", segments / "clean", ("events",))
    return clean_run(spark, opts, segments / "clean")


@pytest.fixture(scope="module")
def data_source_reference(spark: SparkSession, moto: str, segments: Path) -> Reference:
    """The data-source path's clean run (`--json-schema`)."""
    schema = segments / "schema.txt"
    schema.write_text(SCHEMA)
    where = segments / "clean-ds"
    opts = options(moto, "exactly-once", where, ("events",), json_schema=str(schema))
    return clean_run(spark, opts, where)


def rerun_and_compare(
    spark: SparkSession, reference: Reference, opts: JobOptions, where: Path
) -> dict[str, Any]:
    """The rerun after a crash: the clean run's tree and offsets, nothing pending."""
    result = job.run(opts, spark)
    assert tree(where / "out") == reference.tree
    checkpoint = json.loads((where / "ckpt" / "offsets.json").read_text())
    assert checkpoint["offsets"] == reference.offsets
    assert checkpoint["pending"] is None
    return result


def _moved(reference: Reference, where: Path) -> JobOptions:
    return replace(
        reference.options,
        out=str(where / "out"),
        checkpoint=str(where / "ckpt" / "offsets.json"),
    )


def test_rerun_after_a_kill_rewrites_the_same_files(
    spark: SparkSession, reference: Reference, kill_index: int, tmp_path: Path
) -> None:
    point = reference.points[kill_index]
    opts = _moved(reference, tmp_path)
    crashed = cli(*cli_args(opts), env={"SLUICE_INGEST_KILL_AT": point})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    if point.startswith("during:"):  # half a file under its temporary name, none in place
        name = point.removeprefix("during:")
        half = tmp_path / "out" / Path(name).parent / f".{Path(name).name}.tmp"
        assert half.exists() and not (tmp_path / "out" / name).exists()
    result = rerun_and_compare(spark, reference, opts, tmp_path)
    assert result["resumed"] == (point != "committed")


def test_the_data_source_path_reruns_after_a_kill(
    spark: SparkSession, data_source_reference: Reference, data_source_point: str, tmp_path: Path
) -> None:
    point = data_source_point
    parts = sorted(f for f in data_source_reference.tree if f.endswith(".parquet"))
    markers = sorted(f for f in data_source_reference.tree if f.endswith("_SUCCESS"))
    kind, _, what = point.partition(":")
    named = {"part": parts[len(parts) // 2], "marker": markers[0]}
    chosen = f"{kind}:{named[what]}" if what else kind
    opts = _moved(data_source_reference, tmp_path)
    crashed = cli(*cli_args(opts), env={"SLUICE_INGEST_KILL_AT": chosen})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    assert rerun_and_compare(spark, data_source_reference, opts, tmp_path)["resumed"]


def session_processes(session: int) -> list[int]:
    """Every live process of the session (the job, its JVM, Spark's Python daemon and
    workers, whatever process groups they made)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session and fields[0] != "Z":
            found.append(int(entry.name))
    return found


@pytest.mark.parametrize("path", ["default", "data-source"])
def test_rerun_after_a_kill_at_a_random_moment(
    spark: SparkSession,
    reference: Reference,
    data_source_reference: Reference,
    path: str,
    random_kill: int,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    """Not at a point of the job's choosing: SIGKILL of the whole session a random time
    after the plan is stored, during the Spark write (mid-file included) or after it."""
    chosen = reference if path == "default" else data_source_reference
    opts = _moved(chosen, tmp_path)
    seed = ingest_seed(request.config)
    delay = random.Random(f"{seed}-{path}-{random_kill}").uniform(0, RANDOM_KILL_WINDOW_S)
    env = {**os.environ, **CREDENTIALS, "PYSPARK_SUBMIT_ARGS": SUBMIT_ARGS}
    job_process = subprocess.Popen(
        [sys.executable, "-m", "spark_ingest", *cli_args(opts)],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    checkpoint = tmp_path / "ckpt" / "offsets.json"
    deadline = time.monotonic() + 240
    while job_process.poll() is None and b'"pending": {' not in (
        checkpoint.read_bytes() if checkpoint.exists() else b""
    ):
        assert time.monotonic() < deadline, "the job never stored its plan"
        time.sleep(0.05)  # polling the checkpoint file: a condition with a deadline
    time.sleep(delay)  # the fault's moment itself, not a wait for anything
    # Until none is left: Spark may fork a worker between one listing and its kill.
    deadline = time.monotonic() + 60
    while survivors := session_processes(job_process.pid):
        assert time.monotonic() < deadline, f"the job's processes outlive SIGKILL: {survivors}"
        for pid in survivors:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    job_process.wait(timeout=60)
    assert job_process.stderr is not None
    job_process.stderr.close()
    rerun_and_compare(spark, chosen, opts, tmp_path)
