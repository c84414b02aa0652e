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

from aiohttp import HttpVersion11, web
from aiohttp.http import HttpProcessingError, RawRequestMessage
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler, _ErrInfo

from gateway.api.fast_routes import LANE, Lane, LaneAnswer, LaneRequest, body_of
from gateway.http.http2 import DirectAnswer, H2Protocol
from gateway.http.memo import Memo
from gateway.http.per_loop import PerLoop
from gateway.http.problem import PROBLEM_JSON, Problem, one_line, problem_body, problem_response
from gateway.http.problem import status_code as code_of

BAD_REQUESTS_PER_MINUTE = 20
_LANE_METHODS = ("POST", "GET")  # what the lane may serve: produces and fetches
# Heads of produces the lane took, with aiohttp's parse of each and its body's length: a client
# repeats its head byte for byte from one produce to the next, and the parse costs ~6 µs of a
# ~50 µs produce. Process-wide, as gateway.http.http2 remembers header blocks; parses are immutable.
_KNOWN_HEAD_MAX_BYTES = 2048
_KNOWN_HEADS: Memo[bytes, tuple[RawRequestMessage, int]] = Memo(512)
_HELD_BACK_MAX_BYTES = 256 * 1024  # beyond this, aiohttp's parser and its pausing take over
_STARTS = (b"POST /", b"GET /")  # how a request the lane may take begins
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


