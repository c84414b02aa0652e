"""Share groups (queues) against Redis Streams consumer groups and NATS JetStream work queues,
side by side in one run, every server on the first CPU and the clients on the others.

- throughput: `consumers` consumers (in PROCESSES client processes) acquire N records at a
  time (N = 1, 10, 100) and accept them, each consumer one request in flight: Sluice `POST
  …/acquire?max_records=N` then one `POST …/acknowledge` of the N accepts (as offset ranges,
  consecutive records of a partition in one, as Kafka's share consumer sends them; `--acks
  tokens`: each record's token), over keep-alive HTTP/1.1; Redis `XREADGROUP COUNT N` then
  `XACK` of the N (redis-py + hiredis); JetStream a pull of N from a work-queue stream's
  durable pull consumer with explicit acks (`nats-server -js`, file store), then an ack of
  each. Each server holds `records` 100-byte records first; a
  cell acquires and accepts `cell_records[N]` of them with a new share group or Redis group
  (JetStream's one consumer goes on; its stream is filled up again first). Records/s over the
  cell, and records per server CPU-second (the server's /proc time over the cell). Cells
  alternate over the rounds; the median round is the figure.
  Goals: Sluice >= 1x Redis and >= 3x JetStream per server CPU-second.
- fairness: `fair_consumers` members of one share group acquire one record at a time from a
  one-partition topic, accept it and acquire again: parked while a producer adds `fair_rate`
  records/s, then (a fresh gateway) taking a backlog of `fair_backlog` records. Every wait for
  work after a consumer's first (from its acquire to the record; the first waits on the order
  the acquires came in) against the mean wait; goal: each within 2x the mean.
- poison: a record at the head of a one-partition topic that every consumer releases (and, as
  a second case, one whose consumer hangs until its lock lapses), the `poison_behind` records
  after it accepted meanwhile: the poison's deliveries (exactly the delivery limit) and when it
  was archived; how long the records behind it waited (goal: all accepted within one lock
  duration).
- `--profile`: `py-spy record -r 200` of the gateway over one more Sluice cell per batch size.

    python -m loadtests.queue_bench [--quick] [--rounds N] [--out DIR] [--profile]
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
from nats.js.api import AckPolicy, ConsumerConfig, RetentionPolicy, StorageType, StreamConfig

from gateway.workers.local_cluster import free_port
from loadtests import consumers, generators, jetstream
from loadtests.bench import machine
from loadtests.common import (
    RedisServer,
    http_json,
    progress,
    raise_fd_limit,
    separate_cpus,
    start_gateway,
    stop_on_sigterm,
)
from loadtests.consumers import Clock, RawHttp, Shared, run_workers
from loadtests.jetstream import NatsServer
from loadtests.profiling import own_beside, py_spy, recording, summarize
from loadtests.ratio_cli import Stamp, chosen_plan, command, plan_options, stamp_line, write
from loadtests.rows import MEDIA, VALUE, body_for

SYSTEMS = ("sluice", "redis", "jetstream")
PROCESSES = 2  # client processes sharing the consumers
POLL_MS = 200  # an acquire's or a read's wait once nothing is left
PARTITIONS = 4  # of the throughput topic
STREAM, SUBJECT, DURABLE = "queue", "queue.records", "workers"
TOKEN = re.compile(rb'"token":"([^"]+)"')
LOCK_EXPIRES = re.compile(rb'"lock_expires_at":(\d+)')
RETRY_AFTER = re.compile(rb"retry-after:\s*(\d+)", re.I)
PULL_GRACE_S = 1.0  # past a JetStream pull's expiry, before it counts as over
JOINING = 16  # joins in flight per client process
FAIR_POLL_MS = 300_000  # a parked fairness acquire's timeout (the longest): no wait re-polls
FAIR_TICK_S = 0.01  # the fairness producer sends what is due this often
FAIR_LOCK_MS = 30_000  # the fairness group's lock: its answers' lock_expires_at less this is
# when the gateway acquired the record (its clock, which the consumers' shares)
DESCRIBE_EVERY_S = 0.02  # how often the poison cell asks whether the poison is archived
POISON_DEADLINE_S = 300.0
SHARE_CODE = re.compile(r"\((groups/share/|gateway/api/share_groups\.py|groups/offsets_log\.py)")


@dataclasses.dataclass(frozen=True)
class Plan:
    records: int  # preloaded in each server
    cell_records: dict[int, int]  # batch size -> records a cell acquires and accepts
    consumers: int
    rounds: int
    fair_consumers: int
    fair_rate: float  # records/s produced to the parked consumers
    fair_seconds: float
    fair_backlog: int  # records the consumers take in the backlog case
    poison_behind: int
    poison_consumers: int
    poison_batch: int
    lock_ms: int  # the poison cell's share.record.lock.duration.ms
    delivery_limit: int  # its share.delivery.count.limit
    acks: str = "ranges"  # how the throughput cells' Sluice consumers accept: ranges or tokens


FULL = Plan(
    records=200_000,
    cell_records={1: 20_000, 10: 100_000, 100: 200_000},
    consumers=64,
    rounds=3,
    fair_consumers=1000,
    fair_rate=10.0,
    fair_seconds=240.0,
    fair_backlog=20_000,
    poison_behind=4_000,  # twice share.partition.max.record.locks' default
    poison_consumers=8,
    poison_batch=10,
    lock_ms=5_000,
    delivery_limit=5,
)
QUICK = Plan(
    records=1_000,
    cell_records={1: 200, 10: 500},
    consumers=8,
    rounds=1,
    fair_consumers=20,
    fair_rate=40.0,
    fair_seconds=1.5,
    fair_backlog=100,
    poison_behind=50,
    poison_consumers=4,
    poison_batch=5,
    lock_ms=1_000,
    delivery_limit=2,
)


# -- the consumers, one worker process each (loadtests.consumers.run_workers) -------------------


async def _sluice_join(url: str, group: str, topic: str, count: int) -> list[str]:
    """`count` new members of `group` reading `topic`, joined JOINING at a time."""
    gate = asyncio.Semaphore(JOINING)
    path = f"/v1/share-groups/{group}/members"

    async def one() -> str:
        async with gate:
            http = await RawHttp.open(url)
            try:
                body = orjson.dumps({"topics": [topic], "session_timeout_ms": 300_000})
                status, _, answer = await http.send("POST", path, body)
            finally:
                http.close()
        if status != 201:
            raise RuntimeError(f"join -> {status} {answer[:300]!r}")
        return str(orjson.loads(answer)["member_id"])

    return list(await asyncio.gather(*(one() for _ in range(count))))


def _accepts(tokens: list[bytes]) -> bytes:
    items = b",".join(b'{"token":"' + t + b'","type":"accept"}' for t in tokens)
    return b'{"acknowledgements":[' + items + b"]}"


async def _accept(http: RawHttp, target: str, tokens: list[bytes]) -> None:
    """Accept `tokens` in one request; every one must take effect."""
    status, _, answer = await http.send("POST", target, _accepts(tokens))
    if status != 200 or answer.count(b'"status":"ok"') != len(tokens):
        raise RuntimeError(f"acknowledge -> {status} {answer[:300]!r}")


def _range_accepts(tokens: list[bytes]) -> tuple[bytes, int]:
    """The tokens' records accepted by offset ranges (consecutive offsets of a partition in
    one), and how many ranges."""
    runs: list[list[Any]] = []
    for token in tokens:
        topic, partition, offset, _ = token.decode().rsplit(":", 3)
        at = int(offset)
        last = runs[-1] if runs else None
        if last is not None and (last[0], last[1], last[3] + 1) == (topic, partition, at):
            last[3] = at
        else:
            runs.append([topic, partition, at, at])
    items = [
        {"topic": t, "partition": int(p), "first_offset": a, "last_offset": b, "type": "accept"}
        for t, p, a, b in runs
    ]
    return orjson.dumps({"acknowledgements": items}), len(items)


async def _sluice_share(
    params: dict[str, Any], shared: Shared, clock: Clock, ready: Callable[[], None]
) -> int:
    """Members of one share group: acquire up to `max_records`, accept them all in one
    request, again, until the group accepted the cell's records; then leave."""
    url, group = params["url"], params["group"]
    members = await _sluice_join(url, group, params["topic"], params["consumers"])
    connections = [await RawHttp.open(url) for _ in members]
    base = f"/v1/share-groups/{group}/members"
    total = 0

    async def one(http: RawHttp, member: str) -> None:
        nonlocal total
        acquire = (
            f"{base}/{member}/acquire?max_records={params['max_records']}&timeout_ms={POLL_MS}"
        )
        acknowledge = f"{base}/{member}/acknowledge"
        while not shared.done():
            status, _, body = await http.send("POST", acquire)
            if status != 200:
                raise RuntimeError(f"acquire -> {status} {body[:300]!r}")
            tokens = TOKEN.findall(body)
            if tokens and params["acks"] == "ranges":
                accepts, count = _range_accepts(tokens)
                status, _, answer = await http.send("POST", acknowledge, accepts)
                if status != 200 or answer.count(b'"status":"ok"') != count:
                    raise RuntimeError(f"acknowledge -> {status} {answer[:300]!r}")
            elif tokens:
                await _accept(http, acknowledge, tokens)
            if tokens:
                total += len(tokens)
                clock.saw(len(tokens))
                shared.add(len(tokens))

    ready()
    try:
        await asyncio.gather(*(one(c, m) for c, m in zip(connections, members, strict=True)))
        for http, member in zip(connections, members, strict=True):
            await http.send("DELETE", f"{base}/{member}")
    finally:
        for http in connections:
            http.close()
    return total


