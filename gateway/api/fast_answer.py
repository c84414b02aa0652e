"""The fast routes' answer: status, content type, body and headers, written as aiohttp would
write them (HTTP/1.1 bytes, or an HTTP/2 header list), the common heads made once."""

from __future__ import annotations

from dataclasses import dataclass, field
from http import HTTPStatus

from aiohttp.helpers import rfc822_formatted_time
from aiohttp.http import SERVER_SOFTWARE

from gateway.http.memo import Memo
from gateway.http.problem import PROBLEM_JSON, Problem, problem_body

Headers = tuple[tuple[str, str], ...]
# The head up to its length of an HTTP/1.1 answer, per (status, content type, headers): a few
# statuses of the four types the fast routes answer with, and their refusals' headers.
_HTTP1_HEADS: Memo[tuple[int, str, Headers], bytes] = Memo(256)
_SERVER = SERVER_SOFTWARE.encode()
# The same for HTTP/2: the status and content-type fields per (status, content type).
_H2_FIELDS: dict[tuple[int, str], tuple[tuple[bytes, bytes], tuple[bytes, bytes]]] = {}
_SERVER_FIELD = (b"server", _SERVER)
# The date field of this second's answers, with aiohttp's text of it (the same str all second).
_date: tuple[str, tuple[bytes, bytes]] = ("", (b"date", b""))


@dataclass(slots=True)
class FastAnswer:
    """What the fast routes answer: status, content type, body, extra headers, and the CORS
    headers, which aiohttp adds after its own (Server), as the answer is prepared."""

    status: int
    content_type: str
    body: bytes
    headers: Headers = ()
    cors: Headers = ()
    # Whether the answer ends the connection (an error that leaves the stream unknown): read
    # once or twice for every answer written, so worked out as the answer is made.
    closes: bool = field(init=False)

    def __post_init__(self) -> None:
        self.closes = ("Connection", "close") in self.headers

    def http1(self) -> bytes:
        """The whole HTTP/1.1 answer, headers as aiohttp writes them."""
        key = (self.status, self.content_type, self.headers)
        head = _HTTP1_HEADS.get(key)
        if head is None:
            extra = "".join(f"{name}: {value}\r\n" for name, value in self.headers)
            head = (
                f"HTTP/1.1 {self.status} {HTTPStatus(self.status).phrase}\r\n{extra}"
                f"Content-Type: {self.content_type}\r\nContent-Length: "
            ).encode("latin-1")
            _HTTP1_HEADS.remember(key, head)
        body = self.body
        date = _date_field()[1]
        if self.cors:
            late = "".join(f"{name}: {value}\r\n" for name, value in self.cors).encode("latin-1")
            return b"%s%d\r\nDate: %s\r\nServer: %s\r\n%s\r\n%s" % (
                head, len(body), date, _SERVER, late, body
            )  # fmt: skip
        return b"%s%d\r\nDate: %s\r\nServer: %s\r\n\r\n%s" % (head, len(body), date, _SERVER, body)

    def h2_headers(self) -> list[tuple[bytes, bytes]]:
        """The answer's HTTP/2 header list (no connection-specific fields)."""
        known = _H2_FIELDS.get((self.status, self.content_type))
        if known is None:
            known = _H2_FIELDS[self.status, self.content_type] = (
                (b":status", b"%d" % self.status),
                (b"content-type", self.content_type.encode()),
            )
        status, content_type = known
        length = (b"content-length", b"%d" % len(self.body))
        date = _date_field()
        if not self.headers and not self.cors:
            return [status, content_type, length, date, _SERVER_FIELD]
        extra = [
            (name.lower().encode(), value.encode())
            for name, value in self.headers
            if name.lower() != "connection"
        ]
        late = [(name.lower().encode(), value.encode()) for name, value in self.cors]
        return [status, *extra, content_type, length, date, _SERVER_FIELD, *late]


@dataclass(slots=True)
class _ThisSecond:
    """What a repeated answer made for one Date text and one set of CORS headers."""

    date: str
    cors: Headers
    http1: bytes | None = None
    h2_headers: list[tuple[bytes, bytes]] | None = None


@dataclass(slots=True)
class RepeatedAnswer(FastAnswer):
    """An answer given again and again (the admission's refusal): its HTTP/1.1 bytes and its
    HTTP/2 header list are made once a second, not for each request it answers."""

    _made: _ThisSecond | None = field(default=None, init=False, repr=False)

    def http1(self) -> bytes:
        made = self._this_second()
        if made.http1 is None:
            made.http1 = FastAnswer.http1(self)
        return made.http1

    def h2_headers(self) -> list[tuple[bytes, bytes]]:
        made = self._this_second()
        if made.h2_headers is None:
            made.h2_headers = FastAnswer.h2_headers(self)
        return made.h2_headers

    def _this_second(self) -> _ThisSecond:
        text = rfc822_formatted_time()  # the same str all second
        made = self._made
        if made is None or made.date is not text or made.cors is not self.cors:
            made = self._made = _ThisSecond(text, self.cors)
        return made


def _date_field() -> tuple[bytes, bytes]:
    """This second's HTTP/2 date field, encoded once a second rather than once an answer."""
    global _date
    text = rfc822_formatted_time()
    if text is not _date[0]:
        _date = (text, (b"date", text.encode()))
    return _date[1]


def problem_answer(problem: Problem) -> FastAnswer:
    """A problem+json answer, with the problem's headers."""
    return FastAnswer(
        problem.status, PROBLEM_JSON, problem_body(problem), tuple(problem.headers.items())
    )
