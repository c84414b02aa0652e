"""The AuthStore of `sluice serve --workers N`: the single node's files (`<data-dir>/auth/`
`keys.json`, `acls.json` and `quotas.json`) under the --data-dir the workers share, written and
read by every worker process (and by `sluice auth create-key --data-dir`, running or not).

A change is a read-change-replace of the file under its advisory lock, so writers never lose
each other's changes. Every worker follows the files (their signatures, polled), and reads
them again at once when another worker says it changed them (gateway.api.all_workers) or when it
meets a key or Basic user it does not know, so that the client that made a change sees it on
whichever worker its next request lands."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec

from gateway.auth.acl import AclBinding
from gateway.auth.credentials import Credential, CredentialError, write_atomically
from gateway.auth.quotas import Quota
from gateway.auth.store import FileAuthStore, _AclFile, _QuotaFile, load_acls, load_quotas

log = logging.getLogger(__name__)
POLL_S = 0.5  # how often a worker looks for changes made elsewhere (a revoke-key --data-dir)
Signature = tuple[int, int, int] | None
# A signature no file has: read the file at the next look (a write of this process may have
# been followed by another's before its signature was taken).
STALE: Signature = (-1, -1, -1)
Bindings = frozenset[AclBinding]
Quotas = dict[str, Quota]


def signature(path: Path) -> Signature:
    """What changes when the file is replaced (None while there is none)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def update_acls(path: Path, change: Callable[[Bindings], Bindings]) -> tuple[Bindings, Bindings]:
    """Apply `change` to the bindings the file holds now and write the result (if different)
    under the file's lock; the bindings before and after."""
    with _locked(path):
        before = load_acls(path)
        after = change(before)
        if after != before:
            doc = _AclFile(acls=[b.to_dict() for b in sorted(after)])
            write_atomically(path, msgspec.json.encode(doc))
        return before, after


def update_quotas(path: Path, change: Callable[[Quotas], Quotas]) -> tuple[Quotas, Quotas]:
    """As update_acls, for the quotas file."""
    with _locked(path):
        before = load_quotas(path)
        after = change(dict(before))
        if after != before:
            doc = _QuotaFile(quotas={entity: after[entity].to_dict() for entity in sorted(after)})
            write_atomically(path, msgspec.json.encode(doc))
        return before, after


class SharedFileAuthStore(FileAuthStore):
    """FileAuthStore for several processes: ACL writes under the file's lock too, both files
    read again whenever they change, and followed while the store is open."""

    def __init__(self, data_dir: Path, poll_s: float = POLL_S) -> None:
        super().__init__(data_dir)
        self._acl_signature: Signature = None
        self._quota_signature: Signature = None
        self._poll_s = poll_s
        self._follower: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._acl_signature = signature(self.acl_path)
        self._quota_signature = signature(self.quota_path)
        await super().start()
        self._follower = asyncio.create_task(self._follow(), name="auth-files")

    async def close(self) -> None:
        if self._follower is not None:
            self._follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._follower
        await super().close()

    async def _follow(self) -> None:
        while True:
            await asyncio.sleep(self._poll_s)
            try:
                await self.refresh()
            except OSError as exc:  # the directory itself unreadable: look again later
                log.warning("cannot look at the auth files: %s", exc)

    async def refresh(self, force: bool = False) -> None:
        """Read again the files replaced since they were read (three stats), or all on `force`
        (SIGHUP). A file that cannot be read is logged once and the state kept."""
        keys, acls = self.keys.signature(), signature(self.acl_path)
        quotas_now = signature(self.quota_path)
        keys_changed = force or keys != self._signature
        acls_changed = force or acls != self._acl_signature
        quotas_changed = force or quotas_now != self._quota_signature
        if not (keys_changed or acls_changed or quotas_changed):
            return
        # taken before reading: never newer than what is read
        self._signature, self._acl_signature, self._quota_signature = keys, acls, quotas_now
        credentials, bindings = self.state.credentials, self.state.acls
        quotas = self.state.quotas
        try:
            if keys_changed:
                credentials = self.keys.load()
        except (CredentialError, OSError) as exc:
            log.warning("keeping the credentials already loaded: %s", exc)
        try:
            if acls_changed:
                bindings = load_acls(self.acl_path)
        except (CredentialError, OSError) as exc:
            log.warning("keeping the ACLs already loaded: %s", exc)
        try:
            if quotas_changed:
                quotas = load_quotas(self.quota_path)
        except (CredentialError, OSError) as exc:
            log.warning("keeping the quotas already loaded: %s", exc)
        self.publish(
            dataclasses.replace(self.state, acls=bindings, credentials=credentials, quotas=quotas)
        )

    async def add_acl(self, binding: AclBinding) -> bool:
        before, _ = await self._change_acls(lambda held: held | {binding})
        return binding not in before

    async def remove_acl(self, binding: AclBinding) -> bool:
        before, _ = await self._change_acls(lambda held: held - {binding})
        return binding in before

    async def _change_acls(
        self, change: Callable[[Bindings], Bindings]
    ) -> tuple[Bindings, Bindings]:
        async with self._lock:
            before, after = await asyncio.to_thread(update_acls, self.acl_path, change)
            self._acl_signature = STALE
            self.publish(dataclasses.replace(self.state, acls=after))
            return before, after

    async def set_quota(self, entity: str, quota: Quota) -> None:
        await self._change_quotas(lambda held: {**held, entity: quota})

    async def remove_quota(self, entity: str) -> bool:
        before, _ = await self._change_quotas(
            lambda held: {k: v for k, v in held.items() if k != entity}
        )
        return entity in before

    async def _change_quotas(self, change: Callable[[Quotas], Quotas]) -> tuple[Quotas, Quotas]:
        async with self._lock:
            before, after = await asyncio.to_thread(update_quotas, self.quota_path, change)
            self._quota_signature = STALE
            self.publish(dataclasses.replace(self.state, quotas=after))
            return before, after

    async def add_credential(self, record: Credential) -> None:
        await super().add_credential(record)
        self._signature = STALE

    async def remove_credential(self, key_id: str) -> bool:
        found = await super().remove_credential(key_id)
        self._signature = STALE
        return found
