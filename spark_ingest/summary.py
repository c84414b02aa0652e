"""The run summary: rows per topic, partition and hour, offset ranges, gaps, files written.

Printed at the end of a run and stored as JSON next to the checkpoint (`offsets.json` ->
`offsets.summary.json`), where `audit` finds it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any

from spark_ingest.errors import IngestError
from spark_ingest.plan import Gap, Range
from spark_ingest.storage import Location
from spark_ingest.writer import WrittenFile

FORMAT = 1


def location_for(checkpoint: Location) -> Location:
    """Where the summary of the checkpoint's runs goes."""
    name = str(checkpoint).rstrip("/").rpartition("/")[2]
    stem = name.removesuffix(".json")
    return checkpoint.sibling(f"{stem}.summary.json")


def build(
    *,
    run: int,
    out: str,
    time_zone: str,
    ranges: Iterable[Range],
    gaps: Iterable[Gap],
    files: list[WrittenFile],
    hours: list[str],
    resumed: bool,
    seconds: float,
    aborted_records: Mapping[tuple[str, int], int] | None = None,
) -> dict[str, Any]:
    """The summary of a run that ingested `ranges` as `files` and finalized `hours`, leaving
    out `aborted_records` records of aborted transactions per partition."""
    partitions = []
    for r in ranges:
        mine = [f for f in files if f.topic == r.topic and f.partition == r.partition]
        per_hour: dict[str, int] = {}
        for f in mine:
            per_hour[f.hour] = per_hour.get(f.hour, 0) + f.rows
        partitions.append(
            {
                "topic": r.topic,
                "partition": r.partition,
                "start": r.start,
                "end": r.end,
                "rows": sum(f.rows for f in mine),
                "aborted": (aborted_records or {}).get((r.topic, r.partition), 0),
                "files": len(mine),
                "hours": {h: per_hour[h] for h in sorted(per_hour)},
            }
        )
    return {
        "format": FORMAT,
        "run": run,
        "resumed": resumed,
        "out": out,
        "time_zone": time_zone,
        "rows": sum(f.rows for f in files),
        "partitions": partitions,
        "gaps": [dataclasses.asdict(g) for g in gaps],
        "files": [f.path for f in files],
        "hours_finalized": hours,
        "seconds": round(seconds, 3),
    }


def to_bytes(summary: dict[str, Any]) -> bytes:
    return (json.dumps(summary, indent=2) + "\n").encode()


def load(location: Location) -> dict[str, Any]:
    """A stored summary, checked enough for the audit to rely on its fields."""
    data = location.read()
    if data is None:
        raise IngestError(f"no summary at {location}")
    try:
        summary: dict[str, Any] = json.loads(data)
        if summary.get("format") != FORMAT:
            raise ValueError(f"unsupported format {summary.get('format')!r}")
        for p in summary["partitions"]:
            p.setdefault("aborted", 0)  # summaries written before transactions were read
            for name in ("start", "end", "rows", "partition", "aborted"):
                if type(p[name]) is not int:
                    raise ValueError(f"partition entry {p!r}: {name!r} is not an integer")
            if not isinstance(p["topic"], str):
                raise ValueError(f"partition entry {p!r}: 'topic' is not a string")
    except (ValueError, KeyError, TypeError) as exc:
        raise IngestError(f"malformed summary {location}: {exc!r}") from exc
    return summary
