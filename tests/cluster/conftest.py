"""One real cluster (etcd + 3 node processes) per test session, shared by the focused tests and
the fault campaign; each test starts from, and leaves, a healed cluster.

Options (give tests/cluster on the command line, so that pytest loads this file first):
  --schedules N              random fault schedules the campaign runs (default 6: CI's short
                             run, whose fixed seed draws every kind of fault, every link fault
                             and every target at least once; `--schedules 200` and
                             `--fault-seed random` make a long one)
  --fault-seed S|random      seed of the campaign (default fixed, so CI repeats the same
                             schedules; `random` explores new ones, printed to rerun them)
  --partition-mechanism M    auto (network namespaces where possible, else the TCP proxy),
                             netns or proxy
"""

from __future__ import annotations

import contextlib
import os
import signal
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.workers.local_cluster import LocalCluster
from tests.cluster.harness import Cluster
from tests.cluster.netfaults import NamespaceTopology, detect, make_topology, reap_stale

WORKDIR_MARKER = "sluice-cluster"
DEFAULT_FAULT_SEED = 20261207
DEFAULT_SCHEDULES = 6
SUMMARY: list[str] = []  # lines for the end of the run (campaign figures, mechanism)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sluice-cluster", "Sluice cluster fault tests")
    group.addoption(
        "--schedules",
        type=int,
        default=DEFAULT_SCHEDULES,
        help=f"random fault schedules the cluster campaign runs (default {DEFAULT_SCHEDULES})",
    )
    group.addoption(
        "--fault-seed",
        default=str(DEFAULT_FAULT_SEED),
        help=f"seed of the cluster fault campaign, or 'random' to explore new schedules "
        f"(default {DEFAULT_FAULT_SEED}: CI runs the same schedules every time)",
    )
    group.addoption(
        "--from-schedule",
        type=int,
        default=0,
        help="skip the campaign's schedules before this index (replays schedule N of a seed: "
        "--fault-seed S --from-schedule N --schedules N+1)",
    )
    group.addoption(
        "--partition-mechanism",
        choices=("auto", "netns", "proxy"),
        default="auto",
        help="how the cluster tests cut links: network namespaces or a TCP proxy",
    )


def option(config: pytest.Config, name: str, default: object) -> object:
    """An option of this file, or its default when pytest did not load it at start-up."""
    try:
        return config.getoption(name)
    except ValueError:
        return default


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if SUMMARY:
        terminalreporter.section("sluice cluster")
        for line in SUMMARY:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Cluster]:
    reaped = reap_stale(WORKDIR_MARKER)
    if reaped:
        SUMMARY.append(f"cleaned up after a dead earlier run: {', '.join(reaped)}")
    forced = str(option(request.config, "partition_mechanism", "auto"))
    mechanism, why = detect(None if forced == "auto" else forced)
    SUMMARY.append(f"network partitions: {mechanism} ({why})")
    workdir: Path = tmp_path_factory.mktemp(f"{WORKDIR_MARKER}-{os.getpid()}-")
    topology = make_topology(mechanism, 3)
    cluster = Cluster(workdir, topology)

    # SIGTERM (a CI timeout, say) unwinds like Ctrl-C, so the finalizer below still runs.
    def on_term(signum: int, frame: types.FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        signal.signal(signal.SIGTERM, previous)
        leftovers = [f"process {pid}" for pid in cluster.leftover_processes()]
        if isinstance(topology, NamespaceTopology):
            leftovers += topology.leftovers()
        assert not leftovers, f"the cluster left behind: {leftovers}"


@pytest.fixture
def healthy(cluster: Cluster) -> Iterator[Cluster]:
    """The shared cluster with every fault undone before and after the test."""
    cluster.heal()
    try:
        yield cluster
    finally:
        with contextlib.suppress(Exception):
            cluster.topology.heal()
        cluster.heal()


@contextlib.contextmanager
def own_cluster(
    tmp_path_factory: pytest.TempPathFactory, size: int, *options: str
) -> Iterator[LocalCluster]:
    """A cluster of its own beside the session's (started, stopped after), its work directory
    reaped by a later run if this one is killed."""
    workdir = tmp_path_factory.mktemp(f"{WORKDIR_MARKER}-{os.getpid()}-")
    cluster = LocalCluster(workdir, size, node_options=options)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
