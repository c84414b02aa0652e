"""The connections `sluice serve` speaks on: aiohttp's HTTP/1.1 handler and the HTTP/2
protocol, hardened against hostile clients. Errors aiohttp answers itself (a request line,
header or chunk size its parser refuses) become problem+json; a request's headers must arrive
within --header-read-timeout; bad requests are logged on one line each, at most
`BAD_REQUESTS_PER_MINUTE` a minute, so that no client can flood the log."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from aiohttp import web
from aiohttp.http import HttpProcessingError
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler, _ErrInfo

from gateway.http2 import H2Protocol
from gateway.problems import PROBLEM_JSON, Problem, one_line, problem_body, problem_response
from gateway.problems import status_code as code_of

BAD_REQUESTS_PER_MINUTE = 20
log = logging.getLogger(__name__)


class BadRequestLog:
    """One line per bad request, at most `per_minute` a minute; the lines left out are counted
    and the count logged when the next minute's first bad request comes."""

    def __init__(
        self, per_minute: int = BAD_REQUESTS_PER_MINUTE, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.per_minute = per_minute
        self.clock = clock
        self.window_start = -math.inf
        self.logged = 0
        self.suppressed = 0

    def note(self, peer: str | None, what: str) -> None:
        now = self.clock()
        if now - self.window_start >= 60:
            if self.suppressed:
                log.info("suppressed %d more bad requests in the last minute", self.suppressed)
            self.window_start, self.logged, self.suppressed = now, 0, 0
        if self.logged < self.per_minute:
            self.logged += 1
            log.info("bad request from %s: %s", peer or "unknown peer", what)
        else:
            self.suppressed += 1


BAD_REQUESTS = BadRequestLog()


class _ProblemErrors(RequestHandler):
    """aiohttp's own error answers (a request it could not parse, a handler failing outside the
    middlewares) as problem+json; a client's error logged briefly, a server's with its trace."""

    __slots__ = ()

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        phrase = HTTPStatus(status).phrase
        if status < 500:
            parsed = exc.message if isinstance(exc, HttpProcessingError) else str(exc or "")
            detail = one_line(message or parsed) or phrase
            BAD_REQUESTS.note(request.remote, detail)
            code = "MALFORMED_REQUEST" if status == 400 else code_of(status)
        else:
            self.log_exception("Error handling request from %s", request.remote, exc_info=exc)
            detail, code = phrase.lower(), "INTERNAL_ERROR" if status == 500 else code_of(status)
        if request.writer.output_size > 0:
            raise ConnectionError("the answer has begun: no error answer can follow")
        response = problem_response(Problem(status, code, detail))
        response.force_close()
        return response


class Http1Connection(_ProblemErrors):
    """aiohttp's HTTP/1.1 handler with a deadline on each request's headers (408, then close)
    and a body the parser refuses (a malformed chunk size) failing its reader, so the handler
    answers 400 at once instead of waiting for the body timeout."""

    __slots__ = ("_header_deadline", "_header_timeout", "_last_payload")

    def __init__(self, manager: web.Server, *, header_timeout: float, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._header_timeout = header_timeout
        self._header_deadline: asyncio.TimerHandle | None = None
        self._last_payload: StreamReader | None = None  # the newest request's body

    def data_received(self, data: bytes) -> None:
        queued = len(self._messages)
        body = self._last_payload
        # Bytes that only end a body (it arrived in several segments) start no deadline:
        # they are not the next request's headers, and a connection then idle would be
        # answered a 408 nobody asked for (read by its client as the next request's answer).
        reading_body = body is not None and not body.is_eof()
        super().data_received(data)
        new = [self._messages[i] for i in range(queued, len(self._messages))]
        if new:
            self._stop_header_deadline()
        for message, payload in new:
            if isinstance(message, _ErrInfo):
                self._refuse_body(message)
            else:
                self._last_payload = payload
        body = self._last_payload
        if (
            data
            and not new
            and not reading_body
            and self._header_deadline is None
            and not self._close
            and (body is None or body.is_eof())
        ):
            self._header_deadline = self._loop.call_later(
                self._header_timeout, self._headers_too_slow
            )

    def connection_lost(self, exc: BaseException | None) -> None:
        self._stop_header_deadline()
        super().connection_lost(exc)

    def _refuse_body(self, error: _ErrInfo) -> None:
        """A parse error inside a body a handler reads (or will): fail that body, which the
        handler answers 400, and close after it; aiohttp would answer only once the handler
        gave up waiting. Other parse errors stay aiohttp's (answered by handle_error)."""
        body = self._last_payload
        if body is None or body.is_eof():
            return
        if not self._request_in_progress and all(p is not body for _, p in self._messages):
            return  # the handler answered already (aiohttp is dropping the rest): close then
        for index, (message, _) in enumerate(self._messages):
            if message is error:
                del self._messages[index]
                break
        body.set_exception(error.exc)
        body.feed_eof()  # nothing more comes: aiohttp's lingering close does not wait for it
        self.close()

    def _stop_header_deadline(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _headers_too_slow(self) -> None:
        self._header_deadline = None
        transport = self.transport
        if transport is None or self._force_close:
            return
        peer = transport.get_extra_info("peername")
        detail = f"the request headers did not arrive within {self._header_timeout:g} s"
        BAD_REQUESTS.note(peer[0] if isinstance(peer, tuple) else None, detail)
        if self._request_in_progress:  # pipelined behind an answer being made: close after it
            self.close()
            return
        body = problem_body(Problem(408, "REQUEST_TIMED_OUT", detail))
        transport.write(
            b"HTTP/1.1 408 Request Timeout\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n%s" % (PROBLEM_JSON.encode(), len(body), body)
        )
        self.force_close()


class Http2Connection(_ProblemErrors, H2Protocol):
    """The HTTP/2 protocol with the same problem+json error answers."""

    __slots__ = ()
