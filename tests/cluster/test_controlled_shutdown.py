"""Controlled shutdown on the real cluster: a node stopped with SIGTERM has its leaderships
moved to other in-sync replicas, in a higher epoch, and is out of every ISR before its lease
goes (checked in etcd's history); a controller hands over its role too; the only in-sync
replica of its partitions still stops within the bound; a rolling restart of every node under
acks=all produce and long-poll consumption costs the clients no failed request and no
acknowledged record.

Every wait polls a condition against a deadline; nothing asserts on timing."""

from __future__ import annotations

import base64
import functools
import json
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from loadtests.rolling_restart import Load
from tests.cluster.harness import (
    ETCD_PREFIX,
    NO_LEADER,
    SETTLE_S,
    Cluster,
    PartitionState,
    wait_for,
)
from tests.cluster.test_cluster import new_topic

CONTROLLED_SHUTDOWN_S = 10.0  # the nodes' default --controlled-shutdown-timeout
DRAIN_S = 10.0  # the server's shutdown timeout for requests in flight
EXIT_BOUND_S = CONTROLLED_SHUTDOWN_S + DRAIN_S + 10.0
STUCK_REPORT_CHARS = 20_000


def terminate(cluster: Cluster, i: int) -> None:
    """SIGTERM node i; it must exit (cleanly) within the bound."""
    node = cluster.nodes[i]
    assert node.process is not None
    node.process.terminate()
    try:
        status = node.process.wait(EXIT_BOUND_S)
    except subprocess.TimeoutExpired:
        node.kill()
        said = log_of(cluster, i)[-STUCK_REPORT_CHARS:]  # its stop watchdog's report, if any
        raise AssertionError(
            f"node {i} did not exit within {EXIT_BOUND_S:.0f} s; its log ends:\n{said}"
        ) from None
    node.process = None
    assert status == 0, f"node {i} exited with status {status}"


def log_of(cluster: Cluster, i: int) -> str:
    return (cluster.workdir / f"node-{i}.log").read_text()


@dataclass
class BeforeTheLease:
    """What etcd held just before node `node`'s lease went (folded from its history)."""

    revision: int  # the revision that deleted live/<node>
    initial: dict[bytes, PartitionState]  # every partition's state when the test began
    states: dict[bytes, PartitionState]  # ... and just before `revision`
    election: dict[bytes, tuple[int, int]]  # election key -> (create revision, node)
    marked_at: int | None  # the revision of the node's shutting_down mark


def stop_and_read_history(cluster: Cluster, node: int) -> BeforeTheLease:
    """SIGTERM `node` and start it again; etcd's history from before the signal to the
    node's lease going, folded."""
    etcd = cluster.etcd
    start = etcd.revision() + 1
    partitions = f"{ETCD_PREFIX}/partitions/".encode()
    kvs, _ = etcd.range(partitions)
    initial = {
        base64.b64decode(kv["key"]): PartitionState.parse(
            base64.b64decode(kv["value"]), int(kv["mod_revision"])
        )
        for kv in kvs
    }
    election_prefix = f"{ETCD_PREFIX}/controller/".encode()
    keys, _ = etcd.range(election_prefix)
    election = {
        base64.b64decode(kv["key"]): (
            int(kv["create_revision"]),
            int(base64.b64decode(kv["value"])),
        )
        for kv in keys
    }
    terminate(cluster, node)
    cluster.restart(node)  # its registration writes past the lease's end: the history has it
    cluster.wait_ready()
    changes = etcd.history(f"{ETCD_PREFIX}/".encode(), start)
    live = f"{ETCD_PREFIX}/live/{node}".encode()
    mark = f"{ETCD_PREFIX}/shutting_down/{node}".encode()
    gone = next(rev for key, value, rev in changes if key == live and value is None)
    states = dict(initial)
    marked_at = None
    for key, value, rev in changes:
        if rev >= gone:
            break
        if key.startswith(partitions) and value is not None:
            states[key] = PartitionState.parse(value, rev)
        elif key.startswith(election_prefix):
            if value is None:
                election.pop(key, None)
            else:
                election[key] = (rev, int(value))
        elif key == mark and value is not None:
            marked_at = rev
    return BeforeTheLease(gone, initial, states, election, marked_at)


def check_handed_over(seen: BeforeTheLease, node: int, topic: str) -> None:
    """Every partition `node` led has another leader in a higher epoch and it is in no ISR,
    but where it was the only in-sync replica; the test's topic held nothing of that kind."""
    assert seen.marked_at is not None and seen.marked_at < seen.revision
    led = [key for key, state in seen.initial.items() if state.leader == node]
    assert any(f"/partitions/{topic}/".encode() in key for key in led), "it led none"
    for key, state in seen.initial.items():
        if node not in state.isr:
            continue
        now = seen.states[key]
        if now.isr == (node,):  # it was the only in-sync replica: it keeps it
            assert state.isr == (node,) and f"/{topic}/".encode() not in key, (key, now)
            continue
        assert node not in now.isr, (key, state, now)
        assert now.leader not in (node, NO_LEADER), (key, state, now)
        assert now.leader_epoch > state.leader_epoch, (key, state, now)


def leads(cluster: Cluster, topic: str, partitions: int) -> dict[int, int]:
    """Node -> how many of the topic's partitions it leads (in etcd)."""
    counts = {i: 0 for i in range(cluster.size)}
    for state in cluster.states(topic, partitions):
        counts[state.leader] = counts.get(state.leader, 0) + 1
    return counts


