"""JWT verification against a JWKS file or URL: signature, issuer, audience, expiry with
leeway, the principal claim; forged and confused tokens are refused."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from pathlib import Path

import jwt
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from pytest_aiohttp import AiohttpServer

from gateway.auth.jwt_verifier import JwtVerifier
from tests.auth.jwks import AUDIENCE, ISSUER, Signer


def verifier(jwks: str, leeway_s: float = 30.0, principal_claim: str = "sub") -> JwtVerifier:
    return JwtVerifier(
        jwks,
        issuer=ISSUER,
        audience=AUDIENCE,
        leeway_s=leeway_s,
        principal_claim=principal_claim,
    )


async def test_a_valid_token_names_its_subject(tmp_path: Path) -> None:
    signer = Signer()
    check = verifier(str(signer.write_jwks(tmp_path / "jwks.json")))
    assert await check.principal(signer.token("alice")) == "alice"


async def test_the_principal_claim_is_configurable(tmp_path: Path) -> None:
    signer = Signer()
    check = verifier(str(signer.write_jwks(tmp_path / "jwks.json")), principal_claim="email")
    assert await check.principal(signer.token("id-1", email="a@example.com")) == "a@example.com"
    assert await check.principal(signer.token("id-2")) is None  # no such claim


async def test_expiry_allows_the_configured_clock_skew(tmp_path: Path) -> None:
    signer = Signer()
    check = verifier(str(signer.write_jwks(tmp_path / "jwks.json")), leeway_s=30.0)
    assert await check.principal(signer.token(lifetime_s=-10)) is not None
    assert await check.principal(signer.token(lifetime_s=-60)) is None


async def test_issuer_audience_and_expiry_are_required(tmp_path: Path) -> None:
    signer = Signer()
    check = verifier(str(signer.write_jwks(tmp_path / "jwks.json")))
    assert await check.principal(signer.token(iss="https://other.test")) is None
    assert await check.principal(signer.token(aud="someone-else")) is None
    no_exp = jwt.encode(
        {"sub": "a", "iss": ISSUER, "aud": AUDIENCE}, signer.key, "RS256", {"kid": signer.kid}
    )
    assert await check.principal(no_exp) is None


async def test_tokens_not_signed_by_the_jwks_are_refused(tmp_path: Path) -> None:
    trusted, stranger = Signer("k1"), Signer("k1")
    check = verifier(str(trusted.write_jwks(tmp_path / "jwks.json")))
    assert await check.principal(stranger.token()) is None
    assert await check.principal(Signer("unknown-kid").token()) is None
    assert await check.principal("not.a.token") is None


async def test_algorithm_confusion_and_unsigned_tokens_are_refused(tmp_path: Path) -> None:
    signer = Signer()
    check = verifier(str(signer.write_jwks(tmp_path / "jwks.json")))
    good = jwt.decode(signer.token(), options={"verify_signature": False})
    public_pem = signer.key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    header = {"alg": "HS256", "kid": signer.kid, "typ": "JWT"}
    body = json.dumps(good).encode()

    # HS256 "signed" with the public key as the secret: the classic confusion.
    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    signing_input = f"{b64(json.dumps(header).encode())}.{b64(body)}"
    mac = hmac.new(public_pem, signing_input.encode(), hashlib.sha256).digest()
    assert await check.principal(f"{signing_input}.{b64(mac)}") is None
    unsigned = f"{b64(json.dumps({'alg': 'none', 'kid': signer.kid}).encode())}.{b64(body)}."
    assert await check.principal(unsigned) is None


async def test_a_jwks_url_is_fetched_off_the_event_loop(aiohttp_server: AiohttpServer) -> None:
    signer = Signer()
    fetched: list[int] = []

    async def jwks(request: web.Request) -> web.Response:
        fetched.append(1)
        return web.json_response(signer.jwks())

    app = web.Application()
    app.router.add_get("/jwks.json", jwks)
    server = await aiohttp_server(app)
    check = verifier(str(server.make_url("/jwks.json")))
    token = signer.token("bob")
    assert await check.principal(token) == "bob"
    assert await check.principal(token) == "bob"  # remembered: no second verification
    assert await check.principal(signer.token("carol")) == "carol"  # the JWKS is cached
    assert len(fetched) == 1


async def test_reload_reads_a_rotated_jwks_file(tmp_path: Path) -> None:
    old, new = Signer("old"), Signer("new")
    path = old.write_jwks(tmp_path / "jwks.json")
    check = verifier(str(path))
    assert await check.principal(new.token()) is None
    new.write_jwks(path)
    check.reload()
    assert await check.principal(new.token()) == "alice"
    assert await check.principal(old.token()) is None
