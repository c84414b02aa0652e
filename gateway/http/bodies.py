"""Request bodies as handlers see them: transfer codings, content codings and charsets Sluice
cannot honour are refused (415), and a Content-Encoding is undone in a worker thread, in
bounded steps that stop as soon as the output passes --max-request-bytes (a 1 MB gzip body
can inflate to 1 GiB)."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Protocol

from aiohttp import web

from gateway.http.problem import Problem

CHUNK = 256 * 1024  # the most one decompressor call may produce
CHARSETS = frozenset({"utf-8", "utf8", "us-ascii"})  # JSON is UTF-8 (RFC 8259), ASCII a subset


class Decompressor(Protocol):
    """What `zlib.decompressobj()` offers and `inflate` uses."""

    @property
    def eof(self) -> bool: ...

    @property
    def unconsumed_tail(self) -> bytes: ...

    @property
    def unused_data(self) -> bytes: ...

    def decompress(self, data: bytes, max_length: int = 0, /) -> bytes: ...


def _gzip(first: bytes) -> Decompressor:
    return zlib.decompressobj(16 + zlib.MAX_WBITS)


def _deflate(first: bytes) -> Decompressor:
    """RFC 9110's deflate is zlib-wrapped, but some clients send raw deflate: the header
    check (CM 8, header a multiple of 31) tells them apart, as browsers do."""
    wrapped = len(first) >= 2 and first[0] & 0x0F == 8 and (first[0] << 8 | first[1]) % 31 == 0
    return zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)


# Content codings undone here, each a decompressor factory given the first bytes it will see.
DECODERS: dict[str, Callable[[bytes], Decompressor]] = {
    "gzip": _gzip,
    "x-gzip": _gzip,
    "deflate": _deflate,
}


def _unsupported(what: str, coding: str) -> Problem:
    return Problem(
        415,
        "UNSUPPORTED_ENCODING",
        f"{what} {coding!r} is not supported: send gzip, deflate or identity",
        headers={"Accept-Encoding": "gzip, deflate"},
    )


def content_codings(request: web.BaseRequest) -> list[str]:
    """The body's codings in the order they were applied; 415 for a transfer coding other than
    chunked, a content coding Sluice cannot undo, or a charset other than UTF-8."""
    for value in request.headers.getall("Transfer-Encoding", ()):
        for coding in value.split(","):
            if coding.strip().lower() not in ("chunked", ""):
                raise _unsupported("Transfer-Encoding", coding.strip())
    charset = request.charset
    if charset is not None and charset.lower() not in CHARSETS:
        raise Problem(
            415,
            "UNSUPPORTED_MEDIA_TYPE",
            f"charset {charset!r} is not supported: bodies are UTF-8",
        )
    codings = []
    for value in request.headers.getall("Content-Encoding", ()):
        for part in value.split(","):
            coding = part.strip().lower()
            if coding in ("identity", ""):
                continue
            if coding not in DECODERS:
                raise _unsupported("Content-Encoding", part.strip())
            codings.append(coding)
    return codings


def inflate(body: bytes, codings: list[str], limit: int) -> bytes:
    """`body` with its content codings undone, the last applied first: 413 as soon as the
    output passes `limit` bytes, 400 if the body is not what its coding says."""
    for coding in reversed(codings):
        body = _decode(body, coding, limit)
    return body


def _decode(data: bytes, coding: str, limit: int) -> bytes:
    if not data:
        return data
    out = bytearray()
    while True:  # once per gzip member: a gzip body may hold several
        decoder = DECODERS[coding](data)
        try:
            while not decoder.eof:
                chunk = decoder.decompress(data, CHUNK)
                data = decoder.unconsumed_tail
                if not chunk and not data:
                    raise _invalid(coding, "it ends before its end marker")
                out += chunk
                if len(out) > limit:
                    raise Problem(
                        413,
                        "REQUEST_TOO_LARGE",
                        f"the body decodes ({coding}) to more than the maximum of {limit} bytes",
                    )
        except zlib.error as exc:
            raise _invalid(coding, str(exc)) from None
        data = decoder.unused_data
        if not data:
            return bytes(out)
        if not coding.endswith("gzip"):
            raise _invalid(coding, "bytes follow its end marker")


def _invalid(coding: str, why: str) -> Problem:
    return Problem(400, "INVALID_ENCODING", f"the body is not valid {coding}: {why}")
