"""TurnAnswers: the fast routes' HTTP/1.1 answers of one loop turn are written back to back at its
end, and only then does each connection go on to its next request; those a group commit's write
made go out at once (`write_now`), as do HTTP/2 connections' frames due (`TurnFlushes`)."""

from __future__ import annotations

import asyncio
import re
from typing import cast

import pytest

from gateway.api import fast_answer
from gateway.api.fast_answer import FastAnswer
from gateway.http import connections
from gateway.http.connections import Http1Connection, TurnAnswers, turn_answers, turn_sender
from gateway.http.http2 import H2Protocol, turn_flushes


class _Connection:
    """Records what TurnAnswers asks of a connection, in one shared list."""

    def __init__(self, name: str, events: list[str], alive: bool = True) -> None:
        self.name, self.events, self.alive = name, events, alive

    def _send(self, data: bytes, closes: bool) -> bool:
        self.events.append(f"write {self.name} {int(data[9:12])}")
        return self.alive

    def _fast_answered(self, written: bool) -> None:
        self.events.append(f"next {self.name} {written}")
        if self.name == "broken next":
            raise RuntimeError("its next request failed")

    def force_close(self) -> None:
        self.events.append(f"close {self.name}")


class _Broken(_Connection):
    def _send(self, data: bytes, closes: bool) -> bool:
        raise RuntimeError("the write failed")


async def test_a_turns_answers_are_all_written_before_any_connection_goes_on() -> None:
    events: list[str] = []
    answers = TurnAnswers(asyncio.get_running_loop())
    for name, alive in (("a", True), ("b", False), ("c", True)):
        connection = cast(Http1Connection, _Connection(name, events, alive))
        answers.post(connection, FastAnswer(200, "application/json", b"{}"))
        assert events == []  # nothing is written while the turn goes on
    await asyncio.sleep(0)
    assert events == [
        "write a 200",
        "write b 200",
        "write c 200",
        "next a True",
        "next b False",  # went meanwhile: nothing follows on it
        "next c True",
    ]
    events.clear()
    answers.post(cast(Http1Connection, _Connection("d", events)), FastAnswer(202, "x", b""))
    await asyncio.sleep(0)
    assert events == ["write d 202", "next d True"]  # the next turn's are written in theirs


async def test_answers_written_now_are_not_written_again_at_the_turns_end() -> None:
    """`write_now` (after a group commit's write) writes what was posted at once; the turn's
    end then has nothing left, and an answer posted after it waits for the end again."""
    events: list[str] = []
    answers = TurnAnswers(asyncio.get_running_loop())
    answers.write_now()  # nothing posted: nothing to do
    answers.post(cast(Http1Connection, _Connection("a", events)), FastAnswer(200, "x", b""))
    answers.write_now()
    assert events == ["write a 200", "next a True"]
    answers.post(cast(Http1Connection, _Connection("b", events)), FastAnswer(201, "x", b""))
    assert events[2:] == []
    await asyncio.sleep(0)
    assert events[2:] == ["write b 201", "next b True"]


async def test_refusals_posted_ahead_of_a_request_in_progress_leave_it_waiting() -> None:
    """Answers posted without `goes_on` (refusals made before a produce now in progress) are
    written in their place, and only the answer that ends the wait lets the connection go on."""
    events: list[str] = []
    answers = TurnAnswers(asyncio.get_running_loop())
    connection = cast(Http1Connection, _Connection("a", events))
    answers.post(connection, FastAnswer(503, "x", b""), False)
    answers.post(connection, FastAnswer(200, "x", b""))
    answers.write_now()
    assert events == ["write a 503", "write a 200", "next a True"]


class _Goes(_Connection):
    """Answers its next request (a refusal) as it goes on."""

    def __init__(self, name: str, events: list[str], answers: TurnAnswers) -> None:
        super().__init__(name, events)
        self.answers = answers

    def _fast_answered(self, written: bool) -> None:
        super()._fast_answered(written)
        if len(self.events) < 4:
            self.answers.post(cast(Http1Connection, self), FastAnswer(503, "x", b""))


