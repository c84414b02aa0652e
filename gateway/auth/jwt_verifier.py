"""JWT bearer tokens (PyJWT): signature checked against a JWKS file or URL, then issuer,
audience, expiry and not-before (with a clock-skew leeway); the principal is one claim."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import jwt

log = logging.getLogger(__name__)
# Asymmetric algorithms only: a JWKS holds public keys, and "none" or HMAC must never pass.
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512",
              "EdDSA")  # fmt: skip
CACHE_SIZE = 10_000
JWKS_LIFESPAN_S = 300  # a JWKS URL is fetched again this often (and on an unknown kid)


class JwtVerifier:
    """Verifies tokens and remembers the verified ones until they expire (bounded)."""

    def __init__(
        self,
        jwks: str,
        *,
        issuer: str | None = None,
        audience: str | None = None,
        leeway_s: float = 30.0,
        principal_claim: str = "sub",
    ) -> None:
        self.jwks = jwks
        self.issuer = issuer
        self.audience = audience
        self.leeway_s = leeway_s
        self.principal_claim = principal_claim
        self._client: jwt.PyJWKClient | None = None
        self._keys: jwt.PyJWKSet | None = None
        self._verified: dict[str, tuple[str, float]] = {}
        self.reload()

    @property
    def remote(self) -> bool:
        return self.jwks.startswith(("https://", "http://"))

    def reload(self) -> None:
        """Read the JWKS file again, or fetch the URL afresh on next use (SIGHUP)."""
        self._verified.clear()
        if self.remote:
            self._client = jwt.PyJWKClient(
                self.jwks, cache_jwk_set=True, lifespan=JWKS_LIFESPAN_S, timeout=5
            )
        else:
            self._keys = jwt.PyJWKSet.from_json(Path(self.jwks).read_text())

    def remembered(self, token: str) -> str | None:
        """The principal of a token verified before that has not expired; None: not known."""
        hit = self._verified.get(token)
        if hit is not None and time.time() <= hit[1] + self.leeway_s:
            return hit[0]
        return None

    async def principal(self, token: str) -> str | None:
        """The token's principal, or None if it does not verify."""
        known = self.remembered(token)
        if known is not None:
            return known
        try:
            key = await self._signing_key(token)
            claims = jwt.decode(
                token,
                key.key,
                algorithms=list(ALGORITHMS),
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway_s,
                options={"require": ["exp"]},
            )
        except (jwt.PyJWTError, KeyError) as exc:
            log.debug("a JWT was refused: %s", type(exc).__name__)
            return None
        principal = claims.get(self.principal_claim)
        if not isinstance(principal, str) or not principal:
            return None
        if len(self._verified) >= CACHE_SIZE:
            self._verified.clear()
        self._verified[token] = (principal, float(claims["exp"]))
        return principal

    async def _signing_key(self, token: str) -> jwt.PyJWK:
        if self._client is not None:
            # PyJWKClient fetches with urllib: keep that off the event loop.
            return await asyncio.to_thread(self._client.get_signing_key_from_jwt, token)
        assert self._keys is not None
        kid = jwt.get_unverified_header(token).get("kid")
        if kid is None and len(self._keys.keys) == 1:
            return self._keys.keys[0]
        return self._keys[str(kid)]
