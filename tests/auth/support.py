"""Helpers for the auth tests: credentials on disk, bearer headers, ACL bindings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gateway.auth.credentials import KeyFile, new_api_key, new_basic_secret
from tests.api.support import Client


def make_key(data_dir: Path, principal: str) -> str:
    """A new API key for `principal`, written as `sluice auth create-key --data-dir` does."""
    key, record = new_api_key(principal)
    KeyFile(data_dir / "auth" / "keys.json").update(lambda held: held.with_added(record))
    return key


def make_basic(data_dir: Path, principal: str) -> str:
    secret, record = new_basic_secret(principal)
    KeyFile(data_dir / "auth" / "keys.json").update(lambda held: held.with_added(record))
    return secret


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def binding(
    principal: str,
    resource_type: str,
    name: str,
    operation: str,
    *,
    pattern: str = "literal",
    permission: str = "allow",
) -> dict[str, Any]:
    return {
        "principal": principal,
        "resource_type": resource_type,
        "resource_name": name,
        "pattern_type": pattern,
        "operation": operation,
        "permission": permission,
    }


async def grant(client: Client, admin: str, *bindings: dict[str, Any]) -> None:
    """Add bindings through POST /v1/acls as the super user `admin` (its key)."""
    for doc in bindings:
        answer = await client.post("/v1/acls", json=doc, headers=bearer(admin))
        assert answer.status in (200, 201), await answer.text()
