"""The calls one node makes to another's internal routes: a follower's long-poll fetch of all
it follows at a leader (a fetch session, replication.session_wire) and its leader-epoch query
(KIP-279), over pooled keep-alive connections (replication.http1: a follower fetches once per
replication round trip, so what a call costs is paid by every acks=all produce).

The routes' answers are the contract: each partition's batches as stored with the leader's
high watermark and log start, errors as problem+json with the codes of `replication.errors`
(a partition's inside the answer, a session's as the answer), which come back here as the same
exceptions.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlencode

import orjson

from replication import errors, session_wire
from replication.http1 import ConnectFailed, Http1Pool, Reply
from replication.node_contract import (
    SESSION_FETCH,
    SESSION_FETCH_ROUTE,
    error_of,
    replica_path,
)


class ReplicaClient:
    """Every call to other nodes' internal routes (connections pooled per node)."""

    def __init__(self, request_timeout_s: float = 30.0, authorization: str | None = None) -> None:
        self.authorization = authorization  # the Authorization header of every call, if any
        self.request_timeout_s = request_timeout_s
        self._pool = Http1Pool()

    async def close(self) -> None:
        await self._pool.close()

    async def _get(self, url: str, path: str, params: dict[str, str]) -> Reply:
        """GET `path` at the node at `url`; a problem answer raised as its exception."""
        return await self._call(url, "GET", f"{path}?{urlencode(params)}", {}, b"")

    async def _call(
        self, url: str, method: str, target: str, headers: dict[str, str], body: bytes
    ) -> Reply:
        if self.authorization is not None:
            headers = {**headers, "Authorization": self.authorization}
        try:
            async with asyncio.timeout(self.request_timeout_s):
                reply = await self._pool.request(url, method, target, headers, body)
        except ConnectFailed as exc:
            raise errors.NodeUnreachable(f"{url}: {exc}", delivered=False) from exc
        except (OSError, ValueError, asyncio.IncompleteReadError, TimeoutError) as exc:
            raise errors.NodeUnreachable(f"{url}: {exc!r}") from exc
        if reply.status != 200:
            raise error_of(reply.status, reply.body)
        return reply

    async def session_fetch(
        self, leader_url: str, request: session_wire.SessionFetchRequest
    ) -> session_wire.SessionFetchAnswer:
        """One fetch for every partition of a session at the leader (KIP-227); a session error
        comes back as FetchSessionIdNotFound or InvalidFetchSessionEpoch."""
        reply = await self._call(
            leader_url,
            "POST",
            SESSION_FETCH_ROUTE,
            {"Content-Type": SESSION_FETCH},
            session_wire.encode_request(request),
        )
        try:
            return session_wire.decode_answer(reply.body)
        except session_wire.MalformedSessionFetch as exc:
            raise errors.ReplicationError(
                f"{leader_url}: a malformed session answer: {exc}"
            ) from None

    async def epoch_end(
        self, leader_url: str, topic: str, partition: int, *, leader_epoch: int, epoch: int
    ) -> tuple[int, int]:
        """KIP-279: the leader's (largest epoch <= `epoch`, the offset where it ends)."""
        params = {"leader_epoch": str(leader_epoch), "epoch": str(epoch)}
        reply = await self._get(leader_url, replica_path(topic, partition, "epoch-end"), params)
        try:
            doc = orjson.loads(reply.body)
            return int(doc["epoch"]), int(doc["end_offset"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise errors.ReplicationError(f"{leader_url}: malformed epoch answer: {exc}") from None
