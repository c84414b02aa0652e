"""Start-up failures and the local cluster's plumbing: the ports it picks, and one clear line
(no traceback) when a node cannot reach etcd or listen."""

from __future__ import annotations

import random
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.workers import local_cluster
from gateway.workers.local_cluster import ClusterError, Node, free_port


def test_free_ports_are_distinct_and_below_the_ephemeral_range() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert all(port < low for port in ports)
    for port in ports[:20]:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_port_another_process_handed_out_is_not_handed_out_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two processes choosing at random (pytest's workers) never hand out the same port while
    both live: the first's choice is held by a lock the second cannot take."""
    script = (
        "import sys; from gateway.workers.local_cluster import free_port; "
        "print(free_port(), flush=True); sys.stdin.read()"
    )
    other = subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert other.stdout is not None
        taken = int(other.stdout.readline())
        offered = [taken, taken]  # then random ones again
        randrange = random.randrange
        monkeypatch.setattr(
            random, "randrange", lambda *a: offered.pop() if offered else randrange(*a)
        )
        assert free_port() != taken
        assert not offered
    finally:
        assert other.stdin is not None
        other.stdin.close()
        other.wait()


def test_ports_are_handed_out_where_no_lock_file_can_be_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lock directory that cannot be made (here a path under a file) costs the locks only:
    the ports are still chosen below the ephemeral range."""
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"")
    monkeypatch.setattr(local_cluster, "_PORT_LOCKS", blocker / "sluice-ports")
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = {free_port() for _ in range(5)}
    assert len(ports) == 5 and all(port < low for port in ports)


def test_a_node_that_cannot_reach_etcd_says_so_in_one_line(tmp_path: Path) -> None:
    node = Node(0, tmp_path / "node-0", f"etcd://127.0.0.1:{free_port()}")
    with pytest.raises(ClusterError) as caught:
        node.start()
    said = str(caught.value)
    assert "node 0 did not start" in said
    assert "sluice: cannot start: no etcd endpoint reachable" in said
    assert "Traceback" not in said
    assert not node.running


def test_a_taken_port_is_one_line_and_the_data_directory_is_closed(tmp_path: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "gateway", "--port", str(port), "--data-dir", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("sluice: cannot listen: ")
    assert "address already in use" in last
    assert "Traceback" not in done.stderr
    assert "data directory closed cleanly" in done.stderr
