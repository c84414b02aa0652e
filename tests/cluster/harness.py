"""A real cluster for the tests: one etcd and N `python -m gateway --cluster` node processes,
placed on the network by a `Topology`, with process faults (SIGKILL, SIGSTOP/SIGCONT, restart),
each node's run counted, and what the tests read: the nodes' HTTP answers, the partition states
in etcd (current and their whole history) and the replicas' logs straight from the data dirs."""

from __future__ import annotations

import base64
import contextlib
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx

from engine import batch as fmt
from engine.errors import InvalidRecord
from gateway.workers.local_cluster import ClusterError, EtcdServer, Node
from tests.cluster.netfaults import Topology

T = TypeVar("T")

LEASE_TTL_S = 2.0
REPLICA_LAG_TIME_MAX_MS = 2000
TRANSACTION_ABORT_INTERVAL_MS = 1000  # a timed-out transaction is aborted within a second
NODE_OPTIONS = (
    "--lease-ttl",
    str(LEASE_TTL_S),
    "--replica-lag-time-max-ms",
    str(REPLICA_LAG_TIME_MAX_MS),
    "--transaction-abort-interval-ms",
    str(TRANSACTION_ABORT_INTERVAL_MS),
    # One partition (replicated 3 ways) instead of 50: the groups topic is not under test here.
    "--offsets-topic-partitions",
    "1",
)
ETCD_PREFIX = "/sluice"
NO_LEADER = -1
SETTLE_S = 60.0  # bound of every wait for the cluster to settle (elections, rejoining the ISR)
POLL_S = 0.05


class WaitTimeout(AssertionError):
    """A condition polled for did not hold before its deadline."""


def wait_for(probe: Callable[[], T | None], timeout: float, what: str, poll_s: float = POLL_S) -> T:
    """Poll `probe` until it returns something other than None/False; fail after `timeout`."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = probe()
            if value is not None and value is not False:
                return value
        except (httpx.HTTPError, OSError, ValueError, KeyError) as exc:
            last_error = exc
        if time.monotonic() >= deadline:
            suffix = f" (last error: {last_error!r})" if last_error else ""
            raise WaitTimeout(f"timed out after {timeout:.0f} s waiting for {what}{suffix}")
        time.sleep(poll_s)


@dataclass(frozen=True)
class PartitionState:
    """A partition's record in etcd, with the revision that wrote it."""

    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    revision: int
    adding: tuple[int, ...] = ()  # a reassignment in progress (KIP-455)
    removing: tuple[int, ...] = ()
    elr: tuple[int, ...] = ()  # eligible leader replicas (KIP-966)

    @classmethod
    def parse(cls, value: bytes, revision: int) -> PartitionState:
        doc = json.loads(value)
        return cls(
            int(doc["leader"]),
            int(doc["leader_epoch"]),
            tuple(doc["replicas"]),
            tuple(doc["isr"]),
            revision,
            tuple(doc.get("adding", ())),
            tuple(doc.get("removing", ())),
            tuple(doc.get("elr", ())),
        )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _prefix_end(prefix: bytes) -> bytes:
    return prefix[:-1] + bytes([prefix[-1] + 1])


