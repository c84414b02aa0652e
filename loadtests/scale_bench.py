"""Scale with the log: what one node costs as its partitions and segments grow.

1. Partitions: for each partition count, a fresh gateway and one topic of that many
   partitions; produce binary batches round robin over the partitions (HTTP, several
   connections), then fetch every partition back from offset 0. Reports records/s both ways,
   and the gateway's RSS and open files.
2. Closed segments: one partition of that many closed segments (one batch each), built through
   the engine (quicker than over HTTP, and the same files), then a gateway started on that data
   directory. Reports its start-up time, RSS and open files, the time to fetch the whole
   partition from offset 0 over HTTP, and RSS and open files after it.

Open files must stay within the bound, the partitions (an active segment each, those of
__consumer_offsets too) plus the file cache, plus a few sockets and pipes, whatever the number
of segments.

    python -m loadtests.scale_bench [--quick] [--out DIR]
    python -m loadtests.scale_bench --cluster [--partitions 1000,3000] [--quick] [--out DIR]

--quick runs small sizes under a 1,024-descriptor limit (so the closed segments outnumber it).
--cluster measures a 3-node cluster instead (loadtests.scale_cluster); its report is
scale-cluster-report.json.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import os
import platform
import resource
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from engine import batch as fmt
from engine.file_cache import default_capacity
from engine.manager import LogManager
from loadtests import scale_cluster
from loadtests.common import http_json, progress, raise_fd_limit, rss_bytes, start_gateway

RECORD_BATCH = "application/vnd.sluice.record-batch"
CONNECTIONS = 16
FETCH_BYTES = 1 << 20


@dataclass(frozen=True)
class Sizes:
    partitions: tuple[int, ...]  # one run per count
    produce_requests: int  # per run (at least one per partition), round robin
    records_per_request: int
    value_bytes: int
    closed_segments: int
    fd_limit: int | None  # the gateways' RLIMIT_NOFILE (soft and hard); None: inherited


FULL = Sizes((1, 100, 10_000), 10_000, 100, 100, 100_000, None)
QUICK = Sizes((1, 10, 100), 300, 10, 100, 1_500, 1024)


def open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def fd_soft_limit(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise RuntimeError("no open-file limit in /proc")


def mib(n: int) -> float:
    return round(n / 2**20, 1)


class Gateway:
    """A gateway on `data_dir` (under `fd_limit`, soft and hard, if given); its start-up time
    and, from /proc, what it costs."""

    def __init__(self, data_dir: Path, fd_limit: int | None) -> None:
        limit = None
        if fd_limit is not None:
            limit = functools.partial(
                resource.setrlimit, resource.RLIMIT_NOFILE, (fd_limit, fd_limit)
            )
        self.data_dir = data_dir
        started = time.perf_counter()
        self.process, self.url = start_gateway(data_dir, preexec=limit)
        self.start_s = round(time.perf_counter() - started, 2)
        # Its file cache's size, from the limit it runs with (raised to the hard one).
        self.file_cache = default_capacity(fd_soft_limit(self.process.pid))

    def cost(self) -> dict[str, float | int]:
        """RSS and open files now, and the bound on the files: a descriptor per partition
        (counted on disk) plus the file cache."""
        pid = self.process.pid
        partitions = sum(
            1 for p in self.data_dir.iterdir() if p.is_dir() and p.name.rpartition("-")[2].isdigit()
        )
        return {
            "rss_mib": mib(rss_bytes(pid)),
            "open_files": open_files(pid),
            "bound": partitions + self.file_cache,
        }

    def stop(self) -> float:
        """SIGTERM and wait for the clean shutdown; its seconds."""
        started = time.perf_counter()
        self.process.terminate()
        self.process.wait(timeout=900)
        return round(time.perf_counter() - started, 1)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


async def _workers(count: int, jobs: list[Any], job: Callable[[Any], Any]) -> None:
    """Run `job` over `jobs` with `count` concurrent workers."""
    it = iter(jobs)

    async def worker() -> None:
        for item in it:
            await job(item)

    await asyncio.gather(*(worker() for _ in range(count)))


async def produce(url: str, topic: str, partitions: int, sizes: Sizes) -> tuple[int, float]:
    """Send the produce requests (one binary batch each, acks=1); bytes sent, seconds taken."""
    value = os.urandom(sizes.value_bytes // 2).hex().encode()
    body = bytes(fmt.encode_batch([fmt.RecordInput(None, value)] * sizes.records_per_request))
    requests = max(sizes.produce_requests, partitions)
    targets = [i % partitions for i in range(requests)]
    headers = {"Content-Type": RECORD_BATCH}
    connector = aiohttp.TCPConnector(limit=CONNECTIONS)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def send(partition: int) -> None:
            async with session.post(
                f"{url}/v1/topics/{topic}/partitions/{partition}/records?acks=1",
                data=body,
                headers=headers,
            ) as answer:
                if answer.status != 200:
                    raise RuntimeError(f"produce -> {answer.status}: {await answer.text()}")

        started = time.perf_counter()
        await _workers(CONNECTIONS, targets, send)
        return requests * len(body), time.perf_counter() - started


async def fetch_all(
    url: str, topic: str, ends: dict[int, int], connections: int
) -> tuple[int, int, int, float]:
    """Read every partition from offset 0 to its end with binary fetches: records, bytes and
    requests, and the seconds it took."""
    totals = [0, 0, 0]
    headers = {"Accept": RECORD_BATCH}
    connector = aiohttp.TCPConnector(limit=connections)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def read(partition: int) -> None:
            offset, end = 0, ends[partition]
            while offset < end:
                async with session.get(
                    f"{url}/v1/topics/{topic}/partitions/{partition}/records",
                    params={"offset": offset, "max_bytes": FETCH_BYTES, "timeout_ms": 0},
                    headers=headers,
                ) as answer:
                    if answer.status != 200:
                        raise RuntimeError(f"fetch -> {answer.status}: {await answer.text()}")
                    data = await answer.read()
                    offset = int(answer.headers["Sluice-Next-Offset"])
                totals[0] += sum(h.record_count for _, h in fmt.scan(data, check_crc=False).headers)
                totals[1] += len(data)
                totals[2] += 1

        started = time.perf_counter()
        await _workers(connections, sorted(ends), read)
        return totals[0], totals[1], totals[2], time.perf_counter() - started


def partition_figures(work: Path, partitions: int, sizes: Sizes) -> dict[str, Any]:
    progress(f"{partitions} partitions")
    gateway = Gateway(work / f"partitions-{partitions}", sizes.fd_limit)
    topic = f"p{partitions}"
    try:
        started = gateway.cost()
        http_json("POST", f"{gateway.url}/v1/topics", {"name": topic, "partitions": partitions})
        created = gateway.cost()
        sent, produce_s = asyncio.run(produce(gateway.url, topic, partitions, sizes))
        produced = gateway.cost()
        described = http_json("GET", f"{gateway.url}/v1/topics/{topic}")["partitions"]
        ends = {row["partition"]: row["high_watermark"] for row in described}
        records = sum(ends.values())
        fetched, nbytes, requests, fetch_s = asyncio.run(
            fetch_all(gateway.url, topic, ends, CONNECTIONS)
        )
        figures = {
            "partitions": partitions,
            "records": records,
            "produce_records_s": round(records / produce_s),
            "produce_mib_s": mib(round(sent / produce_s)),
            "fetched_records": fetched,
            "fetch_requests": requests,
            "fetch_records_s": round(fetched / fetch_s),
            "fetch_mib_s": mib(round(nbytes / fetch_s)),
            "start_s": gateway.start_s,
            "file_cache": gateway.file_cache,
            "after_start": started,
            "after_create": created,
            "after_produce": produced,
            "after_fetch": gateway.cost(),
        }
    except BaseException:
        gateway.kill()
        raise
    return {**figures, "stop_s": gateway.stop()}


def build_closed_segments(data_dir: Path, count: int, value_bytes: int) -> int:
    """One partition of `count` closed segments plus the active one, through the engine (one
    batch each: segment.bytes is the minimum), shut down cleanly; returns the records."""
    manager = LogManager(data_dir)
    manager.create_topic("segments", 1, {"segment.bytes": 14})
    log = manager.log("segments", 0)
    batch = fmt.encode_batch([fmt.RecordInput(None, b"v" * value_bytes)])
    while len(log.segments) <= count:
        log.append_as_leader(bytearray(batch), 0)
    log.advance_high_watermark(log.log_end_offset)
    manager.close()
    return log.log_end_offset


def segment_figures(work: Path, sizes: Sizes) -> dict[str, Any]:
    data_dir = work / "segments"
    progress(f"building {sizes.closed_segments} closed segments")
    started = time.perf_counter()
    records = build_closed_segments(data_dir, sizes.closed_segments, sizes.value_bytes)
    build_s = round(time.perf_counter() - started, 1)
    files = sum(1 for _ in (data_dir / "segments-0").glob("*.log"))
    progress("starting the gateway on them, then fetching from offset 0")
    gateway = Gateway(data_dir, sizes.fd_limit)
    try:
        started_cost = gateway.cost()
        fetched, _, requests, fetch_s = asyncio.run(
            fetch_all(gateway.url, "segments", {0: records}, 1)
        )
        figures = {
            "closed_segments": files - 1,
            "records": records,
            "build_s": build_s,
            "start_s": gateway.start_s,
            "file_cache": gateway.file_cache,
            "after_start": started_cost,
            "fetched_records": fetched,
            "fetch_requests": requests,
            "fetch_from_0_s": round(fetch_s, 1),
            "after_fetch": gateway.cost(),
        }
    except BaseException:
        gateway.kill()
        raise
    return {**figures, "stop_s": gateway.stop()}


def _machine() -> dict[str, str]:
    return {
        "machine": f"{platform.node()} ({os.cpu_count()} cores, {platform.machine()})",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load": "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()),
    }


def run(sizes: Sizes, work: Path) -> dict[str, Any]:
    raise_fd_limit()
    return {
        **_machine(),
        "sizes": asdict(sizes),
        "partitions": [partition_figures(work, n, sizes) for n in sizes.partitions],
        "closed_segments": segment_figures(work, sizes),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes (a test runs this)")
    parser.add_argument("--out", type=Path, help="also write the report (JSON) here")
    parser.add_argument("--cluster", action="store_true", help="a 3-node cluster's scale")
    parser.add_argument(
        "--partitions", help="with --cluster: the partition counts, comma-separated"
    )
    args = parser.parse_args()
    name = "scale-cluster-report.json" if args.cluster else "scale-report.json"

    def write(report: dict[str, Any]) -> bytes:
        text = orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / name).write_bytes(text)
        return text

    with tempfile.TemporaryDirectory() as tmp:
        if args.cluster:
            sizes = scale_cluster.CLUSTER_QUICK if args.quick else scale_cluster.CLUSTER_FULL
            if args.partitions:
                counts = tuple(int(n) for n in args.partitions.split(","))
                sizes = dataclasses.replace(sizes, partitions=counts)
            raise_fd_limit()
            machine = _machine()
            report = {
                **machine,
                **scale_cluster.run_cluster(sizes, Path(tmp), lambda r: write({**machine, **r})),
            }
        else:
            report = run(QUICK if args.quick else FULL, Path(tmp))
    print(write(report).decode())


if __name__ == "__main__":
    main()
