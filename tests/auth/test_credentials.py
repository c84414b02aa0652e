"""Credentials: API keys kept as SHA-256 only, Basic secrets as scrypt, and keys.json shared
safely by `sluice auth create-key` and a running node."""

from __future__ import annotations

import stat
import threading
from pathlib import Path

import pytest

from gateway.auth.credentials import (
    KEY_PREFIX,
    CredentialError,
    Credentials,
    KeyFile,
    check_principal,
    key_digest,
    new_api_key,
    new_basic_secret,
    verify_basic,
)
from gateway.auth.store import FileAuthStore


def test_an_api_key_is_stored_as_its_hash_only(tmp_path: Path) -> None:
    key, record = new_api_key("alice")
    public = KEY_PREFIX + record.key_id + "_"
    assert key.startswith(public)
    assert record.digest == key_digest(key) and record.principal == "alice"
    keys = KeyFile(tmp_path / "auth" / "keys.json")
    keys.update(lambda held: held.with_added(record))
    text = keys.path.read_text()
    # The whole secret after the id (itself URL-safe base64: it may hold "_" too).
    secret = key.removeprefix(public)
    assert len(secret) == 43 and key not in text and secret not in text
    assert record.digest in text
    assert stat.S_IMODE(keys.path.stat().st_mode) == 0o600
    assert keys.load().by_digest[key_digest(key)] == record


def test_public_view_has_no_hash() -> None:
    _, record = new_basic_secret("bob")
    assert set(record.public()) == {"key_id", "principal", "type", "created_ms"}


def test_basic_secrets_verify_with_scrypt_and_replace_the_previous_one() -> None:
    secret, record = new_basic_secret("bob")
    assert verify_basic(record, secret)
    assert not verify_basic(record, secret + "x")
    newer_secret, newer = new_basic_secret("bob")
    held = Credentials([record]).with_added(newer)
    assert held.basic["bob"] == newer and record.key_id not in held.by_id
    assert not verify_basic(newer, secret) and verify_basic(newer, newer_secret)


@pytest.mark.parametrize("name", ["", "a:b", " padded", "tab\there", "x" * 256, None])
def test_principals_must_be_usable_names(name: object) -> None:
    with pytest.raises(CredentialError):
        check_principal(name)


def test_concurrent_writers_keep_each_others_keys(tmp_path: Path) -> None:
    """Writers in threads (as the CLI and a node are separate processes, both under flock)."""
    keys = KeyFile(tmp_path / "auth" / "keys.json")
    records = [new_api_key(f"p{i}")[1] for i in range(16)]
    threads = [
        threading.Thread(target=keys.update, args=(lambda held, r=r: held.with_added(r),))
        for r in records
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert set(keys.load().by_id) == {r.key_id for r in records}


async def test_the_file_store_picks_up_keys_written_behind_its_back(tmp_path: Path) -> None:
    store = FileAuthStore(tmp_path)
    await store.start()
    key, record = new_api_key("carol")
    KeyFile(tmp_path / "auth" / "keys.json").update(lambda held: held.with_added(record))
    assert key_digest(key) not in store.state.credentials.by_digest
    await store.refresh()
    assert store.state.credentials.by_digest[key_digest(key)].principal == "carol"
    assert await store.remove_credential(record.key_id)
    assert not await store.remove_credential(record.key_id)
    assert key_digest(key) not in store.state.credentials.by_digest


def test_a_damaged_key_file_is_an_error_naming_it(tmp_path: Path) -> None:
    keys = KeyFile(tmp_path / "keys.json")
    keys.path.write_text("{not json")
    with pytest.raises(CredentialError, match=r"keys\.json"):
        keys.load()
