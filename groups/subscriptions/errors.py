"""The subscriptions' domain errors. A subscription is a consumer group whose member is the
cluster, so they are group errors: a stable code the gateway maps to an HTTP status."""

from __future__ import annotations

from groups.errors import GroupError


class SubscriptionError(GroupError):
    """A refused subscription operation: INVALID_SUBSCRIPTION, ENDPOINT_NOT_ALLOWED,
    UNKNOWN_SUBSCRIPTION, SUBSCRIPTION_EXISTS or SUBSCRIPTION_CHANGED."""


def invalid(detail: str, pointer: str) -> SubscriptionError:
    """A malformed field of a subscription document, named by its JSON pointer."""
    return SubscriptionError("INVALID_SUBSCRIPTION", detail, pointer=pointer)
