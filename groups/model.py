"""A coordinated group's state in memory: its members, their partitions, its committed offsets.

Shared by the coordinator's parts (membership, offsets, member fetch), which each change
their own fields of it; the offsets log holds it across restarts.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from engine.offsets_topic import CommittedOffset, TopicPartition
from groups.errors import GroupError

OFFSET_RESETS = ("earliest", "latest", "none")


@dataclass
class Member:
    member_id: str
    topics: tuple[str, ...]
    session_timeout_ms: int
    auto_offset_reset: str
    auto_commit: bool
    target: set[TopicPartition] = field(default_factory=set)  # what the assignor gives it
    owned: set[TopicPartition] = field(default_factory=set)  # what it may read now
    positions: dict[TopicPartition, int] = field(default_factory=dict)  # next to deliver
    fetching: int = 0
    fetch_turn: int = 0  # a newer fetch supersedes a parked older one
    cursor: int = field(default_factory=lambda: random.getrandbits(31))  # the last delivery's
    before_last: dict[TopicPartition, int] = field(default_factory=dict)  # positions it moved
    rotation: int = 0  # where the next fetch starts among the owned partitions
    # Partitions taken so far: a position found across an await that saw it change is stale.
    handovers: int = 0
    wake: asyncio.Future[None] | None = None
    expiry: asyncio.TimerHandle | None = None  # fires at or before `deadline`
    deadline: float = 0.0  # loop time when the session runs out, if no request is in flight
    # A REST Proxy v2 consumer instance's settings (format, fetch.min.bytes, ...): kept with
    # the member in the log, so whichever node coordinates the group next serves it alike.
    instance: dict[str, Any] = field(default_factory=dict)
    # Kafka's assign(): `target` is what the member chose, outside the group's assignment and
    # its ownership (as in Kafka, a partition may be assigned to several such members).
    manual: bool = False
    _assignment: tuple[set[TopicPartition], list[dict[str, Any]]] | None = None

    def assignment(self) -> list[dict[str, Any]]:
        """The target as the API shows it; kept until a rebalance gives a new target."""
        if self._assignment is None or self._assignment[0] is not self.target:
            self._assignment = (self.target, assignment_doc(self.target))
        return self._assignment[1]

    def stored(self) -> dict[str, Any]:
        doc = {
            "member_id": self.member_id,
            "topics": list(self.topics),
            "session_timeout_ms": self.session_timeout_ms,
            "auto_offset_reset": self.auto_offset_reset,
            "auto_commit": self.auto_commit,
            "assignment": self.assignment(),
        }
        if self.instance:
            doc["instance"] = self.instance
        if self.manual:
            doc["manual"] = True
        return doc

    def poke(self) -> None:
        """Wake the member's parked fetch, if any, to look at its partitions again."""
        if self.wake is not None and not self.wake.done():
            self.wake.set_result(None)


@dataclass
class Group:
    name: str
    assignor: str = "range"
    generation: int = 0
    members: dict[str, Member] = field(default_factory=dict)
    offsets: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)
    owners: dict[TopicPartition, str] = field(default_factory=dict)
    partition_counts: dict[str, int] = field(default_factory=dict)  # as last assigned
    unwritten: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)
    write_timer: asyncio.TimerHandle | None = None

    @property
    def state(self) -> Literal["Empty", "Rebalancing", "Stable"]:
        if not self.members:
            return "Empty"
        settled = all(m.owned == m.target for m in self.members.values())
        return "Stable" if settled else "Rebalancing"

    def subscribed(self) -> set[str]:
        return {t for m in self.members.values() for t in m.topics}

    def metadata(self) -> dict[str, Any]:
        """The group's record in the offsets topic: what a new coordinator restores."""
        return {
            "generation": self.generation,
            "assignor": self.assignor,
            "partition_counts": self.partition_counts,
            "members": [m.stored() for m in self.members.values()],
        }


def assignment_doc(partitions: Iterable[TopicPartition]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[int]] = {}
    for topic, p in sorted(partitions):
        by_topic.setdefault(topic, []).append(p)
    return [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]


@dataclass(frozen=True)
class JoinRequest:
    topics: tuple[str, ...]
    session_timeout_ms: int
    auto_offset_reset: str
    auto_commit: bool
    assignor: str | None = None  # None: the group's
    instance_id: str | None = None  # a static member's chosen id (Kafka's group.instance.id)


def unknown_member(group: str, member_id: str) -> GroupError:
    return GroupError(
        "UNKNOWN_MEMBER",
        f"group {group!r} has no member {member_id!r} (it left, expired or never joined); "
        "join again",
    )


def not_assigned(group: Group, member: Member, tp: TopicPartition) -> GroupError:
    return GroupError(
        "PARTITION_NOT_ASSIGNED",
        f"{tp[0]}-{tp[1]} is not assigned to member {member.member_id!r} in generation "
        f"{group.generation}",
        topic=tp[0],
        partition=tp[1],
        generation=group.generation,
    )