class Etcd:
    """What the tests read from etcd: current keys, and a prefix's every change (a watch from
    a past revision replays them all; nothing is compacted during a run)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.http = httpx.Client(timeout=10.0)

    def close(self) -> None:
        self.http.close()

    def range(self, prefix: bytes) -> tuple[list[dict[str, Any]], int]:
        doc = self.http.post(
            f"{self.url}/v3/kv/range",
            json={"key": _b64(prefix), "range_end": _b64(_prefix_end(prefix))},
        ).json()
        return doc.get("kvs", []), int(doc["header"]["revision"])

    def revision(self) -> int:
        return self.range(b"\0")[1]

    def controller_key_is_current(self) -> bool:
        """Whether the controller's election key (the lowest create revision) has the lease of
        that node's live key, i.e. was made by the node's current run."""
        keys, _ = self.range(f"{ETCD_PREFIX}/controller/".encode())
        if not keys:
            return False
        first = min(keys, key=lambda kv: int(kv["create_revision"]))
        node = base64.b64decode(first["value"]).decode()
        live = self.get(f"{ETCD_PREFIX}/live/{node}".encode())
        return live is not None and live.get("lease") == first.get("lease")

    def get(self, key: bytes) -> dict[str, Any] | None:
        doc = self.http.post(f"{self.url}/v3/kv/range", json={"key": _b64(key)}).json()
        kvs: list[dict[str, Any]] = doc.get("kvs", [])
        return kvs[0] if kvs else None

    def partition(self, topic: str, partition: int) -> PartitionState | None:
        kv = self.get(f"{ETCD_PREFIX}/partitions/{topic}/{partition}".encode())
        if kv is None:
            return None
        return PartitionState.parse(base64.b64decode(kv["value"]), int(kv["mod_revision"]))

    def history(
        self, prefix: bytes, start_revision: int, timeout: float = 30.0
    ) -> list[tuple[bytes, bytes | None, int]]:
        """Every change under `prefix` from `start_revision` to now: (key, value or None for a
        delete, revision), in order."""
        kvs, _ = self.range(prefix)
        target = max((int(kv["mod_revision"]) for kv in kvs), default=0)
        if target < start_revision:
            return []
        request = {
            "create_request": {
                "key": _b64(prefix),
                "range_end": _b64(_prefix_end(prefix)),
                "start_revision": start_revision,
            }
        }
        changes: list[tuple[bytes, bytes | None, int]] = []
        seen = 0
        with self.http.stream(
            "POST", f"{self.url}/v3/watch", json=request, timeout=timeout
        ) as response:
            for line in response.iter_lines():
                if not line.strip():
                    continue
                result = json.loads(line).get("result", {})
                for event in result.get("events", []):
                    kv = event["kv"]
                    revision = int(kv["mod_revision"])
                    value = None if event.get("type") == "DELETE" else base64.b64decode(kv["value"])
                    changes.append((base64.b64decode(kv["key"]), value, revision))
                    seen = max(seen, revision)
                if seen >= target:
                    return changes
        raise WaitTimeout(f"the etcd watch ended before revision {target}")


@dataclass(frozen=True)
class LogRecord:
    """One record of a replica's log as stored on disk."""

    offset: int
    epoch: int  # the batch's partition leader epoch
    key: bytes | None
    value: bytes | None
    idempotency: bytes | None  # the sluice-idempotency-key header, if any
    control: bool = False  # a transaction's COMMIT or ABORT marker


def read_replica_log(data_dir: Path, topic: str, partition: int) -> list[LogRecord]:
    """The records in a replica's segment files, in file order, up to the first torn or invalid
    batch (a running node may be writing the tail). Independent of the engine's reader: the
    files are plain RecordBatch v2, decoded with engine.batch."""
    directory = data_dir / f"{topic}-{partition}"
    records: list[LogRecord] = []
    if not directory.is_dir():
        return records
    for path in sorted(directory.glob("*.log")):
        try:
            data = path.read_bytes()
        except FileNotFoundError:  # removed by a truncation meanwhile
            continue
        scan = fmt.scan(data, check_crc=True)
        for pos, header in scan.headers:
            try:
                for rec in fmt.iter_records(memoryview(data)[pos : pos + header.size]):
                    marker = dict(rec.headers).get(fmt.IDEMPOTENCY_HEADER)
                    records.append(
                        LogRecord(
                            rec.offset,
                            header.partition_leader_epoch,
                            rec.key,
                            rec.value,
                            marker,
                            header.is_control,
                        )
                    )
            except InvalidRecord:
                break
        if scan.error is not None:
            break
    return records


