"""Where `sluice serve --workers N` keeps its data under --data-dir: `workers/` holds etcd/,
worker-<i>/ (each worker's own data directory), workers.json and the internal key; what the
workers share (auth/) stays at the top, where a single node keeps it."""

from __future__ import annotations

import json
from pathlib import Path

from engine.manager import TOPICS_DIR
from gateway.settings import Settings

ROOT = "workers"  # under --data-dir: etcd/, worker-<i>/, workers.json, settings.toml
MARKER = "workers.json"  # how many workers wrote the directory
INTERNAL_KEY = "internal.key"  # under ROOT: the workers' key for each other, with --auth


def check_layout(data_dir: Path, workers: int) -> None:
    """Refuse a data directory written with another number of workers (its partitions live
    in the other layout, and would be hidden); say which number it was written with."""
    marker = data_dir / ROOT / MARKER
    recorded = int(json.loads(marker.read_text())["workers"]) if marker.exists() else None
    if recorded is None:
        if workers > 1 and any((data_dir / TOPICS_DIR).glob("*.json")):
            raise SystemExit(
                f"sluice: {data_dir} holds the topics of a single process (--workers 1), not "
                f"--workers {workers}; start it with --workers 1, or give --workers {workers} a "
                "new --data-dir (docs/workers.md: changing the number of workers)"
            )
        return
    if recorded != workers:
        raise SystemExit(
            f"sluice: {data_dir} holds the topics of --workers {recorded}, not --workers "
            f"{workers}; start it with --workers {recorded} (docs/workers.md: changing the "
            "number of workers)"
        )


def worker_dir_name(node_id: int) -> str:
    return f"worker-{node_id}"


def shared_data_dir(worker_dir: Path) -> Path:
    """The --data-dir of the supervisor, from a worker's own (`<data-dir>/workers/worker-<i>`):
    where what all workers share lives (auth/, as a single node keeps it)."""
    return worker_dir.parent.parent


def sibling_data_dirs(settings: Settings) -> dict[int, Path]:
    """In a worker: the other workers' data directories, by node id, whose partitions it reads
    from their files (replication.colocated); none in a single process."""
    if settings.workers <= 1:
        return {}
    root = settings.data_dir.parent
    return {i: root / worker_dir_name(i) for i in range(settings.workers) if i != settings.node_id}
