"""Forwarding: a request this node cannot serve goes, once, to the node that can (the
partition's leader, the group's coordinator, the controller), over pooled connections; the
answer comes back as it was, status and error code unchanged."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from engine.producer_state import ProducerIdentity
from replication.acks import Acks
from replication.errors import NodeTimedOut, NodeUnreachable, ReplicationError
from replication.http1 import ConnectFailed, Http1Pool
from replication.node_contract import (
    ANSWER_HEADERS,
    ANSWER_PREFIX,
    FORWARDED_BY,
    RECORD_BATCH,
    REQUEST_HEADERS,
    append_path,
    marker_path,
)

_ANSWER_HEADERS = frozenset(name.lower() for name in ANSWER_HEADERS)


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


class RemoteError(ReplicationError):
    """A forwarded call answered with a problem: its status, code and members, unchanged."""

    def __init__(self, status: int, problem: Mapping[str, Any]) -> None:
        super().__init__(str(problem.get("detail", f"HTTP {status}")))
        self.status = status
        self.code = str(problem.get("code", "REMOTE_ERROR"))
        self.extra = {
            k: v
            for k, v in problem.items()
            if k not in ("type", "title", "status", "detail", "code")
        }


class ForwardClient:
    """Keep-alive connections pooled per node (replication.http1), a bounded connect, and a
    bounded wait for each answer: `answer_timeout_s` past what the call asks the other node
    to wait for (a long-poll's or an acks wait's `timeout_ms`), so that a node that took a
    request and stopped (paused, overloaded) answers NodeTimedOut instead of holding it."""

    def __init__(
        self,
        node_id: int,
        connect_timeout_s: float = 5.0,
        authorization: str | None = None,
        answer_timeout_s: float = 30.0,
    ) -> None:
        self.node_id = node_id
        self.authorization = authorization  # when set, it replaces the client's on every call
        self.connect_timeout_s = connect_timeout_s
        self.answer_timeout_s = answer_timeout_s
        self._pool = Http1Pool(connect_timeout_s)
        self._streams: aiohttp.ClientSession | None = None  # made at the first stream

    async def close(self) -> None:
        await self._pool.close()
        if self._streams is not None:
            await self._streams.close()

    def _sent_headers(self, headers: Mapping[str, str], names: tuple[str, ...]) -> dict[str, str]:
        """The headers of `names` the other node is given, marked as forwarded."""
        sent = {name: headers[name] for name in names if name in headers}
        sent[FORWARDED_BY] = str(self.node_id)
        if self.authorization is not None:
            sent["Authorization"] = self.authorization
        return sent

    @contextlib.asynccontextmanager
    async def stream(
        self, url: str, path_qs: str, headers: Mapping[str, str], also: tuple[str, ...] = ()
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """GET a streaming answer (an event stream) from the node at `url`, to be read as it
        comes; the request carries the forwarded headers and those named in `also`."""
        if self._streams is None:
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout_s)
            self._streams = aiohttp.ClientSession(timeout=timeout, auto_decompress=False)
        sent = self._sent_headers(headers, REQUEST_HEADERS + also)
        try:
            async with self._streams.get(url + path_qs, headers=sent) as answer:
                yield answer
        except aiohttp.ClientConnectorError as exc:
            raise NodeUnreachable(f"{url} refused the connection: {exc}", delivered=False) from exc

    async def forward(
        self,
        url: str,
        method: str,
        path_qs: str,
        headers: Mapping[str, str],
        body: bytes,
        waits_ms: int = 0,
    ) -> Answer:
        """Send the request to the node at `url` and return its answer as it is; `waits_ms`:
        how long the request itself may wait there (its `timeout_ms`), added to the bound."""
        return await self._send(
            url, method, path_qs, self._sent_headers(headers, REQUEST_HEADERS), body, waits_ms
        )

    async def call(
        self, url: str, method: str, path_qs: str, headers: Mapping[str, str], body: bytes
    ) -> Answer:
        """Call the public API of the node at `url` as a client would, with this node's key
        (the internal principal): not marked forwarded, so that node forwards it on to the
        coordinator or leader that serves it, as it does a client's request."""
        sent = {name: headers[name] for name in REQUEST_HEADERS if name in headers}
        if self.authorization is not None:
            sent["Authorization"] = self.authorization
        return await self._send(url, method, path_qs, sent, body)

    async def _send(
        self,
        url: str,
        method: str,
        path_qs: str,
        sent: dict[str, str],
        body: bytes,
        waits_ms: int = 0,
    ) -> Answer:
        bound_s = self.answer_timeout_s + waits_ms / 1000
        try:
            reply = await self._pool.request(url, method, path_qs, sent, body, bound_s)
        except ConnectFailed as exc:
            raise NodeUnreachable(f"{url} refused the connection: {exc}", delivered=False) from exc
        except TimeoutError:
            raise NodeTimedOut(
                f"{url} took the request and did not answer within {bound_s:g} s; it may have "
                "been served there"
            ) from None
        except (OSError, ValueError, asyncio.IncompleteReadError) as exc:
            raise NodeUnreachable(f"forwarding to {url} failed: {exc!r}") from exc
        kept = {
            name: value
            for name, value in reply.headers
            if name.lower() in _ANSWER_HEADERS or name.lower().startswith(ANSWER_PREFIX)
        }
        return Answer(reply.status, kept, reply.body)

    async def produce_batches(
        self,
        url: str,
        topic: str,
        partition: int,
        data: bytes | bytearray,
        acks: Acks,
        timeout_ms: int,
        producer: ProducerIdentity | None = None,
    ) -> int:
        """Append batches a front node built (flags and all) at the partition's leader, through
        its internal append route, in `producer`'s transaction if given; returns their base
        offset."""
        path = append_path(topic, partition)
        query = f"?acks={acks.value}&timeout_ms={timeout_ms}"
        if producer is not None:
            query += f"&producer_id={producer.producer_id}&producer_epoch={producer.epoch}"
        answer = await self.forward(
            url, "POST", path + query, {"Content-Type": RECORD_BATCH}, bytes(data), timeout_ms
        )
        doc = orjson.loads(answer.body) if answer.body else {}
        if answer.status >= 400:
            raise RemoteError(answer.status, doc if isinstance(doc, dict) else {})
        return int(doc["base_offset"])

    async def write_marker(
        self,
        url: str,
        topic: str,
        partition: int,
        producer: ProducerIdentity,
        commit: bool,
        coordinator_epoch: int,
        timeout_ms: int,
    ) -> None:
        """`ReplicaManager.write_marker` at the partition's leader, through its internal
        markers route."""
        body = orjson.dumps(
            {
                "producer_id": producer.producer_id,
                "producer_epoch": producer.epoch,
                "commit": commit,
                "coordinator_epoch": coordinator_epoch,
                "timeout_ms": timeout_ms,
            }
        )
        path = marker_path(topic, partition)
        answer = await self.forward(
            url, "POST", path, {"Content-Type": "application/json"}, body, timeout_ms
        )
        if answer.status >= 400:
            doc = orjson.loads(answer.body) if answer.body else {}
            raise RemoteError(answer.status, doc if isinstance(doc, dict) else {})
