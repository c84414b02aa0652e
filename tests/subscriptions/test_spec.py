"""Subscription documents: defaults, refusals by field, masking, merge patches; endpoints."""

from __future__ import annotations

from typing import Any

import pytest

from groups.subscriptions import spec as specs
from groups.subscriptions.endpoints import blocked_address, check_endpoint
from groups.subscriptions.errors import SubscriptionError

BASE = {"name": "s", "topic": "t", "endpoint": "https://example.com/hook"}


def parsed(**fields: Any) -> specs.Subscription:
    return specs.parse({**BASE, **fields}, uid="u")


def test_defaults_are_bounded() -> None:
    sub = parsed()
    assert sub.retry.max_attempts == 10 and sub.retry.max_backoff_ms == 600_000
    assert sub.batching.max_records == 1 and sub.format == "binary" and sub.start == "latest"
    assert sub.signing_secret.startswith("whsec_") and len(sub.signing_key()) == 32
    assert sub.group == "subscription.s.u"
    assert sub.ordering == "partition" and sub.rate_limit_per_s is None
    assert sub.concurrency == specs.Concurrency(
        max_in_flight=16, max_requests=64, adaptive=True, pipeline=1
    )
    assert sub.retry.bisect_on_error is False  # as Lambda's BisectBatchOnFunctionError


def test_bisect_on_error_round_trips_and_patches() -> None:
    sub = parsed(retry={"bisect_on_error": True, "max_attempts": 3})
    assert sub.retry.bisect_on_error and sub.retry.max_attempts == 3
    assert specs.document(sub)["retry"]["bisect_on_error"] is True
    assert specs.loaded(specs.stored(sub), 2) == specs.parse(
        specs.document(sub), uid="u", version=2
    )
    off = specs.patched(sub, {"retry": {"bisect_on_error": False}})
    assert not off.retry.bisect_on_error and off.retry.max_attempts == 3
    assert not off.same_delivery(sub)
    on = specs.patched(parsed(), {"retry": {"bisect_on_error": True}})
    assert on.retry.bisect_on_error and on.retry.max_attempts == 10


def test_orderings_concurrency_and_rate_round_trip() -> None:
    sub = parsed(
        ordering="key", concurrency={"max_in_flight": 4, "pipeline": 8}, rate_limit_per_s=2.5
    )
    assert sub.ordering == "key" and sub.concurrency.max_in_flight == 4
    assert sub.concurrency.pipeline == 8
    assert sub.concurrency.max_requests == 64 and sub.rate_limit_per_s == 2.5
    assert specs.loaded(specs.stored(sub), 1) == specs.parse(
        specs.document(sub), uid="u", version=1
    )
    unlimited = specs.patched(sub, {"rate_limit_per_s": None, "ordering": "none"})
    assert unlimited.rate_limit_per_s is None and unlimited.ordering == "none"
    assert not unlimited.same_delivery(sub)


def test_isolation_defaults_as_kafka_round_trips_and_may_change() -> None:
    assert parsed().isolation == "read_uncommitted"
    assert "isolation" not in specs.document(parsed())  # as nodes before the field stored it
    assert specs.public_view(parsed())["isolation"] == "read_uncommitted"
    sub = parsed(isolation="read_committed")
    assert specs.loaded(specs.stored(sub), 3) == specs.parse(
        specs.document(sub), uid="u", version=3
    )
    assert specs.loaded(specs.stored(sub), 3).isolation == "read_committed"
    back = specs.patched(sub, {"isolation": None})
    assert back.isolation == "read_uncommitted" and not back.same_delivery(sub)
    assert parsed(mode="queue", isolation="read_committed").isolation == "read_committed"


def test_a_reply_topic_round_trips_and_may_change() -> None:
    assert parsed().reply is None and "reply" not in specs.document(parsed())
    sub = parsed(reply={"topic": "out"})
    assert sub.reply == specs.Reply("out")
    assert specs.loaded(specs.stored(sub), 4) == specs.parse(
        specs.document(sub), uid="u", version=4
    )
    moved = specs.patched(sub, {"reply": {"topic": "elsewhere"}})
    assert moved.reply == specs.Reply("elsewhere") and not moved.same_delivery(sub)
    assert specs.patched(sub, {"reply": None}).reply is None


