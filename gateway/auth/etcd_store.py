"""The cluster's AuthStore in etcd, beside its metadata: `<prefix>-auth/acls/<sha256 of the
binding>` and `<prefix>-auth/credentials/<key id>`. Every node follows the prefix with a watch,
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
from gateway.auth.store import AuthState, AuthStore
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


class EtcdAuthStore(AuthStore):
    """Bindings and credentials in etcd, followed by a watch from the revision first read."""

    def __init__(self, endpoints: Sequence[str], metadata_prefix: str) -> None:
        super().__init__()
        self._client = EtcdClient(endpoints)
        self._root = auth_prefix(metadata_prefix)
        self._acls: dict[bytes, AclBinding] = {}
        self._credentials: dict[bytes, Credential] = {}
        self.revision = 0
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def _acl_key(self, binding: AclBinding) -> bytes:
        canonical = orjson.dumps(binding.to_dict(), option=orjson.OPT_SORT_KEYS)
        return f"{self._root}acls/{hashlib.sha256(canonical).hexdigest()}".encode()

    def _credential_key(self, key_id: str) -> bytes:
        return f"{self._root}credentials/{key_id}".encode()

    async def start(self) -> None:
        try:
            kvs, revision = await self._client.get_prefix(self._root.encode())
        except BaseException:
            await self._client.close()
            raise
        self._update(Snapshot(tuple(kvs), revision))
        self._task = asyncio.create_task(self._watch(revision + 1), name="etcd-auth-watch")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._client.close()

    async def refresh(self, force: bool = False) -> None:
        """The watch keeps the state current."""

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
            for kv in update.kvs:
                self._apply(kv.key, kv)
        self.revision = update.revision
        self.publish(
            AuthState(frozenset(self._acls.values()), Credentials(self._credentials.values()))
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
        except (orjson.JSONDecodeError, msgspec.DecodeError, AclError, AttributeError) as exc:
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
