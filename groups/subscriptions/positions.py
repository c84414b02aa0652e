"""A subscription's committed positions, in its consumer group in `__consumer_offsets`: kept
by the group's coordinator, here or on the node that is (reached over the internal positions
route; read over the public group route).

A delete is final: the coordinator applies a commit only while its own view of the metadata
store still has the subscription (name and uid), and checks again once the commit is in; it
forgets the group only once its view has lost the subscription. Views follow the store in
order, so a commit late from any node either lands before the forget (which erases it) or
finds the subscription gone (and is refused, or erased by the committer itself). A commit
early from a node whose view is ahead carries the revision it saw the subscription at, and
the coordinator judges it only once its own view has reached that revision."""

from __future__ import annotations

from urllib.parse import quote

import orjson

from groups.coordinator import GroupCoordinator
from groups.subscriptions.errors import SubscriptionError
from groups.subscriptions.spec import Subscription
from replication.errors import LeaderNotAvailable, MetadataUnavailable, NotLeader
from replication.forward_client import ForwardClient, RemoteError
from replication.metadata import ClusterView
from replication.node_contract import SUBSCRIPTION_POSITIONS_ROUTE

VIEW_WAIT_S = 5.0  # how long the coordinator's view may take to catch up with a commit or forget


def group_of(name: str, uid: str) -> str:
    """The consumer group holding a subscription's positions (Subscription.group)."""
    return f"subscription.{name}.{uid}"


def gone(name: str) -> SubscriptionError:
    return SubscriptionError("UNKNOWN_SUBSCRIPTION", f"subscription {name!r} does not exist")


class GroupPositions:
    """Read, commit and forget a subscription's offsets wherever its coordinator is."""

    def __init__(
        self, groups: GroupCoordinator, forwarder: ForwardClient, durable_timeout_ms: int
    ) -> None:
        self.groups = groups
        self.forwarder = forwarder
        self.durable_timeout_ms = durable_timeout_ms
        self._uids: dict[tuple[str, int], str] = {}  # (name, version) -> uid, as stored

    def _remote(self, group: str, leader: int | None) -> str:
        """The URL of the node coordinating `group`."""
        view = self.groups.replicas.store.view
        node = None if leader is None else view.nodes.get(leader)
        if node is None:
            raise LeaderNotAvailable(f"the coordinator of group {group!r} is not known yet")
        return node.url

    def alive(self, name: str, uid: str, view: ClusterView | None = None) -> bool:
        """Whether this node's view has subscription `name` with this uid."""
        view = view or self.groups.replicas.store.view
        stored = view.subscriptions.get(name)
        if stored is None:
            return False
        key = (name, stored.version)
        known = self._uids.get(key)
        if known is None:
            if len(self._uids) > 4 * max(len(view.subscriptions), 256):
                self._uids.clear()
            known = self._uids[key] = str(orjson.loads(stored.document)["uid"])
        return known == uid

    async def committed(self, sub: Subscription, partition: int) -> int | None:
        """The committed offset of one partition; None if there is none."""
        group = sub.group
        try:
            self.groups.coordinator(group)
        except NotLeader as exc:
            url = self._remote(group, exc.leader)
            path = f"/v1/groups/{quote(group, safe='')}"
            answer = await self.forwarder.forward(url, "GET", path, {}, b"")
            if answer.status == 404:
                return None
            doc = orjson.loads(answer.body) if answer.body else {}
            if answer.status != 200:
                raise RemoteError(answer.status, doc) from None
            for row in doc.get("partitions", []):
                if row["topic"] == sub.topic and row["partition"] == partition:
                    offset = row["committed_offset"]
                    return None if offset is None else int(offset)
            return None
        found = self.groups.groups.get(group)
        committed = None if found is None else found.offsets.get((sub.topic, partition))
        return None if committed is None else committed.offset

    async def commit(self, sub: Subscription, partition: int, offset: int) -> None:
        """Commit `offset` for one partition, durably (on every in-sync replica); refused
        (UNKNOWN_SUBSCRIPTION) once the coordinator knows the subscription deleted."""
        try:
            self.groups.coordinator(sub.group)
        except NotLeader as exc:
            url = self._remote(sub.group, exc.leader)
            doc = {
                "uid": sub.uid, "topic": sub.topic, "partition": partition, "offset": offset,
                "version": sub.version,
            }  # fmt: skip
            answer = await self.forwarder.forward(
                url, "PUT", _path(sub.name), {"Content-Type": "application/json"},
                orjson.dumps(doc),
            )  # fmt: skip
            _check(answer.status, answer.body, sub.name)
            return
        await self.commit_here(sub.name, sub.uid, sub.topic, partition, offset)

    async def commit_here(
        self, name: str, uid: str, topic: str, partition: int, offset: int, seen_at: int = 0
    ) -> None:
        """The commit, on the coordinator, once this node's view has reached revision
        `seen_at` (where the committer saw the subscription): only while that view has the
        subscription; if it went while the commit was written, the group is forgotten again
        here. METADATA_UNAVAILABLE (retriable) if the view stays behind for VIEW_WAIT_S."""
        group = group_of(name, uid)
        store = self.groups.replicas.store
        if not await store.wait_for(lambda view: view.revision >= seen_at, VIEW_WAIT_S):
            raise MetadataUnavailable(
                f"this node's view of the cluster metadata has not reached revision {seen_at} "
                f"yet (it is at {store.view.revision}); retry"
            )
        if not self.alive(name, uid):
            raise gone(name)
        await self.groups.reset_offsets(group, topic, [partition], offset)
        if not self.alive(name, uid):  # deleted meanwhile: the forget may have run already
            self._drop(group)
            await self.groups.durable(group, self.durable_timeout_ms)
            raise gone(name)
        await self.groups.durable(group, self.durable_timeout_ms)

    async def forget(self, sub: Subscription) -> None:
        """Delete the group's offsets (a deleted subscription starts nowhere)."""
        try:
            self.groups.coordinator(sub.group)
        except NotLeader as exc:
            url = self._remote(sub.group, exc.leader)
            path = f"{_path(sub.name)}?uid={quote(sub.uid, safe='')}"
            answer = await self.forwarder.forward(url, "DELETE", path, {}, b"")
            _check(answer.status, answer.body, sub.name)
            return
        await self.forget_here(sub.name, sub.uid)

    async def forget_here(self, name: str, uid: str) -> None:
        """The forget, on the coordinator, once its view has lost the subscription; refused
        (SUBSCRIPTION_EXISTS) if it still has it after VIEW_WAIT_S."""
        store = self.groups.replicas.store
        if not await store.wait_for(lambda view: not self.alive(name, uid, view), VIEW_WAIT_S):
            raise SubscriptionError(
                "SUBSCRIPTION_EXISTS",
                f"subscription {name!r} still exists in the view of its group's coordinator; "
                "its positions are kept",
            )
        group = group_of(name, uid)
        if self._drop(group):
            await self.groups.durable(group, self.durable_timeout_ms)

    def _drop(self, group: str) -> bool:
        if group not in self.groups.groups:
            return False
        self.groups.delete_group(group)
        return True


def _path(name: str) -> str:
    return SUBSCRIPTION_POSITIONS_ROUTE.format(name=quote(name, safe=""))


def _check(status: int, body: bytes, name: str) -> None:
    """A coordinator's answer to a commit or forget: 204, a refusal, or a remote error."""
    if status == 204:
        return
    doc = orjson.loads(body) if body else {}
    if status == 404 and doc.get("code") == "UNKNOWN_SUBSCRIPTION":
        raise gone(name)
    raise RemoteError(status, doc)
