"""Partition assignors, as Kafka's consumers choose them (`partition.assignment.strategy`).

Each takes the members' subscriptions and the topics' partition counts and returns every
member's partitions; members are ordered by id, so every node computes the same answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

TopicPartition = tuple[str, int]
Subscriptions = Mapping[str, Sequence[str]]  # member id -> topics
Assignment = dict[str, list[TopicPartition]]
Assignor = Callable[[Subscriptions, Mapping[str, int]], Assignment]


def range_assign(subscriptions: Subscriptions, partitions: Mapping[str, int]) -> Assignment:
    """Kafka's RangeAssignor: per topic, consecutive ranges; the first members get one more."""
    out: Assignment = {member: [] for member in subscriptions}
    for topic in sorted({t for topics in subscriptions.values() for t in topics}):
        count = partitions.get(topic, 0)
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        if not count or not members:
            continue
        share, extra = divmod(count, len(members))
        start = 0
        for i, member in enumerate(members):
            size = share + (1 if i < extra else 0)
            out[member].extend((topic, p) for p in range(start, start + size))
            start += size
    return out


def round_robin_assign(subscriptions: Subscriptions, partitions: Mapping[str, int]) -> Assignment:
    """Kafka's RoundRobinAssignor: every partition in (topic, partition) order goes to the next
    member in id order that subscribes to its topic."""
    out: Assignment = {member: [] for member in subscriptions}
    members = sorted(subscriptions)
    if not members:
        return out
    turn = 0
    for topic in sorted({t for topics in subscriptions.values() for t in topics}):
        for p in range(partitions.get(topic, 0)):
            while topic not in subscriptions[members[turn % len(members)]]:
                turn += 1
            out[members[turn % len(members)]].append((topic, p))
            turn += 1
    return out


ASSIGNORS: dict[str, Assignor] = {"range": range_assign, "roundrobin": round_robin_assign}