@pytest.mark.parametrize(
    ("fields", "pointer"),
    [
        ({"reply": {"topic": "out"}, "mode": "queue"}, "/mode"),
        ({"reply": {"topic": "out"}, "ordering": "key"}, "/ordering"),
        ({"reply": {"topic": "t"}}, "/reply/topic"),
        ({"reply": {"topic": "out", "partitions": 1}}, "/reply"),
        ({"reply": ["out"]}, "/reply"),
        ({"name": "a/b"}, "/name"),
        ({"isolation": "serializable"}, "/isolation"),
        ({"isolation": None}, "/isolation"),
        ({"name": "x" * 201}, "/name"),
        ({"endpoint": 5}, "/endpoint"),
        ({"ordering": "keys"}, "/ordering"),
        ({"concurrency": {"max_in_flight": 0}}, "/concurrency/max_in_flight"),
        ({"concurrency": {"max_requests": 10_001}}, "/concurrency/max_requests"),
        ({"concurrency": {"adaptive": "yes"}}, "/concurrency/adaptive"),
        ({"concurrency": {"pipeline": 0}}, "/concurrency/pipeline"),
        ({"concurrency": {"pipeline": 65}}, "/concurrency/pipeline"),
        ({"concurrency": {"pipeline": "8"}}, "/concurrency/pipeline"),
        ({"concurrency": {"window": 3}}, "/concurrency"),
        ({"rate_limit_per_s": 0}, "/rate_limit_per_s"),
        ({"rate_limit_per_s": "10"}, "/rate_limit_per_s"),
        ({"rate_limit_per_s": True}, "/rate_limit_per_s"),
        ({"rate_limit_per_s": 1e6}, "/rate_limit_per_s"),
        ({"format": "xml"}, "/format"),
        ({"start": "middle"}, "/start"),
        ({"start": {"timestamp": -1}}, "/start/timestamp"),
        ({"batching": {"max_records": 0}}, "/batching/max_records"),
        ({"batching": {"max_records": True}}, "/batching/max_records"),
        ({"retry": {"max_attempts": 1000}}, "/retry/max_attempts"),
        ({"retry": {"min_backoff_ms": 10, "max_backoff_ms": 5}}, "/retry/max_backoff_ms"),
        ({"retry": {"retries": 3}}, "/retry"),
        ({"retry": {"bisect_on_error": "true"}}, "/retry/bisect_on_error"),
        ({"retry": {"bisect_on_error": 1}}, "/retry/bisect_on_error"),
        ({"retry": {"bisect_on_error": None}}, "/retry/bisect_on_error"),
        ({"filter": {"headers": {"a": 1}}}, "/filter/headers"),
        ({"auth": {"bearer": "a\nb"}}, "/auth/bearer"),
        ({"auth": {"header": {"name": "webhook-signature", "value": "x"}}}, "/auth/header/name"),
        ({"signing_secret": "nope"}, "/signing_secret"),
        ({"surprise": 1}, "/surprise"),
        ({"a~/b": 1}, "/a~0~1b"),
    ],
)
def test_refusals_name_the_field(fields: dict[str, Any], pointer: str) -> None:
    with pytest.raises(SubscriptionError) as refused:
        parsed(**fields)
    assert refused.value.code == "INVALID_SUBSCRIPTION"
    assert refused.value.extra["pointer"] == pointer


def test_secrets_are_masked_and_stored_documents_round_trip() -> None:
    sub = parsed(auth={"bearer": "s3cr3t-token"}, dead_letter_topic="dlq",
                 filter={"key_prefix": "eu-", "headers": {"kind": "order"}})  # fmt: skip
    view = specs.public_view(sub)
    assert "s3cr3t" not in str(view) and sub.signing_secret not in str(view)
    again = specs.loaded(specs.stored(sub), 7)
    assert again == specs.parse(specs.document(sub), uid="u", version=7)
    assert again.filter.key_prefix == b"eu-" and again.filter.headers == (("kind", b"order"),)


def test_merge_patch_changes_what_may_change() -> None:
    sub = parsed(dead_letter_topic="dlq", retry={"max_attempts": 3})
    changed = specs.patched(sub, {"retry": {"timeout_ms": 50}, "dead_letter_topic": None})
    assert changed.retry.max_attempts == 3 and changed.retry.timeout_ms == 50
    assert changed.dead_letter_topic is None and changed.signing_secret == sub.signing_secret
    assert not changed.same_delivery(sub)
    assert specs.patched(sub, {"paused": True}).same_delivery(sub)
    with pytest.raises(SubscriptionError) as refused:
        specs.patched(sub, {"topic": "other"})
    assert refused.value.extra["pointer"] == "/topic"


def test_a_null_member_at_any_depth_resets_that_field_only() -> None:
    """RFC 7396: null removes the member it names, in nested objects too (the field then
    takes its default); its siblings keep their values."""
    sub = parsed(
        retry={"max_attempts": 3, "timeout_ms": 50},
        filter={"key_prefix": "eu-", "headers": {"kind": "order", "region": "eu"}},
    )
    changed = specs.patched(
        sub, {"retry": {"max_attempts": None}, "filter": {"headers": {"region": None}}}
    )
    assert changed.retry.max_attempts == parsed().retry.max_attempts != 3
    assert changed.retry.timeout_ms == 50
    assert changed.filter.key_prefix == b"eu-" and changed.filter.headers == (("kind", b"order"),)
    assert specs.patched(sub, {"filter": None}).filter == parsed().filter


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1", "127.9.9.9", "::1", "169.254.169.254", "fe80::1", "0.0.0.0", "::ffff:127.0.0.1"],
)
def test_loopback_and_link_local_are_blocked(address: str) -> None:
    assert blocked_address(address)


def test_endpoints_checked() -> None:
    assert check_endpoint("https://example.com/x", ()) == "example.com"
    assert check_endpoint("http://127.0.0.1:9/x", ("127.0.0.1",)) == "127.0.0.1"
    for url, code in [
        ("http://127.0.0.1/x", "ENDPOINT_NOT_ALLOWED"),
        ("http://[::1]:80/x", "ENDPOINT_NOT_ALLOWED"),
        ("http://localhost/x", "ENDPOINT_NOT_ALLOWED"),
        ("http://169.254.169.254/latest/meta-data", "ENDPOINT_NOT_ALLOWED"),
        ("ftp://example.com/x", "INVALID_SUBSCRIPTION"),
        ("example.com/x", "INVALID_SUBSCRIPTION"),
        ("http://user:pw@example.com/x", "INVALID_SUBSCRIPTION"),
        ("http://example.com:99999/x", "INVALID_SUBSCRIPTION"),
        ("http://exa mple.com/x", "INVALID_SUBSCRIPTION"),
    ]:
        with pytest.raises(SubscriptionError) as refused:
            check_endpoint(url, ())
        assert refused.value.code == code, url
