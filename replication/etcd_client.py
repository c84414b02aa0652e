"""A small typed client for etcd's v3 JSON gateway (`/v3/...`, etcd 3.4+) over aiohttp: ranges,
transactions, leases and a reconnecting prefix watch; just what the metadata store needs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

import aiohttp
import msgspec
from yarl import URL

from replication.errors import MetadataUnavailable

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # one response body or watch line; etcd's own cap is lower
RANGE_PAGE = 1000  # keys per range request; pages are read at one revision
RETRY_MIN_S = 0.05
RETRY_MAX_S = 2.0

_JSON = {"Content-Type": "application/json"}
# Ask etcd to cancel the watch when its member loses the raft leader, instead of going quiet.
_WATCH_HEADERS = {**_JSON, "Grpc-Metadata-hasleader": "true"}
_T = TypeVar("_T")


class LeaseNotFound(MetadataUnavailable):
    """etcd does not know the lease: it expired or was revoked."""


class KeyValue(msgspec.Struct, frozen=True):
    """One key as etcd stores it, with its revisions."""

    key: bytes = b""
    value: bytes = b""
    create_revision: int = 0
    mod_revision: int = 0
    version: int = 0
    lease: int = 0


class Event(msgspec.Struct, frozen=True):
    """One change seen by a watch; a DELETE carries only the key and its mod revision."""

    type: Literal["PUT", "DELETE"] = "PUT"
    kv: KeyValue = msgspec.field(default_factory=KeyValue)


@dataclass(frozen=True)
class Compare:
    """A transaction guard: `target` of `key` compared with `operand` (bytes for VALUE)."""

    key: bytes
    target: Literal["VALUE", "VERSION", "CREATE", "MOD"]
    operand: bytes | int
    result: Literal["EQUAL", "NOT_EQUAL", "GREATER", "LESS"] = "EQUAL"


@dataclass(frozen=True)
class Put:
    key: bytes
    value: bytes
    lease: int = 0


@dataclass(frozen=True)
class Delete:
    """Delete `key`, or every key in [key, range_end) when range_end is set."""

    key: bytes
    range_end: bytes = b""


@dataclass(frozen=True)
class Get:
    """Read one key inside a transaction (its result lands in TxnResult.gets)."""

    key: bytes


Op = Put | Delete | Get


@dataclass(frozen=True)
class TxnResult:
    succeeded: bool
    revision: int  # the store's revision after the transaction
    gets: tuple[KeyValue | None, ...]  # the executed branch's Get results, in order


@dataclass(frozen=True)
class Lease:
    id: int
    ttl_s: int  # as granted: etcd may raise a short TTL to its minimum


@dataclass(frozen=True)
class Snapshot:
    """Every key under the watched prefix at `revision` (after a compaction cut the history)."""

    kvs: tuple[KeyValue, ...]
    revision: int


@dataclass(frozen=True)
class Events:
    """The changes of one or more whole revisions, the last being `revision`."""

    events: tuple[Event, ...]
    revision: int


WatchUpdate = Snapshot | Events


class _Header(msgspec.Struct):
    revision: int = 0


class _Status(msgspec.Struct):
    message: str = ""
    code: int = 0


class _RangeResponse(msgspec.Struct):
    header: _Header = msgspec.field(default_factory=_Header)
    kvs: list[KeyValue] = msgspec.field(default_factory=list)
    more: bool = False


class _ResponseOp(msgspec.Struct):
    response_range: _RangeResponse | None = None


class _TxnResponse(msgspec.Struct):
    header: _Header = msgspec.field(default_factory=_Header)
    succeeded: bool = False
    responses: list[_ResponseOp] = msgspec.field(default_factory=list)


class _LeaseResponse(msgspec.Struct):
    id: int = msgspec.field(default=0, name="ID")
    ttl: int = msgspec.field(default=0, name="TTL")


class _StreamError(msgspec.Struct):
    message: str = ""


class _KeepAliveLine(msgspec.Struct):
    result: _LeaseResponse | None = None
    error: _StreamError | None = None


class _WatchResult(msgspec.Struct):
    header: _Header = msgspec.field(default_factory=_Header)
    canceled: bool = False
    compact_revision: int = 0
    cancel_reason: str = ""
    events: list[Event] = msgspec.field(default_factory=list)


class _WatchLine(msgspec.Struct):
    result: _WatchResult | None = None
    error: _StreamError | None = None


class _Compacted(Exception):
    """The watch's start revision was compacted away: the caller must reload."""


