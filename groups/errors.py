"""The group coordinator's domain errors: a stable code, a detail, and extra members."""

from __future__ import annotations

from typing import Any

from engine.errors import EngineError


class GroupError(EngineError):
    """A refused group operation; the gateway maps `code` to its HTTP status."""

    def __init__(self, code: str, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.code = code
        self.extra = extra