async def _redis_share(
    params: dict[str, Any], shared: Shared, clock: Clock, ready: Callable[[], None]
) -> int:
    """Consumers of one Redis group: XREADGROUP COUNT `max_records`, then XACK of what came."""
    client = consumers.redis_client(params["port"])
    stream, group = params["stream"], params["group"]
    total = 0
    await client.execute_command("PING")  # type: ignore[no-untyped-call]

    async def one(consumer: str) -> None:
        nonlocal total
        while not shared.done():
            reply = await client.xreadgroup(
                group, consumer, {stream: ">"}, count=params["max_records"], block=POLL_MS
            )
            ids = [entry[0] for _, entries in reply or () for entry in entries]
            if ids:
                acked = await client.xack(stream, group, *ids)
                if acked != len(ids):
                    raise RuntimeError(f"XACK of {len(ids)} ids acknowledged {acked}")
                total += len(ids)
                clock.saw(len(ids))
                shared.add(len(ids))

    ready()
    try:
        await asyncio.gather(*(one(c) for c in params["consumers"]))
    finally:
        await client.aclose()
    return total


async def _jetstream_share(
    params: dict[str, Any], shared: Shared, clock: Clock, ready: Callable[[], None]
) -> int:
    """Pull consumers of one durable work-queue consumer: a pull of `max_records` (answered
    early by what there is after its expiry), then an ack of each message."""
    client = await jetstream.connect(params["servers"])
    batch = params["max_records"]
    pull = f"$JS.API.CONSUMER.MSG.NEXT.{params['stream']}.{params['durable']}"
    request = orjson.dumps({"batch": batch, "expires": int(jetstream.PULL_EXPIRES_S * 1e9)})
    total = 0

    async def one() -> None:
        nonlocal total
        inbox = client.new_inbox()
        replies: list[str] = []
        answered = asyncio.Event()

        async def on_message(msg: Any) -> None:
            if msg.headers and "Status" in msg.headers:  # 404 no messages, 408 pull expired
                answered.set()
                return
            replies.append(msg.reply)
            if len(replies) >= batch:
                answered.set()

        await client.subscribe(inbox, cb=on_message)
        while not shared.done():
            replies.clear()
            answered.clear()
            await client.publish(pull, request, reply=inbox)
            # nats-server 2.9 may end a pull it filled in part without a status: past its
            # expiry, what came is all that comes
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(jetstream.PULL_EXPIRES_S + PULL_GRACE_S):
                    await answered.wait()
            got = list(replies)
            for reply in got:
                await client.publish(reply, b"+ACK")
            total += len(got)
            clock.saw(len(got))
            shared.add(len(got))

    ready()
    try:
        await asyncio.gather(*(one() for _ in range(params["consumers"])))
        await client.flush()
    finally:
        await client.close()
    return total


