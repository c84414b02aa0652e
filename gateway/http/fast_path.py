"""The fast path as the transport sees it: what a connection offers each complete request to
before aiohttp's Application, and the answer it gets back. The transport knows only these
shapes; what serves them (gateway.api.fast_routes) is handed to the connections at startup,
under the Application's `FAST_PATH` key."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

from aiohttp import web

Taken = TypeVar("Taken")


class Answer(Protocol):
    """An answer made without aiohttp's Request: its status, body and both wire forms."""

    @property
    def status(self) -> int: ...

    @property
    def body(self) -> bytes: ...

    @property
    def closes(self) -> bool:
        """Whether the connection ends after it (an HTTP/1.1 error leaving the stream unknown)."""
        ...

    def http1(self) -> bytes:
        """The whole HTTP/1.1 answer, head and body."""
        ...

    def h2_headers(self) -> list[tuple[bytes, bytes]]:
        """The HTTP/2 header list, without connection-specific fields."""
        ...


Ready = Callable[[Answer | None], None]


class FastPath(Protocol[Taken]):
    """Takes the requests it can answer without aiohttp's Request, router and middlewares."""

    def take(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes,
        connection: object,
        waited_s: float = 0.0,
    ) -> Taken | None:
        """What this complete request asks for, if the fast path answers it; None: the
        Application does. `waited_s`: how long it has waited since it was read (pipelined
        behind others on its connection)."""
        ...

    def immediate(self, taken: Taken) -> Answer | None:
        """The answer `take` already made, when nothing is left to do (a refusal): the
        connection sends it with no future or task instead of calling `start` (HTTP/1.1 with
        the turn's other answers, in order; HTTP/2 on its stream)."""
        ...

    def start(
        self, taken: Taken, connection: object, ready: Ready, loop: asyncio.AbstractEventLoop
    ) -> asyncio.Future[Any]:
        """Begin answering what `take` accepted and `immediate` did not answer: `ready` gets
        the answer, or None once the returned future was cancelled (the client went)."""
        ...


# Set by the Application at startup, before any connection is accepted.
FAST_PATH = web.AppKey[FastPath[Any]]("fast_path")
