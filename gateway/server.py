"""`sluice serve`: run the gateway on uvloop until SIGTERM/SIGINT, then shut down cleanly;
SIGHUP reloads certificates, keys and the auth files without dropping connections."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import gc
import logging
import os
import resource
import signal
import ssl
import sys
from collections.abc import Callable
from functools import partial
from typing import Any
from urllib.parse import urlsplit

import uvloop

from engine import heap
from gateway import heap_release, loop_stalls, stop_watchdog
from gateway.api.schema_registry import own_port as schema_registry_port
from gateway.app import build_app
from gateway.auth.tls import ServerTls
from gateway.http.connections import Http1Connection, Http2Connection
from gateway.http.http2 import H2Limits, Http2Site, start_server
from gateway.settings import Settings
from gateway.state import GATEWAY, Gateway
from replication.errors import MetadataUnavailable

SHUTDOWN_TIMEOUT_S = 10.0
STUCK_S = 5.0  # a stop past its bounds by this much is reported (gateway.stop_watchdog)
# Python's default first threshold (700) is below what the requests in flight hold alive (256
# one-record produces: thousands of objects), so every young collection promoted live request
# objects to the older generations, whose collections then cost 7% of the server's CPU
# (docs/PERFORMANCE.md, "Garbage collection"). Reference counting frees nearly everything a
# request allocates; the collector is left the rare cycle.
GC_THRESHOLDS = (10_000, 10, 10)
# A thread beside the loop doing Python (tiering's S3 calls and segment scans, the cleaner)
# keeps the GIL until the loop has waited this long for it, at every system call the loop
# makes: 0.5 ms rather than Python's 5 took the loop's stalls of 10 ms or more under tiering
# from 89 - 125 a minute to 38 - 41 (docs/PERFORMANCE.md, "Loop stalls").
SWITCH_INTERVAL_S = 0.0005
# The kernel grows a process's descriptor table (doubling it) when a descriptor past its size
# is opened, and waits an RCU grace period before it frees the old one: milliseconds on the
# thread that opens, the event loop's for a connection or a segment file. The server grows it
# once at start to its limit, up to this many slots (8 bytes each).
DESCRIPTOR_TABLE = 65_536
log = logging.getLogger("sluice")


def tune_interpreter() -> None:
    """Once the server is up: long-lived objects (modules, routes, the engine's state) leave
    the collector's view and its young collections wait for 10,000 objects, so the collections
    per-request garbage triggers stay short; and the loop waits less for the GIL."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def server_tls(settings: Settings) -> ServerTls | None:
    if settings.tls_cert is None and settings.tls_key is None:
        return None
    if settings.tls_cert is None or settings.tls_key is None:
        raise SystemExit("--tls-cert and --tls-key go together")
    return ServerTls(settings.tls_cert, settings.tls_key, settings.tls_client_ca)


def _reload(tls: ServerTls | None, gateway: Gateway) -> None:
    """SIGHUP: new handshakes get the reloaded certificate; open connections keep theirs."""
    if tls is not None:
        try:
            tls.reload()
        except (OSError, ssl.SSLError) as exc:
            log.error("TLS reload failed, keeping the previous certificate: %s", exc)
    task = asyncio.create_task(gateway.reload())
    gateway.tasks.add(task)
    task.add_done_callback(_reloaded(gateway))


def _reloaded(gateway: Gateway) -> Callable[[asyncio.Task[None]], None]:
    def done(task: asyncio.Task[None]) -> None:
        gateway.tasks.discard(task)
        if not task.cancelled() and task.exception() is None:
            log.info("reloaded on SIGHUP")
        elif not task.cancelled():
            log.error("reload on SIGHUP failed: %s", task.exception())

    return done


async def serve(settings: Settings) -> None:
    """Listen until a signal; then stop accepting, wake long-polls, drain, flush, close.

    A worker (--workers above 1, started by the supervisor) listens twice: on the shared
    --host/--port (SO_REUSEPORT, with TLS if set) and, plain, on its private --advertise
    address, where the other workers forward requests and replicate."""
    app = build_app(settings)
    tls = server_tls(settings)
    context = None if tls is None else tls.context
    protocols: dict[str, Any] = {
        "limits": H2Limits(preface_timeout=settings.header_read_timeout_s).bounded(
            settings.max_connection_inflight_bytes
        ),
        "http1": partial(Http1Connection, header_timeout=settings.header_read_timeout_s, app=app),
        "http2": partial(Http2Connection, app=app),
    }
    private = private_address(settings) if settings.workers > 1 else None
    host, port = private or (settings.host, settings.port)
    try:
        site = await start_server(
            app,
            host,
            port,
            ssl_context=None if private else context,
            backlog=settings.listen_backlog,
            shutdown_timeout=SHUTDOWN_TIMEOUT_S,
            access_log=None,
            **protocols,
        )
    except MetadataUnavailable as exc:
        raise SystemExit(f"sluice: cannot start: {exc}") from None
    except OSError as exc:
        raise SystemExit(f"sluice: cannot listen: {exc.strerror or exc}") from None
    public = site
    if private is not None:
        public = Http2Site(
            site.runner, settings.host, settings.port, ssl_context=context, reuse_port=True,
            backlog=settings.listen_backlog, **protocols,
        )  # fmt: skip
        await public.start()
    gateway = app[GATEWAY]
    gateway.port = public.port
    registry = None
    if settings.schema_registry_port is not None:
        try:
            registry = await schema_registry_port.serve(
                gateway, settings.schema_registry_port, context
            )
        except OSError as exc:
            raise SystemExit(f"sluice: cannot listen for the registry: {exc}") from None
    scheme = "https" if settings.tls_cert else "http"
    await gateway.broker.bound(f"{scheme}://{settings.host}:{public.port}")
    tune_interpreter()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    stalls = None
    if settings.stall_report_ms:
        stalls = loop_stalls.StallWatch(loop, settings.stall_report_ms / 1000)
        stalls.start()
    trimmer = heap_release.HeapTrimmer(settings.heap_trim_s)
    trimmer.start()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, _reload, tls, gateway)
    # Tests and scripts read this line to learn the port (useful with --port 0); a signal
    # sent as soon as they read it already means a clean shutdown.
    print(f"sluice listening on {scheme}://{settings.host}:{public.port}", flush=True)
    await stop.wait()
    log.info("shutting down")
    bound_s = settings.controlled_shutdown_timeout_s + SHUTDOWN_TIMEOUT_S  # handover, drain
    gateway.broker.stopping(bound_s)
    # Past the handover's and the drain's bounds, and the closing's few seconds, it hangs.
    stop_watchdog.arm(bound_s + STUCK_S)
    if settings.cluster and private is None and settings.controlled_shutdown_timeout_s > 0:
        await _controlled_shutdown(gateway, stop, settings.controlled_shutdown_timeout_s)
    log.info("draining: no new connections; long-polls answered, requests in flight finish")
    if private is not None:
        stop.clear()
        await _drain(public, gateway)
        # The supervisor's second SIGTERM says every worker has drained: none forwards here.
        print("sluice drained", flush=True)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(SHUTDOWN_TIMEOUT_S):
                await stop.wait()
    if registry is not None:
        await registry.cleanup()
    await site.runner.cleanup()
    if stalls is not None:
        stalls.stop()
    await trimmer.stop()


