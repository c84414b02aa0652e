"""The connections `sluice serve` speaks on: aiohttp's HTTP/1.1 handler and the HTTP/2
protocol, hardened against hostile clients. Errors aiohttp answers itself (a request line,
header or chunk size its parser refuses) become problem+json; a request's headers must arrive
within --header-read-timeout; bad requests are logged on one line each, at most
`BAD_REQUESTS_PER_MINUTE` a minute, so that no client can flood the log."""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import Any, Protocol

from aiohttp import HttpVersion11, web
from aiohttp.http import HttpProcessingError, RawRequestMessage
from aiohttp.streams import StreamReader

from gateway.http.aiohttp_private import ErrInfo, HandlerInternals, buffered_body
from gateway.http.fast_path import FAST_PATH, Answer, FastPath, Ready
from gateway.http.http2 import H2Protocol, turn_flushes
from gateway.http.memo import Memo
from gateway.http.per_loop import PerLoop
from gateway.http.problem import PROBLEM_JSON, Problem, one_line, problem_body, problem_response
from gateway.http.problem import status_code as code_of

BAD_REQUESTS_PER_MINUTE = 20
_FAST_METHODS = ("POST", "GET")  # what the fast path may serve: produces and fetches
# Heads of produces the fast path took, with aiohttp's parse of each and its body's length: a client
# repeats its head byte for byte from one produce to the next, and the parse costs ~6 µs of a
# ~50 µs produce. Process-wide, as gateway.http.http2 remembers header blocks; parses are immutable.
_KNOWN_HEAD_MAX_BYTES = 2048
_KNOWN_HEADS: Memo[bytes, tuple[RawRequestMessage, int]] = Memo(512)
_HELD_BACK_MAX_BYTES = 256 * 1024  # beyond this, aiohttp's parser and its pausing take over
_MADE_TOGETHER = 16  # answers made at once posted in one write, at most (then: does it read?)
_LINGER_S = 1.0  # what still arrives after a 408 is read and dropped this long, then it closes
_STARTS = (b"POST /", b"GET /")  # how a request the fast path may take begins
log = logging.getLogger(__name__)


def _may_start(unparsed: bytes, at: int) -> bool:
    """Whether the few bytes from `at` (fewer than a start of `_STARTS`) may begin one."""
    rest = unparsed[at:]
    return len(rest) < len(_STARTS[0]) and any(start.startswith(rest) for start in _STARTS)


class _Written(Protocol):
    """What TurnAnswers writes: an answer's HTTP/1.1 bytes, made as it is written (made as it
    was posted, a turn's answers each cost ~1 µs more), and whether the connection then ends."""

    @property
    def closes(self) -> bool: ...

    def http1(self) -> bytes: ...


class _Joined:
    """Answers made at once, written as one: a run of the same answer (a connection's
    pipelined produces refused alike) made once."""

    __slots__ = ("_answers",)

    def __init__(self, answers: list[Answer]) -> None:
        self._answers = answers

    @property
    def closes(self) -> bool:
        return self._answers[-1].closes  # a pass stops at an answer that closes

    def http1(self) -> bytes:
        parts = []
        last: Answer | None = None
        made = b""
        for answer in self._answers:
            if answer is not last:
                last, made = answer, answer.http1()
            parts.append(made)
        return b"".join(parts)


def _joined(made: list[Answer]) -> _Written:
    """Answers made at once as one to write (the list is the result's from then on)."""
    return made[0] if len(made) == 1 else _Joined(made)


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


