"""Failover timing shared by both systems: retry an acknowledged write until one succeeds, and
summarize the trials with nearest-rank percentiles (a failed trial makes the summary an error)."""

from __future__ import annotations

import asyncio
import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

ATTEMPT_S = 1.0  # each write attempt gives up after this long and is sent again
RETRY_PAUSE_S = 0.02  # after a quick refusal, before the next attempt
TRIAL_DEADLINE_S = 30.0  # a failover slower than this fails the trial


class Refused(Exception):
    """A write the server answered with an error (its status or code is the message)."""


async def first_ack(write: Callable[[], Awaitable[object]], started: float) -> dict[str, Any]:
    """Send `write` until it succeeds; seconds from `started` (a `time.monotonic()` taken just
    before the kill) to the first success, the attempts made and what the failed ones raised."""
    failures: Counter[str] = Counter()
    attempts = 0
    while time.monotonic() - started < TRIAL_DEADLINE_S:
        attempts += 1
        try:
            async with asyncio.timeout(ATTEMPT_S):
                await write()
        except Exception as error:  # any refusal or timeout: the failover is not over yet
            failures[str(error) if isinstance(error, Refused) else type(error).__name__] += 1
            await asyncio.sleep(RETRY_PAUSE_S)
            continue
        return {
            "seconds": round(time.monotonic() - started, 3),
            "attempts": attempts,
            "failed_attempts": dict(failures),
        }
    raise TimeoutError(
        f"no acknowledged write within {TRIAL_DEADLINE_S} s ({attempts} attempts: {dict(failures)})"
    )


def nearest_rank(values: list[float], share: float) -> float:
    """The nearest-rank percentile: the smallest value with at least `share` of them at or below."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def summarize(trials: list[dict[str, Any]]) -> dict[str, Any]:
    """p50 / p99 / max over the trials, with every trial; an error row if any trial failed."""
    failed = [t for t in trials if "error" in t]
    if failed or not trials:
        return {
            "error": f"{len(failed)} of {len(trials)} trials failed: "
            + "; ".join(t["error"] for t in failed[:3]),
            "trials": trials,
        }
    seconds = [t["seconds"] for t in trials]
    return {
        "count": len(trials),
        "p50_s": nearest_rank(seconds, 0.50),
        "p99_s": nearest_rank(seconds, 0.99),
        "max_s": max(seconds),
        "min_s": min(seconds),
        "trials": trials,
    }
