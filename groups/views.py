"""Admin views of the groups coordinated here: describe (members, offsets, lag) and list."""

from __future__ import annotations

from typing import Any

from engine.offsets_topic import TopicPartition
from groups.model import Group
from replication.replica_manager import ReplicaManager


def describe(group: Group, replicas: ReplicaManager) -> dict[str, Any]:
    """The group's state, members and, per partition it reads or committed, offset and lag."""
    topics = replicas.store.view.topics
    partitions: set[TopicPartition] = set(group.offsets)
    for topic in group.subscribed():
        if topic in topics:
            partitions.update((topic, p) for p in range(topics[topic].partitions))
    rows = []
    total = 0
    for topic, p in sorted(partitions):
        if topic not in topics or p >= topics[topic].partitions:
            continue
        local = replicas.local(topic, p)
        end = None if local is None else local.high_watermark
        committed = group.offsets.get((topic, p))
        lag = None if committed is None or end is None else max(end - committed.offset, 0)
        total += lag or 0
        rows.append(
            {
                "topic": topic,
                "partition": p,
                "committed_offset": None if committed is None else committed.offset,
                "log_end_offset": end,
                "lag": lag,
                "owner": group.owners.get((topic, p)),
            }
        )
    return {
        "group": group.name,
        "state": group.state,
        "generation": group.generation,
        "assignor": group.assignor,
        "members": [
            {
                "member_id": m.member_id,
                "topics": list(m.topics),
                "session_timeout_ms": m.session_timeout_ms,
                "assignment": m.assignment(),
            }
            for m in sorted(group.members.values(), key=lambda m: m.member_id)
        ],
        "partitions": rows,
        "lag": total,
    }


def list_groups(groups: dict[str, Group]) -> list[dict[str, Any]]:
    """The groups that exist (with members or committed offsets), by name."""
    return [
        {"group": g.name, "state": g.state, "members": len(g.members)}
        for g in sorted(groups.values(), key=lambda g: g.name)
        if g.members or g.offsets
    ]
