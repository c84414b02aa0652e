"""A transaction's consumer-group offsets at the group's coordinator, here or on the node that
is (over the internal transaction-offsets route): the generation check when offsets are sent
(KIP-447; none for offsets sent without a member), and their commit once the transaction
committed."""

from __future__ import annotations

from urllib.parse import quote

import orjson

from groups.coordinator import GroupCoordinator
from groups.transactions.model import OffsetEntry
from replication.errors import LeaderNotAvailable, NotLeader
from replication.forward_client import ForwardClient, RemoteError
from replication.node_contract import TRANSACTION_OFFSETS_ROUTE

NO_GENERATION = -1  # the generation of offsets sent without a member


class TransactionOffsets:
    """The transaction coordinator's way to a group's coordinator."""

    def __init__(
        self, groups: GroupCoordinator, forwarder: ForwardClient, durable_timeout_ms: int
    ) -> None:
        self.groups = groups
        self.forwarder = forwarder
        self.durable_timeout_ms = durable_timeout_ms

    async def check_generation(self, group: str, member_id: str, generation_id: int) -> None:
        """Raise unless the member is of the group's current generation. No member (""): the
        offsets of a group without members (a push subscription's), not checked, as Kafka's
        sendOffsetsToTransaction(offsets, groupId) before KIP-447."""
        if not member_id:
            return
        try:
            self.groups.check_generation(group, member_id, generation_id)
        except NotLeader as exc:
            await self._remote(group, exc, member_id, generation_id, None)

    async def commit(
        self, group: str, member_id: str, generation_id: int, offsets: list[OffsetEntry]
    ) -> None:
        """Commit a committed transaction's offsets, on every in-sync replica of the group's
        offsets partition before this returns."""
        try:
            here(self.groups, group, offsets)
        except NotLeader as exc:
            await self._remote(group, exc, member_id, generation_id, offsets)
            return
        await self.groups.durable(group, self.durable_timeout_ms)

    async def _remote(
        self,
        group: str,
        exc: NotLeader,
        member_id: str,
        generation_id: int,
        offsets: list[OffsetEntry] | None,
    ) -> None:
        view = self.groups.replicas.store.view
        node = None if exc.leader is None else view.nodes.get(exc.leader)
        if node is None:
            raise LeaderNotAvailable(f"the coordinator of group {group!r} is not known yet")
        body = orjson.dumps(
            {"member_id": member_id, "generation_id": generation_id, "offsets": offsets}
        )
        path = TRANSACTION_OFFSETS_ROUTE.format(group=quote(group, safe=""))
        answer = await self.forwarder.forward(
            node.url, "POST", path, {"Content-Type": "application/json"}, body
        )
        if answer.status >= 400:
            doc = orjson.loads(answer.body) if answer.body else {}
            raise RemoteError(answer.status, doc if isinstance(doc, dict) else {})


def here(groups: GroupCoordinator, group: str, offsets: list[OffsetEntry]) -> None:
    """Commit the offsets on this node, the group's coordinator (NotLeader if it is not)."""
    groups.commit_transactional(
        group, [((topic, p), offset, metadata) for topic, p, offset, metadata in offsets]
    )
