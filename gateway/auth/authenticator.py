"""Request -> principal: a bearer token (the cluster's internal key, an API key, a JWT), HTTP
Basic, or a verified client certificate. Lookups are cheap per request: an API key is one
SHA-256 and a dict lookup; verified JWTs and Basic secrets are remembered (bounded)."""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
from collections.abc import Iterable

from aiohttp import hdrs, web

from gateway.auth.credentials import (
    INTERNAL_PRINCIPAL,
    KEY_PREFIX,
    Credentials,
    key_digest,
    verify_basic,
)
from gateway.auth.jwt_verifier import JwtVerifier
from gateway.auth.store import AuthStore
from gateway.auth.tls import certificate_principal
from replication.node_contract import ON_BEHALF_OF

REALM = "sluice"
BASIC_CACHE_SIZE = 10_000
KEY_CACHE_SIZE = 10_000
BASIC_CHECKS_AT_ONCE = 2  # scrypt takes ~16 MiB and tens of ms: bound what guessing costs


class Authenticator:
    """Finds the principal of a request, or None when it carries no valid credentials."""

    def __init__(
        self,
        store: AuthStore,
        *,
        basic: bool = False,
        jwt: JwtVerifier | None = None,
        internal_keys: Iterable[str] = (),
        certificate_source: str | None = None,
    ) -> None:
        self.store = store
        self.basic = basic
        self.jwt = jwt
        self.certificate_source = certificate_source
        self.set_internal_keys(internal_keys)
        self._basic_verified: dict[tuple[str, bytes], str] = {}  # (user, secret's SHA-256)
        # Authorization headers of API keys -> principal, valid for one credentials snapshot.
        self._keys: dict[str, str] = {}
        self._keys_of: Credentials | None = None
        self._basic_checks = asyncio.Semaphore(BASIC_CHECKS_AT_ONCE)
        challenges = [f'Bearer realm="{REALM}"']
        if basic:
            challenges.append(f'Basic realm="{REALM}", charset="UTF-8"')
        self.challenge = ", ".join(challenges)

    def set_internal_keys(self, keys: Iterable[str]) -> None:
        """The keys nodes call each other with (each accepted; the first is the one sent)."""
        self._internal = tuple(key_digest(key) for key in keys)

    async def authenticate(self, request: web.Request) -> str | None:
        header = request.headers.get(hdrs.AUTHORIZATION)
        if header is None:
            return self._certificate(request)
        if self._keys_of is self.store.state.credentials:
            known = self._keys.get(header)
            if known is not None:
                return known
        scheme, _, value = header.partition(" ")
        value = value.strip()
        if not value:
            return None
        scheme = scheme.lower()
        if scheme == "bearer":
            return await self._bearer(value, request, header)
        if scheme == "basic" and self.basic:
            return await self._basic(value)
        return None

    def from_node(self, request: web.Request) -> bool:
        """Whether the request carries one of the cluster's internal keys."""
        scheme, _, token = request.headers.get(hdrs.AUTHORIZATION, "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip() or not self._internal:
            return False
        digest = key_digest(token.strip())
        return any(hmac.compare_digest(digest, key) for key in self._internal)

    async def _bearer(self, token: str, request: web.Request, header: str) -> str | None:
        digest = key_digest(token)
        if self._internal and any(hmac.compare_digest(digest, key) for key in self._internal):
            # Another node: on its own behalf, or forwarding a request it authenticated.
            return request.headers.get(ON_BEHALF_OF) or INTERNAL_PRINCIPAL
        record = self.store.state.credentials.by_digest.get(digest)
        if record is None and token.startswith(KEY_PREFIX):
            await self.store.refresh()  # made by `sluice auth create-key` meanwhile?
            record = self.store.state.credentials.by_digest.get(digest)
        if record is not None:
            self._remember(header, record.principal)
            return record.principal
        if self.jwt is not None and token.count(".") == 2:
            principal = await self.jwt.principal(token)
            return None if principal == INTERNAL_PRINCIPAL else principal
        return None

    def _remember(self, header: str, principal: str) -> None:
        """Skip the hash next time; a change of credentials (a revoked key) forgets all."""
        credentials = self.store.state.credentials
        if self._keys_of is not credentials or len(self._keys) >= KEY_CACHE_SIZE:
            self._keys.clear()
            self._keys_of = credentials
        self._keys[header] = principal

    async def _basic(self, value: str) -> str | None:
        try:
            user, sep, secret = base64.b64decode(value, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        if not sep:
            return None
        record = self.store.state.credentials.basic.get(user)
        if record is None:
            await self.store.refresh()
            record = self.store.state.credentials.basic.get(user)
            if record is None:
                return None
        remembered = (user, hashlib.sha256(secret.encode()).digest())
        if self._basic_verified.get(remembered) == record.key_id:
            return user
        async with self._basic_checks:
            if not await asyncio.to_thread(verify_basic, record, secret):
                return None
        if len(self._basic_verified) >= BASIC_CACHE_SIZE:
            self._basic_verified.clear()
        self._basic_verified[remembered] = record.key_id
        return user

    def _certificate(self, request: web.Request) -> str | None:
        if self.certificate_source is None or request.transport is None:
            return None
        peercert = request.transport.get_extra_info("peercert")
        return certificate_principal(peercert, self.certificate_source)
