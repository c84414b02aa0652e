"""A real `sluice serve` process per test, found through the port it prints."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from loadtests.common import start_gateway

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Server:
    """A running gateway process."""

    process: subprocess.Popen[str]
    url: str
    port: int
    data_dir: Path

    def stop(self) -> int:
        """SIGTERM and wait: the exit status of a graceful shutdown."""
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=30)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)


def start_server(
    data_dir: Path,
    *extra: str,
    preexec: Callable[[], None] | None = None,
    log: Path | None = None,
) -> Server:
    """Start `python -m gateway` on a free port (`preexec`: run in the child first, to set
    limits; `log`: where its stderr goes); return once it has opened its logs."""
    process, url = start_gateway(data_dir, *extra, preexec=preexec, log=log)
    port = int(url.rsplit(":", 1)[1])
    return Server(process, url, port, data_dir)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    running = start_server(tmp_path / "data")
    yield running
    if running.process.poll() is None:
        assert running.stop() == 0


def ready(url: str, **client: object) -> None:
    """The listening line is printed once the logs are open; /readyz must agree."""
    with httpx.Client(**client) as http:  # type: ignore[arg-type]
        assert http.get(f"{url}/readyz").status_code == 200


def until(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Poll another process's progress until `condition()` holds (bounded)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def read_values(http: httpx.Client, url: str, topic: str, end: int) -> list[Any]:
    """Every record value of partition 0 from offset 0 up to `end`, over JSON fetches."""
    offset, values = 0, []
    while offset < end:
        answer = http.get(
            f"{url}/v1/topics/{topic}/partitions/0/records",
            params={"offset": offset, "max_records": 50, "timeout_ms": 0},
        ).json()
        values.extend(r["value"] for r in answer["records"])
        offset = answer["next_offset"]
    return values
