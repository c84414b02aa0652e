"""The calls one node makes to another's internal routes: a follower's long-poll fetch and
its leader-epoch query (KIP-279), over one pooled aiohttp session.

The routes' answers are the contract: batches as `application/vnd.kafka.record-batch`, the
leader's high watermark and log start in headers, errors as problem+json with the codes of
`replication.errors`, which come back here as the same exceptions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson

from engine.errors import EngineError, OffsetOutOfRange
from replication import errors

REPLICA_PREFIX = "/internal/v1/replicas"
HIGH_WATERMARK = "Sluice-High-Watermark"
LOG_START_OFFSET = "Sluice-Log-Start-Offset"
MAX_ERROR_BYTES = 64 * 1024

_ERRORS: dict[str, type[errors.ReplicationError]] = {
    cls.code: cls
    for cls in (
        errors.NotLeader,
        errors.LeaderNotAvailable,
        errors.FencedLeaderEpoch,
        errors.UnknownLeaderEpoch,
        errors.NotController,
    )
}


@dataclass(frozen=True)
class ReplicaFetch:
    """A leader's answer to a follower: whole batches from the fetch offset, and its marks."""

    data: bytes
    high_watermark: int
    log_start_offset: int


def replica_path(topic: str, partition: int, what: str) -> str:
    return f"{REPLICA_PREFIX}/{quote(topic, safe='')}/{partition}/{what}"


class ReplicaClient:
    """One session for every call to other nodes (connections are pooled per node)."""

    def __init__(self, request_timeout_s: float = 30.0, authorization: str | None = None) -> None:
        self.authorization = authorization  # the Authorization header of every call, if any
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=60),
            timeout=aiohttp.ClientTimeout(total=request_timeout_s),
            auto_decompress=False,
        )

    async def close(self) -> None:
        await self._session.close()

    def _headers(self) -> dict[str, str]:
        return {} if self.authorization is None else {"Authorization": self.authorization}

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
        url = leader_url + replica_path(topic, partition, "records")
        try:
            async with self._session.get(url, params=params, headers=self._headers()) as response:
                if response.status != 200:
                    raise await _error(response)
                data = await response.read()
                return ReplicaFetch(
                    data,
                    int(response.headers[HIGH_WATERMARK]),
                    int(response.headers[LOG_START_OFFSET]),
                )
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise errors.NodeUnreachable(f"{leader_url}: {exc!r}") from exc

    async def epoch_end(
        self, leader_url: str, topic: str, partition: int, *, leader_epoch: int, epoch: int
    ) -> tuple[int, int]:
        """KIP-279: the leader's (largest epoch <= `epoch`, the offset where it ends)."""
        params = {"leader_epoch": str(leader_epoch), "epoch": str(epoch)}
        url = leader_url + replica_path(topic, partition, "epoch-end")
        try:
            async with self._session.get(url, params=params, headers=self._headers()) as response:
                if response.status != 200:
                    raise await _error(response)
                doc = orjson.loads(await response.read())
                return int(doc["epoch"]), int(doc["end_offset"])
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise errors.NodeUnreachable(f"{leader_url}: {exc!r}") from exc


async def _error(response: aiohttp.ClientResponse) -> EngineError:
    """The exception a problem+json answer stands for (a generic one for an unknown code)."""
    raw = await response.content.read(MAX_ERROR_BYTES)
    try:
        problem: dict[str, Any] = orjson.loads(raw)
    except orjson.JSONDecodeError:
        problem = {}
    code = str(problem.get("code", ""))
    detail = str(problem.get("detail", f"HTTP {response.status}"))
    if code == OffsetOutOfRange.code:
        return OffsetOutOfRange(
            int(problem.get("offset", -1)),
            int(problem.get("log_start_offset", 0)),
            int(problem.get("log_end_offset", 0)),
        )
    cls = _ERRORS.get(code)
    if cls is errors.NotLeader:
        leader = problem.get("leader")
        return errors.NotLeader(detail, leader if isinstance(leader, int) else None)
    if cls is not None:
        return cls(detail)
    return errors.ReplicationError(f"{response.status} {code}: {detail}")
