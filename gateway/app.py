"""The aiohttp Application: state, lifecycle and middleware; routes live in *_api modules."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from gateway.api import acls as auth_api
from gateway.api import cluster_plans as cluster_plans_api
from gateway.api import console, cors, events
from gateway.api import groups as groups_api
from gateway.api import internal as internal_api
from gateway.api import ops as ops_api
from gateway.api import quotas as quota_api
from gateway.api import reassignments as reassignments_api
from gateway.api import records as records_api
from gateway.api import share_groups as share_groups_api
from gateway.api import subscriptions as subscriptions_api
from gateway.api import topics as topics_api
from gateway.api import transactions as transactions_api
from gateway.api.admission import (
    ADMISSION,
    Admission,
    AdmissionCollector,
    admission_middleware,
)
from gateway.api.backpressure import INFLIGHT, InflightBodies, backpressure_middleware
from gateway.api.fast_routes import FastRoutes
from gateway.api.forwarding import forwarding_middleware
from gateway.api.problems import problem_middleware
from gateway.api.rest_proxy import routes as rest_proxy_api
from gateway.api.schema_registry import routes as schema_registry_api
from gateway.auth.middleware import AUTH, auth_middleware
from gateway.auth.throttle import quota_middleware
from gateway.http.connections import turn_sender
from gateway.http.fast_path import FAST_PATH
from gateway.metrics.collectors import FastRoutesCollector
from gateway.settings import Settings
from gateway.state import GATEWAY, SETTINGS, Gateway

LINGERING_S = 0.5
log = logging.getLogger(__name__)


def build_app(settings: Settings) -> web.Application:
    """A ready-to-run Application; the engine opens in on_startup and closes in on_cleanup."""
    app = web.Application(
        client_max_size=settings.max_request_bytes,
        middlewares=[
            _metrics_middleware,
            problem_middleware,
            *([auth_middleware] if settings.auth else []),  # refusals rendered and counted
            quota_middleware,  # by the principal auth found, before any body is read
            admission_middleware,
            backpressure_middleware,
            forwarding_middleware,
        ],
        handler_args={
            # After answering early (413, 408), read and drop the unsent body only this long.
            "lingering_time": LINGERING_S,
            # Bodies arrive as sent: read_body undoes Content-Encoding off the event loop and
            # bounded, where aiohttp's parser would inflate inline and answer in plain text.
            "auto_decompress": False,
            "keepalive_timeout": settings.keepalive_timeout_s,
        },
    )
    app[SETTINGS] = settings
    app[INFLIGHT] = InflightBodies(settings)
    app[ADMISSION] = Admission(settings)
    cors.setup(app)  # outermost: preflights carry no credentials
    app.on_startup.append(_open)
    app.on_shutdown.append(_release_long_polls)
    app.on_cleanup.append(_close)
    topics_api.add_routes(app)
    records_api.add_routes(app)
    events.add_routes(app)
    groups_api.add_routes(app)
    share_groups_api.add_routes(app)
    transactions_api.add_routes(app)
    subscriptions_api.add_routes(app)
    ops_api.add_routes(app)
    reassignments_api.add_routes(app)
    cluster_plans_api.add_routes(app)
    internal_api.add_routes(app)
    auth_api.add_routes(app)
    quota_api.add_routes(app)
    rest_proxy_api.add_routes(app)
    schema_registry_api.add_routes(app)
    if not settings.no_console:
        console.add_routes(app)
    return app


@web.middleware
async def _metrics_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    return await request.app[GATEWAY].metrics.observe(request, handler)


async def _open(app: web.Application) -> None:
    gateway = app[GATEWAY] = await Gateway.open(app[SETTINGS])
    app[AUTH] = gateway.auth
    # Whatever the options: the fast routes make the middlewares' checks themselves.
    admission = app[ADMISSION]
    loop = asyncio.get_running_loop()
    admission.start(loop)
    fast = FastRoutes(gateway, app[INFLIGHT], admission, app.get(cors.POLICY))
    app[FAST_PATH] = fast
    # What a group commit's write answered goes out in that pass, not the loop's next one.
    gateway.replicas.appends.on_written.append(turn_sender(loop))
    gateway.metrics.registry.register(FastRoutesCollector(lambda: fast.served))
    gateway.metrics.registry.register(AdmissionCollector(admission))
    gateway.ready = True


async def _release_long_polls(app: web.Application) -> None:
    """Shutdown's drain: long-polls parked here answer with what they have, and those this
    node forwarded elsewhere give up their wait (gateway.api.forwarding)."""
    gateway = app[GATEWAY]
    gateway.ready = False
    gateway.draining.set()
    gateway.notifier.wake_all()
    gateway.groups.close()
    gateway.share_groups.close()
    gateway.transactions.close()


async def _close(app: web.Application) -> None:
    app[ADMISSION].stop()
    gateway = app[GATEWAY]
    await gateway.close()
    if gateway.broker.manager.closed_cleanly:
        log.info("data directory closed cleanly")
    else:  # a storage failure: the engine said which partitions (KAFKA_STORAGE_ERROR)
        log.error("data directory closed, not cleanly: the next start checks the logs")
