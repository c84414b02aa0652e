"""Exactly once: SIGKILL the job at a point, rerun it, and get the clean run's tree byte for byte.

The reference is a clean run over the same segments. Each case runs `python -m spark_ingest`
with SLUICE_INGEST_KILL_AT naming a point (an output file or `_SUCCESS` in place, the plan
stored, the summary written, the checkpoint committed); the job kills its process groups
there. The rerun must then rewrite the same names with the same bytes and commit the same
offsets: no duplicates, no gaps.
"""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import boto3
import pytest
from pyspark.sql import SparkSession

from spark_ingest import job
from spark_ingest.job import JobOptions
from tests.spark_ingest.support import cli, cli_args, options, tree
from tests.spark_ingest.tiered import HOUR_MS, T0, Partition, json_records, mixed_records


@dataclass(frozen=True)
class Reference:
    options: JobOptions
    tree: dict[str, bytes]
    offsets: dict[str, Any]
    points: list[str]


def kill_points(files: list[str]) -> list[str]:
    """Crash points in the order the cases take them: the first few cover each phase."""
    parts = sorted(f for f in files if f.endswith(".parquet"))
    markers = sorted(f for f in files if f.endswith("_SUCCESS"))
    n = len(parts)
    ordered = [
        f"after:{parts[n // 2]}",
        f"after:{markers[0]}",
        "summary",
        "planned",
        "committed",
        f"after:{parts[0]}",
        f"after:{parts[-1]}",
        f"after:{markers[-1]}",
        f"after:{parts[n // 4]}",
        f"after:{parts[3 * n // 4]}",
        *(f"after:{p}" for p in parts),
    ]
    return list(dict.fromkeys(ordered))


@pytest.fixture(scope="module")
def reference(spark: SparkSession, moto: str, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Segments of two partitions over several hours, and a clean run's output."""
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
    opts = options(moto, "exactly-once", tmp / "clean", ("events",))
    job.run(opts, spark)
    out = tree(tmp / "clean" / "out")
    offsets = json.loads((tmp / "clean" / "ckpt" / "offsets.json").read_text())["offsets"]
    yield Reference(opts, out, offsets, kill_points(list(out)))
    for p in made:
        p.close()


def test_rerun_after_a_kill_rewrites_the_same_files(
    spark: SparkSession, reference: Reference, kill_index: int, tmp_path: Path
) -> None:
    point = reference.points[kill_index]
    opts = replace(
        reference.options,
        out=str(tmp_path / "out"),
        checkpoint=str(tmp_path / "ckpt" / "offsets.json"),
    )
    crashed = cli(*cli_args(opts), env={"SLUICE_INGEST_KILL_AT": point})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]

    result = job.run(opts, spark)

    assert tree(tmp_path / "out") == reference.tree
    checkpoint = json.loads((tmp_path / "ckpt" / "offsets.json").read_text())
    assert checkpoint["offsets"] == reference.offsets
    assert checkpoint["pending"] is None
    assert result["resumed"] == (point != "committed")
