"""The shared HTTP/1.1 answer reader, sans-IO: any split of an answer into reads gives the
same answer, an answer's end inside a read leaves the next one's bytes to the caller, bodies
are kept as they came, and what is not HTTP/1.x is refused."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replication.http1_reader import MAX_HEAD, AnswerError, AnswerReader

CHUNKED = (
    b"HTTP/1.1 100 Continue\r\n\r\n"
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Name: v\xc3\xa9\r\n\r\n"
    b"4;ext=1\r\none,\r\n4\r\ntwo,\r\n5\r\nthree\r\n0\r\nTrailer: t\r\n\r\n"
)
LENGTH = b"HTTP/1.1 201 Created\r\nContent-Length: 5\r\n\r\nhello"


def read(answer: bytes, cuts: list[int], **options: object) -> AnswerReader:
    """`answer` fed in the pieces `cuts` makes of it; every byte used."""
    reader = AnswerReader(**options)  # type: ignore[arg-type]
    bounds = [0, *sorted(set(cuts)), len(answer)]
    for start, end in itertools.pairwise(bounds):
        assert reader.feed(answer[start:end]) == end - start
    return reader


@given(st.lists(st.integers(1, len(CHUNKED) - 1), max_size=12))
def test_any_split_of_a_chunked_answer_reads_the_same(cuts: list[int]) -> None:
    reader = read(CHUNKED, cuts)
    assert reader.done and reader.reusable
    assert (reader.status, reader.reason) == (200, "OK")
    assert ("X-Name", "vé") in reader.headers
    assert reader.body() == b"one,two,three"


@given(st.lists(st.integers(1, len(LENGTH) - 1), max_size=8))
def test_any_split_of_a_sized_answer_reads_the_same(cuts: list[int]) -> None:
    reader = read(LENGTH, cuts)
    assert reader.done and reader.reusable and reader.body() == b"hello"


def test_an_answers_end_inside_a_read_leaves_the_next_answers_bytes() -> None:
    reader = AnswerReader()
    assert reader.feed(LENGTH + LENGTH[:10]) == len(LENGTH)
    assert reader.done and reader.body() == b"hello"


def test_a_body_that_arrives_in_one_read_is_kept_without_a_copy() -> None:
    reader = AnswerReader()
    reader.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 65536\r\n\r\n")
    body = bytes(65536)
    reader.feed(body)
    assert reader.body() is body


def test_a_body_past_the_limit_is_cut_one_byte_past_it() -> None:
    reader = AnswerReader(body_limit=3)
    used = reader.feed(LENGTH)
    assert reader.done and reader.cut and not reader.reusable
    assert reader.body() == b"hell" and used < len(LENGTH)


def test_a_head_answer_and_a_204_have_no_body() -> None:
    assert read(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", [], bodiless=True).reusable
    assert read(b"HTTP/1.1 204 No Content\r\n\r\n", []).body() == b""


def test_a_body_to_the_close_ends_with_the_connection() -> None:
    reader = read(b"HTTP/1.0 200 OK\r\n\r\nto the end", [])
    assert not reader.done
    reader.closed()
    assert reader.done and not reader.reusable and reader.body() == b"to the end"


def test_a_connection_closed_before_the_answer_was_whole_is_an_error() -> None:
    reader = read(LENGTH[:-1], [])
    with pytest.raises(AnswerError, match="before the answer was whole"):
        reader.closed()


def test_connection_close_and_http_1_0_are_not_reused() -> None:
    assert not read(
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", []
    ).reusable
    assert not read(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", []).reusable
    keep = b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n"
    assert read(keep, []).reusable


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (b"SPDY/3 200 OK\r\n\r\n", "status line"),
        (b"HTTP/1.1 2000 OK\r\n\r\n", "status line"),
        (b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n", "malformed header"),
        (b"HTTP/1.1 200 OK\r\n Name: folded\r\n\r\n", "malformed header"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "Content-Length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "not hex"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n", "not ended"),
        (b"HTTP/1.1 200 OK\r\nX: " + b"y" * MAX_HEAD, "exceeds"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"1" * 2000, "exceeds"),
    ],
)
def test_what_is_not_http_is_refused(answer: bytes, why: str) -> None:
    with pytest.raises(AnswerError, match=why):
        AnswerReader().feed(answer)
