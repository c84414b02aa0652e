"""The request's signature: the pads keyed once per partition give the HMAC-SHA256 that
`hmac` computes, for keys of every length a secret may have (24 to 64 bytes)."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from groups.subscriptions import formats
from groups.subscriptions.spec import parse
from groups.subscriptions.state import DeliveryRecord


@pytest.mark.parametrize("length", [24, 40, 63, 64])
def test_the_signature_is_hmac_sha256_of_id_timestamp_and_body(length: int) -> None:
    key = bytes(range(1, length + 1))
    secret = "whsec_" + base64.b64encode(key).decode()
    sub = parse(
        {"name": "s", "topic": "orders", "endpoint": "http://h/hook", "signing_secret": secret},
        uid="u",
    )
    record = DeliveryRecord(41, 1_764_000_000_123, None, b'{"n": 1}', [])
    body, head = formats.request(formats.fixed(sub, 2), (record,), 1_764_000_001)
    expected = hmac.new(key, b"orders/2/41.1764000001." + body, hashlib.sha256).digest()
    assert f"webhook-signature: v1,{base64.b64encode(expected).decode()}\r\n" in head.decode()
    assert head.decode().startswith("Content-Type: application/json\r\nce-specversion: 1.0\r\n")
