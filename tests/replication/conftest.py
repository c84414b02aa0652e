"""Real etcd processes for the replication tests (one per module, or per test that stops it)
on free loopback ports, and a TCP proxy that can freeze to play a hung etcd member."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from gateway.workers.local_cluster import free_port

HEALTHY_DEADLINE_S = 20.0


class EtcdProcess:
    """One single-member etcd cluster; stop() kills it, start() brings it back on the same
    ports and data directory."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("etcd")
        if binary is None:
            pytest.fail(
                "the etcd binary is missing: install Debian's etcd-server package "
                "(apt-get install etcd-server)",
                pytrace=False,
            )
        self.binary = binary
        self.workdir = workdir
        self.url = f"http://127.0.0.1:{free_port()}"
        self.peer_url = f"http://127.0.0.1:{free_port()}"
        self.log_path = workdir / "etcd.log"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [
            self.binary,
            "--name=test",
            f"--data-dir={self.workdir / 'data'}",
            f"--listen-client-urls={self.url}",
            f"--advertise-client-urls={self.url}",
            f"--listen-peer-urls={self.peer_url}",
            f"--initial-advertise-peer-urls={self.peer_url}",
            f"--initial-cluster=test={self.peer_url}",
        ]
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        self._wait_healthy()

    def stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None

    def _wait_healthy(self) -> None:
        """Poll /health until etcd answers healthy, failing on exit or after the deadline."""
        assert self._process is not None
        deadline = time.monotonic() + HEALTHY_DEADLINE_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                pytest.fail(f"etcd exited early:\n{self._log_tail()}", pytrace=False)
            with (
                contextlib.suppress(OSError, ValueError),
                urllib.request.urlopen(f"{self.url}/health", timeout=1) as response,
            ):
                if json.load(response).get("health") == "true":
                    return
            time.sleep(0.05)  # the interval between health polls
        self.stop()
        pytest.fail(f"etcd not healthy in {HEALTHY_DEADLINE_S} s:\n{self._log_tail()}")

    def _log_tail(self) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-20:])


@pytest.fixture(scope="module")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdProcess]:
    """An etcd shared by the tests of a module (each test works under its own prefix)."""
    server = EtcdProcess(tmp_path_factory.mktemp("etcd"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def own_etcd(tmp_path: Path) -> Iterator[EtcdProcess]:
    """An etcd for one test, which may stop and restart it."""
    server = EtcdProcess(tmp_path)
    server.start()
    yield server
    server.stop()


class FreezingProxy:
    """A TCP proxy to `target`; freeze() stops relaying bytes, keeping connections open, as a
    stopped or cut-off etcd member would."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.running = asyncio.Event()
        self.running.set()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.url = ""

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    def freeze(self) -> None:
        self.running.clear()

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:
            writer.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self._writers |= {writer, up_writer}
        pumps = [
            asyncio.create_task(self._pump(reader, up_writer)),
            asyncio.create_task(self._pump(up_reader, writer)),
        ]
        self._tasks.update(pumps)
        await asyncio.gather(*pumps, return_exceptions=True)
        self._tasks.difference_update(pumps)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await self.running.wait()
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()


@pytest.fixture
async def freezing_proxy(etcd_server: EtcdProcess) -> AsyncIterator[FreezingProxy]:
    proxy = FreezingProxy(int(etcd_server.url.rsplit(":", 1)[1]))
    await proxy.start()
    yield proxy
    await proxy.close()
