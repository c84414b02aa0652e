"""The cluster's AuthStore in etcd, beside its metadata: `<prefix>-auth/acls/<sha256 of the
binding>`, `<prefix>-auth/credentials/<key id>` and `<prefix>-auth/quotas/<sha256 of the
principal>`. Every node follows the prefix with a watch,
so a change made through any node is enforced by all of them."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Sequence

import msgspec
import orjson

from gateway.auth.acl import AclBinding, AclError
from gateway.auth.credentials import Credential, Credentials, decode_credential, encode_credential
from gateway.auth.quotas import Quota, QuotaError
from gateway.auth.store import AuthState, AuthStore
from replication.errors import MetadataUnavailable
from replication.etcd_client import (
    Compare,
    Delete,
    EtcdClient,
    Events,
    KeyValue,
    Put,
    Snapshot,
    WatchUpdate,
)

log = logging.getLogger(__name__)
OWN_WRITE_WAIT_S = 10.0  # how long a write waits for the watch to show it on this node


def auth_prefix(metadata_prefix: str) -> str:
    """The auth keys' prefix: beside the metadata's, so the metadata watch does not see them."""
    return metadata_prefix.rstrip("/") + "-auth/"


def _retrieved(task: asyncio.Task[int]) -> None:
    """A read whose callers all went away: its failure is not worth a warning at exit."""
    if not task.cancelled():
        task.exception()


class EtcdAuthStore(AuthStore):
    """Bindings and credentials in etcd, followed by a watch from the revision first read."""

    def __init__(self, endpoints: Sequence[str], metadata_prefix: str) -> None:
        super().__init__()
        self._client = EtcdClient(endpoints)
        self._root = auth_prefix(metadata_prefix)
        self._acls: dict[bytes, AclBinding] = {}
        self._credentials: dict[bytes, Credential] = {}
        self._quotas: dict[bytes, tuple[str, Quota]] = {}
        self.revision = 0
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # refresh(): the read of etcd in flight, and the next one (callers arriving now).
        self._reading: asyncio.Task[int] | None = None
        self._next_read: asyncio.Task[int] | None = None

    def _acl_key(self, binding: AclBinding) -> bytes:
        canonical = orjson.dumps(binding.to_dict(), option=orjson.OPT_SORT_KEYS)
        return f"{self._root}acls/{hashlib.sha256(canonical).hexdigest()}".encode()

    def _credential_key(self, key_id: str) -> bytes:
        return f"{self._root}credentials/{key_id}".encode()

    def _quota_key(self, entity: str) -> bytes:
        return f"{self._root}quotas/{hashlib.sha256(entity.encode()).hexdigest()}".encode()

    async def start(self) -> None:
        try:
            kvs, revision = await self._client.get_prefix(self._root.encode())
        except BaseException:
            await self._client.close()
            raise
        self._update(Snapshot(tuple(kvs), revision))
        self._task = asyncio.create_task(self._watch(revision + 1), name="etcd-auth-watch")

    async def close(self) -> None:
        for task in (self._task, self._reading, self._next_read):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, MetadataUnavailable):
                    await task
        await self._client.close()

    async def refresh(self, force: bool = False) -> None:
        """The watch keeps the state current; this catches up with a key written just before
        (`sluice auth create-key --cluster`, another node) that the watch may not have shown
        yet: etcd's latest put under the prefix, read now, and the watch awaited up to it
        (bounded). Callers arriving while a read is in flight share the next one, so unknown
        keys cost etcd one small read at a time; if etcd is unreachable, the state stays."""
        if self._next_read is None:
            self._next_read = asyncio.create_task(self._read_last_put(self._reading))
            self._next_read.add_done_callback(_retrieved)
        try:
            revision = await asyncio.shield(self._next_read)
        except MetadataUnavailable as exc:
            log.debug("auth: etcd not read, keeping what the watch has: %s", exc)
            return
        await self._seen(revision)

    async def _read_last_put(self, previous: asyncio.Task[int] | None) -> int:
        if previous is not None:
            await asyncio.wait({previous})  # it may have read before its callers' keys existed
        self._reading, self._next_read = self._next_read, None
        try:
            return await self._client.last_put(self._root.encode())
        finally:
            if self._reading is asyncio.current_task():
                self._reading = None

    async def _watch(self, start_revision: int) -> None:
        await self._client.follow_prefix(
            self._root.encode(), start_revision, self._update, "an auth listener"
        )

    def _update(self, update: WatchUpdate) -> None:
        if isinstance(update, Events):
            for event in update.events:
                self._apply(event.kv.key, event.kv if event.type == "PUT" else None)
        else:
            self._acls.clear()
            self._credentials.clear()
            self._quotas.clear()
            for kv in update.kvs:
                self._apply(kv.key, kv)
        self.revision = update.revision
        self.publish(
            AuthState(
                frozenset(self._acls.values()),
                Credentials(self._credentials.values()),
                dict(self._quotas.values()),
            )
        )
        self._changed.set()
        self._changed = asyncio.Event()

    def _apply(self, key: bytes, kv: KeyValue | None) -> None:
        kind = key[len(self._root) :].split(b"/", 1)[0]
        try:
            if kind == b"acls":
                if kv is None:
                    self._acls.pop(key, None)
                else:
                    self._acls[key] = AclBinding.from_dict(orjson.loads(kv.value))
            elif kind == b"credentials":
                if kv is None:
                    self._credentials.pop(key, None)
                else:
                    self._credentials[key] = decode_credential(kv.value)
            elif kind == b"quotas":
                if kv is None:
                    self._quotas.pop(key, None)
                else:
                    doc = orjson.loads(kv.value)
                    self._quotas[key] = (doc["principal"], Quota.from_dict(doc["quota"]))
        except (
            orjson.JSONDecodeError,
            msgspec.DecodeError,
            AclError,
            QuotaError,
            AttributeError,
            KeyError,
            TypeError,
        ) as exc:
            log.warning("ignoring malformed auth record at %r: %s", key, exc)

    async def _seen(self, revision: int) -> None:
        """Wait (bounded) until the watch has delivered `revision`: a node reads its writes."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(OWN_WRITE_WAIT_S):
                while self.revision < revision:
                    await self._changed.wait()

    async def add_acl(self, binding: AclBinding) -> bool:
        key = self._acl_key(binding)
        value = orjson.dumps(binding.to_dict())
        result = await self._client.txn([Compare(key, "CREATE", 0)], [Put(key, value)])
        await self._seen(result.revision)
        return result.succeeded

    async def remove_acl(self, binding: AclBinding) -> bool:
        key = self._acl_key(binding)
        result = await self._client.txn([Compare(key, "VERSION", 0, "GREATER")], [Delete(key)])
        await self._seen(result.revision)
        return result.succeeded

    async def add_credential(self, record: Credential) -> None:
        key = self._credential_key(record.key_id)
        ops: list[Put | Delete] = [Put(key, encode_credential(record))]
        replaced = self.state.credentials.basic.get(record.principal)
        if record.kind == "basic" and replaced is not None:
            ops.append(Delete(self._credential_key(replaced.key_id)))
        result = await self._client.txn([], ops)
        await self._seen(result.revision)

    async def remove_credential(self, key_id: str) -> bool:
        key = self._credential_key(key_id)
        result = await self._client.txn([Compare(key, "VERSION", 0, "GREATER")], [Delete(key)])
        await self._seen(result.revision)
        return result.succeeded

    async def set_quota(self, entity: str, quota: Quota) -> None:
        key = self._quota_key(entity)
        value = orjson.dumps({"principal": entity, "quota": quota.to_dict()})
        result = await self._client.txn([], [Put(key, value)])
        await self._seen(result.revision)

    async def remove_quota(self, entity: str) -> bool:
        key = self._quota_key(entity)
        result = await self._client.txn([Compare(key, "VERSION", 0, "GREATER")], [Delete(key)])
        await self._seen(result.revision)
        return result.succeeded
