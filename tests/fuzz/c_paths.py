"""Running a fuzz target's code once through a C path of gateway.formats.native and once
through the Python path it stands in for."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from gateway.formats import native

T = TypeVar("T")


def both_ways(name: str, stand_in: object, run: Callable[[], T]) -> tuple[T, T]:
    """`run()` with native's `name` as built, then with `stand_in` in its place (what native
    binds when the extension is not built); the two results."""
    built = getattr(native, name)
    with_c = run()
    setattr(native, name, stand_in)
    try:
        return with_c, run()
    finally:
        setattr(native, name, built)
