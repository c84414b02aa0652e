"""The request's signature: the pads keyed once per partition give the HMAC-SHA256 that
`hmac` computes, for keys of every length a secret may have (24 to 64 bytes). A structured
event carries JSON data inline, other data as base64, with its media type."""

from __future__ import annotations

import base64
import hashlib
import hmac

import orjson
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


@pytest.mark.parametrize(
    ("value", "headers", "media", "inline"),
    [
        (b'{"n": 1}', [], "application/json", True),
        (b"\x00\x01", [], "application/octet-stream", False),
        (b"not json", [("content-type", b"application/json")], "application/json", False),
        (b'{"n": 1}', [("Content-Type", b"application/cloudevents+json")], None, True),
        (b'{"n": 1}', [("content-type", b"text/plain")], "text/plain", False),
    ],
)
def test_a_structured_event_inlines_only_json_data(
    value: bytes, headers: list[tuple[str, bytes | None]], media: str | None, inline: bool
) -> None:
    sub = parse({"name": "s", "topic": "orders", "endpoint": "http://h/hook"}, uid="u")
    record = DeliveryRecord(7, 1_764_000_000_123, b"k", value, headers)
    event = orjson.loads(orjson.dumps(formats.structured(sub, 0, record)))
    assert event["datacontenttype"] == (media or "application/cloudevents+json")
    if inline:
        assert event["data"] == orjson.loads(value) and "data_base64" not in event
    else:
        assert base64.b64decode(event["data_base64"]) == value and "data" not in event
