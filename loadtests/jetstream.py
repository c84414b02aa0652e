"""The cluster section's replicated peer: three Debian `nats-server` processes clustered on
loopback with JetStream, and nats-py clients that publish with acknowledgements and pull.

The clients use nats-py's core publish and subscribe and speak the JetStream API subjects
themselves, one callback per message: `JetStreamContext.publish_async` (a future and a fresh
reply token per message) and `PullSubscription.fetch` (a timed queue read per message) cost the
client about three times the CPU per message, and the client, not the servers, set the figure.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nats
import orjson
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, StorageType, StreamConfig

from gateway.workers.local_cluster import free_port
from loadtests import consumers
from loadtests.consumers import Clock, Shared
from loadtests.failover import ATTEMPT_S, first_ack
from loadtests.rows import VALUE

START_DEADLINE_S = 30.0
SETTLE_DEADLINE_S = 60.0
PULL_EXPIRES_S = 0.2  # a pull that finds fewer messages than its batch ends after this long
STREAM, SUBJECT = "bench", "bench.records"


class NatsServer:
    """One `nats-server -c CONFIG`; its port, store and config survive restarts."""

    def __init__(self, name: str, config: Path, port: int) -> None:
        self.name, self.config, self.port = name, config, port
        self.url = f"nats://127.0.0.1:{port}"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        with self.config.with_suffix(".log").open("ab") as log:
            self.process = subprocess.Popen(
                ["nats-server", "-c", str(self.config)], stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + START_DEADLINE_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"nats-server {self.name} exited; see {self.config}.log")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port)):
                return
            time.sleep(0.05)
        raise RuntimeError(f"nats-server {self.name} did not listen")

    def kill(self) -> None:
        """SIGKILL, as the Sluice node gets."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None


class NatsCluster:
    """`size` JetStream servers (file store each) routed to each other, all under `workdir`."""

    def __init__(self, workdir: Path, size: int = 3) -> None:
        if shutil.which("nats-server") is None:
            raise RuntimeError("nats-server is needed: apt-get install nats-server")
        workdir.mkdir(parents=True, exist_ok=True)
        routes = [free_port() for _ in range(size)]
        route_list = ", ".join(f"nats-route://127.0.0.1:{p}" for p in routes)
        self.servers = []
        for i, route in enumerate(routes):
            name, port = f"n{i}", free_port()
            config = workdir / f"{name}.conf"
            config.write_text(
                f"server_name: {name}\n"
                f"listen: 127.0.0.1:{port}\n"
                f'jetstream {{ store_dir: "{workdir / name}" }}\n'
                f"cluster {{\n  name: bench\n  listen: 127.0.0.1:{route}\n"
                f"  routes: [{route_list}]\n}}\n"
            )
            self.servers.append(NatsServer(name, config, port))

    def start(self) -> None:
        try:
            for server in self.servers:
                server.start()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for server in self.servers:
            server.stop()

    def server(self, name: str) -> NatsServer:
        return next(s for s in self.servers if s.name == name)

    def urls(self, without: str | None = None) -> list[str]:
        """The running servers' client URLs, leaving out `without`."""
        return [s.url for s in self.servers if s.running and s.name != without]

    def pids(self) -> dict[str, int]:
        return {
            f"nats-{s.name}": s.process.pid
            for s in self.servers
            if s.process is not None and s.running
        }


async def _ignore(_: Exception) -> None:
    """nats-py prints every lost connection with a traceback; the trials expect them."""


async def connect(urls: list[str]) -> Client:
    return await nats.connect(servers=urls, connect_timeout=2, error_cb=_ignore)


