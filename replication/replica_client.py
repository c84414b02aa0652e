"""The calls one node makes to another's internal routes: a follower's long-poll fetch and
its leader-epoch query (KIP-279), over pooled keep-alive connections (replication.http1: a
follower fetches once per replication round trip, so what a call costs is paid by every
acks=all produce).

The routes' answers are the contract: batches as `application/vnd.kafka.record-batch`, the
leader's high watermark and log start in headers, errors as problem+json with the codes of
`replication.errors`, which come back here as the same exceptions.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from urllib.parse import urlencode

import orjson

from replication import errors
from replication.http1 import ConnectFailed, Http1Pool, Reply
from replication.node_contract import HIGH_WATERMARK, LOG_START_OFFSET, error_of, replica_path


@dataclass(frozen=True)
class ReplicaFetch:
    """A leader's answer to a follower: whole batches from the fetch offset, and its marks."""

    data: bytes
    high_watermark: int
    log_start_offset: int


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
        headers = {} if self.authorization is None else {"Authorization": self.authorization}
        try:
            async with asyncio.timeout(self.request_timeout_s):
                reply = await self._pool.request(
                    url, "GET", f"{path}?{urlencode(params)}", headers, b""
                )
        except ConnectFailed as exc:
            raise errors.NodeUnreachable(f"{url}: {exc}", delivered=False) from exc
        except (OSError, ValueError, asyncio.IncompleteReadError, TimeoutError) as exc:
            raise errors.NodeUnreachable(f"{url}: {exc!r}") from exc
        if reply.status != 200:
            raise error_of(reply.status, reply.body)
        return reply

    async def fetch(
        self,
        leader_url: str,
        topic: str,
        partition: int,
        *,
        replica: int,
        leader_epoch: int,
        offset: int,
        max_bytes: int,
        timeout_ms: int,
    ) -> ReplicaFetch:
        """Long-poll the leader for batches from `offset`; it answers as soon as it has any."""
        params = {
            "replica": str(replica),
            "leader_epoch": str(leader_epoch),
            "offset": str(offset),
            "max_bytes": str(max_bytes),
            "timeout_ms": str(timeout_ms),
        }
        reply = await self._get(leader_url, replica_path(topic, partition, "records"), params)
        marks = {name.lower(): value for name, value in reply.headers}
        try:
            return ReplicaFetch(
                reply.body,
                int(marks[HIGH_WATERMARK.lower()]),
                int(marks[LOG_START_OFFSET.lower()]),
            )
        except (KeyError, ValueError) as exc:
            raise errors.ReplicationError(f"{leader_url}: a fetch answer without {exc}") from None

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
