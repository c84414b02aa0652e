"""A node's authentication and authorization, built at startup from the settings: the store
(etcd in a cluster, files on a single node, the --data-dir's files shared by the workers of
`--workers N`), the authenticator and the current ACL decisions."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import jwt

from gateway import console
from gateway.auth.acl import Authorizer, Operation, ResourceType
from gateway.auth.authenticator import Authenticator
from gateway.auth.credentials import INTERNAL_PRINCIPAL
from gateway.auth.etcd_store import EtcdAuthStore
from gateway.auth.jwt_verifier import JwtVerifier
from gateway.auth.quotas import QuotaBook
from gateway.auth.shared_store import SharedFileAuthStore
from gateway.auth.store import AuthState, AuthStore, FileAuthStore
from gateway.settings import Settings
from gateway.worker_dirs import shared_data_dir

log = logging.getLogger(__name__)
MIN_INTERNAL_KEY = 16


class AuthConfigError(Exception):
    """A setting that cannot be used (an unreadable or too short internal key file)."""


def read_internal_keys(path: Path | None) -> tuple[str, ...]:
    """The internal key file's keys, one per line (the first is the one this node sends)."""
    if path is None:
        return ()
    try:
        keys = tuple(line.strip() for line in path.read_text().splitlines() if line.strip())
    except OSError as exc:
        raise AuthConfigError(f"--internal-key-file {path}: {exc.strerror or exc}") from None
    if not keys or any(len(key) < MIN_INTERNAL_KEY for key in keys):
        raise AuthConfigError(
            f"--internal-key-file {path}: one key per line, each at least {MIN_INTERNAL_KEY} "
            "characters (e.g. `openssl rand -hex 32`)"
        )
    return keys


class AuthService:
    """Who a request is and what it may do. With --auth off it still serves /v1/acls (bindings
    can be prepared before auth is turned on); nothing is enforced."""

    def __init__(self, settings: Settings, store: AuthStore) -> None:
        self.enabled = settings.auth
        self.store = store
        self.settings = settings
        self.super_users = frozenset(settings.super_users) | {INTERNAL_PRINCIPAL}
        self.authorizer = Authorizer(store.state.acls, self.super_users)
        # Each of N workers holds a principal to 1/N of its rates: the node, to all of them.
        self.quotas = QuotaBook(
            store.state.quotas,
            settings.quota_window_s,
            time.monotonic,
            share=1 / settings.workers,
        )
        self.internal_keys = read_internal_keys(settings.internal_key_file)
        self.jwt = (
            None
            if settings.jwt_jwks is None
            else JwtVerifier(
                settings.jwt_jwks,
                issuer=settings.jwt_issuer,
                audience=settings.jwt_audience,
                leeway_s=settings.jwt_leeway_s,
                principal_claim=settings.jwt_principal_claim,
            )
        )
        self.authenticator = Authenticator(
            store,
            basic=settings.auth_basic,
            jwt=self.jwt,
            internal_keys=self.internal_keys,
            certificate_source=settings.tls_principal if settings.tls_client_ca else None,
        )
        self.public = frozenset(
            {"/healthz"}
            | console.ROUTES
            | ({"/metrics"} if settings.auth_public_metrics else set())
            | ({"/readyz"} if settings.auth_public_readyz else set())
        )
        store.add_listener(self._changed)

    @classmethod
    async def open(cls, settings: Settings) -> AuthService:
        store: AuthStore
        if settings.workers > 1 and settings.cluster:
            # A worker of `sluice serve --workers N`: the files of the --data-dir they share.
            store = SharedFileAuthStore(shared_data_dir(settings.data_dir))
        elif settings.cluster:
            store = EtcdAuthStore(settings.cluster, settings.etcd_prefix)
        else:
            store = FileAuthStore(settings.data_dir)
        await store.start()
        try:
            return cls(settings, store)
        except BaseException:
            await store.close()
            raise

    @property
    def authorization(self) -> str | None:
        """The Authorization header this node sends to the others (its first internal key)."""
        return f"Bearer {self.internal_keys[0]}" if self.internal_keys else None

    def _changed(self, state: AuthState) -> None:
        if state.acls != self.authorizer.bindings:
            self.authorizer = Authorizer(state.acls, self.super_users)
        if state.quotas != self.quotas.quotas:
            self.quotas.configure(state.quotas)

    def allowed(
        self, principal: str, resource_type: ResourceType, name: str, operation: Operation
    ) -> bool:
        return self.authorizer.allowed(principal, resource_type, name, operation)

    def authorized_operations(
        self, principal: str, resource_type: ResourceType, name: str
    ) -> tuple[Operation, ...]:
        return self.authorizer.authorized_operations(principal, resource_type, name)

    async def reload(self) -> None:
        """SIGHUP: the key and ACL files, the JWKS and the internal keys, read again; what
        cannot be read is kept as it was (and logged)."""
        await self.store.refresh(force=True)
        try:
            if self.jwt is not None:
                self.jwt.reload()
            self.internal_keys = read_internal_keys(self.settings.internal_key_file)
        except (OSError, ValueError, jwt.PyJWTError, AuthConfigError) as exc:
            log.error("auth reload incomplete, keeping the previous JWKS or internal keys: %s", exc)
        self.authenticator.set_internal_keys(self.internal_keys)

    async def close(self) -> None:
        await self.store.close()
