"""PerLoop: one object per event loop, made once, and gone with its loop."""

from __future__ import annotations

import asyncio
import gc

from gateway.http.per_loop import PerLoop


def test_each_loop_gets_its_own_object_made_once_and_let_go_with_the_loop() -> None:
    made: list[asyncio.AbstractEventLoop] = []

    def make(loop: asyncio.AbstractEventLoop) -> int:
        made.append(loop)
        return len(made)

    per_loop = PerLoop(make)
    first, second = asyncio.new_event_loop(), asyncio.new_event_loop()
    try:
        assert per_loop(first) == 1 and per_loop(first) == 1
        assert per_loop(second) == 2
        assert made == [first, second]
    finally:
        first.close()
        second.close()
    made.clear()
    del first, second
    gc.collect()
    assert not per_loop._made  # the loops' objects went with them
