"""A local cluster of child processes: one etcd and N `sluice serve --cluster` nodes on
loopback. `sluice dev-cluster` runs one until Ctrl-C; the cluster tests and the benchmark
drive one (kill, pause, restart nodes) through the same classes."""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

START_DEADLINE_S = 30.0
# One transaction creates a topic with all its partitions; etcd's default allows 128 ops.
ETCD_MAX_TXN_OPS = 10_240
DEV_REPLICA_LOST_TIMEOUT_MS = 60_000  # sluice dev-cluster's --replica-lost-timeout-ms


class ClusterError(Exception):
    """A process of the local cluster failed to start or to become ready."""


_PR_SET_PDEATHSIG = 1
_prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: a child only calls it


def die_with_parent() -> None:
    """A child's `preexec_fn`: SIGTERM it when the thread that started it dies, even by
    SIGKILL, so that nothing a supervisor started outlives it."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


_LOWEST_PORT = 10_000
_handed_out: dict[int, int] = {}  # port -> the descriptor of its lock (-1: none)
_PORT_LOCKS = Path(tempfile.gettempdir()) / "sluice-ports"


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def _reserve(port: int) -> bool:
    """Hold `port` for this process's life against every other process choosing here: a lock
    on a file named after it, released by the kernel when the process ends, however it ends.
    Two processes (pytest's workers) picking at random would otherwise hand out the same port
    now and then, and one child would fail to bind it. Where no lock file can be made (the
    directory another user's), the port is this process's alone, as before there were locks."""
    try:
        _PORT_LOCKS.mkdir(exist_ok=True)
        fd = os.open(_PORT_LOCKS / str(port), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        _handed_out[port] = -1
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    _handed_out[port] = fd
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port free now, for a child process to listen on.

    Chosen at random below the kernel's ephemeral range, so no outgoing connection can take
    it before the child binds it (a port from `bind(0)` can be, on a busy machine), and never
    one this or another process running now handed out before (`_reserve`)."""
    low = _ephemeral_low()
    for _ in range(200 if low > _LOWEST_PORT + 1000 else 0):
        port = random.randrange(_LOWEST_PORT, low)
        if port in _handed_out:
            continue
        with socket.socket() as sock, contextlib.suppress(OSError):
            sock.bind((host, port))
            if _reserve(port):
                return port
    with socket.socket() as sock:
        sock.bind((host, 0))
        chosen: int = sock.getsockname()[1]
        _handed_out[chosen] = -1
        return chosen


def _get_json(url: str, timeout: float = 2.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.load(response)


class EtcdServer:
    """A single-member etcd on loopback with its data in `workdir`."""

    def __init__(
        self,
        workdir: Path,
        client_port: int | None = None,
        listen_hosts: Sequence[str] = (),
        *,
        own_session: bool = False,
    ) -> None:
        """`listen_hosts`: addresses to serve clients on besides 127.0.0.1, on the same port
        (e.g. the host's end of links to nodes in network namespaces). `own_session`: etcd
        runs in a session of its own (a terminal's Ctrl-C reaches only us, which stop it
        last) and dies with the thread that starts it."""
        binary = shutil.which("etcd")
        if binary is None:
            raise ClusterError(
                "the etcd binary is missing: install Debian's etcd-server package "
                "(apt-get install etcd-server)"
            )
        self.binary = binary
        self.workdir = workdir
        self.client_port = client_port or free_port()
        self.url = f"http://127.0.0.1:{self.client_port}"
        self.listen_urls = [self.url, *(f"http://{h}:{self.client_port}" for h in listen_hosts)]
        self.peer_url = f"http://127.0.0.1:{free_port()}"
        self.process: subprocess.Popen[bytes] | None = None
        self.own_session = own_session

    @property
    def endpoint(self) -> str:
        """The `--cluster` value the nodes are given."""
        return "etcd://" + self.url.removeprefix("http://")

    def endpoint_at(self, host: str) -> str:
        """The `--cluster` value for a node that reaches etcd at `host` (a listen host)."""
        return f"etcd://{host}:{self.client_port}"

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        command = [
            self.binary,
            "--name=sluice",
            f"--data-dir={self.workdir / 'etcd-data'}",
            f"--listen-client-urls={','.join(self.listen_urls)}",
            f"--advertise-client-urls={self.url}",
            f"--listen-peer-urls={self.peer_url}",
            f"--initial-advertise-peer-urls={self.peer_url}",
            f"--initial-cluster=sluice={self.peer_url}",
            f"--max-txn-ops={ETCD_MAX_TXN_OPS}",
        ]
        with (self.workdir / "etcd.log").open("ab") as log:
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=self.own_session,
                preexec_fn=die_with_parent if self.own_session else None,
            )
        deadline = time.monotonic() + START_DEADLINE_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ClusterError(f"etcd exited; see {self.workdir / 'etcd.log'}")
            with contextlib.suppress(OSError, ValueError):
                if _get_json(f"{self.url}/health", 1.0).get("health") == "true":
                    return
            time.sleep(0.05)
        raise ClusterError("etcd did not become healthy")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


class Node:
    """One `sluice serve --cluster` process; its port and data directory survive restarts.

    `wrapper` is a command prefix the node runs under (e.g. `ip netns exec NS`, which execs the
    node in place, so signals still reach it); `advertise` is the URL the node gives the
    cluster when others reach it elsewhere than `host:port` (a proxy, NAT)."""

    def __init__(
        self,
        node_id: int,
        data_dir: Path,
        etcd_endpoint: str,
        port: int | None = None,
        extra: Sequence[str] = (),
        host: str = "127.0.0.1",
        *,
        wrapper: Sequence[str] = (),
        advertise: str | None = None,
    ) -> None:
        self.node_id = node_id
        self.data_dir = data_dir
        self.etcd_endpoint = etcd_endpoint
        self.host = host
        self.port = port or free_port(host)
        self.extra = list(extra)
        self.wrapper = list(wrapper)
        self.url = advertise or f"http://{host}:{self.port}"
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        command = [
            *self.wrapper,
            sys.executable,
            "-m",
            "gateway",
            "--node-id",
            str(self.node_id),
            "--cluster",
            self.etcd_endpoint,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--advertise",
            self.url,
            "--data-dir",
            str(self.data_dir),
            *self.extra,
        ]
        log_path = self.data_dir.parent / f"node-{self.node_id}.log"
        logged_before = log_path.stat().st_size if log_path.exists() else 0
        with log_path.open("a") as log:
            self.process = subprocess.Popen(
                command,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line.startswith("sluice listening on "):
            self.process.kill()
            self.process.wait()
            self.process = None
            with log_path.open("rb") as log:
                log.seek(logged_before)
                said = log.read().decode(errors="replace").strip()[-2000:]
            raise ClusterError(f"node {self.node_id} did not start: {line!r}; its log: {said}")

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: the node dies without leaving; its lease runs out."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM: a clean shutdown."""
        if self.process is not None:
            self.process.terminate()
            self.wait_stopped(timeout)

    def wait_stopped(self, timeout: float = 20.0) -> None:
        """Wait for a node sent SIGTERM to exit (SIGKILL past `timeout`)."""
        if self.process is not None:
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None

    def pause(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGCONT)


def start_together(nodes: Sequence[Node]) -> None:
    """Start nodes at once: each waits about a second on its own imports, not on the others'.
    If one fails, the others still come up (the caller's stop ends them) and the first failure
    is raised."""
    with ThreadPoolExecutor(max(1, len(nodes))) as pool:
        starting = [pool.submit(node.start) for node in nodes]
    for future in starting:
        future.result()


class LocalCluster:
    """etcd and `size` nodes under `workdir`; nodes listen on `base_port + i` if given."""

    def __init__(
        self,
        workdir: Path,
        size: int = 3,
        *,
        base_port: int | None = None,
        node_options: Sequence[str] = (),
    ) -> None:
        self.workdir = workdir
        self.etcd = EtcdServer(workdir)
        self.nodes = [
            Node(
                i,
                workdir / f"node-{i}",
                self.etcd.endpoint,
                None if base_port is None else base_port + i,
                node_options,
            )
            for i in range(size)
        ]

    def start(self) -> None:
        """etcd, then every node at once, until they see each other; all stopped on failure."""
        self.etcd.start()
        try:
            start_together(self.nodes)
            self.wait_ready()
        except BaseException:
            self.stop()
            raise

    def wait_ready(self, timeout: float = START_DEADLINE_S) -> dict[str, Any]:
        """Wait until every running node sees all running nodes alive and one controller."""
        deadline = time.monotonic() + timeout
        expected = {n.node_id for n in self.nodes if n.running}
        last: Any = None
        while time.monotonic() < deadline:
            views = []
            for node in self.nodes:
                if not node.running:
                    continue
                with contextlib.suppress(OSError, ValueError, urllib.error.URLError):
                    views.append(_get_json(f"{node.url}/v1/cluster"))
            if len(views) == len(expected) and all(
                v["controller"] is not None
                and {n["node_id"] for n in v["nodes"] if n["alive"]} == expected
                for v in views
            ):
                return dict(views[0])
            last = views
            time.sleep(0.05)
        raise ClusterError(f"the cluster did not settle: {last}")

    def stop(self) -> None:
        """Every node at once (a controlled shutdown each: with all of them leaving, no
        leadership is handed from one to the next), then etcd."""
        for node in self.nodes:
            if node.process is not None:
                node.process.terminate()
        for node in self.nodes:
            node.wait_stopped()
        self.etcd.stop()


def run_dev_cluster(size: int, workdir: Path, base_port: int) -> None:
    """`sluice dev-cluster`: start, print the URLs, wait for Ctrl-C, stop everything. A node
    down a minute is removed and its replicas re-created on the others (where enough remain)."""
    options = ("--replica-lost-timeout-ms", str(DEV_REPLICA_LOST_TIMEOUT_MS))
    cluster = LocalCluster(workdir, size, base_port=base_port, node_options=options)
    try:
        cluster.start()
    except ClusterError as exc:
        raise SystemExit(f"sluice dev-cluster: {exc}") from None
    print(f"etcd   {cluster.etcd.url}", flush=True)
    for node in cluster.nodes:
        print(f"node {node.node_id} {node.url}", flush=True)
    print("Ctrl-C stops the cluster", flush=True)
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        while not stop:
            signal.pause()
    finally:
        cluster.stop()
