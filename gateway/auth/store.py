"""Where ACL bindings, credentials and quotas live, the same for every node: `AuthStore`, with a
file-backed implementation for the single node (`<data_dir>/auth/`); etcd's is in
gateway.auth.etcd_store. Every change publishes a new `AuthState` to the listeners."""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from gateway.auth.acl import AclBinding, AclError
from gateway.auth.credentials import (
    Credential,
    CredentialError,
    Credentials,
    KeyFile,
    write_atomically,
)
from gateway.auth.quotas import Quota, QuotaError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AuthState:
    """One consistent snapshot: the ACL bindings, the stored credentials and the quotas (by
    principal, or `<default>`)."""

    acls: frozenset[AclBinding] = frozenset()
    credentials: Credentials = field(default_factory=Credentials)
    quotas: Mapping[str, Quota] = field(default_factory=dict)


Listener = Callable[[AuthState], None]


class AuthStore(ABC):
    """The bindings and credentials every node enforces; `state` is the latest snapshot."""

    def __init__(self) -> None:
        self.state = AuthState()
        self._listeners: list[Listener] = []

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def publish(self, state: AuthState) -> None:
        self.state = state
        for listener in list(self._listeners):
            listener(state)

    @abstractmethod
    async def start(self) -> None:
        """Load the state (and follow it, where others can change it)."""

    @abstractmethod
    async def close(self) -> None: ...

    @abstractmethod
    async def add_acl(self, binding: AclBinding) -> bool:
        """Store a binding; False if it was there already."""

    @abstractmethod
    async def remove_acl(self, binding: AclBinding) -> bool:
        """Remove a binding; False if there was none."""

    @abstractmethod
    async def add_credential(self, record: Credential) -> None:
        """Store a credential (a Basic secret replaces the principal's previous one)."""

    @abstractmethod
    async def remove_credential(self, key_id: str) -> bool:
        """Revoke a credential; False if there was none with that id."""

    @abstractmethod
    async def set_quota(self, entity: str, quota: Quota) -> None:
        """Store a principal's (or `<default>`'s) quota, replacing the one it had."""

    @abstractmethod
    async def remove_quota(self, entity: str) -> bool:
        """Remove a quota; False if there was none."""

    @abstractmethod
    async def refresh(self, force: bool = False) -> None:
        """Pick up changes made behind the store's back (`sluice auth create-key` on the data
        directory); nothing to do where a watch keeps the state current."""


class _AclFile(msgspec.Struct):
    format: int = 1
    acls: list[dict[str, str]] = msgspec.field(default_factory=list)


def load_acls(path: Path) -> frozenset[AclBinding]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return frozenset()
    try:
        return frozenset(
            AclBinding.from_dict(doc) for doc in msgspec.json.decode(raw, type=_AclFile).acls
        )
    except (msgspec.DecodeError, AclError) as exc:
        raise CredentialError(f"{path}: {exc}") from None


class _QuotaFile(msgspec.Struct):
    format: int = 1
    quotas: dict[str, dict[str, float | None]] = msgspec.field(default_factory=dict)


def load_quotas(path: Path) -> dict[str, Quota]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    try:
        doc = msgspec.json.decode(raw, type=_QuotaFile)
        return {entity: Quota.from_dict(quota) for entity, quota in doc.quotas.items()}
    except (msgspec.DecodeError, QuotaError) as exc:
        raise CredentialError(f"{path}: {exc}") from None


class FileAuthStore(AuthStore):
    """The single node's store: `acls.json` and `quotas.json` (written by this node only) and
    `keys.json` (also written by `sluice auth create-key`, so it is re-read when it changes)."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__()
        directory = data_dir / "auth"
        self.acl_path = directory / "acls.json"
        self.quota_path = directory / "quotas.json"
        self.keys = KeyFile(directory / "keys.json")
        self._signature: tuple[int, int, int] | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        self._signature = self.keys.signature()
        self.publish(
            AuthState(load_acls(self.acl_path), self.keys.load(), load_quotas(self.quota_path))
        )

    async def close(self) -> None:
        pass

    async def refresh(self, force: bool = False) -> None:
        """Re-read keys.json if it was replaced since it was read (one stat), and on `force`
        (SIGHUP) both files."""
        signature = self.keys.signature()
        if signature == self._signature and not force:
            return
        try:
            credentials = self.keys.load()
            acls = load_acls(self.acl_path) if force else self.state.acls
            quotas = load_quotas(self.quota_path) if force else self.state.quotas
        except CredentialError as exc:
            log.warning("keeping the credentials, ACLs and quotas already loaded: %s", exc)
            return
        self._signature = signature
        self.publish(AuthState(acls, credentials, quotas))

    async def add_acl(self, binding: AclBinding) -> bool:
        async with self._lock:
            if binding in self.state.acls:
                return False
            await self._write_acls(self.state.acls | {binding})
            return True

    async def remove_acl(self, binding: AclBinding) -> bool:
        async with self._lock:
            if binding not in self.state.acls:
                return False
            await self._write_acls(self.state.acls - {binding})
            return True

    async def _write_acls(self, acls: frozenset[AclBinding]) -> None:
        doc = _AclFile(acls=[b.to_dict() for b in sorted(acls)])
        self.acl_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        await asyncio.to_thread(write_atomically, self.acl_path, msgspec.json.encode(doc))
        self.publish(AuthState(acls, self.state.credentials, self.state.quotas))

    async def set_quota(self, entity: str, quota: Quota) -> None:
        async with self._lock:
            await self._write_quotas({**self.state.quotas, entity: quota})

    async def remove_quota(self, entity: str) -> bool:
        async with self._lock:
            if entity not in self.state.quotas:
                return False
            await self._write_quotas({k: v for k, v in self.state.quotas.items() if k != entity})
            return True

    async def _write_quotas(self, quotas: dict[str, Quota]) -> None:
        doc = _QuotaFile(quotas={entity: quotas[entity].to_dict() for entity in sorted(quotas)})
        self.quota_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        await asyncio.to_thread(write_atomically, self.quota_path, msgspec.json.encode(doc))
        self.publish(AuthState(self.state.acls, self.state.credentials, quotas))

    async def add_credential(self, record: Credential) -> None:
        await self._change_keys(lambda held: held.with_added(record))

    async def remove_credential(self, key_id: str) -> bool:
        found = False

        def change(held: Credentials) -> Credentials:
            nonlocal found
            found = key_id in held.by_id
            return held.without(key_id)

        await self._change_keys(change)
        return found

    async def _change_keys(self, change: Callable[[Credentials], Credentials]) -> None:
        async with self._lock:
            credentials = await asyncio.to_thread(self.keys.update, change)
            self._signature = self.keys.signature()
            self.publish(AuthState(self.state.acls, credentials, self.state.quotas))