class Cluster:
    """etcd plus `size` nodes over `topology`; node i's data dir and address survive restarts."""

    def __init__(
        self,
        workdir: Path,
        topology: Topology,
        size: int = 3,
        node_options: tuple[str, ...] = NODE_OPTIONS,
    ) -> None:
        self.workdir = workdir
        self.topology = topology
        self.size = size
        self.etcd_server = EtcdServer(workdir, listen_hosts=topology.etcd_listen_hosts())
        self.etcd = Etcd(self.etcd_server.url)
        self.node_options = node_options
        self.nodes: list[Node] = []
        self.runs = [0] * size  # how many times each node was started
        self.paused: set[int] = set()
        self.http = httpx.Client(timeout=httpx.Timeout(10.0, connect=3.0))
        topology.set_pids(self.pids)

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        try:
            self.topology.setup(self.etcd_server.client_port)
            self.etcd_server.start()
            for i in range(self.size):
                spec = self.topology.node_spec(i)
                self.nodes.append(
                    Node(
                        i,
                        self.workdir / f"node-{i}",
                        spec.etcd,
                        spec.port,
                        self.node_options,
                        spec.host,
                        wrapper=spec.wrapper,
                        advertise=spec.advertise,
                    )
                )
            for i in range(self.size):
                self.restart(i)
            self.wait_ready()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop everything this cluster started, whatever state it is in."""
        for node in self.nodes:
            with contextlib.suppress(Exception):
                node.resume()
        for node in self.nodes:
            try:
                node.stop(timeout=10.0)
            except Exception:
                with contextlib.suppress(Exception):
                    node.kill()
        self.paused.clear()
        with contextlib.suppress(Exception):
            self.etcd_server.stop()
        self.topology.close()
        self.etcd.close()
        self.http.close()

    def pids(self) -> dict[int, int]:
        return {n.process.pid: n.node_id for n in self.nodes if n.process is not None}

    def leftover_processes(self) -> list[int]:
        procs = [n.process for n in self.nodes] + [self.etcd_server.process]
        return [p.pid for p in procs if p is not None and p.poll() is None]

    # -- process faults ----------------------------------------------------------------------------

    def running(self, i: int) -> bool:
        return self.nodes[i].running

    def up(self, i: int) -> bool:
        """Running and not paused: it answers."""
        return self.nodes[i].running and i not in self.paused

    def kill(self, i: int) -> None:
        self.nodes[i].kill()
        self.paused.discard(i)

    def restart(self, i: int) -> None:
        """Start node i (again); its run number goes up."""
        if self.nodes[i].running:
            raise ClusterError(f"node {i} is running")
        self.runs[i] += 1
        self.nodes[i].start()

    def pause(self, i: int) -> None:
        self.nodes[i].pause()
        self.paused.add(i)

    def resume(self, i: int) -> None:
        self.nodes[i].resume()
        self.paused.discard(i)

    def heal(self, timeout: float = SETTLE_S) -> None:
        """Undo every fault: links healed, paused nodes resumed, dead nodes restarted."""
        self.topology.heal()
        for i in sorted(self.paused):
            self.resume(i)
        for i in range(self.size):
            if not self.running(i):
                self.restart(i)
        self.wait_ready(timeout)

    # -- HTTP --------------------------------------------------------------------------------------

    def url(self, i: int) -> str:
        return self.topology.client_url(i)

    def get(self, i: int, path: str, **kwargs: Any) -> httpx.Response:
        return self.http.get(self.url(i) + path, **kwargs)

    def post(self, i: int, path: str, **kwargs: Any) -> httpx.Response:
        return self.http.post(self.url(i) + path, **kwargs)

    def view(self, i: int) -> dict[str, Any]:
        doc: dict[str, Any] = self.get(i, "/v1/cluster", timeout=2.0).json()
        return doc

    def describe(self, i: int, topic: str) -> dict[str, Any]:
        response = self.get(i, f"/v1/topics/{topic}", timeout=2.0)
        response.raise_for_status()
        doc: dict[str, Any] = response.json()
        return doc

    def controller(self) -> int | None:
        """The controller every answering node agrees on, if they agree."""
        views = {self.view(i)["controller"] for i in range(self.size) if self.up(i)}
        return views.pop() if len(views) == 1 else None

    def wait_ready(self, timeout: float = SETTLE_S) -> None:
        """Every node that is up sees exactly the nodes that are up alive, and one controller,
        whose election key is held by its current run (a node restarted within its old lease
        is shown as controller by its previous run's key until that lease runs out)."""

        def ready() -> bool:
            expected = {i for i in range(self.size) if self.up(i)}
            controllers = set()
            for i in expected:
                view = self.view(i)
                if {n["node_id"] for n in view["nodes"] if n["alive"]} != expected:
                    return False
                controllers.add(view["controller"])
            return (
                len(controllers) == 1
                and controllers.pop() in expected
                and self.etcd.controller_key_is_current()
            )

        wait_for(ready, timeout, "every node to see the same live nodes and controller")

    def create_topic(
        self,
        name: str,
        partitions: int,
        *,
        via: int = 0,
        replication_factor: int = 3,
        min_insync: int = 2,
    ) -> dict[str, Any]:
        response = self.post(
            via,
            "/v1/topics",
            json={
                "name": name,
                "partitions": partitions,
                "replication_factor": replication_factor,
                "configs": {"min.insync.replicas": min_insync},
            },
        )
        assert response.status_code == 201, response.text
        doc: dict[str, Any] = response.json()
        return doc

    def wait_topic_everywhere(self, topic: str, timeout: float = SETTLE_S) -> None:
        """Every node that is up knows the topic and a leader for each of its partitions."""

        def known() -> bool:
            for i in range(self.size):
                if not self.up(i):
                    continue
                response = self.get(i, f"/v1/topics/{topic}", timeout=2.0)
                if response.status_code != 200:
                    return False
                if any(row["leader"] is None for row in response.json()["partitions"]):
                    return False
            return True

        wait_for(known, timeout, f"every node to know topic {topic} and its leaders")

    def states(self, topic: str, partitions: int) -> list[PartitionState]:
        states = []
        for p in range(partitions):
            state = self.etcd.partition(topic, p)
            assert state is not None, f"{topic}-{p} has no state in etcd"
            states.append(state)
        return states

    def in_sync(self, topic: str, partitions: int) -> list[dict[str, Any]] | None:
        """Per partition, every replica's local row, if every partition has a live leader, its
        stored ISR holds every replica, and every replica has the same log end and high
        watermark (nothing in flight); else None."""
        rows: list[dict[str, Any]] = []
        for p, state in enumerate(self.states(topic, partitions)):
            if state.leader == NO_LEADER or set(state.isr) != set(state.replicas):
                return None
            local = {}
            for r in state.replicas:
                if not self.up(r):
                    return None
                row = self.describe(r, topic)["partitions"][p]
                local[r] = (row["log_end_offset"], row["high_watermark"])
            ends = set(local.values())
            if len(ends) != 1:
                return None
            end, hw = ends.pop()
            if end != hw:
                return None
            rows.append({"partition": p, "state": state, "end": end})
        return rows

    def wait_in_sync(
        self, topic: str, partitions: int, timeout: float = SETTLE_S
    ) -> list[dict[str, Any]]:
        return wait_for(
            lambda: self.in_sync(topic, partitions),
            timeout,
            f"{topic}: full ISRs and equal log ends everywhere",
        )

    def wait_state(
        self,
        topic: str,
        partition: int,
        predicate: Callable[[PartitionState], bool],
        what: str,
        timeout: float = SETTLE_S,
    ) -> PartitionState:
        def probe() -> PartitionState | None:
            state = self.etcd.partition(topic, partition)
            return state if state is not None and predicate(state) else None

        return wait_for(probe, timeout, f"{topic}-{partition}: {what}")

    def replica_log(self, i: int, topic: str, partition: int) -> list[LogRecord]:
        return read_replica_log(self.nodes[i].data_dir, topic, partition)

    def logs(self, topic: str, partition: int) -> Iterator[tuple[int, list[LogRecord]]]:
        for i in range(self.size):
            yield i, self.replica_log(i, topic, partition)
