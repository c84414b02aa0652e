"""Credentials: API keys (only a SHA-256 of each is kept) and HTTP Basic users (scrypt hashes),
and the file that holds them on a single node, `<data_dir>/auth/keys.json`."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import os
import secrets
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Literal

import msgspec

KEY_PREFIX = "sluice_"
MAX_PRINCIPAL = 255
# scrypt's interactive-login parameters: ~16 MiB and tens of milliseconds per check, which is
# why verified Basic secrets are cached (gateway.auth.authenticator).
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
SCRYPT_MAXMEM = 64 * 1024 * 1024
INTERNAL_PRINCIPAL = "sluice:internal"  # nodes calling each other with the cluster's internal key

Kind = Literal["api-key", "basic"]
KINDS: tuple[Kind, ...] = ("api-key", "basic")


class CredentialError(ValueError):
    """A principal name or credential that cannot be stored."""


class Credential(msgspec.Struct, frozen=True):
    """One stored credential: an API key's SHA-256 or a Basic user's scrypt hash, never the
    secret itself. A Basic user's name is its principal; a principal has one Basic secret."""

    key_id: str
    principal: str
    kind: Kind
    digest: str  # hex: SHA-256 of the whole API key, or scrypt of the Basic secret
    created_ms: int
    salt: str = ""  # hex, Basic only
    n: int = 0
    r: int = 0
    p: int = 0

    def public(self) -> dict[str, object]:
        """What may be shown: everything but the hash and its salt."""
        return {
            "key_id": self.key_id,
            "principal": self.principal,
            "type": self.kind,
            "created_ms": self.created_ms,
        }


class _KeyFile(msgspec.Struct):
    format: int = 1
    credentials: list[Credential] = msgspec.field(default_factory=list)


def check_principal(name: object) -> str:
    """A principal that keys and Basic users may carry: printable, no ':' (Basic's separator)."""
    if (
        not isinstance(name, str)
        or not 1 <= len(name) <= MAX_PRINCIPAL
        or not name.isprintable()
        or ":" in name
        or name != name.strip()
    ):
        raise CredentialError(
            f"a principal is 1 to {MAX_PRINCIPAL} printable characters without ':' or "
            "surrounding spaces"
        )
    return name


def key_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_api_key(principal: str) -> tuple[str, Credential]:
    """A new key (shown once) and the record that is stored for it."""
    key_id = secrets.token_hex(6)
    key = f"{KEY_PREFIX}{key_id}_{secrets.token_urlsafe(32)}"
    record = Credential(key_id, check_principal(principal), "api-key", key_digest(key), _now_ms())
    return key, record


def _scrypt(secret: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(secret.encode(), salt=salt, n=n, r=r, p=p, maxmem=SCRYPT_MAXMEM)


def new_basic_secret(principal: str) -> tuple[str, Credential]:
    """A new Basic secret for `principal` (shown once) and its scrypt record."""
    secret = secrets.token_urlsafe(24)
    salt = secrets.token_bytes(16)
    digest = _scrypt(secret, salt, SCRYPT_N, SCRYPT_R, SCRYPT_P).hex()
    record = Credential(
        secrets.token_hex(6),
        check_principal(principal),
        "basic",
        digest,
        _now_ms(),
        salt.hex(),
        SCRYPT_N,
        SCRYPT_R,
        SCRYPT_P,
    )
    return secret, record


def new_credential(principal: str, kind: Kind) -> tuple[str, Credential]:
    return new_api_key(principal) if kind == "api-key" else new_basic_secret(principal)


def verify_basic(record: Credential, secret: str) -> bool:
    """Whether `secret` is the Basic secret `record` was made from (slow: scrypt)."""
    computed = _scrypt(secret, bytes.fromhex(record.salt), record.n, record.r, record.p)
    return hmac.compare_digest(computed.hex(), record.digest)


def _now_ms() -> int:
    return int(time.time() * 1000)


class Credentials:
    """A snapshot of the stored credentials, indexed for the per-request lookups."""

    def __init__(self, records: Iterable[Credential] = ()) -> None:
        self.records = tuple(sorted(records, key=lambda r: (r.created_ms, r.key_id)))
        self.by_digest = {r.digest: r for r in self.records if r.kind == "api-key"}
        self.basic = {r.principal: r for r in self.records if r.kind == "basic"}
        self.by_id = {r.key_id: r for r in self.records}

    def with_added(self, record: Credential) -> Credentials:
        """A new Basic secret replaces the principal's previous one; keys accumulate."""
        replaced = self.basic.get(record.principal) if record.kind == "basic" else None
        return Credentials([*(r for r in self.records if r is not replaced), record])

    def without(self, key_id: str) -> Credentials:
        return Credentials(r for r in self.records if r.key_id != key_id)


def encode_credential(record: Credential) -> bytes:
    return msgspec.json.encode(record)


def decode_credential(raw: bytes) -> Credential:
    return msgspec.json.decode(raw, type=Credential)


class KeyFile:
    """`<data_dir>/auth/keys.json`: written whole (temporary file, fsync, rename) under an
    advisory lock, so `sluice auth create-key` and a running node never lose each other's keys."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def signature(self) -> tuple[int, int, int] | None:
        """What changes when the file is replaced (None while there is none)."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def load(self) -> Credentials:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return Credentials()
        try:
            return Credentials(msgspec.json.decode(raw, type=_KeyFile).credentials)
        except msgspec.DecodeError as exc:
            raise CredentialError(f"{self.path}: {exc}") from None

    def update(self, change: Callable[[Credentials], Credentials]) -> Credentials:
        """Apply `change` to what the file holds now and write the result."""
        with self._locked():
            changed = change(self.load())
            write_atomically(
                self.path, msgspec.json.encode(_KeyFile(credentials=list(changed.records)))
            )
            return changed

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(self.path.with_name(self.path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace `path` with `data` (readable by the owner only), durably."""
    temporary = path.with_name(path.name + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
