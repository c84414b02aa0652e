"""The limits every fetch (a partition's or a group member's) takes from its query, and the
parked-fetch limit. The long-poll itself is the replica manager's."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from engine.notify import ChangeNotifier
from gateway.params import int_param
from gateway.problems import Problem
from gateway.settings import Settings


@dataclass(frozen=True)
class FetchLimits:
    max_records: int
    max_bytes: int
    min_bytes: int
    timeout_ms: int


def fetch_limits(request: web.Request, settings: Settings) -> FetchLimits:
    """max_records, max_bytes, min_bytes and timeout_ms, with Kafka's defaults, bounded."""
    return FetchLimits(
        max_records=int_param(
            request, "max_records", settings.default_fetch_records, 1, settings.max_fetch_records
        ),
        max_bytes=int_param(
            request, "max_bytes", settings.default_fetch_bytes, 1, settings.max_fetch_bytes
        ),
        min_bytes=int_param(request, "min_bytes", 1, 0, settings.max_fetch_bytes),
        timeout_ms=int_param(
            request, "timeout_ms", settings.default_fetch_wait_ms, 0, settings.max_wait_ms
        ),
    )


def refuse_when_full(notifier: ChangeNotifier, settings: Settings) -> None:
    """503 with Retry-After once max_parked_fetches long-polls are parked on this node."""
    if notifier.parked >= settings.max_parked_fetches:
        raise Problem(
            503,
            "TOO_MANY_WAITING_FETCHES",
            "too many long-polls are parked on this node; retry shortly",
            headers={"Retry-After": "1"},
        )
