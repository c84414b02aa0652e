"""`sluice serve`: run the gateway on uvloop until SIGTERM/SIGINT, then shut down cleanly."""

from __future__ import annotations

import asyncio
import gc
import logging
import resource
import signal
import ssl
import sys

import uvloop

from gateway.app import build_app
from gateway.http2 import start_server
from gateway.settings import Settings
from gateway.state import GATEWAY

SHUTDOWN_TIMEOUT_S = 10.0
log = logging.getLogger("sluice")


def tls_context(settings: Settings) -> ssl.SSLContext | None:
    if settings.tls_cert is None and settings.tls_key is None:
        return None
    if settings.tls_cert is None or settings.tls_key is None:
        raise SystemExit("--tls-cert and --tls-key go together")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(settings.tls_cert, settings.tls_key)
    return context


async def serve(settings: Settings) -> None:
    """Listen until a signal; then stop accepting, wake long-polls, drain, flush, close."""
    app = build_app(settings)
    site = await start_server(
        app,
        settings.host,
        settings.port,
        ssl_context=tls_context(settings),
        shutdown_timeout=SHUTDOWN_TIMEOUT_S,
        access_log=None,
    )
    gateway = app[GATEWAY]
    gateway.port = site.port
    scheme = "https" if settings.tls_cert else "http"
    await gateway.broker.bound(f"{scheme}://{settings.host}:{site.port}")
    # Long-lived objects (modules, routes, the engine's state) leave the collector's view, so
    # the collections that per-request garbage triggers stay short.
    gc.freeze()
    # Tests and scripts read this line to learn the port (useful with --port 0).
    print(f"sluice listening on {scheme}://{settings.host}:{site.port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down")
    await site.runner.cleanup()


def raise_open_file_limit() -> int:
    """Lift the soft descriptor limit to the hard one: each open segment holds a descriptor."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def run(settings: Settings) -> None:
    raise_open_file_limit()
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    uvloop.run(serve(settings))