def prefix_end(prefix: bytes) -> bytes:
    """The range end that covers every key starting with `prefix` (etcd's prefix rule)."""
    trimmed = prefix.rstrip(b"\xff")
    if not trimmed:
        return b"\0"
    return trimmed[:-1] + bytes([trimmed[-1] + 1])


def _decode(body: bytes, kind: type[_T], what: str) -> _T:
    try:
        return msgspec.json.decode(body, type=kind, strict=False)
    except msgspec.DecodeError as exc:
        raise MetadataUnavailable(f"etcd {what}: malformed response ({exc})") from exc


def _compare(compare: Compare) -> dict[str, object]:
    field = {
        "VALUE": "value",
        "VERSION": "version",
        "CREATE": "create_revision",
        "MOD": "mod_revision",
    }[compare.target]
    return {
        "key": compare.key,
        "target": compare.target,
        "result": compare.result,
        field: compare.operand,
    }


def _op(op: Op) -> dict[str, object]:
    if isinstance(op, Put):
        return {"request_put": {"key": op.key, "value": op.value, "lease": op.lease}}
    if isinstance(op, Delete):
        return {"request_delete_range": {"key": op.key, "range_end": op.range_end}}
    return {"request_range": {"key": op.key}}


def _error(what: str, status: int, body: bytes) -> MetadataUnavailable:
    """The gateway's error body (a gRPC status as JSON) as a MetadataUnavailable."""
    try:
        error = msgspec.json.decode(body, type=_Status)
    except msgspec.DecodeError:
        error = _Status(message=f"HTTP {status}")
    message = f"etcd {what}: {error.message or f'HTTP {status}'}"
    if error.code == 5 and "lease not found" in error.message:
        return LeaseNotFound(message)
    if "too many operations in txn" in error.message:
        return MetadataUnavailable(f"{message} (raise etcd's --max-txn-ops)")
    return MetadataUnavailable(message)


async def _read_bounded(content: aiohttp.StreamReader) -> bytes:
    body = bytearray()
    async for chunk in content.iter_any():
        body += chunk
        if len(body) > MAX_MESSAGE_BYTES:
            raise MetadataUnavailable(f"an etcd response exceeds {MAX_MESSAGE_BYTES} bytes")
    return bytes(body)


def _endpoint(text: str) -> URL:
    url = URL(text)
    if url.scheme not in ("http", "https") or not url.host or url.user is not None:
        raise ValueError("etcd endpoints are http(s)://host:port URLs without credentials")
    return url.origin()


