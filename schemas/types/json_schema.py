"""JSON Schema schemas (being built: every JSON Schema schema is refused until then)."""

from __future__ import annotations

from collections.abc import Mapping

from schemas.errors import INVALID_SCHEMA, SchemaError
from schemas.types import ParsedSchema


def parse(text: str, references: Mapping[str, ParsedSchema]) -> ParsedSchema:
    """Refuse: JSON Schema schemas are not supported yet."""
    raise SchemaError(INVALID_SCHEMA, "JSON Schema schemas are not supported yet")
