"""A member's fetch driven directly, without HTTP: a position retention took away (here:
the log emptied and started again at 9, then 3 records) restarts where auto_offset_reset
says, or is an error with `none`."""

from __future__ import annotations

import pytest

from engine.errors import OffsetOutOfRange
from groups.coordinator import JoinRequest, Member
from tests.groups.conftest import GROUP, NOW, TOPIC, TP, Node


def committed_past_the_log(node: Node, auto_offset_reset: str) -> Member:
    """A member whose committed offset, 5, is before the log's start (9..12)."""
    node.produce(5)
    group, member = node.groups.membership.join(
        GROUP, JoinRequest((TOPIC,), 30_000, auto_offset_reset, False)
    )
    node.groups.offsets.commit(group, member, [(TP, 5, "")], None)
    node.replicas.partitions[TP].log.truncate_fully_and_start_at(9)
    node.produce(3)
    return member


@pytest.mark.parametrize(("reset", "delivered"), [("earliest", [9, 10, 11]), ("latest", [])])
async def test_a_position_outside_the_log_restarts_where_auto_offset_reset_says(
    node: Node, reset: str, delivered: list[int]
) -> None:
    member = committed_past_the_log(node, reset)
    fetched = await node.groups.member_fetch.fetch(GROUP, member.member_id, NOW)
    assert fetched.records == delivered
    assert member.positions[TP] == 12


async def test_a_position_outside_the_log_without_a_reset_is_an_error(node: Node) -> None:
    member = committed_past_the_log(node, "none")
    with pytest.raises(OffsetOutOfRange):
        await node.groups.member_fetch.fetch(GROUP, member.member_id, NOW)
