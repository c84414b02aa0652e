"""The produce front's part of idempotency: what makes two requests the same, a valid key, and
the claim that makes a second copy of a request in flight on this node wait its turn. Which
records a key already wrote is each partition's to say (replication.idempotency)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager

from gateway.produce.errors import ProduceError

MAX_KEY_LENGTH = 255


def body_hash(body: bytes, content_type: str, target: str) -> str:
    """What makes two requests 'the same': path with query (partition, key, acks), type, body."""
    digest = hashlib.sha256(content_type.encode() + b"\0" + target.encode() + b"\0")
    digest.update(body)
    return digest.hexdigest()


def validate_key(key: str) -> str:
    if not key or len(key) > MAX_KEY_LENGTH or not key.isprintable() or "\n" in key:
        raise ProduceError(
            "INVALID_IDEMPOTENCY_KEY",
            f"Idempotency-Key must be 1 to {MAX_KEY_LENGTH} printable characters",
        )
    return key


class InFlight:
    """The (topic, key) pairs whose request is being processed on this node."""

    def __init__(self) -> None:
        self._claimed: set[tuple[str, str]] = set()

    @contextmanager
    def claim(self, topic: str, key: str) -> Iterator[None]:
        """Hold the key for one request; a concurrent copy is refused (and may retry soon)."""
        slot = (topic, key)
        if slot in self._claimed:
            raise ProduceError(
                "IDEMPOTENCY_KEY_IN_FLIGHT",
                "a request with this Idempotency-Key is still being processed; retry later",
            )
        self._claimed.add(slot)
        try:
            yield
        finally:
            self._claimed.discard(slot)

    def __len__(self) -> int:
        return len(self._claimed)
