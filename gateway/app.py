"""The aiohttp Application: state, lifecycle and middleware; routes live in *_api modules."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from engine import offsets_topic
from engine.background import BackgroundTasks
from engine.manager import LogManager
from engine.notify import ChangeNotifier
from gateway import groups_api, ops_api, records_api, topics_api
from gateway.group_coordinator import GroupCoordinator
from gateway.idempotency import IdempotencyStore
from gateway.metrics import Metrics
from gateway.problems import problem_middleware
from gateway.produce import Producer
from gateway.settings import Settings
from gateway.state import GATEWAY, SETTINGS, Gateway

LINGERING_S = 0.5
log = logging.getLogger(__name__)


def build_app(settings: Settings) -> web.Application:
    """A ready-to-run Application; the engine opens in on_startup and closes in on_cleanup."""
    app = web.Application(
        client_max_size=settings.max_request_bytes,
        middlewares=[_metrics_middleware, problem_middleware],
        # After answering early (413, 408), read and drop the unsent body only this long.
        handler_args={"lingering_time": LINGERING_S},
    )
    app[SETTINGS] = settings
    app.on_startup.append(_open)
    app.on_shutdown.append(_release_long_polls)
    app.on_cleanup.append(_close)
    topics_api.add_routes(app)
    records_api.add_routes(app)
    groups_api.add_routes(app)
    ops_api.add_routes(app)
    return app


@web.middleware
async def _metrics_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    return await request.app[GATEWAY].metrics.observe(request, handler)


async def _open(app: web.Application) -> None:
    settings = app[SETTINGS]
    manager = await asyncio.to_thread(LogManager, settings.data_dir)
    for partition_log in manager.all_logs():
        # A single replica is its own ISR: as leader, everything in its log is committed.
        partition_log.advance_high_watermark(partition_log.log_end_offset)
    notifier = ChangeNotifier()
    store = IdempotencyStore(settings.idempotency_window_s, settings.idempotency_max_entries)
    rebuilt = await asyncio.to_thread(store.rebuild, manager)
    groups = GroupCoordinator(
        manager,
        notifier,
        settings.offsets_topic_partitions,
        settings.group_min_session_timeout_ms,
        settings.group_max_session_timeout_ms,
        settings.group_max_members,
    )
    stored = await asyncio.to_thread(offsets_topic.replay, groups.offsets.partitions)
    groups.restore(stored)
    groups.topics_changed()  # the topics as they are now, not as the groups last saw them
    metrics = Metrics(manager, lambda: notifier, lambda: groups)
    gateway = Gateway(
        settings=settings,
        manager=manager,
        metrics=metrics,
        idempotency=store,
        producer=Producer(manager, metrics, store),
        notifier=notifier,
        background=BackgroundTasks(manager),
        groups=groups,
    )
    app[GATEWAY] = gateway
    gateway.background.start()
    gateway.ready = True
    log.info(
        "data directory %s opened (%s), %d topics, %d idempotency keys, %d groups",
        settings.data_dir,
        "after a clean shutdown" if manager.had_clean_shutdown else "recovered or new",
        len(manager.topics),
        rebuilt,
        len(stored),
    )


async def _release_long_polls(app: web.Application) -> None:
    gateway = app[GATEWAY]
    gateway.ready = False
    gateway.notifier.wake_all()
    gateway.groups.close()


async def _close(app: web.Application) -> None:
    gateway = app[GATEWAY]
    gateway.groups.flush()
    await gateway.background.stop()
    await asyncio.to_thread(gateway.manager.close)
    log.info("data directory closed cleanly")