async def _fair(
    params: dict[str, Any], shared: Shared, clock: Clock, ready: Callable[[], None]
) -> int:
    """The fairness cell's producer, or a process of its consumers (`role`)."""
    if params["role"] == "producer":
        await _fair_producer(params, ready)
        return 0
    return await _fair_consumers(params, shared, clock, ready)


async def _fair_producer(params: dict[str, Any], ready: Callable[[], None]) -> None:
    """`count` records at `rate` records/s, what is due each tick in one produce; a produce
    the gateway sheds (503) is sent again after its Retry-After, and counted in the
    `refusals` file."""
    http = await RawHttp.open(params["url"])
    target = f"/v1/topics/{params['topic']}/partitions/0/records"
    count, rate = params["count"], params["rate"]
    sent = tick = refused = 0
    ready()
    started = time.monotonic()
    try:
        while sent < count:
            due = min(count, int((time.monotonic() - started) * rate)) - sent
            if due > 0:
                body = orjson.dumps({"records": [{"value": orjson.Fragment(VALUE)}] * due})
                status, head, answer = await http.send("POST", target, body)
                if status == 503:
                    refused += 1
                    found = RETRY_AFTER.search(head)
                    await asyncio.sleep(int(found.group(1)) if found else 1)
                    continue
                if status != 200:
                    raise RuntimeError(f"produce -> {status} {answer[:300]!r}")
                sent += due
            tick += 1
            await asyncio.sleep(max(0.0, started + tick * FAIR_TICK_S - time.monotonic()))
    finally:
        http.close()
        Path(params["refusals"]).write_text(str(refused))


async def _fair_consumers(
    params: dict[str, Any], shared: Shared, clock: Clock, ready: Callable[[], None]
) -> int:
    """Members that each park an acquire of one record, accept what comes and park again.
    Each one's waits go to the `waits` file: as this process saw them (from the acquire's
    send to its answer read, monotonic seconds) and up to the gateway's acquisition of the
    record (its answer's lock_expires_at less the lock: the order the gateway served the
    acquires in, without this process's delay in reading the answers)."""
    url, group = params["url"], params["group"]
    members = await _sluice_join(url, group, params["topic"], params["consumers"])
    connections = [await RawHttp.open(url) for _ in members]
    base = f"/v1/share-groups/{group}/members"
    waits: list[list[float]] = [[] for _ in members]
    served: list[list[float]] = [[] for _ in members]
    order: list[tuple[float, int]] = []  # acquires after the first: sent, acquired (ms)
    total = 0

    async def one(http: RawHttp, member: str, mine: list[float], at_gateway: list[float]) -> None:
        nonlocal total
        acquire = f"{base}/{member}/acquire?max_records=1&timeout_ms={FAIR_POLL_MS}"
        acknowledge = f"{base}/{member}/acknowledge"
        since, since_ms = time.monotonic(), time.time() * 1000
        while True:
            status, _, body = await http.send("POST", acquire)
            if status != 200:
                raise RuntimeError(f"acquire -> {status} {body[:300]!r}")
            tokens = TOKEN.findall(body)
            if not tokens:
                continue  # the wait goes on
            mine.append(time.monotonic() - since)
            expires = LOCK_EXPIRES.search(body)
            assert expires is not None, body[:300]
            acquired_ms = int(expires.group(1)) - FAIR_LOCK_MS
            at_gateway.append((acquired_ms - since_ms) / 1000)
            if len(mine) > 1:  # as the waits: the thousand first ones all go out at once
                order.append((since_ms, acquired_ms))
            await _accept(http, acknowledge, tokens)
            total += len(tokens)
            clock.saw(len(tokens))
            shared.add(len(tokens))
            since, since_ms = time.monotonic(), time.time() * 1000

    async def stop_when_done(tasks: list[asyncio.Task[None]]) -> None:
        while not shared.done() and not any(t.done() for t in tasks):
            if shared.barrier.broken:  # another worker (the producer) failed
                raise RuntimeError("the fairness cell stopped: another worker failed")
            await asyncio.sleep(0.05)

    ready()
    tasks = [
        asyncio.ensure_future(one(c, m, w, g))
        for c, m, w, g in zip(connections, members, waits, served, strict=True)
    ]
    try:
        try:
            await stop_when_done(tasks)
        finally:
            for task in tasks:
                task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task  # a consumer's failure is the cell's
    finally:
        for http in connections:
            http.close()
    doc = {"seen": waits, "at_gateway": served, "order": order}
    Path(params["waits"]).write_bytes(orjson.dumps(doc))
    return total