class LaneAnswers:
    """The lane's HTTP/1.1 answers of one loop turn, written one after another at its end.

    Written back to back, the answers reach clients that are still reading the previous ones;
    written as each request finishes, nearly every write wakes a client that had gone idle
    meanwhile, which on this VM costs more than the write (docs/PERFORMANCE.md, "Answers
    written together"). Each connection goes on to its next request after all are written."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._waiting: list[tuple[Http1Connection, LaneAnswer]] = []

    def post(self, connection: Http1Connection, answer: LaneAnswer) -> None:
        if not self._waiting:
            self._loop.call_soon(self._write_all)
        self._waiting.append((connection, answer))

    def _write_all(self) -> None:
        waiting, self._waiting = self._waiting, []
        written = [connection._write_lane_answer(answer) for connection, answer in waiting]
        for (connection, _), done in zip(waiting, written, strict=True):
            connection._lane_answered(done)


# The loop's LaneAnswers.
lane_answers: PerLoop[LaneAnswers] = PerLoop(LaneAnswers)


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
    answers 400 at once instead of waiting for the body timeout.

    The plain produces and fetches it parses are served by the lane (gateway.api.fast_routes) when
    aiohttp's request loop is idle: that loop is woken only for the requests the lane leaves
    it, so answers keep the order of their requests."""

    __slots__ = (
        "_answers",
        "_header_deadline",
        "_header_timeout",
        "_lane",
        "_lane_idle",
        "_lane_task",
        "_last_payload",
        "_loop_started",
        "_unparsed",
        "_unparsed_at",
    )

    def __init__(
        self,
        manager: web.Server,
        *,
        header_timeout: float,
        app: web.Application | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(manager, **kwargs)
        self._header_timeout = header_timeout
        self._header_deadline: asyncio.TimerHandle | None = None
        self._last_payload: StreamReader | None = None  # the newest request's body
        # Built at the Application's startup, which runs before any connection is accepted.
        self._lane = None if app is None else app.get(LANE)
        self._lane_task: asyncio.Future[Any] | None = None  # the lane's request in progress
        self._answers = lane_answers(self._loop)
        self._lane_idle: asyncio.Future[None] | None = None  # start() waits for the lane here
        self._loop_started = False  # whether aiohttp's request loop (start) has begun
        # Bytes held back from aiohttp's parser, which has ended every request it was given and
        # has none queued: requests whose head the lane took before are served from here
        # (`_serve_unparsed`). None once the parser takes everything, for the connection's life.
        self._unparsed: bytes | None = None if self._lane is None else b""
        self._unparsed_at = 0  # where in `_unparsed` the next request starts

    async def start(self) -> None:
        """aiohttp's request loop, begun once the lane is done with the connection's first
        requests (the first arrives before this task first runs; until the loop begins, the
        lane may take the next ones too, so that none waits for this task to run)."""
        while self._lane_task is not None:
            self._lane_idle = self._loop.create_future()
            await self._lane_idle
        self._loop_started = True
        await super().start()

    def data_received(self, data: bytes) -> None:
        unparsed = self._unparsed
        if unparsed is None:
            self._feed(data)
        elif not (self._force_close or self._close):  # as aiohttp ignores bytes after the end
            at = self._unparsed_at
            unparsed = self._unparsed = unparsed[at:] + data if at < len(unparsed) else data
            self._unparsed_at = 0
            if len(unparsed) > _HELD_BACK_MAX_BYTES:  # pipelined behind a long answer
                self._stop_holding_back()
                return
            self._serve_unparsed()
            unparsed, at = self._unparsed, self._unparsed_at
            if unparsed is not None and at < len(unparsed):  # waits behind the lane's request
                if unparsed.find(b"\r\n\r\n", at) >= 0:
                    self._stop_header_deadline()  # the head came whole, in time
                elif self._header_deadline is None:
                    self._start_header_deadline()  # as aiohttp's parser would, on a partial head

    def _feed(self, data: bytes) -> None:
        """aiohttp's parser takes `data`; the first request it queued goes to the lane or to
        aiohttp's loop."""
        waiter = self._waiter
        self._waiter = None  # aiohttp's loop is woken below, if the lane leaves it a request
        try:
            self._parse(data)
        finally:
            self._waiter = waiter
        self._dispatch()

    def _serve_unparsed(self) -> None:
        """While the lane serves nothing here, give it each held-back request whose head it
        took before (aiohttp's parse of that head, remembered: `_KNOWN_HEADS`); at the first
        other request, let aiohttp's parser take it and every byte after."""
        while self._lane_task is None and not (self._force_close or self._close):
            unparsed, at = self._unparsed, self._unparsed_at
            if unparsed is None or at == len(unparsed):
                return
            if not any(unparsed.startswith(start[: len(unparsed) - at], at) for start in _STARTS):
                self._stop_holding_back()  # not a request the lane could take: aiohttp answers
                return
            end = unparsed.find(b"\r\n\r\n", at) + 4
            if end == 3:  # no whole head yet
                if len(unparsed) - at > _KNOWN_HEAD_MAX_BYTES:
                    self._stop_holding_back()
                elif self._header_deadline is None:
                    self._start_header_deadline()
                return
            known = _KNOWN_HEADS.get(unparsed[at:end])
            if known is None:
                self._parse_first(unparsed[at:], end - at)
                return
            message, length = known
            body = unparsed[end : end + length]
            lane = self._lane
            taken = None
            if len(body) == length and lane is not None:
                taken = lane.take(message.method, message.path, message.headers, body, self)
            if lane is None or taken is None:  # a body still arriving, or one the lane leaves
                self._stop_holding_back()
                return
            self._stop_header_deadline()
            self._unparsed_at = end + length
            self._request_count += 1
            self._start_lane(lane, taken)

    def _parse_first(self, unparsed: bytes, end: int) -> None:
        """aiohttp's parser takes the held-back bytes, whose head (ending at `end`) is new. If
        they were exactly one request and the lane took it, the parser has ended it and the
        next bytes are held back again; a produce's head is remembered with the parse."""
        self._unparsed = None
        waiter = self._waiter
        self._waiter = None
        try:
            self._parse(unparsed)
        finally:
            self._waiter = waiter
        first = self._messages[0] if len(self._messages) == 1 else None
        self._dispatch()
        if first is None or self._messages or self._lane_task is None:
            return  # not one request, or aiohttp's loop has it: the parser keeps the connection
        message, payload = first
        if (
            isinstance(message, _ErrInfo)
            or message.upgrade
            or self._upgraded
            or len(unparsed) != end + payload.total_bytes
        ):
            return
        self._unparsed, self._unparsed_at = b"", 0
        if message.method == "POST" and not message.chunked and end <= _KNOWN_HEAD_MAX_BYTES:
            _KNOWN_HEADS.remember(unparsed[:end], (message, payload.total_bytes))

    def _stop_holding_back(self) -> None:
        """aiohttp's parser takes the held-back bytes and all that follow (its deadline, limits
        and answers apply from here on)."""
        unparsed, at = self._unparsed, self._unparsed_at
        self._unparsed = None
        if unparsed is not None and at < len(unparsed):
            self._feed(unparsed[at:])

    def _dispatch(self) -> None:
        """Give the first queued request to the lane if it takes it, else wake aiohttp's loop;
        only when that loop waits idle (or has not begun) and the lane serves nothing on this
        connection."""
        if self._unparsed is not None:  # nothing is queued: the held-back bytes are next
            self._serve_unparsed()
            return
        waiter = self._waiter
        idle = not self._loop_started if waiter is None else not waiter.done()
        if self._lane_task is not None or not idle or not self._messages:
            return
        message, payload = self._messages[0]
        lane = self._lane
        taken = None
        if (
            lane is not None
            and not isinstance(message, _ErrInfo)
            and message.method in _LANE_METHODS
            and message.version == HttpVersion11
            and not message.should_close
            and payload.is_eof()
            and not self._close
            and not self._force_close
        ):
            taken = lane.take(message.method, message.path, message.headers, body_of(payload), self)
        if lane is None or taken is None:
            if waiter is not None:
                waiter.set_result(None)
            return
        self._messages.popleft()
        if self._parser is not None:
            self._parser.message_consumed()
        self._start_lane(lane, taken)
        if self._buffer_paused and len(self._messages) <= self._msg_queue_resume_size:
            # Re-parses what the parser held back and comes back here (data_received(b"")):
            # the lane must be busy by then, or it would take the next request too.
            self._resume_reading_if_drained()

    def _start_lane(self, lane: Lane, taken: LaneRequest) -> None:
        self._request_in_progress = True
        self._lane_task = lane.start(taken, self, self._lane_answer_ready, self._loop)

    def _lane_answer_ready(self, answer: LaneAnswer | None) -> None:
        """The lane's answer goes out with this loop turn's others (`LaneAnswers`); None: the
        connection went, its request was cancelled, and nothing follows on it."""
        if answer is None:
            self._lane_served()
            self._wake_start()
            return
        self._answers.post(self, answer)

    def _write_lane_answer(self, answer: LaneAnswer) -> bool:
        """Write the lane's answer (gateway.answers calls this at the end of the loop turn);
        False when the connection went meanwhile."""
        transport = self.transport
        if transport is None:
            return False
        transport.write(answer.http1())
        if answer.closes or self._close or self._force_close:
            self.force_close()
        else:
            self._keep_alive_from_now()
        return True

    def _lane_answered(self, written: bool) -> None:
        """After the answer's write: the connection's next request, once a client that does
        not read has taken the answer (its next requests wait until then)."""
        if written and self._paused and self.transport is not None:
            self._lane_task = self._loop.create_task(self._drain_then_go_on())
            return
        self._lane_served()
        if written:
            self._dispatch()
        self._wake_start()

    async def _drain_then_go_on(self) -> None:
        try:
            await self._drain_helper()
        except BaseException as exc:
            self._lane_served()
            self._wake_start()
            if isinstance(exc, ConnectionError):  # gone while its answer waited to drain
                return
            raise
        self._lane_served()
        self._dispatch()
        self._wake_start()

    def _lane_served(self) -> None:
        self._lane_task = None
        self._request_in_progress = False
        waiter = self._handler_waiter
        if waiter is not None and not waiter.done():  # a shutdown waits for the answer
            waiter.set_result(None)

    def _wake_start(self) -> None:
        """start() waits for the lane to hold none of the connection's requests."""
        idle = self._lane_idle
        if self._lane_task is None and idle is not None and not idle.done():
            idle.set_result(None)

    def _keep_alive_from_now(self) -> None:
        """aiohttp's idle timer, restarted as its loop does after each answer."""
        if self._keepalive_timeout <= 0:
            return
        close_time = self._loop.time() + self._keepalive_timeout
        self._next_keepalive_close_time = close_time
        if self._keepalive_handle is None:
            self._keepalive_handle = self._loop.call_at(close_time, self._process_keepalive)

    def _process_keepalive(self) -> None:
        if self._lane_task is not None:  # busy, not idle: the answer restarts the timer
            self._keepalive_handle = None
            return
        super()._process_keepalive()

    def _parse(self, data: bytes) -> None:
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
            self._start_header_deadline()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._stop_header_deadline()
        if self._lane_task is not None:  # as aiohttp cancels its handler: a long-poll lets go
            self._lane_task.cancel()
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

    def _start_header_deadline(self) -> None:
        self._header_deadline = self._loop.call_later(self._header_timeout, self._headers_too_slow)

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
    """The HTTP/2 protocol with the same problem+json error answers; the plain produces and
    fetches of its streams are served by the lane."""

    __slots__ = ("_lane",)

    def __init__(
        self, manager: web.Server, *, app: web.Application | None = None, **kwargs: Any
    ) -> None:
        super().__init__(manager, **kwargs)
        self._lane = None if app is None else app.get(LANE)

    def may_answer_directly(self, message: RawRequestMessage) -> bool:
        return (
            self._lane is not None
            and message.method in _LANE_METHODS
            and "Expect" not in message.headers  # the lane leaves it: 100-continue goes out
        )

    def start_directly(
        self,
        message: RawRequestMessage,
        body: bytes,
        answered: Callable[[DirectAnswer | None], None],
    ) -> asyncio.Future[Any] | None:
        lane = self._lane
        if lane is None:
            return None
        taken = lane.take(message.method, message.path, message.headers, body, self)
        return None if taken is None else lane.start(taken, self, answered, self._loop)
