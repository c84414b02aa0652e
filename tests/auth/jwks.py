"""Test signing keys: an RSA key, its JWKS file, and tokens signed with it."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

ISSUER = "https://issuer.test"
AUDIENCE = "sluice"


class Signer:
    """An RSA key pair with a key id; `jwks()` publishes the public half."""

    def __init__(self, kid: str = "k1") -> None:
        self.kid = kid
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def jwks(self) -> dict[str, Any]:
        public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        return {"keys": [{**public, "kid": self.kid, "alg": "RS256", "use": "sig"}]}

    def write_jwks(self, path: Path) -> Path:
        path.write_text(json.dumps(self.jwks()))
        return path

    def token(self, subject: str = "alice", lifetime_s: float = 300, **claims: Any) -> str:
        now = time.time()
        payload = {"sub": subject, "iss": ISSUER, "aud": AUDIENCE, "iat": int(now),
                   "exp": int(now + lifetime_s), **claims}  # fmt: skip
        return jwt.encode(payload, self.key, algorithm="RS256", headers={"kid": self.kid})
