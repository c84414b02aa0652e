"""The gateway's shared state, reachable from every handler through the Application."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from engine.background import BackgroundTasks
from engine.manager import LogManager
from engine.notify import ChangeNotifier
from gateway.group_coordinator import GroupCoordinator
from gateway.idempotency import IdempotencyStore
from gateway.metrics import Metrics
from gateway.produce import Producer
from gateway.settings import Settings


@dataclass
class Gateway:
    """Everything a request handler needs; built at startup, closed at cleanup."""

    settings: Settings
    manager: LogManager
    metrics: Metrics
    idempotency: IdempotencyStore
    producer: Producer
    notifier: ChangeNotifier
    background: BackgroundTasks
    groups: GroupCoordinator
    ready: bool = False
    port: int = 0  # the bound port, once listening (settings.port may be 0)


GATEWAY = web.AppKey("gateway", Gateway)
SETTINGS = web.AppKey("settings", Settings)


def gateway_of(request: web.Request) -> Gateway:
    return request.app[GATEWAY]
