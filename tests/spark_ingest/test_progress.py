"""`python -m spark_ingest` with stderr piped: its phases and the write's tasks as plain log
lines on stderr, and nothing but the summary on stdout."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.spark_ingest.support import cli, cli_args, options
from tests.spark_ingest.tiered import HOUR_MS, T0, mixed_records


def test_progress_is_logged_when_piped(
    moto: str, bucket: str, partitions: Any, tmp_path: Path
) -> None:
    p0 = partitions("orders", 0)
    for hour in range(3):
        p0.append(mixed_records(10, T0 + hour * HOUR_MS, 1_000, seed=hour))
        p0.upload()  # three segments, one per hour
    done = cli(*cli_args(options(moto, bucket, tmp_path, ("orders",))))
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["rows"] == 30
    lines = [
        re.sub(r"^\S+ \S+ INFO spark_ingest: ", "", line)
        for line in done.stderr.splitlines()
        if " INFO spark_ingest: " in line
    ]
    assert lines[:4] == [
        "listing the manifests of orders",
        "listed 1 partitions, 3 segments",
        "planned run 1: 1 partitions to read, 30 offsets",
        "writing run 1: 3 segments",
    ]
    writing = [line for line in lines if line.startswith("writing: ")]  # polled: 1 to 3
    assert 1 <= len(writing) <= 3 and writing[-1] == "writing: 3 of 3 tasks (100%)"
    assert lines[4 + len(writing) :] == [
        "wrote 3 files, 30 rows",
        "finalizing: 1 of 3 hours (33%)",
        "finalizing: 2 of 3 hours (66%)",
        "finalizing: 3 of 3 hours (100%)",
        f"committed run 1 to {tmp_path / 'ckpt' / 'offsets.json'}",
    ]
