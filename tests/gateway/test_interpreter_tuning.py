"""The interpreter settings the server applies once it is up: the collector's thresholds and
frozen startup objects, and the GIL's switch interval that bounds the loop's wait for it."""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator

import pytest

from gateway.server import GC_THRESHOLDS, SWITCH_INTERVAL_S, tune_interpreter


@pytest.fixture
def interpreter() -> Iterator[None]:
    thresholds, interval = gc.get_threshold(), sys.getswitchinterval()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)
    sys.setswitchinterval(interval)


def test_the_server_freezes_startup_objects_and_shortens_the_gil_switch(
    interpreter: None,
) -> None:
    kept = [object() for _ in range(10)]
    tune_interpreter()
    assert gc.get_freeze_count() >= len(kept)
    assert gc.get_threshold() == GC_THRESHOLDS
    assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_S)
    assert SWITCH_INTERVAL_S < 0.005  # below Python's default, which the loop waited for
