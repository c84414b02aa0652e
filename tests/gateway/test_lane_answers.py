"""LaneAnswers: the lane's HTTP/1.1 answers of one loop turn are written back to back at its
end, and only then does each connection go on to its next request."""

from __future__ import annotations

import asyncio
from typing import cast

from gateway.connections import Http1Connection, LaneAnswers, lane_answers
from gateway.lane import LaneAnswer


class _Connection:
    """Records what LaneAnswers asks of a connection, in one shared list."""

    def __init__(self, name: str, events: list[str], alive: bool = True) -> None:
        self.name, self.events, self.alive = name, events, alive

    def _write_lane_answer(self, answer: LaneAnswer) -> bool:
        self.events.append(f"write {self.name} {answer.status}")
        return self.alive

    def _lane_answered(self, written: bool) -> None:
        self.events.append(f"next {self.name} {written}")


async def test_a_turns_answers_are_all_written_before_any_connection_goes_on() -> None:
    events: list[str] = []
    answers = LaneAnswers(asyncio.get_running_loop())
    for name, alive in (("a", True), ("b", False), ("c", True)):
        connection = cast(Http1Connection, _Connection(name, events, alive))
        answers.post(connection, LaneAnswer(200, "application/json", b"{}"))
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
    answers.post(cast(Http1Connection, _Connection("d", events)), LaneAnswer(202, "x", b""))
    await asyncio.sleep(0)
    assert events == ["write d 202", "next d True"]  # the next turn's are written in theirs


async def test_each_event_loop_has_its_own_answers() -> None:
    loop = asyncio.get_running_loop()
    assert lane_answers(loop) is lane_answers(loop)
    other = asyncio.new_event_loop()
    try:
        assert lane_answers(other) is not lane_answers(loop)
    finally:
        other.close()
