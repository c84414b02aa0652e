"""Helpers for the ingest tests: run the CLI, snapshot an output tree, read it back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from spark_ingest.job import JobOptions

REPO = Path(__file__).resolve().parents[2]
# How the tests launch Spark's JVM: no UI, and the quick C1 compiler only (short jobs spend
# most of their time warming up; this cuts startup by about a fifth on two cores).
SUBMIT_ARGS = (
    "--conf spark.ui.enabled=false --driver-java-options=-XX:TieredStopAtLevel=1 pyspark-shell"
)
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m spark_ingest ARGS` in a new session, so a crash kills only its own group."""
    full_env = {
        **os.environ,
        **CREDENTIALS,
        "PYSPARK_SUBMIT_ARGS": SUBMIT_ARGS,
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, "-m", "spark_ingest", *args],
        cwd=REPO,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,
        start_new_session=True,
    )


def cli_args(options: JobOptions) -> list[str]:
    """The command line that asks for `options` (local[2], like the test session)."""
    args = [
        "--s3-endpoint", str(options.endpoint),
        "--bucket", options.bucket,
        "--prefix", options.prefix,
        "--topics", ",".join(options.topics),
        "--out", options.out,
        "--checkpoint", options.checkpoint,
        "--time-zone", options.time_zone,
        "--master", "local[2]",
    ]  # fmt: skip
    if options.json_schema is not None:
        args += ["--json-schema", options.json_schema]
    if options.value_schema is not None:
        args += [
            "--value-schema",
            options.value_schema,
            "--registry-url",
            str(options.registry_url),
        ]
    return args


def tree(root: Path) -> dict[str, bytes]:
    """Every file under `root` (hidden ones too), by relative path."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def read_output(root: Path) -> list[dict[str, Any]]:
    """Every row of every Parquet file under `root`, with its topic, dt, hr and file name."""
    rows: list[dict[str, Any]] = []
    for path in sorted(root.rglob("*.parquet")):
        parts = dict(p.split("=", 1) for p in path.relative_to(root).parts[:-1])
        for row in pq.read_table(path).to_pylist():
            rows.append({**row, **parts, "file": path.name})
    return rows


def success(root: Path, hour_dir: str) -> dict[str, Any]:
    marker: dict[str, Any] = json.loads((root / hour_dir / "_SUCCESS").read_text())
    return marker


def options(
    endpoint: str, bucket: str, tmp: Path, topics: tuple[str, ...], **extra: Any
) -> JobOptions:
    """Job options writing under `tmp` (out/ and ckpt/offsets.json), prefix `tier`."""
    values: dict[str, Any] = {
        "endpoint": endpoint,
        "bucket": bucket,
        "prefix": "tier",
        "topics": topics,
        "out": str(tmp / "out"),
        "checkpoint": str(tmp / "ckpt" / "offsets.json"),
        **extra,
    }
    return JobOptions(**values)
