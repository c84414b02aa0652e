"""The produce front's domain errors: a stable code, a detail and extra members (which record
of the request, say); the API maps each code to its HTTP status."""

from __future__ import annotations

from typing import Any

from engine.errors import EngineError


class ProduceError(EngineError):
    """A refused produce: the request's records, partition or idempotency key."""

    def __init__(self, code: str, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.code = code
        self.extra = extra


class SchemaViewBehind(ProduceError):
    """A record refused for a schema id or subject version this node's registry view does not
    know: a view that has not caught up yet says the same, so the produce waits for it once
    and is built again."""
