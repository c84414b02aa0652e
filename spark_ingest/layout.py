"""The output layout: hour directories, deterministic file names, and `_SUCCESS` markers.

    <out>/topic=<topic>/dt=<YYYY-MM-DD>/hr=<HH>/part-<partition:05d>-<first:020d>-<last:020d>.parquet
    <out>/topic=<topic>/dt=<YYYY-MM-DD>/hr=<HH>/_SUCCESS

A file's name depends only on the rows in it, so a rerun over the same offsets writes the same
names. `_SUCCESS` is JSON: the hour's total rows and files, and each file's rows.
"""

from __future__ import annotations

import json

SUCCESS = "_SUCCESS"


def hour_dir(topic: str, hour: str) -> str:
    """The directory of `hour` ("YYYY-MM-DDTHH", local to the job's time zone)."""
    day, _, hh = hour.partition("T")
    return f"topic={topic}/dt={day}/hr={hh}"


def part_name(partition: int, first: int, last: int) -> str:
    return f"part-{partition:05d}-{first:020d}-{last:020d}.parquet"


def success_bytes(parts: dict[str, int]) -> bytes:
    """The `_SUCCESS` marker of an hour holding `parts` (file name -> rows)."""
    body = {
        "rows": sum(parts.values()),
        "files": len(parts),
        "parts": {name: parts[name] for name in sorted(parts)},
    }
    return (json.dumps(body, indent=2) + "\n").encode()


def success_parts(data: bytes | None) -> dict[str, int]:
    """The file -> rows map of an existing marker (empty when there is none)."""
    if data is None:
        return {}
    parts: dict[str, int] = json.loads(data)["parts"]
    return parts