class EtcdClient:
    """etcd's JSON gateway across several endpoints: a request that cannot connect moves on to
    the next endpoint, and any failure of an endpoint also restarts the watches reading it."""

    def __init__(self, endpoints: Sequence[str], *, timeout_s: float = 5.0) -> None:
        if not endpoints:
            raise ValueError("at least one etcd endpoint is needed")
        self._endpoints = [_endpoint(e) for e in endpoints]
        self._timeout_s = timeout_s
        # A stop's bounds (end_by): no request past the deadline, none waiting longer than that.
        self._deadline: float | None = None
        self._longest_s = timeout_s
        self._current = 0
        self._session: aiohttp.ClientSession | None = None
        self._closed = False
        # In-flight watch reads per endpoint, cut short when that endpoint fails elsewhere.
        self._watch_waits: dict[int, set[asyncio.Timeout]] = {
            i: set() for i in range(len(self._endpoints))
        }

    async def close(self) -> None:
        self._closed = True
        if self._session is not None:
            await self._session.close()
            self._session = None

    def end_by(self, deadline: float, longest_s: float) -> None:
        """A stop: from now on each request waits at most `longest_s` and ends by `deadline`
        (the loop's clock); past it none is sent."""
        self._deadline = deadline
        self._longest_s = longest_s

    def _limit(self, path: str, timeout_s: float | None) -> float:
        """How long a request may wait: its own timeout (else the client's), within a stop's
        bounds; MetadataUnavailable past the stop's deadline."""
        limit = timeout_s or self._timeout_s
        if self._deadline is None:
            return limit
        left = self._deadline - asyncio.get_running_loop().time()
        if left <= 0:
            raise MetadataUnavailable(f"etcd {path}: not asked, past the stop's deadline")
        return min(limit, self._longest_s, left)

    def _http(self) -> aiohttp.ClientSession:
        if self._closed:
            raise MetadataUnavailable("the etcd client is closed")
        if self._session is None:
            # A fresh connection per request: a pooled one may have died with a restarted etcd,
            # and a POST that failed on it could have been applied or not.
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True))
        return self._session

    def _failed(self, index: int) -> None:
        """Move on from a failed endpoint and interrupt the watch reads still waiting on it."""
        if self._current == index:
            self._current = (index + 1) % len(self._endpoints)
        now = asyncio.get_running_loop().time()
        for wait in self._watch_waits[index]:
            if not wait.expired():
                wait.reschedule(now)

    async def _call(self, path: str, request: object, timeout_s: float | None = None) -> bytes:
        """POST one request; try the next endpoint only when this one refuses the connection
        (the request was surely not applied), else fail with MetadataUnavailable."""
        payload = msgspec.json.encode(request)
        timeout = aiohttp.ClientTimeout(total=self._limit(path, timeout_s))
        refused: list[str] = []
        for _ in self._endpoints:
            index = self._current
            url = self._endpoints[index] / path
            try:
                async with self._http().post(
                    url, data=payload, headers=_JSON, timeout=timeout
                ) as response:
                    body = await _read_bounded(response.content)
                    status = response.status
            except aiohttp.ClientConnectorError as exc:
                self._failed(index)
                refused.append(f"{url.origin()}: {exc.strerror or type(exc).__name__}")
                continue
            except (aiohttp.ClientError, TimeoutError) as exc:
                self._failed(index)
                reason = str(exc) or type(exc).__name__
                raise MetadataUnavailable(f"etcd {path} at {url.origin()}: {reason}") from exc
            if status != 200:
                raise _error(path, status, body)
            return body
        raise MetadataUnavailable(f"no etcd endpoint reachable ({'; '.join(refused)})")

    async def get(self, key: bytes, timeout_s: float | None = None) -> KeyValue | None:
        body = await self._call("v3/kv/range", {"key": key}, timeout_s)
        kvs = _decode(body, _RangeResponse, "range").kvs
        return kvs[0] if kvs else None

    async def last_put(self, prefix: bytes) -> int:
        """The revision of the latest write of a key now under `prefix` (0: none), by a
        linearizable read of one key's name: a put acknowledged before this call is at or below
        it (a delete leaves no key, so it is not counted)."""
        request = {"key": prefix, "range_end": prefix_end(prefix), "limit": 1,
                   "sort_order": "DESCEND", "sort_target": "MOD", "keys_only": True}  # fmt: skip
        kvs = _decode(await self._call("v3/kv/range", request), _RangeResponse, "range").kvs
        return kvs[0].mod_revision if kvs else 0

    async def get_prefix(self, prefix: bytes) -> tuple[list[KeyValue], int]:
        """Every key under `prefix` and the revision they were read at (pages, one revision)."""
        start, end, revision = prefix, prefix_end(prefix), 0
        kvs: list[KeyValue] = []
        while True:
            request = {"key": start, "range_end": end, "limit": RANGE_PAGE, "revision": revision}
            page = _decode(await self._call("v3/kv/range", request), _RangeResponse, "range")
            revision = revision or page.header.revision
            kvs.extend(page.kvs)
            if not page.more or not page.kvs:
                return kvs, revision
            start = page.kvs[-1].key + b"\0"

    async def txn(
        self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()
    ) -> TxnResult:
        request = {
            "compare": [_compare(c) for c in compares],
            "success": [_op(op) for op in success],
            "failure": [_op(op) for op in failure],
        }
        response = _decode(await self._call("v3/kv/txn", request), _TxnResponse, "txn")
        ranges = [r.response_range for r in response.responses if r.response_range is not None]
        gets = tuple(r.kvs[0] if r.kvs else None for r in ranges)
        return TxnResult(response.succeeded, response.header.revision, gets)

    async def grant(self, ttl_s: int) -> Lease:
        body = await self._call("v3/lease/grant", {"TTL": ttl_s})
        lease = _decode(body, _LeaseResponse, "lease grant")
        return Lease(lease.id, lease.ttl)

    async def keepalive(self, lease_id: int, timeout_s: float | None = None) -> int:
        """Refresh a lease once; its remaining TTL in seconds, 0 if etcd no longer has it."""
        body = await self._call("v3/lease/keepalive", {"ID": lease_id}, timeout_s)
        line = _decode(body.split(b"\n", 1)[0], _KeepAliveLine, "lease keepalive")
        if line.error is not None:
            raise MetadataUnavailable(f"etcd lease keepalive: {line.error.message}")
        return line.result.ttl if line.result is not None else 0

    async def revoke(self, lease_id: int) -> None:
        """Revoke a lease, deleting its keys at once (LeaseNotFound if it is already gone)."""
        await self._call("v3/lease/revoke", {"ID": lease_id})

    async def watch_prefix(
        self, prefix: bytes, start_revision: int
    ) -> AsyncGenerator[WatchUpdate, None]:
        """Changes under `prefix` from `start_revision` on, for ever: after a disconnect it resumes
        where it stopped (next endpoint); if that revision was compacted, it yields a Snapshot."""
        next_revision = start_revision
        delay = RETRY_MIN_S
        failing = False
        while True:
            try:
                async with contextlib.aclosing(self._watch_once(prefix, next_revision)) as stream:
                    async for update in stream:
                        if failing:
                            log.info("etcd watch on %r resumed", prefix)
                        delay, failing = RETRY_MIN_S, False
                        next_revision = update.revision + 1
                        yield update
                reason = "the stream ended"
            except _Compacted:
                log.info("etcd compacted revision %d of %r; reloading", next_revision, prefix)
                try:
                    kvs, revision = await self.get_prefix(prefix)
                except MetadataUnavailable as exc:
                    reason = str(exc)
                else:
                    next_revision = revision + 1
                    yield Snapshot(tuple(kvs), revision)
                    continue
            except MetadataUnavailable as exc:
                reason = str(exc)
            (log.debug if failing else log.warning)(
                "etcd watch on %r interrupted (%s); resuming at revision %d",
                prefix,
                reason,
                next_revision,
            )
            failing = True
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_S)

    async def follow_prefix(
        self, prefix: bytes, start_revision: int, fold: Callable[[WatchUpdate], None], what: str
    ) -> None:
        """Fold every update under `prefix` into a store's state, for ever; a failing `fold`
        is logged (naming `what`) and the watch goes on."""
        async with contextlib.aclosing(self.watch_prefix(prefix, start_revision)) as updates:
            async for update in updates:
                try:
                    fold(update)
                except Exception:
                    log.exception("%s failed", what)

    async def _watch_once(self, prefix: bytes, start_revision: int) -> AsyncGenerator[Events, None]:
        """One watch stream on the current endpoint, until it ends or fails."""
        index = self._current
        url = self._endpoints[index] / "v3/watch"
        create = {"key": prefix, "range_end": prefix_end(prefix), "start_revision": start_revision}
        timeout = aiohttp.ClientTimeout(total=None, connect=self._timeout_s)
        try:
            response = await self._watch_wait(
                index,
                self._http().post(
                    url,
                    data=msgspec.json.encode({"create_request": create}),
                    headers=_WATCH_HEADERS,
                    timeout=timeout,
                ),
            )
        except (aiohttp.ClientError, TimeoutError) as exc:
            self._failed(index)
            reason = str(exc) or type(exc).__name__
            raise MetadataUnavailable(f"etcd watch at {url.origin()}: {reason}") from exc
        try:
            if response.status != 200:
                raise _error("watch", response.status, await _read_bounded(response.content))
            buffer = bytearray()
            while True:
                try:
                    chunk = await self._watch_wait(index, response.content.readany())
                except (aiohttp.ClientError, TimeoutError) as exc:
                    self._failed(index)
                    reason = str(exc) or type(exc).__name__
                    raise MetadataUnavailable(f"etcd watch at {url.origin()}: {reason}") from exc
                if not chunk:
                    return
                buffer += chunk
                if b"\n" in chunk:
                    *lines, rest = buffer.split(b"\n")
                    buffer = bytearray(rest)
                    for line in lines:
                        events = self._watch_events(bytes(line)) if line.strip() else None
                        if events is not None:
                            yield events
                if len(buffer) > MAX_MESSAGE_BYTES:
                    raise MetadataUnavailable(f"an etcd watch message exceeds {MAX_MESSAGE_BYTES}")
        finally:
            response.close()

    @staticmethod
    def _watch_events(line: bytes) -> Events | None:
        """Parse one watch message: its events, None for notices, an exception for the end."""
        message = _decode(line, _WatchLine, "watch")
        if message.error is not None:
            raise MetadataUnavailable(f"etcd watch: {message.error.message}")
        result = message.result
        if result is None:
            return None
        if result.compact_revision:
            raise _Compacted
        if result.canceled:
            raise MetadataUnavailable(f"etcd cancelled the watch: {result.cancel_reason}")
        if not result.events:
            return None
        return Events(tuple(result.events), result.events[-1].kv.mod_revision)

    async def _watch_wait(self, index: int, step: Awaitable[_T]) -> _T:
        """Await one step of a watch; TimeoutError if endpoint `index` fails meanwhile."""
        async with asyncio.timeout(None) as wait:
            self._watch_waits[index].add(wait)
            try:
                return await step
            finally:
                self._watch_waits[index].discard(wait)
