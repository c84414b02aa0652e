"""A rolling restart under load: `python -m loadtests.rolling_restart`.

A fresh 3-node cluster (etcd and three `sluice serve --cluster` processes on this machine, as
`sluice dev-cluster` runs them) and one topic (replication factor 3, min.insync.replicas 2).
Producers send one-record acks=all requests with an Idempotency-Key; long-poll consumers
follow every partition. Meanwhile each node in turn is stopped with SIGTERM, started again,
and given time to rejoin every ISR before the next one goes. Reported, per shutdown mode
(`controlled`: the nodes' default controlled shutdown; `immediate`: without it,
--controlled-shutdown-timeout 0, the lease's end moving the leaderships):

- failed requests: answers other than 2xx, 503 and 421, and requests given up (a client
  retries 503 and 421 after 100 ms, Kafka's retry.backoff.ms, instead of Retry-After's 1 s; it
  goes to the next node when a connection is refused or closed before an answer: safe for a
  read, and for a produce with an Idempotency-Key); the retries by cause;
- acknowledged records lost (not read back at their offset), duplicates;
- leaderless time per partition (p50, p99, max), from the nodes' logs: a partition is led
  from a node's "leader in epoch" line until its next role line for it or its "draining"
  line (it stops taking connections), and leaderless where no node leads it;
- each node's shutdown seconds (SIGTERM to exit).

The client (`Load`) speaks HTTP only; the cluster tests drive it too.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import functools
import os
import platform
import re
import tempfile
import threading
import time
import urllib.error
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from gateway.workers.local_cluster import LocalCluster
from loadtests.common import http_json, progress
from loadtests.failover import nearest_rank

TOPIC = "rolling"
RETRY_STATUSES = frozenset({421, 503})
BACKOFF_S = 0.1  # Kafka's retry.backoff.ms
REQUEST_DEADLINE_S = 30.0  # a logical request retried this long is given up (failed)
ATTEMPT_TIMEOUT_S = 40.0  # one attempt's answer (a produce waits up to PRODUCE_TIMEOUT_MS)
PRODUCE_TIMEOUT_MS = 10_000
POLL_MS = 2_000  # the consumers' long-poll
SETTLE_S = 120.0
POLL_S = 0.1
SHOWN_FAILURES = 10


@dataclass
class Tally:
    """One kind of request: logical requests, those answered 2xx, those failed (by cause) and
    the retries made on the way (by cause)."""

    requests: int = 0
    ok: int = 0
    failed: Counter[str] = field(default_factory=Counter)
    retries: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    def fail(self, cause: str, detail: str) -> None:
        self.failed[cause] += 1
        if len(self.examples) < SHOWN_FAILURES:
            self.examples.append(f"{time.strftime('%H:%M:%S')} {cause}: {detail[:300]}")

    def summary(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "ok": self.ok,
            "failed": sum(self.failed.values()),
            "failed_by_cause": dict(self.failed),
            "retries": dict(self.retries),
            "failures": self.examples,
        }


@dataclass
class Results:
    """What the load saw: each kind's tally, the acknowledged records and those read back."""

    produce: Tally
    fetch: Tally
    acked: dict[tuple[int, int], str]  # (partition, offset) -> value
    consumed: dict[tuple[int, int], str]

    @property
    def failed(self) -> int:
        return sum(self.produce.failed.values()) + sum(self.fetch.failed.values())

    def lost(self) -> list[tuple[int, int]]:
        """Acknowledged records not read back at their offset with their value."""
        return sorted(k for k, v in self.acked.items() if self.consumed.get(k) != v)

    def duplicates(self) -> int:
        """Values read back at more than one offset (a retry appended twice)."""
        counts = Counter(self.consumed.values())
        return sum(n - 1 for n in counts.values() if n > 1)

    def summary(self) -> dict[str, Any]:
        lost = self.lost()
        return {
            "produce": self.produce.summary(),
            "fetch": self.fetch.summary(),
            "acknowledged": len(self.acked),
            "lost": len(lost),
            "lost_examples": lost[:SHOWN_FAILURES],
            "duplicates": self.duplicates(),
        }


