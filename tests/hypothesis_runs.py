"""Hypothesis settings for the tests that compare two paths (C against Python, a model against
the log): the same examples every run (derandomized, no example database), no deadline (a
loaded CI machine is slow), and the health check for slow generation off."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings


def deterministic(max_examples: int, *also_suppressed: HealthCheck, **more: Any) -> settings:
    """`max_examples` fixed examples; `also_suppressed` health checks besides `too_slow`; `more`
    any other setting (a state machine's `stateful_step_count`)."""
    return settings(
        max_examples=max_examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, *also_suppressed],
        **more,
    )
