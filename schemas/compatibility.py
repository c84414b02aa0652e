"""Compatibility levels: which of a subject's versions a new schema is checked against, and in
which direction (reader new / writer old, or the reverse), as Confluent Schema Registry does."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, get_args

from schemas.types import ParsedSchema

Level = Literal[
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
    "NONE",
]
LEVELS: tuple[Level, ...] = get_args(Level)
DEFAULT_LEVEL: Level = "BACKWARD"


def incompatibilities(
    level: Level, new: ParsedSchema, existing: Sequence[ParsedSchema]
) -> list[str]:
    """Why `new` may not follow the subject's live versions `existing` (oldest first) under
    `level`; empty if it may. A non-transitive level checks only the latest version."""
    if level == "NONE" or not existing:
        return []
    olds = existing if level.endswith("_TRANSITIVE") else existing[-1:]
    backward = level.startswith(("BACKWARD", "FULL"))
    forward = level.startswith(("FORWARD", "FULL"))
    messages: list[str] = []
    for old in reversed(olds):
        found: list[str] = []
        if backward:
            found += new.incompatibilities(old)
        if forward:
            found += old.incompatibilities(new)
        if found:
            messages += found
            messages.append(f"{{compatibility: '{level}'}}")
            break
    return messages
