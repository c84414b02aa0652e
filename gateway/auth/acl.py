"""Kafka's ACL model, sans-IO: bindings of (principal, resource, pattern, operation, permission),
deny winning over allow, nothing allowed without an allow, super users allowed everything."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast, get_args

# subject: the schema registry's; transactional_id: Kafka's TransactionalId
ResourceType = Literal["topic", "group", "cluster", "subject", "transactional_id"]
Operation = Literal["read", "write", "create", "delete", "alter", "describe"]
PatternType = Literal["literal", "prefixed"]
Permission = Literal["allow", "deny"]
RESOURCE_TYPES: tuple[ResourceType, ...] = get_args(ResourceType)
OPERATIONS: tuple[Operation, ...] = get_args(Operation)
PATTERN_TYPES: tuple[PatternType, ...] = get_args(PatternType)
PERMISSIONS: tuple[Permission, ...] = get_args(Permission)
CLUSTER = "cluster"  # the name of the one cluster resource
WILDCARD = "*"  # as a principal or a literal resource name: every one
# What can be done to a resource of each type: the operations its routes check, each type's
# list of Kafka's authorized operations (KIP-430) in Sluice's terms.
RESOURCE_OPERATIONS: dict[ResourceType, tuple[Operation, ...]] = {
    "topic": ("read", "write", "create", "delete", "alter", "describe"),
    "group": ("read", "delete", "alter", "describe"),
    "cluster": ("create", "alter", "describe"),
    "subject": ("read", "write", "delete", "alter"),
    "transactional_id": ("write", "describe"),
}
# Kafka: allowing any of these also allows describe on the same resource.
IMPLIES_DESCRIBE: frozenset[Operation] = frozenset({"read", "write", "delete", "alter"})
MAX_NAME = 255
FIELDS = ("principal", "resource_type", "resource_name", "pattern_type", "operation", "permission")


class AclError(ValueError):
    """A binding that is not well formed; the message names the field."""


@dataclass(frozen=True, order=True)
class AclBinding:
    """One rule: `permission` for `principal` to do `operation` on the matching resources."""

    principal: str
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    operation: Operation
    permission: Permission

    def matches(self, principal: str, resource_type: ResourceType, name: str) -> bool:
        """Whether the binding applies to `principal` acting on the named resource."""
        if self.resource_type != resource_type:
            return False
        if self.principal != principal and self.principal != WILDCARD:
            return False
        if self.pattern_type == "prefixed":
            return name.startswith(self.resource_name)
        return self.resource_name in (name, WILDCARD)

    def to_dict(self) -> dict[str, str]:
        return {name: getattr(self, name) for name in FIELDS}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> AclBinding:
        """Validate a binding's JSON form (every field required, nothing else)."""
        unknown = sorted(set(doc) - set(FIELDS))
        if unknown:
            raise AclError(f"unknown field(s): {', '.join(unknown)}")
        values = {}
        for name in FIELDS:
            value = doc.get(name)
            if not isinstance(value, str) or not value:
                raise AclError(f"{name} must be a non-empty string")
            values[name] = value
        for name, allowed in (
            ("resource_type", RESOURCE_TYPES),
            ("pattern_type", PATTERN_TYPES),
            ("operation", OPERATIONS),
            ("permission", PERMISSIONS),
        ):
            if values[name] not in allowed:
                raise AclError(f"{name} must be one of {', '.join(allowed)}")
        for name in ("principal", "resource_name"):
            if len(values[name]) > MAX_NAME or not values[name].isprintable():
                raise AclError(f"{name} must be 1 to {MAX_NAME} printable characters")
        if values["resource_type"] == "cluster" and values["resource_name"] not in (
            CLUSTER,
            WILDCARD,
        ):
            raise AclError(f'the cluster resource is named "{CLUSTER}"')
        return cls(
            principal=values["principal"],
            resource_type=cast(ResourceType, values["resource_type"]),
            resource_name=values["resource_name"],
            pattern_type=cast(PatternType, values["pattern_type"]),
            operation=cast(Operation, values["operation"]),
            permission=cast(Permission, values["permission"]),
        )


Decision = tuple[str, ResourceType, str, Operation]


class Authorizer:
    """Decisions over one set of bindings, cached per (principal, resource, operation); a new
    set of bindings makes a new Authorizer (so a change can never serve a stale decision)."""

    def __init__(
        self,
        bindings: Iterable[AclBinding],
        super_users: Iterable[str] = (),
        cache_size: int = 65_536,
    ) -> None:
        self.bindings = frozenset(bindings)
        self.super_users = frozenset(super_users)
        self._by_type: dict[ResourceType, tuple[AclBinding, ...]] = {
            kind: tuple(b for b in self.bindings if b.resource_type == kind)
            for kind in RESOURCE_TYPES
        }
        self._cache: dict[Decision, bool] = {}
        self._cache_size = cache_size

    def allowed(
        self, principal: str, resource_type: ResourceType, name: str, operation: Operation
    ) -> bool:
        key = (principal, resource_type, name, operation)
        decision = self._cache.get(key)
        if decision is None:
            decision = self._decide(principal, resource_type, name, operation)
            if len(self._cache) >= self._cache_size:
                self._cache.clear()
            self._cache[key] = decision
        return decision

    def authorized_operations(
        self, principal: str, resource_type: ResourceType, name: str
    ) -> tuple[Operation, ...]:
        """What `principal` may do to the named resource, of what can be done to one of its
        type (KIP-430's authorized operations)."""
        return tuple(
            op
            for op in RESOURCE_OPERATIONS[resource_type]
            if self.allowed(principal, resource_type, name, op)
        )

    def _decide(
        self, principal: str, resource_type: ResourceType, name: str, operation: Operation
    ) -> bool:
        if principal in self.super_users:
            return True
        allowing: set[Operation] = {operation}
        if operation == "describe":
            allowing |= IMPLIES_DESCRIBE
        allow = False
        for binding in self._by_type[resource_type]:
            if not binding.matches(principal, resource_type, name):
                continue
            if binding.permission == "deny" and binding.operation == operation:
                return False
            if binding.permission == "allow" and binding.operation in allowing:
                allow = True
        return allow