class TurnAnswers:
    """The fast path's HTTP/1.1 answers of one loop turn, written one after another at its end.

    Written back to back, the answers reach clients that are still reading the previous ones;
    written as each request finishes (or, for refusals, as each read's pass ends), nearly every
    write wakes a client that had gone idle meanwhile, which costs more than the write
    (docs/PERFORMANCE.md, "Answers written together"). A connection goes on to its next request
    after its answers are written, all of them before any goes on; what it answers then waits
    for the next turn's end (served there, a connection's whole backlog would lengthen this
    turn, and every admitted produce's wait with it). One whose write or next step fails is
    reported to the loop's exception handler and closed, and the others still go on."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        # (connection, what it is answered, whether it goes on to its next request then)
        self._waiting: list[tuple[Http1Connection, _Written, bool]] = []
        self._handle: asyncio.Handle | None = None

    def post(self, connection: Http1Connection, answer: _Written, goes_on: bool = True) -> None:
        """Write `answer` at the turn's end; `goes_on`: the connection's next request waits for
        it (not when a request behind it is in progress already, answered after it)."""
        if not self._waiting:
            self._handle = self._loop.call_soon(self._write_all)
        self._waiting.append((connection, answer, goes_on))

    def write_now(self) -> None:
        """Write the answers posted so far now, not at the end of the turn: those a group
        commit's write made, which would otherwise wait for the loop's next pass."""
        if self._waiting:
            assert self._handle is not None
            self._handle.cancel()
            self._write_all()

    def _write_all(self) -> None:
        self._handle = None
        waiting, self._waiting = self._waiting, []
        written = []
        for connection, answer, _ in waiting:
            try:
                written.append(connection._send(answer.http1(), answer.closes))
            except Exception as exc:
                self._failed(connection, exc)
                written.append(False)
        for (connection, _, goes_on), done in zip(waiting, written, strict=True):
            if goes_on:
                try:
                    connection._fast_answered(done)
                except Exception as exc:
                    self._failed(connection, exc)

    def _failed(self, connection: Http1Connection, exc: Exception) -> None:
        self._loop.call_exception_handler(
            {"message": "a fast answer's write failed", "exception": exc, "protocol": connection}
        )
        connection.force_close()


class _Posted:
    """A connection's `_fast_task` while refusals it made wait in `TurnAnswers`: its next
    requests wait for their write, as behind a request in progress (nothing to cancel)."""

    __slots__ = ()

    def cancel(self) -> bool:
        return False


_POSTED = _Posted()


# The loop's TurnAnswers.
turn_answers: PerLoop[TurnAnswers] = PerLoop(TurnAnswers)


def turn_sender(loop: asyncio.AbstractEventLoop) -> Callable[[], None]:
    """What sends the fast path's answers made so far in a pass of `loop`, HTTP/1.1 and HTTP/2
    alike, rather than a pass later: the group commit calls it after each write (gateway.app).
    The loop's objects are looked up once, not at every write."""
    answers, flushes = turn_answers(loop), turn_flushes(loop)

    def send_now() -> None:
        answers.write_now()
        flushes.flush_now()

    return send_now


