"""Compiled load generators (wrk, h2load, redis-benchmark), run for a fixed time and parsed.

Each run returns its counts, wall time and the CPU seconds of the generator (from the
children's rusage) and of the server (from /proc), so every figure says who was busy.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from loadtests.common import children_cpu_seconds, cpu_seconds

# How long a generator run for a time may go on past it: connecting and a last answer take
# moments; h2load never ends if a connection of its opens after its duration (one that waited
# for a full listen queue), and a wrk request's timeout is 30 s.
OVERRUN_S = 60.0

WRK_DONE = """
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests": %d, "duration_us": %d, "bytes": %d, "errors": %d, "non_2xx": %d,'
    .. ' "p50_ms": %.3f, "p99_ms": %.3f, "max_ms": %.3f}\\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect + e.read + e.write + e.timeout, e.status,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.max / 1000))
end
"""


@dataclass
class Run:
    """One generator run: requests completed, failures, and who spent which CPU."""

    requests: int
    seconds: float
    failures: int
    generator_cpu_s: float
    server_cpu_s: float
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def requests_per_s(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


def _lua_string(value: str) -> str:
    return "[==[" + value + "]==]"


def wrk(
    base_url: str,
    paths: list[str],
    *,
    seconds: float,
    server_pid: int,
    method: str = "GET",
    body: Path | None = None,
    headers: dict[str, str] | None = None,
    connections: int = 8,
    threads: int = 2,
) -> Run:
    """HTTP/1.1 with wrk; requests cycle through `paths` (prebuilt once per thread)."""
    lines = [f"wrk.method = {_lua_string(method)}"]
    for name, value in (headers or {}).items():
        lines.append(f"wrk.headers[ {_lua_string(name)} ] = {_lua_string(value)}")
    if body is not None:
        lines.append(f'wrk.body = io.open({_lua_string(str(body))}, "rb"):read("*a")')
    lines.append("local paths = {" + ", ".join(_lua_string(p) for p in paths) + "}")
    lines.append(
        """
local prepared = {}
local n = 0
init = function(args)
  for i, p in ipairs(paths) do prepared[i] = wrk.format(nil, p) end
