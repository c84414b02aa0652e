"""End to end, real processes: produce to a gateway over HTTP → segments roll and go to S3
(moto_server) → local retention deletes them → the oldest offsets are fetched back over HTTP,
byte-identical → `python -m spark_ingest` writes hourly Parquet → every record produced is
there exactly once, in the hour of its timestamp; a second run adds nothing."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import pyarrow.parquet as pq
import pytest

from tests.e2e.conftest import start_server, until
from tests.s3 import CREDENTIALS, MotoServer, manifest_of

PREFIX = "tiers"
HOUR_MS = 3_600_000
# An hour boundary four hours ago: a fixed date would pass the topic's 7-day retention.ms one
# week later, and the records would be deleted from S3 before the test reads them back.
BASE_TS = (time.time_ns() // 1_000_000 // HOUR_MS - 4) * HOUR_MS
CONFIGS = {
    "remote.storage.enable": True,
    "segment.bytes": 4096,
    "segment.ms": 500,  # the last segment rolls too, so everything reaches S3
    "local.retention.bytes": 0,
}


@pytest.fixture
def moto() -> Iterator[MotoServer]:
    """The S3 endpoint, stopped however the test ends."""
    server = MotoServer()
    yield server
    server.close()


def test_produce_tier_fetch_and_ingest_exactly_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, moto: MotoServer
) -> None:
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    bucket = moto.new_bucket()
    server = start_server(
        tmp_path / "data",
        "--s3-endpoint", moto.url, "--s3-bucket", bucket, "--s3-prefix", PREFIX,
        "--tiering-interval", "0.1",
    )  # fmt: skip
    http = httpx.Client(timeout=30)
    try:
        created = http.post(
            f"{server.url}/v1/topics",
            json={"name": "events", "partitions": 2, "configs": CONFIGS},
        )
        assert created.status_code == 201, created.text
        produced: dict[tuple[int, int], tuple[Any, int]] = {}
        for n in range(60):
            # Three hours of events; every tenth arrives late, stamped an hour earlier.
            ts = BASE_TS + (n % 3) * HOUR_MS + n * 1000 - (HOUR_MS if n % 10 == 9 else 0)
            records = [
                {"key": f"k{n}-{i}", "value": {"n": n, "i": i}, "timestamp": ts} for i in range(10)
            ]
            partition = n % 2
            answer = http.post(
                f"{server.url}/v1/topics/events/partitions/{partition}/records",
                json={"records": records},
            )
            assert answer.status_code == 200, answer.text
            base = answer.json()["results"][0]["base_offset"]
            for i, record in enumerate(records):
                produced[(partition, base + i)] = (record["value"], ts)
        ends = {p: max(o for q, o in produced if q == p) + 1 for p in (0, 1)}

        def on_s3(p: int) -> bool:
            found = manifest_of(moto, bucket, PREFIX, "events", p)
            return found is not None and bool(found.end_offset == ends[p])

        # Everything reaches S3: the last segments roll after segment.ms.
        until(lambda: on_s3(0) and on_s3(1), "every record on S3")
        manifests = {p: manifest_of(moto, bucket, PREFIX, "events", p) for p in (0, 1)}

        # The oldest offsets come back over HTTP from S3, byte for byte the uploaded batches.
        manifest = manifests[0]
        assert manifest is not None
        first = manifest.segments[0]
        raw = http.get(
            f"{server.url}/v1/topics/events/partitions/0/records",
            params={"offset": 0},
            headers={"Accept": "application/vnd.sluice.record-batch"},
        )
        assert raw.status_code == 200
        uploaded = (
            moto.client()
            .get_object(Bucket=bucket, Key=f"{PREFIX}/events/0/{first.name}.log")["Body"]
            .read()
        )
        assert raw.content and uploaded.startswith(raw.content)
    finally:
        http.close()
        server.stop()

    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint.json"
    ingest = [
        sys.executable, "-m", "spark_ingest", "--s3-endpoint", moto.url, "--bucket", bucket,
        "--prefix", PREFIX, "--topics", "events", "--out", str(out),
        "--checkpoint", str(checkpoint), "--master", "local[2]",
    ]  # fmt: skip
    done = subprocess.run(ingest, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    files = sorted(out.rglob("*.parquet"))
    rows: list[dict[str, Any]] = []
    for path in files:
        table = pq.read_table(path)
        hour = {
            part.split("=", 1)[0]: part.split("=", 1)[1]
            for part in path.relative_to(out).parts[:-1]
        }
        for row in table.to_pylist():
            ts = row["timestamp"]
            assert isinstance(ts, datetime)
            stamp = ts.astimezone(UTC)
            assert hour == {
                "topic": "events",
                "dt": stamp.strftime("%Y-%m-%d"),
                "hr": stamp.strftime("%H"),
            }, path
            rows.append(row)
    seen = Counter((row["partition"], row["offset"]) for row in rows)
    assert set(seen) == set(produced) and set(seen.values()) == {1}
    for row in rows:
        value, ts = produced[(row["partition"], row["offset"])]
        assert orjson.loads(str(row["value"])) == value
        assert round(row["timestamp"].timestamp() * 1000) == ts

    again = subprocess.run(ingest, capture_output=True, text=True, timeout=600, check=False)
    assert again.returncode == 0, again.stderr[-3000:]
    assert sorted(out.rglob("*.parquet")) == files  # nothing new, nothing twice