async def test_what_a_connection_answers_as_it_goes_on_waits_for_the_next_turn() -> None:
    """A connection's next answer, made as it goes on in the write's pass, is written at the
    next turn's end: that pass stays as long as the answers it was given."""
    events: list[str] = []
    answers = TurnAnswers(asyncio.get_running_loop())
    answers.post(cast(Http1Connection, _Goes("a", events, answers)), FastAnswer(200, "x", b""))
    answers.write_now()
    assert events == ["write a 200", "next a True"]
    await asyncio.sleep(0)
    assert events == ["write a 200", "next a True", "write a 503", "next a True"]


class _Flushed:
    """Records the flushes TurnFlushes makes of an HTTP/2 connection."""

    def __init__(self, events: list[str]) -> None:
        self.events = events

    def _flush(self) -> None:
        self.events.append("flush")


async def test_a_pass_answers_of_both_protocols_go_out_now_and_not_again() -> None:
    """`turn_sender`'s function, which the group commit calls after each write: the loop's HTTP/1.1
    answers posted so far are written and its HTTP/2 connections with frames due flushed."""
    events: list[str] = []
    loop = asyncio.get_running_loop()
    turn_flushes(loop).add(cast(H2Protocol, _Flushed(events)))
    turn_answers(loop).post(
        cast(Http1Connection, _Connection("a", events)), FastAnswer(200, "x", b"")
    )
    turn_sender(loop)()
    assert events == ["write a 200", "next a True", "flush"]
    await asyncio.sleep(0)
    assert events == ["write a 200", "next a True", "flush"]


async def test_a_connection_that_fails_is_closed_and_the_others_go_on() -> None:
    """A write that raises, or a next step that raises, is reported to the loop's exception
    handler and its connection closed; the other answers of the turn are still written and
    their connections go on (none is left waiting for an answer that never comes)."""
    loop = asyncio.get_running_loop()
    reported: list[str] = []
    loop.set_exception_handler(lambda _, context: reported.append(str(context["exception"])))
    events: list[str] = []
    answers = TurnAnswers(loop)
    try:
        for connection in (
            _Broken("broken write", events),
            _Connection("broken next", events),
            _Connection("c", events),
        ):
            answers.post(cast(Http1Connection, connection), FastAnswer(200, "x", b""))
        answers.write_now()
    finally:
        loop.set_exception_handler(None)
    assert events == [
        "close broken write",
        "write broken next 200",
        "write c 200",
        "next broken write False",
        "next broken next True",
        "close broken next",
        "next c True",
    ]
    assert reported == ["the write failed", "its next request failed"]


async def test_each_event_loop_has_its_own_answers() -> None:
    loop = asyncio.get_running_loop()
    assert turn_answers(loop) is turn_answers(loop)
    other = asyncio.new_event_loop()
    try:
        assert turn_answers(other) is not turn_answers(loop)
    finally:
        other.close()


def test_an_http2_answer_dates_itself_with_the_current_second(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The date field is encoded once a second, and a new second gives a new one."""
    answer = FastAnswer(200, "application/json", b"{}")
    for now in ("Tue, 24 Nov 2026 18:00:00 GMT", "Tue, 24 Nov 2026 18:00:01 GMT"):
        monkeypatch.setattr(fast_answer, "rfc822_formatted_time", lambda now=now: now)
        fields = dict(answer.h2_headers())
        assert fields[b"date"] == now.encode()
        assert b"Date: " + now.encode() + b"\r\n" in answer.http1()
        assert fields[b":status"] == b"200" and fields[b"content-length"] == b"2"


class _Counted(FastAnswer):
    """Counts how often its bytes are made."""

    made = 0

    def http1(self) -> bytes:
        _Counted.made += 1
        return FastAnswer.http1(self)


def test_answers_made_at_once_are_written_in_order_each_run_made_once() -> None:
    """A pass's answers written as one: a run of the same answer (pipelined produces refused
    alike) is made once, every answer still goes out in its place, and the write closes the
    connection as its last answer does (a pass stops at one that closes)."""
    _Counted.made = 0
    refused = _Counted(503, "application/problem+json", b"{}", (("Retry-After", "1"),))
    forbidden = _Counted(403, "application/problem+json", b"{}")
    closing = _Counted(400, "application/problem+json", b"{}", (("Connection", "close"),))
    joined = connections._joined([refused, refused, forbidden, refused, refused, closing])
    data = joined.http1()
    assert re.findall(rb"HTTP/1\.1 (\d+)", data) == [b"503", b"503", b"403", b"503", b"503", b"400"]
    assert _Counted.made == 4
    assert joined.closes
    assert not connections._joined([refused, forbidden]).closes
