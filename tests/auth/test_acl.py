"""The ACL model: matching, deny winning, super users, implied describe, validation, and
properties over arbitrary binding sets (hypothesis)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.auth.acl import (
    OPERATIONS,
    RESOURCE_TYPES,
    AclBinding,
    AclError,
    Authorizer,
    Operation,
    ResourceType,
)


def allow(
    principal: str,
    kind: ResourceType,
    name: str,
    operation: Operation,
    pattern: str = "literal",
    permission: str = "allow",
) -> AclBinding:
    return AclBinding.from_dict(
        {
            "principal": principal,
            "resource_type": kind,
            "resource_name": name,
            "pattern_type": pattern,
            "operation": operation,
            "permission": permission,
        }
    )


def deny(principal: str, kind: ResourceType, name: str, operation: Operation) -> AclBinding:
    return allow(principal, kind, name, operation, permission="deny")


def test_nothing_is_allowed_without_an_allow() -> None:
    assert not Authorizer([]).allowed("alice", "topic", "orders", "read")


def test_a_literal_binding_names_one_resource_and_one_operation() -> None:
    acls = Authorizer([allow("alice", "topic", "orders", "write")])
    assert acls.allowed("alice", "topic", "orders", "write")
    assert not acls.allowed("alice", "topic", "orders", "read")
    assert not acls.allowed("alice", "topic", "orders2", "write")
    assert not acls.allowed("bob", "topic", "orders", "write")
    assert not acls.allowed("alice", "group", "orders", "write")


def test_prefixed_and_wildcard_bindings() -> None:
    acls = Authorizer(
        [
            allow("alice", "topic", "team-a.", "read", pattern="prefixed"),
            allow("*", "group", "*", "read"),
        ]
    )
    assert acls.allowed("alice", "topic", "team-a.orders", "read")
    assert not acls.allowed("alice", "topic", "team-b.orders", "read")
    assert acls.allowed("anyone", "group", "whatever", "read")


def test_deny_wins_over_allow() -> None:
    acls = Authorizer(
        [
            allow("*", "topic", "*", "read"),
            deny("mallory", "topic", "payments", "read"),
        ]
    )
    assert acls.allowed("alice", "topic", "payments", "read")
    assert not acls.allowed("mallory", "topic", "payments", "read")
    assert acls.allowed("mallory", "topic", "orders", "read")


def test_super_users_are_allowed_everything_even_when_denied() -> None:
    acls = Authorizer([deny("root", "cluster", "cluster", "alter")], super_users=["root"])
    assert acls.allowed("root", "cluster", "cluster", "alter")
    assert acls.allowed("root", "topic", "x", "delete")


def test_read_write_delete_alter_imply_describe_but_deny_describe_wins() -> None:
    for operation in ("read", "write", "delete", "alter"):
        assert Authorizer([allow("a", "topic", "t", operation)]).allowed(
            "a", "topic", "t", "describe"
        )
    assert not Authorizer([allow("a", "topic", "t", "create")]).allowed(
        "a", "topic", "t", "describe"
    )
    both = Authorizer([allow("a", "topic", "t", "read"), deny("a", "topic", "t", "describe")])
    assert not both.allowed("a", "topic", "t", "describe")
    assert both.allowed("a", "topic", "t", "read")


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"operation": "all"}, "operation must be one of"),
        ({"resource_type": "broker"}, "resource_type must be one of"),
        ({"pattern_type": "match"}, "pattern_type must be one of"),
        ({"permission": "maybe"}, "permission must be one of"),
        ({"principal": ""}, "principal must be a non-empty string"),
        ({"principal": 7}, "principal must be a non-empty string"),
        ({"resource_name": "a\nb"}, "printable"),
        ({"resource_type": "cluster", "resource_name": "mine"}, "cluster resource is named"),
        ({"extra": 1}, "unknown field"),
    ],
)
def test_malformed_bindings_are_refused(change: dict[str, Any], error: str) -> None:
    doc: dict[str, Any] = allow("a", "topic", "t", "read").to_dict()
    doc.update(change)
    with pytest.raises(AclError, match=error):
        AclBinding.from_dict(doc)


def test_the_decision_cache_stays_bounded_and_correct() -> None:
    acls = Authorizer([allow("a", "topic", "t", "read")], cache_size=2)
    for _ in range(3):
        for name in ("t", "u", "v"):
            assert acls.allowed("a", "topic", name, "read") == (name == "t")


principals = st.sampled_from(["alice", "bob", "*"])
names = st.sampled_from(["", "o", "or", "orders", "pay", "*"])
bindings = st.builds(
    AclBinding,
    principal=principals,
    resource_type=st.sampled_from(RESOURCE_TYPES),
    resource_name=names,
    pattern_type=st.sampled_from(["literal", "prefixed"]),
    operation=st.sampled_from(OPERATIONS),
    permission=st.sampled_from(["allow", "deny"]),
)
queries = st.tuples(
    st.sampled_from(["alice", "bob", "carol"]),
    st.sampled_from(RESOURCE_TYPES),
    st.sampled_from(["o", "orders", "pay", "payments", "x"]),
    st.sampled_from(OPERATIONS),
)


@given(st.frozensets(bindings, max_size=12), queries)
def test_a_matching_deny_always_wins(acls: frozenset[AclBinding], query: Any) -> None:
    principal, kind, name, operation = query
    denial = AclBinding(principal, kind, name, "literal", operation, "deny")
    assert not Authorizer(acls | {denial}).allowed(principal, kind, name, operation)


@given(st.frozensets(bindings, max_size=12), bindings, queries)
def test_adding_an_allow_never_takes_a_permission_away(
    acls: frozenset[AclBinding], extra: AclBinding, query: Any
) -> None:
    before = Authorizer(acls).allowed(*query)
    grant = AclBinding(
        extra.principal, extra.resource_type, extra.resource_name, extra.pattern_type,
        extra.operation, "allow",
    )  # fmt: skip
    assert Authorizer(acls | {grant}).allowed(*query) >= before


@given(st.frozensets(bindings, max_size=12), queries)
def test_decisions_match_the_definition(acls: frozenset[AclBinding], query: Any) -> None:
    """Allowed iff no matching deny for the operation and a matching allow (describe: also
    read, write, delete or alter)."""
    principal, kind, name, operation = query
    matching = [b for b in acls if b.matches(principal, kind, name)]
    granting = {operation} | ({"read", "write", "delete", "alter"} if operation == "describe"
                              else set())  # fmt: skip
    expected = not any(
        b.permission == "deny" and b.operation == operation for b in matching
    ) and any(b.permission == "allow" and b.operation in granting for b in matching)
    authorizer = Authorizer(acls)
    assert authorizer.allowed(*query) == expected
    assert authorizer.allowed(*query) == expected  # and again, from the cache
    assert Authorizer(acls, super_users=[principal]).allowed(*query)
