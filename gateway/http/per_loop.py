"""One object per event loop, made on first use: what a loop's turns share (the answers or
flushes due at its end). Tests run several loops in one process, so it is not a global."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class PerLoop(Generic[T]):
    """Call with a loop for its object, made by `factory(loop)` the first time."""

    __slots__ = ("_factory", "_made")

    def __init__(self, factory: Callable[[asyncio.AbstractEventLoop], T]) -> None:
        self._factory = factory
        self._made: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, T] = (
            weakref.WeakKeyDictionary()
        )

    def __call__(self, loop: asyncio.AbstractEventLoop) -> T:
        made = self._made.get(loop)
        if made is None:
            made = self._made[loop] = self._factory(loop)
        return made
