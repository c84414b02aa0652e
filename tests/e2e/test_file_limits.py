"""End to end: a server allowed 256 file descriptors keeps accepting produces to one
partition of 16 KiB segments long after it holds more segments than descriptors, and serves
the whole log from offset 0. The descriptor table is grown once, at start."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import httpx

from gateway.server import DESCRIPTOR_TABLE
from tests.e2e.conftest import Server, read_values, start_server

LIMIT = 256  # soft and hard: `sluice serve` raises the soft limit to the hard one
CACHE = LIMIT // 8  # the file cache's default at this limit
PRODUCES = 2_000
PER_PRODUCE = 4


def limit_open_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def descriptor_table_size(pid: int) -> int:
    """The slots of the process's descriptor table (`FDSize`), which the kernel grows when a
    descriptor past them is opened, waiting an RCU grace period in that thread."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("FDSize:"):
                return int(line.split()[1])
    raise AssertionError("no FDSize in /proc/PID/status")


def test_the_descriptor_table_is_grown_at_start_to_the_limit(server: Server) -> None:
    """Grown before any request: a connection or a segment file opened under load never waits
    for the kernel to grow it (up to DESCRIPTOR_TABLE slots), and no descriptor is left open
    for it."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    expected = DESCRIPTOR_TABLE if hard == resource.RLIM_INFINITY else min(hard, DESCRIPTOR_TABLE)
    assert descriptor_table_size(server.process.pid) >= expected
    fds = os.listdir(f"/proc/{server.process.pid}/fd")
    assert all(int(fd) < expected - 1 for fd in fds), sorted(map(int, fds))[-3:]


RESERVE = """
import os, resource
from gateway.server import reserve_descriptor_table
resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))
before = len(os.listdir("/proc/self/fd"))
sizes = [reserve_descriptor_table(4096), reserve_descriptor_table(1 << 20)]
size = next(l for l in open("/proc/self/status") if l.startswith("FDSize:")).split()[1]
print(*sizes, size, len(os.listdir("/proc/self/fd")) - before)
"""


def test_the_table_is_grown_to_the_limit_and_no_further() -> None:
    """In a fresh interpreter (a table of 64 slots): grown to a 4,096 limit; a limit past the
    process's own (the top slot refused) leaves it as it is; no descriptor is left open."""
    done = subprocess.run(
        [sys.executable, "-c", RESERVE], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["4096", str(DESCRIPTOR_TABLE), "4096", "0"]


def test_a_log_of_far_more_segments_than_descriptors_is_written_and_read_whole(
    tmp_path: Path,
) -> None:
    server = start_server(tmp_path / "data", preexec=limit_open_files)
    try:
        with httpx.Client(base_url=server.url, timeout=30.0) as http:
            created = http.post(
                "/v1/topics", json={"name": "tiny", "configs": {"segment.bytes": 16384}}
            )
            assert created.status_code == 201, created.text
            before = open_fds(server.process.pid)
            pad = "x" * 1000
            for n in range(PRODUCES):
                records = [{"value": {"n": n, "i": i, "pad": pad}} for i in range(PER_PRODUCE)]
                answer = http.post("/v1/topics/tiny/records", json={"records": records})
                assert answer.status_code == 200, (n, answer.text)
            end = PRODUCES * PER_PRODUCE
            segments = list((server.data_dir / "tiny-0").glob("*.log"))
            assert len(segments) > 2 * LIMIT, len(segments)
            values = read_values(http, server.url, "tiny", end)
            assert [(v["n"], v["i"]) for v in values] == [
                (n, i) for n in range(PRODUCES) for i in range(PER_PRODUCE)
            ]
            # The closed segments share the cache; the active one holds one more.
            assert open_fds(server.process.pid) <= before + CACHE + 1
        assert server.stop() == 0
    finally:
        if server.process.poll() is None:
            server.kill()
