"""One HTTP/1.1 answer read from the bytes its connection receives, sans-IO (as h11's readers
are): the status line and headers, then the body framed by Content-Length, by chunks, or by
the close; interim 1xx answers skipped. Both HTTP/1.1 clients read their answers with it: the
calls to other nodes (`replication.http1`) and the push deliveries
(`groups.subscriptions.client`).

A body's bytes are kept as the connection handed them (no copy while the answer comes in) and
joined once; an answer's end inside a read is reported, so the bytes after it (the next
pipelined answer's) stay with the caller."""

from __future__ import annotations

MAX_HEAD = 64 * 1024  # an answer's status line and headers, or its trailers
MAX_CHUNK_LINE = 1024  # a chunk's size line
_NO_BODY = frozenset({204, 304})
_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_END, _TRAILERS, _TO_CLOSE, _DONE = range(8)


class AnswerError(OSError):
    """The answer is not HTTP/1.x that can be read, or the connection closed before it was
    whole."""


class AnswerReader:
    """Reads one answer from the bytes `feed` is given, until it is `done`."""

    __slots__ = (
        "_line", "_parts", "bodiless", "body_limit", "close", "cut", "headers", "length",
        "reason", "size", "state", "status",
    )  # fmt: skip

    def __init__(self, body_limit: int | None = None, *, bodiless: bool = False) -> None:
        """`body_limit`: the body bytes read (an answer past it ends there, `cut`, with one
        byte more kept, and its connection cannot be reused); `bodiless`: the answer to a
        HEAD request."""
        self.body_limit = body_limit
        self.bodiless = bodiless
        self.state = _HEAD
        self.status = 0
        self.reason = ""
        self.headers: list[tuple[str, str]] = []
        self.close = False  # the connection cannot be reused after this answer
        self.cut = False  # the body passed `body_limit`: only its first bytes were kept
        self.length = 0  # body (or chunk) bytes still to come
        self.size = 0  # body bytes kept
        self._parts: list[bytes] = []
        self._line = bytearray()  # the start of a head or line split between two reads

    @property
    def done(self) -> bool:
        """Whole, or cut at the body limit."""
        return self.state == _DONE or self.cut

    @property
    def reusable(self) -> bool:
        """Whether the connection may carry another request after this answer."""
        return self.state == _DONE and not self.close and not self.cut

    def body(self) -> bytes:
        return self._parts[0] if len(self._parts) == 1 else b"".join(self._parts)

    def feed(self, data: bytes) -> int:
        """Read what `data` holds of this answer; the number of its bytes used: all of them
        unless the answer ended before its end. AnswerError if it is not HTTP/1.x."""
        pos, end = 0, len(data)
        while not self.done:
            state = self.state
            if state in (_LENGTH, _CHUNK_DATA):
                take = min(self.length, end - pos)
                if take:
                    kept = self._keep(data[pos : pos + take])
                    if self.cut:
                        return pos + kept
                    pos += take
                    self.length -= take
                if self.length:
                    return pos
                self.state = _DONE if state == _LENGTH else _CHUNK_END
            elif state == _TO_CLOSE:
                kept = self._keep(data[pos:]) if pos < end else 0
                return pos + kept
            elif pos == end:
                return pos
            elif state == _HEAD:
                head, pos = self._until(data, pos, b"\r\n\r\n", MAX_HEAD, "an answer's head")
                if head is None:
                    return pos
                self._head(head)
            else:
                limit = MAX_HEAD if state == _TRAILERS else MAX_CHUNK_LINE
                line, pos = self._until(data, pos, b"\r\n", limit, "a chunk's line")
                if line is None:
                    return pos
                self._line_read(state, line)
        return pos

    def closed(self) -> None:
        """The connection closed: an answer read to the close is whole; AnswerError if this
        one is not."""
        if self.state == _TO_CLOSE:
            self.state, self.close = _DONE, True
        elif not self.done:
            raise AnswerError("the connection closed before the answer was whole")

    def _until(
        self, data: bytes, pos: int, terminator: bytes, limit: int, what: str
    ) -> tuple[bytes | None, int]:
        """The bytes up to `terminator` (which is skipped) and the position after it; None
        and the end of `data` while it has not come (what came is kept)."""
        if self._line:
            pending = len(self._line)
            self._line += data[pos:]
            found = self._line.find(terminator, max(pending - len(terminator) + 1, 0))
            if found < 0:
                if len(self._line) > limit:
                    raise AnswerError(f"{what} exceeds {limit} bytes")
                return None, len(data)
            text = bytes(self._line[:found])
            self._line.clear()
            return text, pos + found + len(terminator) - pending
        found = data.find(terminator, pos)
        if found < 0:
            self._line += data[pos:]
            if len(self._line) > limit:
                raise AnswerError(f"{what} exceeds {limit} bytes")
            return None, len(data)
        if found - pos > limit:
            raise AnswerError(f"{what} exceeds {limit} bytes")
        return data[pos:found], found + len(terminator)

    def _keep(self, part: bytes) -> int:
        """Keep a body's bytes (up to one past the limit, which tells it was longer); how
        many were kept."""
        limit = self.body_limit
        if limit is not None and self.size + len(part) > limit:
            part = part[: limit + 1 - self.size]
            self.cut = True
        if part:
            self._parts.append(part)
            self.size += len(part)
        return len(part)

    def _line_read(self, state: int, line: bytes) -> None:
        if state == _CHUNK_SIZE:
            size = line.split(b";", 1)[0].strip()
            try:
                self.length = int(size, 16)
            except ValueError:
                raise AnswerError(f"a chunk size that is not hex: {size[:20]!r}") from None
            if self.length < 0:
                raise AnswerError(f"a negative chunk size: {size[:20]!r}")
            self.state = _CHUNK_DATA if self.length else _TRAILERS
        elif state == _CHUNK_END:
            if line:
                raise AnswerError("a chunk not ended by CRLF")
            self.state = _CHUNK_SIZE
        elif not line:  # the blank line after the trailers
            self.state = _DONE

    def _head(self, head: bytes) -> None:
        lines = head.decode("utf-8", "replace").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        code, _, reason = rest.partition(" ")
        if version not in ("HTTP/1.1", "HTTP/1.0") or len(code) != 3 or not code.isdigit():
            raise AnswerError(f"not an HTTP/1.x status line: {lines[0][:100]!r}")
        status = int(code)
        if 100 <= status < 200:
            return  # an interim answer: the real one follows
        headers = []
        framing: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon or not name or name != name.strip():
                raise AnswerError(f"a malformed header line: {line[:100]!r}")
            value = value.strip()
            headers.append((name, value))
            lowered = name.lower()
            if lowered in ("connection", "content-length", "transfer-encoding"):
                framing[lowered] = value.lower()
        self.status, self.reason, self.headers = status, reason, headers
        connection = framing.get("connection", "")
        self.close = version == "HTTP/1.0" and "keep-alive" not in connection
        self.close = self.close or "close" in connection
        if self.bodiless or status in _NO_BODY:
            self.state = _DONE
        elif framing.get("transfer-encoding", "").endswith("chunked"):
            self.state = _CHUNK_SIZE
        elif "content-length" in framing:
            length = framing["content-length"]
            if not length.isdigit():
                raise AnswerError(f"a Content-Length that is not a number: {length[:20]!r}")
            self.length = int(length)
            self.state = _LENGTH if self.length else _DONE
        else:
            self.state, self.close = _TO_CLOSE, True
