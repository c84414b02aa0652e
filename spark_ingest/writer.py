"""Executor side of the job: one segment's rows to hourly Parquet files, named by offsets.

Rows are grouped by (topic, partition, hour of the timestamp in the job's time zone); each
group becomes one file whose name holds its first and last offset. The bytes depend only on
the rows (chunks are combined before writing, pyarrow's writer is deterministic), so a rerun
rewrites identical files.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from spark_ingest.faults import KillSwitch
from spark_ingest.layout import hour_dir, part_name
from spark_ingest.storage import Location

_HOUR = "__hour"


@dataclass(frozen=True)
class WrittenFile:
    """One output file: its path under --out and what it holds."""

    path: str
    topic: str
    partition: int
    hour: str  # "YYYY-MM-DDTHH" in the job's time zone
    rows: int
    first_offset: int
    last_offset: int


def parquet_bytes(table: pa.Table) -> bytes:
    """The Parquet file of `table`, with Kafka's millisecond timestamps and zstd pages."""
    index = table.schema.get_field_index("timestamp")
    table = table.set_column(
        index, "timestamp", table.column(index).cast(pa.timestamp("ms", tz="UTC"))
    )
    sink = pa.BufferOutputStream()
    pq.write_table(table.combine_chunks(), sink, compression="zstd")
    data: bytes = sink.getvalue().to_pybytes()
    return data


def write_hour_files(
    table: pa.Table, out: Location, time_zone: str, kill: KillSwitch
) -> list[WrittenFile]:
    """Write `table` (rows of one segment, in offset order) as one file per partition-hour.

    The kill switch may crash the job halfway through a file (`during:<path>`) or once it is
    in place (`after:<path>`). The `topic` column is left out of the files: it is in their
    path, as Hive-style readers expect.
    """
    if table.num_rows == 0:
        return []
    # Each record's local wall-clock hour, floored in Arrow; formatted once per hour, not per row.
    local = pc.local_timestamp(table.column("timestamp").cast(pa.timestamp("us", tz=time_zone)))
    keyed = table.append_column(_HOUR, pc.floor_temporal(local, unit="hour"))
    groups = keyed.group_by(["topic", "partition", _HOUR], use_threads=False).aggregate(
        [("offset", "min"), ("offset", "max"), ("offset", "count")]
    )
    files: list[WrittenFile] = []
    for group in sorted(groups.to_pylist(), key=lambda g: (g["topic"], g["partition"], g[_HOUR])):
        topic, partition, start = group["topic"], group["partition"], group[_HOUR]
        mask = pc.and_(
            pc.and_(pc.equal(keyed["topic"], topic), pc.equal(keyed["partition"], partition)),
            pc.equal(keyed[_HOUR], pa.scalar(start, keyed.schema.field(_HOUR).type)),
        )
        rows = keyed.filter(mask).drop_columns(["topic", _HOUR])
        hour = start.strftime("%Y-%m-%dT%H")
        first, last = group["offset_min"], group["offset_max"]
        path = f"{hour_dir(topic, hour)}/{part_name(partition, first, last)}"
        out.child(path).write(parquet_bytes(rows), functools.partial(kill.at, f"during:{path}"))
        kill.at(f"after:{path}")
        files.append(WrittenFile(path, topic, partition, hour, group["offset_count"], first, last))
    return files
