"""`sluice subscriptions create`'s delivery flags become the document the API takes."""

from __future__ import annotations

import argparse

import pytest

from gateway.cli.subscriptions import _spec, add_commands
from groups.subscriptions import spec as specs


def parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers(dest="command"), lambda p: p)
    base = ["subscriptions", "create", "s", "--topic", "t", "--endpoint", "https://e.example/x"]
    return parser.parse_args([*base, *argv])


def test_ordering_concurrency_and_rate_flags() -> None:
    fixed = '{"concurrency": {"adaptive": false}}'
    flags = ["--ordering", "key", "--max-in-flight", "4", "--max-requests", "8"]
    doc = _spec(parsed(*flags, "--rate-limit", "2.5", "--spec", fixed))
    assert doc["ordering"] == "key" and doc["rate_limit_per_s"] == 2.5
    assert doc["concurrency"] == {"adaptive": False, "max_in_flight": 4, "max_requests": 8}
    sub = specs.parse(doc, uid="u")
    assert sub.concurrency == specs.Concurrency(4, 8, False) and sub.ordering == "key"


def test_bisect_on_error_joins_the_other_retry_fields() -> None:
    fixed = '{"retry": {"timeout_ms": 5000}}'
    doc = _spec(parsed("--bisect-on-error", "--max-attempts", "4", "--spec", fixed))
    assert doc["retry"] == {"timeout_ms": 5000, "max_attempts": 4, "bisect_on_error": True}
    assert specs.parse(doc, uid="u").retry.bisect_on_error


def test_decode_values() -> None:
    doc = _spec(parsed("--decode-values", "schema"))
    assert specs.parse(doc, uid="u").decode_values == "schema"
    with pytest.raises(SystemExit):
        parsed("--decode-values", "avro")


def test_without_the_flags_the_defaults_hold() -> None:
    doc = _spec(parsed())
    assert not {"ordering", "concurrency", "rate_limit_per_s", "retry", "decode_values"} & set(doc)


def test_an_unknown_ordering_is_refused() -> None:
    with pytest.raises(SystemExit):
        parsed("--ordering", "random")
