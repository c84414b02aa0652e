"""Forwarded appends joined per loop turn (replication.forwarded_appends). The leader here is a
stand-in recording what it is sent and assigning offsets as a leader does, so that which
appends are joined, and what each caller gets back, are exact; the real hop is covered by
tests/cluster/test_cluster.py."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from engine.producer_state import ProducerIdentity
from replication.acks import Acks
from replication.errors import NodeUnreachable
from replication.forward_client import ForwardClient, RemoteError
from replication.forwarded_appends import ForwardedAppends

BAD = b"bad"


class Leader(ForwardClient):
    """Appends what it is sent at consecutive offsets; refuses any request holding BAD whole."""

    def __init__(self, fail: BaseException | None = None) -> None:
        super().__init__(node_id=1)
        self.sent: list[tuple[str, int, bytes, Acks, int]] = []
        self.end = 0
        self.fail = fail

    async def produce_batches(
        self, url: str, topic: str, partition: int, data: bytes | bytearray, acks: Acks,
        timeout_ms: int, producer: ProducerIdentity | None = None,
    ) -> int:  # fmt: skip
        self.sent.append((topic, partition, bytes(data), acks, timeout_ms))
        await asyncio.sleep(0)  # the network: the answer comes in a later turn
        if self.fail is not None:
            raise self.fail
        if BAD in data:
            problem: Mapping[str, Any] = {"code": "RECORD_TOO_LARGE", "detail": "too large"}
            raise RemoteError(413, problem)
        base = self.end
        self.end += len(data)  # one "record" per byte: counts below are the data's lengths
        return base


def one(
    appends: ForwardedAppends, data: bytes, partition: int = 0, acks: Acks = Acks.LEADER
) -> Any:
    return appends.append("http://leader", "t", partition, data, len(data), acks, 1000)


async def test_one_turns_appends_go_in_one_request_each_with_its_own_offsets() -> None:
    leader = Leader()
    appends = ForwardedAppends(leader)
    bases = await asyncio.gather(one(appends, b"aa"), one(appends, b"bbb"), one(appends, b"c"))
    assert list(bases) == [0, 2, 5]
    assert [sent[2] for sent in leader.sent] == [b"aabbbc"]
    assert (appends.sends, appends.requests) == (1, 3)
    # a later turn: a request of its own
    assert await one(appends, b"dd") == 6
    assert len(leader.sent) == 2


async def test_only_the_same_partition_acks_and_timeout_are_joined() -> None:
    leader = Leader()
    appends = ForwardedAppends(leader)
    await asyncio.gather(
        one(appends, b"a"), one(appends, b"b", partition=1), one(appends, b"c", acks=Acks.ALL),
        one(appends, b"d"),
    )  # fmt: skip
    assert sorted((p, acks.value, data) for _, p, data, acks, _ in leader.sent) == [
        (0, "1", b"ad"),
        (0, "all", b"c"),
        (1, "1", b"b"),
    ]


async def test_a_refused_join_is_sent_again_alone_so_only_the_bad_batch_fails() -> None:
    leader = Leader()
    appends = ForwardedAppends(leader)
    results = await asyncio.gather(
        one(appends, b"ok1"), one(appends, BAD), one(appends, b"ok2"), return_exceptions=True
    )
    assert isinstance(results[1], RemoteError) and results[1].status == 413
    assert results[0] == 0 and results[2] == 3
    assert [sent[2] for sent in leader.sent] == [b"ok1" + BAD + b"ok2", b"ok1", BAD, b"ok2"]


async def test_any_other_failure_is_every_joined_requests() -> None:
    unreachable = NodeUnreachable("gone", delivered=False)
    appends = ForwardedAppends(Leader(fail=unreachable))
    results = await asyncio.gather(one(appends, b"a"), one(appends, b"b"), return_exceptions=True)
    assert list(results) == [unreachable, unreachable]


async def test_a_turn_past_the_size_bound_goes_in_several_requests() -> None:
    leader = Leader()
    appends = ForwardedAppends(leader, max_bytes=4)
    bases = await asyncio.gather(*(one(appends, b"xx") for _ in range(5)))
    assert bases == [0, 2, 4, 6, 8]
    assert [sent[2] for sent in leader.sent] == [b"xxxx", b"xxxx", b"xx"]


async def test_a_caller_that_goes_away_does_not_disturb_the_others() -> None:
    leader = Leader()
    appends = ForwardedAppends(leader)
    gone = asyncio.ensure_future(one(appends, b"aa"))
    kept = asyncio.ensure_future(one(appends, b"b"))
    await asyncio.sleep(0)
    gone.cancel()
    assert await kept == 2  # the data was sent together: its offsets stay what the leader gave
    with pytest.raises(asyncio.CancelledError):
        await gone
