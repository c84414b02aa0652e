"""Which endpoints a subscription may call. Loopback and link-local addresses are refused unless
their host is allowed by name (`--subscription-allowed-hosts`): a subscription must not become
a way to reach a node's own routes or a cloud metadata service (169.254.169.254). Checked on
the URL when a subscription is stored, and on every address a name resolves to when the
dispatcher connects (the name may resolve elsewhere later)."""

from __future__ import annotations

import ipaddress
from collections.abc import Collection
from urllib.parse import urlsplit

from groups.subscriptions.errors import SubscriptionError


def _not_allowed(detail: str) -> SubscriptionError:
    return SubscriptionError("ENDPOINT_NOT_ALLOWED", detail, pointer="/endpoint")


def blocked_address(address: str) -> bool:
    """A loopback, link-local or unspecified address (IPv4-mapped IPv6 included)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or ip.is_link_local or ip.is_unspecified


def check_endpoint(url: str, allowed_hosts: Collection[str]) -> str:
    """The endpoint's host, once the URL is an absolute http(s) URL without credentials whose
    host is allowed; SubscriptionError INVALID_SUBSCRIPTION or ENDPOINT_NOT_ALLOWED."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise SubscriptionError(
            "INVALID_SUBSCRIPTION", f"endpoint is not a URL: {exc}", pointer="/endpoint"
        ) from None
    host = (parts.hostname or "").lower()
    if parts.scheme not in ("http", "https") or not host or port == 0:
        raise SubscriptionError(
            "INVALID_SUBSCRIPTION",
            "endpoint must be an absolute http:// or https:// URL with a host",
            pointer="/endpoint",
        )
    if parts.username is not None or parts.password is not None:
        raise SubscriptionError(
            "INVALID_SUBSCRIPTION",
            "endpoint must not carry credentials; use auth (stored, never shown)",
            pointer="/endpoint",
        )
    if not url.isascii() or any(c in url for c in " \t\r\n"):
        raise SubscriptionError(
            "INVALID_SUBSCRIPTION", "endpoint must be ASCII without spaces", pointer="/endpoint"
        )
    if host in allowed_hosts:
        return host
    if host == "localhost" or host.endswith(".localhost") or blocked_address(host):
        raise _not_allowed(
            f"endpoint host {host!r} is loopback or link-local; allow it with "
            "--subscription-allowed-hosts"
        )
    return host
