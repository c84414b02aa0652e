"""`sluice serve --workers N` (N > 1): one port served by N processes, run as a cluster.

The supervisor starts an etcd with its data under `<data-dir>/workers/etcd` and N workers,
each a cluster node (`sluice serve --cluster`) with its own data directory
(`<data-dir>/workers/worker-<i>`) and private loopback address, where the others forward to it
what it leads. Every worker also listens on the shared --host/--port (SO_REUSEPORT): the
kernel spreads connections over them. The supervisor restarts a worker that exits (with
backoff), relays SIGHUP, and on SIGTERM/SIGINT shuts down in two phases (every worker drains
its own clients while still serving the others, then all close), then stops etcd.

With --auth the workers share the --data-dir's auth files (gateway.auth.shared_store) and
call each other with an internal key: --internal-key-file, else one generated once into
`<data-dir>/workers/internal.key` (mode 0600).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import secrets
import signal
import socket
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from gateway import config
from gateway.auth.credentials import write_atomically
from gateway.auth.service import AuthConfigError, read_internal_keys
from gateway.settings import Settings
from gateway.worker_dirs import INTERNAL_KEY, MARKER, ROOT, check_layout, worker_dir_name
from gateway.workers.local_cluster import ClusterError, EtcdServer, die_with_parent, free_port

START_DEADLINE_S = 60.0  # a worker's start (its logs open) and the whole group's readiness
DRAIN_DEADLINE_S = 15.0  # phase one (a worker's SHUTDOWN_TIMEOUT_S, plus margin)
EXIT_DEADLINE_S = 30.0  # phase two, then SIGKILL
RESTART_FIRST_S = 0.1  # backoff between restarts of a worker that keeps failing ...
RESTART_MAX_S = 10.0
STABLE_S = 30.0  # ... reset once a worker has run this long
LISTENING = "sluice listening on "
DRAINED = "sluice drained"
log = logging.getLogger("sluice.workers")


class WorkerFailed(Exception):
    """A worker exited or said something else before it was listening."""


def internal_key_file(settings: Settings, root: Path) -> Path | None:
    """With --auth, the file of the key the workers call each other with: --internal-key-file
    if given (checked now, not by each worker), else `<root>/internal.key`, made once (mode
    0600, 32 random bytes in hex) and kept. The key itself is never logged."""
    if not settings.auth:
        return None
    path = settings.internal_key_file
    if path is None:
        path = root / INTERNAL_KEY
        if not path.exists():
            write_atomically(path, (secrets.token_hex(32) + "\n").encode())
        os.chmod(path, 0o600)  # as made, even if a copy or restore loosened it
    try:
        read_internal_keys(path)
    except AuthConfigError as exc:
        raise SystemExit(f"sluice: {exc}") from None
    return path


def hold_port(host: str, port: int) -> socket.socket:
    """The shared port, bound with SO_REUSEPORT but not listening, held for the supervisor's
    life: with --port 0 it picks the port, and the port stays ours while workers restart."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
    except OSError as exc:
        raise SystemExit(f"sluice: cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


@dataclass
class Worker:
    """One worker: its node id, data directory and private port survive its restarts."""

    node_id: int
    data_dir: Path
    port: int
    process: asyncio.subprocess.Process | None = None
    started: float = 0.0
    drained: asyncio.Event = field(default_factory=asyncio.Event)
    reader: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class Supervisor:
    """Runs the workers until a signal: start, wait for all to be ready, restart the ones
    that exit, and shut down in order."""

    def __init__(
        self,
        settings: Settings,
        root: Path,
        etcd: EtcdServer,
        port: int,
        internal_key: Path | None = None,
    ) -> None:
        self.settings = settings
        self.root = root
        self.etcd = etcd
        self.port = port
        self.internal_key = internal_key  # with --auth: the workers' key (a file's path)
        self.workers = [
            Worker(i, root / worker_dir_name(i), free_port()) for i in range(settings.workers)
        ]

    def command(self, worker: Worker) -> list[str]:
        """`sluice serve` as worker i: the user's settings (from the file the supervisor
        wrote), then what makes it one node of the group."""
        settings = self.settings
        factor = settings.default_replication_factor or 1  # a replica on the same disk buys nothing
        return [
            sys.executable, "-m", "gateway", "--config", str(self.root / "settings.toml"),
            "--supervised", "--workers", str(settings.workers),
            "--node-id", str(worker.node_id), "--cluster", self.etcd.endpoint,
            "--data-dir", str(worker.data_dir), "--port", str(self.port),
            "--advertise", worker.url, "--default-replication-factor", str(factor),
            "--offsets-topic-replication-factor", "1", "--schemas-topic-replication-factor", "1",
            *(["--internal-key-file", str(self.internal_key)] if self.internal_key else []),
        ]  # fmt: skip

    async def run(self) -> int:
        """Serve until SIGTERM/SIGINT (exit status 0), or fail to start (1) or lose etcd (1)."""
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        loop.add_signal_handler(signal.SIGHUP, self._relay, signal.SIGHUP)
        stopped = asyncio.create_task(stop.wait())
        starting = asyncio.create_task(self._start_all())
        await asyncio.wait({stopped, starting}, return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            starting.cancel()
        failure = None
        with contextlib.suppress(asyncio.CancelledError):
            failure = await starting
        if stop.is_set() or failure is not None:
            if failure is not None:
                log.error("%s", failure)
            await self._shutdown()
            return 1 if failure is not None else 0
        scheme = "https" if self.settings.tls_cert else "http"
        # Tests and scripts read this line to learn the port (useful with --port 0).
        print(f"{LISTENING}{scheme}://{self.settings.host}:{self.port}", flush=True)
        watching = [asyncio.create_task(self._keep_running(w)) for w in self.workers]
        etcd_lost = asyncio.create_task(self._watch_etcd())
        await asyncio.wait({stopped, etcd_lost}, return_when=asyncio.FIRST_COMPLETED)
        for task in (*watching, etcd_lost):
            task.cancel()
        await asyncio.gather(*watching, etcd_lost, return_exceptions=True)
        await self._shutdown()
        return 0 if stop.is_set() else 1

    async def _start_all(self) -> str | None:
        """Start every worker and wait until all are ready; what failed, else None."""
        results = await asyncio.gather(
            *(self._start(w) for w in self.workers), return_exceptions=True
        )
        for result in results:
            if isinstance(result, WorkerFailed | OSError):
                return str(result)
            if isinstance(result, BaseException):
                raise result
        deadline = time.monotonic() + START_DEADLINE_S
        async with aiohttp.ClientSession(headers=self._authorization()) as http:
            while time.monotonic() < deadline:
                with contextlib.suppress(aiohttp.ClientError, OSError):
                    async with http.get(f"{self.workers[0].url}/readyz") as answer:
                        if answer.status == 200:
                            return None
                if not all(w.running for w in self.workers):
                    return "a worker exited while the workers were starting; see its log above"
                await asyncio.sleep(0.05)
        return f"the workers were not ready within {START_DEADLINE_S:.0f} s"

    def _authorization(self) -> dict[str, str]:
        """With --auth, the internal key as the workers expect it from one another."""
        keys = read_internal_keys(self.internal_key)
        return {"Authorization": f"Bearer {keys[0]}"} if keys else {}

    async def _start(self, worker: Worker) -> None:
        """Start the worker and wait for its listening line (its logs are open)."""
        worker.data_dir.mkdir(parents=True, exist_ok=True)
        worker.drained = asyncio.Event()
        process = await asyncio.create_subprocess_exec(
            *self.command(worker),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,  # the terminal's Ctrl-C is ours to relay, in order
            preexec_fn=die_with_parent,
        )
        worker.process, worker.started = process, time.monotonic()
        assert process.stdout is not None
        try:
            async with asyncio.timeout(START_DEADLINE_S):
                line = await process.stdout.readline()
        except TimeoutError:
            await _kill(process)
            raise WorkerFailed(
                f"worker {worker.node_id} did not start within {START_DEADLINE_S:.0f} s"
            ) from None
        except BaseException:
            await _kill(process)
            raise
        if not line.decode(errors="replace").startswith(LISTENING):
            await _kill(process)
            raise WorkerFailed(
                f"worker {worker.node_id} did not start (exit status {process.returncode}); "
                "see its log above"
            )
        worker.reader = asyncio.create_task(_read_drained(process, worker.drained))
        log.info("worker %d started (pid %d)", worker.node_id, process.pid)

    async def _keep_running(self, worker: Worker) -> None:
        """Restart the worker whenever it exits, sooner if it had been running a while."""
        backoff = RESTART_FIRST_S
        while True:
            if worker.process is not None:
                status = await worker.process.wait()
                ran = time.monotonic() - worker.started
                if ran >= STABLE_S:
                    backoff = RESTART_FIRST_S
                log.error(
                    "worker %d (pid %d) exited %s after %.1f s; restarting it in %.1f s",
                    worker.node_id,
                    worker.process.pid,
                    f"on signal {-status}" if status < 0 else f"with status {status}",
                    ran,
                    backoff,
                )
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, RESTART_MAX_S)
            try:
                await self._start(worker)
            except (WorkerFailed, OSError) as exc:
                log.error("restarting worker %d failed: %s", worker.node_id, exc)
                worker.process = None

    async def _watch_etcd(self) -> None:
        """Returns when etcd has exited: the workers cannot go on without their metadata."""
        process = self.etcd.process
        while process is not None and process.poll() is None:
            await asyncio.sleep(0.5)
        log.error("etcd exited (see %s); stopping the workers", self.etcd.workdir / "etcd.log")

    def _relay(self, sig: signal.Signals) -> None:
        for worker in self.workers:
            if worker.running and worker.process is not None:
                worker.process.send_signal(sig)

    async def _shutdown(self) -> None:
        """Phase one: every worker stops taking connections and finishes its clients'
        requests, still serving what the others forward. Phase two, once all have drained:
        they close. Stragglers are killed."""
        running = [w for w in self.workers if w.running]
        self._relay(signal.SIGTERM)
        waits = [asyncio.create_task(_drained_or_gone(w)) for w in running]
        if waits:
            await asyncio.wait(waits, timeout=DRAIN_DEADLINE_S)
        for task in waits:
            task.cancel()
        self._relay(signal.SIGTERM)
        for worker in running:
            assert worker.process is not None
            try:
                async with asyncio.timeout(EXIT_DEADLINE_S):
                    await worker.process.wait()
            except TimeoutError:
                log.error("worker %d did not stop; killing it", worker.node_id)
                await _kill(worker.process)
            if worker.reader is not None:
                await worker.reader


async def _read_drained(process: asyncio.subprocess.Process, drained: asyncio.Event) -> None:
    """Follow a worker's stdout to its end: it says when it has drained."""
    assert process.stdout is not None
    while line := await process.stdout.readline():
        if line.decode(errors="replace").strip() == DRAINED:
            drained.set()


async def _drained_or_gone(worker: Worker) -> None:
    assert worker.process is not None
    exited = asyncio.create_task(worker.process.wait())
    drained = asyncio.create_task(worker.drained.wait())
    try:
        await asyncio.wait({exited, drained}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        exited.cancel()
        drained.cancel()


async def _kill(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.kill()
    await process.wait()


def _write_settings(settings: Settings, path: Path) -> None:
    """The user's effective settings as a TOML file (`sluice config show`'s), which every
    worker reads: flags, variables and a --config file reach them all the same."""
    lines = config.describe(settings, defaultdict(lambda: "from sluice serve --workers"))
    temporary = path.with_suffix(".tmp")
    temporary.write_text("\n".join(lines) + "\n")
    temporary.replace(path)


def supervise(settings: Settings) -> None:
    """`sluice serve --workers N`: check the data directory, hold the port, start etcd and
    the workers, and serve until a signal; exits with the supervisor's status."""
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s supervisor %(name)s %(message)s",
    )
    check_layout(settings.data_dir, settings.workers)
    root = settings.data_dir / ROOT
    try:
        etcd = EtcdServer(root / "etcd", own_session=True)
    except ClusterError as exc:
        raise SystemExit(f"sluice: --workers {settings.workers}: {exc}") from None
    root.mkdir(parents=True, exist_ok=True)
    lock = os.open(root / "supervisor.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SystemExit(f"sluice: {settings.data_dir} is in use by another process") from None
    internal_key = internal_key_file(settings, root)
    held = hold_port(settings.host, settings.port)
    try:
        etcd.start()
    except ClusterError as exc:
        raise SystemExit(f"sluice: --workers {settings.workers}: {exc}") from None
    try:
        (root / MARKER).write_text(json.dumps({"workers": settings.workers}) + "\n")
        _write_settings(settings, root / "settings.toml")
        supervisor = Supervisor(settings, root, etcd, held.getsockname()[1], internal_key)
        status = asyncio.run(supervisor.run())
    finally:
        etcd.stop()
        held.close()
    log.info("stopped")
    sys.exit(status)
