"""Tiered storage figures against a local moto_server, in one run (ratios, not absolutes).

1. Upload: the uploader (scan + sha256 + indexes + objects + manifest per segment) against a
   plain boto3 `upload_file` of the same `.log` files to the same endpoint.
2. Reads over HTTP: a consumer reading a tiered range (served from S3) against one reading the
   same number of records from local disk, through one gateway.

    python -m loadtests.tier_bench --mib 128 --segment-mib 16 --rounds 5 --records 100000 --out DIR
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson

from engine import batch as fmt
from engine.config import TopicConfig
from engine.log import PartitionLog
from engine.tiered.remote import RemoteStorage, S3Location
from engine.tiered.shipping import Shipper
from engine.tiered.uploader import PartitionTier
from loadtests.common import MotoServer, http_json, start_gateway

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}


def build_log(directory: Path, mib: int, segment_mib: int) -> PartitionLog:
    """A committed log of `mib` MiB in `segment_mib` MiB segments (1 KiB values, 100/batch)."""
    config = TopicConfig().with_overrides(
        {"remote.storage.enable": True, "segment.bytes": segment_mib << 20}
    )
    log = PartitionLog(directory, "bench", 0, config)
    value = os.urandom(512).hex().encode()
    batch = fmt.encode_batch([fmt.RecordInput(None, value, [], None)] * 100)
    while log.size_bytes < mib << 20:
        log.append_as_leader(bytearray(batch), 0)
    log.roll()
    log.advance_high_watermark(log.log_end_offset)
    return log


def upload_figures(
    moto: MotoServer, work: Path, mib: int, segment_mib: int, rounds: int
) -> dict[str, Any]:
    """Each round uploads the same segments both ways, into fresh buckets, alternating which
    goes first (moto slows as it fills); the median of the rounds' ratios is the figure."""
    log = build_log(work / "log", mib, segment_mib)
    segments = [s for s in log.segments if not s.empty]
    total = sum(s.size for s in segments)
    client = moto.client()
    plain_runs: list[float] = []
    tier_runs: list[float] = []

    def plain() -> None:
        bucket = moto.new_bucket()
        started = time.perf_counter()
        for segment in segments:
            client.upload_file(str(segment.path), bucket, f"plain/{segment.path.name}")
        plain_runs.append(time.perf_counter() - started)

    def tiered() -> None:
        storage = RemoteStorage(S3Location(moto.url, moto.new_bucket(), "b"))
        tier = PartitionTier(storage, "b", log, "id", shipper.ship)
        started = time.perf_counter()
        for segment in tier.pending():
            tier.upload(segment, 0)
        tier_runs.append(time.perf_counter() - started)

    shipper = Shipper(1, S3Location(moto.url, "any"))  # uploads in its process, as in a node
    try:
        for round_ in range(rounds):
            for run in (plain, tiered) if round_ % 2 == 0 else (tiered, plain):
                run()
    finally:
        shipper.close()
    log.close()
    ratios = sorted(p / t for p, t in zip(plain_runs, tier_runs, strict=True))
    return {
        "bytes_per_round": total,
        "segments": len(segments),
        "rounds": rounds,
        "plain_boto3_mib_s": [round(total / s / 2**20, 1) for s in plain_runs],
        "sluice_uploader_mib_s": [round(total / s / 2**20, 1) for s in tier_runs],
        "ratios": [round(r, 2) for r in ratios],
        "ratio": round(ratios[len(ratios) // 2], 2),
    }


def read_all(url: str, start: int, end: int) -> tuple[int, float]:
    """Records read from `start` to `end` with JSON fetches of 500, and the seconds it took."""
    offset, count = start, 0
    started = time.perf_counter()
    while offset < end:
        answer = http_json(
            "GET",
            f"{url}/v1/topics/bench/partitions/0/records?offset={offset}&max_records=500"
            "&timeout_ms=0",
        )
        count += sum(1 for r in answer["records"] if r["offset"] < end)
        offset = answer["next_offset"]
    return count, time.perf_counter() - started


def read_figures(moto: MotoServer, work: Path, records: int) -> dict[str, Any]:
    bucket = moto.new_bucket()
    process, url = start_gateway(
        work / "data", "--s3-endpoint", moto.url, "--s3-bucket", bucket,
        "--tiering-interval", "0.2",
    )  # fmt: skip
    try:
        http_json(
            "POST",
            f"{url}/v1/topics",
            {
                "name": "bench",
                "configs": {
                    "remote.storage.enable": True,
                    "segment.bytes": 4 << 20,
                    "local.retention.bytes": 8 << 20,
                },
            },
        )
        body = orjson.dumps(
            {"records": [{"value": {"n": n, "pad": "x" * 200}} for n in range(500)]}
        )
        for _ in range(records // 500):
            http_json("POST", f"{url}/v1/topics/bench/records", orjson.loads(body))
        deadline = time.monotonic() + 300
        while True:
            row = http_json("GET", f"{url}/v1/topics/bench")["partitions"][0]
            if _local_start(url) >= records // 2:  # half of it on S3 only
                break
            if time.monotonic() > deadline:
                raise RuntimeError("uploads did not catch up")
            time.sleep(0.2)
        local_start = _local_start(url)
        end = row["high_watermark"]
        half = min(local_start, end - local_start)
        remote_n, remote_s = read_all(url, 0, half)
        local_n, local_s = read_all(url, end - half, end)
        return {
            "records_each": half,
            "local_start": local_start,
            "remote_fetch_records_s": round(remote_n / remote_s),
            "local_fetch_records_s": round(local_n / local_s),
            "ratio": round((remote_n / remote_s) / (local_n / local_s), 2),
        }
    finally:
        process.terminate()
        process.wait(timeout=30)


def _local_start(url: str) -> int:
    """The first offset still on the node's disk (its metrics say)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as response:
        for line in response.read().decode().splitlines():
            if (
                line.startswith("sluice_partition_local_log_start_offset{")
                and 'topic="bench"' in line
            ):
                return int(float(line.rsplit(" ", 1)[1]))
    raise RuntimeError("no sluice_partition_local_log_start_offset for topic bench")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--mib", type=int, default=256, help="bytes uploaded in each upload run")
    parser.add_argument("--segment-mib", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5, help="upload rounds (median ratio)")
    parser.add_argument("--records", type=int, default=200_000, help="records produced for reads")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.update(CREDENTIALS)  # moto takes any key; boto3 and the gateway need one
    moto = MotoServer()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            report = {
                "machine": f"{platform.node()} ({os.cpu_count()} cores)",
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "upload": upload_figures(moto, work, args.mib, args.segment_mib, args.rounds),
                "reads": read_figures(moto, work, args.records),
            }
    finally:
        moto.close()
    (args.out / "tier-report.json").write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    print(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    main()
