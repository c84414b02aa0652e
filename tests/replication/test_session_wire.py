"""The session fetch body (replication.session_wire): what one half writes the other reads back
whole, and every malformed answer a follower could meet is refused saying where; a consumer's
request (replica -1) is sessionless, and a follower's may not borrow its -1s."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest

from engine.producer_state import Isolation
from replication.session_wire import (
    FetchPosition,
    MalformedSessionFetch,
    PartitionAnswer,
    SessionFetchAnswer,
    SessionFetchRequest,
    consumer_request,
    decode_answer,
    decode_request,
    encode_answer,
    encode_request,
)


def test_a_request_reads_back_whole() -> None:
    request = SessionFetchRequest(
        2,
        7,
        3,
        5000,
        1,
        1 << 20,
        {("orders", 0): FetchPosition(4, 10, 4096), ("ü", 12): FetchPosition(0, 0, 1)},
        (("gone", 1),),
    )
    assert decode_request(encode_request(request)) == request
    assert not request.full and SessionFetchRequest(2, 0, 0, 0, 1, 1, {}).full


def test_an_answer_reads_back_whole() -> None:
    answer = SessionFetchAnswer(
        9,
        {
            ("t", 0): PartitionAnswer(5, 0, b"batches"),
            ("t", 1): PartitionAnswer(-1, -1, b"", 409, b'{"code":"FENCED_LEADER_EPOCH"}'),
        },
    )
    body = b"".join(encode_answer(answer))
    read = decode_answer(body)
    assert read == answer
    records = read.partitions[("t", 0)].records
    assert isinstance(records, memoryview) and records.obj is body  # a fetched MiB: not copied


@pytest.mark.parametrize(
    ("cut", "says"),
    [
        (lambda b: b[:5], "ends inside the answer head"),
        (lambda b: b[:-1], "needs 7 bytes"),
        (lambda b: b + b"\0", "1 bytes after the last part"),
        (lambda b: b"\x09" + b[1:], "answer version 9"),
        (lambda b: b[:5] + b"\xff\xff\xff\xff" + b[9:], "-1 partitions"),
    ],
)
def test_a_malformed_answer_is_refused_saying_where(cut: object, says: str) -> None:
    body = b"".join(
        encode_answer(SessionFetchAnswer(1, {("t", 0): PartitionAnswer(1, 0, b"x" * 7)}))
    )
    with pytest.raises(MalformedSessionFetch, match=says):
        decode_answer(cut(body))  # type: ignore[operator]


def test_a_partition_number_and_a_topic_name_are_checked() -> None:
    body = encode_request(SessionFetchRequest(1, 0, 0, 0, 1, 1, {("t", 0): FetchPosition(0, 0, 1)}))
    negative = body[:32] + b"\xff\xff\xff\xff" + body[36:]
    with pytest.raises(MalformedSessionFetch, match="partition -1 is negative"):
        decode_request(negative)
    not_utf8 = body[:31] + b"\xff" + body[32:]
    with pytest.raises(MalformedSessionFetch, match="is not UTF-8"):
        decode_request(not_utf8)
    zero_max = body[:-8] + b"\0\0\0\0" + body[-4:]
    with pytest.raises(MalformedSessionFetch, match="max_bytes 0"):
        decode_request(zero_max)


def test_a_consumer_request_reads_back_whole() -> None:
    request = consumer_request({("orders", 0): 10, ("orders", 3): 0}, 500, 4096)
    assert request.consumer and request.full
    assert (request.replica, request.session_id, request.session_epoch) == (-1, 0, -1)
    assert request.partitions[("orders", 0)] == FetchPosition(-1, 10, 4096)
    assert decode_request(encode_request(request)) == request
    known_epoch = replace(request, partitions={("orders", 0): FetchPosition(3, 10, 4096)})
    assert decode_request(encode_request(known_epoch)) == known_epoch


def test_a_read_committed_consumer_request_says_so_and_others_do_not() -> None:
    committed = consumer_request({("orders", 0): 10}, 500, 4096, Isolation.READ_COMMITTED)
    assert decode_request(encode_request(committed)).isolation is Isolation.READ_COMMITTED
    plain = consumer_request({("orders", 0): 10}, 500, 4096)
    assert encode_request(committed) == encode_request(plain) + b"\x01"
    with pytest.raises(MalformedSessionFetch, match="isolation level 2"):
        decode_request(encode_request(plain) + b"\x02")


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"session_epoch": 0}, "replica is -1 (a consumer) with session 0 in epoch 0"),
        ({"session_id": 7}, "replica is -1 (a consumer) with session 7 in epoch -1"),
        ({"forgotten": (("t", 1),)}, "no session to forget"),
        ({"replica": -2}, "replica is -2; a node id, or -1 for a consumer"),
        ({"partitions": {("t", 0): FetchPosition(-2, 0, 1)}}, "leader epoch -2"),
    ],
)
def test_a_malformed_consumer_request_is_refused_saying_why(
    changes: dict[str, Any], says: str
) -> None:
    body = encode_request(replace(consumer_request({("t", 0): 0}, 0, 1), **changes))
    with pytest.raises(MalformedSessionFetch, match=re.escape(says)):
        decode_request(body)


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"session_epoch": -1}, "session_epoch is -1"),
        ({"partitions": {("t", 0): FetchPosition(-1, 0, 1)}}, "leader epoch -1"),
    ],
)
def test_a_follower_may_not_use_a_consumers_minus_ones(changes: dict[str, Any], says: str) -> None:
    follower = SessionFetchRequest(1, 0, 0, 0, 1, 1, {("t", 0): FetchPosition(0, 0, 1)})
    with pytest.raises(MalformedSessionFetch, match=says):
        decode_request(encode_request(replace(follower, **changes)))
