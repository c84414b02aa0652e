"""Push subscriptions where a partition's dispatcher dies: under `--workers 2` (SIGKILL of a
worker mid-delivery) and on a three-node cluster with a real etcd (SIGKILL of the partition's
leader mid-delivery). Real processes, a real receiver on loopback; the checker
(tests/subscriptions/receiver.checked_batches) holds every attempt to the guarantees: every
record acknowledged or dead-lettered, none skipped, in offset order per partition, and
duplicates bounded by what was in flight (one batch per partition) and what was acknowledged
but not yet committed (commits are coalesced: at most UNCOMMITTED_WINDOWS more windows)."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine.offsets_topic import OFFSETS_TOPIC, partition_for
from gateway.workers.local_cluster import LocalCluster
from groups.subscriptions.state import UNCOMMITTED_WINDOWS
from tests.e2e.test_workers import start_supervisor
from tests.subscriptions.receiver import Attempt, Receiver, checked_batches, offsets_of, serve

pytestmark = pytest.mark.skipif(shutil.which("etcd") is None, reason="needs etcd (etcd-server)")

BATCH = 5  # records a request: the in-flight window of a partition
RECORDS = 300  # per partition
ALLOWED = ("--subscription-allowed-hosts", "127.0.0.1")
DEADLINE_S = 120.0
RETRIABLE = (421, 502, 503, 504)


def acked(receiver: Receiver, partition: int) -> int:
    """Distinct offsets of `partition` the receiver acknowledged."""
    found: set[int] = set()
    for attempt in receiver.acked():
        where, offsets = offsets_of(attempt)
        if where == partition:
            found.update(offsets)
    return len(found)


def settled(attempts: list[Attempt], produced: dict[int, int]) -> bool:
    """Every produced offset acknowledged, or refused (a poison record: dead-lettered)."""
    done: dict[int, set[int]] = {p: set() for p in produced}
    for attempt in attempts:
        partition, offsets = offsets_of(attempt)
        if 200 <= attempt.status < 300 or attempt.status == 400:
            done[partition].update(offsets)
    return all(done[p] >= set(range(n)) for p, n in produced.items())


async def until_settled(
    receiver: Receiver, http: httpx.AsyncClient, url: str, produced: dict[int, int]
) -> None:
    """Until every produced offset is settled at the receiver; past the deadline, fail with
    the subscription's own account of each partition (its state and last error: a delivery
    stopped on exhausted attempts says so there)."""
    try:
        await receiver.until(lambda a: settled(a, produced), timeout=DEADLINE_S)
    except TimeoutError:
        answer = await call(http, "GET", f"{url}/v1/subscriptions/s")
        raise AssertionError(f"not settled in {DEADLINE_S} s: {answer.text}") from None


async def call(http: httpx.AsyncClient, method: str, url: str, **kwargs: Any) -> httpx.Response:
    """One call, retried while the cluster moves leaders (503, 421...) until a deadline."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            answer = await http.request(method, url, **kwargs)
            if answer.status_code not in RETRIABLE:
                return answer
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, f"{method} {url} kept failing"
        await asyncio.sleep(0.1)  # a retry's back-off, not a synchronisation


async def produce(http: httpx.AsyncClient, url: str, topic: str, partitions: int) -> None:
    for partition in range(partitions):
        records = [{"key": f"k{partition}", "value": i} for i in range(RECORDS)]
        answer = await call(
            http, "POST", f"{url}/v1/topics/{topic}/partitions/{partition}/records?acks=all",
            json={"records": records},
        )  # fmt: skip
        assert answer.status_code == 200, answer.text


async def subscribe(
    http: httpx.AsyncClient, url: str, endpoint: str, **fields: Any
) -> tuple[str, int]:
    """Create the subscription; its signing secret and the node coordinating its group."""
    answer = await call(http, "POST", f"{url}/v1/subscriptions", json={
        "name": "s", "topic": "t", "endpoint": endpoint, "start": "earliest", "format": "json",
        "batching": {"max_records": BATCH, "max_wait_ms": 0},
        "retry": {"timeout_ms": 2000, "max_attempts": 3, "min_backoff_ms": 50,
                  "max_backoff_ms": 200},
        **fields,
    })  # fmt: skip
    assert answer.status_code == 201, answer.text
    doc = answer.json()
    offsets = (await call(http, "GET", f"{url}/v1/topics/{OFFSETS_TOPIC}")).json()["partitions"]
    coordinator = offsets[partition_for(doc["group"], len(offsets))]["leader"]
    return doc["signing_secret"], int(coordinator)


