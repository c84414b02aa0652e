"""A subscription's committed positions, in its consumer group in `__consumer_offsets`: asked
of this node's coordinator when it coordinates the group, else of the node that does, over
the public group routes (the cluster is the group's only member, so it commits as an offset
reset does: a group without members)."""

from __future__ import annotations

from urllib.parse import quote

import orjson

from groups.coordinator import GroupCoordinator
from replication.errors import LeaderNotAvailable, NotLeader
from replication.forward_client import ForwardClient, RemoteError

TopicPartition = tuple[str, int]


class GroupPositions:
    """Read, commit and forget a group's offsets wherever its coordinator is."""

    def __init__(
        self, groups: GroupCoordinator, forwarder: ForwardClient, durable_timeout_ms: int
    ) -> None:
        self.groups = groups
        self.forwarder = forwarder
        self.durable_timeout_ms = durable_timeout_ms

    def _remote(self, group: str, leader: int | None) -> str:
        """The URL of the node coordinating `group`."""
        view = self.groups.replicas.store.view
        node = None if leader is None else view.nodes.get(leader)
        if node is None:
            raise LeaderNotAvailable(f"the coordinator of group {group!r} is not known yet")
        return node.url

    async def committed(self, group: str, topic: str, partition: int) -> int | None:
        """The committed offset of one partition; None if there is none."""
        try:
            self.groups.coordinator(group)
        except NotLeader as exc:
            url = self._remote(group, exc.leader)
            answer = await self.forwarder.forward(url, "GET", _path(group), {}, b"")
            if answer.status == 404:
                return None
            doc = orjson.loads(answer.body) if answer.body else {}
            if answer.status != 200:
                raise RemoteError(answer.status, doc) from None
            for row in doc.get("partitions", []):
                if row["topic"] == topic and row["partition"] == partition:
                    offset = row["committed_offset"]
                    return None if offset is None else int(offset)
            return None
        found = self.groups.groups.get(group)
        committed = None if found is None else found.offsets.get((topic, partition))
        return None if committed is None else committed.offset

    async def commit(self, group: str, topic: str, partition: int, offset: int) -> None:
        """Commit `offset` for one partition, durably (on every in-sync replica)."""
        try:
            self.groups.coordinator(group)
        except NotLeader as exc:
            url = self._remote(group, exc.leader)
            body = orjson.dumps({"topic": topic, "partitions": [partition], "to": offset})
            headers = {"Content-Type": "application/json"}
            answer = await self.forwarder.forward(
                url, "PUT", _path(group) + "/offsets", headers, body
            )
            if answer.status != 200:
                doc = orjson.loads(answer.body) if answer.body else {}
                raise RemoteError(answer.status, doc) from None
            return
        await self.groups.reset_offsets(group, topic, [partition], offset)
        await self.groups.durable(group, self.durable_timeout_ms)

    async def forget(self, group: str) -> None:
        """Delete the group's offsets (a deleted subscription starts nowhere)."""
        try:
            self.groups.coordinator(group)
        except NotLeader as exc:
            url = self._remote(group, exc.leader)
            answer = await self.forwarder.forward(url, "DELETE", _path(group), {}, b"")
            if answer.status not in (204, 404):
                doc = orjson.loads(answer.body) if answer.body else {}
                raise RemoteError(answer.status, doc) from None
            return
        if group in self.groups.groups:
            self.groups.delete_group(group)
            await self.groups.durable(group, self.durable_timeout_ms)


def _path(group: str) -> str:
    return f"/v1/groups/{quote(group, safe='')}"
