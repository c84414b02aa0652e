"""The job's checkpoint: committed offsets per partition, and the plan of a run in progress.

    {"format": 1, "out": "/data/out", "run": 7,
     "offsets": {"orders": {"0": 5000}},
     "pending": {"run": 8, "settings": {...}, "schema": null,
                 "ranges": [{"topic": "orders", "partition": 0, "start": 5000, "end": 9000}],
                 "gaps": []}}

`offsets` holds the next offset to ingest. A run first stores its plan as `pending`, then
writes files, then commits: offsets advance to the plan's ends and `pending` goes. A rerun
after a crash finds `pending` and redoes exactly that plan, so it rewrites the same files.
Each save replaces the whole checkpoint atomically (see storage.py).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from spark_ingest.errors import IngestError
from spark_ingest.plan import Gap, Offsets, Range, offsets_from_json, offsets_to_json
from spark_ingest.storage import Location

FORMAT = 1


@dataclass(frozen=True)
class Settings:
    """The options that shape a run's files; a pending run is only redone with the same."""

    topics: tuple[str, ...]
    time_zone: str
    json_schema: str  # "none", "infer" or "file"
    value_schema: str = "none"  # "none" or "registry"


@dataclass(frozen=True)
class Pending:
    """A planned run not yet committed."""

    run: int
    settings: Settings
    # The JSON expansion schema the run uses (Spark's JSON form), or the registry versions
    # that type its values (registry.to_json).
    schema: str | None
    ranges: tuple[Range, ...]
    gaps: tuple[Gap, ...]


@dataclass(frozen=True)
class Checkpoint:
    out: str | None = None
    run: int = 0
    offsets: Offsets = field(default_factory=dict)
    pending: Pending | None = None

    def planned(self, out: str, pending: Pending) -> Checkpoint:
        """This checkpoint with `pending` stored as the run in progress."""
        return Checkpoint(out, self.run, self.offsets, pending)

    def committed(self, out: str, run: int, ranges: tuple[Range, ...]) -> Checkpoint:
        """This checkpoint with run `run` done: offsets at its ranges' ends, nothing pending."""
        offsets = {topic: dict(parts) for topic, parts in self.offsets.items()}
        for r in ranges:
            offsets.setdefault(r.topic, {})[r.partition] = r.end
        return Checkpoint(out, run, offsets, None)


def to_bytes(checkpoint: Checkpoint) -> bytes:
    pending: dict[str, Any] | None = None
    if checkpoint.pending is not None:
        p = checkpoint.pending
        pending = {
            "run": p.run,
            "settings": dataclasses.asdict(p.settings),
            "schema": p.schema,
            "ranges": [dataclasses.asdict(r) for r in p.ranges],
            "gaps": [dataclasses.asdict(g) for g in p.gaps],
        }
    body = {
        "format": FORMAT,
        "out": checkpoint.out,
        "run": checkpoint.run,
        "offsets": offsets_to_json(checkpoint.offsets),
        "pending": pending,
    }
    return (json.dumps(body, indent=2) + "\n").encode()


def _pending(obj: dict[str, Any]) -> Pending:
    settings = obj["settings"]
    return Pending(
        run=int(obj["run"]),
        settings=Settings(
            tuple(settings["topics"]),
            str(settings["time_zone"]),
            str(settings["json_schema"]),
            str(settings.get("value_schema", "none")),
        ),
        schema=obj["schema"],
        ranges=tuple(Range(**r) for r in obj["ranges"]),
        gaps=tuple(Gap(**g) for g in obj["gaps"]),
    )


def from_bytes(data: bytes, where: str) -> Checkpoint:
    try:
        obj = json.loads(data)
        if obj.get("format") != FORMAT:
            raise ValueError(f"unsupported format {obj.get('format')!r}")
        pending = obj.get("pending")
        return Checkpoint(
            out=obj.get("out"),
            run=int(obj["run"]),
            offsets=offsets_from_json(obj["offsets"], f"checkpoint {where}"),
            pending=None if pending is None else _pending(pending),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise IngestError(f"malformed checkpoint {where}: {exc!r}") from exc


def load(location: Location) -> Checkpoint:
    """The stored checkpoint, or an empty one (nothing ingested) when there is none."""
    data = location.read()
    return Checkpoint() if data is None else from_bytes(data, str(location))


def save(location: Location, checkpoint: Checkpoint) -> None:
    location.write(to_bytes(checkpoint))