end
request = function()
  n = n + 1
  return prepared[(n % #prepared) + 1]
end
"""
    )
    lines.append(WRK_DONE)
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write("\n".join(lines))
    command = [
        "wrk", "-t", str(threads), "-c", str(connections), "-d", f"{max(1, round(seconds))}s",
        "--timeout", "30s", "-s", script.name, base_url,
    ]  # fmt: skip
    try:
        done, generator_cpu, server_cpu = _timed(command, server_pid, max(1, round(seconds)))
    finally:
        Path(script.name).unlink()
    match = re.search(r"^WRKJSON (.*)$", done.stdout, re.M)
    if match is None:
        raise RuntimeError(f"wrk gave no summary:\n{done.stdout}\n{done.stderr}")
    summary = orjson.loads(match.group(1))
    return Run(
        requests=summary["requests"],
        seconds=summary["duration_us"] / 1e6,
        failures=summary["errors"] + summary["non_2xx"],
        generator_cpu_s=generator_cpu,
        server_cpu_s=server_cpu,
        extra={
            "p50_ms": summary["p50_ms"],
            "p99_ms": summary["p99_ms"],
            "max_ms": summary["max_ms"],
        },
    )


def h2load(
    urls: list[str],
    *,
    seconds: float,
    server_pid: int,
    body: Path | None = None,
    headers: dict[str, str] | None = None,
    clients: int = 8,
    streams: int = 1,
    threads: int = 2,
    http1: bool = False,
) -> Run:
    """h2load for `--duration` seconds: h2c with prior knowledge, or HTTP/1.1 with `http1`."""
    command = [
        "h2load", "-t", str(threads), "-c", str(clients), "-m", str(streams),
        "-D", _h2load_duration(seconds),
    ]  # fmt: skip
    if http1:
        command.append("--h1")
    for name, value in (headers or {}).items():
        command += ["-H", f"{name}: {value}"]
    if body is not None:
        command += ["-d", str(body)]
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as uri_file:
        uri_file.write("\n".join(urls) + "\n")
    command += ["-i", uri_file.name]
    try:
        done, generator_cpu, server_cpu = _timed(command, server_pid, seconds)
    finally:
        Path(uri_file.name).unlink()
    out = done.stdout
    finished = re.search(r"finished in ([\d.]+)(m?s)", out)
    counts = re.search(r"\d+ failed, (\d+) errored, (\d+) timeout", out)
    status = re.search(r"status codes: (\d+) 2xx, \d+ 3xx, (\d+) 4xx, (\d+) 5xx", out)
    if finished is None or counts is None or status is None:
        raise RuntimeError(f"h2load gave no summary:\n{out}\n{done.stderr}")
    elapsed = float(finished.group(1)) / (1000 if finished.group(2) == "ms" else 1)
    # Counted, not subtracted: at the end of a -D run a stream can have its 2xx status and not
    # yet be "done", so done - 2xx went negative. Failures: 4xx and 5xx answers, connection
    # errors and timeouts ("failed" also counts what the deadline cut short).
    failed = sum(int(n) for n in counts.groups()) + int(status.group(2)) + int(status.group(3))
    return Run(
        requests=int(status.group(1)),
        seconds=elapsed,
        failures=failed,
        generator_cpu_s=generator_cpu,
        server_cpu_s=server_cpu,
    )


def _h2load_duration(seconds: float) -> str:
    """h2load's `-D`: whole seconds as before, a shorter or fractional run in milliseconds
    (h2load takes a unit; wrk's `-d` does not, so a wrk cell lasts at least 1 s)."""
    if seconds >= 1 and seconds == int(seconds):
        return str(int(seconds))
    return f"{max(100, round(seconds * 1000))}ms"


def redis_benchmark(
    port: int,
    command_args: list[str],
    *,
    requests: int,
    server_pid: int,
    pipeline: int = 1,
    clients: int = 8,
    threads: int = 2,
    keyspace: int | None = None,
) -> Run:
    """redis-benchmark with one arbitrary command; `pipeline` commands per round trip."""
    command = [
        "redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-n", str(requests),
        "-c", str(clients), "-P", str(pipeline), "--threads", str(threads), "--csv", "-q",
    ]  # fmt: skip
    if keyspace is not None:
        command += ["-r", str(keyspace)]
    started = time.perf_counter()
    done, generator_cpu, server_cpu = _timed([*command, *command_args], server_pid)
    elapsed = time.perf_counter() - started
    rows = [line for line in done.stdout.splitlines() if line.startswith('"') and "rps" not in line]
    if not rows:
        raise RuntimeError(f"redis-benchmark gave no figures:\n{done.stdout}\n{done.stderr}")
    rps = float(rows[-1].split('","')[1].strip('"'))
    seconds = requests / rps if rps else elapsed
    return Run(
        requests=requests,
        seconds=seconds,
        failures=0,
        generator_cpu_s=generator_cpu,
        server_cpu_s=server_cpu,
    )


def _timed(
    command: list[str], server_pid: int, seconds: float | None = None
) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """Run a generator to completion; its CPU seconds and the server's over the same span. One
    that runs for `seconds` is killed `OVERRUN_S` after them: a run that does not end is an
    error that shows what the generator printed, not a wait for the caller's timeout."""
    children_before, server_before = children_cpu_seconds(), cpu_seconds(server_pid)
    limit = None if seconds is None else seconds + OVERRUN_S
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=limit)
    except subprocess.TimeoutExpired as stuck:
        raise RuntimeError(
            f"{command[0]} did not end {OVERRUN_S:.0f} s after its {seconds} s:\n"
            f"{_text(stuck.stdout)}\n{_text(stuck.stderr)}"
        ) from None
    generator_cpu = children_cpu_seconds() - children_before
    server_cpu = cpu_seconds(server_pid) - server_before
    if done.returncode != 0:
        raise RuntimeError(
            f"{command[0]} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
        )
    return done, round(generator_cpu, 2), round(server_cpu, 2)


def _text(output: str | bytes | None) -> str:
    """What a killed generator had printed (bytes even under text=True, when cut short)."""
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""