consumers.WORKERS.update(
    {
        "queue_sluice": _sluice_share,
        "queue_redis": _redis_share,
        "queue_jetstream": _jetstream_share,
        "queue_fair": _fair,
    }
)


# -- the servers --------------------------------------------------------------------------------


def start_jetstream(directory: Path) -> NatsServer:
    """One `nats-server` with JetStream (file store in `directory`) on a free loopback port."""
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "nats.conf"
    port = free_port()
    config.write_text(
        f'listen: 127.0.0.1:{port}\njetstream {{ store_dir: "{directory / "store"}" }}\n'
    )
    server = NatsServer("queue", config, port)
    server.start()
    return server


def _names(prefix: str) -> Iterator[str]:
    n = 0
    while True:
        n += 1
        yield f"{prefix}{n}"


NAMES = _names("q")


def fill_sluice(url: str, topic: str, partitions: int, count: int) -> None:
    """A topic of `partitions` partitions with `count` 100-byte records, 1000 a produce,
    round robin."""
    http_json("POST", url + "/v1/topics", {"name": topic, "partitions": partitions})
    with httpx.Client(timeout=120) as client:
        for n, start in enumerate(range(0, count, 1000)):
            body = body_for("ndjson", min(1000, count - start))
            client.post(
                f"{url}/v1/topics/{topic}/partitions/{n % partitions}/records",
                content=body,
                headers={"Content-Type": MEDIA["ndjson"]},
            ).raise_for_status()


def share_group(url: str, **configs: Any) -> str:
    """A new share group that starts at the earliest records, with `configs`."""
    name = next(NAMES)
    doc = {"share.auto.offset.reset": "earliest", **configs}
    http_json("PUT", f"{url}/v1/share-groups/{name}/configs", {"configs": doc})
    return name


def _split(count: int, parts: int) -> list[int]:
    return [count // parts + (1 if i < count % parts else 0) for i in range(parts)]


class Servers:
    """The three servers of the throughput section, each filled with the same records."""

    def __init__(self, scratch: Path, plan: Plan) -> None:
        self.plan = plan
        self.gateway, self.url = start_gateway(scratch / "sluice", preexec=raise_fd_limit)
        self.redis = RedisServer.start(scratch / "redis")
        self.nats = start_jetstream(scratch / "nats")
        self.placement = separate_cpus(self.gateway.pid, self.redis.process.pid, self.nats_pid)
        self.topic = "queue"
        self.left = 0  # records in the JetStream stream

    @property
    def nats_pid(self) -> int:
        assert self.nats.process is not None
        return self.nats.process.pid

    def pid(self, system: str) -> int:
        return {"sluice": self.gateway.pid, "redis": self.redis.process.pid}.get(
            system, self.nats_pid
        )

    def fill(self) -> None:
        fill_sluice(self.url, self.topic, PARTITIONS, self.plan.records)
        generators.redis_benchmark(
            self.redis.port,
            ["XADD", STREAM, "*", "v", VALUE.decode()],
            requests=self.plan.records,
            server_pid=self.redis.process.pid,
            pipeline=1000,
            clients=1,
            threads=1,
        )
        asyncio.run(self._create_stream())
        asyncio.run(self._consumer())
        self._refill()

    async def _create_stream(self) -> None:
        client = await jetstream.connect([self.nats.url])
        try:
            await client.jetstream().add_stream(
                StreamConfig(
                    name=STREAM,
                    subjects=[SUBJECT],
                    retention=RetentionPolicy.WORK_QUEUE,
                    storage=StorageType.FILE,
                )
            )
        finally:
            await client.close()

    def _refill(self) -> None:
        """Publish (acknowledged) until the work queue holds `records` messages again."""
        missing = self.plan.records - self.left
        if missing:
            params = {"servers": [self.nats.url], "subject": SUBJECT, "messages": missing}
            done = run_workers(
                "jetstream_publish", [{**params, "window": 1000}], missing, self.nats_pid
            )
            if "error" in done:
                raise RuntimeError(f"filling JetStream: {done['error']}")
        self.left = self.plan.records

    def close(self) -> None:
        for step in (self._stop_gateway, self.redis.stop, self.nats.stop):
            with contextlib.suppress(Exception):
                step()

    def _stop_gateway(self) -> None:
        self.gateway.terminate()
        self.gateway.wait(60)

    # -- one cell --------------------------------------------------------------------------

    def cell(self, system: str, batch: int) -> dict[str, Any]:
        count = self.plan.cell_records[batch]
        shares = _split(self.plan.consumers, PROCESSES)
        common = {"max_records": batch}
        if system == "sluice":
            group = share_group(self.url)
            params = [
                {
                    **common,
                    "url": self.url,
                    "group": group,
                    "topic": self.topic,
                    "consumers": n,
                    "acks": self.plan.acks,
                }
                for n in shares
            ]
        elif system == "redis":
            group = next(NAMES)
            self.redis.command("XGROUP", "CREATE", STREAM, group, "0")
            names = iter(range(self.plan.consumers))
            params = [
                {
                    **common,
                    "port": self.redis.port,
                    "stream": STREAM,
                    "group": group,
                    "consumers": [f"c{next(names)}" for _ in range(n)],
                }
                for n in shares
            ]
        else:
            self._refill()
            params = [
                {
                    **common,
                    "servers": [self.nats.url],
                    "stream": STREAM,
                    "durable": DURABLE,
                    "consumers": n,
                }
                for n in shares
            ]
        row = run_workers(f"queue_{system}", params, count, self.pid(system))
        if "error" in row:
            raise RuntimeError(f"{system} batch {batch}: {row['error']}")
        if system == "jetstream":
            self.left -= row["records"]
            asyncio.run(self._drained(self.left))
        return _rates(row)

    async def _consumer(self) -> None:
        """The durable pull consumer every JetStream cell shares (a work queue takes one)."""
        client = await jetstream.connect([self.nats.url])
        try:
            await client.jetstream().add_consumer(
                STREAM,
                ConsumerConfig(
                    durable_name=DURABLE,
                    ack_policy=AckPolicy.EXPLICIT,
                    max_ack_pending=100_000,
                    max_waiting=4096,
                ),
            )
        finally:
            await client.close()

    async def _drained(self, left: int) -> None:
        """Every acked message left the work queue: the server took every ack."""
        client = await jetstream.connect([self.nats.url])
        try:
            deadline = time.monotonic() + 60
            while (state := (await client.jetstream().stream_info(STREAM)).state).messages > left:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"JetStream holds {state.messages} messages, not {left}")
                await asyncio.sleep(0.05)
        finally:
            await client.close()


