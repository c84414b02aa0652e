"""A bounded memory of what a pure function gave for inputs clients repeat (a header block, an
HTTP/1.1 head, a produce target): looked up as a plain dict, forgotten wholesale when full,
since the inputs that matter come back at once."""

from __future__ import annotations

from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Memo(dict[K, V]):
    """A dict that holds at most `limit` entries: `remember` empties it first when full."""

    __slots__ = ("limit",)

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def remember(self, key: K, value: V) -> None:
        if len(self) >= self.limit:
            self.clear()
        self[key] = value
