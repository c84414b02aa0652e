"""Bounds on a schema's size and shape, so that a schema bomb is refused with INVALID_SCHEMA
instead of costing a node its memory, its stack or its time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from schemas.errors import INVALID_SCHEMA, SchemaError

MAX_SCHEMA_CHARS = 1 << 20
"""A schema's text, in characters (Confluent's largest real-world schemas are tens of KiB)."""
MAX_DEPTH = 64
"""Nesting of a schema's JSON (or of a .proto's messages), far deeper than any data model."""
MAX_ENUM_SYMBOLS = 10_000
"""Symbols of one Avro enum, values of one JSON Schema `enum`, or values of one Protobuf enum."""
MAX_REFERENCE_DEPTH = 32
"""Chain of references (a schema referencing a schema referencing ...)."""


def check_text(text: str) -> None:
    """Refuse a schema text too long to parse safely."""
    if len(text) > MAX_SCHEMA_CHARS:
        raise SchemaError(
            INVALID_SCHEMA,
            f"schema text is {len(text)} characters, more than the limit of {MAX_SCHEMA_CHARS}",
        )


def check_depth(document: Any) -> None:
    """Refuse a JSON document nested deeper than MAX_DEPTH (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise SchemaError(INVALID_SCHEMA, f"schema is nested more than {MAX_DEPTH} levels deep")
        if isinstance(node, dict):
            stack.extend((child, depth + 1) for child in node.values())
        elif isinstance(node, list):
            stack.extend((child, depth + 1) for child in node)


def objects(document: Any) -> Iterator[dict[str, Any]]:
    """Every JSON object in a document, nested ones too (walked without recursion)."""
    stack = [document]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            yield node
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def check_enum(count: int, where: str) -> None:
    """Refuse an enumeration with more than MAX_ENUM_SYMBOLS members."""
    if count > MAX_ENUM_SYMBOLS:
        raise SchemaError(
            INVALID_SCHEMA,
            f"{where} has {count} symbols, more than the limit of {MAX_ENUM_SYMBOLS}",
        )


def check_reference_depth(depth: int) -> None:
    """Refuse a schema whose references nest deeper than MAX_REFERENCE_DEPTH."""
    if depth > MAX_REFERENCE_DEPTH:
        raise SchemaError(
            INVALID_SCHEMA,
            f"references nest more than {MAX_REFERENCE_DEPTH} deep (a reference cycle?)",
        )


def load_json(text: str) -> Any:
    """Parse a schema's JSON text within the limits; INVALID_SCHEMA says why not."""
    import json

    check_text(text)
    try:
        document = json.loads(text)
    except RecursionError:
        raise SchemaError(
            INVALID_SCHEMA, f"schema is nested more than {MAX_DEPTH} levels deep"
        ) from None
    except ValueError as e:
        raise SchemaError(INVALID_SCHEMA, f"schema is not valid JSON: {e}") from None
    check_depth(document)
    return document
