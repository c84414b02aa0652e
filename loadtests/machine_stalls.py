"""The machine's own stalls, measured beside a bench: how late a sleeper at real-time priority
wakes on each CPU.

A process pinned to each CPU sleeps `PERIOD_S` at a time under SCHED_FIFO and notes every
wake-up later than `NOTED_S`. At real-time priority no ordinary process (the gateway, the
load generators) delays it: what does is the machine itself, a vCPU the hypervisor did not run,
interrupts, a kernel section that cannot be preempted. No server answers faster than the
machine lets it run, so a latency bench reports these stalls for the same seconds as its
figures (`Probes.window`). Without the right to real-time priority a probe runs at the normal
one and says so: it then measures the CPU's other work too.

    python -m loadtests.machine_stalls [--seconds 10]    prints each CPU's stalls
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

PERIOD_S = 0.001
NOTED_S = 0.0005  # a wake-up later than this is written to the parent
THRESHOLDS_MS = (1, 3, 10)
PRIORITY = 50


@dataclass
class _Probe:
    cpu: int
    process: subprocess.Popen[bytes]
    realtime: bool = False
    late: list[tuple[float, float]] = field(default_factory=list)  # (monotonic time, late s)
    reader: threading.Thread | None = None

    def read(self) -> None:
        """The probe's lines: first whether it got real-time priority, then each late wake."""
        assert self.process.stdout is not None
        first = self.process.stdout.readline()
        self.realtime = first.strip() == b"realtime"
        for line in self.process.stdout:
            at, late = line.split()
            self.late.append((float(at), float(late)))


class Probes:
    """One probe process per CPU while the block runs; `window` gives each CPU's stalls
    between two `time.monotonic()` readings (the same clock in every process)."""

    def __init__(self, cpus: list[int] | None = None) -> None:
        self.cpus = sorted(os.sched_getaffinity(0)) if cpus is None else cpus
        self._probes: list[_Probe] = []

    def __enter__(self) -> Probes:
        for cpu in self.cpus:
            process = subprocess.Popen(
                [sys.executable, "-m", "loadtests.machine_stalls", "--probe", str(cpu)],
                stdout=subprocess.PIPE,
                cwd=Path(__file__).resolve().parents[1],
            )
            probe = _Probe(cpu, process)
            probe.reader = threading.Thread(target=probe.read, daemon=True)
            probe.reader.start()
            self._probes.append(probe)
        return self

    def __exit__(self, *exc: object) -> None:
        for probe in self._probes:
            probe.process.send_signal(signal.SIGTERM)
        for probe in self._probes:
            probe.process.wait(30)
            if probe.reader is not None:
                probe.reader.join(30)

    def pids(self) -> list[int]:
        return [probe.process.pid for probe in self._probes]

    def window(self, start: float, end: float) -> dict[str, Any]:
        """Per CPU: the longest stall between `start` and `end` and how many passed each of
        THRESHOLDS_MS; whether the probe ran at real-time priority."""
        out: dict[str, Any] = {}
        for probe in self._probes:
            late = [s * 1000 for at, s in list(probe.late) if start <= at <= end]
            out[f"cpu{probe.cpu}"] = {
                "realtime": probe.realtime,
                "max_ms": round(max(late, default=0.0), 2),
                **{f"over_{t}ms": sum(1 for ms in late if ms > t) for t in THRESHOLDS_MS},
            }
        return out


def longest_ms(window: dict[str, Any]) -> float:
    """The longest stall of any CPU in a `Probes.window`."""
    return max((cpu["max_ms"] for cpu in window.values()), default=0.0)


def probe(cpu: int) -> None:
    """Sleep PERIOD_S at a time on `cpu` until SIGTERM, writing each late wake-up."""
    os.sched_setaffinity(0, {cpu})
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(PRIORITY))
        realtime = True
    except PermissionError:
        realtime = False
    out = sys.stdout.buffer
    out.write(b"realtime\n" if realtime else b"normal\n")
    out.flush()
    stopped = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopped
        stopped = True

    signal.signal(signal.SIGTERM, stop)
    clock, sleep = time.monotonic, time.sleep
    while not stopped:
        before = clock()
        sleep(PERIOD_S)
        after = clock()
        late = after - before - PERIOD_S
        if late > NOTED_S:
            try:
                out.write(b"%.6f %.6f\n" % (after, late))
                out.flush()
            except BrokenPipeError:  # the bench that started it is gone
                return


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--probe", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe is not None:
        probe(args.probe)
        return
    with Probes() as probes:
        start = time.monotonic()
        time.sleep(args.seconds)
        end = time.monotonic()
    print(orjson.dumps(probes.window(start, end), option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    main()
