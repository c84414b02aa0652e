"""A socket in memory for driving a protocol without the network (HTTP/2 connections in unit
tests and the frame fuzzer)."""

from __future__ import annotations

import asyncio
from typing import Any


class MemoryTransport(asyncio.Transport):
    """Keeps what is written, for a client to take; refuses writes once closed; closes as a
    real socket does, telling its protocol in a later turn of `loop`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, protocol: asyncio.Protocol) -> None:
        super().__init__()
        self.loop = loop
        self.protocol = protocol
        self.out = bytearray()
        self.closing = False

    def take(self) -> bytes:
        out, self.out = bytes(self.out), bytearray()
        return out

    def write(self, data: Any) -> None:
        assert not self.closing, "write after close"
        self.out += data

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            self.loop.call_soon(self.protocol.connection_lost, None)

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass
