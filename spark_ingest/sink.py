"""The job's write side as a PySpark data source (`sluice_hourly`), fed Arrow batches.

Each write task gets the rows of one input partition (one segment: the plan has no shuffle)
and writes them with writer.write_hour_files, named by offsets rather than Spark's UUIDs.
The tasks' commit messages (the files written) reach `commit()`, which runs on the driver's
host and hands them to the job through a local JSON file (option `results`).

Options: `out` (local path or s3:// URL), `endpoint`, `time_zone`, `results`, and the crash
switch `kill_at` / `kill_group` (see faults.py).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from spark_ingest import storage
from spark_ingest.faults import KillSwitch
from spark_ingest.writer import WrittenFile, write_hour_files

NAME = "sluice_hourly"


@dataclass
class Written(WriterCommitMessage):
    """What one write task wrote."""

    files: list[WrittenFile]


class HourlyWriter(DataSourceArrowWriter):
    """Writes each task's rows as hourly files; commit() reports them all to the job."""

    def __init__(self, options: dict[str, str]) -> None:
        self.out = options["out"]
        self.endpoint = options.get("endpoint") or None
        self.time_zone = options["time_zone"]
        self.results = options["results"]
        self.kill = KillSwitch(options.get("kill_at") or None, int(options["kill_group"]))

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        batches = list(iterator)
        if not batches:
            return Written([])
        out = storage.location(self.out, self.endpoint)
        table = pa.Table.from_batches(batches)
        return Written(write_hour_files(table, out, self.time_zone, self.kill))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        files = [dataclasses.asdict(f) for m in messages if isinstance(m, Written) for f in m.files]
        Path(self.results).write_text(json.dumps(files))


class HourlySink(DataSource):
    """`df.write.format("sluice_hourly")`: the job's deterministic Parquet writer."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def writer(self, schema: StructType, overwrite: bool) -> HourlyWriter:
        return HourlyWriter(dict(self.options))


def read_results(path: Path) -> list[WrittenFile]:
    """The files a finished write reported, in path order."""
    files = [WrittenFile(**f) for f in json.loads(path.read_text())]
    return sorted(files, key=lambda f: f.path)