class Client:
    """A worker's requests: it starts at one node and stays with the last that answered."""

    def __init__(self, session: aiohttp.ClientSession, urls: Sequence[str], first: int) -> None:
        self.session = session
        self.urls = urls
        self.node = first

    async def call(
        self,
        tally: Tally,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> bytes | None:
        """One logical request: its 2xx answer's body, or None once it failed (counted)."""
        tally.requests += 1
        try:
            return await self._attempts(tally, method, path, body, headers)
        except asyncio.CancelledError:
            tally.requests -= 1  # the load stopped: not a request that failed
            raise

    async def _attempts(
        self,
        tally: Tally,
        method: str,
        path: str,
        body: bytes | None,
        headers: dict[str, str] | None,
    ) -> bytes | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + REQUEST_DEADLINE_S
        detail = ""
        while True:
            url = self.urls[self.node % len(self.urls)]
            try:
                async with self.session.request(
                    method, url + path, data=body, headers=headers
                ) as answer:
                    data = await answer.read()
                    status, retry_after = answer.status, "Retry-After" in answer.headers
            except aiohttp.ClientConnectorError:
                cause, status = "refused", 0  # the node is down: surely never sent
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
                cause, status = "dropped", 0  # closed before an answer: safe to send again
                detail = repr(exc)
            except (TimeoutError, aiohttp.ClientPayloadError) as exc:
                tally.fail(type(exc).__name__, f"{method} {url}{path}")
                return None
            else:
                if 200 <= status < 300:
                    tally.ok += 1
                    return data
                code = _code(data)
                cause, detail = f"{status} {code}", data.decode(errors="replace")
                if status not in RETRY_STATUSES and not retry_after:
                    tally.fail(cause, f"{method} {url}{path}: {detail}")
                    return None
            tally.retries[cause] += 1
            if loop.time() > deadline:
                tally.fail(f"gave up after {cause}", f"{method} {path}")
                return None
            if status == 0 or status == 421:
                self.node += 1  # another node: this one is gone, or disagrees for a moment
            if status:
                await asyncio.sleep(BACKOFF_S)


def _code(body: bytes) -> str:
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        return str(orjson.loads(body).get("code", ""))
    return ""


class Load:
    """Producers and long-poll consumers over `urls`, in a thread of their own, until stop()."""

    def __init__(
        self, urls: Sequence[str], topic: str, partitions: int, producers: int = 4
    ) -> None:
        self.urls = list(urls)
        self.topic = topic
        self.partitions = partitions
        self.producers = producers
        self.results = Results(Tally(), Tally(), {}, {})
        self._offsets = [0] * partitions
        self._stopping: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rolling-load", daemon=True)
        self._error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()
        self._started.wait()

    def progress(self) -> int:
        """Records acknowledged so far."""
        return len(self.results.acked)

    def stop(self) -> Results:
        """Stop the clients, read every partition to its end, and return what was seen."""
        if self._loop is not None and self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self.results

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # handed to stop()
            self._error = exc
        finally:
            self._started.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        timeout = aiohttp.ClientTimeout(total=ATTEMPT_TIMEOUT_S)
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            producers = [
                asyncio.create_task(self._produce(Client(session, self.urls, w), w))
                for w in range(self.producers)
            ]
            consumers = [
                asyncio.create_task(self._consume(Client(session, self.urls, p), p))
                for p in range(self.partitions)
            ]
            self._started.set()
            await self._stopping.wait()
            await asyncio.gather(*producers)  # each ends after its request in flight
            for task in consumers:
                task.cancel()
            await asyncio.gather(*consumers, return_exceptions=True)
            await self._read_to_end(Client(session, self.urls, 0))

    async def _produce(self, client: Client, worker: int) -> None:
        n = 0
        assert self._stopping is not None
        while not self._stopping.is_set():
            partition = (worker + n * self.producers) % self.partitions
            value = f"w{worker}-{n}"
            body = orjson.dumps({"records": [{"value": value}]})
            path = (
                f"/v1/topics/{self.topic}/partitions/{partition}/records"
                f"?acks=all&timeout_ms={PRODUCE_TIMEOUT_MS}"
            )
            headers = {"Content-Type": "application/json", "Idempotency-Key": f"rr-{value}"}
            answer = await client.call(self.results.produce, "POST", path, body, headers)
            if answer is not None:
                base = orjson.loads(answer)["results"][0]["base_offset"]
                self.results.acked[(partition, base)] = value
            n += 1

    async def _consume(self, client: Client, partition: int) -> None:
        while True:
            await self._fetch(client, partition, POLL_MS)

    async def _fetch(self, client: Client, partition: int, wait_ms: int) -> int:
        """One fetch from where the partition's consumer is; the records it brought."""
        path = (
            f"/v1/topics/{self.topic}/partitions/{partition}/records"
            f"?offset={self._offsets[partition]}&timeout_ms={wait_ms}&max_records=1000"
        )
        answer = await client.call(
            self.results.fetch, "GET", path, headers={"Accept": "application/json"}
        )
        if answer is None:
            await asyncio.sleep(BACKOFF_S)
            return 0
        doc = orjson.loads(answer)
        for record in doc["records"]:
            self.results.consumed[(partition, record["offset"])] = record["value"]
        self._offsets[partition] = doc["next_offset"]
        return len(doc["records"])

    async def _read_to_end(self, client: Client) -> None:
        """Every partition read from its consumer's position until a read brings nothing."""
        for partition in range(self.partitions):
            while await self._fetch(client, partition, 0):
                pass


# -- leaderless time, from the nodes' logs -------------------------------------------------------

_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")
_DRAINING = " draining: "


def _when(line: str) -> float | None:
    match = _STAMP.match(line)
    if match is None:
        return None
    moment = datetime.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f")
    return moment.timestamp()  # the nodes log local time, as this process reads it


def leadership_events(
    logs: Iterable[tuple[int, Iterable[str]]], topic: str
) -> list[tuple[float, int, int | None, bool]]:
    """(time, node, partition or None for all, leads) from the nodes' log lines: a role line
    for a partition of `topic`, or a node's "draining" line (it leads nothing from then)."""
    role = re.compile(
        rf" {re.escape(topic)}-(\d+): (leader|follower of node \d+|no leader) in epoch \d+"
    )
    events: list[tuple[float, int, int | None, bool]] = []
    for node, lines in logs:
        for line in lines:
            moment = _when(line)
            if moment is None:
                continue
            if _DRAINING in line:
                events.append((moment, node, None, False))
                continue
            match = role.search(line)
            if match is not None:
                events.append((moment, node, int(match.group(1)), match.group(2) == "leader"))
    return sorted(events, key=lambda e: e[0])


def leaderless_gaps(
    events: Sequence[tuple[float, int, int | None, bool]],
    leaders: dict[int, int],
    start: float,
    end: float,
) -> dict[int, list[float]]:
    """Per partition, the seconds of each stretch within [start, end] that no node led it;
    `leaders`: each partition's leader at `start`."""
    leading: dict[int, set[int]] = {p: {node} for p, node in leaders.items()}
    since: dict[int, float] = {}
    gaps: dict[int, list[float]] = {p: [] for p in leaders}
    for moment, node, partition, leads in events:
        if not start <= moment <= end:
            continue
        for p in leaders if partition is None else (partition,):
            if p not in leading:
                continue
            before = bool(leading[p])
            (leading[p].add if leads else leading[p].discard)(node)
            if before and not leading[p]:
                since[p] = moment
            elif not before and leading[p]:
                gaps[p].append(moment - since.pop(p))
    for p, moment in since.items():
        gaps[p].append(end - moment)
    return gaps


def gap_summary(gaps: dict[int, list[float]]) -> dict[str, Any]:
    """Milliseconds: over every leaderless stretch, and over each partition's total."""
    stretches = [g * 1000 for each in gaps.values() for g in each]
    totals = [sum(each) * 1000 for each in gaps.values()]

    def spread(values: list[float]) -> dict[str, float]:
        if not values:
            return {"p50": 0.0, "p99": 0.0, "max": 0.0}
        return {
            "p50": round(nearest_rank(values, 0.5), 1),
            "p99": round(nearest_rank(values, 0.99), 1),
            "max": round(max(values), 1),
        }

    return {
        "stretches": len(stretches),
        "stretch_ms": spread(stretches),
        "per_partition_total_ms": spread(totals),
    }


# -- the benchmark -------------------------------------------------------------------------------


def _topic(url: str, topic: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = http_json("GET", f"{url}/v1/topics/{topic}")["partitions"]
    return rows


def _wait(what: str, condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + SETTLE_S
    while True:
        with contextlib.suppress(OSError, ValueError, KeyError, urllib.error.URLError):
            if condition():
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {SETTLE_S:.0f} s waiting for {what}")
        time.sleep(POLL_S)


def full_isrs(url: str, topic: str) -> bool:
    """Every partition has a leader and every replica in its ISR."""
    rows = _topic(url, topic)
    return all(r["leader"] is not None and set(r["isr"]) == set(r["replicas"]) for r in rows)


def one_mode(
    work: Path, mode: str, partitions: int, producers: int, warm_s: float, rounds: int = 1
) -> dict[str, Any]:
    """A fresh cluster, the load, each node restarted in turn (`rounds` times); the figures."""
    options = ["--lease-ttl", "2"]
    if mode == "immediate":
        options += ["--controlled-shutdown-timeout", "0"]
    cluster = LocalCluster(work / mode, 3, node_options=options)
    cluster.start()
    try:
        url = cluster.nodes[0].url
        http_json(
            "POST",
            f"{url}/v1/topics",
            {
                "name": TOPIC,
                "partitions": partitions,
                "replication_factor": 3,
                "configs": {"min.insync.replicas": 2},
            },
        )
        _wait("full ISRs", lambda: full_isrs(url, TOPIC))
        load = Load([n.url for n in cluster.nodes], TOPIC, partitions, producers)
        load.start()
        start = time.time()
        leaders = {r["partition"]: r["leader"] for r in _topic(url, TOPIC)}
        _wait("records acknowledged", lambda: load.progress() >= 20)
        time.sleep(warm_s)  # load before the first restart (not a synchronisation)
        shutdowns = []
        for node in [n for _ in range(rounds) for n in cluster.nodes]:
            progress(f"{mode}: restarting node {node.node_id}")
            began = time.monotonic()
            node.stop(timeout=60)
            shutdowns.append(round(time.monotonic() - began, 2))
            node.start()
            other = cluster.nodes[(node.node_id + 1) % 3].url
            _wait(f"node {node.node_id} in every ISR", functools.partial(full_isrs, other, TOPIC))
        time.sleep(warm_s)  # load after the last restart
        end = time.time()
        results = load.stop()
        logs = [
            (n.node_id, (work / mode / f"node-{n.node_id}.log").read_text().splitlines())
            for n in cluster.nodes
        ]
        gaps = leaderless_gaps(leadership_events(logs, TOPIC), leaders, start, end)
        return {
            "mode": mode,
            "partitions": partitions,
            "producers": producers,
            "restarts": len(shutdowns),
            "seconds": round(end - start, 1),
            "shutdown_s": shutdowns,
            **results.summary(),
            "leaderless": gap_summary(gaps),
        }
    finally:
        cluster.stop()


def machine() -> dict[str, str]:
    return {
        "machine": f"{platform.node()} ({os.cpu_count()} cores, {platform.machine()})",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load": "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--partitions", type=int, default=30)
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--warm", type=float, default=3.0, help="seconds of load around")
    parser.add_argument("--modes", default="controlled,immediate")
    parser.add_argument("--rounds", type=int, default=1, help="rolling restarts per mode")
    parser.add_argument("--out", type=Path, help="also write the report (JSON) here")
    parser.add_argument("--work", type=Path, help="keep the clusters' files (logs) here")
    args = parser.parse_args()
    report: dict[str, Any] = {**machine(), "runs": []}
    with contextlib.ExitStack() as stack:
        work = args.work or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        for mode in args.modes.split(","):
            run = one_mode(work, mode, args.partitions, args.producers, args.warm, args.rounds)
            report["runs"].append(run)
    text = orjson.dumps(report, option=orjson.OPT_INDENT_2)
    if args.out is not None:
        args.out.write_bytes(text)
    print(text.decode())


if __name__ == "__main__":
    main()
