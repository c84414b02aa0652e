"""Request -> principal: a bearer token (the cluster's internal key, an API key, a JWT), HTTP
Basic, or a verified client certificate. Lookups are cheap per request: an Authorization header
verified before is one dict lookup (`Authenticator.known`, which the fast routes call too) until
the credentials or internal keys change; a new API key is one SHA-256; verified JWTs are
remembered until they expire (bounded)."""

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
from gateway.auth.store import AuthState, AuthStore
from gateway.auth.tls import certificate_principal
from gateway.http.memo import Memo
from replication.node_contract import ON_BEHALF_OF

REALM = "sluice"
BASIC_CACHE_SIZE = 10_000
KEY_CACHE_SIZE = 10_000
BASIC_CHECKS_AT_ONCE = 2  # scrypt takes ~16 MiB and tens of ms: bound what guessing costs
_NODE = ""  # what `known` remembers for an internal key: the principal depends on the request


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
        # Authorization headers verified before -> principal (`_NODE` for an internal key),
        # forgotten whenever the credentials or the internal keys change: a revoked key is
        # refused from the store's next publication on, as before it was remembered.
        self._known: Memo[str, str] = Memo(KEY_CACHE_SIZE)
        self._known_of: Credentials = store.state.credentials
        self.generation = 0  # moves whenever `_known` is forgotten: what was drawn from it is stale
        store.add_listener(self._credentials_changed)
        self.set_internal_keys(internal_keys)
        self._basic_verified: dict[tuple[str, bytes], str] = {}  # (user, secret's SHA-256)
        self._basic_checks = asyncio.Semaphore(BASIC_CHECKS_AT_ONCE)
        challenges = [f'Bearer realm="{REALM}"']
        if basic:
            challenges.append(f'Basic realm="{REALM}", charset="UTF-8"')
        self.challenge = ", ".join(challenges)

    def set_internal_keys(self, keys: Iterable[str]) -> None:
        """The keys nodes call each other with (each accepted; the first is the one sent)."""
        self._internal = tuple(key_digest(key) for key in keys)
        self._forget()

    def _credentials_changed(self, state: AuthState) -> None:
        if state.credentials is not self._known_of:
            self._forget()
            self._known_of = state.credentials

    def _forget(self) -> None:
        self._known.clear()
        self.generation += 1

    def lasting(self, header: str) -> str | None:
        """The principal of an API key or Basic login verified before: valid until
        `generation` moves (a node's key, whose principal is per request, and a JWT, which
        expires, are not)."""
        principal = self._known.get(header)
        return None if principal == _NODE else principal

    def known(self, header: str, on_behalf_of: str | None) -> str | None:
        """The principal of an Authorization header verified before and still valid, without
        I/O (`on_behalf_of`: the request's Sluice-Principal, which only an internal key may
        name); None: not known, `authenticate` decides."""
        principal = self._known.get(header)
        if principal is None:
            jwt = self.jwt
            if jwt is None or header[:7].lower() != "bearer ":
                return None
            principal = jwt.remembered(header[7:].strip())
            return None if principal == INTERNAL_PRINCIPAL else principal
        if principal == _NODE:
            return on_behalf_of or INTERNAL_PRINCIPAL
        return principal

    async def authenticate(self, request: web.Request) -> str | None:
        header = request.headers.get(hdrs.AUTHORIZATION)
        if header is None:
            return self.certificate_of(request.transport)
        on_behalf_of = request.headers.get(ON_BEHALF_OF)
        known = self.known(header, on_behalf_of)
        if known is not None:
            return known
        checked_against = self.store.state.credentials
        scheme, _, value = header.partition(" ")
        value = value.strip()
        if not value:
            return None
        scheme = scheme.lower()
        if scheme == "bearer":
            found, lasting = await self._bearer(value)
        elif scheme == "basic" and self.basic:
            found, lasting = await self._basic(value), True
        else:
            return None
        if found is None:
            return None
        # Remembered only if the credentials did not change while it was checked.
        if lasting and checked_against is self._known_of:
            self._known.remember(header, found)
        return on_behalf_of or INTERNAL_PRINCIPAL if found == _NODE else found

    def from_node(self, request: web.Request) -> bool:
        """Whether the request carries one of the cluster's internal keys."""
        scheme, _, token = request.headers.get(hdrs.AUTHORIZATION, "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip() or not self._internal:
            return False
        digest = key_digest(token.strip())
        return any(hmac.compare_digest(digest, key) for key in self._internal)

    async def _bearer(self, token: str) -> tuple[str | None, bool]:
        """A bearer token's principal (`_NODE` for an internal key) and whether the header memo
        may keep it: a JWT is kept by its verifier, until it expires."""
        digest = key_digest(token)
        if self._internal and any(hmac.compare_digest(digest, key) for key in self._internal):
            return _NODE, True  # another node: on its own behalf, or forwarding a request
        record = self.store.state.credentials.by_digest.get(digest)
        if record is None and token.startswith(KEY_PREFIX):
            await self.store.refresh()  # made by `sluice auth create-key` meanwhile?
            record = self.store.state.credentials.by_digest.get(digest)
        if record is not None:
            return record.principal, True
        if self.jwt is not None and token.count(".") == 2:
            principal = await self.jwt.principal(token)
            return (None if principal == INTERNAL_PRINCIPAL else principal), False
        return None, False

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

    def certificate_of(self, transport: asyncio.BaseTransport | None) -> str | None:
        """The principal of the client certificate the connection was made with, if any."""
        if self.certificate_source is None or transport is None:
            return None
        peercert = transport.get_extra_info("peercert")
        return certificate_principal(peercert, self.certificate_source)