async def _controlled_shutdown(gateway: Gateway, stop: asyncio.Event, timeout_s: float) -> None:
    """Before anything stops (requests are still served), have this node's leaderships moved
    to other in-sync replicas (replication.broker's controlled shutdown), at most `timeout_s`;
    a second signal cuts the wait short. /readyz answers 503 from now on, so that a load
    balancer sends no new requests. Workers skip it: they stop together, nothing to move to."""
    gateway.ready = False
    stop.clear()
    handing = asyncio.create_task(gateway.broker.controlled_shutdown(timeout_s))
    again = asyncio.create_task(stop.wait())
    await asyncio.wait({handing, again}, return_when=asyncio.FIRST_COMPLETED)
    again.cancel()
    if not handing.done():
        log.warning("a second signal: stopping without waiting for the handover")
        handing.cancel()
        await asyncio.wait({handing})
    failure = None if handing.cancelled() else handing.exception()
    if failure is not None:  # then the lease's end moves what is left, as without it
        log.error("controlled shutdown failed", exc_info=failure)


def private_address(settings: Settings) -> tuple[str, int]:
    """A worker's own address, where the others reach it: its --advertise URL's."""
    url = urlsplit(settings.advertise or "")
    if url.scheme != "http" or url.hostname is None or url.port is None:
        raise SystemExit("sluice: a worker needs --advertise http://HOST:PORT (its own address)")
    return url.hostname, url.port


async def _drain(public: Http2Site, gateway: Gateway) -> None:
    """A worker's first phase of shutdown: stop taking connections on the shared port and let
    the requests on them finish (long-polls answer now), while still serving what the other
    workers forward, since their own clients' requests may need this worker to finish."""
    await public.stop()
    gateway.ready = False
    gateway.notifier.wake_all()
    gateway.groups.close()
    gateway.share_groups.close()
    gateway.transactions.close()
    server = public.runner.server
    if server is None:
        return
    mine = [
        handler
        for handler in server.connections
        if handler.transport is not None
        and (handler.transport.get_extra_info("sockname") or ("", -1))[1] == public.port
    ]
    await asyncio.gather(*(handler.shutdown(SHUTDOWN_TIMEOUT_S) for handler in mine))


def raise_open_file_limit() -> int:
    """Lift the soft descriptor limit to the hard one: each partition's active segment holds
    a descriptor, and the file cache of closed segments is sized from the limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def reserve_descriptor_table(limit: int) -> int:
    """Grow the descriptor table to `limit` slots (at most DESCRIPTOR_TABLE) before the loop
    runs, so that no accept or open under load waits for the kernel to grow it; its size."""
    size = min(limit, DESCRIPTOR_TABLE)
    probe = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    try:
        # The lowest free descriptor from the top slot on: none in use is replaced.
        os.close(fcntl.fcntl(probe, fcntl.F_DUPFD_CLOEXEC, size - 1))
    except OSError:  # the top slot and all above it are taken, or past the limit: no matter
        pass
    finally:
        os.close(probe)
    return size


def run(settings: Settings) -> None:
    reserve_descriptor_table(raise_open_file_limit())
    heap.limit_arenas(settings.malloc_arenas)  # before the loop starts any thread
    # Workers share the supervisor's stderr: each line says whose it is.
    worker = f"worker {settings.node_id} " if settings.workers > 1 else ""
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format=f"%(asctime)s %(levelname)s {worker}%(name)s %(message)s",
    )
    uvloop.run(serve(settings))
