"""A cluster brought down as `docker compose down` does it (every service at once, so etcd may
go first): each node, sent SIGTERM once its etcd is stopped (SIGSTOP: its requests hang until
they time out) or killed (refused at once), exits 0 within a few seconds with its data closed
cleanly, handing nothing over. The time from the signal to the exit is the behaviour under
test: the node's requests to the store share the stop's deadline and each waits at most the
lease's TTL (2 s here), the first one unanswered ending them all; before, three requests in
a row each waited out etcd's timeout (17 s in all)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest

from gateway.workers.local_cluster import LocalCluster
from tests.cluster.conftest import WORKDIR_MARKER
from tests.cluster.harness import NODE_OPTIONS

EXIT_BOUND_S = 5.0  # from SIGTERM; the lease's TTL (2 s) and the closing, with room to spare


@pytest.fixture
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    workdir = tmp_path_factory.mktemp(f"{WORKDIR_MARKER}-{os.getpid()}-")  # reaped if orphaned
    cluster = LocalCluster(workdir, 3, node_options=NODE_OPTIONS)
    cluster.start()
    try:
        yield cluster
    finally:
        etcd = cluster.etcd.process
        if etcd is not None and etcd.poll() is None:
            etcd.send_signal(signal.SIGCONT)  # a stopped etcd would not see its SIGTERM
        cluster.stop()


@pytest.mark.parametrize("fault", [signal.SIGSTOP, signal.SIGKILL], ids=["paused", "killed"])
def test_nodes_whose_etcd_is_gone_exit_cleanly_within_seconds_of_sigterm(
    small: LocalCluster, fault: signal.Signals
) -> None:
    etcd = small.etcd.process
    assert etcd is not None
    logs = [small.workdir / f"node-{node.node_id}.log" for node in small.nodes]
    before = [log.stat().st_size for log in logs]
    etcd.send_signal(fault)
    signalled = []
    for node in small.nodes:
        assert node.process is not None
        node.process.terminate()
        signalled.append(time.monotonic())
    for node, sent, log, offset in zip(small.nodes, signalled, logs, before, strict=True):
        assert node.process is not None
        try:
            status = node.process.wait(max(0.0, sent + EXIT_BOUND_S - time.monotonic()))
        except subprocess.TimeoutExpired:
            node.kill()
            said = log.read_text()[offset:][-3000:]
            raise AssertionError(
                f"node {node.node_id} ran on {EXIT_BOUND_S:.0f} s past SIGTERM; its log:\n{said}"
            ) from None
        node.process = None
        said = log.read_text()[offset:]
        assert status == 0, f"node {node.node_id} exited with {status}:\n{said[-3000:]}"
        assert "data directory closed cleanly" in said, said[-3000:]
        assert f"node {node.node_id} cannot announce its shutdown" in said, said[-3000:]
        assert "handed over" not in said, said[-3000:]