class _ProblemErrors(HandlerInternals):
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

    The plain produces and fetches it parses are served by the fast path (gateway.http.fast_path,
    given at startup) when aiohttp's request loop is idle: that loop is woken only for the
    requests the fast path leaves it, so answers keep the order of their requests."""

    __slots__ = (
        "_answers",
        "_body_deadline",
        "_fast",
        "_fast_idle",
        "_fast_task",
        "_header_deadline",
        "_header_timeout",
        "_last_payload",
        "_loop_started",
        "_reads",
        "_unparsed",
        "_unparsed_at",
        "_unparsed_base",
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
        # Set while the first queued request's body is still arriving and the fast path waits
        # for it (`_dispatch`); aiohttp's loop takes the request if it has not come by then.
        self._body_deadline: asyncio.TimerHandle | None = None
        self._last_payload: StreamReader | None = None  # the newest request's body
        # Set at the Application's startup, which runs before any connection is accepted.
        self._fast: FastPath[Any] | None = None if app is None else app.get(FAST_PATH)
        # The fast path's request in progress, or _POSTED: refusals made wait to be written.
        self._fast_task: asyncio.Future[Any] | _Posted | None = None
        self._answers = turn_answers(self.event_loop)
        self._fast_idle: asyncio.Future[None] | None = None  # start() waits for the fast path
        # whether aiohttp's request loop (start) has begun, or has a request it will take
        self._loop_started = False
        # Bytes held back from aiohttp's parser, which has ended every request it was given and
        # has none queued: requests whose head the fast path took before are served from here
        # (`_serve_unparsed`). None once the parser takes everything, for the connection's life.
        self._unparsed: bytes | None = None if self._fast is None else b""
        self._unparsed_at = 0  # where in `_unparsed` the next request starts
        # When the held-back bytes were read: (where each read began, counted from the
        # connection's first held-back byte, loop time), oldest first; a request's wait counts
        # from the read that brought its first byte. Nearly always one: a new list each read
        # costs less than a deque's 64-slot block emptied and filled again.
        self._unparsed_base = 0  # where `_unparsed` begins, counted so
        self._reads: list[tuple[int, float]] = []

    async def start(self) -> None:
        """aiohttp's request loop, begun once the fast path is done with the connection's first
        requests (the first arrives before this task first runs; until the loop begins, the
        fast path may take the next ones too, so that none waits for this task to run)."""
        while self._fast_task is not None or self._body_deadline is not None:
            self._fast_idle = self.event_loop.create_future()
            await self._fast_idle
        self._loop_started = True
        await super().start()

    def data_received(self, data: bytes) -> None:
        unparsed = self._unparsed
        if unparsed is None:
            self._feed(data)
        elif not self.closing:  # as aiohttp ignores bytes after the end
            at = self._unparsed_at
            reads = self._reads
            if at < len(unparsed):
                self._unparsed_base += at
                reads.append((self._unparsed_base + len(unparsed) - at, self.event_loop.time()))
                unparsed = self._unparsed = unparsed[at:] + data
            else:
                self._unparsed_base += len(unparsed)
                self._reads = [(self._unparsed_base, self.event_loop.time())]
                unparsed = self._unparsed = data
            self._unparsed_at = 0
            if len(unparsed) > _HELD_BACK_MAX_BYTES:  # pipelined behind a long answer
                self._stop_holding_back()
                return
            self._serve_unparsed()
            unparsed, at = self._unparsed, self._unparsed_at
            if unparsed is not None and at < len(unparsed):  # waits behind the fast request
                if unparsed.find(b"\r\n\r\n", at) >= 0:
                    self._stop_header_deadline()  # the head came whole, in time
                elif self._header_deadline is None:
                    self._start_header_deadline()  # as aiohttp's parser would, on a partial head

    def _feed(self, data: bytes) -> None:
        """aiohttp's parser takes `data`; the first request it queued goes to the fast path or
        to aiohttp's loop."""
        self.parse_quietly(data)  # aiohttp's loop is woken below, if the fast path leaves it one
        self._dispatch()

    def _serve_unparsed(self) -> None:
        """While the fast path serves nothing here, give it each held-back request whose head
        it took before (aiohttp's parse of that head, remembered: `_KNOWN_HEADS`); at the first
        other request, let aiohttp's parser take it and every byte after. The answers made at
        once (refusals) of one pass are posted together for the turn's end (`_post_made`): in
        a flood a connection's pipelined produces are refused several in a row, and a write
        each, waking a client each time, cost more than the refusals' own work. The pass stops
        after `_MADE_TOGETHER` of them (to see whether the client reads), or at a request
        behind them that it can neither refuse nor start, which waits for their write."""
        unparsed, at, fast = self._unparsed, self._unparsed_at, self._fast
        if unparsed is None or at == len(unparsed) or fast is None or self.closing:
            return
        now = self.event_loop.time()
        made: list[Answer] = []  # answers made at once, not posted yet
        hand_over: Callable[[], None] | None = None  # to aiohttp's parser, unless `made` waits
        taken_here = 0
        while at < len(unparsed) and self._fast_task is None:
            if not unparsed.startswith(_STARTS, at) and not _may_start(unparsed, at):
                hand_over = self._stop_holding_back  # not a request the fast path takes
                break
            end = unparsed.find(b"\r\n\r\n", at) + 4
            if end == 3:  # no whole head yet
                if len(unparsed) - at > _KNOWN_HEAD_MAX_BYTES:
                    hand_over = self._stop_holding_back
                elif self._header_deadline is None:
                    self._start_header_deadline()
                break
            known = _KNOWN_HEADS.get(unparsed[at:end])
            if known is None:
                hand_over = functools.partial(self._parse_first, unparsed[at:], end - at)
                break
            message, length = known
            body = unparsed[end : end + length]
            if len(body) != length:  # a body still arriving
                hand_over = self._stop_holding_back
                break
            reads = self._reads
            waited = now - reads[0][1] if len(reads) == 1 else self._waited(at, now)
            taken = fast.take(message.method, message.path, message.headers, body, self, waited)
            if taken is None:  # one the path leaves
                hand_over = self._stop_holding_back
                break
            if self._header_deadline is not None:
                self._stop_header_deadline()
            at = self._unparsed_at = end + length
            taken_here += 1
            if not self._answer_taken(fast, taken, made):
                break
        if taken_here:
            self.count_requests(taken_here)
        if made:
            self._post_made(_joined(made))  # what the parser would take waits for their write
        elif hand_over is not None:
            hand_over()

    def _answer_taken(self, fast: FastPath[Any], taken: object, made: list[Answer]) -> bool:
        """Answer a request the fast path took, in a pass over a connection's requests: a
        refusal joins `made`; one to start has the refusals made before it posted first (its
        answer waits for the group commit). Whether the pass may go on to the next request."""
        answer = fast.immediate(taken)
        if answer is None:
            if made:
                self._answers.post(self, _joined(made.copy()), False)
                made.clear()
            self._start_fast(fast, taken)
            return False
        made.append(answer)
        return not answer.closes and len(made) < _MADE_TOGETHER

    def _post_made(self, answer: _Written) -> None:
        """Post answers made at once for the turn's end; the connection's next requests wait
        for their write, as behind a request in progress."""
        self.request_started()
        self._fast_task = _POSTED
        self._answers.post(self, answer)

    def _waited(self, at: int, now: float) -> float:
        """How long, at `now`, the held-back request at `at` has waited since its first byte was
        read: one pipelined behind others waits for theirs to be answered first."""
        start = self._unparsed_base + at
        reads = self._reads
        while len(reads) > 1 and reads[1][0] <= start:
            del reads[0]
        return now - reads[0][1]

    def _parse_first(self, unparsed: bytes, end: int) -> None:
        """aiohttp's parser takes the held-back bytes, whose head (ending at `end`) is new. If
        they were exactly one request and the fast path took it, the parser has ended it and
        the next bytes are held back again; a produce's head is remembered with the parse."""
        self._unparsed = None
        self.parse_quietly(unparsed)
        queue = self.request_queue
        first = queue[0] if len(queue) == 1 else None
        self._dispatch()
        if first is None or queue or self._fast_task is None:
            return  # not one request, or aiohttp's loop has it: the parser keeps the connection
        message, payload = first
        if (
            isinstance(message, ErrInfo)
            or message.upgrade
            or self.upgraded
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
        """Give the queued requests to the fast path while it takes them, else wake aiohttp's
        loop for the first; only when that loop waits idle (or has not begun) and the fast path
        serves nothing on this connection. Refusals are posted for the turn's end together, as
        the held-back requests' are (at most `_MADE_TOGETHER`); a request behind them that the
        fast path starts is answered after them, and one it leaves follows their write."""
        if self._unparsed is not None:  # nothing is queued: the held-back bytes are next
            self._serve_unparsed()
            return
        waiter = self.loop_waiter
        idle = not self._loop_started if waiter is None else not waiter.done()
        queue = self.request_queue
        fast = self._fast
        if fast is None or self._fast_task is not None or not idle or not queue:
            return
        made: list[Answer] = []  # answers made at once, not posted yet
        while queue:
            message, payload = queue[0]
            taken = None
            if (
                not isinstance(message, ErrInfo)
                and message.method in _FAST_METHODS
                and message.version == HttpVersion11
                and not message.should_close
                and not self.closing
            ):
                if not payload.is_eof():
                    if self._body_may_come(message):
                        break  # taken when it is whole, or aiohttp's loop takes it
                else:
                    body = buffered_body(payload)
                    taken = fast.take(message.method, message.path, message.headers, body, self)
            self._stop_body_deadline()
            if taken is None:
                if not made:
                    if waiter is not None:
                        waiter.set_result(None)
                    return
                break  # aiohttp's loop takes it once the refusals are written
            self.take_first_queued()
            if not self._answer_taken(fast, taken, made):
                break
        if made:
            self._post_made(_joined(made))
        # Re-parses what the parser held back, which comes back here (data_received(b"")) and
        # must not take the next request while these answers are to come.
        self.resume_reading_if_drained()

    def _body_may_come(self, message: RawRequestMessage) -> bool:
        """Whether the fast path waits for the rest of the first queued request's body (a
        produce's, arriving in several reads) rather than give the request to aiohttp's loop:
        while it has a length that fits what is held back, the body's reader has not paused
        reading, and for at most the header timeout (`_body_too_slow`). Never for a client
        that waits for `100 Continue` before it sends its body: aiohttp's loop answers that."""
        if self.reading_paused or message.chunked or "Expect" in message.headers:
            return False
        length = message.headers.get("Content-Length", "")
        if not length.isdigit() or int(length) > _HELD_BACK_MAX_BYTES:
            return False
        if self._body_deadline is None:
            self._body_deadline = self.event_loop.call_later(
                self._header_timeout, self._body_too_slow
            )
        return True

    def _body_too_slow(self) -> None:
        """The body did not come whole in time: aiohttp's loop takes the request, its body
        read under the body timeout."""
        self._body_deadline = None
        waiter = self.loop_waiter
        if waiter is None:
            # The loop has not begun: until start() runs, `_dispatch` must not wait for this
            # body again (a byte arriving meanwhile would start a new deadline).
            self._loop_started = True
        elif not waiter.done():
            waiter.set_result(None)
        self._wake_start()

    def _stop_body_deadline(self) -> None:
        """The body came (or the connection went): start() may go on once nothing else holds
        it."""
        if self._body_deadline is not None:
            self._body_deadline.cancel()
            self._body_deadline = None
            self._wake_start()

    def _start_fast(self, fast: FastPath[Any], taken: object) -> None:
        self.request_started()
        self._fast_task = fast.start(taken, self, self._fast_answer_ready, self.event_loop)

    def _fast_answer_ready(self, answer: Answer | None) -> None:
        """The fast answer goes out with this loop turn's others (`TurnAnswers`); None: the
        connection went, its request was cancelled, and nothing follows on it."""
        if answer is None:
            self._fast_served()
            self._wake_start()
            return
        self._answers.post(self, answer)

    def _send(self, data: bytes, closes: bool) -> bool:
        """Write answers' bytes (TurnAnswers calls this at the end of the loop turn, or in a
        group commit's pass); the connection then ends (`closes`, or it was closing) or its
        idle timer restarts. False when the connection went meanwhile."""
        transport = self.transport
        if transport is None:
            return False
        transport.write(data)
        if closes or self.closing:
            self.force_close()
        else:
            self.keep_alive_from_now()
        return True

    def _fast_answered(self, written: bool) -> None:
        """After the answer's write: the connection's next request, once a client that does
        not read has taken the answer (its next requests wait until then)."""
        if written and self.writing_paused and self.transport is not None:
            self._fast_task = self.event_loop.create_task(self._drain_then_go_on())
            return
        self._fast_served()
        if written:
            self._dispatch()
        self._wake_start()

    async def _drain_then_go_on(self) -> None:
        try:
            await self.wait_drained()
        except BaseException as exc:
            self._fast_served()
            self._wake_start()
            if isinstance(exc, ConnectionError):  # gone while its answer waited to drain
                return
            raise
        self._fast_served()
        self._dispatch()
        self._wake_start()

    def _fast_served(self) -> None:
        self._fast_task = None
        self.request_finished()

    def _wake_start(self) -> None:
        """start() waits for the fast path to hold none of the connection's requests."""
        idle = self._fast_idle
        if (
            self._fast_task is None
            and self._body_deadline is None
            and idle is not None
            and not idle.done()
        ):
            idle.set_result(None)

    def busy(self) -> bool:
        return self._fast_task is not None or self._body_deadline is not None

    def parse(self, data: bytes) -> None:
        queue = self.request_queue
        queued = len(queue)
        body = self._last_payload
        # Bytes that only end a body (it arrived in several segments) start no deadline:
        # they are not the next request's headers, and a connection then idle would be
        # answered a 408 nobody asked for (read by its client as the next request's answer).
        reading_body = body is not None and not body.is_eof()
        super().parse(data)
        new = [queue[i] for i in range(queued, len(queue))]
        if new:
            self._stop_header_deadline()
        for message, payload in new:
            if isinstance(message, ErrInfo):
                self._refuse_body(message)
            else:
                self._last_payload = payload
        body = self._last_payload
        if (
            data
            and not new
            and not reading_body
            and self._header_deadline is None
            and not self.closing
            and (body is None or body.is_eof())
        ):
            self._start_header_deadline()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._stop_header_deadline()
        self._stop_body_deadline()
        if self._fast_task is not None:  # as aiohttp cancels its handler: a long-poll lets go
            self._fast_task.cancel()
        super().connection_lost(exc)

    def _refuse_body(self, error: ErrInfo) -> None:
        """A parse error inside a body a handler reads (or will): fail that body, which the
        handler answers 400, and close after it; aiohttp would answer only once the handler
        gave up waiting. Other parse errors stay aiohttp's (answered by handle_error)."""
        body = self._last_payload
        if body is None or body.is_eof():
            return
        queue = self.request_queue
        if not self.request_in_progress and all(p is not body for _, p in queue):
            return  # the handler answered already (aiohttp is dropping the rest): close then
        for index, (message, _) in enumerate(queue):
            if message is error:
                del queue[index]
                break
        body.set_exception(error.exc)
        body.feed_eof()  # nothing more comes: aiohttp's lingering close does not wait for it
        self.close()

    def _start_header_deadline(self) -> None:
        self._header_deadline = self.event_loop.call_later(
            self._header_timeout, self._headers_too_slow
        )

    def _stop_header_deadline(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _headers_too_slow(self) -> None:
        self._header_deadline = None
        transport = self.transport
        if transport is None or self.force_closing:
            return
        peer = transport.get_extra_info("peername")
        detail = f"the request headers did not arrive within {self._header_timeout:g} s"
        BAD_REQUESTS.note(peer[0] if isinstance(peer, tuple) else None, detail)
        if self.request_in_progress:  # pipelined behind an answer being made: close after it
            self.close()
            return
        body = problem_body(Problem(408, "REQUEST_TIMED_OUT", detail))
        transport.write(
            b"HTTP/1.1 408 Request Timeout\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n%s" % (PROBLEM_JSON.encode(), len(body), body)
        )
        self.linger_then_close(_LINGER_S)  # a client still trickling its headers reads the 408


class Http2Connection(_ProblemErrors, H2Protocol):
    """The HTTP/2 protocol with the same problem+json error answers; the plain produces and
    fetches of its streams are served by the fast path."""

    __slots__ = ("_fast",)

    def __init__(
        self, manager: web.Server, *, app: web.Application | None = None, **kwargs: Any
    ) -> None:
        super().__init__(manager, **kwargs)
        self._fast: FastPath[Any] | None = None if app is None else app.get(FAST_PATH)

    def may_answer_directly(self, message: RawRequestMessage) -> bool:
        return (
            self._fast is not None
            and message.method in _FAST_METHODS
            and "Expect" not in message.headers  # the fast path leaves it: 100-continue goes out
        )

    def start_directly(
        self, message: RawRequestMessage, body: bytes, answered: Ready
    ) -> asyncio.Future[Any] | Answer | None:
        fast = self._fast
        if fast is None:
            return None
        taken = fast.take(message.method, message.path, message.headers, body, self)
        if taken is None:
            return None
        answer = fast.immediate(taken)
        return answer if answer is not None else fast.start(taken, self, answered, self.event_loop)
