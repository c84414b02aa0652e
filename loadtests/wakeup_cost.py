"""What waking a sleeping process costs on this machine: two processes exchange one byte
over a socketpair, one message in flight (each message wakes a peer that went to sleep), then
64 in flight (the peer mostly awake); both free to run on any CPU, then both pinned to CPU 0
(a wake-up without another CPU to rouse). Prints wall time and CPU (both processes) per
message. Run it on an otherwise idle machine: on a busy one no CPU sleeps.

The cluster's acks=all and the workers' forwarding cross processes on every request; on a VM
each such wake-up can cost as much CPU as an HTTP request's work (docs/PERFORMANCE.md).
`python -m loadtests.wakeup_cost [--messages N]`
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import time
from dataclasses import dataclass

DEPTHS = (1, 64, 1, 64)


@dataclass(frozen=True)
class Exchange:
    in_flight: int
    pinned: bool  # both processes on CPU 0
    messages: int
    wall_us: float  # per message
    cpu_us: float  # per message, both processes


def _echo(sock: socket.socket, messages: int) -> None:
    got = 0
    while got < messages:
        data = sock.recv(65536)
        if not data:
            return
        got += len(data)
        sock.sendall(data)


def exchange(in_flight: int, messages: int, pinned: bool = False) -> Exchange:
    """`messages` one-byte messages to an echoing child, `in_flight` at a time."""
    allowed = os.sched_getaffinity(0)
    if pinned:
        os.sched_setaffinity(0, {min(allowed)})
    try:
        return _exchange(in_flight, messages, pinned)
    finally:
        os.sched_setaffinity(0, allowed)


def _exchange(in_flight: int, messages: int, pinned: bool) -> Exchange:
    ours, theirs = socket.socketpair()
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    pid = os.fork()
    if pid == 0:
        ours.close()
        _echo(theirs, messages)
        os._exit(0)
    theirs.close()
    wall, cpu = time.perf_counter(), time.process_time()
    sent = got = 0
    while got < messages:
        burst = min(in_flight - (sent - got), messages - sent)
        if burst > 0:
            ours.sendall(b"x" * burst)
            sent += burst
        got += len(ours.recv(65536))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    os.waitpid(pid, 0)
    ours.close()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    child = (after.ru_utime + after.ru_stime) - (
        children_before.ru_utime + children_before.ru_stime
    )
    per_message = 1e6 / messages
    return Exchange(in_flight, pinned, messages, wall * per_message, (cpu + child) * per_message)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    args = parser.parse_args()
    for pinned in (False, True):
        for depth in DEPTHS:
            row = exchange(depth, args.messages, pinned)
            print(
                f"{'one CPU ' if row.pinned else 'any CPU '}{row.in_flight:3} in flight: "
                f"{row.wall_us:6.1f} µs wall, {row.cpu_us:5.1f} µs CPU per message "
                f"({row.messages} messages)"
            )


if __name__ == "__main__":
    main()