async def test_workers_deliver_every_partition_through_a_killed_worker(tmp_path: Path) -> None:
    receiver = Receiver()
    runner = await serve(receiver)
    supervisor = await asyncio.to_thread(start_supervisor, tmp_path / "data", *ALLOWED)
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            answer = await http.post(
                f"{supervisor.url}/v1/topics", json={"name": "t", "partitions": 2}
            )
            assert answer.status_code == 201, answer.text
            leaders = {p["partition"]: p["leader"] for p in answer.json()["partitions"]}
            assert set(leaders.values()) == {0, 1}, leaders  # each worker leads one
            secret, coordinator = await subscribe(http, supervisor.url, receiver.url)
            await produce(http, supervisor.url, "t", 2)
            # The worker coordinating the subscription's group dies: the other partition's
            # commits fail until it is back, and that partition must not run ahead of them.
            victim_partition = next(p for p, w in leaders.items() if w == coordinator)
            await receiver.until(lambda a: acked(receiver, victim_partition) >= RECORDS // 3)
            victim = await asyncio.to_thread(supervisor.worker_pid, coordinator)
            os.kill(victim, signal.SIGKILL)
            killed_at = len(receiver.attempts)
            await until_settled(receiver, http, supervisor.url, {0: RECORDS, 1: RECORDS})
            doc = await until_caught_up(http, supervisor.url)
        assert await asyncio.to_thread(supervisor.worker_pid, coordinator) != victim  # restarted
        twice = checked_batches(receiver.attempts, {0: RECORDS, 1: RECORDS}, {}, secret)
        assert killed_at < len(receiver.attempts)
        # What was in flight at the kill, and what was acknowledged but not yet committed.
        assert twice[victim_partition] <= (1 + UNCOMMITTED_WINDOWS) * BATCH, twice
        assert twice[1 - victim_partition] == 0, twice  # its worker never stopped
        assert doc["lag"] == 0 and doc["state"] == "running", doc
    finally:
        if supervisor.process.poll() is None:
            assert await asyncio.to_thread(supervisor.stop) == 0
        await runner.cleanup()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    nodes = LocalCluster(tmp_path, 3, node_options=["--lease-ttl", "2", *ALLOWED])
    nodes.start()
    try:
        yield nodes
    finally:
        nodes.stop()


def poisoned(message_id: str, poison: set[int]) -> bool:
    """Whether a batch's `topic/partition/first-last` id covers a poison offset."""
    first, _, last = message_id.rsplit("/", 1)[1].partition("-")
    return any(int(first) <= o <= int(last or first) for o in poison)


async def test_delivery_moves_with_the_leader_when_it_is_killed(cluster: LocalCluster) -> None:
    """A partition's leader dies mid-delivery: a new leader's dispatcher goes on from the
    committed position; records refused with 400 are dead-lettered on the way."""
    poison = {37, 38, 152}  # offsets the receiver refuses, in every partition
    receiver = Receiver(
        behaviour=lambda n, message_id: (400, {}) if poisoned(message_id, poison) else (204, {})
    )
    runner = await serve(receiver)
    urls = [node.url for node in cluster.nodes]
    produced = {0: RECORDS, 1: RECORDS, 2: RECORDS}
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            for name in ("t", "dlq"):
                doc = {"name": name, "partitions": 3, "replication_factor": 3}
                answer = await call(http, "POST", f"{urls[0]}/v1/topics", json=doc)
                assert answer.status_code == 201, answer.text
            await produce(http, urls[1], "t", 3)
            secret, leader = await subscribe(http, urls[2], receiver.url, dead_letter_topic="dlq")
            # The node coordinating the group dies too: the partition it leads (its victim)
            # moves, and the others' commits wait for the group's new coordinator.
            topic = (await call(http, "GET", f"{urls[0]}/v1/topics/t")).json()
            victim = next(p["partition"] for p in topic["partitions"] if p["leader"] == leader)
            await receiver.until(
                lambda a: acked(receiver, victim) >= RECORDS // 3, timeout=DEADLINE_S
            )
            await asyncio.to_thread(cluster.nodes[leader].kill)
            killed_at = len(receiver.attempts)
            alive = next(node.url for node in cluster.nodes if node.running)
            await until_settled(receiver, http, alive, produced)
            dead = await dead_lettered(http, alive, poison)
            doc = await until_caught_up(http, alive)
        twice = checked_batches(receiver.attempts, produced, dead, secret)
        assert killed_at < len(receiver.attempts)
        # What was in flight at the kill, and what was acknowledged but not yet committed.
        assert all(n <= (1 + UNCOMMITTED_WINDOWS) * BATCH for n in twice.values()), twice
        moved = (await asyncio.to_thread(httpx.get, f"{alive}/v1/topics/t")).json()
        assert next(p["leader"] for p in moved["partitions"] if p["partition"] == victim) != leader
        assert doc["lag"] == 0 and doc["state"] == "running", doc
    finally:
        await runner.cleanup()


async def dead_lettered(http: httpx.AsyncClient, url: str, poison: set[int]) -> dict[int, set[int]]:
    """The dead-letter topic's records by source partition, once every poison record of every
    partition is there (each batch holding one went whole)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        dead: dict[int, set[int]] = {}
        for partition in range(3):
            answer = await call(
                http, "GET", f"{url}/v1/topics/dlq/partitions/{partition}/records",
                params={"offset": 0, "max_records": 1000, "timeout_ms": 0},
            )  # fmt: skip
            assert answer.status_code == 200, answer.text
            for record in answer.json()["records"]:
                headers = record["headers"]
                assert headers["sluice-subscription"] == "s" and headers["sluice-topic"] == "t"
                assert headers["sluice-status"] == "400", headers
                dead.setdefault(int(headers["sluice-partition"]), set()).add(
                    int(headers["sluice-offset"])
                )
        if all(poison <= dead.get(p, set()) for p in range(3)):
            return dead
        assert time.monotonic() < deadline, f"dead-lettered so far: {dead}"
        await asyncio.sleep(0.1)


async def until_caught_up(http: httpx.AsyncClient, url: str) -> dict[str, Any]:
    """The subscription's description once every partition committed its end."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        answer = await call(http, "GET", f"{url}/v1/subscriptions/s")
        doc: dict[str, Any] = answer.json()
        rows = doc.get("partitions", [])
        if rows and all(r["committed_offset"] == RECORDS for r in rows):
            return doc
        assert time.monotonic() < deadline, str(doc.get("partitions", doc))
        await asyncio.sleep(0.1)
