"""Shared by the load tools: start a gateway or redis-server; read a process's CPU and RSS;
keep the gateway and the load generators on separate CPUs."""

from __future__ import annotations

import contextlib
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from gateway.workers.local_cluster import free_port

CHECKOUT = Path(__file__).resolve().parents[1]


def start_gateway(
    data_dir: Path,
    *extra: str,
    preexec: Callable[[], None] | None = None,
    log: Path | None = None,
    tree: Path | None = None,
) -> tuple[subprocess.Popen[str], str]:
    """Start `python -m gateway --port 0` (plus `extra` options, `preexec` run in the child
    before it starts: limits; its stderr to `log` if given; `tree`: the gateway of another
    checkout, an earlier commit's, instead of this one's); return the process and the URL it
    printed once its logs were open."""
    where = {} if tree is None else {"PYTHONPATH": str(tree)}
    with contextlib.ExitStack() as files:
        stderr = subprocess.DEVNULL if log is None else files.enter_context(log.open("w"))
        process = subprocess.Popen(
            [sys.executable, "-m", "gateway", "--data-dir", str(data_dir), "--port", "0", *extra],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **where},
            cwd=tree,
            preexec_fn=preexec,
        )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("sluice listening on "):
        process.kill()
        said = "" if log is None else "\n" + log.read_text()
        raise RuntimeError(f"gateway did not start: {line!r}{said}")
    return process, line.split()[-1]


def source_commit() -> str:
    """HEAD of this checkout, and the source files that differ from it (another person's work
    in progress): what a report says it measured."""

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", *args], capture_output=True, text=True, check=False, cwd=CHECKOUT
        )
        return done.stdout.rstrip("\n")

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    changed = [
        line[3:]
        for line in git("status", "--porcelain", "--untracked-files=no").splitlines()
        if line[3:].endswith(".py") and not line[3:].startswith(("tests/", "loadtests/"))
    ]
    return head + (f" (with local changes to {', '.join(changed)})" if changed else "")


def separate_cpus(*server_pids: int) -> str:
    """The servers (every thread; the gateway, and any baseline measured in turn with it) on
    the first CPU, this process and the generators it starts on the others, so client and
    server never wait for each other's core; says what it did."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return "shared (one CPU)"
    for pid in server_pids:
        for thread in Path(f"/proc/{pid}/task").iterdir():
            os.sched_setaffinity(int(thread.name), {cpus[0]})
    os.sched_setaffinity(0, set(cpus[1:]))
    return f"servers on CPU {cpus[0]}, load generators on CPU {','.join(map(str, cpus[1:]))}"


def stop_on_sigterm() -> None:
    """Make SIGTERM end a load tool as Ctrl-C does, through its `finally` and `with` blocks,
    so the servers it started are stopped with it instead of left running."""

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def progress(text: str) -> None:
    """A benchmark's progress line, on stderr (the report goes to stdout)."""
    print(f"{time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a server: the process, its live descendants (worker
    processes) and the children it has reaped, from /proc."""
    stats = _proc_stats()
    return sum(stats[p][1] for p in _tree(pid, stats)) / os.sysconf("SC_CLK_TCK")


def runqueue_wait_seconds(pid: int) -> float:
    """How long the main thread of `pid` (a server's event loop) has waited for a CPU while it
    could run: other processes on its core, from the scheduler's statistics."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9


def tree_rss_bytes(pid: int) -> int:
    """Resident bytes of a server and its live descendants (worker processes, tiering's
    shipper processes)."""
    total = 0
    for member in _tree(pid, _proc_stats()):
        with contextlib.suppress(OSError, RuntimeError):  # it exited while we looked
            total += rss_bytes(member)
    return total


def _tree(pid: int, stats: dict[int, tuple[int, int]]) -> list[int]:
    """`pid` and its live descendants, by the parent pids of `stats`."""
    children: dict[int, list[int]] = {}
    for child, (parent, _) in stats.items():
        children.setdefault(parent, []).append(child)
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        if current in stats:
            found.append(current)
            todo.extend(children.get(current, ()))
    return found


def _proc_stats() -> dict[int, tuple[int, int]]:
    """Every process: pid -> (parent pid, clock ticks of its own and its reaped children's CPU)."""
    stats = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # it exited while we looked
            continue
        # After the name: state, ppid, ... utime (12th), stime, cutime, cstime.
        ticks = int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
        stats[int(entry.name)] = (int(fields[1]), ticks)
    return stats


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def children_cpu_seconds() -> float:
    """CPU of this process's reaped children (wrk, h2load, redis-benchmark runs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def raise_fd_limit() -> None:
    """Thousands of parked polls need thousands of sockets, here and in the servers we start."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def http_json(method: str, url: str, body: object = None, ok: tuple[int, ...] = ()) -> Any:
    """One admin call (topic create/delete, probes): the decoded JSON answer, or raise."""
    data = None if body is None else orjson.dumps(body)
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            raw = response.read()
    except urllib.error.HTTPError as error:
        if error.code in ok:
            return None
        raise RuntimeError(f"{method} {url} -> {error.code} {error.read()[:300]!r}") from None
    return orjson.loads(raw) if raw else None


@dataclass
class RedisServer:
    """A redis-server on a free loopback port, persistence off, with its own scratch directory."""

    process: subprocess.Popen[bytes]
    port: int

    @classmethod
    def start(cls, directory: Path) -> RedisServer:
        if shutil.which("redis-server") is None:
            raise RuntimeError("redis-server is needed: apt-get install redis-server")
        directory.mkdir(parents=True, exist_ok=True)
        port = free_port()
        process = subprocess.Popen(
            [
                "redis-server",
                "--port", str(port),
                "--bind", "127.0.0.1",
                "--save", "",
                "--appendonly", "no",
                "--dir", str(directory),
                "--maxclients", "20000",
                "--loglevel", "warning",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        server = cls(process, port)
        deadline = time.monotonic() + 30
        while server.command("PING") != "+PONG":
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)
        return server

    def command(self, *args: str) -> str:
        """One command over a fresh socket (setup and probes); the raw first reply line or ''."""
        payload = f"*{len(args)}\r\n".encode() + b"".join(
            f"${len(a.encode())}\r\n".encode() + a.encode() + b"\r\n" for a in args
        )
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=30) as sock:
                sock.sendall(payload)
                reply = b""
                while not reply.endswith(b"\r\n") or self._incomplete(reply):
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    reply += chunk
        except OSError:
            return ""
        return reply.decode(errors="replace").strip()

    @staticmethod
    def _incomplete(reply: bytes) -> bool:
        match = re.match(rb"\$(\d+)\r\n", reply)
        return match is not None and len(reply) < match.end() + int(match.group(1)) + 2

    def info(self, section: str) -> dict[str, str]:
        out = {}
        for line in self.command("INFO", section).splitlines():
            name, sep, value = line.partition(":")
            if sep:
                out[name] = value.strip()
        return out

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


class MotoServer:
    """`moto_server` (PyPI `moto[server]`, an S3 API) on a free loopback port; it keeps the
    objects in its memory until it stops. Any access key is accepted."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        binary = Path(sys.executable).with_name("moto_server")
        self.process = subprocess.Popen(
            [str(binary), "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(self.url + "/moto-api/", timeout=1.0):
                    break
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto_server did not start on {self.url}") from None
                time.sleep(0.05)  # polling the port until it answers: no fixed wait

    def client(self, endpoint: str | None = None) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=endpoint or self.url,
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="test",
        )

    def new_bucket(self) -> str:
        name = f"sluice-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