def acked_past(load: Load, count: int) -> bool:
    return load.progress() >= count


def create(cluster: Cluster, topic: str, partitions: int, min_insync: int = 2) -> None:
    cluster.create_topic(topic, partitions, min_insync=min_insync)
    cluster.wait_topic_everywhere(topic)
    cluster.wait_in_sync(topic, partitions)


def test_sigterm_moves_a_nodes_leaderships_and_isr_places_before_its_lease_goes(
    healthy: Cluster,
) -> None:
    topic = new_topic("cs-moved")
    create(healthy, topic, 6)
    controller = healthy.controller()
    counts = leads(healthy, topic, 6)
    node = max((i for i in counts if i != controller), key=counts.__getitem__)
    assert counts[node] > 0
    seen = stop_and_read_history(healthy, node)
    check_handed_over(seen, node, topic)
    # Its election key (it was no controller) went first, with the mark before the lease.
    mine = [key for key, (_, owner) in seen.election.items() if owner == node]
    assert not mine, mine
    said = log_of(healthy, node)
    handed = re.findall(rf"node {node} handed over (\d+) of the (\d+) leaderships", said)
    assert handed and int(handed[-1][0]) >= counts[node], said[-3000:]
    assert "controlled shutdown timed out" not in said


def test_a_controller_hands_over_its_partitions_and_its_role_before_its_lease_goes(
    healthy: Cluster,
) -> None:
    topic = new_topic("cs-controller")
    create(healthy, topic, 6)
    controller = healthy.controller()
    assert controller is not None
    seen = stop_and_read_history(healthy, controller)
    check_handed_over(seen, controller, topic)
    assert seen.election, "no election key was left before the controller's lease went"
    first = min(seen.election.values())
    assert first[1] != controller, f"node {controller} was still the controller: {seen.election}"
    assert healthy.controller() not in (None, controller)
    # The new controller works: a topic through the node that stopped.
    other = new_topic("cs-after")
    healthy.create_topic(other, 3, via=controller)
    healthy.wait_topic_everywhere(other)


def test_the_only_in_sync_replica_stops_within_the_bound_keeping_its_partitions(
    healthy: Cluster,
) -> None:
    topic = new_topic("cs-alone")
    create(healthy, topic, 3, min_insync=1)
    last = 0
    for i in (1, 2):
        healthy.kill(i)
    for p in range(3):
        healthy.wait_state(
            topic,
            p,
            lambda s: s.leader == last and s.isr == (last,),
            f"node {last} alone in the ISR",
        )
    before = len(log_of(healthy, last))
    terminate(healthy, last)
    said = log_of(healthy, last)[before:]
    assert f"node {last} keeps leading" in said, said[-3000:]
    assert "controlled shutdown timed out" not in said
    for p in range(3):
        state = healthy.etcd.partition(topic, p)
        assert state is not None and (state.leader, state.isr) == (last, (last,))


def parked_fetches(cluster: Cluster, i: int) -> float:
    text = cluster.get(i, "/metrics", timeout=2.0).text
    match = re.search(r"^sluice_parked_fetches (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def test_a_long_poll_a_stopping_node_forwarded_is_answered_not_cut_off(
    healthy: Cluster,
) -> None:
    """A long-poll through a node that does not lead the partition waits at the leader; when
    the node it came through stops, it is answered 421 with the leader (the client asks there
    again), long before its timeout, and the node exits."""
    topic = new_topic("cs-poll")
    create(healthy, topic, 3)
    state = healthy.states(topic, 3)[0]
    through = next(i for i in range(healthy.size) if i != state.leader)
    before = parked_fetches(healthy, state.leader)
    with ThreadPoolExecutor(1) as pool:
        poll = pool.submit(
            healthy.get,
            through,
            f"/v1/topics/{topic}/partitions/0/records?offset=0&timeout_ms=120000",
            timeout=150.0,
        )
        wait_for(
            lambda: parked_fetches(healthy, state.leader) > before,
            SETTLE_S,
            "the long-poll to park at the leader",
        )
        terminate(healthy, through)
        answer = poll.result(SETTLE_S)
    assert answer.status_code == 421, answer.text
    assert answer.json()["code"] == "NOT_LEADER_OR_FOLLOWER"
    assert answer.json()["leader"] == state.leader


def test_a_rolling_restart_under_load_fails_no_request_and_loses_no_record(
    healthy: Cluster,
) -> None:
    topic = new_topic("cs-rolling")
    partitions = 6
    create(healthy, topic, partitions)
    load = Load([healthy.url(i) for i in range(healthy.size)], topic, partitions, producers=3)
    load.start()
    try:
        wait_for(lambda: load.progress() >= 20, SETTLE_S, "records acknowledged")
        for node in range(healthy.size):
            terminate(healthy, node)
            healthy.restart(node)
            healthy.wait_ready()
            wait_for(
                lambda: all(
                    s.leader != NO_LEADER and set(s.isr) == set(s.replicas)
                    for s in healthy.states(topic, partitions)
                ),
                SETTLE_S,
                f"node {node} back in every ISR of {topic}",
            )
            wait_for(functools.partial(acked_past, load, load.progress() + 20), SETTLE_S, "load")
    finally:
        results = load.stop()
    summary = json.dumps(results.summary(), indent=1)
    assert results.failed == 0, summary
    assert results.produce.ok > 0 and results.fetch.ok > 0, summary
    assert not results.lost(), summary
    assert results.duplicates() == 0, summary
    print(f"rolling restart: {summary}")