async def create_stream(urls: list[str], name: str, subject: str) -> None:
    """A file-store stream with three replicas, retried while JetStream's meta group forms."""
    client = await connect(urls)
    try:
        deadline = time.monotonic() + SETTLE_DEADLINE_S
        while True:
            try:
                await client.jetstream().add_stream(
                    StreamConfig(
                        name=name, subjects=[subject], num_replicas=3, storage=StorageType.FILE
                    )
                )
                return
            except (nats.errors.Error, TimeoutError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
    finally:
        await client.close()


async def settled_leader(urls: list[str], stream: str, replicas: int = 3) -> str:
    """Wait until `stream` has a leader and every other replica is online and current."""
    client = await connect(urls)
    last: object = None
    try:
        deadline = time.monotonic() + SETTLE_DEADLINE_S
        while time.monotonic() < deadline:
            with contextlib.suppress(nats.errors.Error, TimeoutError):
                cluster = (await client.jetstream().stream_info(stream)).cluster
                last = cluster
                peers = [] if cluster is None else cluster.replicas or []
                if (
                    cluster is not None
                    and cluster.leader
                    and len(peers) == replicas - 1
                    and all(p.current and not p.offline for p in peers)
                ):
                    return cluster.leader
            await asyncio.sleep(0.1)
    finally:
        await client.close()
    raise TimeoutError(f"stream {stream} did not settle: {last}")


async def create_consumer(urls: list[str], stream: str, durable: str) -> None:
    """A durable pull consumer from the first message, no acks (as a Sluice offset reader)."""
    client = await connect(urls)
    try:
        await client.jetstream().add_consumer(
            stream, ConsumerConfig(durable_name=durable, ack_policy=AckPolicy.NONE)
        )
    finally:
        await client.close()


async def failover_trial(cluster: NatsCluster, *, restart: bool = True) -> dict[str, Any]:
    """SIGKILL the stream leader's server; time until a publish through the others is acked.
    Then, unless `restart` is false (the last trial), start it again and wait until the
    stream's replicas are current."""
    leader = await settled_leader(cluster.urls(), STREAM)
    client = await connect(cluster.urls(without=leader))
    try:
        js = client.jetstream()
        await js.publish(SUBJECT, VALUE, timeout=10)  # the path works before the kill

        async def write() -> None:
            await js.publish(SUBJECT, VALUE, timeout=ATTEMPT_S)

        started = time.monotonic()
        cluster.server(leader).kill()
        outcome = await first_ack(write, started)
        info = (await js.stream_info(STREAM)).cluster
    finally:
        await client.close()
        if restart and not cluster.server(leader).running:
            cluster.server(leader).start()
    if restart:
        await settled_leader(cluster.urls(), STREAM)
    new_leader = None if info is None else info.leader
    return {"killed": leader, "new_leader": new_leader, **outcome}


async def _publish(
    params: dict[str, Any], shared: Shared, clock: Clock, ready: Callable[[], None]
) -> int:
    """Publish `messages` records with at most `window` unacknowledged, checking every ack."""
    client = await connect(params["servers"])
    count, window = params["messages"], params["window"]
    inbox = client.new_inbox()
    acked = 0
    refused: list[bytes] = []
    room, done = asyncio.Event(), asyncio.Event()

    async def on_ack(msg: Msg) -> None:
        nonlocal acked
        acked += 1
        if b'"error"' in msg.data or (msg.headers and "Status" in msg.headers):
            refused.append(msg.data or repr(msg.headers).encode())
        room.set()
        if acked == count:
            done.set()

    await client.subscribe(inbox, cb=on_ack)
    ready()
    try:
        for sent in range(count):
            while sent - acked >= window:
                room.clear()
                await room.wait()
            await client.publish(params["subject"], VALUE, reply=inbox)
        await done.wait()
    finally:
        await client.close()
    clock.saw(acked)
    shared.add(acked)
    if refused:
        raise RuntimeError(f"{len(refused)} publishes refused: {refused[0][:200]!r}")
    return acked


async def _fetch(
    params: dict[str, Any], shared: Shared, clock: Clock, ready: Callable[[], None]
) -> int:
    """Pull batches of `max_records` from a durable consumer, one pull in flight, until the
    workers together have every message; messages are counted, not decoded."""
    client = await connect(params["servers"])
    batch = params["max_records"]
    pull = f"$JS.API.CONSUMER.MSG.NEXT.{params['stream']}.{params['durable']}"
    request = orjson.dumps({"batch": batch, "expires": int(PULL_EXPIRES_S * 1e9)})
    inbox = client.new_inbox()
    total = due = 0
    answered = asyncio.Event()

    async def on_message(msg: Msg) -> None:
        nonlocal total, due
        if msg.headers and "Status" in msg.headers:  # 404 no messages, 408 pull expired
            answered.set()
            return
        total += 1
        due -= 1
        if due == 0:
            answered.set()

    await client.subscribe(inbox, cb=on_message)
    ready()
    try:
        while not shared.done():
            before, due = total, batch
            answered.clear()
            await client.publish(pull, request, reply=inbox)
            async with asyncio.timeout(PULL_EXPIRES_S + 10):
                await answered.wait()
            clock.saw(total - before)
            shared.add(total - before)
    finally:
        await client.close()
    return total


# run_workers forks its workers from this process: they find these in the shared registry.
consumers.WORKERS.update({"jetstream_publish": _publish, "jetstream_fetch": _fetch})