def _rates(row: dict[str, Any]) -> dict[str, Any]:
    seconds, spent = row["seconds"], row["server_cpu_s"]
    return {
        "records": row["records"],
        "seconds": seconds,
        "records_per_s": round(row["records"] / seconds) if seconds > 0 else None,
        "server_cpu_s": spent,
        "server_cores_busy": round(spent / seconds, 2) if seconds > 0 else None,
        "records_per_server_cpu_s": round(row["records"] / spent) if spent else None,
        "client_cpu_s": row["generator_cpu_s"],
    }


def throughput(servers: Servers, plan: Plan) -> dict[str, dict[str, Any]]:
    """Every (batch, system) cell `rounds` times, alternating; the median round of each."""
    rows: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for number in range(plan.rounds):
        order = SYSTEMS if number % 2 == 0 else SYSTEMS[::-1]
        for batch in plan.cell_records:
            for system in order:
                progress(f"round {number + 1}: {system}, batches of {batch}")
                rows.setdefault((batch, system), []).append(servers.cell(system, batch))
    out: dict[str, dict[str, Any]] = {}
    for (batch, system), runs in rows.items():
        ordered = sorted(runs, key=lambda r: r["records_per_server_cpu_s"] or 0)
        out.setdefault(str(batch), {})[system] = {
            **ordered[(len(ordered) - 1) // 2],
            "rounds_records_per_s": [r["records_per_s"] for r in runs],
            "rounds_records_per_server_cpu_s": [r["records_per_server_cpu_s"] for r in runs],
        }
    return out


def figures(cells: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Sluice against each peer per server CPU-second (the goals) and in records/s."""
    out = []
    for batch, row in cells.items():
        for peer, goal in (("redis", 1.0), ("jetstream", 3.0)):
            for key, what, wanted in (
                ("records_per_server_cpu_s", "per server CPU-second", goal),
                ("records_per_s", "records/s", None),
            ):
                of, to = row["sluice"].get(key), row[peer].get(key)
                value = round(of / to, 2) if of and to else None
                met = None if value is None or wanted is None else value >= wanted
                out.append(
                    {
                        "figure": f"batch {batch}: Sluice / {peer}, {what}",
                        "value": value,
                        "goal": wanted,
                        "met": met,
                    }
                )
    return out


# -- fairness ---------------------------------------------------------------------------------


def fairness(scratch: Path, plan: Plan) -> list[dict[str, Any]]:
    """`fair_consumers` consumers of one partition: parked while records trickle in at
    `fair_rate`/s, then taking a backlog of `fair_backlog` records; each on a fresh gateway."""
    return [fairness_cell(scratch, plan, backlog) for backlog in (False, True)]


def fairness_cell(scratch: Path, plan: Plan, backlog: bool) -> dict[str, Any]:
    how = "backlog" if backlog else "trickle"
    members = str(max(1000, plan.fair_consumers))
    process, url = start_gateway(
        scratch / f"fair-{how}", "--group-max-members", members, preexec=raise_fd_limit
    )
    try:
        separate_cpus(process.pid)
        topic = "fair"
        if backlog:
            fill_sluice(url, topic, 1, plan.fair_backlog)
        else:
            http_json("POST", url + "/v1/topics", {"name": topic, "partitions": 1})
        group = share_group(url, **{"share.record.lock.duration.ms": FAIR_LOCK_MS})
        produced = 0 if backlog else int(plan.fair_rate * plan.fair_seconds)
        files = [scratch / f"fair-{how}-waits-{i}.json" for i in range(PROCESSES)]
        common = {"url": url, "group": group, "topic": topic}
        params = [
            {**common, "role": "consumers", "consumers": n, "waits": str(path)}
            for n, path in zip(_split(plan.fair_consumers, PROCESSES), files, strict=True)
        ]
        refusals = scratch / f"fair-{how}-refusals"
        params.append(
            {
                **common,
                "role": "producer",
                "count": produced,
                "rate": plan.fair_rate,
                "refusals": str(refusals),
            }
        )
        expected = plan.fair_backlog if backlog else produced
        row = run_workers("queue_fair", params, expected, process.pid)
    finally:
        process.terminate()
        process.wait(60)
    if "error" in row:
        raise RuntimeError(f"fairness ({how}): {row['error']}")
    docs = [orjson.loads(path.read_bytes()) for path in files]
    per_consumer = [w for doc in docs for w in doc["seen"]]
    at_gateway = [w for doc in docs for w in doc["at_gateway"]]
    return {
        "how": how,
        "consumers": plan.fair_consumers,
        "client_processes": len(files),
        "rate": None if backlog else plan.fair_rate,
        **fairness_figures(per_consumer, row),
        "at_gateway": steady_figures(at_gateway),
        "out_of_order": out_of_order([tuple(o) for doc in docs for o in doc["order"]]),
        "produces_shed": int(refusals.read_text()),
    }


def fairness_figures(per_consumer: list[list[float]], row: dict[str, Any]) -> dict[str, Any]:
    """Each consumer's waits after its first against the mean of them all."""
    first = [waits[0] for waits in per_consumer if waits]
    counts = [len(waits) for waits in per_consumer]
    out: dict[str, Any] = {
        "records": row["records"],
        "seconds": row["seconds"],
        "server_cpu_s": row["server_cpu_s"],
        "server_cpu_ms_per_record": round(row["server_cpu_s"] / row["records"] * 1000, 2),
        "records_per_consumer": {"min": min(counts), "max": max(counts)},
        "consumers_served": sum(1 for n in counts if n),
        "first_wait_s": _spread(first),
    }
    return {**out, **steady_figures(per_consumer)}


def out_of_order(acquires: list[tuple[float, int]]) -> dict[str, Any]:
    """Whether the gateway served the acquires (each consumer's after its first) in the order
    they were sent: for each, how long after it the gateway had already served one sent later
    (0 in that order; the clients' sends and the ms of lock_expires_at blur it by a few ms)."""
    ordered = sorted(acquires)
    later: list[float] = []
    soonest = float("inf")  # the first acquisition among those sent after
    for _, acquired in reversed(ordered):
        later.append(max(0.0, acquired - soonest))
        soonest = min(soonest, acquired)
    late = sorted(later)
    return {
        "acquires": len(late),
        "after_a_later_one_by_over_10ms": round(sum(1 for d in late if d > 10) / len(late), 4),
        "p99_ms": _quantile(late, 0.99),
        "max_ms": late[-1],
    }


def steady_figures(per_consumer: list[list[float]]) -> dict[str, Any]:
    """The waits after each consumer's first against their mean."""
    steady = [w for waits in per_consumer for w in waits[1:]]
    if not steady:
        return {"steady_waits": 0, "met": None}
    mean = statistics.fmean(steady)
    worst = [max(waits[1:]) for waits in per_consumer if len(waits) > 1]
    return {
        "steady_waits": len(steady),
        "wait_s": _spread(steady),
        "within_2x_mean": round(sum(1 for w in steady if w <= 2 * mean) / len(steady), 4),
        # served ahead of their turn: the other side of another consumer's longer wait
        "under_half_the_mean": round(sum(1 for w in steady if w < mean / 2) / len(steady), 4),
        "max_over_mean": round(max(steady) / mean, 2),
        "p99_over_mean": round(_quantile(sorted(steady), 0.99) / mean, 2),
        "consumers_within_2x_mean": sum(1 for w in worst if w <= 2 * mean),
        "consumers_measured": len(worst),
        "met": max(steady) <= 2 * mean,
    }


def _spread(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "mean": round(statistics.fmean(ordered), 3),
        "min": round(ordered[0], 3),
        "p50": round(_quantile(ordered, 0.5), 3),
        "p90": round(_quantile(ordered, 0.9), 3),
        "p99": round(_quantile(ordered, 0.99), 3),
        "max": round(ordered[-1], 3),
    }


def _quantile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- poison -----------------------------------------------------------------------------------


def poison(scratch: Path, plan: Plan) -> list[dict[str, Any]]:
    """The poison record released every time, then one whose consumer hangs on it."""
    process, url = start_gateway(scratch / "poison", preexec=raise_fd_limit)
    try:
        separate_cpus(process.pid)
        return [asyncio.run(poison_cell(url, plan, how)) for how in ("release", "hang")]
    finally:
        process.terminate()
        process.wait(60)


async def poison_cell(url: str, plan: Plan, how: str) -> dict[str, Any]:
    """A one-partition topic: the poison at offset 0, `poison_behind` records after it.
    Consumers accept every record but the poison, which they release (`release`) or keep
    without a word until its lock lapses (`hang`)."""
    topic = next(NAMES)
    http_json("POST", url + "/v1/topics", {"name": topic, "partitions": 1})
    records = [{"key": "poison", "value": orjson.Fragment(VALUE)}]
    records += [{"key": "ok", "value": orjson.Fragment(VALUE)}] * plan.poison_behind
    http_json("POST", f"{url}/v1/topics/{topic}/partitions/0/records", {"records": records})
    group = share_group(
        url,
        **{
            "share.record.lock.duration.ms": plan.lock_ms,
            "share.delivery.count.limit": plan.delivery_limit,
        },
    )
    archived_before = _archived(url)
    members = await _sluice_join(url, group, topic, plan.poison_consumers)
    base = f"/v1/share-groups/{group}/members"
    deliveries: list[tuple[float, int]] = []  # (seconds since the start, delivery count)
    accepted: list[float] = []
    stop = asyncio.Event()

    async def consumer(member: str) -> None:
        http = await RawHttp.open(url)
        acquire = f"{base}/{member}/acquire?max_records={plan.poison_batch}&timeout_ms={POLL_MS}"
        try:
            while not stop.is_set():
                status, _, body = await http.send("POST", acquire)
                if status != 200:
                    raise RuntimeError(f"acquire -> {status} {body[:300]!r}")
                acks, good = [], []
                for record in orjson.loads(body)["records"]:
                    if record["key"] != "poison":
                        acks.append({"token": record["token"], "type": "accept"})
                        good.append(record["token"])
                        continue
                    deliveries.append((time.monotonic() - started, record["delivery_count"]))
                    if how == "release":
                        acks.append({"token": record["token"], "type": "release"})
                if not acks:
                    continue
                doc = orjson.dumps({"acknowledgements": acks})
                status, _, answer = await http.send("POST", f"{base}/{member}/acknowledge", doc)
                results = orjson.loads(answer)["results"] if status == 200 else []
                if [r["status"] for r in results] != ["ok"] * len(acks):
                    raise RuntimeError(f"acknowledge -> {status} {answer[:300]!r}")
                done = time.monotonic() - started
                accepted.extend(done for _ in good)
            await http.send("DELETE", f"{base}/{member}")
        finally:
            http.close()

    async def archived() -> float:
        """When the group has nothing left open (everything accepted or archived)."""
        async with httpx.AsyncClient(timeout=30) as client:
            while True:
                doc = (await client.get(f"{url}/v1/share-groups/{group}")).json()
                if doc["partitions"] and doc["lag"] == 0:
                    return time.monotonic() - started
                await asyncio.sleep(DESCRIBE_EVERY_S)

    started = time.monotonic()
    tasks = [asyncio.ensure_future(consumer(m)) for m in members]
    try:
        async with asyncio.timeout(POISON_DEADLINE_S):
            done_at = await archived()
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    counts = [count for _, count in sorted(deliveries)]
    return {
        "how": how,
        "lock_ms": plan.lock_ms,
        "delivery_limit": plan.delivery_limit,
        "consumers": plan.poison_consumers,
        "max_records": plan.poison_batch,
        "behind": plan.poison_behind,
        "accepted": len(accepted),
        "poison_deliveries": len(counts),
        "delivery_counts": counts,
        "delivered_at_s": [round(at, 3) for at, _ in sorted(deliveries)],
        "archived_metric": _archived(url) - archived_before,
        "archived_at_s": round(done_at, 3),
        "behind_last_accepted_s": round(max(accepted), 3),
        "behind_within_one_lock": sum(1 for at in accepted if at * 1000 <= plan.lock_ms),
        "behind_mean_wait_s": round(statistics.fmean(accepted), 3),
        "exactly_the_limit": counts == list(range(1, plan.delivery_limit + 1)),
        "met": max(accepted) * 1000 <= plan.lock_ms and len(accepted) == plan.poison_behind,
    }


def _archived(url: str) -> int:
    """The gateway's count of records archived, from /metrics."""
    with httpx.Client(timeout=30) as client:
        text = client.get(url + "/metrics").text
    for line in text.splitlines():
        if line.startswith('sluice_share_records_total{event="archived"}'):
            return int(float(line.split()[-1]))
    return 0


# -- profile -------------------------------------------------------------------------------------


def profile(servers: Servers, plan: Plan, out: Path) -> dict[str, Any]:
    """One more Sluice cell per batch size under `py-spy record -r 200`; the raw stacks to
    `out`, and where the samples fell."""
    summaries = {}
    for batch in plan.cell_records:
        raw = out / f"queues-profile-batch-{batch}.txt"
        with recording(servers.gateway.pid, raw):
            row = servers.cell("sluice", batch)
        summaries[str(batch)] = {"cell": row, **summarize(raw.read_text(), SHARE_CODE)}
    return summaries


# -- the report -----------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    return (
        "not measured" if value is None else f"{value:,}" if isinstance(value, int) else str(value)
    )


def markdown(doc: dict[str, Any]) -> str:
    meta, plan = doc["meta"], doc["meta"]["plan"]
    lines = [
        f"# Queues (share groups), {meta['date']}",
        "",
        stamp_line(meta, meta["cpus"]) + f"; {plan['rounds']} rounds, the median shown.",
        "",
        f"## Acquire and accept: {plan['consumers']} consumers, {plan['records']:,} records "
        f"of 100 bytes in each server (Sluice's accepts by {plan['acks']})",
        "",
        "| batch | server | records | records/s | server CPU s | server cores busy "
        "| records / server CPU s | client CPU s | rounds (records / server CPU s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for batch, row in doc["throughput"].items():
        for system in SYSTEMS:
            cell = row[system]
            lines.append(
                f"| {batch} | {system} | {cell['records']:,} | {_cell(cell['records_per_s'])} | "
                f"{cell['server_cpu_s']} | {cell['server_cores_busy']} | "
                f"{_cell(cell['records_per_server_cpu_s'])} | {cell['client_cpu_s']} | "
                f"{cell['rounds_records_per_server_cpu_s']} |"
            )
    lines += ["", "| figure | value | goal | met |", "|---|---|---|---|"]
    for f in doc["figures"]:
        goal = "" if f["goal"] is None else f">= {f['goal']}"
        met = "" if f["met"] is None else "yes" if f["met"] else "no"
        lines.append(f"| {f['figure']} | {_cell(f['value'])} | {goal} | {met} |")
    lines += [
        "",
        f"## Fairness: {plan['fair_consumers']:,} consumers of one partition, one record an "
        "acquire",
        "",
        "| case | records | s | gateway CPU ms a record | consumers served | records a "
        "consumer | first wait s (mean, p99, max) | waits after the first | their mean s "
        "| p50 | p90 | p99 | max | within 2x the mean | under half the mean | max / mean | met |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for fair in doc["fairness"]:
        case = (
            f"a backlog of {fair['records']:,}"
            if fair["rate"] is None
            else f"parked, {fair['rate']} records/s"
        )
        first, per = fair["first_wait_s"], fair["records_per_consumer"]
        row = (
            f"| {case} | {fair['records']:,} | {fair['seconds']} | "
            f"{fair['server_cpu_ms_per_record']} | {fair['consumers_served']} | "
            f"{per['min']} to {per['max']} | {first['mean']}, {first['p99']}, {first['max']} | "
        )
        if fair["steady_waits"]:
            w = fair["wait_s"]
            row += (
                f"{fair['steady_waits']:,} | {w['mean']} | {w['p50']} | {w['p90']} | "
                f"{w['p99']} | {w['max']} | {fair['within_2x_mean']:.1%} of the waits, "
                f"{fair['consumers_within_2x_mean']} of {fair['consumers_measured']} consumers "
                f"| {fair['under_half_the_mean']:.1%} | {fair['max_over_mean']} | "
                f"{'yes' if fair['met'] else 'no'} |"
            )
        else:
            row += "0 | | | | | | | | | |"
        lines.append(row)
    lines += [
        "",
        "The same waits up to the gateway's acquisition of the record (its answer's "
        "lock_expires_at less the lock), without the consumers' processes reading the answers "
        f"({doc['fairness'][0]['client_processes']} processes on the client CPUs):",
        "",
        "| case | their mean s | p50 | p90 | p99 | max | within 2x the mean | under half the "
        "mean | max / mean | p99 / mean |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for fair in doc["fairness"]:
        at = fair["at_gateway"]
        if not at["steady_waits"]:
            continue
        w = at["wait_s"]
        lines.append(
            f"| {'a backlog' if fair['rate'] is None else 'parked'} | {w['mean']} | {w['p50']} | "
            f"{w['p90']} | {w['p99']} | {w['max']} | {at['within_2x_mean']:.1%} | "
            f"{at['under_half_the_mean']:.1%} | {at['max_over_mean']} | {at['p99_over_mean']} |"
        )
    lines += [
        "",
        "The order the gateway served them in: how long after each acquire (after each "
        "consumer's first) the gateway had already served one sent later (0 in send order):",
        "",
        "| case | acquires | served after a later one by over 10 ms | p99 ms | max ms |",
        "|---|---|---|---|---|",
    ]
    for fair in doc["fairness"]:
        late = fair["out_of_order"]
        lines.append(
            f"| {'a backlog' if fair['rate'] is None else 'parked'} | {late['acquires']:,} | "
            f"{late['after_a_later_one_by_over_10ms']:.1%} | {late['p99_ms']} | "
            f"{late['max_ms']} |"
        )
    shed = sum(f["produces_shed"] for f in doc["fairness"])
    lines += ["", f"Produces shed by the gateway (503) and sent again: {shed}.", ""]
    lines += [
        "## A poison record",
        "",
        "| the poison's consumer | lock ms | delivery limit | deliveries (counts) "
        "| archived after s | records behind accepted | within one lock | the last after s "
        "| their mean wait s | goal: all within one lock | met |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in doc["poison"]:
        lines.append(
            f"| {'releases it' if row['how'] == 'release' else 'hangs (its lock lapses)'} | "
            f"{row['lock_ms']} | {row['delivery_limit']} | {row['poison_deliveries']} "
            f"({row['delivery_counts']}) | {row['archived_at_s']} | "
            f"{row['accepted']} of {row['behind']} | {row['behind_within_one_lock']} | "
            f"{row['behind_last_accepted_s']} | "
            f"{row['behind_mean_wait_s']} | <= {row['lock_ms'] / 1000} s | "
            f"{'yes' if row['met'] else 'no'} |"
        )
    lines += [
        "",
        "p99 from produce to first delivery in queue-mode push: `python -m "
        "loadtests.queue_push_bench`.",
        "",
    ]
    for batch, summary in doc.get("profile", {}).items():
        lines += [
            f"## Profile, batches of {batch} ({summary['samples']} samples, "
            f"{_cell(summary['cell']['records_per_server_cpu_s'])} records per gateway "
            "CPU-second while sampled)",
            "",
            *own_beside(summary, "code", "share-group code, inclusive %"),
            "",
        ]
    return "\n".join(lines)


def run(plan: Plan, scratch: Path, out: Path | None) -> dict[str, Any]:
    servers = Servers(scratch, plan)
    try:
        progress(f"filling each server with {plan.records:,} records")
        servers.fill()
        doc: dict[str, Any] = {"throughput": throughput(servers, plan)}
        if out is not None:
            progress("profiling the gateway")
            doc["profile"] = profile(servers, plan, out)
        placement = servers.placement
    finally:
        servers.close()
    doc["figures"] = figures(doc["throughput"])
    progress(f"fairness: {plan.fair_consumers} consumers")
    doc["fairness"] = fairness(scratch, plan)
    progress("a poison record")
    doc["poison"] = poison(scratch, plan)
    doc["cpus"] = placement
    return doc


def main() -> None:
    parser = plan_options(__doc__ or "", f"default {FULL.rounds}")
    parser.add_argument(
        "--acks",
        choices=["ranges", "tokens"],
        default="ranges",
        help="Sluice's consumers accept by offset ranges (as Kafka's) or each record's token",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="py-spy the gateway over one more Sluice cell a batch",
    )
    args = parser.parse_args()
    stop_on_sigterm()
    plan = dataclasses.replace(chosen_plan(args, QUICK, FULL), acks=args.acks)
    if args.profile:
        py_spy()
    raise_fd_limit()
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = Stamp()
    with tempfile.TemporaryDirectory(prefix="sluice-queue-bench-") as scratch:
        doc = run(plan, Path(scratch), args.out if args.profile else None)
    doc["meta"] = stamp.meta(
        command("loadtests.queue_bench", parser, args),
        commit=stamp.commit,
        plan={
            **dataclasses.asdict(plan),
            "cell_records": {str(k): v for k, v in plan.cell_records.items()},
        },
        machine=machine(),
        cpus=doc.pop("cpus"),
    )
    write(args.out, "queues", doc, markdown(doc))


if __name__ == "__main__":
    main()
